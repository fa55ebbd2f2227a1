"""Where in the model: the first module whose output differs between two builds. Pure.

The worker extension (data/worker/llm_bisect_worker.py) records, in execution order,
every tensor each module is called with (by argument name: a decoder layer's
`positions`, `hidden_states`, `residual`) and every tensor it returns, on the same
teacher-forced tokens in both builds. Walking the last good build's events in order, the
first event beyond its tolerance says where the change enters:

    an output differs, its inputs matched   → the module's own code (model.layers.1.mlp)
    an input differs (or a call is absent)  → the code of the module that called it,
                                              between its children: its caller, the
                                              nearest module above it that runs code
                                              (`model` for `model.layers.1`: the
                                              ModuleList between them only holds them)

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

from pydantic import BaseModel, ConfigDict, Field

from .sparse import Sparse

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
    """One tensor a module was called with or returned, summarised (what the worker
    extension returns)."""

    module: str
    """`model.layers.1.mlp`; `name#k` for the k-th call of a module called again."""
    kind: str
    """`input` or `output`."""
    shape: tuple[int, ...]
    hashes: tuple[str, ...]
    sample: tuple[float, ...]
    """The sampled values of every row (token position), concatenated."""
    arg: str = ""
    """An input's argument name (`hidden_states`, `args[2]`, `x[1]` inside a tuple); an
    output's place in a tuple (`[1]`), "" for a lone tensor."""
    nonfinite: int | None = None
    """How many of the tensor's values are NaN or infinite (None: not recorded)."""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.module, self.kind, self.arg)

    @property
    def what(self) -> str:
        """`input hidden_states`, `output`, `output[1]`."""
        if self.kind == "output":
            return f"output{self.arg}"
        return f"input {self.arg}" if self.arg else "input"

    @staticmethod
    def of(raw: Mapping[str, Any]) -> Event:
        rows = raw.get("rows") or []
        kind, arg = str(raw["kind"]), str(raw.get("arg", ""))
        if kind.startswith("output") and kind != "output":  # before names: `output1`
            kind, arg = "output", f"[{kind.removeprefix('output')}]"
        nonfinite = raw.get("nonfinite")
        return Event(
            module=str(raw["module"]),
            kind=kind,
            shape=tuple(int(d) for d in raw.get("shape", [])),
            hashes=tuple(str(r.get("hash", "")) for r in rows),
            sample=tuple(float(v) for r in rows for v in r.get("sample", [])),
            arg=arg,
            nonfinite=int(nonfinite) if nonfinite is not None else None,
        )


def events_of(rank: Mapping[str, Any]) -> list[Event]:
    return [Event.of(e) for e in rank.get("events", [])]


@dataclass(frozen=True)
class Module:
    """What the worker extension says of one module of the model."""

    type: str
    """Its class: `LlamaDecoderLayer`."""
    caller: str
    """The nearest module above it that runs code of its own ("" for the root)."""


def modules_of(rank: Mapping[str, Any]) -> dict[str, Module]:
    """label → Module; empty from a worker extension that did not say (then callers are
    read from the names: `parent`)."""
    found = rank.get("modules")
    if not isinstance(found, Mapping):
        return {}
    return {
        str(name): Module(str(m.get("type", "")), str(m.get("caller", "")))
        for name, m in found.items()
        if isinstance(m, Mapping)
    }


def difference(good: Event, bad: Event | None) -> tuple[float, str]:
    """How far apart two recordings of one event are, and what differs in words."""
    if bad is None:
        return 1.0, "not called in the first bad build"
    if good.shape != bad.shape:
        return 1.0, f"shape {list(good.shape)} became {list(bad.shape)}"
    if good.hashes == bad.hashes:
        return 0.0, ""
    return relative_difference(good.sample, bad.sample), ""


def parent(module: str, modules: Mapping[str, Module] | None = None) -> str:
    """The module whose code calls `module`: its recorded caller, else (an older worker
    extension) its path without the last part."""
    name = module.split("#", 1)[0]
    known = (modules or {}).get(name)
    if known is not None and known.caller:
        return known.caller
    return name.rsplit(".", 1)[0] if "." in name else "model"


