"""The logprobs check: token ids and top-k logprobs against the golden.

Its requests go one at a time (LOGPROBS_AT_ONCE), each prompt's greedy continuation and then
the teacher-forced score of the golden's, in the golden's order, at temperature 0 with the
client's fixed seed: a server batches each alone, so its logprobs do not move with what else
it was batching (batch composition changes the kernels' reduction order, and so the last
bits of every logprob, on builds that are not batch-invariant), and the golden and every
candidate are measured the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..config import CHAT_PROMPTS, MAX_TOKENS, Asks
from ..errors import EndpointError
from ..kinds import CHECKS, CheckContext, CheckKind
from ..model import CheckDetails, CheckResult, Step, Threshold
from ..sparse import AddedLater
from . import ChatEndpoint, map_concurrent
from .compare import Divergence, diverge, non_finite, teacher_deltas
from .golden import LogprobsCase, LogprobsNoise, LogprobsSection
from .metrics import excerpt

if TYPE_CHECKING:
    from .golden import Golden

FLOOR_MAX_DELTA = 0.1
"""Least |Δlogprob| allowed on agreeing positions, whatever calibration saw (bf16 noise)."""
FLOOR_TEACHER_MEAN = 0.05
"""Least mean |Δlogprob| allowed on the teacher-forced golden continuation."""
FLOOR_TOPK_DELTA = 0.2
"""Least |Δlogprob| allowed on a top-k alternative where the chosen tokens agree."""
LOGPROBS_AT_ONCE = 1
"""Requests the logprobs check keeps in flight: one, so each is a batch of one (see the
module docstring); its few short prompts cost seconds."""
NOISE_FACTOR = 3.0
"""Thresholds are this many times the noise calibration observed, above the floors."""
FLOOR_AGREEMENT = 0.25
"""With calibration: the least share of a golden's tokens matched before the first divergence,
on every prompt, unless calibration saw the good build itself diverge sooner (then a third of
its worst). Without calibration there is no floor: one close swap is kernel noise wherever it
falls (an early stop is not close, and fails as such)."""


class _Part(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Token(_Part):
    """One token at a divergence: its id (or text, where the server gave no ids), its text
    where the server could say, and its logprob."""

    token: str
    text: str | None = None
    logprob: float | None
    """None where the server sent no number (NaN or infinite: the check names those)."""

    @field_validator("logprob", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return value if not isinstance(value, float) or math.isfinite(value) else None


class Chosen(Token):
    """The token one side chose at the divergence, and its top-k alternatives (likeliest
    first)."""

    top: list[Token] = Field(default_factory=list)


class TokensPart(_Part):
    """Both sides at the first position where their greedy tokens differ."""

    position: int
    golden: Chosen
    candidate: Chosen


class LogprobsCaseResult(_Part, AddedLater):
    """One prompt, compared with the golden's greedy tokens and scored teacher-forced."""

    added_later: ClassVar[tuple[str, ...]] = ("non_finite",)

    prompt: str
    first_divergence: int | None = None
    close: bool = True
    agreement: float = 1.0
    max_abs_delta: float = 0.0
    mean_abs_delta: float = 0.0
    topk_max_abs_delta: float = 0.0
    topk_overlap: float = 1.0
    teacher_mean_abs_delta: float = 0.0
    teacher_deltas: list[float] = Field(default_factory=list)
    """|Δlogprob| of the golden's continuation at every position (teacher-forced)."""
    greedy_deltas: list[float] = Field(default_factory=list)
    """|Δlogprob| of the token both chose, up to the first divergence."""
    golden: str | None = None
    """The golden's text (content, else reasoning)."""
    content: str | None = None
    """This build's text (content, else reasoning)."""
    finish_reason: str | None = None
    non_finite: list[int] = Field(default_factory=list)
    """Positions where this build's logprobs are NaN or infinite and the golden's are not."""
    divergence: TokensPart | None = None
    """Both sides at the first divergence; None where there is none, or where one output
    ends and the other goes on."""


class LogprobsMetrics(_Part, AddedLater):
    """The worst figures over every prompt, judged against the thresholds."""

    added_later: ClassVar[tuple[str, ...]] = ("non_finite",)

    max_abs_delta: float = 0.0
    teacher_mean_abs_delta: float = 0.0
    topk_max_abs_delta: float = 0.0
    not_close: int = 0
    agreement: float = 1.0
    non_finite: int | None = None
    """Positions, over every prompt, whose logprobs are NaN or infinite (the golden's not);
    None where there are none."""


