"""The journal: an append-only JSONL record of a run, fsynced per event, and what it says.

    {"event": "run", ...}            once, first: the version, config digest, plan, whether
                                     contradicted verdicts are probed again (`reprobe`)
    {"event": "probe-start", ...}    a probe began on a slot, in a round (a kill may follow)
    {"event": "probe", ...}          a probe finished: verdict, checks, timings
    {"event": "probe-cancel", ...}   a probe was stopped: its answer was no longer needed
    {"event": "search", ...}         a resume weighs verdicts another way (`search:`, the
                                     verdicts known from elsewhere: `known`) from here on;
                                     the head holds the first (none: flake 0)
    {"event": "symptom", ...}        a resume counts bad probes by another rule
                                     (`search.symptom`) from here on; the head holds the
                                     first (none: any)
    {"event": "done", ...}           the search ended

A run resumes from it: finished probes are read back and never run again.
Every line is checked as it is read back, by the same rule everywhere:

    line 1 .. n-1   must each be a whole, well-formed event, else JournalError (damage
                    in the middle: nothing is guessed)
    line n (last)   when torn or damaged (a kill mid-write, a disk that lost its tail)
                    it is dropped; resuming cuts it off the file, and says so

A policy's evidence (the `search` of a `run` or `search` event: confirmation trials
weighed as verdicts) is checked against where it came from: look i of `looks` (culprit
c) is DIR/<look_name(i)>.jsonl, whose head names c and the run's ends (look_digest), and
the evidence is each look's trials in turn, as that side journal holds them (revert, then
pick; each verdict good or bad). A journal that says otherwise was edited, or lost a
side journal: a JournalError naming its line and the side journal's (`evidence_checked`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field, replace
from itertools import zip_longest
from pathlib import Path
from typing import Any, Literal, TextIO, TypedDict, cast

from .errors import JournalError
from .jsonvalue import Json
from .model import Candidate, CandidateDoc, OutcomeDoc, ProbeOutcome, Regress, Verdict
from .posterior import EXACT, Policy, Trial
from .redact import Scrub
from .search import Mode, Plan
from .symptom import Symptom

FILENAME = "journal.jsonl"
VERSION = 1


class PlanDoc(TypedDict):
    """A search's plan as the `run` event holds it (`plan_json`)."""

    mode: str
    anchor: CandidateDoc | None
    sequence: list[CandidateDoc]


class RunEvent(TypedDict, total=False):
    """The head: what the run (or a side journal: `kind`) answers, and how it weighs."""

    event: Literal["run"]
    version: int
    digest: str
    kind: str
    """A side journal's (`configs`, `revert` ...); a run's journal has none."""
    plan: PlanDoc
    settings: dict[str, str]
    good: str
    bad: str
    regress: str
    reprobe: bool
    search: dict[str, Json]
    symptom: str
    context: dict[str, Json]
    build: CandidateDoc
    differences: list[Json]
    time: float


class ProbeStartEvent(TypedDict, total=False):
    """A probe began (`probe-start`) or was stopped (`probe-cancel`)."""

    event: Literal["probe-start", "probe-cancel"]
    commit: str
    slot: int
    round: int
    time: float


class ProbeEvent(TypedDict, total=False):
    """A probe finished (a side journal's: of its `kind`, its `subset`)."""

    event: Literal["probe"]
    outcome: OutcomeDoc
    given: str
    kind: str
    subset: list[int]
    slot: int
    round: int
    began: float
    time: float


class SearchEvent(TypedDict, total=False):
    event: Literal["search"]
    search: dict[str, Json]
    time: float


class SymptomEvent(TypedDict, total=False):
    event: Literal["symptom"]
    symptom: str
    time: float


class DoneEvent(TypedDict, total=False):
    event: Literal["done"]
    status: str
    time: float


Event = RunEvent | ProbeStartEvent | ProbeEvent | SearchEvent | SymptomEvent | DoneEvent
"""One line of a journal, checked (`_event`): its `event` says which."""