@dataclass(frozen=True)
class Point:
    """One module call's outputs on the divergence curve (the largest of them)."""

    module: str
    difference: float
    tolerance: float


@dataclass(frozen=True)
class Tensor:
    """One tensor of the call that diverged: how far apart the two builds have it."""

    what: str
    """`input hidden_states`, `output[1]`."""
    difference: float
    """Relative difference (1.0 where the first bad build did not record it)."""


@dataclass(frozen=True)
class NonFinite:
    """NaN or infinite values recorded on either path, anywhere in the forward."""

    good: int
    """Recorded tensors of the last good build holding a NaN or an infinity."""
    bad: int
    first: str | None = None
    """The first of them in execution order: `model.layers.3.mlp (output) in the bad build`."""


@dataclass(frozen=True)
class RankDivergence:
    """The first event beyond tolerance on one rank, and the curve."""

    rank: int
    index: int | None
    """Position of the first divergent event in execution order; None: none diverged."""
    event: str = ""
    """`module (input hidden_states)` of that event."""
    module: str = ""
    """Where the change enters: the module itself (an output) or its caller (an input)."""
    difference: float = 0.0
    tolerance: float = 0.0
    before_max: float = 0.0
    """The largest difference of every event before it."""
    why: str = ""
    curve: tuple[Point, ...] = ()
    events: int = 0
    inside: bool = False
    """True: an output differed while the inputs matched (the module's own code)."""
    call: str = ""
    """The module call the divergent event belongs to (`model.layers.1`, `name#k`)."""
    tensors: tuple[Tensor, ...] = ()
    """That call's inputs and outputs, each with its difference."""
    after: str = ""
    """The caller's last call that returned before the divergence (an input differed)."""
    type: str = ""
    """The class of `module`, where the worker extension said."""
    nonfinite: NonFinite | None = None


def _say(tensors: Sequence[Tensor]) -> str:
    """`positions, hidden_states identical; residual within 2e-4`."""
    same = [t.what.removeprefix("input ") for t in tensors if t.difference == 0.0]
    near = [t.what.removeprefix("input ") for t in tensors if t.difference != 0.0]
    worst = max((t.difference for t in tensors), default=0.0)
    parts = ([f"{', '.join(same)} identical"] if same else []) + (
        [f"{', '.join(near)} within {worst:.1g}"] if near else []
    )
    return "; ".join(parts)


def _nonfinite(good: Sequence[Event], bad: Sequence[Event]) -> NonFinite | None:
    if all(e.nonfinite is None for e in (*good, *bad)):
        return None
    flagged = [(e, side) for side, events in (("good", good), ("bad", bad)) for e in events
               if e.nonfinite]  # fmt: skip
    order = {e.key: i for i, e in enumerate(good)}
    first = min(
        flagged, key=lambda f: (order.get(f[0].key, len(order)), f[1] == "bad"), default=None
    )
    return NonFinite(
        good=sum(1 for _, side in flagged if side == "good"),
        bad=sum(1 for _, side in flagged if side == "bad"),
        first=f"{first[0].module} ({first[0].what}) in the {first[1]} build" if first else None,
    )


def compare_rank(
    rank: int,
    good: Sequence[Event],
    bad: Sequence[Event],
    again: Sequence[Event] | None = None,
    floor: float = FLOOR,
    modules: Mapping[str, Module] | None = None,
) -> RankDivergence:
    """Walk the good build's events in order; the first whose difference passes its
    tolerance (`again`: the good build's second run, for the noise; `modules`: each
    module's class and caller, as the worker extension recorded them)."""
    found = {e.key: e for e in bad}
    noise = {e.key: e for e in (again or [])}
    before = 0.0
    first: RankDivergence | None = None
    curve: list[Point] = []
    at_call: dict[str, int] = {}
    for i, event in enumerate(good):
        diff, why = difference(event, found.get(event.key))
        twin = noise.get(event.key)
        own = difference(event, twin)[0] if twin is not None else 0.0
        tolerance = max(floor, NOISE_FACTOR * own)
        if event.kind == "output":
            point = Point(event.module, diff, tolerance)
            if event.module in at_call:  # a further tensor of the same call's tuple
                j = at_call[event.module]
                curve[j] = point if diff > curve[j].difference else curve[j]
            else:
                at_call[event.module] = len(curve)
                curve.append(point)
        if first is None and diff > tolerance:
            walk = _Walk(rank, good, found, modules or {})
            first = _diverged(walk, i, diff, tolerance, before, why)
        elif first is None:
            before = max(before, diff)
    nonfinite = _nonfinite(good, bad)
    if first is None:
        return RankDivergence(
            rank, None, before_max=before, curve=tuple(curve), events=len(good),
            nonfinite=nonfinite,
        )  # fmt: skip
    return replace(first, curve=tuple(curve), events=len(good), nonfinite=nonfinite)


