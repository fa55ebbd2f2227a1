"""The bisection algorithm: verdicts in, the next probe or batch of k (or the answer) out.

Pure: no I/O, no clock (build_plan asks a Source for the candidates, through its
Protocol). Candidates are indices into a sequence ordered oldest to newest; index 0 is
the *old end*, index n-1 the *new end*.

    regression mode:   old end = good ........................ new end = bad
    find-fix mode:     old end = bad  ........................ new end = good

    0    lo              mid              hi               n-1
    |-----|---------------x----------------|----------------|
     last known         next probe      first known new-state
     old-state                          after lo

The culprit is the first candidate in the new state after the last one in the old state.
The ends are verified first (the good end must test good, the bad end bad); then the
midpoint of the open interval (lo, hi) is probed. Untestable candidates (skip, unsure)
are stepped around; when they border the culprit the answer is ambiguous and `range`
lists every candidate that could be the first in the new state.

Verdicts need not be monotone (a flaky build; a bug fixed, then broken again). Every
function here reads (lo, hi) the same way (`bounds`), so any set of verdicts ends in an
answer that is a real old→new step of what was observed, and the answer says where the
verdicts reversed:

    G  G  B  B  G  ?  ?  B        (regression mode)
          ^^^^^^^              a reversal: good at 4 after bad at 3
                lo       hi    the search goes on after the last good: the step the
                               bad end still has

`settle` reads every probe of a candidate: one whose probes disagree (good and bad) is
flaky, and counts as unsure; with re-probes (`probe.repeats: auto`) both sides of a
reversal are probed again (`again`) before either verdict is used.

With k slots (next_batch, plan_batch) the open interval is split into k+1 parts per
round, a slot that frees early gets the widest gap the running probes leave, and a
running probe outside the interval is no longer needed (obsolete, no_longer_needed).

A range whose ends lie on two branches starts at their merge base (Plan.anchor); when
the merge base cannot be tested the search goes on as if it were in the old state, as
`git bisect` does, and the answer says what that cost.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from .errors import ConfigError
from .model import Candidate, Verdict
from .posterior import (
    BURST,
    EXACT,
    BatchAsk,
    Belief,
    Decision,
    Placed,
    Policy,
    Rates,
    Start,
    believe,
    decide,
    disagreeing,
    fragile,
    next_look,
    placed_belief,
    spare,
)
from .sources import Source


class Mode(str, enum.Enum):
    """What the search looks for."""

    REGRESSION = "regression"
    """The first bad commit after a good one."""
    FIX = "fix"
    """The first good commit after a bad one (`--find-fix`)."""

    @property
    def old_state(self) -> Verdict:
        return Verdict.GOOD if self is Mode.REGRESSION else Verdict.BAD

    @property
    def new_state(self) -> Verdict:
        return Verdict.BAD if self is Mode.REGRESSION else Verdict.GOOD


class Status(str, enum.Enum):
    """The `status` of result.json."""

    FOUND = "found"
    AMBIGUOUS = "ambiguous"
    NO_REGRESSION = "no-regression"
    ERROR = "error"


@dataclass(frozen=True)
class Outcome:
    """The search's answer once no probe is left to run."""

    status: Status
    """found, ambiguous, no-regression or error."""
    culprit: int | None
    """Index of the first candidate in the new state, when found."""
    range: tuple[int, ...]
    """Last old-state index, then every index that could be the first new-state one."""
    message: str
    """One sentence for a person."""
    reversals: tuple[tuple[int, int], ...] = ()
    """Where the verdicts were not monotone (`reversals`)."""
    belief: Confidence | None = None
    """How sure the answer is, when verdicts may lie (the posterior search)."""


@dataclass(frozen=True)
class Confidence:
    """What the posterior says of an answer (the search with `search.flake` other than 0)."""

    posterior: float
    """The posterior of the answer (the culprit; the group, when ambiguous)."""
    credible: tuple[int, ...]
    """The fewest hypotheses holding the confidence: candidate indices, or 0 (the old end is
    new already) and n (no change in the range)."""
    disagreed: tuple[tuple[int, Verdict], ...]
    """Every verdict that disagrees with the answer (index, verdict), in order."""
    rates: Rates
    """The lie rates the run's verdicts point to (their posterior mean)."""
    probes: int
    """Probes spent."""
    again: tuple[int, ...] = ()
    """Candidates probed more than once."""
    no_change: float = 0.0
    """The posterior of hypothesis n: nothing changed in the range."""
    confidence: float = 0.99
    """The posterior an answer needs."""
    settle: tuple[int, ...] = ()
    """Below the confidence: the candidates that would tell most, probed next."""
    budget: int = 0
    """The most probes the search could spend (`search.max_probes`)."""


def _untestable(v: Verdict) -> bool:
    return v in (Verdict.SKIP, Verdict.UNSURE)


def _end_name(mode: Mode, new: bool) -> str:
    state = mode.new_state if new else mode.old_state
    return f"the {state.value} end"


def reversals(verdicts: Mapping[int, Verdict], mode: Mode) -> tuple[tuple[int, int], ...]:
    """Where the verdicts are not monotone: (i, j), neighbours among the tested (good or bad)
    candidates, i in the new state and j, after it, in the old (good at j after bad at i)."""
    tested = sorted(i for i, v in verdicts.items() if not _untestable(v))
    return tuple(
        (a, b)
        for a, b in itertools.pairwise(tested)
        if verdicts[a] is mode.new_state and verdicts[b] is mode.old_state
    )


def combined(seen: Sequence[Verdict]) -> Verdict:
    """One candidate's verdict from all its probes: good and bad both seen is a flaky build
    (unsure); an untestable probe adds nothing to a tested one."""
    tested = {v for v in seen if not _untestable(v)}
    if len(tested) > 1:
        return Verdict.UNSURE
    return tested.pop() if tested else seen[-1]


@dataclass(frozen=True)
class Settled:
    """What the search goes by, read from every probe of every candidate (`settle`)."""

    verdicts: dict[int, Verdict]
    """Index → verdict (`combined`); an index waiting to be probed again is left out."""
    again: frozenset[int]
    """Indices to probe again before their verdict is used (both sides of a reversal)."""
    flaky: frozenset[int]
    """Indices whose probes disagreed: good and bad."""


