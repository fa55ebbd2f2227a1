"""The degeneration canary: short fixed prompts, both channels inspected.

With a golden, each prompt is judged against the good build's answer to it:

    rule                         counts when
    content null or empty        the good build had content there, and the answer was not cut
    content/reasoning degenerate the good build's text was not, or this one is clearly worse
    cut by its budget            the good build finished in N tokens, and this one had 2N

Without one (`check` with no golden) the rules are absolute, and a failure
says how to tell a bad build from a prompt the model never answers well.
A cut answer (`finish_reason: length`) is no evidence where the good build was cut too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from ..config import CHAT_PROMPTS, Asks
from ..kinds import CHECKS, CheckContext, CheckKind
from ..model import CheckDetails, CheckResult, Threshold
from ..sparse import AddedLater
from . import PROMPTS_AT_ONCE, ChatEndpoint, map_concurrent
from .budget import Budget, ask, budget_of
from .golden import Answer, CanarySection
from .metrics import excerpt
from .reply import judge_reply

if TYPE_CHECKING:
    from ..client import ChatReply
    from .golden import Golden

NO_GOLDEN_HINT = (
    "judged without a golden: if the good build does this too, raise max_tokens, set "
    "chat_template_kwargs, pick other prompts, or record a golden (`llm-bisect golden`)"
)


JudgedAgainst = Literal["golden", "absolute rules"]
"""What a check with absolute rules judged by: the good build's answers, or the rules alone."""


class CanaryCase(Answer):
    """One prompt: the candidate's answer, the good build's, and what was wrong with it."""

    golden: Answer | None = None
    """The good build's answer to the same prompt (None without a golden)."""
    problems: list[str] = Field(default_factory=list)
    """Why the answer is unhealthy, a sentence each; empty when healthy."""


class CanaryDetails(CheckDetails, AddedLater):
    """The canary's details: every prompt's answer, judged."""

    model_config = ConfigDict(extra="ignore")
    added_later: ClassVar[tuple[str, ...]] = ("request",)
    check: ClassVar[str] = "canary"
    cases: list[CanaryCase] = Field(default_factory=list)
    judged_against: JudgedAgainst = "golden"
    request: dict[str, Any] = Field(default_factory=dict)
    """What each request sent beside its prompt, budget and greedy sampling (the config's
    `chat_template_kwargs`, `extra_body`): the report's `curl` sends the same."""


def answer_of(prompt: str, reply: ChatReply, max_tokens: int) -> Answer:
    return Answer(
        prompt=prompt,
        content=reply.content,
        reasoning=reply.reasoning,
        finish_reason=reply.finish_reason,
        max_tokens=max_tokens,
        completion_tokens=reply.completion_tokens,
    )


class CanaryCheck:
    """Bad when content or reasoning degenerates, or content is null/empty, where the good
    build's did not."""

    name = "canary"
    needs_golden = False

    def __init__(self, prompts: list[str], *, budget: Budget | None = None) -> None:
        self.prompts = prompts
        self.budget = budget or Budget(256)

    def record(self, endpoint: ChatEndpoint) -> CanarySection:
        def one(prompt: str) -> Answer:
            asked = ask(endpoint, prompt, self.budget)
            return answer_of(prompt, asked.reply, asked.max_tokens)

        return CanarySection(cases=map_concurrent(one, self.prompts, PROMPTS_AT_ONCE))

    def thresholds(self, golden: Golden | None) -> dict[str, Threshold]:
        return {}

    def noise(self, results: Sequence[CheckResult]) -> None:
        return None

    def run(self, endpoint: ChatEndpoint, golden: Golden | None) -> CheckResult:
        section = golden.checks.canary if golden else None
        baselines = {a.prompt: a for a in section.cases} if section else {}

        def one(prompt: str) -> tuple[Answer | None, Answer]:
            base = baselines.get(prompt)
            budget = self.budget.from_golden(base.max_tokens) if base else self.budget
            asked = ask(endpoint, prompt, budget)
            return base, answer_of(prompt, asked.reply, asked.max_tokens)

        cases: list[CanaryCase] = []
        failures: list[str] = []
        for base, got in map_concurrent(one, self.prompts, PROMPTS_AT_ONCE):
            problems = judge_reply(got.content, got.reasoning, got.finish_reason, base, got.used)
            cases.append(CanaryCase(**dict(got), golden=base, problems=[p for _, p in problems]))
            if problems:
                channel, problem = problems[0]
                shown = got.reasoning if channel == "reasoning" else got.content
                failures.append(f"{got.prompt!r}: {problem} — {channel}: {excerpt(shown)}")
        passed = not failures
        if passed:
            first = cases[0]
            evidence = f"{first.prompt!r} → {excerpt(first.content)}"
            cut = sum(c.cut and not c.content for c in cases)
            if cut:
                evidence += f" ({cut} of {len(cases)} cut by their budget with no content)"
        else:
            evidence = failures[0] + ("" if section else f" ({NO_GOLDEN_HINT})")
        return CheckResult(
            name=self.name,
            passed=passed,
            score=1.0 - len(failures) / len(self.prompts),
            evidence=evidence,
            details=CanaryDetails(
                cases=cases,
                judged_against="golden" if section else "absolute rules",
                request=dict(self.budget.extra or {}),
            ),
        )


# ---- the `type: canary` check kind -----------------------------------------------------------


class CanaryConfig(Asks):
    """Degeneration canary on content and reasoning."""

    type: Literal["canary"]
    """`canary`: degenerate text or null content on short fixed prompts."""
    prompts: list[str] = Field(default_factory=lambda: list(CHAT_PROMPTS), min_length=1)
    """Short fixed prompts sent with greedy sampling."""


def from_config(cfg: CanaryConfig, ctx: CheckContext) -> CanaryCheck:
    return CanaryCheck(cfg.prompts, budget=budget_of(cfg))


KIND = CHECKS.register(CheckKind("canary", CanaryConfig, make=from_config, default=True, cost=0))