@dataclass(frozen=True)
class _Walk:
    """One rank's walk: the good build's events in order, the bad build's by key, each
    module's class and caller (as the worker extension recorded them)."""

    rank: int
    good: Sequence[Event]
    found: Mapping[tuple[str, str, str], Event]
    modules: Mapping[str, Module]


def _diverged(
    walk: _Walk, i: int, diff: float, tolerance: float, before: float, why: str
) -> RankDivergence:
    """What the first divergent event (good[i]) says: where, and in words."""
    rank, good, found, modules = walk.rank, walk.good, walk.found, walk.modules
    event = good[i]
    call = [e for e in good if e.module == event.module]
    tensors = tuple(Tensor(e.what, difference(e, found.get(e.key))[0]) for e in call)
    inputs = [t for t, e in zip(tensors, call, strict=True) if e.kind == "input"]
    inside = event.kind == "output" and found.get(event.key) is not None
    name = event.module.split("#", 1)[0]
    module = name if inside else parent(event.module, modules)
    after = ""
    if not inside:  # the caller's last call that returned before this one
        after = next(
            (e.module for e in reversed(good[:i])
             if e.kind == "output" and parent(e.module, modules) == module
             and e.module != event.module),
            "",
        )  # fmt: skip
    if inside:
        outputs = [t for t in tensors if t.what.startswith("output") and t.difference > 0]
        said = ", ".join(f"{t.what} by {t.difference:.2g}" for t in outputs)
        if [t.what for t in outputs] == ["output"]:
            said = f"by {outputs[0].difference:.2g}"
        named = [t for t in inputs if t.what != "input"]
        matched = f" ({_say(named)})" if named else ""
        plural = "s" if len(inputs) > 1 else ""
        lead = f"{why}; " if why else ""
        why = (
            f"{lead}its output differs ({said}) while its input{plural} matched{matched}: "
            "the change is in its own code"
            if inputs
            else f"{lead}its output differs ({said}) and it was called with no tensor: "
            "the change is in its own code"
        )
    else:
        where = (
            f"after {after} returned and before it called {event.module}"
            if after
            else f"before it called {event.module}"
        )
        if why:
            why = f"{event.module} is {why}: the change is in {module}'s own code, {where}"
        else:
            others = [t for t in inputs if t.what != event.what and t.difference <= tolerance]
            also = f", its other inputs matched ({_say(others)})" if others else ""
            what = f"the {event.what}" if event.arg else "the input"
            why = (
                f"{what} of {event.module} differs ({diff:.2g}){also} and every module "
                f"before it matched: the change is in {module}'s own code, {where}"
            )
    return RankDivergence(
        rank,
        i,
        f"{event.module} ({event.what})",
        module,
        diff,
        tolerance,
        before,
        why,
        inside=inside,
        call=event.module,
        tensors=tensors,
        after=after,
        type=modules[module].type if module in modules else "",
    )


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
        kind = f"{first.type}, " if first.type else ""
        before = "identical" if first.before_max == 0 else f"within {first.before_max:.1g}"
        return (
            f"first divergence: {first.module}{rank} ({kind}relative difference "
            f"{first.difference:.2g}{at}; every module before it {before})"
        )

    def document(self, **run: Any) -> LocalizationDoc:
        """localization.json; `run`: what the localisation probes were (LocalizationDoc's
        `good`, `bad`, `prompt`, `seconds`, `reused`, `forced`)."""
        first = self.first
        return LocalizationDoc(
            **run,
            line=self.line(),
            module=first.module if first else None,
            rank=first.rank if first else None,
            event=first.event if first else None,
            relative_difference=first.difference if first else None,
            tolerance=first.tolerance if first else None,
            before_max=first.before_max if first else None,
            why=first.why if first else None,
            module_type=(first.type or None) if first else None,
            call=_call_doc(first) if first else None,
            after=(first.after or None) if first else None,
            nonfinite=_nonfinite_doc(self.ranks),
            tokens=self.tokens,
            collected_bytes=self.collected_bytes,
            notes=list(self.notes),
            ranks=[
                RankDoc(
                    rank=r.rank,
                    module=r.module or None,
                    event=r.event or None,
                    relative_difference=r.difference,
                    events=r.events,
                    curve=[(p.module, p.difference) for p in r.curve],
                )
                for r in self.ranks
            ],
        )


