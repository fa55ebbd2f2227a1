"""The runner: drives the search, one probe at a time, through the seams it is given.

    plan ─► search.plan_step ─► probe (launcher → checks → verdict) ─► journal ─┐
      ▲                                                                          │
      └──────────────────────── verdicts so far ◄────────────────────────────────┘

Every finished probe is in the journal before the next begins, so a run
killed at any moment resumes without repeating one.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .checks import Check
from .checks.golden import Golden, GoldenStore
from .checks.golden import warnings as golden_warnings
from .client import OpenAIClient
from .errors import (
    ConfigError,
    EndpointError,
    JournalError,
    LaunchError,
    ReplyTooLarge,
    ServerFault,
)
from .fingerprint import parse_startup_log
from .journal import FILENAME, VERSION, Journal, JournalState, Span, plan_json, read_journal
from .launchers import Launcher, Server
from .model import Candidate, CheckResult, ProbeOutcome, Regress, Verdict
from .redact import Scrub
from .report.documents import ResultDocument
from .report.html import render_html
from .report.markdown import render_markdown
from .report.result import build_result
from .search import Answer, Mode, Plan, left_of, lookahead, plan_step
from .sources import Source
from .verdict import combine_repeats, decide, judge

CRASH_WAIT_S = 3.0
"""After a failed request, how long to wait for the server to exit before calling it a crash."""


class Progress(Protocol):
    """Hears what the runner does, for a person watching."""

    def note(self, text: str) -> None: ...

    def planned(self, plan: Plan, finished: int) -> None: ...

    def narrowed(self, left: int, probes_left: int) -> None:
        """Candidates that could still be the culprit, and probes still needed at most."""

    def phase(self, candidate: Candidate, phase: str, elapsed: float) -> None: ...

    def finished(self, candidate: Candidate, outcome: ProbeOutcome) -> None: ...


class SilentProgress:
    """A Progress that says nothing."""

    def note(self, text: str) -> None:
        pass

    def planned(self, plan: Plan, finished: int) -> None:
        pass

    def narrowed(self, left: int, probes_left: int) -> None:
        pass

    def phase(self, candidate: Candidate, phase: str, elapsed: float) -> None:
        pass

    def finished(self, candidate: Candidate, outcome: ProbeOutcome) -> None:
        pass


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


@dataclass
class _Probe:
    """What one probe found out so far; becomes a ProbeOutcome once the server is gone."""

    verdict: Verdict = Verdict.SKIP
    reason: str = ""
    results: tuple[CheckResult, ...] = ()
    log_tail: str = ""


def probe(
    candidate: Candidate,
    *,
    launcher: Launcher,
    checks: Sequence[Check],
    probe_dir: Path,
    repeats: int = 1,
    client: Callable[[Server], OpenAIClient],
    progress: Progress,
    golden: GoldenStore | None = None,
    regress: Regress = Regress.SEMANTIC,
    clock: Callable[[], float] = time.monotonic,
) -> ProbeOutcome:
    """Launch one candidate, check it, and say good, bad, skip or unsure (under `regress`).

    `timings` holds seconds since the probe began: `artifact` (checked),
    `launch` (image pulled, server started), `ready`, then `checks` (their
    own duration) and `total` (teardown included).
    """
    t0 = clock()
    timings: dict[str, float] = {}
    facts: dict[str, Any] = {}
    found = _Probe()
    artifact = launcher.artifact(candidate)
    timings["artifact"] = clock() - t0
    if artifact.digest:
        facts["image"] = {"ref": artifact.ref, "digest": artifact.digest}
    if artifact.available is False:
        found.reason = artifact.reason or f"no artifact: {artifact.ref}"
    else:
        progress.phase(candidate, "starting", 0.0)
        try:
            with launcher.launch(candidate, probe_dir) as server:
                timings["launch"] = clock() - t0
                server.wait_ready()
                timings["ready"] = clock() - t0
                progress.phase(candidate, "checking", timings["ready"])
                t_checks = clock()
                _check(
                    server,
                    checks,
                    repeats,
                    client,
                    launcher,
                    facts,
                    found,
                    golden,
                    candidate,
                    regress,
                )
                timings["checks"] = clock() - t_checks
        except LaunchError as exc:
            found.reason, found.log_tail = str(exc), exc.log_tail
    timings["total"] = clock() - t0
    log = probe_dir / "server.log"
    kernels = parse_startup_log(log.read_text(errors="replace")) if log.exists() else {}
    if kernels:
        facts["kernels"] = kernels
    return ProbeOutcome(
        candidate.commit,
        found.verdict,
        found.reason,
        found.results,
        timings,
        found.log_tail,
        facts,
    )


def _check(
    server: Server,
    checks: Sequence[Check],
    repeats: int,
    client: Callable[[Server], OpenAIClient],
    launcher: Launcher,
    facts: dict[str, Any],
    found: _Probe,
    golden: GoldenStore | None,
    candidate: Candidate,
    regress: Regress,
) -> None:
    """Run the check suite `repeats` times on a ready server; fill in `found` and `facts`."""
    runs: list[tuple[Verdict, str]] = []
    try:
        with client(server) as api, launcher.quiet():
            baseline = golden.ensure(api, candidate.commit) if golden is not None else None
            for _ in range(repeats):
                found.results = tuple(_run_check(check, api, baseline) for check in checks)
                runs.append(judge(found.results))
            facts["server"] = {
                "version": api.version(),
                "system_fingerprint": api.system_fingerprint,
            }
        facts.update(server.fingerprint())
    except EndpointError as exc:
        found.results = ()
        crash: str | None = None
        try:  # a dropped connection is often the server dying: give it a moment
            server.check_alive(wait=CRASH_WAIT_S)
        except LaunchError as died:
            crash, found.log_tail = str(died), died.log_tail
        if crash is None and isinstance(exc, ServerFault):
            crash, found.log_tail = str(exc), server.log_tail()
        if crash is None:
            found.reason, found.log_tail = f"checks could not run: {exc}", server.log_tail()
            return
        found.verdict, found.reason = decide(regress, None, crash)
        return
    found.verdict, found.reason = decide(regress, combine_repeats(runs), None)


def _run_check(check: Check, api: OpenAIClient, golden: Golden | None) -> CheckResult:
    """One check; a reply over the byte cap fails it, with that as its evidence."""
    try:
        return check.run(api, golden)
    except ReplyTooLarge as exc:
        return CheckResult(
            name=check.name,
            passed=False,
            score=0.0,
            evidence=f"reply too large: {exc}",
            details={"reply_too_large": {"cap_bytes": exc.cap}},
        )


def _commits(plan: Plan) -> tuple[object, ...]:
    """What identifies a plan (its texts are scrubbed on the way into the journal)."""
    anchor = plan.anchor.commit if plan.anchor else None
    return (plan.mode, anchor, *(c.commit for c in plan.sequence))


@dataclass
class RunResult:
    """What `run` returns: the answer and the documents it wrote."""

    answer: Answer
    result: dict[str, Any]
    out_dir: Path


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` in one step (fsync'd first)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def write_outputs(
    out_dir: Path, result: dict[str, Any], scrub: Scrub | None = None
) -> dict[str, Any]:
    """result.json, report.md and report.html, each replaced atomically, secrets masked and
    long texts cut; returns the document as written."""
    clean: dict[str, Any] = (scrub or Scrub()).doc(result)
    doc = ResultDocument.model_validate(clean)
    write_atomic(out_dir / "result.json", json.dumps(clean, indent=2) + "\n")
    write_atomic(out_dir / "report.md", render_markdown(doc))
    write_atomic(out_dir / "report.html", render_html(doc))
    return clean


def write_probe(out_dir: Path, outcome: ProbeOutcome, scrub: Scrub | None = None) -> None:
    """probe.json: one probe's outcome (the `check` command), secrets masked, long texts cut."""
    clean = (scrub or Scrub()).doc(outcome.to_json())
    write_atomic(out_dir / "probe.json", json.dumps(clean, indent=2) + "\n")