def settle(history: Mapping[int, Sequence[Verdict]], mode: Mode, reprobe: bool = False) -> Settled:
    """The verdicts the search uses, from every probe of each index (in order). With
    `reprobe`, both candidates of a reversal probed once are probed again first."""
    verdicts = {i: combined(seen) for i, seen in history.items() if seen}
    flaky = frozenset(
        i for i, seen in history.items() if len({v for v in seen if not _untestable(v)}) > 1
    )
    again = (
        frozenset(i for pair in reversals(verdicts, mode) for i in pair if len(history[i]) == 1)
        if reprobe
        else frozenset()
    )
    kept = {i: v for i, v in verdicts.items() if i not in again}
    return Settled(kept, again, flaky)


def next_step(
    n: int,
    verdicts: Mapping[int, Verdict],
    mode: Mode = Mode.REGRESSION,
    prefer: frozenset[int] = frozenset(),
    again: frozenset[int] = frozenset(),
) -> int | Outcome:
    """Return the index to probe next, or the Outcome when the search is over.

    `again` (settle) goes first: a verdict is not used before it is probed again.
    `prefer` (coarse then fine): while the open interval holds preferred indices
    (a ready artifact: an image, a published wheel, a cached build), the one
    nearest the midpoint is probed; then any. Every probe still halves what it can.
    """
    if n < 2:
        raise ValueError("a search needs at least the two ends")
    if again:
        return min(again)
    last = n - 1
    for index, new in ((0, False), (last, True)):
        if index not in verdicts:
            return index
        v = verdicts[index]
        expected = mode.new_state if new else mode.old_state
        if _untestable(v):
            return Outcome(
                Status.ERROR, None, (), f"{_end_name(mode, new)} could not be tested ({v.value})"
            )
        if v is not expected:
            if new:
                # Both ends in the old state: nothing changed in this range.
                return Outcome(
                    Status.NO_REGRESSION,
                    None,
                    (),
                    f"{_end_name(mode, True)} tests {v.value}: no change in this range",
                    reversals(verdicts, mode),
                )
            return Outcome(
                Status.ERROR,
                None,
                (),
                f"{_end_name(mode, False)} is already {v.value}: "
                "the change is older than this range",
            )

    lo, hi = bounds(n, verdicts, mode)
    untested = [i for i in range(lo + 1, hi) if i not in verdicts]
    if not untested:
        between = tuple(range(lo + 1, hi))  # all untestable
        if not between:
            return Outcome(
                Status.FOUND,
                hi,
                (lo, hi),
                f"first {mode.new_state.value} candidate found",
                reversals(verdicts, mode),
            )
        return Outcome(
            Status.AMBIGUOUS,
            None,
            (lo, *between, hi),
            f"{len(between)} untestable candidate(s) border the change: "
            f"any of {len(between) + 1} could be the first {mode.new_state.value}",
            reversals(verdicts, mode),
        )
    mid = (lo + hi) // 2
    pool = [i for i in untested if i in prefer] or untested
    return min(pool, key=lambda i: (abs(i - mid), i))


def next_batch(
    n: int,
    verdicts: Mapping[int, Verdict],
    k: int,
    mode: Mode = Mode.REGRESSION,
    prefer: frozenset[int] = frozenset(),
    running: frozenset[int] = frozenset(),
    again: frozenset[int] = frozenset(),
    costs: Mapping[int, float] | None = None,
) -> list[int] | Outcome:
    """Up to `k` indices to probe now besides those `running`, or the Outcome when the search
    is over (running probes then are no longer needed). `costs`: of the points that tell
    nearly as much as a split point, the cheapest to make runnable (cheaper).

    Indices to probe `again` come first, then unverified ends. The free slots are shared
    among the gaps that the running probes leave in the open interval, each slot to the gap
    whose parts are then widest; a gap with s slots gets the s points that split it into s+1
    equal parts (nearest a `prefer`red index when the gap holds one). With nothing running
    and k slots, that splits the interval into k+1 parts (Pinpoint); a slot that frees while
    others run gets a speculative point in the widest gap left. An empty list: wait for a
    running probe (never returned while nothing runs).
    """
    step = next_step(n, verdicts, mode, prefer)
    pending = sorted(again - running)
    if isinstance(step, Outcome):
        return pending[:k] if again else step  # the answer waits for every re-probe
    ends = [end for end in (0, n - 1) if end not in verdicts and end not in running]
    picks = [*pending, *(end for end in ends if end not in again)][:k]
    lo, hi = bounds(n, verdicts, mode)
    free = [
        i for i in range(lo + 1, hi) if i not in verdicts and i not in running and i not in again
    ]
    slots = k - len(picks)
    if slots <= 0 or not free:
        return picks
    marks = sorted({lo, hi, *(i for i in running | again if lo < i < hi)})
    gaps = list(itertools.pairwise(marks))
    inside = [sum(1 for i in free if a < i < b) for a, b in gaps]
    given = [0] * len(gaps)
    for _ in range(min(slots, len(free))):
        widest = max(
            (g for g in range(len(gaps)) if given[g] < inside[g]),
            key=lambda g: (inside[g] / (given[g] + 1), -g),
        )
        given[widest] += 1
    taken: set[int] = set()
    for (a, b), count in zip(gaps, given, strict=True):
        pool = [i for i in free if a < i < b]
        for j in range(1, count + 1):
            target = a + (b - a) * j / (count + 1)
            left = [i for i in pool if i not in taken]
            ready = [i for i in left if i in prefer] or left
            taken.add(cheaper(ready, target, (b - a) / (count + 1), costs))
    return picks + sorted(taken)


SWAY = 2 * (0.5 - 0.316)
"""How far from a split point, as a share of its part, a point still tells nearly as much
(posterior.NEARLY): a point at 31.6 % of a range tells 0.9 of the bit its midpoint tells."""


def cheaper(
    left: Sequence[int], target: float, part: float, costs: Mapping[int, float] | None
) -> int:
    """The point of `left` to probe for the split point `target` of a part `part` wide: the
    nearest; with `costs`, the cheapest of those that tell nearly as much (within SWAY of
    the part), the nearest of those. Pure.

    >>> cheaper([3, 4, 5, 6], 5, 4.0, {3: 0, 4: 1, 5: 2, 6: 2})
    4
    """
    near = min(left, key=lambda i: (abs(i - target), i))
    if not costs:
        return near
    close = [i for i in left if abs(i - target) <= SWAY * part] or [near]
    return min(close, key=lambda i: (costs.get(i, 0), abs(i - target), i))