class _Part(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class CallDoc(_Part):
    """The call the first divergence is in: each input and output, and its difference."""

    module: str
    """`model.layers.1`, `name#k` for its k-th call."""
    inputs: dict[str, float] = Field(default_factory=dict)
    """By argument name (`input` for one without a name)."""
    outputs: dict[str, float] = Field(default_factory=dict)
    """`output`, or `output[k]` for a tuple's k-th tensor."""


class NonFiniteDoc(_Part):
    """NaN or infinite values over every rank (NonFinite, summed)."""

    good: int
    bad: int
    first: str | None = None


class RankDoc(_Part):
    """One rank's first divergence and its curve."""

    rank: int
    module: str | None = None
    event: str | None = None
    relative_difference: float = 0.0
    events: int = 0
    curve: list[tuple[str, float]] = Field(default_factory=list)
    """(module, difference) per module call's outputs, in execution order."""


class LocalizationDoc(Sparse):
    """DIR/localization.json, and result.json's `localization`: where in the model two builds
    first differ. One that failed has `good`, `bad`, `error` and `line` only."""

    good: str = ""
    """The last good build's commit."""
    bad: str = ""
    prompt: str = ""
    """The text both builds ran (its tokens, then the good build's greedy continuation)."""
    seconds: dict[str, float] = Field(default_factory=dict)
    """Per localisation probe (`good`, `bad`, `again`), how long it took."""
    reused: list[str] = Field(default_factory=list)
    """The probes captured before (a DIR localised into again), not started again."""
    forced: list[str] = Field(default_factory=list)
    """What the localisation probes added to the server command (eager mode, ...)."""
    error: str | None = None
    """Why it could not localise (then the fields below are absent)."""
    line: str = ""
    """The sentence for the terminal and report.md."""
    module: str | None = None
    """Where the change enters; None when no module diverged."""
    rank: int | None = None
    event: str | None = None
    relative_difference: float | None = None
    tolerance: float | None = None
    before_max: float | None = None
    why: str | None = None
    module_type: str | None = None
    call: CallDoc | None = None
    after: str | None = None
    nonfinite: NonFiniteDoc | None = None
    """None where the worker did not count them (an older localisation, too)."""
    tokens: int = 0
    collected_bytes: int = 0
    notes: list[str] = Field(default_factory=list)
    ranks: list[RankDoc] = Field(default_factory=list)


def _call_doc(first: RankDivergence) -> CallDoc:
    """The call the first divergence is in: each input and output, and its difference."""
    inputs = {t.what.removeprefix("input").strip() or "input": t.difference
              for t in first.tensors if t.what.startswith("input")}  # fmt: skip
    outputs = {t.what: t.difference for t in first.tensors if t.what.startswith("output")}
    return CallDoc(module=first.call, inputs=inputs, outputs=outputs)


def _nonfinite_doc(ranks: Sequence[RankDivergence]) -> NonFiniteDoc | None:
    """NaN or infinite values over every rank; None where the worker did not count them."""
    known = [r.nonfinite for r in ranks if r.nonfinite is not None]
    if not known:
        return None
    return NonFiniteDoc(
        good=sum(n.good for n in known),
        bad=sum(n.bad for n in known),
        first=next((n.first for n in known if n.first), None),
    )


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
                modules_of(raw),
            )
        )
    return Localization(tuple(ranks), tokens, collected_bytes, tuple(notes))
