"""The bisection algorithm: verdicts in, next probe (or the answer) out.

Pure: no I/O, no clock. Candidates are indices into a sequence ordered
oldest to newest; index 0 is the *old end*, index n-1 the *new end*.

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
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass

from .model import Candidate, Verdict


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