def obsolete(
    n: int,
    verdicts: Mapping[int, Verdict],
    running: frozenset[int],
    mode: Mode,
    again: frozenset[int] = frozenset(),
) -> frozenset[int]:
    """Running probes whose answer is no longer needed: outside the open interval (an end
    is always needed: it verifies the range; so is a probe `again`)."""
    lo, hi = bounds(n, verdicts, mode)
    keep = {0, n - 1} | again
    return frozenset(i for i in running if (i <= lo or i >= hi) and i not in keep)


def bounds(
    n: int, verdicts: Mapping[int, Verdict], mode: Mode = Mode.REGRESSION
) -> tuple[int, int]:
    """(lo, hi): the last index known in the old state and the first known in the new state
    after it; the ends stand for themselves until tested. The culprit is in lo+1..hi. Every
    function here reads the range through this one, verdicts monotone or not."""
    lo = max((i for i, v in verdicts.items() if v is mode.old_state), default=0)
    hi = min((i for i, v in verdicts.items() if v is mode.new_state and i > lo), default=n - 1)
    return lo, hi


def remaining_probes(
    n: int, verdicts: Mapping[int, Verdict], mode: Mode, again: frozenset[int] = frozenset()
) -> int:
    """Probes still needed at most when none is skipped: re-probes, untested ends, then log2
    of the candidates left."""
    ends = sum(1 for i in (0, n - 1) if i not in verdicts and i not in again)
    lo, hi = bounds(n, verdicts, mode)
    left = sum(1 for i in range(lo + 1, hi) if i not in verdicts and i not in again)
    return len(again) + ends + (math.ceil(math.log2(left + 1)) if left > 0 else 0)


def posterior_batch(
    n: int,
    history: Mapping[int, Sequence[Verdict]],
    k: int,
    mode: Mode,
    policy: Policy,
    prefer: frozenset[int] = frozenset(),
    running: frozenset[int] = frozenset(),
    old_end_known: bool = False,
    trials: Sequence[tuple[int, str, Verdict]] = (),
    closed: frozenset[int] = frozenset(),
    starts: Mapping[int, Sequence[Start]] | None = None,
    trial_starts: Sequence[Start] = (),
    known: Sequence[tuple[int, Verdict, float]] = (),
    costs: Mapping[int, float] | None = None,
    weights: Sequence[float] | None = None,
) -> list[int] | Outcome:
    """Up to `k` indices to probe now besides those `running`, or the Outcome, when verdicts
    may lie (posterior.py): every probe of each index counts, a candidate may be probed
    again, and the answer is the hypothesis whose posterior reaches `policy.confidence`.
    `costs`: the cheapest of those that tell nearly as much (posterior.cheapest).

    The ends go first (each is the evidence of its side); an end that cannot be tested ends
    the search as today. A candidate no probe could test leaves the pool; hypotheses only
    such candidates separate are one group (an ambiguous answer). `old_end_known`: index 0
    (an untested merge base) is taken as old-state. `trials`: confirmation trials weighed
    too (posterior.believe); `closed`: candidates not stopped at for a confirmation
    (posterior.decide). `starts`: where and when each probe of `history` ran (aligned with
    it) and `trial_starts` each trial's: given, a culprit is an answer only once no one burst
    of starts or one slot could have given it (posterior.fragile); until then its verdicts
    are probed again. `known`: verdicts known from elsewhere (index, verdict, lie rate), weighed
    from the first start (posterior.believe); an answer never rests on them alone: where its
    culprit or its parent has no verdict from this run, they are probed first. `weights`: the
    prior weights of candidates 1..n-1 (posterior.believe; `search.priors`). An empty list:
    wait for a running probe.
    """
    if n < 2:
        raise ValueError("a search needs at least the two ends")
    new = mode.new_state
    tested = {i: [v for v in seen if not _untestable(v)] for i, seen in history.items()}
    untestable = frozenset(i for i, seen in history.items() if seen and not tested[i])
    ends = (n - 1,) if old_end_known else (0, n - 1)
    for end in ends:
        if end in untestable:
            v = combined(history[end])
            return Outcome(
                Status.ERROR, None, (), f"{_end_name(mode, end == n - 1)} could not be tested "
                f"({v.value})"
            )  # fmt: skip
    waiting = [e for e in ends if e not in history and e not in running]
    pool = frozenset(range(n)) - untestable - (frozenset({0}) if old_end_known else frozenset())
    if waiting:
        if waiting != [n - 1] or k < 2:
            return waiting[:k]
        # the bad end beside the probes that tell most were it bad (as the user says it is):
        # one round saved on k slots; where it tests good they told nothing
        told = believe(n, {**tested, n - 1: [new]}, new, policy, weights,
                       old_end_known=old_end_known, trials=trials, known=known)  # fmt: skip
        beside = decide(told, policy, new, pool - {n - 1}, 0,
                        BatchAsk(k - 1, running, prefer, costs), closed)  # fmt: skip
        return [n - 1, *beside.probes]
    if starts is None:
        belief = believe(n, tested, new, policy, weights, old_end_known=old_end_known,
                         trials=trials, known=known)  # fmt: skip
    else:  # a place whose verdicts stand apart from the others' may be a bad one
        every = _placed(history, starts, trials, trial_starts, pad=True)
        belief = placed_belief(n, every, new, policy, weights, old_end_known, known)
    spent = sum(len(seen) for seen in history.values())
    decision = decide(belief, policy, new, pool, spent, BatchAsk(k, running, prefer, costs), closed)

    def fragile_at(top: int) -> tuple[int, ...]:
        """What to probe again before `top` is an answer (posterior.fragile)."""
        placed = _placed(history, starts or {}, trials, trial_starts)
        return fragile(n, placed, new, policy, top, old_end_known, known, weights)

    if decision.probes:
        if starts is None or len(decision.probes) < 2:
            return list(decision.probes)
        return _steadied(belief, decision, pool, running, new, fragile_at)
    top = decision.answer

    def first(need: Sequence[int], why: str) -> list[int] | Outcome:
        """`need` probed (up to k, besides those running) before `top` is an answer; once the
        budget is spent or none of them can run, an ambiguous answer that says `why`."""
        wanted = [i for i in need if i in pool and i not in running][:k]
        if spent < policy.budget(n, belief.rates) and (wanted or running):
            return wanted
        return _posterior_outcome(history, belief, decision, mode, policy, spent, why=why)

    if known and top is not None and 0 < top < n:
        # the culprit and its parent are probed here: known verdicts narrow, never answer
        unprobed = [i for i in (top, top - 1) if not tested.get(i)]
        if unprobed:
            return first(unprobed, "before {likeliest} and its parent were probed here: it "
                         "rests on verdicts known from elsewhere")  # fmt: skip
    if starts is not None and top is not None and not decision.provisional:
        again = fragile_at(top)  # an end's answer too: "already bad", "no change"
        if again:
            return first(again, "while the verdicts that name {likeliest} could all come from "
                         "one burst of starts or one slot: probe it again elsewhere")  # fmt: skip
    if decision.answer is None and not decision.group and not decision.exhausted:
        return []
    settle: tuple[int, ...] = ()
    if decision.exhausted:
        more = replace(policy, max_probes=spent + 1)
        settle = decide(
            belief, more, new, pool, spent, BatchAsk(1, prefer=prefer)
        ).probes  # as `report` says it
    return _posterior_outcome(history, belief, decision, mode, policy, spent, settle)