def result_of(
    state: JournalState, warnings: Sequence[str] = ()
) -> tuple[Answer | Candidate, dict[str, Any] | None]:
    """The search's next step for a journal state, and result.json once it has an answer."""
    verdicts = {p.commit: p.verdict for p in state.probes}
    step = plan_step(state.plan, verdicts)
    if isinstance(step, Answer):
        return step, build_result(
            state.plan,
            step,
            state.probes,
            state.regress,
            warnings,
            spans=state.spans,
            context=state.context,
            started=state.started,
            ended=state.ended,
        )
    return step, None


def run(
    plan: Plan,
    *,
    digest: str,
    out_dir: Path,
    launcher: Launcher,
    checks: Sequence[Check],
    client: Callable[[Server], OpenAIClient],
    repeats: int = 1,
    progress: Progress | None = None,
    golden: GoldenStore | None = None,
    scrub: Scrub | None = None,
    regress: Regress = Regress.SEMANTIC,
    coarse: bool = False,
    clock: Callable[[], float] = time.monotonic,
    context: Mapping[str, Any] | None = None,
    given: Sequence[tuple[ProbeOutcome, str]] = (),
) -> RunResult:
    """Bisect `plan` to an answer, resuming from DIR's journal when there is one.

    `context` (documents.Context: the refs as given, the config, the node) goes into the
    journal's first event and the report. `given`: verdicts the run starts with instead of
    probing (outcome, where it came from), e.g. the gate's two ends; journalled once.

    `coarse`: candidates whose artifact is ready (an image, a published wheel, a
    cached build) are probed first, then the rest within the range left.

    Without a `golden`, one is recorded from the good end into DIR/golden.json.
    Everything written to DIR passes through `scrub`.
    """
    progress = progress or SilentProgress()
    scrub = scrub or Scrub()
    golden = golden or GoldenStore(out_dir / "golden.json", checks, plan.good.commit, scrub=scrub)
    with Journal(out_dir / FILENAME, scrub) as journal:
        state = journal.reading.state
        if journal.reading.dropped:
            progress.note(f"journal: cut off its {journal.reading.dropped}")
        if state is not None and (state.digest != digest or _commits(state.plan) != _commits(plan)):
            raise JournalError(
                f"{out_dir}: holds a run of another config or range; "
                "resume it with the same config, or pick a new --out"
            )
        if state is None:
            journal.append(
                "run",
                version=VERSION,
                digest=digest,
                plan=plan_json(plan),
                good=plan.good.commit,
                bad=plan.bad.commit,
                regress=regress.value,
                context=dict(context or {}),
                time=time.time(),
            )
            for outcome, source in given:
                journal.append("probe", outcome=outcome.to_json(), given=source, time=time.time())
            state = read_journal(out_dir / FILENAME).state
            assert state is not None
        progress.planned(plan, len(state.probes))
        launcher.reap()
        prefer = (
            frozenset(c.commit for c in plan.candidates if launcher.artifact(c).ready)
            if coarse
            else frozenset()
        )
        probes, spans = list(state.probes), list(state.spans)
        while True:
            verdicts = {p.commit: p.verdict for p in probes}
            progress.narrowed(*left_of(plan, verdicts))
            step = plan_step(plan, verdicts, prefer)
            if isinstance(step, Answer):
                break
            began = time.time()
            journal.append("probe-start", commit=step.commit, time=began)
            launcher.prefetch(lookahead(plan, verdicts, step, prefer))
            outcome = probe(
                step,
                launcher=launcher,
                checks=checks,
                probe_dir=out_dir / "probes" / step.short,
                repeats=repeats,
                client=client,
                progress=progress,
                golden=golden,
                regress=regress,
                clock=clock,
            )
            ended = time.time()
            journal.append("probe", outcome=outcome.to_json(), time=ended)
            probes.append(outcome)
            spans.append(Span(began, ended))
            progress.finished(step, outcome)
        done = time.time()
        journal.append("done", status=step.status.value, time=done)
    said = golden_warnings(golden.data) if golden.data else []
    for warning in said:
        progress.note(f"warning: {warning}")
    result = build_result(
        plan,
        step,
        probes,
        regress,
        said,
        spans=spans,
        context=state.context,
        started=state.started,
        ended=done,
    )
    written = write_outputs(out_dir, result, scrub)
    return RunResult(step, written, out_dir)
