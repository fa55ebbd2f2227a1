"""Where in the model: the first module whose output differs between two builds. Pure.

The worker extension (data/worker/llm_bisect_worker.py) records, in execution order,
each module's first input and its outputs on the same teacher-forced tokens in both
builds. Walking the last good build's events in order, the first event beyond its
tolerance says where the change enters:

    an output differs, its inputs matched   → the module's own code (model.layers.1.mlp)
    an input differs (or a call is absent)  → the code of the module that called it,
                                              between its children: the parent

The difference of two events is 1 - 2<x,y>/(|x|^2 + |y|^2) over the sampled values of
every token position (0: the same; 1: unrelated; 2: opposite). Each event's tolerance is
`floor`, or a multiple of what the good build differs from itself (a second run on the
same tokens), whichever is larger. With several ranks (tensor or expert parallelism)
each rank is compared with the same rank, and the rank whose divergence comes first in
execution order is named.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

NOISE_FACTOR = 4.0
"""An event's tolerance is at least this many times the good build's own difference."""
FLOOR = 1e-3
"""The least tolerance: bf16 arithmetic repeated exactly differs by 0."""


def relative_difference(x: Sequence[float], y: Sequence[float]) -> float:
    """1 - 2<x,y>/(|x|^2 + |y|^2): 0 for equal vectors, 1 for orthogonal, 2 for opposite."""
    if len(x) != len(y):
        return 1.0
    dot = sum(a * b for a, b in zip(x, y, strict=True))
    squares = sum(a * a for a in x) + sum(b * b for b in y)
    if squares == 0.0:
        return 0.0
    if not math.isfinite(dot) or not math.isfinite(squares):
        return 0.0 if list(x) == list(y) else 1.0
    return max(0.0, 1.0 - 2.0 * dot / squares)


@dataclass(frozen=True)
class Event:
    """One module's input or output, summarised (what the worker extension returns)."""

    module: str
    """`model.layers.1.mlp`; `name#k` for the k-th call of a module called again."""
    kind: str
    """`input`, `output`, or `output1`... for the further tensors of a tuple."""
    shape: tuple[int, ...]
    hashes: tuple[str, ...]
    sample: tuple[float, ...]
    """The sampled values of every row (token position), concatenated."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.module, self.kind)

    @staticmethod
    def of(raw: Mapping[str, Any]) -> Event:
        rows = raw.get("rows") or []
        return Event(
            module=str(raw["module"]),
            kind=str(raw["kind"]),
            shape=tuple(int(d) for d in raw.get("shape", [])),
            hashes=tuple(str(r.get("hash", "")) for r in rows),
            sample=tuple(float(v) for r in rows for v in r.get("sample", [])),
        )


def events_of(rank: Mapping[str, Any]) -> list[Event]:
    return [Event.of(e) for e in rank.get("events", [])]


def difference(good: Event, bad: Event | None) -> tuple[float, str]:
    """How far apart two recordings of one event are, and what differs in words."""
    if bad is None:
        return 1.0, "not called in the first bad build"
    if good.shape != bad.shape:
        return 1.0, f"shape {list(good.shape)} became {list(bad.shape)}"
    if good.hashes == bad.hashes:
        return 0.0, ""
    return relative_difference(good.sample, bad.sample), ""


def parent(module: str) -> str:
    """The module whose code calls `module` (its path without the last part)."""
    name = module.split("#", 1)[0]
    return name.rsplit(".", 1)[0] if "." in name else "model"


@dataclass(frozen=True)
class Point:
    """One module's output on the divergence curve."""

    module: str
    difference: float
    tolerance: float


@dataclass(frozen=True)
class RankDivergence:
    """The first event beyond tolerance on one rank, and the curve."""

    rank: int
    index: int | None
    """Position of the first divergent event in execution order; None: none diverged."""
    event: str = ""
    """`module (kind)` of that event."""
    module: str = ""
    """Where the change enters: the module itself (an output) or its caller (an input)."""
    difference: float = 0.0
    tolerance: float = 0.0
    before_max: float = 0.0
    """The largest difference of every event before it."""
    why: str = ""
    curve: tuple[Point, ...] = ()
    events: int = 0


