"""Known answers: a prompt and a regex its content must match.

With a golden, a case counts only where the good build's answer matched, and
an answer cut by its budget is not a miss, unless the good build finished in N
tokens and this answer had 2N: then it fails, matched or not.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator

from ..config import MAX_TOKENS, Asks, Strict
from ..kinds import CHECKS, CheckContext, CheckKind
from ..model import CheckDetails, CheckResult, Threshold
from . import PROMPTS_AT_ONCE, ChatEndpoint, map_concurrent
from .budget import Budget, ask, budget_of, unfinished
from .canary import NO_GOLDEN_HINT, JudgedAgainst
from .golden import ExpectAnswer, ExpectSection
from .metrics import excerpt

if TYPE_CHECKING:
    from .golden import Golden


class ExpectCaseResult(ExpectAnswer):
    """One case: the candidate's answer, the good build's, and whether it counted."""

    golden: ExpectAnswer | None = None
    """The good build's answer to the same case (None without a golden)."""
    passed: bool
    judged: bool
    """False where the case did not count (cut by its budget, or the good build missed it)."""


class ExpectDetails(CheckDetails):
    """The expect check's details: every case's answer, judged."""

    model_config = ConfigDict(extra="ignore")
    check: ClassVar[str] = "expect"
    cases: list[ExpectCaseResult] = Field(default_factory=list)
    judged_against: JudgedAgainst = "golden"


def _matches(pattern: re.Pattern[str], content: str | None) -> bool:
    return content is not None and pattern.search(content) is not None


class ExpectCheck:
    """Bad when a case's finished content does not match its pattern where the good build's did."""

    name = "expect"
    needs_golden = False

    def __init__(self, cases: list[tuple[str, str]], budget: Budget | None = None) -> None:
        self.cases = [(prompt, re.compile(pattern)) for prompt, pattern in cases]
        self.budget = budget or Budget(64)

    def _answer(
        self, endpoint: ChatEndpoint, prompt: str, pattern: re.Pattern[str], budget: Budget
    ) -> ExpectAnswer:
        asked = ask(endpoint, prompt, budget)
        reply = asked.reply
        return ExpectAnswer(
            prompt=prompt,
            content=reply.content,
            reasoning=reply.reasoning,
            finish_reason=reply.finish_reason,
            max_tokens=asked.max_tokens,
            completion_tokens=reply.completion_tokens,
            match=pattern.pattern,
            matched=_matches(pattern, reply.content),
        )

    def record(self, endpoint: ChatEndpoint) -> ExpectSection:
        cases = map_concurrent(
            lambda case: self._answer(endpoint, case[0], case[1], self.budget),
            self.cases,
            PROMPTS_AT_ONCE,
        )
        return ExpectSection(cases=cases)

    def thresholds(self, golden: Golden | None) -> dict[str, Threshold]:
        return {}

    def noise(self, results: Sequence[CheckResult]) -> None:
        return None

    def run(self, endpoint: ChatEndpoint, golden: Golden | None) -> CheckResult:
        section = golden.checks.expect if golden else None
        baselines = {(a.prompt, a.match): a for a in section.cases} if section else {}

        def one(case: tuple[str, re.Pattern[str]]) -> tuple[ExpectAnswer | None, ExpectAnswer]:
            base = baselines.get((case[0], case[1].pattern))
            budget = self.budget.from_golden(base.max_tokens) if base else self.budget
            return base, self._answer(endpoint, case[0], case[1], budget)

        details: list[ExpectCaseResult] = []
        failures: list[str] = []
        for base, got in map_concurrent(one, self.cases, PROMPTS_AT_ONCE):
            late = unfinished(base.finished_in, got.cut, got.used) if base else None
            counts = late is not None or (not got.cut and (base is None or base.matched))
            ok = late is None and (got.matched or not counts)
            details.append(ExpectCaseResult(**dict(got), golden=base, passed=ok, judged=counts))
            if late is not None:
                failures.append(f"{got.prompt!r}: {late} — {excerpt(got.content)}")
            elif not ok:
                failures.append(f"{got.prompt!r} → {excerpt(got.content)} (expected /{got.match}/)")
        passed = not failures
        first = details[0]
        if passed:
            evidence = f"{first.prompt!r} → {excerpt(first.content)}"
        else:
            evidence = failures[0] + ("" if section else f" ({NO_GOLDEN_HINT})")
        return CheckResult(
            name=self.name,
            passed=passed,
            score=1.0 - len(failures) / len(self.cases),
            evidence=evidence,
            details=ExpectDetails(
                cases=details, judged_against="golden" if section else "absolute rules"
            ),
        )


# ---- the `type: expect` check kind -----------------------------------------------------------


class ExpectCase(Strict):
    """A prompt and a regular expression its content must match."""

    prompt: str
    """The prompt, sent with greedy sampling."""
    match: str
    """A regular expression the answer's content must match (re.search)."""

    @field_validator("match")
    @classmethod
    def _regex(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"not a regular expression ({exc})") from exc
        return pattern


class ExpectConfig(Asks):
    """Prompts with known answers."""

    type: Literal["expect"]
    """`expect`: prompts with a known answer."""
    cases: list[ExpectCase] = Field(
        default_factory=lambda: [
            ExpectCase(prompt="What is 2+2? Reply with the number only.", match=r"^\s*4\b")
        ],
        min_length=1,
    )
    """The prompts and the pattern each answer must match."""
    max_tokens: int = Field(default=64, gt=0, le=MAX_TOKENS)
    """The first token budget per prompt (reasoning and content share it)."""


def from_config(cfg: ExpectConfig, ctx: CheckContext) -> ExpectCheck:
    return ExpectCheck([(c.prompt, c.match) for c in cfg.cases], budget_of(cfg))


KIND = CHECKS.register(CheckKind("expect", ExpectConfig, make=from_config, default=True, cost=1))