def _placed(
    history: Mapping[int, Sequence[Verdict]],
    starts: Mapping[int, Sequence[Start]],
    trials: Sequence[tuple[int, str, Verdict]],
    trial_starts: Sequence[Start],
    pad: bool = False,
) -> Placed:
    """Each verdict and each trial with where and when it ran (posterior.fragile's input: a
    verdict whose start is not known left out; `pad`: kept, a place of its own)."""
    observed = [
        (i, v, s)
        for i, seen in history.items()
        for v, s in zip(
            seen, _pad(starts.get(i, ()), seen) if pad else starts.get(i, ()), strict=False
        )
        if not _untestable(v)
    ]
    weighed = [(i, kind, v, s) for (i, kind, v), s in zip(trials, _pad(trial_starts, trials),
                                                          strict=True)]  # fmt: skip
    return Placed(observed, weighed)


def _steadied(
    belief: Belief,
    decision: Decision,
    pool: frozenset[int],
    running: frozenset[int],
    new: Verdict,
    fragile_at: Callable[[int], tuple[int, ...]],
) -> list[int]:
    """A batch of several probes with the one that tells least beside the others (posterior.
    spare) traded for the re-probe the likeliest culprit's answer will need on another slot
    (posterior.fragile): taken in this round, on a slot that would tell little, rather than in
    a round of its own after the confirmation (two slots, no lie: the parent's good verdict
    and the culprit's bad one on one slot each, so no one slot names it alone)."""
    picks = list(decision.probes)
    traded = spare(belief, picks, running, new)
    top = belief.top()
    if traded is None or not 0 < top < belief.n:
        return picks
    again = fragile_at(top)
    wanted = [i for i in again if i in pool and i not in running and i not in picks]
    if wanted:
        picks[picks.index(traded)] = wanted[0]
    return picks


def _pad(starts: Sequence[Start], items: Sequence[object]) -> list[Start]:
    """One Start per item: those given, then unknown ones (a place of its own each)."""
    return [*starts[: len(items)], *[Start()] * max(0, len(items) - len(starts))]


def _posterior_outcome(
    history: Mapping[int, Sequence[Verdict]],
    belief: Belief,
    decision: Decision,
    mode: Mode,
    policy: Policy,
    spent: int,
    settle: tuple[int, ...] = (),
    why: str = "",
) -> Outcome:
    """The posterior's answer as the search's Outcome, with how sure it is. `why`: the
    answer is held back (the budget spent, or nothing left that could be probed) before
    its evidence stands on its own: said after "the probe budget ... is spent " with
    `{likeliest}` for the most likely culprit (posterior_batch's `first`)."""
    n, new = belief.n, mode.new_state
    tested = {i: [v for v in seen if not _untestable(v)] for i, seen in history.items()}
    top = decision.answer if decision.answer is not None else belief.top()
    against = disagreeing(tested, top, new)
    again = tuple(i for i, seen in sorted(history.items()) if len(seen) > 1)
    credible = belief.credible(policy.confidence)
    held = belief.of(top)

    def sure(p: float) -> Confidence:
        return Confidence(p, credible, tuple(against), belief.rates, spent, again,
                          belief.of(n), policy.confidence, settle,
                          policy.budget(n, belief.rates))  # fmt: skip

    said = f"posterior {held:.3f}"
    if against:
        said += f"; {len(against)} verdict(s) disagreed"
    if decision.answer in (0, n) and why:
        likeliest = (
            f"{_end_name(mode, False)} as already {new.value} ({said})"
            if decision.answer == 0
            else f"{_end_name(mode, True)} as {mode.old_state.value} ({said})"
        )
        return Outcome(
            Status.AMBIGUOUS, None, (),
            f"the probe budget ({policy.budget(n, belief.rates)}, search.max_probes) is spent "
            + why.format(likeliest=likeliest), belief=sure(held)
        )  # fmt: skip
    if decision.answer == 0:
        return Outcome(
            Status.ERROR, None, (), f"{_end_name(mode, False)} is already {new.value}: the "
            f"change is older than this range ({said})", belief=sure(held)
        )  # fmt: skip
    if decision.answer == n:
        return Outcome(
            Status.NO_REGRESSION, None, (), f"{_end_name(mode, True)} tests "
            f"{mode.old_state.value}: no change in this range ({said})", belief=sure(held)
        )  # fmt: skip
    if decision.answer is not None and why:
        likeliest = f"the most likely first {new.value} ({said})"
        return Outcome(
            Status.AMBIGUOUS, None, (top - 1, top),
            f"the probe budget ({policy.budget(n, belief.rates)}, search.max_probes) is spent "
            + why.format(likeliest=likeliest), belief=sure(held)
        )  # fmt: skip
    if decision.answer is not None and decision.provisional:
        return Outcome(
            Status.FOUND, top, (top - 1, top),
            f"first {new.value} candidate found ({said}; its confirmation's trials, weighed, "
            f"must carry it to {policy.confidence:g})", belief=sure(held)
        )  # fmt: skip
    if decision.answer is not None:
        return Outcome(
            Status.FOUND, top, (top - 1, top),
            f"first {new.value} candidate found ({said})", belief=sure(held)
        )  # fmt: skip
    if decision.group:
        first, last = decision.group[0], decision.group[-1]
        inner = tuple(c for c in decision.group if 0 < c < n)
        lo = max(first - 1, 0)
        mass = belief.of_range(first, last)
        tail = " (or no change at all)" if last == n else ""
        return Outcome(
            Status.AMBIGUOUS, None, (lo, *inner),
            f"{len(inner) - 1} untestable candidate(s) border the change: any of "
            f"{len(inner)} could be the first {new.value}{tail} (together posterior {mass:.3f})",
            belief=sure(mass),
        )  # fmt: skip
    inner = tuple(c for c in credible if 0 < c < n)
    lo = max(min(inner) - 1, 0) if inner else 0
    likeliest = (
        "no change in the range"
        if top == n
        else f"{_end_name(mode, False)} already {new.value}"
        if top == 0
        else f"the most likely first {new.value}"
    )
    return Outcome(
        Status.AMBIGUOUS, None, (lo, *inner),
        f"the probe budget ({policy.budget(n, belief.rates)}, search.max_probes) is spent "
        "below the "
        f"confidence {policy.confidence}: {likeliest} holds only "
        f"{held:.3f}; {len(credible)} hypotheses hold {policy.confidence}",
        belief=sure(held),
    )  # fmt: skip