def compare_rank(
    rank: int,
    good: Sequence[Event],
    bad: Sequence[Event],
    again: Sequence[Event] | None = None,
    floor: float = FLOOR,
) -> RankDivergence:
    """Walk the good build's events in order; the first whose difference passes its
    tolerance (`again`: the good build's second run, for the noise)."""
    found = {e.key: e for e in bad}
    noise = {e.key: e for e in (again or [])}
    before = 0.0
    first: RankDivergence | None = None
    curve = []
    for i, event in enumerate(good):
        diff, why = difference(event, found.get(event.key))
        twin = noise.get(event.key)
        own = difference(event, twin)[0] if twin is not None else 0.0
        tolerance = max(floor, NOISE_FACTOR * own)
        if event.kind == "output":
            curve.append(Point(event.module, diff, tolerance))
        if first is None and diff > tolerance:
            inside = event.kind.startswith("output") and found.get(event.key) is not None
            module = event.module.split("#", 1)[0] if inside else parent(event.module)
            if not why and inside:
                why = "its output differs while its input matched: the change is in its code"
            elif not why:
                why = (
                    f"the input of {event.module} differs while every module before it "
                    f"matched: the change is in {module}'s own code, before that call"
                )
            elif not inside:
                why = f"{event.module} is {why}: the change is in {module}'s own code"
            first = RankDivergence(
                rank, i, f"{event.module} ({event.kind})", module, diff, tolerance, before, why
            )
        elif first is None:
            before = max(before, diff)
    if first is None:
        return RankDivergence(rank, None, before_max=before, curve=tuple(curve), events=len(good))
    return replace(first, curve=tuple(curve), events=len(good))


@dataclass(frozen=True)
class Localization:
    """What `localize` found: per rank, and the rank that diverged first."""

    ranks: tuple[RankDivergence, ...]
    tokens: int = 0
    """Teacher-forced tokens both builds ran."""
    collected_bytes: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def first(self) -> RankDivergence | None:
        diverged = [r for r in self.ranks if r.index is not None]
        return min(diverged, key=lambda r: (r.index or 0, r.rank)) if diverged else None

    def line(self) -> str:
        """The sentence for the terminal and report.md."""
        first = self.first
        if first is None:
            worst = max((r.before_max for r in self.ranks), default=0.0)
            return f"no divergence: every module within tolerance (largest difference {worst:.1g})"
        rank = f" on rank {first.rank}" if len(self.ranks) > 1 else ""
        at = "" if first.event == f"{first.module} (output)" else f" at {first.event}"
        before = "identical" if first.before_max == 0 else f"within {first.before_max:.1g}"
        return (
            f"first divergence: {first.module}{rank} (relative difference "
            f"{first.difference:.2g}{at}; every module before it {before})"
        )

    def to_json(self) -> dict[str, Any]:
        first = self.first
        return {
            "line": self.line(),
            "module": first.module if first else None,
            "rank": first.rank if first else None,
            "event": first.event if first else None,
            "relative_difference": first.difference if first else None,
            "tolerance": first.tolerance if first else None,
            "before_max": first.before_max if first else None,
            "why": first.why if first else None,
            "tokens": self.tokens,
            "collected_bytes": self.collected_bytes,
            "notes": list(self.notes),
            "ranks": [
                {
                    "rank": r.rank,
                    "module": r.module or None,
                    "event": r.event or None,
                    "relative_difference": r.difference,
                    "events": r.events,
                    "curve": [[p.module, p.difference] for p in r.curve],
                }
                for r in self.ranks
            ],
        }


def localize(
    good: Sequence[Mapping[str, Any]],
    bad: Sequence[Mapping[str, Any]],
    again: Sequence[Mapping[str, Any]] | None = None,
    *,
    floor: float = FLOOR,
    tokens: int = 0,
    collected_bytes: int = 0,
) -> Localization:
    """Compare what each rank's worker returned (collective_rpc results), rank by rank."""
    by_rank = {int(r.get("rank", i)): r for i, r in enumerate(bad)}
    twins = {int(r.get("rank", i)): r for i, r in enumerate(again or [])}
    ranks = []
    notes = []
    for i, raw in enumerate(good):
        rank = int(raw.get("rank", i))
        other = by_rank.get(rank)
        if other is None:
            notes.append(f"rank {rank}: absent in the first bad build")
            continue
        twin = twins.get(rank)
        ranks.append(
            compare_rank(
                rank,
                events_of(raw),
                events_of(other),
                events_of(twin) if twin is not None else None,
                floor,
            )
        )
    return Localization(tuple(ranks), tokens, collected_bytes, tuple(notes))
