"""One probe: a candidate launched, made ready, checked and judged, then torn down.

    artifact? ─► launch (build, pull, start) ─► ready ─► checks (repeats) ─► verdict ─► teardown

Everything a run's probes share is one ProbeContext; a probe can be cancelled from another
thread (its answer no longer needed), which stops its server at once.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from . import collectenv, loads
from .checks import Check, StopsEarly, cheapest_first
from .checks.golden import Golden, GoldenStore
from .client import OpenAIClient
from .clock import SYSTEM
from .collectenv import collected
from .errors import (
    EndpointError,
    LaunchError,
    NotReady,
    ReplyTooLarge,
    ServerExited,
    ServerFault,
    Unplaced,
)
from .files import head_text
from .fingerprint import Fingerprint, ImageFacts, ServedFacts, parse_startup_log
from .kinds import cost_of
from .launchers import Avoids, Launcher, Server
from .model import (
    Candidate,
    Cap,
    CheckResult,
    ProbeOutcome,
    Regress,
    Stage,
    TooLargeDetails,
    Verdict,
)
from .search import Plan
from .startup import Startup, phases, read_marks
from .verdict import combine_repeats, decide, judge, leaning, untested

CRASH_WAIT_S = 3.0
"""After a failed request, how long to wait for the server to exit before calling it a crash."""
CANCELLED = "cancelled: its answer was no longer needed"
STARTUP_LOG_BYTES = 16 * 2**20
"""The most bytes of a server log read for the kernels it selected (they come first)."""


class Progress(Protocol):
    """Hears what the runner does, for a person watching (probes may run in threads)."""

    def note(self, text: str) -> None: ...

    def planned(self, plan: Plan, finished: int, from_journal: int = 0) -> None:
        """The search's plan, `finished` probes done already, `from_journal` of them resumed
        (read from a journal an earlier process wrote)."""

    def narrowed(self, left: int, probes_left: int) -> None:
        """Candidates that could still be the culprit, and probes still needed at most."""

    def phase(self, candidate: Candidate, phase: str, elapsed: float) -> None: ...

    def finished(self, candidate: Candidate, outcome: ProbeOutcome) -> None: ...


class SilentProgress:
    """A Progress that says nothing."""

    def note(self, text: str) -> None:
        pass

    def planned(self, plan: Plan, finished: int, from_journal: int = 0) -> None:
        pass

    def narrowed(self, left: int, probes_left: int) -> None:
        pass

    def phase(self, candidate: Candidate, phase: str, elapsed: float) -> None:
        pass

    def finished(self, candidate: Candidate, outcome: ProbeOutcome) -> None:
        pass


@dataclass(frozen=True)
class ProbeContext:
    """What every probe of a run shares."""

    launcher: Launcher
    checks: Sequence[Check]
    client: Callable[[Server], OpenAIClient]
    progress: Progress = field(default_factory=SilentProgress)
    repeats: int = 1
    golden: GoldenStore | None = None
    """The golden (recorded from the good end's probe when none exists yet)."""
    regress: Regress = Regress.SEMANTIC
    clock: Callable[[], float] = SYSTEM.monotonic
    early_stop: bool = False
    """Stop a suite at its first failed check, when no later check can change the verdict
    (`probe.early_stop`): the checks left are named in `not_run`."""
    full: frozenset[str] = frozenset()
    """Commits whose suites always run whole (a run's ends): their evidence is read in full."""
    decisive: Callable[[str], bool] | None = None
    """Under `search.symptom: same`, whether a failed check (by name) ends a suite early: one
    in the bad end's symptom (symptom.Counted.decisive); None: any failed check."""


class Cancel:
    """Stops one probe from another thread: before it launches, or its server at once (the
    probe then ends as a skip, which the runner drops)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set = False
        self._server: Server | None = None

    def __call__(self) -> None:
        with self._lock:
            self._set = True
            server = self._server
        if server is not None:
            server.stop()

    @property
    def cancelled(self) -> bool:
        return self._set

    def attach(self, server: Server | None) -> None:
        """The server to stop on cancel (None once it is torn down); stopped now if cancelled."""
        with self._lock:
            self._server = server
            stop = self._set and server is not None
        if stop and server is not None:
            server.stop()


@dataclass
class Facts:
    """A build's fingerprint as its parts come in: its artifact, what it served, what its
    startup log said once it stopped."""

    fingerprint: Fingerprint = field(default_factory=Fingerprint)

    def add(self, more: Fingerprint) -> None:
        self.fingerprint = self.fingerprint.merged(more)


@dataclass
class _Found:
    """What one probe found out so far; becomes a ProbeOutcome once the server is gone."""

    verdict: Verdict = Verdict.SKIP
    reason: str = ""
    results: tuple[CheckResult, ...] = ()
    log_tail: str = ""
    facts: Facts = field(default_factory=Facts)
    not_run: tuple[str, ...] = ()
    failed_at: Stage | None = None
    leaning: Verdict | None = None


def probe(
    candidate: Candidate,
    probe_dir: Path,
    ctx: ProbeContext,
    cancel: Cancel | None = None,
    slot: int = 0,
    avoid: Sequence[str] = (),
) -> ProbeOutcome:
    """Launch one candidate, check it, and say good, bad, skip or unsure (under `regress`).
    `slot`: where it runs (0 .. parallel-1); `avoid`: the nodes it must not run on where the
    launcher's cluster picks the node (launchers.Avoids: Slurm, Kubernetes), as the
    fingerprints of the verdicts it checks name them.

    `timings` holds seconds since the probe began: `artifact` (checked),
    `launch` (image pulled, server started), `ready`, then `checks` (their
    own duration) and `total` (teardown included).
    """
    clock = ctx.clock
    t0 = clock()
    timings: dict[str, float] = {}
    found = _Found()
    collectenv.clear(probe_dir)
    # the probe that records the golden: its server reports the files it runs (loads.py)
    hook = (
        ctx.golden is not None
        and ctx.golden.records(candidate.commit)
        and loads.reaches(ctx.launcher)
    )
    if hook:
        loads.clear(probe_dir)
    artifact = ctx.launcher.artifact(candidate)
    timings["artifact"] = clock() - t0
    if artifact.digest:
        found.facts.add(Fingerprint(image=ImageFacts(ref=artifact.ref, digest=artifact.digest)))
    if artifact.available is False:
        found.reason = artifact.reason or f"no artifact: {artifact.ref}"
        found.failed_at = Stage.ARTIFACT
    elif cancel is not None and cancel.cancelled:
        found.reason = CANCELLED
    else:
        ctx.progress.phase(candidate, "starting", 0.0)
        if avoid and isinstance(ctx.launcher, Avoids):
            ctx.launcher.avoid(candidate, avoid)
        try:
            extra = {"instrument": loads.instrument(probe_dir)} if hook else {}
            with ctx.launcher.launch(candidate, probe_dir, slot=slot, **extra) as server:
                if cancel is not None:
                    cancel.attach(server)
                timings["launch"] = clock() - t0
                server.wait_ready()
                timings["ready"] = clock() - t0
                ctx.progress.phase(candidate, "checking", timings["ready"])
                t_checks = clock()
                _check(server, ctx, found, candidate)
                timings["checks"] = clock() - t_checks
        except LaunchError as exc:
            found.reason, found.log_tail = str(exc), exc.log_tail
            if "launch" not in timings:
                found.failed_at = Stage.LAUNCH
            elif "ready" not in timings:  # it ran: its own exit or deadline, else the node's
                died = isinstance(exc, ServerExited | NotReady)  # not PortTaken, Unplaced
                found.failed_at = Stage.READY if died else Stage.LAUNCH
        finally:
            if cancel is not None:
                cancel.attach(None)
    if found.failed_at is not None and found.failed_at is not Stage.CHECKS:  # before checks
        found.verdict, found.reason = untested(ctx.regress, found.failed_at, found.reason)
    if cancel is not None and cancel.cancelled:
        found.verdict, found.reason, found.failed_at = Verdict.SKIP, CANCELLED, None
    timings["total"] = clock() - t0
    found.facts.add(startup_facts(probe_dir))
    fingerprint = found.facts.fingerprint
    started = None
    if "launch" in timings and "ready" in timings:
        started = startup_phases(probe_dir, timings["launch"], timings["ready"])
    if ctx.golden is not None:
        ctx.golden.keep(candidate.commit, fingerprint, loads.read(probe_dir) if hook else None)
    return ProbeOutcome(
        candidate.commit,
        found.verdict,
        found.reason,
        found.results,
        timings,
        found.log_tail,
        fingerprint,
        started,
        found.not_run,
        found.failed_at,
        found.leaning if found.verdict is Verdict.UNSURE else None,
    )


TOKENIZER_TEXT = "llm-bisect: 2+2=4, naïve café, 東京 tabs\tand  spaces\n<think>x</think>"
"""Tokenized by each build: a digest of the ids names the tokenizer as served."""
TEMPLATE_CONVERSATION = (
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "And 3+3?"},
)
"""Rendered by each build's chat template (/tokenize with messages): a digest of the ids
names the template as served."""


def _digest(ids: list[int] | None) -> str | None:
    return None if ids is None else hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]


def served_facts(api: OpenAIClient, server: Server) -> Fingerprint:
    """What a ready build says it is (/version, system_fingerprint, the model, digests of its
    tokenizer and chat template as served) and what its launcher knows of it (image,
    packages, the command: a mapping, read here)."""
    # facts, never a verdict: a server that fails them here (not vLLM: no /tokenize; dying
    # after its checks) is said by the checks' own requests, not by these
    try:
        model: str | None = api.model
        tokens: list[int] | None = api.tokenize(TOKENIZER_TEXT)
    except EndpointError:
        model, tokens = None, None
    template = api.chat_tokens([dict(m) for m in TEMPLATE_CONVERSATION])
    served = ServedFacts(
        version=api.version(),
        system_fingerprint=api.system_fingerprint,
        model=model,
        tokenizer=_digest(tokens),
        chat_template=_digest(template),
    )
    said = Fingerprint(server=served, endpoint=server.base_url)
    return said.merged(Fingerprint.model_validate(server.fingerprint()))


def startup_facts(probe_dir: Path) -> Fingerprint:
    """The kernels a stopped build's startup log says it selected, when it names any, and
    its environment as vLLM's collect_env saw it, when a launcher ran that."""
    log = probe_dir / "server.log"
    kernels = parse_startup_log(head_text(log, STARTUP_LOG_BYTES)) if log.exists() else {}
    facts = Fingerprint(kernels=kernels) if kernels else Fingerprint()
    environment = collected(probe_dir)
    if environment:
        facts = facts.merged(Fingerprint(collect_env=environment))
    return facts


def startup_phases(probe_dir: Path, launch: float, ready: float) -> Startup | None:
    """Where the wait from `launch` to `ready` (seconds since the probe began) went, from the
    server log's own lines; None when it names no phase (not vLLM, or no log)."""
    log = probe_dir / "server.log"
    if not log.exists():
        return None
    return phases(read_marks(head_text(log, STARTUP_LOG_BYTES).splitlines()), launch, ready)


def _check(server: Server, ctx: ProbeContext, found: _Found, candidate: Candidate) -> None:
    """Run the check suite `repeats` times on a ready server; fill in `found`."""
    runs: list[tuple[Verdict, str]] = []
    try:
        with ctx.client(server) as api, ctx.launcher.quiet():
            golden = ctx.golden
            baseline = golden.ensure(api, candidate.commit) if golden is not None else None
            stop = (
                ctx.early_stop
                and ctx.regress is not Regress.CRASH  # there a later crash is the verdict
                and ctx.repeats == 1  # N runs look for flakiness: each run asks it all
                and candidate.commit not in ctx.full
                and (baseline is None or baseline.commit != candidate.commit)
            )
            checks = cheapest_first(ctx.checks, cost_of)
            for _ in range(ctx.repeats):
                found.results, found.not_run = _suite(checks, api, baseline, stop, ctx.decisive)
                runs.append(judge(found.results))
            found.facts.add(served_facts(api, server))
    except EndpointError as exc:
        found.results, found.not_run, found.failed_at = (), (), Stage.CHECKS
        crash: str | None = None
        lost: Unplaced | None = None
        try:  # a dropped connection is often the server dying: give it a moment
            server.check_alive(wait=CRASH_WAIT_S)
        except Unplaced as gone:  # the cluster ended it (a node lost, an eviction): no crash
            lost = gone
        except LaunchError as died:
            crash, found.log_tail = str(died), died.log_tail
        if crash is None and lost is None and isinstance(exc, ServerFault):
            crash, found.log_tail = str(exc), server.log_tail()
        if crash is None:
            found.reason = f"checks could not run: {lost or exc}"
            found.log_tail = server.log_tail()
            if ctx.regress is Regress.START:  # it was ready: all that `start` asks
                found.verdict, found.reason = (
                    Verdict.GOOD,
                    f"started (regress: start; {found.reason})",
                )
            return
        found.verdict, found.reason = decide(ctx.regress, None, crash)
        return
    found.verdict, found.reason = decide(ctx.regress, combine_repeats(runs), None)
    found.leaning = leaning(runs)


def _suite(
    checks: Sequence[Check],
    api: OpenAIClient,
    golden: Golden | None,
    stop: bool,
    decisive: Callable[[str], bool] | None = None,
) -> tuple[tuple[CheckResult, ...], tuple[str, ...]]:
    """The suite's results, and the checks not run: with `stop`, none after the first that
    failed (one failed check makes the run bad, whatever the others say; with `decisive`,
    the first that failed and is decisive: under `search.symptom: same` a failure outside
    the bad end's symptom does not settle the verdict), and a check that can stop within its
    cases (the eval) does."""
    results: list[CheckResult] = []
    for i, check in enumerate(checks):
        results.append(_run_check(check, api, golden, early=stop))
        failed = not results[-1].passed
        if stop and failed and (decisive is None or decisive(results[-1].name)):
            return tuple(results), tuple(c.name for c in checks[i + 1 :])
    return tuple(results), ()


def _run_check(
    check: Check, api: OpenAIClient, golden: Golden | None, early: bool = False
) -> CheckResult:
    """One check (`early`: one that can stop at a decisive part of its cases does); a reply
    over the byte cap fails it, with that as its evidence."""
    try:
        if early and isinstance(check, StopsEarly):
            return check.run_early(api, golden)
        return check.run(api, golden)
    except ReplyTooLarge as exc:
        return CheckResult(
            name=check.name,
            passed=False,
            score=0.0,
            evidence=f"reply too large: {exc}",
            details=TooLargeDetails(reply_too_large=Cap(cap_bytes=exc.cap)),
        )