Seen = Mapping[str, Verdict] | Mapping[str, Sequence[Verdict]]
"""Commit → its verdict, or every verdict its probes gave, in order."""


def history_of(seen: Seen) -> dict[str, tuple[Verdict, ...]]:
    """Commit → every verdict its probes gave, in order."""
    return {c: (v,) if isinstance(v, Verdict) else tuple(v) for c, v in seen.items()}


def contradicted(plan: Plan, verdicts: Seen) -> frozenset[str]:
    """Commits whose verdicts contradict a neighbour's (a reversal: one in the new state
    before one in the old, `reversals`) or each other (good and bad both seen). A re-probe of
    one is not believed on what an earlier start compiled: it starts on an empty engine
    cache (runner, launchers/cached.py). Pure."""
    history = history_of(verdicts)
    index = {c.commit: i for i, c in enumerate(plan.sequence)}
    told = {index[c]: combined(seen) for c, seen in history.items() if c in index and seen}
    pairs = reversals(told, plan.mode)
    flaky = {c for c, seen in history.items() if len({v for v in seen if not _untestable(v)}) > 1}
    return frozenset(plan.sequence[i].commit for pair in pairs for i in pair) | flaky


def left_of(
    plan: Plan, verdicts: Seen, *, reprobe: bool = False, policy: Policy = EXACT
) -> tuple[int, int]:
    """(candidates that could still be the first in the new state, probes still needed at
    most when none is skipped), for a person watching; when verdicts may lie, the credible
    set's size and the probes that would halve it down to one."""
    history = history_of(verdicts)
    index = {c.commit: i for i, c in enumerate(plan.sequence)}
    n = len(plan.sequence)
    if not policy.exact:
        mine = {index[c]: [v for v in seen if not _untestable(v)]
                for c, seen in history.items() if c in index}  # fmt: skip
        belief = believe(n, mine, plan.mode.new_state, policy, prior_weights(plan, policy),
                         trials=_trials(plan, policy), known=_known(plan, policy))  # fmt: skip
        size = len(belief.credible(policy.confidence))
        return size, (math.ceil(math.log2(size)) if size > 1 else 0) + 1
    settled = settle({index[c]: v for c, v in history.items() if c in index}, plan.mode, reprobe)
    lo, hi = bounds(n, settled.verdicts, plan.mode)
    anchor = 1 if plan.anchor is not None and plan.anchor.commit not in history else 0
    return hi - lo, remaining_probes(n, settled.verdicts, plan.mode, settled.again) + anchor


def max_probes(n: int) -> int:
    """Probes a search of n candidates (ends included) needs at most when none is skipped."""
    if n < 2:
        return n
    return 2 + math.ceil(math.log2(n - 1)) if n > 2 else 2


@dataclass(frozen=True)
class Plan:
    """The candidates of one search, and how they are ordered.

    When the old-end ref is not an ancestor of the new-end ref (a nightly on
    main against a tag on a release branch), `anchor` is that ref and
    `sequence[0]` is the merge base: the anchor is verified, then the merge
    base, then the commits the new end has and the old end lacks, as
    `git bisect` does.
    """

    mode: Mode
    sequence: tuple[Candidate, ...]
    """Old end first, new end last."""
    anchor: Candidate | None = None
    """The old-end ref itself, when sequence[0] is a merge base."""

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        """Every candidate the search may probe."""
        return ((self.anchor,) if self.anchor else ()) + self.sequence

    @property
    def good(self) -> Candidate:
        """The good end as the user named it."""
        old = self.anchor or self.sequence[0]
        return old if self.mode is Mode.REGRESSION else self.sequence[-1]

    @property
    def bad(self) -> Candidate:
        """The bad end as the user named it."""
        old = self.anchor or self.sequence[0]
        return self.sequence[-1] if self.mode is Mode.REGRESSION else old

    def max_probes(self) -> int:
        """Probes needed at most when nothing is skipped."""
        return max_probes(len(self.sequence)) + (1 if self.anchor else 0)


@dataclass(frozen=True)
class Answer:
    """The search's answer, in commits."""

    status: Status
    culprit: Candidate | None
    """The first candidate in the new state (first bad; first good with --find-fix)."""
    range: tuple[str, ...]
    """Last old-state commit, then every commit that could be the first new-state one."""
    message: str
    fix_range: tuple[str, str] | None = None
    """When the change predates the branch point: (merge base, old-end ref) holds its undoing."""
    reversals: tuple[tuple[str, str], ...] = ()
    """(new-state commit, old-state commit after it): where the verdicts were not monotone."""
    flaky: tuple[str, ...] = ()
    """Commits whose probes disagreed (good and bad): counted unsure."""
    notes: tuple[str, ...] = ()
    """What a person must know to trust the answer, a sentence each: verdicts not monotone,
    flaky builds, a merge base that could not be tested and what that cost."""
    sure: Sure | None = None
    """How sure the answer is (the posterior search: `search.flake` other than 0)."""


@dataclass(frozen=True)
class Sure:
    """An answer's posterior, in commits."""

    posterior: float
    """The posterior of the answer: the culprit's, or the group's when ambiguous."""
    credible: tuple[str, ...]
    """The fewest commits that hold the confidence as the first new-state one (the old end
    among them: it may be new already)."""
    no_change: float
    """The posterior that nothing changed in the range (the new end is in the old state)."""
    disagreed: tuple[tuple[str, Verdict], ...]
    """Each verdict that disagrees with the answer: (commit, what it said), in order."""
    again: tuple[str, ...]
    """Commits probed more than once."""
    rates: Rates
    """The lie rates the verdicts point to (their posterior mean)."""
    probes: int
    """Probes the search spent."""
    confidence: float
    """The posterior an answer needs (`search.confidence`)."""
    settle: tuple[str, ...] = ()
    """Below the confidence: the commits that would tell most, probed next."""
    budget: int = 0
    """The most probes the search could spend (`search.max_probes`)."""


