"""A run's range replayed through the pure search (no server): the starts it needs with and
without the prior (`search.priors`), on the verdicts the run's culprit implies."""

from __future__ import annotations

from typing import Any

from llm_bisect.model import Candidate, Verdict
from llm_bisect.posterior import Policy
from llm_bisect.search import Answer, Mode, Plan, plan_batch
from llm_bisect.sources.git import GitSource


def replay_plan(source: GitSource, result: dict[str, Any]) -> Plan:
    """The run's plan (a merge base and its anchor where the run had one) from its result."""
    base = result["merge_base"] or result["good"]
    sequence = (source.resolve(base, "base"), *source.between(base, result["bad"]))
    anchor = source.resolve(result["good"], "good") if result["merge_base"] else None
    return Plan(Mode.REGRESSION, sequence, anchor)


def replay(plan: Plan, culprit: str, policy: Policy) -> tuple[int, str | None]:
    """(starts, the culprit named) of the posterior search on one slot, every verdict true:
    a build at or after `culprit` is bad, every other good."""
    at = [c.commit for c in plan.sequence].index(culprit)
    bad = {c.commit for c in plan.sequence[at:]}
    seen: dict[str, list[Verdict]] = {}
    starts = 0
    while not isinstance(step := plan_batch(plan, seen, 1, policy=policy), Answer):
        for candidate in step:
            seen.setdefault(candidate.commit, []).append(
                Verdict.BAD if candidate.commit in bad else Verdict.GOOD
            )
            starts += 1
    named: Candidate | None = step.culprit
    return starts, None if named is None else named.commit
