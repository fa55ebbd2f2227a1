"""The eval check: GSM8K-format problems, accuracy against the golden's.

Prompt formats and answer extraction are in gsm8k.py (`instruct`, or vLLM's own
few-shot `vllm`); where the problems come from is in dataset.py. The candidate's
answers are compared with the golden's problem by problem, and one paired test
(stats.py) makes both the decision and the power the report states.

An answer the budget cut is left out (neither right nor wrong), unless the good
build finished that problem in N tokens and this answer had 2N: then it counts
as wrong. With no answer left to compare, where the good build finished some,
or with a cut share far above the golden's, the eval never passes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..config import Asks
from ..errors import ConfigError, HarnessError
from ..kinds import CHECKS, CheckContext, CheckKind
from ..model import CheckDetails, CheckResult, Threshold
from ..sparse import AddedLater
from . import ChatEndpoint, CompletionEndpoint, map_concurrent
from .budget import Asked, Budget, ask, budget_of, unfinished
from .dataset import Problems, load as load_problems
from .golden import EvalNoise, EvalSection
from .gsm8k import Problem, extract, instruct_prompt, last_integer, vllm_prompt, wilson
from .metrics import degeneration, excerpt
from .stats import (
    ALPHA,
    POWER,
    SEQUENTIAL,
    TEST,
    PairedTest,
    Pairs,
    SequentialTest,
    p_value,
    pairs,
)

if TYPE_CHECKING:
    from ..client import ChatReply
    from .golden import Golden

NULL_SHARE_JUMP = 0.1
"""Bad when the share of null/empty content rises by more than this over the golden's."""
CUT_SHARE_JUMP = 0.1
"""Bad when the share of answers cut by their budget rises by more than this over the golden's."""


