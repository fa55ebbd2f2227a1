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
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ConfigError
from ..model import CheckResult
from . import ChatEndpoint, map_concurrent
from .budget import Asked, Budget, ask, unfinished
from .dataset import Problems
from .golden import EvalNoise, EvalSection
from .gsm8k import Problem, extract, instruct_prompt, last_integer, vllm_prompt, wilson
from .metrics import degeneration, excerpt
from .stats import ALPHA, POWER, TEST, PairedTest, Pairs, p_value, pairs

if TYPE_CHECKING:
    from .golden import Golden

NULL_SHARE_JUMP = 0.1
"""Bad when the share of null/empty content rises by more than this over the golden's."""
CUT_SHARE_JUMP = 0.1
"""Bad when the share of answers cut by their budget rises by more than this over the golden's."""


def score_answers(
    problems: Sequence[Problem],
    replies: Sequence[tuple[str | None, str | None]],
    cut: Sequence[bool] | None = None,
    extract: Callable[[str | None], str | None] = extract,
) -> dict[str, Any]:
    """Accuracy, Wilson interval, invalid, null-content and cut shares of (content, reasoning)."""
    n = len(problems)
    correct = invalid = null = 0
    answers = []
    for problem, (content, reasoning) in zip(problems, replies, strict=True):
        got = extract(content)
        if content is None or not content.strip():
            null += bool(extract(reasoning))  # the answer is there, in the wrong channel
        invalid += got is None
        correct += got == problem.answer
        answers.append(got)
    low, high = wilson(correct, n)
    return {
        "n": n,
        "correct": correct,
        "accuracy": correct / n if n else 0.0,
        "wilson95": [low, high],
        "invalid_share": invalid / n if n else 0.0,
        "null_share": null / n if n else 0.0,
        "cut_share": sum(cut or ()) / n if n else 0.0,
        "answers": answers,
    }


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
        tolerance: float | None = None,
        null_share_jump: float = NULL_SHARE_JUMP,
        min_accuracy: float | None = None,
    ) -> None:
        self.problems = problems.asked
        self.shots = problems.shots
        self.prompt_format = prompt_format
        self.extract = last_integer if prompt_format == "vllm" else extract
        self.concurrency = concurrency
        self.budget = budget or Budget(256)
        self._configured_tolerance = tolerance
        self.null_share_jump = null_share_jump
        self.min_accuracy = min_accuracy
        """An absolute floor beside the golden-relative judgement (a vLLM eval config's)."""

    def _answers(self, endpoint: ChatEndpoint, budgets: Sequence[Budget]) -> list[Asked]:
        return map_concurrent(
            lambda pb: ask(endpoint, self.prompt(pb[0]), pb[1]),
            list(zip(self.problems, budgets, strict=True)),
            self.concurrency,
        )

    def prompt(self, problem: Problem) -> str:
        if self.prompt_format == "vllm":
            return vllm_prompt(problem.question, self.shots)
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
            **scored,
            budgets=[a.max_tokens for a in asked],
            finish_reasons=[a.reply.finish_reason for a in asked],
            completion_tokens=[a.reply.completion_tokens for a in asked],
        )

    def _tolerance(self) -> dict[str, Any]:
        if self._configured_tolerance is not None:
            return {"value": self._configured_tolerance, "from": "config"}
        return {"value": 0.0, "from": "none: the paired test decides"}

    def _test(self) -> PairedTest:
        return PairedTest(ALPHA, float(self._tolerance()["value"]))

    def thresholds(self, golden: Golden | None) -> dict[str, Any]:
        floor = (
            {"min_accuracy": {"value": self.min_accuracy, "from": "config"}}
            if self.min_accuracy is not None
            else {}
        )
        if golden is None or golden.checks.eval is None:
            return floor
        return {
            **floor,
            "accuracy_drop": self._tolerance(),
            "alpha": {"value": ALPHA, "from": TEST},
            "null_share_jump": {"value": self.null_share_jump, "from": "config/default"},
            "cut_share_jump": {"value": CUT_SHARE_JUMP, "from": "default"},
        }

    def noise(self, results: Sequence[CheckResult]) -> EvalNoise:
        accs = [float(r.details["metrics"]["accuracy"]) for r in results if "metrics" in r.details]
        compared = [r.details["paired"] for r in results if "paired" in r.details]
        flips = [(c["lost"] + c["gained"]) / c["n"] for c in compared if c["n"]]
        return EvalNoise(
            accuracy_spread=(max(accs) - min(accs)) if accs else 0.0,
            accuracies=accs,
            flips=max(flips, default=0.0),
        )

    def _power(self, golden: Golden, compared: Pairs) -> dict[str, Any]:
        """What this comparison could detect, by the test it used: the chance flips are the
        larger of what its gains show and what calibration saw."""
        noise = golden.calibration.eval if golden.calibration else None
        flips = max(compared.flips, noise.flips if noise else 0.0)
        section = golden.checks.eval
        assert section is not None
        test = self._test()
        return {
            "n": compared.n,
            "golden_accuracy": compared.golden_accuracy if compared.n else section.accuracy,
            "detectable_drop": test.detectable_drop(compared.n, compared.right, flips, POWER),
            "alpha": test.alpha,
            "power": POWER,
            "test": TEST,
            "flips": flips,
            "tolerance": test.tolerance,
        }

    def run(self, endpoint: ChatEndpoint, golden: Golden | None) -> CheckResult:
        gold = golden.checks.eval if golden else None
        if golden is None or gold is None:
            raise ValueError("the eval check needs a golden")
        if len(gold.answers) != len(self.problems):
            raise ConfigError(
                f"golden: its eval has {len(gold.answers)} problems, the config's "
                f"{len(self.problems)}; record it anew"
            )
        recorded = gold.budgets or [self.budget.start] * len(self.problems)
        asked = self._answers(endpoint, [self.budget.from_golden(b) for b in recorded])
        replies = [(a.reply.content, a.reply.reasoning) for a in asked]
        cut = [_unjudged(a) for a in asked]
        got = score_answers(self.problems, replies, cut, self.extract)
        # a cut answer where the good build finished in N tokens, with 2N: wrong, not left out
        late = [unfinished(gold.finished_in(i), a.reply.cut, a.used) for i, a in enumerate(asked)]
        answers = [None if w else a for a, w in zip(got["answers"], late, strict=True)]
        left_out = [k and w is None for k, w in zip(cut, late, strict=True)]
        compared = paired(self.problems, gold.answers, answers, left_out)
        test = self._test()
        jump = got["null_share"] - gold.null_share
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
        if test.fails(compared):
            line = (
                f"accuracy {compared.accuracy:.0%} vs golden {compared.golden_accuracy:.0%} on "
                f"the {compared.n} answers compared ({compared.lost} lost, {compared.gained} "
                f"gained: p = {p_value(compared.lost, compared.gained):.2g} < {test.alpha:g}, "
                f"{TEST}"
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
            failed.append(
                f"{got['null_share']:.0%} of answers have null content with the answer "
                f"in reasoning (golden {gold.null_share:.0%})"
            )
        if self.min_accuracy is not None and got["accuracy"] < self.min_accuracy:
            failed.append(
                f"accuracy {got['accuracy']:.3f} below the threshold {self.min_accuracy:.3f}"
            )
        low, high = got["wilson95"]
        head = f"accuracy {got['accuracy']:.0%} [{low:.0%}, {high:.0%}] on {got['n']}"
        if any(left_out):
            head += f" ({sum(left_out) / len(asked):.0%} cut by the budget, not counted)"
        example = next(
            (
                f"{p.question[:50]!r} → {excerpt(c, 60)}"
                for p, (c, _), a, out in zip(self.problems, replies, answers, left_out, strict=True)
                if a != p.answer and not out
            ),
            "",
        )
        evidence = (
            f"{'; '.join(failed)} — {example}" if failed else f"{head}, golden {gold.accuracy:.0%}"
        )
        metrics = {
            k: got[k] for k in ("accuracy", "null_share", "invalid_share", "cut_share", "wilson95")
        }
        return CheckResult(
            name=self.name,
            passed=not failed,
            score=got["accuracy"],
            evidence=evidence,
            details={
                "metrics": metrics,
                "thresholds": self.thresholds(golden),
                "answers": got["answers"],
                "budgets": [a.max_tokens for a in asked],
                "finish_reasons": [a.reply.finish_reason for a in asked],
                "paired": {
                    "n": compared.n,
                    "right": compared.right,
                    "lost": compared.lost,
                    "gained": compared.gained,
                    "p_value": p_value(compared.lost, compared.gained),
                    "unfinished": sum(w is not None for w in late),
                },
                "power": self._power(golden, compared),
            },
        )
