"""What a run will cost before it starts: server starts and, given a start's minutes and the
server's nodes, time and node-hours. The one figure `candidates`, `run`'s progress (`[i/~N]`)
and the report give (services/bisection.of_config: a config's).

Pure: the search's own planner is run against verdicts that never lie, for culprits spread
evenly over the range, as `scripts/bench_noise.py` runs it at lie rate 0 (the ends, re-probes
the slot rule asks for, the confirmation's revert and pick weighed where the search stops
for them), so the figure is the search's and not a formula. Then what follows the search:

    search (+ its trials) ─► decisive ─► localize ─► later builds      expected: one culprit
                         └► each further culprit: the range after it searched again, with
                            its own trials                            (search.culprits: worst)

Expected: the mean over culprit positions with one culprit. Worst: the most over those
positions, every stage, and `search.culprits` culprits, still if no verdict lies (a lie costs
re-probes up to the search's budget, `search.max_probes`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TypedDict

from .model import Candidate, Verdict
from .posterior import (
    FALSE_BAD_MOST,
    RATE_GRID,
    Policy,
    Rates,
    Start,
    Trial,
    next_look,
    reverts_at_once,
    reverts_hold,
)
from .search import Answer, Mode, Plan, pick_slot, plan_batch, trial_slots

EVERY = 64
"""Ranges of up to this many culprit positions are averaged over every one."""
SAMPLES = 40
"""Culprit positions averaged over in a longer range: the middle of SAMPLES equal strata of
1..n-1."""


@dataclass(frozen=True)
class Searched:
    """A search over one range when no verdict lies, over culprits spread evenly."""

    probes: float
    """Mean probes of the search, the two ends included (its trials apart)."""
    rounds: float
    """Mean rounds (one probe per slot per round; a confirmation's trials take theirs)."""
    trials: float
    """Mean confirmation trials the search weighed (the posterior search stops for them)."""
    most: int
    """The most starts (probes and trials) at any position sampled."""
    most_rounds: int


@dataclass(frozen=True)
class Cost:
    """The server starts a run makes when no verdict lies and nothing is skipped."""

    search: float
    """Probes of the search, the two ends included (mean over culprit positions)."""
    rounds: float
    """Rounds of the search with the run's slots (one probe per slot per round)."""
    confirm: float
    """The revert and pick trials (weighed by the posterior search, run after the exact one)."""
    decisive: int
    """The first bad again with every check, where its probe stopped early
    (`probe.early_stop`): the report's evidence. At most one: a good probe runs every check,
    and a probe whose verdict ends the search runs them all at once."""
    localize: int
    """The last good and first bad builds again, with the worker extension (vLLM)."""
    slots: int
    later: int = 0
    """`candidates.later` builds, each probed once the culprit is found."""
    worst: int = 0
    """The most starts: the worst culprit position, every stage and every further culprit."""
    worst_rounds: int = 0
    further: int = 0
    """Further culprits the run may look for (`search.culprits` - 1)."""
    nodes: int = 1
    """Nodes one server takes (a two-node probe: 2)."""
    lies: Lies | None = None
    """What the search allows of lies and what they may cost; None: verdicts are facts."""

    @property
    def starts(self) -> float:
        return self.search + self.confirm + self.stages

    @property
    def stages(self) -> int:
        """Starts after the search and its confirmation: evidence, localisation, later."""
        return self.decisive + self.localize + self.later

    def hours(self, minutes: float) -> float:
        """Wall-clock hours expected, `slots` starts at a time."""
        return (self.rounds + math.ceil(self.stages / self.slots)) * minutes / 60

    def node_hours(self, minutes: float, starts: float | None = None) -> float:
        """Starts times the server's nodes times the start time (`starts`: the expected figure)."""
        return (self.starts if starts is None else starts) * self.nodes * minutes / 60

    def line(self, minutes: float | None) -> str:
        """The figure in one line: expected and worst-case starts, and with a start's minutes
        the time and node-hours."""
        parts = [f"{self.search:.0f} search probes, the ends included"]
        if self.confirm:
            parts.append(f"{self.confirm:.0f} confirmation")
        if self.decisive:
            parts.append(f"up to {self.decisive} with every check for the evidence")
        if self.localize:
            parts.append(f"{self.localize} localisation")
        if self.later:
            parts.append(f"{self.later} later build(s)")
        said = f"expected: about {self.starts:.0f} server starts ({'; '.join(parts)})"
        said += f", at most {self.worst}"
        if self.further:
            said += f" with {self.further} further culprit(s)"
        said += ", if no verdict lies"
        if self.slots > 1:
            said += f"; about {self.rounds:.0f} search rounds of {self.slots} slots"
        if minutes is not None:
            said += f"; at {minutes:g} min a start: {self.time_said(minutes)}"
        if self.lies is not None:
            said += f"; {self.lies.line}"
        return said

    def time_said(self, minutes: float) -> str:
        """Time and node-hours at `minutes` a start, expected and at most."""
        nodes = f"{self.nodes} nodes a start" if self.nodes > 1 else "1 node a start"
        return (
            f"about {_time(self.hours(minutes))}, {self.node_hours(minutes):.1f} node-hours "
            f"({nodes}), at most {self.node_hours(minutes, self.worst):.1f} node-hours"
        )

    def to_json(self, minutes: float | None) -> dict[str, object]:
        return {
            "starts": round(self.starts, 1),
            "worst": self.worst,
            "search_probes": round(self.search, 1),
            "search_rounds": round(self.rounds, 1),
            "confirm": round(self.confirm, 1),
            "decisive": self.decisive,
            "localize": self.localize,
            "later": self.later,
            "further_culprits": self.further,
            "nodes": self.nodes,
            "hours": None if minutes is None else round(self.hours(minutes), 2),
            "node_hours": None if minutes is None else round(self.node_hours(minutes), 2),
            "worst_node_hours": (
                None if minutes is None else round(self.node_hours(minutes, self.worst), 2)
            ),
        } | ({} if self.lies is None else {"lies": self.lies.to_json()})


class LiesDoc(TypedDict):
    """`expected.lies` in result.json and `candidates --json`."""

    false_bad: float
    false_good: float
    search_probes_most: int
    search_probes_widest: int
    learnt: bool


@dataclass(frozen=True)
class Lies:
    """The lie rates the search allows and the most search probes they may cost (its budget:
    it ends without an answer there): at the rates most runs have, and at the widest it
    accepts, where its own verdicts point to them (posterior.widened)."""

    false_bad: float
    """The most often a good build may read bad (`flake: auto`: posterior.FALSE_BAD_MOST)."""
    false_good: float
    """The most often a bad build may read good (an intermittent regression: up to half)."""
    most: int
    """The most search probes at a lie rate of 0.1 or less (search.max_probes where set)."""
    widest: int
    """The most search probes where the verdicts point to the widest rates."""
    learnt: bool
    """The rates are learnt from the run (`flake: auto`); else known (`flake: x`)."""

    @property
    def line(self) -> str:
        if not self.learnt:
            return (
                f"if verdicts lie (search.flake {self.false_bad:g}, each way): at most "
                f"{self.most} search probes"
            )
        said = (
            f"if verdicts lie, the search learns how often: a good build reading bad on up to "
            f"{self.false_bad:.0%} of its starts, a bad one reading good on up to "
            f"{self.false_good:.0%} (an intermittent regression): at most {self.most} search "
            "probes"
        )
        if self.widest > self.most:
            said += f" at a rate of 0.1, up to {self.widest} where its verdicts point to the widest"
        return said

    def to_json(self) -> LiesDoc:
        return {
            "false_bad": self.false_bad, "false_good": self.false_good,
            "search_probes_most": self.most, "search_probes_widest": self.widest,
            "learnt": self.learnt,
        }  # fmt: skip


def lies_of(n: int, policy: Policy) -> Lies | None:
    """What the search over n + 1 commits allows of lies (Lies); None: verdicts are facts."""
    if policy.exact:
        return None
    if policy.flake is not None:
        rates = Rates(policy.flake, policy.flake)
        most = policy.budget(n + 1, rates)
        return Lies(policy.flake, policy.flake, most, most, learnt=False)
    widest = Rates(FALSE_BAD_MOST, max(r for r, _ in RATE_GRID))
    most = policy.budget(n + 1, Rates(0.1, 0.1))
    return Lies(widest.false_bad, widest.false_good, most, policy.budget(n + 1, widest), True)


def _time(hours: float) -> str:
    return f"{hours * 60:.0f} min" if hours < 1 else f"{hours:.1f} h"


def _one(n: int, culprit: int, policy: Policy, slots: int) -> tuple[int, int, int]:
    """(probes, rounds, trials) of one search over n + 1 commits whose first bad is `culprit`,
    every verdict true: as bench_noise.searched runs it at lie 0 (placed as the runner places,
    a confirmation's trials weighed where the posterior search stops for them)."""
    plan = Plan(Mode.REGRESSION, tuple(Candidate(f"{i:040x}") for i in range(n + 1)))
    seen: dict[str, list[Verdict]] = {}
    where: dict[str, list[Start]] = {}
    probes = rounds = trials = clock = 0
    while True:
        step = plan_batch(plan, seen, slots, reprobe=True, policy=policy, starts=where)
        if isinstance(step, Answer):
            if policy.exact or step.culprit is None:
                return probes, rounds, trials
            _, go_on = next_look(policy.looks, step.culprit.commit, policy.evidence)
            if not go_on:
                return probes, rounds, trials
            at = int(step.culprit.commit, 16)
            right = at == culprit
            # placed as services/confirm places them: away from the slots of the verdicts they
            # check (the culprit's and its parent's, as journalled, its trials before)
            checked = [x for i in (at - 1, at) for x in where.get(f"{i:040x}", ())]
            busy = [x.slot for x in sorted(checked, key=lambda x: x.began or 0.0)]
            busy += [t.slot for t in policy.evidence if t.commit == step.culprit.commit]
            places = trial_slots(slots, busy)
            said: list[Trial] = []
            held: list[Verdict] = (
                [Verdict.GOOD, Verdict.BAD] if right else [Verdict.BAD, Verdict.GOOD]
            )
            kinds = ["revert", "pick"]
            clean = slots - len({x.slot for x in checked})
            if reverts_at_once(clean, policy.exact) > 1:  # the revert's second start beside,
                held, kinds = [held[0], *held], ["revert", *kinds]  # as confirm places it
            for kind, v in zip(kinds, held, strict=True):
                clock += 1  # the revert: good only if it is the culprit; the pick: bad only then
                said.append(Trial(step.culprit.commit, kind, v, places[len(said) % slots], clock))
                if slots == 1 and v is not Verdict.GOOD:
                    break  # one slot: the pick only after a good revert
            trials += len(said)
            rounds += 1 if slots > 1 else len(said)
            evidence = (*policy.evidence, *said)
            # a look counts once the culprit's reverts hold it (confirm.looked: two good)
            held_ = right and reverts_hold(evidence, step.culprit.commit)
            policy = replace(
                policy, evidence=evidence, looks=(*policy.looks, (step.culprit.commit, held_))
            )
            continue
        rounds += 1
        taken: set[int] = set()
        for c in sorted(step, key=lambda c: not seen.get(c.commit)):  # re-probes first
            tried = [s.slot for s in where.get(c.commit, ()) if s.slot is not None]
            slot = pick_slot(slots, taken, tried)  # the runner's placement
            taken.add(slot)
            clock += 1
            bad = int(c.commit, 16) >= culprit
            seen.setdefault(c.commit, []).append(Verdict.BAD if bad else Verdict.GOOD)
            where.setdefault(c.commit, []).append(Start(slot, float(clock)))
            probes += 1


def positions(n: int) -> list[int]:
    """The culprits a search over n + 1 commits is averaged over: every one of 1..n-1, where
    bench_noise draws them (n itself where n is 1), or in a range of more than EVERY the
    middle of each of SAMPLES equal strata."""
    if n - 1 <= EVERY:
        return list(range(1, n)) or [1]
    return sorted({1 + int((j + 0.5) * (n - 1) / SAMPLES) for j in range(SAMPLES)})


@lru_cache(maxsize=8)  # a run asks twice: for its progress and its report
def searched(n: int, policy: Policy, slots: int) -> Searched:
    """The search over n + 1 commits (ends included) when every verdict is true, over culprits
    spread evenly in 1..n."""
    if n < 1:
        return Searched(0.0, 0.0, 0.0, 0, 0)
    runs = [_one(n, c, policy, max(1, slots)) for c in positions(n)]
    m = len(runs)
    return Searched(
        sum(p for p, _, _ in runs) / m,
        sum(r for _, r, _ in runs) / m,
        sum(t for _, _, t in runs) / m,
        max(p + t for p, _, t in runs),
        max(r for _, r, _ in runs),
    )


def search_cost(n: int, policy: Policy, slots: int) -> tuple[float, float]:
    """Mean starts (probes and trials) and rounds of a search over n + 1 commits."""
    s = searched(n, policy, slots)
    return s.probes + s.trials, s.rounds


@dataclass(frozen=True)
class PostRun:
    """What runs after the search, for its cost: the confirmation's trials, localisation's
    two starts, the decisive checks' re-run (`probe.early_stop`), `later` builds probed
    after the culprit, up to `culprits` culprits (each further one searches the range after
    the last again, with its own confirmation)."""

    confirm: bool = True
    localize: bool = True
    decisive: bool = True
    later: int = 0
    culprits: int = 1


def estimate(
    n: int, policy: Policy, *, slots: int = 1, post: PostRun = PostRun(), nodes: int = 1
) -> Cost:
    """The cost of a run over n candidates after the good end, with what runs after its
    search (`post`, PostRun), `nodes` nodes a server."""
    confirm, localize, decisive = post.confirm, post.localize, post.decisive
    later, culprits = post.later, post.culprits
    s = searched(n, policy, slots)
    # a search that does not stop for the trials (exact; --find-fix) has them after it
    after = 2 if confirm and not policy.confirming else 0
    trials = s.trials + after if confirm else 0.0
    stages = (1 if decisive else 0) + (2 if localize else 0) + later
    further = max(0, culprits - 1) if confirm else 0
    worst = s.most + after + stages
    worst_rounds = s.most_rounds + math.ceil((after + stages) / max(1, slots))
    # each further culprit: the range after the last searched again, no longer than this one
    worst += further * (s.most + after)
    worst_rounds += further * (s.most_rounds + math.ceil(after / max(1, slots)))
    return Cost(
        s.probes, s.rounds, trials, 1 if decisive else 0, 2 if localize else 0, max(1, slots),
        later, worst, worst_rounds, further, max(1, nodes), lies_of(n, policy),
    )  # fmt: skip