class LogprobsDetails(CheckDetails):
    """The logprobs check's details: each prompt compared, the worst figures, the thresholds."""

    model_config = ConfigDict(extra="ignore")
    check: ClassVar[str] = "logprobs"
    cases: list[LogprobsCaseResult] = Field(default_factory=list)
    metrics: LogprobsMetrics = Field(default_factory=LogprobsMetrics)
    thresholds: dict[str, Threshold] = Field(default_factory=dict)


def _steps(rows: Sequence[Sequence[Any]]) -> list[Step]:
    return [Step(str(t), float(lp), dict(top)) for t, lp, top in rows]


def _token(key: str, logprob: float, texts: Mapping[str, str | None]) -> Token:
    return Token(token=key, text=texts.get(key), logprob=logprob)


def divergence_of(d: Divergence, texts: Mapping[str, str | None]) -> TokensPart | None:
    """Both sides at the first divergence: token (id), its text, logprob and the top-k. Pure."""
    if d.first is None or d.at is None:
        return None
    golden, candidate = (
        Chosen(
            **dict(_token(step.token, step.logprob, texts)),
            top=[_token(k, v, texts) for k, v in sorted(step.top.items(), key=lambda kv: -kv[1])],
        )
        for step in d.at
    )
    return TokensPart(position=d.first, golden=golden, candidate=candidate)