def plan_json(plan: Plan) -> PlanDoc:
    return {
        "mode": plan.mode.value,
        "anchor": plan.anchor.to_json() if plan.anchor else None,
        "sequence": [c.to_json() for c in plan.sequence],
    }


def plan_from_json(data: PlanDoc) -> Plan:
    anchor = data.get("anchor")
    return Plan(
        Mode(data["mode"]),
        tuple(Candidate.from_json(c) for c in data["sequence"]),
        Candidate.from_json(anchor) if anchor else None,
    )


def _run(e: Mapping[str, Any]) -> None:
    if e.get("version") != VERSION:
        raise ValueError(f"version {e.get('version')!r}, this llm-bisect writes {VERSION}")
    if not isinstance(e["digest"], str):
        raise ValueError("digest is not a string")
    plan_from_json(e["plan"])
    Regress(e.get("regress", Regress.SEMANTIC.value))
    if not isinstance(e.get("reprobe", False), bool):
        raise ValueError("reprobe is not a boolean")
    if "search" in e:
        _search(e)
    if "symptom" in e:
        _symptom(e)


def _search(e: Mapping[str, Any]) -> None:
    Policy.from_json(e["search"])


def _symptom(e: Mapping[str, Any]) -> None:
    Symptom(e["symptom"])


def _probe(e: Mapping[str, Any]) -> None:
    Candidate(ProbeOutcome.from_json(e["outcome"]).commit)  # validates the commit


def _probe_start(e: Mapping[str, Any]) -> None:
    Candidate(e["commit"])  # validates the commit


def _done(e: Mapping[str, Any]) -> None:
    if not isinstance(e["status"], str):
        raise ValueError("status is not a string")


_EVENTS: dict[str, Callable[[Mapping[str, Any]], None]] = {
    # each checks a line's JSON as read (before it is known to be an Event)
    "run": _run,
    "probe-start": _probe_start,
    "probe": _probe,
    "probe-cancel": _probe_start,
    "search": _search,
    "symptom": _symptom,
    "done": _done,
}


def _event(line: bytes) -> Event:
    """One line as an event; ValueError saying what is wrong with it."""
    try:
        event = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError("not JSON") from exc
    if not isinstance(event, dict) or event.get("event") not in _EVENTS:
        raise ValueError("not a journal event")
    try:
        _EVENTS[event["event"]](event)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(
            f"malformed {event['event']!r} event ({type(exc).__name__}: {exc})"
        ) from exc
    return cast(Event, event)


@dataclass(frozen=True)
class Span:
    """When one probe ran (wall clock), or where its verdict came from when no probe of
    this run made it (`given`, e.g. a gate that starts a bisection)."""

    started: float | None = None
    ended: float | None = None
    given: str = ""
    slot: int | None = None
    """The slot it ran on (0 .. parallel-1)."""
    round: int | None = None
    """One more than the latest round whose answer was in when it started (1-based)."""


@dataclass(frozen=True)
class JournalState:
    """What a journal says about a run so far."""

    digest: str
    plan: Plan
    probes: tuple[ProbeOutcome, ...]
    regress: Regress = Regress.SEMANTIC
    """What counted as a regression (journals older than `regress` hold none: semantic)."""
    context: dict[str, Json] = field(default_factory=dict)
    """How the run was asked for, for the report: the refs as given, the config, the
    repository's web address, the node (older journals hold none)."""
    started: float | None = None
    """Wall-clock time the run began (the first `run` event)."""
    ended: float | None = None
    """Wall-clock time of the last `done` event, when the run finished."""
    spans: tuple[Span, ...] = ()
    """Per finished probe, in order: when and where it ran, or who gave its verdict."""
    rounds: int = 0
    """The latest round started (a journal without rounds: one per probe started)."""
    reprobe: bool = False
    """Whether a verdict that contradicts a neighbour's is probed again (`probe.repeats:
    auto`; journals older than `reprobe` hold none: no)."""
    settings: dict[str, str] = field(default_factory=dict)
    """Each verdict setting's digest (config.setting_digests) when the run began (older
    journals hold none): a resume under another config names the keys that differ."""
    policy: Policy = EXACT
    """How verdicts are weighed (`search:`): the latest `search` event's, else the head's
    (journals without one: flake 0, verdicts as facts)."""
    symptom: Symptom = Symptom.ANY
    """Which bad probes count as bad (`search.symptom`): the latest `symptom` event's, else
    the head's (journals without one: any)."""