@dataclass(frozen=True)
class _View:
    """A plan's verdicts as the index search reads them."""

    known: dict[int, Verdict]
    again: frozenset[int]
    flaky: frozenset[int]
    tested: dict[int, int]
    """Index → how many of its probes tested it (good or bad)."""
    reprobe: bool
    base: Verdict | None = None
    """The merge base's verdict when it could not be tested (taken as old-state)."""
    history: Mapping[int, Sequence[Verdict]] = field(default_factory=dict)
    """Index → every verdict of its probes, in order."""


def _view(plan: Plan, seen: Seen, reprobe: bool, exact: bool = True) -> Candidate | Answer | _View:
    """The good end, the anchor or the merge base while one is still to probe (alone, first:
    the golden is recorded from the good end), an Answer they settle, else the sequence's
    verdicts for the index search. Not `exact` (the posterior search): a merge base whose
    probes disagree is neither untestable nor settled; the posterior weighs it."""
    history = history_of(seen)
    mode, seq = plan.mode, plan.sequence
    if plan.good.commit not in history:
        return plan.good
    base_untested: Verdict | None = None
    if plan.anchor is not None:
        base = seq[0]
        for cand, name in ((plan.anchor, _end_name(mode, False)), (base, "the merge base")):
            if cand.commit not in history:
                return cand
            v = combined(history[cand.commit])
            said = {x for x in history[cand.commit] if not _untestable(x)}
            if not exact and cand is base and len(said) > 1:
                continue  # a verdict of it lied: index 0 of the posterior, as the old end
            if _untestable(v) and cand is base:
                base_untested = v  # git bisect warns and goes on; so do we (see _answer)
                continue
            if _untestable(v):
                return Answer(
                    Status.ERROR, None, (), f"{name} {cand.short} could not be tested ({v.value})"
                )
            if v is mode.new_state and cand is plan.anchor:
                return Answer(Status.ERROR, None, (), f"{name} {cand.short} is already {v.value}")
            if v is mode.new_state:
                return Answer(
                    Status.NO_REGRESSION,
                    None,
                    (),
                    f"the merge base {base.short} is already {v.value}: the change predates "
                    f"the branch point, and was undone between {base.short} and "
                    f"{plan.anchor.short} on the {mode.old_state.value} side",
                    fix_range=(base.commit, plan.anchor.commit),
                )
    index = {c.commit: i for i, c in enumerate(seq)}
    mine = {index[c]: v for c, v in history.items() if c in index}
    settled = settle(mine, mode, reprobe)
    known = dict(settled.verdicts)
    if base_untested is not None:
        known[0] = mode.old_state
    tested = {i: sum(1 for v in seen_i if not _untestable(v)) for i, seen_i in mine.items()}
    return _View(known, settled.again, settled.flaky, tested, reprobe, base_untested, mine)


def _answer(plan: Plan, outcome: Outcome, view: _View) -> Answer:
    """The index search's Outcome in commits, with what a person must know to trust it."""
    mode, seq = plan.mode, plan.sequence
    old, new = mode.old_state.value, mode.new_state.value
    status, message = outcome.status, outcome.message
    culprit = seq[outcome.culprit] if outcome.culprit is not None else None
    span = tuple(seq[i].commit for i in outcome.range)
    notes: list[str] = []
    pairs = outcome.reversals
    if pairs:
        shown = ", ".join(
            f"{old} at {seq[b].short} after {new} at {seq[a].short}" for a, b in pairs
        )
        message += f"; verdicts not monotone ({shown})"
        confirmed = all(view.tested.get(i, 0) >= 2 for pair in pairs for i in pair)
        if confirmed:
            said = (
                "Each of them tested the same when probed again: an earlier change, since "
                "undone, lies before the answer."
            )
        elif view.reprobe:
            said = "A second probe could not confirm every one of them (it was untestable)."
        else:
            said = "They were not probed again (`probe.repeats: auto` would)."
        notes.append(
            f"Verdicts are not monotone: {shown}. {said} The answer is the last {old}→{new} "
            f"step, the one the {new} end still has."
        )
    for i in sorted(view.flaky):
        notes.append(
            f"Flaky: {seq[i].short} tested both good and bad; it counts as unsure "
            "(untestable), never as evidence."
        )
    if view.base is not None and plan.anchor is not None:
        base, anchor = seq[0], plan.anchor
        what = (
            f"The merge base {base.short} could not be tested ({view.base.value}); as git "
            f"bisect does, the search went on as if it were {old}"
        )
        if status in (Status.FOUND, Status.AMBIGUOUS) and outcome.range[0] == 0:
            status, culprit = Status.AMBIGUOUS, None
            span = (anchor.commit, *span)
            message = (
                f"the merge base {base.short} could not be tested ({view.base.value}) and "
                f"nothing after it tested {old}: the first {new} is one of "
                f"{len(span) - 2} candidate(s) after it, or the change predates the branch "
                "point"
            )
            notes.append(
                f"{what}. That cost the answer: nothing after the merge base tested {old}, so "
                f"the change may as well predate the branch point (then it was undone between "
                f"{base.short} and {anchor.short} on the {old} side: bisect that range with "
                "--find-fix)."
            )
        elif status in (Status.FOUND, Status.AMBIGUOUS):
            notes.append(
                f"{what}. That cost nothing here: {seq[outcome.range[0]].short}, after it, "
                f"tested {old}."
            )
        else:
            notes.append(f"{what}. That cost nothing here: the search ended at the ends.")
    sure = None
    if outcome.belief is not None:
        b = outcome.belief
        n = len(seq)
        sure = Sure(
            b.posterior,
            tuple(seq[c].commit for c in b.credible if c < n),
            b.no_change,
            tuple((seq[i].commit, v) for i, v in b.disagreed),
            tuple(seq[i].commit for i in b.again),
            b.rates,
            b.probes,
            b.confidence,
            tuple(seq[i].commit for i in b.settle),
            b.budget,
        )
        for i in sorted({i for i, _ in b.disagreed}):
            against = [v.value for j, v in b.disagreed if j == i]
            later = [w.value for w in view.history.get(i, ())]
            times = f"{len(against)} of {len(later)} times" if len(later) > 1 else "once"
            notes.append(
                f"A verdict disagreed with the answer: {seq[i].short} tested {against[0]} "
                f"{times} (its probes: {', '.join(later)}); the posterior weighs it as a "
                f"likely lie (lie rates: good read bad {b.rates.false_bad:.3f}, bad read good "
                f"{b.rates.false_good:.3f})."
            )
    return Answer(
        status,
        culprit,
        span,
        message,
        reversals=tuple((seq[a].commit, seq[b].commit) for a, b in pairs),
        flaky=tuple(seq[i].commit for i in sorted(view.flaky)),
        notes=tuple(notes),
        sure=sure,
    )