class LogprobsCheck:
    """Bad when greedy tokens or their top-k part from the golden's in a way kernel noise
    cannot explain."""

    name = "logprobs"
    needs_golden = True

    def __init__(
        self,
        prompts: list[str],
        *,
        max_tokens: int = 32,
        top_k: int = 5,
        max_abs_delta: float | None = None,
        teacher_mean_abs_delta: float | None = None,
        topk_max_abs_delta: float | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.prompts = prompts
        self.max_tokens = max_tokens
        self.top_k = top_k
        self.extra = dict(extra or {})
        self._configured = {
            "max_abs_delta": max_abs_delta,
            "teacher_mean_abs_delta": teacher_mean_abs_delta,
            "topk_max_abs_delta": topk_max_abs_delta,
        }

    def _ask(self, endpoint: ChatEndpoint, prompt: str) -> Any:
        return endpoint.chat(
            prompt,
            max_tokens=self.max_tokens,
            **self.extra,
            logprobs=True,
            top_logprobs=self.top_k,
            return_token_ids=True,
            return_tokens_as_token_ids=True,
        )

    def _teacher(
        self, endpoint: ChatEndpoint, prompt_ids: Sequence[int], ids: Sequence[int]
    ) -> list[float | None]:
        score = getattr(endpoint, "score", None)
        if score is None or not prompt_ids or not ids:
            return []
        return list(score([*prompt_ids, *ids])[len(prompt_ids) :])

    def _case(self, endpoint: ChatEndpoint, prompt: str) -> LogprobsCase:
        reply = self._ask(endpoint, prompt)
        if not reply.steps:
            raise EndpointError("the server returned no logprobs (logprobs=true)")
        return LogprobsCase(
            prompt=prompt,
            content=reply.content,
            reasoning=reply.reasoning,
            steps=[(s.token, s.logprob, dict(s.top)) for s in reply.steps],
            token_ids=list(reply.token_ids),
            prompt_token_ids=list(reply.prompt_token_ids),
            teacher=self._teacher(endpoint, reply.prompt_token_ids, reply.token_ids),
        )

    def record(self, endpoint: ChatEndpoint) -> LogprobsSection:
        cases = map_concurrent(lambda p: self._case(endpoint, p), self.prompts, LOGPROBS_AT_ONCE)
        return LogprobsSection(top_k=self.top_k, max_tokens=self.max_tokens, cases=cases)

    def thresholds(self, golden: Golden | None) -> dict[str, Threshold]:
        calibration = golden.calibration if golden else None
        noise = calibration.logprobs if calibration else None
        limits: dict[str, Threshold] = {}
        for key, floor in (
            ("max_abs_delta", FLOOR_MAX_DELTA),
            ("teacher_mean_abs_delta", FLOOR_TEACHER_MEAN),
            ("topk_max_abs_delta", FLOOR_TOPK_DELTA),
        ):
            seen = getattr(noise, key, None) if noise else None
            configured = self._configured[key]
            if configured is not None:
                limits[key] = Threshold(value=configured, source="config")
            elif seen is not None:
                value = max(floor, NOISE_FACTOR * float(seen))
                limits[key] = Threshold(
                    value=value, source=f"calibration ({seen:.4f} x {NOISE_FACTOR:g})"
                )
            else:
                limits[key] = Threshold(value=floor, source="default")
        allowed = noise.not_close if noise else 0
        limits["not_close"] = Threshold(value=allowed, source="calibration" if noise else "default")
        if noise is not None and noise.min_agreement / NOISE_FACTOR < FLOOR_AGREEMENT:
            limits["min_agreement"] = Threshold(
                value=noise.min_agreement / NOISE_FACTOR,
                source=f"calibration ({noise.min_agreement:.4f} / {NOISE_FACTOR:g})",
            )
        elif noise is not None:
            limits["min_agreement"] = Threshold(value=FLOOR_AGREEMENT, source="calibration (floor)")
        else:
            limits["min_agreement"] = Threshold(value=0.0, source="default: no calibration")
        return limits

    def noise(self, results: Sequence[CheckResult]) -> LogprobsNoise:
        metrics = [r.details.metrics for r in results if isinstance(r.details, LogprobsDetails)]
        return LogprobsNoise(
            max_abs_delta=max((m.max_abs_delta for m in metrics), default=0.0),
            teacher_mean_abs_delta=max((m.teacher_mean_abs_delta for m in metrics), default=0.0),
            topk_max_abs_delta=max((m.topk_max_abs_delta for m in metrics), default=0.0),
            not_close=max((m.not_close for m in metrics), default=0),
            min_agreement=min((m.agreement for m in metrics), default=1.0),
        )

    def _texts(
        self, endpoint: ChatEndpoint, divergences: Sequence[Divergence]
    ) -> dict[str, str | None]:
        """The text of every token id shown at a divergence (vLLM's /detokenize), when served."""
        detokenize = getattr(endpoint, "detokenize", None)
        keys = {
            k
            for d in divergences
            if d.at is not None
            for step in d.at
            for k in (step.token, *step.top)
        }
        if detokenize is None:
            return {}
        return {k: detokenize([int(k)]) if k.isdigit() else k for k in sorted(keys)}

    def run(self, endpoint: ChatEndpoint, golden: Golden | None) -> CheckResult:
        section = golden.checks.logprobs if golden else None
        if section is None:
            raise ValueError("the logprobs check needs a golden")
        limits_doc = self.thresholds(golden)
        cases: list[LogprobsCaseResult] = []
        problems, divergences = [], []
        worst_teacher, worst_delta, worst_top, not_close, agree = 0.0, 0.0, 0.0, 0, []

        def ask(g: LogprobsCase) -> tuple[Any, list[float | None]]:
            reply = self._ask(endpoint, g.prompt)
            return reply, self._teacher(endpoint, g.prompt_token_ids, g.token_ids)

        answers = map_concurrent(ask, section.cases, LOGPROBS_AT_ONCE)
        broken: list[tuple[str, list[int]]] = []
        for g, (reply, teacher) in zip(section.cases, answers, strict=True):
            d = diverge(_steps(g.steps), list(reply.steps))
            where = non_finite(_steps(g.steps), list(reply.steps), g.teacher, teacher)
            if where:
                broken.append((g.prompt, where))
            divergences.append(d)
            deltas = teacher_deltas(g.teacher, teacher)
            teacher_mean = sum(deltas) / len(deltas) if deltas else 0.0
            worst_teacher = max(worst_teacher, teacher_mean)
            worst_delta = max(worst_delta, d.max_abs_delta)
            worst_top = max(worst_top, d.topk_max_abs_delta)
            not_close += not d.close
            agree.append(d.agreement)
            cases.append(
                LogprobsCaseResult(
                    prompt=g.prompt,
                    first_divergence=d.first,
                    close=d.close,
                    agreement=d.agreement,
                    max_abs_delta=d.max_abs_delta,
                    mean_abs_delta=d.mean_abs_delta,
                    topk_max_abs_delta=d.topk_max_abs_delta,
                    topk_overlap=d.topk_overlap,
                    teacher_mean_abs_delta=teacher_mean,
                    teacher_deltas=[round(x, 5) for x in deltas],
                    greedy_deltas=[round(x, 5) for x in d.deltas],
                    golden=g.content if g.content is not None else g.reasoning,
                    content=reply.content if reply.content is not None else reply.reasoning,
                    finish_reason=reply.finish_reason,
                    non_finite=where,
                )
            )
            if not d.close:
                if d.at is not None:
                    why = f"neither is in the other's top-{self.top_k}"
                elif len(reply.steps) < len(g.steps):
                    why = "this output ends there, the golden's goes on"
                else:
                    why = "the golden's output ends there, this one goes on"
                problems.append(
                    f"{g.prompt!r}: tokens part at position {d.first}: {why} — golden: "
                    f"{excerpt(cases[-1].golden, 60)} / now: {excerpt(cases[-1].content, 60)}"
                )
        texts = self._texts(endpoint, divergences)
        cases = [
            case.model_copy(update={"divergence": divergence_of(d, texts)})
            for case, d in zip(cases, divergences, strict=True)
        ]
        metrics = LogprobsMetrics(
            max_abs_delta=worst_delta,
            teacher_mean_abs_delta=worst_teacher,
            topk_max_abs_delta=worst_top,
            not_close=not_close,
            agreement=min(agree, default=1.0),
            non_finite=sum(len(w) for _, w in broken) or None,
        )
        limits = {k: v.value for k, v in limits_doc.items()}
        failed = []
        if broken:
            prompt, where = broken[0]
            shown = ", ".join(map(str, where[:8])) + (", ..." if len(where) > 8 else "")
            failed.append(
                f"{metrics.non_finite} logprob(s) NaN or infinite where the golden's are "
                f"numbers, on {len(broken)} of {len(cases)} prompts ({prompt[:40]!r} at "
                f"position(s) {shown})"
            )
        if not_close > limits["not_close"]:
            failed.append(f"{not_close} of {len(cases)} prompts not close")
        if metrics.agreement < limits["min_agreement"]:
            failed.append(
                f"agreement {metrics.agreement:.2f} < {limits['min_agreement']:.2f} (the "
                "share of the golden's tokens matched before the first divergence, worst prompt)"
            )
        if worst_teacher > limits["teacher_mean_abs_delta"]:
            failed.append(
                f"teacher-forced mean |Δlogprob| {worst_teacher:.3f} > "
                f"{limits['teacher_mean_abs_delta']:.3f}"
            )
        if worst_delta > limits["max_abs_delta"]:
            limit = limits["max_abs_delta"]
            failed.append(f"max |Δlogprob| {worst_delta:.3f} > {limit:.3f} on agreeing tokens")
        if worst_top > limits["topk_max_abs_delta"]:
            limit = limits["topk_max_abs_delta"]
            failed.append(
                f"top-{self.top_k} alternatives' |Δlogprob| {worst_top:.3f} > {limit:.3f} "
                "where the chosen tokens agree"
            )
        if not failed:
            evidence = (
                f"{len(cases)} prompts match the golden (max |Δ| {worst_delta:.3f}, "
                f"top-k |Δ| {worst_top:.3f}, teacher-forced mean |Δ| {worst_teacher:.3f})"
            )
        else:
            evidence = "; ".join(failed) + (f" — {problems[0]}" if problems else "")
        return CheckResult(
            name=self.name,
            passed=not failed,
            score=sum(agree) / len(agree) if agree else 1.0,
            evidence=evidence,
            details=LogprobsDetails(cases=cases, metrics=metrics, thresholds=limits_doc),
        )


# ---- the `type: logprobs` check kind ---------------------------------------------------------


class LogprobsConfig(Asks):
    """Token ids and top-k logprobs against the golden; thresholds from calibration.

    Its budget never grows: it compares the first `max_tokens` tokens, reasoning included."""

    type: Literal["logprobs"]
    """`logprobs`: token ids and top-k logprobs against the golden."""
    prompts: list[str] = Field(
        default_factory=lambda: [*CHAT_PROMPTS, "Name three colours."], min_length=1
    )
    """The prompts whose greedy tokens are compared, sent as chat messages."""
    max_tokens: int = Field(default=32, gt=0, le=MAX_TOKENS)
    """Tokens compared per prompt."""
    top_k: int = Field(default=5, ge=1, le=20)
    """Alternatives recorded per position (`top_logprobs`)."""
    max_abs_delta: float | None = Field(default=None, gt=0)
    """|Δlogprob| allowed on agreeing tokens; default: from calibration."""
    teacher_mean_abs_delta: float | None = Field(default=None, gt=0)
    """Mean |Δlogprob| allowed on the teacher-forced golden text; default: from calibration."""
    topk_max_abs_delta: float | None = Field(default=None, gt=0)
    """|Δlogprob| allowed on top-k alternatives where the chosen tokens agree."""


def from_config(cfg: LogprobsConfig, ctx: CheckContext) -> LogprobsCheck:
    return LogprobsCheck(
        cfg.prompts,
        max_tokens=cfg.max_tokens,
        top_k=cfg.top_k,
        max_abs_delta=cfg.max_abs_delta,
        teacher_mean_abs_delta=cfg.teacher_mean_abs_delta,
        topk_max_abs_delta=cfg.topk_max_abs_delta,
        extra=cfg.extra(),
    )


KIND = CHECKS.register(
    CheckKind(
        "logprobs",
        LogprobsConfig,
        cost=2,
        make=from_config,
        default=True,
        shows=frozenset({"divergences"}),
        neutral=frozenset({"max_abs_delta", "teacher_mean_abs_delta", "topk_max_abs_delta"}),
    )
)
