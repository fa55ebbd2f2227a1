"""The bisection algorithm: verdicts in, the next probe or batch of k (or the answer) out.

Pure: no I/O, no clock (build_plan asks a Source for the candidates, through its
Protocol). Candidates are indices into a sequence ordered oldest to newest; index 0 is
the *old end*, index n-1 the *new end*.

    regression mode:   old end = good ........................ new end = bad
    find-fix mode:     old end = bad  ........................ new end = good

    0    lo              mid              hi               n-1
    |-----|---------------x----------------|----------------|
     known old-state    next probe      first known new-state

The culprit is the first candidate in the new state. The ends are verified
first (the good end must test good, the bad end bad); then the midpoint of
the open interval (lo, hi) is probed. Untestable candidates (skip, unsure)
are stepped around; when they border the culprit the answer is ambiguous and
`range` lists every candidate that could be the first in the new state.

With k slots (next_batch, plan_batch) the open interval is split into k+1 parts per
round, a slot that frees early gets the widest gap the running probes leave, and a
running probe outside the interval is no longer needed (obsolete, no_longer_needed).
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .errors import ConfigError
from .model import Candidate, Verdict
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


def _untestable(v: Verdict) -> bool:
    return v in (Verdict.SKIP, Verdict.UNSURE)


def _end_name(mode: Mode, new: bool) -> str:
    state = mode.new_state if new else mode.old_state
    return f"the {state.value} end"


def next_step(
    n: int,
    verdicts: Mapping[int, Verdict],
    mode: Mode = Mode.REGRESSION,
    prefer: frozenset[int] = frozenset(),
) -> int | Outcome:
    """Return the index to probe next, or the Outcome when the search is over.

    `prefer` (coarse then fine): while the open interval holds preferred indices
    (a ready artifact: an image, a published wheel, a cached build), the one
    nearest the midpoint is probed; then any. Every probe still halves what it can.
    """
    if n < 2:
        raise ValueError("a search needs at least the two ends")
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
                )
            return Outcome(
                Status.ERROR,
                None,
                (),
                f"{_end_name(mode, False)} is already {v.value}: "
                "the change is older than this range",
            )

    hi = min(i for i, v in verdicts.items() if v is mode.new_state)
    lo = max(i for i, v in verdicts.items() if v is mode.old_state and i < hi)
    untested = [i for i in range(lo + 1, hi) if i not in verdicts]
    if not untested:
        between = tuple(range(lo + 1, hi))  # all untestable
        if not between:
            return Outcome(
                Status.FOUND, hi, (lo, hi), f"first {mode.new_state.value} candidate found"
            )
        return Outcome(
            Status.AMBIGUOUS,
            None,
            (lo, *between, hi),
            f"{len(between)} untestable candidate(s) border the change: "
            f"any of {len(between) + 1} could be the first {mode.new_state.value}",
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
) -> list[int] | Outcome:
    """Up to `k` indices to probe now besides those `running`, or the Outcome when the search
    is over (running probes then are no longer needed).

    Unverified ends come first. The free slots are shared among the gaps that the running
    probes leave in the open interval, each slot to the gap whose parts are then widest;
    a gap with s slots gets the s points that split it into s+1 equal parts (nearest a
    `prefer`red index when the gap holds one). With nothing running and k slots, that splits
    the interval into k+1 parts (Pinpoint); a slot that frees while others run gets a
    speculative point in the widest gap left. An empty list: wait for a running probe.
    """
    step = next_step(n, verdicts, mode, prefer)
    if isinstance(step, Outcome):
        return step
    picks = [end for end in (0, n - 1) if end not in verdicts and end not in running][:k]
    lo, hi = bounds(n, verdicts, mode)
    free = [i for i in range(lo + 1, hi) if i not in verdicts and i not in running]
    slots = k - len(picks)
    if slots <= 0 or not free:
        return picks
    marks = sorted({lo, hi, *(i for i in running if lo < i < hi)})
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
            taken.add(min(ready, key=lambda i: (abs(i - target), i)))
    return picks + sorted(taken)


def obsolete(
    n: int, verdicts: Mapping[int, Verdict], running: frozenset[int], mode: Mode
) -> frozenset[int]:
    """Running probes whose answer is no longer needed: outside the open interval (an end
    is always needed: it verifies the range)."""
    lo, hi = bounds(n, verdicts, mode)
    return frozenset(i for i in running if (i <= lo or i >= hi) and i not in (0, n - 1))


def bounds(
    n: int, verdicts: Mapping[int, Verdict], mode: Mode = Mode.REGRESSION
) -> tuple[int, int]:
    """(lo, hi): the last index known in the old state and the first known in the new state
    after it; the ends stand for themselves until tested. The culprit is in lo+1..hi."""
    lo = max((i for i, v in verdicts.items() if v is mode.old_state), default=0)
    hi = min((i for i, v in verdicts.items() if v is mode.new_state and i > lo), default=n - 1)
    return lo, hi


def remaining_probes(n: int, verdicts: Mapping[int, Verdict], mode: Mode) -> int:
    """Probes still needed at most when none is skipped: untested ends, then log2 of the
    candidates left."""
    ends = sum(1 for i in (0, n - 1) if i not in verdicts)
    lo, hi = bounds(n, verdicts, mode)
    left = hi - lo - 1 - sum(1 for i in verdicts if lo < i < hi)
    return ends + (math.ceil(math.log2(left + 1)) if left > 0 else 0)


def left_of(plan: Plan, verdicts: Mapping[str, Verdict]) -> tuple[int, int]:
    """(candidates that could still be the first in the new state, probes still needed at
    most when none is skipped), for a person watching."""
    index = {c.commit: i for i, c in enumerate(plan.sequence)}
    known = {index[c]: v for c, v in verdicts.items() if c in index}
    n = len(plan.sequence)
    lo, hi = bounds(n, known, plan.mode)
    anchor = 1 if plan.anchor is not None and plan.anchor.commit not in verdicts else 0
    return hi - lo, remaining_probes(n, known, plan.mode) + anchor


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


def plan_step(
    plan: Plan, verdicts: Mapping[str, Verdict], prefer: frozenset[str] = frozenset()
) -> Candidate | Answer:
    """The next candidate to probe, or the Answer. `verdicts` and `prefer` (commits with a
    ready artifact, probed first: coarse then fine) are keyed by commit.

    The good end goes first in both modes: the golden is recorded from it.
    """
    mode, seq = plan.mode, plan.sequence
    if plan.good.commit not in verdicts:
        return plan.good
    if plan.anchor is not None:
        base = seq[0]
        for cand, name in ((plan.anchor, _end_name(mode, False)), (base, "the merge base")):
            v = verdicts.get(cand.commit)
            if v is None:
                return cand
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
    known = {i: verdicts[c.commit] for i, c in enumerate(seq) if c.commit in verdicts}
    preferred = frozenset(i for i, c in enumerate(seq) if c.commit in prefer)
    step = next_step(len(seq), known, mode, preferred)
    if isinstance(step, int):
        return seq[step]
    return Answer(
        step.status,
        seq[step.culprit] if step.culprit is not None else None,
        tuple(seq[i].commit for i in step.range),
        step.message,
    )


def plan_batch(
    plan: Plan,
    verdicts: Mapping[str, Verdict],
    k: int,
    prefer: frozenset[str] = frozenset(),
    running: frozenset[str] = frozenset(),
) -> list[Candidate] | Answer:
    """Up to `k` candidates to probe now besides those `running` (next_batch), or the Answer.

    The good end goes alone, first: the golden is recorded from it; so do the anchor and the
    merge base of a range whose ends are on two branches. An empty list: wait."""
    step = plan_step(plan, verdicts, prefer)
    if isinstance(step, Answer):
        return step
    first = plan.good.commit not in verdicts or (
        plan.anchor is not None
        and any(c.commit not in verdicts for c in (plan.anchor, plan.sequence[0]))
    )
    if first:
        return [] if running else [step]
    seq = plan.sequence
    index = {c.commit: i for i, c in enumerate(seq)}
    known = {index[c]: v for c, v in verdicts.items() if c in index}
    batch = next_batch(
        len(seq),
        known,
        k,
        plan.mode,
        frozenset(index[c] for c in prefer if c in index),
        frozenset(index[c] for c in running if c in index),
    )
    if isinstance(batch, Outcome):
        answer = plan_step(plan, verdicts, prefer)  # the same answer, in commits
        assert isinstance(answer, Answer)
        return answer
    return [seq[i] for i in batch]


def no_longer_needed(
    plan: Plan, verdicts: Mapping[str, Verdict], running: frozenset[str]
) -> frozenset[str]:
    """Running probes to cancel: the search is over, or they lie outside the open interval."""
    if isinstance(plan_step(plan, verdicts), Answer):
        return running
    seq = plan.sequence
    index = {c.commit: i for i, c in enumerate(seq)}
    known = {index[c]: v for c, v in verdicts.items() if c in index}
    mine = frozenset(index[c] for c in running if c in index)
    return frozenset(seq[i].commit for i in obsolete(len(seq), known, mine, plan.mode))


def lookahead(
    plan: Plan,
    verdicts: Mapping[str, Verdict],
    current: Candidate,
    prefer: frozenset[str] = frozenset(),
) -> list[Candidate]:
    """The candidates probed right after `current`, for each verdict it may get (for prefetch)."""
    found: list[Candidate] = []
    for verdict in (plan.mode.new_state, plan.mode.old_state, Verdict.SKIP):
        step = plan_step(plan, {**verdicts, current.commit: verdict}, prefer)
        if isinstance(step, Candidate) and step not in found:
            found.append(step)
    return found


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