def _indices(plan: Plan, commits: frozenset[str]) -> frozenset[int]:
    index = {c.commit: i for i, c in enumerate(plan.sequence)}
    return frozenset(index[c] for c in commits if c in index)


def _positions(plan: Plan) -> dict[str, int]:
    return {c.commit: i for i, c in enumerate(plan.sequence)}


def _by_index(plan: Plan, starts: Mapping[str, Sequence[Start]]) -> dict[int, Sequence[Start]]:
    index = _positions(plan)
    return {index[c]: s for c, s in starts.items() if c in index}


def _trials(plan: Plan, policy: Policy) -> list[tuple[int, str, Verdict]]:
    """The policy's confirmation trials by candidate index (those of another range left out)."""
    index = {c.commit: i for i, c in enumerate(plan.sequence)}
    return [(index[t.commit], t.kind, t.verdict) for t in policy.evidence if t.commit in index]


def _known(plan: Plan, policy: Policy) -> list[tuple[int, Verdict, float]]:
    """The policy's verdicts known from elsewhere by candidate index (those of commits outside
    the range left out)."""
    index = _positions(plan)
    return [(index[k.commit], k.verdict, k.rate) for k in policy.known if k.commit in index]


def prior_weights(plan: Plan, policy: Policy) -> list[float] | None:
    """The prior weight of each candidate after the old end (`Policy.prior`, by commit; 1 where
    not named), or None (uniform) where the policy names none."""
    if not policy.prior:
        return None
    given = dict(policy.prior)
    return [given.get(c.commit, 1.0) for c in plan.sequence[1:]]


def _closed(plan: Plan, policy: Policy) -> frozenset[int]:
    """The candidates the search does not stop at for a confirmation: each looked at whose
    next look would not be weighed (posterior.next_look)."""
    looked = {c for c, _ in policy.looks}
    return _indices(
        plan, frozenset(c for c in looked if not next_look(policy.looks, c, policy.evidence)[1])
    )


def plan_step(
    plan: Plan,
    verdicts: Seen,
    prefer: frozenset[str] = frozenset(),
    *,
    reprobe: bool = False,
    policy: Policy = EXACT,
) -> Candidate | Answer:
    """The next candidate to probe, or the Answer. `verdicts` (a verdict, or every probe's)
    and `prefer` (commits with a ready artifact, probed first: coarse then fine) are keyed by
    commit; `reprobe` (settle): both sides of a reversal are probed again before either is
    used. `policy`: how verdicts are weighed (EXACT: as facts; else the posterior search).

    The good end goes first in both modes: the golden is recorded from it.
    """
    if not policy.exact:
        batch = plan_batch(plan, verdicts, 1, prefer, policy=policy)
        if isinstance(batch, Answer):
            return batch
        return batch[0]
    view = _view(plan, verdicts, reprobe)
    if not isinstance(view, _View):
        return view
    step = next_step(len(plan.sequence), view.known, plan.mode, _indices(plan, prefer), view.again)
    if isinstance(step, int):
        return plan.sequence[step]
    return _answer(plan, step, view)


def plan_batch(
    plan: Plan,
    verdicts: Seen,
    k: int,
    prefer: frozenset[str] = frozenset(),
    running: frozenset[str] = frozenset(),
    *,
    reprobe: bool = False,
    policy: Policy = EXACT,
    starts: Mapping[str, Sequence[Start]] | None = None,
    costs: Mapping[str, float] | None = None,
) -> list[Candidate] | Answer:
    """Up to `k` candidates to probe now besides those `running` (next_batch, or
    posterior_batch when verdicts may lie), or the Answer. `costs`: what making each
    candidate runnable costs (launchers.price): of those that tell nearly as much, the
    cheapest goes first.

    The good end goes alone, first: the golden is recorded from it; so do the anchor and the
    merge base of a range whose ends are on two branches. An empty list: wait (never while
    nothing runs). `starts`: where and when each of `verdicts`' probes ran, in its order
    (slot evidence: posterior_batch)."""
    view = _view(plan, verdicts, reprobe and policy.exact, policy.exact)
    if isinstance(view, Answer):
        return view
    if isinstance(view, Candidate):
        return [] if running else [view]
    seq = plan.sequence
    if not policy.exact:
        view = replace(view, flaky=frozenset())  # a verdict that disagrees is weighed, not dropped
        found = posterior_batch(
            len(seq),
            view.history,
            k,
            plan.mode,
            policy,
            _indices(plan, prefer),
            _indices(plan, running),
            old_end_known=view.base is not None,
            trials=_trials(plan, policy),
            closed=_closed(plan, policy),
            starts=None if starts is None else _by_index(plan, starts),
            trial_starts=[t.start for t in policy.evidence if t.commit in _positions(plan)],
            known=_known(plan, policy),
            costs=_priced(plan, costs),
            weights=prior_weights(plan, policy),
        )
        if isinstance(found, Outcome):
            return _answer(plan, found, view)
        return [seq[i] for i in found]
    batch = next_batch(
        len(seq),
        view.known,
        k,
        plan.mode,
        _indices(plan, prefer),
        _indices(plan, running),
        view.again,
        _priced(plan, costs),
    )
    if isinstance(batch, Outcome):
        return _answer(plan, batch, view)
    return [seq[i] for i in batch]


def _priced(plan: Plan, costs: Mapping[str, float] | None) -> dict[int, float] | None:
    """`costs` by index of the plan's sequence."""
    if not costs:
        return None
    return {i: costs[c.commit] for i, c in enumerate(plan.sequence) if c.commit in costs}


