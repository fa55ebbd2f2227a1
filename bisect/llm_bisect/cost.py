"""What a run will cost before it starts: server starts and, given a start's minutes, time.

Pure: the search's own planner is run against verdicts that never lie, for culprits spread
evenly over the range, so the figure is the search's (the ends, re-probes that `auto`
makes for confidence) and not a formula; confirmation and localisation add theirs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .model import Candidate, Verdict
from .posterior import Policy
from .search import Answer, Mode, Plan, plan_batch

SAMPLES = 7
"""Culprit positions averaged over (evenly spread; the ends' neighbours included)."""


@dataclass(frozen=True)
class Cost:
    """The server starts a run makes when no verdict lies and nothing is skipped."""

    search: float
    """Probes of the search, the two ends included (mean over culprit positions)."""
    rounds: float
    """Rounds of the search with the run's slots (one probe per slot per round)."""
    confirm: int
    """The revert and pick trials (fewer where a run probe already holds that tree)."""
    decisive: int
    """The first bad again with every check, where its probe stopped early
    (`probe.early_stop`): the report's evidence. At most one: a good probe runs every check,
    and a probe whose verdict ends the search runs them all at once."""
    localize: int
    """The last good and first bad builds again, with the worker extension (vLLM)."""
    slots: int

    @property
    def starts(self) -> float:
        return self.search + self.confirm + self.decisive + self.localize

    def hours(self, minutes: float) -> float:
        stages = self.confirm + self.decisive + self.localize
        return (self.rounds + math.ceil(stages / self.slots)) * minutes / 60

    def line(self, minutes: float | None) -> str:
        parts = [f"{self.search:.0f} search probes, the ends included"]
        if self.confirm:
            parts.append(f"up to {self.confirm} confirmation")
        if self.decisive:
            parts.append(f"up to {self.decisive} with every check for the evidence")
        if self.localize:
            parts.append(f"{self.localize} localisation")
        said = f"expected: about {self.starts:.0f} server starts ({'; '.join(parts)})"
        said += " if no verdict lies"
        if self.slots > 1:
            said += f", in about {self.rounds:.0f} search rounds of {self.slots} slots"
        if minutes is not None:
            said += f"; about {_time(self.hours(minutes))} at {minutes:g} min a start"
        return said


def _time(hours: float) -> str:
    return f"{hours * 60:.0f} min" if hours < 1 else f"{hours:.1f} h"


def search_cost(n: int, policy: Policy, slots: int) -> tuple[float, float]:
    """Mean probes and rounds of a search over n + 1 commits (ends included) when every
    verdict is true, over culprits spread evenly in 1..n."""
    if n < 1:
        return 0.0, 0.0
    seq = tuple(Candidate(f"{i:040x}") for i in range(n + 1))
    plan = Plan(Mode.REGRESSION, seq)
    culprits = sorted(
        {max(1, min(n, round(1 + j * (n - 1) / (SAMPLES - 1)))) for j in range(SAMPLES)}
    )
    probes = rounds = 0
    for culprit in culprits:
        seen: dict[str, list[Verdict]] = {}
        while not isinstance(
            step := plan_batch(plan, seen, slots, reprobe=True, policy=policy), Answer
        ):
            rounds += 1
            for c in step:
                bad = int(c.commit, 16) >= culprit
                seen.setdefault(c.commit, []).append(Verdict.BAD if bad else Verdict.GOOD)
                probes += 1
    return probes / len(culprits), rounds / len(culprits)


def estimate(
    n: int,
    policy: Policy,
    *,
    slots: int = 1,
    confirm: bool = True,
    localize: bool = True,
    decisive: bool = True,
) -> Cost:
    """The cost of a run over n candidates after the good end."""
    search, rounds = search_cost(n, policy, slots)
    return Cost(search, rounds, 2 if confirm else 0, 1 if decisive else 0,
                2 if localize else 0, slots)  # fmt: skip