class _Part(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class EvalMetrics(_Part, AddedLater):
    """The candidate's own figures over every problem."""

    added_later: ClassVar[tuple[str, ...]] = ("n", "null_content")

    accuracy: float
    null_share: float = 0.0
    """Answers with null or empty content whose answer is in the reasoning channel."""
    invalid_share: float = 0.0
    """Answers with no number to read."""
    cut_share: float = 0.0
    """Answers the budget cut (and not degenerate): neither right nor wrong."""
    wilson95: tuple[float, float] = (0.0, 1.0)
    """The 95% Wilson interval of the accuracy."""
    n: int | None = None
    """The problems asked (None in results written before it was kept)."""
    null_content: int | None = None
    """Answers whose content is null or empty, wherever the answer went (as maintainers
    count them: "1,178 / 1,319 answers with content null")."""


class Scored(EvalMetrics):
    """Every answer scored: the figures, and the number read from each answer."""

    n: int
    null_content: int = 0
    correct: int
    answers: list[str | None]


class Paired(_Part):
    """The candidate's answers against the golden's, problem by problem."""

    n: int
    """The problems compared (an answer the budget cut is left out)."""
    right: int = 0
    lost: int = 0
    """Right in the golden, wrong now."""
    gained: int = 0
    p_value: float = 1.0
    unfinished: int = 0
    """Answers that did not finish where the good build did (counted wrong)."""


FlipsFrom = Literal["calibration", "gains", "assumed"]
"""Where the share of answers changing by chance came from: calibration measured it, the
candidate's gained answers show it, or nothing measured it and 0 is assumed."""


class Power(_Part, AddedLater):
    """How small an accuracy drop the eval could detect, by the test it decides with."""

    added_later: ClassVar[tuple[str, ...]] = ("data", "flips_from")

    model_config = ConfigDict(extra="forbid")
    n: int
    """The problems compared with the golden's answers."""
    golden_accuracy: float
    detectable_drop: float
    alpha: float
    power: float
    test: str = ""
    """The test the eval decides with (empty in results written before it was named)."""
    flips: float = 0.0
    """The share of answers assumed to change by chance, each way alike."""
    tolerance: float = 0.0
    """The drop the eval allows beyond chance (`tolerance`, 0 unless configured)."""
    data: str = ""
    """The problems the eval asked ("bundled arithmetic, 64 problems, not GSM8K"; '' in
    results written before it was said)."""
    flips_from: FlipsFrom | None = None
    """Where `flips` came from (None in results written before it was said)."""

    def assumption(self) -> str:
        """The chance flips the power is computed with, and what that figure rests on."""
        if self.flips_from == "assumed":
            return (
                "flips: 0 assumed: nothing measured how many answers change by chance, no "
                "calibration and no answer gained; `llm-bisect calibrate` measures it"
            )
        if not self.flips:
            said = {"calibration": ": calibration saw none change by chance"}
            return "flips: 0" + said.get(self.flips_from or "", " assumed")
        said = {"calibration": ", as calibration measured",
                "gains": ", as the candidate's gained answers show"}  # fmt: skip
        how = said.get(self.flips_from or "", "")
        return f"flips: {self.flips:.1%} of answers change by chance{how}"

    def said(self) -> str:
        """One line: on what, the smallest drop caught and how often, by which test, on what
        assumption (the terminal's, JUnit's)."""
        what = f" ({self.data})" if self.data else ""
        line = (
            f"the eval{what} catches an accuracy drop of {self.detectable_drop:.1%} or more "
            f"from the golden's {self.golden_accuracy:.0%} with power {self.power:g} on "
            f"{self.n:,} answers compared ({self.test or 'one-sided'}, alpha {self.alpha:g}"
        )
        if self.tolerance:
            line += f", drops up to {self.tolerance:.1%} allowed"
        return f"{line}; {self.assumption()})"


class Sequential(BaseModel):
    """How an eval asked in groups went: its test, the problems asked, whether it stopped."""

    model_config = ConfigDict(frozen=True)
    test: str
    asked: int
    stopped: bool


class EvalDetails(CheckDetails, AddedLater):
    """The eval's details: figures, thresholds, every answer and the paired comparison."""

    added_later: ClassVar[tuple[str, ...]] = (
        "sequential", "golden_null_content", "golden_n", "data",
    )  # fmt: skip

    model_config = ConfigDict(extra="ignore")
    check: ClassVar[str] = "eval"
    data: str = ""
    """The problems asked ("bundled arithmetic, 64 problems, not GSM8K", "gsm8k.jsonl, 1,319
    problems"; '' in results written before it was said)."""
    metrics: EvalMetrics | None = None
    golden_null_content: int | None = None
    """The golden's answers with content null or empty (None: a golden recorded before it was
    counted, or none)."""
    golden_n: int | None = None
    """The golden's problems."""
    thresholds: dict[str, Threshold] = Field(default_factory=dict)
    answers: list[str | None] = Field(default_factory=list)
    """Per problem, the number read from the answer (None: none, or cut)."""
    budgets: list[int] = Field(default_factory=list)
    finish_reasons: list[str | None] = Field(default_factory=list)
    paired: Paired | None = None
    power: Power | None = None
    sequential: Sequential | None = None
    """Where the suite could stop early: the problems asked in groups (`probe.early_stop`)."""


def score_answers(
    problems: Sequence[Problem],
    replies: Sequence[tuple[str | None, str | None]],
    cut: Sequence[bool] | None = None,
    extract: Callable[[str | None], str | None] = extract,
) -> Scored:
    """Accuracy, Wilson interval, invalid, null-content and cut shares of (content, reasoning)."""
    n = len(problems)
    correct = invalid = null = empty = 0
    answers = []
    for problem, (content, reasoning) in zip(problems, replies, strict=True):
        got = extract(content)
        if content is None or not content.strip():
            empty += 1
            null += bool(extract(reasoning))  # the answer is there, in the wrong channel
        invalid += got is None
        correct += got == problem.answer
        answers.append(got)
    low, high = wilson(correct, n)
    return Scored(
        n=n,
        correct=correct,
        accuracy=correct / n if n else 0.0,
        wilson95=(low, high),
        invalid_share=invalid / n if n else 0.0,
        null_share=null / n if n else 0.0,
        null_content=empty,
        cut_share=sum(cut or ()) / n if n else 0.0,
        answers=answers,
    )


def replies_of(k: int, n: int) -> str:
    """A count of replies as maintainers read it: "1,178 of 1,319 replies"."""
    return f"{k:,} of {n:,} replies"


def _unjudged(asked: Asked) -> bool:
    """Cut by the budget, and not degenerate: such an answer is neither right nor wrong."""
    reply = asked.reply
    return reply.cut and not (degeneration(reply.content) or degeneration(reply.reasoning))


def paired(
    problems: Sequence[Problem],
    golden: Sequence[str | None],
    got: Sequence[str | None],
    left_out: Sequence[bool],
) -> Pairs:
    """The golden's and the candidate's answers compared, over the problems not `left_out`
    (an answer the budget cut is not a wrong answer, unless it had twice the room the good
    build finished in). Pure."""
    kept = [i for i, out in enumerate(left_out) if not out]
    return pairs(
        [golden[i] == problems[i].answer for i in kept],
        [got[i] == problems[i].answer for i in kept],
    )


def _ran_on(late: Sequence[str | None], gold: EvalSection, head: str) -> str:
    """How many answers did not finish where the good build did, and within how many tokens
    the good build finished them; '' when none."""
    ran_on = [i for i, w in enumerate(late) if w is not None]
    if not ran_on:
        return ""
    most = max(gold.finished_in(i) or 0 for i in ran_on)
    count = head.format(len(ran_on))
    return f"{count} did not finish where the good build did in {most} tokens or fewer"


class _Completions:
    """An endpoint whose every prompt is completed as raw text (`/v1/completions`)."""

    def __init__(self, endpoint: CompletionEndpoint) -> None:
        self.endpoint = endpoint

    def chat(self, prompt: str, *, max_tokens: int, **extra: Any) -> ChatReply:
        return self.endpoint.complete(prompt, max_tokens=max_tokens, **extra)


@dataclass(frozen=True)
class Bars:
    """When an eval's answers are bad: accuracy below the golden's beyond chance (or by more
    than a fixed `tolerance`), the share of null content up by `null_share_jump`, accuracy
    under an absolute `min_accuracy` (a vLLM eval config's floor)."""

    tolerance: float | None = None
    null_share_jump: float = NULL_SHARE_JUMP
    min_accuracy: float | None = None


class EvalCheck:
    """Bad when accuracy falls below the golden's beyond chance, or null content jumps."""

    name = "eval"
    needs_golden = True

    def __init__(
        self,
        problems: Problems,
        *,
        prompt_format: Literal["instruct", "vllm"] = "instruct",
        concurrency: int = 8,
        budget: Budget | None = None,
        bars: Bars = Bars(),
        api: Literal["chat-completions", "completions"] = "chat-completions",
        gen_prefix: str = "",
    ) -> None:
        self.problems = problems.asked
        self.data = problems.described()
        """What the problems are, as each figure of theirs says ("bundled arithmetic, 64
        problems, not GSM8K")."""
        self.api = api
        """How each prompt is asked: a chat message, or raw text (vLLM's GSM8K runner's)."""
        self.gen_prefix = gen_prefix
        self.shots = problems.shots
        self.prompt_format = prompt_format
        self.extract = last_integer if prompt_format == "vllm" else extract
        self.concurrency = concurrency
        self.budget = budget or Budget(256)
        self._configured_tolerance = bars.tolerance
        self.null_share_jump = bars.null_share_jump
        self.min_accuracy = bars.min_accuracy
        """An absolute floor beside the golden-relative judgement (a vLLM eval config's)."""

    def _via(self, endpoint: ChatEndpoint) -> ChatEndpoint:
        """The endpoint as this eval asks it: chat, or text completions."""
        if self.api == "chat-completions":
            return endpoint
        if not isinstance(endpoint, CompletionEndpoint):
            raise HarnessError("eval: api 'completions' needs an endpoint with /v1/completions")
        return _Completions(endpoint)

    def _answers(self, endpoint: ChatEndpoint, budgets: Sequence[Budget]) -> list[Asked]:
        endpoint = self._via(endpoint)
        return map_concurrent(
            lambda pb: ask(endpoint, self.prompt(pb[0]), pb[1]),
            list(zip(self.problems, budgets, strict=True)),
            self.concurrency,
        )

    def prompt(self, problem: Problem) -> str:
        if self.prompt_format == "vllm":
            return vllm_prompt(problem.question, self.shots, self.gen_prefix)
        return instruct_prompt(problem.question)

    def record(self, endpoint: ChatEndpoint) -> EvalSection:
        asked = self._answers(endpoint, [self.budget] * len(self.problems))
        scored = score_answers(
            self.problems,
            [(a.reply.content, a.reply.reasoning) for a in asked],
            [_unjudged(a) for a in asked],
            self.extract,
        )
        return EvalSection(
            n=scored.n,
            correct=scored.correct,
            accuracy=scored.accuracy,
            wilson95=scored.wilson95,
            invalid_share=scored.invalid_share,
            null_share=scored.null_share,
            null_content=scored.null_content,
            cut_share=scored.cut_share,
            answers=scored.answers,
            budgets=[a.max_tokens for a in asked],
            finish_reasons=[a.reply.finish_reason for a in asked],
            completion_tokens=[a.reply.completion_tokens for a in asked],
        )

    def _tolerance(self) -> Threshold:
        if self._configured_tolerance is not None:
            return Threshold(value=self._configured_tolerance, source="config")
        return Threshold(value=0.0, source="none: the paired test decides")

    def _test(self) -> PairedTest:
        return PairedTest(ALPHA, float(self._tolerance().value))

    def thresholds(self, golden: Golden | None) -> dict[str, Threshold]:
        floor = (
            {"min_accuracy": Threshold(value=self.min_accuracy, source="config")}
            if self.min_accuracy is not None
            else {}
        )
        if golden is None or golden.checks.eval is None:
            return floor
        return {
            **floor,
            "accuracy_drop": self._tolerance(),
            "alpha": Threshold(value=ALPHA, source=TEST),
            "null_share_jump": Threshold(value=self.null_share_jump, source="config/default"),
            "cut_share_jump": Threshold(value=CUT_SHARE_JUMP, source="default"),
        }

    def noise(self, results: Sequence[CheckResult]) -> EvalNoise:
        found = [r.details for r in results if isinstance(r.details, EvalDetails)]
        accs = [d.metrics.accuracy for d in found if d.metrics is not None]
        compared = [d.paired for d in found if d.paired is not None]
        flips = [(c.lost + c.gained) / c.n for c in compared if c.n]
        return EvalNoise(
            accuracy_spread=(max(accs) - min(accs)) if accs else 0.0,
            accuracies=accs,
            flips=max(flips, default=0.0),
        )

    def _power(self, golden: Golden, compared: Pairs, test: PairedTest) -> Power:
        """What this comparison could detect, by the test it used: the chance flips are the
        larger of what its gains show and what calibration saw."""
        noise = golden.calibration.eval if golden.calibration else None
        flips = max(compared.flips, noise.flips if noise else 0.0)
        source: FlipsFrom = (
            "gains" if compared.flips > (noise.flips if noise else 0.0)
            else "calibration" if noise is not None
            else "assumed"
        )  # fmt: skip
        section = golden.checks.eval
        assert section is not None
        return Power(
            data=self.data,
            flips_from=source,
            n=compared.n,
            golden_accuracy=compared.golden_accuracy if compared.n else section.accuracy,
            detectable_drop=test.detectable_drop(compared.n, compared.right, flips, POWER),
            alpha=test.alpha,
            power=POWER,
            test=TEST,
            flips=flips,
            tolerance=test.tolerance,
        )

    def run(self, endpoint: ChatEndpoint, golden: Golden | None) -> CheckResult:
        return self._run(endpoint, golden, None)

    def run_early(self, endpoint: ChatEndpoint, golden: Golden | None) -> CheckResult:
        """As `run`, asking the problems in groups and stopping after one where the drop is
        settled (SequentialTest: the verdict is the whole set's, only cheaper)."""
        return self._run(endpoint, golden, SequentialTest(ALPHA, self._test().tolerance))

    def _run(
        self, endpoint: ChatEndpoint, golden: Golden | None, sequential: SequentialTest | None
    ) -> CheckResult:
        gold = golden.checks.eval if golden else None
        if golden is None or gold is None:
            raise ValueError("the eval check needs a golden")
        if len(gold.answers) != len(self.problems):
            raise ConfigError(
                f"golden: its eval has {len(gold.answers)} problems, the config's "
                f"{len(self.problems)}; record it anew"
            )
        endpoint = self._via(endpoint)
        recorded = gold.budgets or [self.budget.start] * len(self.problems)
        budgets = [self.budget.from_golden(b) for b in recorded]
        sizes = sequential.sizes(len(self.problems)) if sequential else [len(self.problems)]
        asked: list[Asked] = []
        stopped = False
        for look, size in enumerate(sizes, 1):
            start = len(asked)
            chunk = list(zip(self.problems[start:size], budgets[start:size], strict=True))
            asked += map_concurrent(
                lambda pb: ask(endpoint, self.prompt(pb[0]), pb[1]), chunk, self.concurrency
            )
            problems = self.problems[: len(asked)]
            replies = [(a.reply.content, a.reply.reasoning) for a in asked]
            cut = [_unjudged(a) for a in asked]
            got = score_answers(problems, replies, cut, self.extract)
            # a cut answer where the good build finished in N tokens, with 2N: wrong
            late = [
                unfinished(gold.finished_in(i), a.reply.cut, a.used) for i, a in enumerate(asked)
            ]
            answers = [None if w else a for a, w in zip(got.answers, late, strict=True)]
            left_out = [k and w is None for k, w in zip(cut, late, strict=True)]
            compared = paired(problems, gold.answers[: len(asked)], answers, left_out)
            left = len(self.problems) - len(asked)
            if sequential is not None and look < len(sizes) and sequential.stops(compared, left):
                stopped = True
                break
        test = self._test() if sequential is None else sequential.final
        jump = got.null_share - gold.null_share
        failed = []
        golden_finished = (
            any(r != "length" for r in gold.finish_reasons)
            if gold.finish_reasons
            else gold.cut_share < 1
        )
        if not compared.n and golden_finished:
            failed.append(
                f"no answer could be compared with the golden's: {sum(left_out)} of "
                f"{len(asked)} were cut by their budget where the good build finished"
            )
        if stopped or test.fails(compared):
            named = SEQUENTIAL if stopped else TEST
            line = (
                f"accuracy {compared.accuracy:.0%} vs golden {compared.golden_accuracy:.0%} on "
                f"the {compared.n} answers compared ({compared.lost} lost, {compared.gained} "
                f"gained: p = {p_value(compared.lost, compared.gained):.2g} "
                f"< {test.alpha:g}, {named}"
            )
            if stopped:
                line += (
                    f"; stopped after {len(asked)} of {len(self.problems)} problems: it fails "
                    "even if every one left were gained"
                )
            if test.tolerance:
                line += f"; drop {compared.drop:.0%} > {test.tolerance:.0%}"
            failed.append(line + _ran_on(late, gold, "; {} of them") + ")")
        # every answer the budget cut, degenerate or not, against the golden's share
        cut_share = sum(a.reply.cut for a in asked) / len(asked)
        golden_cut_share = (
            sum(r == "length" for r in gold.finish_reasons) / len(gold.finish_reasons)
            if gold.finish_reasons
            else gold.cut_share
        )
        if cut_share - golden_cut_share > CUT_SHARE_JUMP:
            failed.append(
                f"{cut_share:.0%} of answers were cut by their budget (golden "
                f"{golden_cut_share:.0%}){_ran_on(late, gold, ': {}')}"
            )
        if jump > self.null_share_jump:
            nulls = replies_of(round(got.null_share * got.n), got.n)
            golden_nulls = replies_of(round(gold.null_share * gold.n), gold.n)
            failed.append(
                f"{nulls} have null content with the answer in reasoning (golden {golden_nulls})"
            )
        if self.min_accuracy is not None and got.accuracy < self.min_accuracy:
            failed.append(
                f"accuracy {got.accuracy:.3f} below the threshold {self.min_accuracy:.3f}"
            )
        low, high = got.wilson95
        head = f"accuracy {got.accuracy:.0%} [{low:.0%}, {high:.0%}]"
        if any(left_out):
            head += f" ({sum(left_out) / len(asked):.0%} cut by the budget, not counted)"
        example = next(
            (
                f"{p.question[:50]!r} → {excerpt(c, 60)}"
                for p, (c, _), a, out in zip(problems, replies, answers, left_out, strict=True)
                if a != p.answer and not out
            ),
            "",
        )
        said = (
            f"{'; '.join(failed)} — {example}" if failed else f"{head}, golden {gold.accuracy:.0%}"
        )
        evidence = f"{self.data}: {said}"  # what the figures are of, before them
        return CheckResult(
            name=self.name,
            passed=not failed,
            score=got.accuracy,
            evidence=evidence,
            details=EvalDetails(
                data=self.data,
                metrics=EvalMetrics(
                    accuracy=got.accuracy,
                    null_share=got.null_share,
                    invalid_share=got.invalid_share,
                    cut_share=got.cut_share,
                    wilson95=got.wilson95,
                    n=got.n,
                    null_content=got.null_content,
                ),
                golden_null_content=gold.null_content,
                golden_n=gold.n,
                thresholds=self.thresholds(golden),
                answers=got.answers,
                budgets=[a.max_tokens for a in asked],
                finish_reasons=[a.reply.finish_reason for a in asked],
                paired=Paired(
                    n=compared.n,
                    right=compared.right,
                    lost=compared.lost,
                    gained=compared.gained,
                    p_value=p_value(compared.lost, compared.gained),
                    unfinished=sum(w is not None for w in late),
                ),
                power=self._power(golden, compared, test),
                sequential=(
                    Sequential(test=SEQUENTIAL, asked=len(asked), stopped=stopped)
                    if sequential is not None
                    else None
                ),
            ),
        )


# ---- the `type: eval` check kind -------------------------------------------------------------


class EvalConfig(Asks):
    """A small GSM8K-format accuracy eval against the golden's accuracy."""

    type: Literal["eval"]
    """`eval`: GSM8K-format accuracy against the golden's."""
    path: str | None = None
    """GSM8K-format JSONL or parquet (`question`, `answer` ending in `#### N`), relative to the
    config; default: the bundled set."""
    dataset: str | None = None
    """A Hugging Face dataset, e.g. `openai/gsm8k` (read through `datasets` and its cache)."""
    dataset_config: str | None = None
    """Its config name (`main` for openai/gsm8k, the default there)."""
    split: str = "test"
    """The dataset split to read (with `dataset`)."""
    format: Literal["instruct", "vllm"] = "instruct"
    """Prompt and extraction: `instruct` ("... end with 'The answer is N.'") or `vllm`
    (vLLM's own few-shot "Question: ...\nAnswer:" prompts, the last integer)."""
    shots: int = Field(default=5, ge=0, le=32)
    """Worked examples before each question in the `vllm` format."""
    api: Literal["chat-completions", "completions"] = "chat-completions"
    """How each problem is asked: as a chat message, or as raw text completed by
    `/v1/completions` (no chat template: vLLM's own GSM8K runner's way)."""
    gen_prefix: str = ""
    """In the `vllm` format, text after each "Answer:" (vLLM's `gen_prefix`, e.g. an empty
    think block)."""
    limit: int | None = Field(default=None, gt=0)
    """The first this-many problems only; default: all."""
    concurrency: int = Field(default=8, ge=1, le=256)
    """Requests in flight at once."""
    tolerance: float | None = Field(default=None, ge=0, le=1)
    """Accuracy drop allowed beyond chance (which the paired test judges); default 0."""
    null_share_jump: float = Field(default=0.1, ge=0, le=1)
    """Rise allowed in the share of answers with null content."""
    min_accuracy: float | None = Field(default=None, ge=0, le=1)
    """An absolute floor beside the golden (a vLLM gsm8k config's threshold - tolerance)."""

    download: bool = False
    """Fetch `dataset` from the Hugging Face Hub when the node's cache lacks it; default: the
    cache or a local folder only, so a misspelt name is one line, not a minute of retries."""

    @model_validator(mode="after")
    def _one_source(self) -> EvalConfig:
        if self.path is not None and self.dataset is not None:
            raise ValueError("give path or dataset, not both")
        return self

    @field_validator("dataset_config", "split", "download")
    @classmethod
    def _with_dataset(cls, value: Any, info: ValidationInfo) -> Any:
        if info.data.get("dataset") is None:  # fields are checked in order: dataset is known
            raise ValueError("goes with `dataset`, and no dataset is given")
        return value


def from_config(cfg: EvalConfig, ctx: CheckContext) -> EvalCheck:
    """The eval over its problems, read now (a missing file is a ConfigError naming the key)."""
    path = ctx.base_dir / cfg.path if cfg.path else None
    try:
        problems = load_problems(
            path=path,
            dataset=cfg.dataset,
            dataset_config=cfg.dataset_config,
            split=cfg.split,
            shots=cfg.shots if cfg.format == "vllm" else 0,
            limit=cfg.limit,
            key=ctx.key,
            download=cfg.download,
        )
    except OSError as exc:
        raise ConfigError(f"{ctx.key}.path: cannot read '{cfg.path}' ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{ctx.key}.path: '{cfg.path}' is not UTF-8 text (byte {exc.start})"
        ) from None
    except ValueError as exc:
        raise ConfigError(f"{ctx.key}.path: '{cfg.path}' {exc}") from None
    return EvalCheck(
        problems,
        prompt_format=cfg.format,
        concurrency=cfg.concurrency,
        budget=budget_of(cfg),
        bars=Bars(cfg.tolerance, cfg.null_share_jump, cfg.min_accuracy),
        api=cfg.api,
        gen_prefix=cfg.gen_prefix,
    )


KIND = CHECKS.register(
    CheckKind(
        "eval",
        EvalConfig,
        cost=3,
        make=from_config,
        default=True,
        shows=frozenset({"accuracy"}),
        neutral=frozenset(
            {"concurrency", "download", "min_accuracy", "null_share_jump", "tolerance"}
        ),
    )
)