def no_longer_needed(
    plan: Plan,
    verdicts: Seen,
    running: frozenset[str],
    *,
    reprobe: bool = False,
    policy: Policy = EXACT,
    starts: Mapping[str, Sequence[Start]] | None = None,
) -> frozenset[str]:
    """Running probes to cancel: the search is over, or (verdicts taken as facts) they lie
    outside the open interval; when verdicts may lie, every running probe still tells."""
    if not policy.exact:
        step = plan_batch(plan, verdicts, 0, running=running, policy=policy, starts=starts)
        over = isinstance(step, Answer)
        return running if over else frozenset()
    view = _view(plan, verdicts, reprobe)
    if isinstance(view, Answer):
        return running
    if isinstance(view, Candidate):
        return frozenset()
    seq = plan.sequence
    if isinstance(next_step(len(seq), view.known, plan.mode, again=view.again), Outcome):
        return running
    mine = _indices(plan, running)
    gone = obsolete(len(seq), view.known, mine, plan.mode, view.again)
    return frozenset(seq[i].commit for i in gone)


def lookahead(
    plan: Plan,
    verdicts: Seen,
    current: Candidate,
    prefer: frozenset[str] = frozenset(),
    *,
    reprobe: bool = False,
    policy: Policy = EXACT,
) -> list[Candidate]:
    """The candidates probed right after `current`, for each verdict it may get (for prefetch)."""
    history = history_of(verdicts)
    found: list[Candidate] = []
    for verdict in (plan.mode.new_state, plan.mode.old_state, Verdict.SKIP):
        then = _with(history, current, verdict)
        step = plan_step(plan, then, prefer, reprobe=reprobe, policy=policy)
        if isinstance(step, Candidate) and step not in found:
            found.append(step)
    return found


def settles(
    plan: Plan,
    verdicts: Seen,
    current: Candidate,
    *,
    reprobe: bool = False,
    policy: Policy = EXACT,
) -> bool:
    """Whether `current`'s verdict, bad or good, ends the search: its probe is then the
    evidence of the answer (the first bad or the last good), and runs every check rather
    than being probed again in full after the search (`probe.early_stop`)."""
    history = history_of(verdicts)
    for verdict in (plan.mode.new_state, plan.mode.old_state):
        then = _with(history, current, verdict)
        if not isinstance(plan_step(plan, then, reprobe=reprobe, policy=policy), Answer):
            return False
    return True


def _with(
    history: Mapping[str, tuple[Verdict, ...]], current: Candidate, verdict: Verdict
) -> dict[str, tuple[Verdict, ...]]:
    """The verdicts with one more of `current`'s (what the search would make of it)."""
    return {**history, current.commit: (*history.get(current.commit, ()), verdict)}


def build_plan(
    source: Source,
    good_ref: str,
    bad_ref: str,
    mode: Mode,
    resolve: Callable[[str, str], Candidate] | None = None,
) -> Plan:
    """Resolve the two ends (`resolve`, default the source's) and list the candidates between."""
    resolve = resolve or source.resolve
    good = resolve(good_ref, "candidates.good")
    bad = resolve(bad_ref, "candidates.bad")
    old, new = (good, bad) if mode is Mode.REGRESSION else (bad, good)
    old_key, new_key = (
        ("candidates.good", "candidates.bad")
        if mode is Mode.REGRESSION
        else ("candidates.bad", "candidates.good")
    )
    if old.commit == new.commit:
        raise ConfigError(f"candidates: good and bad are the same commit {good.short}")
    # The ends keep what resolved them (an image named as an end runs that image).
    between = [*source.between(old.commit, new.commit)[:-1], new]
    if source.is_ancestor(old.commit, new.commit):
        return Plan(mode, (old, *between))
    if source.is_ancestor(new.commit, old.commit):
        hint = " (looking for a fix? use --find-fix)" if mode is Mode.REGRESSION else ""
        raise ConfigError(
            f"{new_key}: {new_key.split('.')[1]} {new.short} is older than "
            f"{old_key.split('.')[1]} {old.short}{hint}"
        )
    base = source.merge_base(old.commit, new.commit)
    return Plan(mode, (base, *between), anchor=old)


def _by_recency(slots: Sequence[int], used: Sequence[int | None]) -> list[int]:
    """`slots` with those in `used` (oldest first) after the others, the most recent last."""
    last = {slot: at for at, slot in enumerate(used) if slot is not None}
    return sorted(slots, key=lambda s: (s in last, last.get(s, -1), s))


def pick_slot(k: int, taken: set[int], tried: Sequence[int] | set[int]) -> int:
    """The slot a probe starts on (the runner's placement): the lowest free one that has not
    probed its candidate yet (a restart elsewhere is the independent observation a re-probe
    is for: another GPU, host or node, where a slot is one), else the free one that probed
    it least recently (`tried`: the slots of its probes, oldest first): re-probes take the
    slots in turn, since the answer may need a verdict of it from each (posterior.fragile; on
    one slot always, two slots under lies left 15 % of runs without an answer). Pure."""
    return _by_recency([i for i in range(k) if i not in taken], list(tried))[0]


def broken_for_sure(slots: Sequence[int], exact: bool) -> bool:
    """Whether the good end's starts whose answers were broken (`slots`: the slot of each,
    in order) are enough to stop the run on (errors.BrokenGoodEnd). With no lie assumed
    (`exact`), two starts: the first may have glitched. Under lies, never on what one place
    or one burst could have given (posterior.BURST): broken on two slots, or on more than a
    burst's starts in one; the runner starts it again on a slot that has not served it
    first (pick_slot). Pure.

    >>> broken_for_sure([0], exact=False), broken_for_sure([0, 1], exact=False)
    (False, True)
    >>> broken_for_sure([0, 0, 0], exact=False), broken_for_sure([0, 0, 0, 0], exact=False)
    (False, True)
    >>> broken_for_sure([0, 0], exact=True)
    True
    """
    if exact:
        return len(slots) >= 2
    return len(set(slots)) >= 2 or len(slots) > BURST


def trial_slots(k: int, busy: Sequence[int | None]) -> tuple[int, ...]:
    """The slots a confirmation's trials run on, best first (services/confirm.py): every slot
    of k, those where the verdicts they check ran (`busy`: the slots of the culprit's and its
    parent's probes, most recent last) after the others, the most recent of them last. Pure.

    >>> trial_slots(4, [0, 0])
    (1, 2, 3, 0)
    >>> trial_slots(1, [0])
    (0,)
    """
    return tuple(_by_recency(range(max(1, k)), busy))