@dataclass(frozen=True)
class Reading:
    """A journal as read back."""

    events: list[Event]
    """Every whole, well-formed event, in order."""
    state: JournalState | None
    """The run they record; None for an empty (or absent) journal."""
    sound_bytes: int
    """The file's length up to the end of its last sound line."""
    dropped: str | None
    """What was wrong with a last line that was dropped; None when there was none."""
    lines: tuple[int, ...] = ()
    """Each event's line number (1-based), in order."""


def read_journal(path: Path) -> Reading:
    """Read and check a journal (see the module docstring for the rule)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Reading([], None, 0, None)
    except OSError as exc:
        raise JournalError(f"{path}: cannot read journal ({exc.strerror})") from exc
    events: list[Event] = []
    numbers: list[int] = []
    sound, dropped, offset = 0, None, 0
    lines = data.split(b"\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for number, line in enumerate(lines, 1):
        end = offset + len(line) + (1 if number < len(lines) else 0)
        if line.strip():
            try:
                event = _event(line)
                if not events and event["event"] != "run":
                    raise ValueError("the first event is not 'run'")
            except ValueError as exc:
                if number - 1 == last:
                    torn = not data.endswith(b"\n")
                    dropped = f"line {number} {'torn' if torn else 'damaged'} ({exc})"
                    break
                raise JournalError(
                    f"{path}:{number}: {exc}; the journal cannot be resumed "
                    "(move it away to start the run over)"
                ) from None
            events.append(event)
            numbers.append(number)
            sound = min(end, len(data))
        offset = end
    evidence_checked(path, events, numbers)
    return Reading(events, _state(events), sound, dropped, tuple(numbers))


def _when(event: Event, key: str = "time") -> float | None:
    """An event's wall-clock time (or another of its times); None when it has none."""
    t = event.get(key)
    return float(t) if isinstance(t, int | float) and not isinstance(t, bool) else None


def _int(event: Event, key: str) -> int | None:
    value = event.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _head(events: list[Event]) -> RunEvent:
    """The first event, a `run` (read_journal's rule)."""
    head = events[0]
    assert head["event"] == "run"
    return head


def _state(events: list[Event]) -> JournalState | None:
    if not events:
        return None
    head = _head(events)
    spans: list[Span] = []
    began: dict[str, ProbeStartEvent] = {}
    rounds = 0
    for e in events:
        if e["event"] == "probe-start":
            began[e["commit"]] = e
            rounds = max(rounds + (0 if _int(e, "round") else 1), _int(e, "round") or 0)
        elif e["event"] == "probe-cancel":
            began.pop(e["commit"], None)
        elif e["event"] == "probe":
            given = e.get("given")
            start = began.pop(e["outcome"]["commit"], {})
            spans.append(
                Span(
                    _when(start) if start else None,
                    _when(e),
                    given if isinstance(given, str) else "",
                    _int(start, "slot"),
                    _int(start, "round"),
                )
            )
    done = [_when(e) for e in events if e["event"] == "done"]
    context = head.get("context")
    weighed = [e["search"] for e in events if "search" in e and e["event"] in ("run", "search")]
    counted = [e["symptom"] for e in events if "symptom" in e and e["event"] in ("run", "symptom")]
    return JournalState(
        digest=head["digest"],
        settings=_settings(head.get("settings")),
        plan=plan_from_json(head["plan"]),
        probes=tuple(
            replace(ProbeOutcome.from_json(e["outcome"]), slot=span.slot, began=span.started)
            for e, span in zip((e for e in events if e["event"] == "probe"), spans, strict=True)
        ),
        regress=Regress(head.get("regress", Regress.SEMANTIC.value)),
        context=context if isinstance(context, dict) else {},
        started=_when(head),
        ended=done[-1] if done else None,
        spans=tuple(spans),
        rounds=rounds,
        reprobe=head.get("reprobe") is True,
        policy=Policy.from_json(weighed[-1]) if weighed else EXACT,
        symptom=Symptom(counted[-1]) if counted else Symptom.ANY,
    )


def _settings(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


def read_events(path: Path) -> list[Event]:
    """Every sound event of a journal; a torn or damaged last line is left out."""
    return read_journal(path).events


def look_name(look: int) -> str:
    """The folder (and, with .jsonl, the side journal) of a run's look-th confirmation."""
    return "confirm" if look == 0 else "confirm-again" if look == 1 else f"confirm-again-{look}"


def look_digest(culprit: str, good: str, bad: str) -> str:
    """What a confirmation's side journal answers: this culprit between these ends."""
    return hashlib.sha256(f"{culprit}\0{good}\0{bad}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class _Source:
    """One weighed trial as a confirmation's side journal holds it, and where."""

    trial: Trial
    where: str
    """`<side journal>:<line>`."""


def _said(trial: Trial) -> str:
    return f"the {trial.kind} of {trial.commit[:12]} tested {trial.verdict.value}"


def _look_trials(folder: Path, look: int, culprit: str, ends: tuple[str, str]) -> list[_Source]:
    """The trials look `look` (of `culprit`) weighed, as its side journal holds them: the
    last probe of each kind, revert, pick, then the revert's second start (`revert-again`,
    a revert trial), where it tested good or bad (a skip is none); ValueError where that
    journal is gone or confirms another culprit."""
    name = f"{look_name(look)}.jsonl"
    reading = read_journal(folder / name)
    if not reading.events:
        raise ValueError(f"{name}, where its trials are journalled, does not exist")
    if reading.events[0].get("digest") != look_digest(culprit, *ends):
        raise ValueError(f"{name} confirms another culprit")
    last: dict[str, _Source] = {}
    for number, event in zip(reading.lines, reading.events, strict=True):
        kind = event.get("kind")
        if event["event"] != "probe" or kind not in KINDS:
            continue
        verdict = ProbeOutcome.from_json(event["outcome"]).verdict
        if verdict in (Verdict.GOOD, Verdict.BAD):
            trial = Trial(culprit, kind.removesuffix("-again"), verdict, _int(event, "slot"),
                          _when(event, "began"))  # fmt: skip
            last[kind] = _Source(trial, f"{name}:{number}")
        else:
            last.pop(kind, None)
    both = [last[k].trial.verdict if k in last else None for k in ("revert", "revert-again")]
    if both == [Verdict.BAD, Verdict.BAD]:  # left out of the look (services/confirm.redundant)
        del last["revert-again"]
    return [last[kind] for kind in KINDS if kind in last]


KINDS = ("revert", "pick", "revert-again")
"""A look's trials as its side journal names them, in the order its evidence weighs them."""


def evidence_checked(path: Path, events: list[Event], numbers: list[int]) -> None:
    """Check each policy's evidence in a run's journal against the confirmations it names
    (the module docstring); JournalError naming the line that says otherwise. Side journals
    (their head has a `kind`) weigh nothing."""
    if not events or "kind" in events[0]:
        return
    plan = plan_from_json(_head(events)["plan"])
    ends = (plan.good.commit, plan.bad.commit)
    for number, event in zip(numbers, events, strict=True):
        if event["event"] in ("run", "search") and "search" in event:
            why = _contradiction(path.parent, Policy.from_json(event["search"]), ends)
            if why is not None:
                raise JournalError(
                    f"{path}:{number}: {why}: the journal contradicts what it was weighed from "
                    "(move it away to start the run over)"
                )


def _contradiction(folder: Path, policy: Policy, ends: tuple[str, str]) -> str | None:
    """Where `policy`'s evidence is not its looks' trials, in turn; None where it is."""
    sources: list[_Source] = []
    for look, (culprit, _) in enumerate(policy.looks):
        try:
            sources += _look_trials(folder, look, culprit, ends)
        except ValueError as exc:
            return f"its search weighs look {look + 1} at {culprit[:12]}, but {exc}"
    for trial, source in zip_longest(policy.evidence, sources):
        if trial is None:
            return f"evidence leaves out {_said(source.trial)} ({source.where})"
        if source is None:
            return f"evidence names {_said(trial)}, but no confirmation it weighs holds it"
        if source.trial != replace(trial, place=""):  # the place: the outcome's fingerprint
            return f"evidence names {_said(trial)}, but {source.where} holds {_said(source.trial)}"
    return None


def side_probes(path: Path, digest: str) -> dict[str, ProbeOutcome]:
    """The probes a side journal of a run (confirm.jsonl, later.jsonl) holds, by commit. One
    written for another question (its `run` event's digest differs) is removed: its answers
    are not this one's."""
    return side_probes_apart(path, digest)[0]


def side_probes_apart(
    path: Path, digest: str, apart: str | None = None
) -> tuple[dict[str, ProbeOutcome], dict[str, ProbeOutcome]]:
    """side_probes, with those journalled as kind `apart` by commit on their own (a look's
    `revert-again`: the revert's commit started a second time): (the others, those)."""
    done: dict[str, ProbeOutcome] = {}
    aside: dict[str, ProbeOutcome] = {}
    for event in read_events(path):
        if event["event"] == "run" and event.get("digest") != digest:
            path.unlink()
            return {}, {}
        if event["event"] == "probe":
            outcome = ProbeOutcome.from_json(event["outcome"])
            slot, began = _int(event, "slot"), _when(event, "began")
            into = aside if apart is not None and event.get("kind") == apart else done
            into[outcome.commit] = replace(outcome, slot=slot, began=began)
    return done, aside


class Journal:
    """Appends events durably: each line is flushed and fsynced before `append` returns.

    Opening reads the journal back (`reading`) and cuts a torn or damaged last
    line off the file, so the next event starts a clean line. Every event goes
    through `scrub` first: no secret, no megabyte text reaches the file.
    """

    def __init__(self, path: Path, scrub: Scrub | None = None) -> None:
        self.path = path
        self.scrub = scrub or Scrub()
        self.reading = Reading([], None, 0, None)
        self._file: TextIO | None = None

    def __enter__(self) -> Journal:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.reading = read_journal(self.path)
        if self.path.exists():
            with self.path.open("r+b") as f:
                f.truncate(self.reading.sound_bytes)
                if self.reading.sound_bytes:
                    f.seek(-1, os.SEEK_END)
                    if f.read(1) != b"\n":  # a whole last event whose newline was lost
                        f.write(b"\n")
                os.fsync(f.fileno())
        self._file = self.path.open("a", encoding="utf-8")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            with suppress(OSError):
                self._file.close()
            self._file = None

    def append(self, event: str, **fields: Any) -> None:
        if self._file is None:
            raise JournalError(f"{self.path}: journal is not open")
        line = json.dumps(self.scrub.doc({"event": event, **fields}), sort_keys=True)
        self._file.write(line + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())


def begin_side(journal: Journal, kind: str, digest: str, version: int) -> None:
    """A side journal's first event, once: what it answers (`digest`), as `read_journal`
    reads any journal's head."""
    if not journal.reading.events:
        plan: PlanDoc = {"mode": "regression", "anchor": None, "sequence": []}
        journal.append("run", version=version, digest=digest, kind=kind, plan=plan)
