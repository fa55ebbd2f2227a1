"""The runner: drives the search over up to k slots, through the seams it is given.

    plan ─► search.plan_batch ─► a probe per free slot (probe.py, a thread each) ─► journal ─┐
      ▲                                                                                        │
      └────────────────────────────── verdicts so far ◄────────────────────────────────────────┘

A slot is one placement (a local server, a container). Every finished probe is in the
journal before the next batch is chosen, so a run killed at any moment resumes without
repeating one; probes in flight when it died run again. A probe whose answer is no longer
needed (the range moved past it) is cancelled: its server stops and it is not a verdict.
With `reprobe` (`probe.repeats: auto`) a candidate whose verdict contradicts a neighbour's
is probed again (search.settle), into probes/<short>-2, on a free slot that has not probed
it where there is one (pick_slot), and, where the cluster picks the node (Slurm,
Kubernetes: launchers.Avoids), on none of the nodes its earlier probes ran on (`avoided`):
a restart elsewhere is an independent observation.
The journal keeps each probe as it tested; the search reads them as `search.symptom`
counts them (symptom.count), derived again at every step.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path

from .checks import Check
from .checks.golden import GoldenStore, Loads, unjudged, warnings as golden_warnings
from .client import OpenAIClient
from .clock import SYSTEM, Clock
from .config import differing
from .errors import BrokenGoodEnd, JournalError
from .files import write_atomic as write_atomic  # services write through it
from .journal import FILENAME, VERSION, Journal, JournalState, Span, plan_json, read_journal
from .launchers import Launcher, Server, StartsCold, price
from .model import Candidate, ProbeOutcome, Regress, Verdict
from .places import place_key
from .posterior import EXACT, Policy, Start
from .probe import CANCELLED, Cancel, ProbeContext, Progress, SilentProgress, probe
from .redact import Scrub
from .report.documents import Context, ResultDocument
from .report.html import render_html
from .report.markdown import render_markdown
from .report.result import Ran, build_result, verdicts_by_commit
from .search import (
    Answer,
    Plan,
    Seen,
    Status,
    broken_for_sure,
    contradicted,
    left_of,
    lookahead,
    no_longer_needed,
    pick_slot,
    plan_batch,
    plan_step,
    settles,
)
from .symptom import Counted, Symptom, count


def _commits(plan: Plan) -> tuple[object, ...]:
    """What identifies a plan (its texts are scrubbed on the way into the journal)."""
    anchor = plan.anchor.commit if plan.anchor else None
    return (plan.mode, anchor, *(c.commit for c in plan.sequence))


@dataclass
class RunResult:
    """What `run` returns: the answer and the documents it wrote."""

    answer: Answer
    result: ResultDocument
    out_dir: Path


def write_outputs(
    out_dir: Path, result: ResultDocument, scrub: Scrub | None = None
) -> ResultDocument:
    """result.json, report.md and report.html, each replaced atomically, secrets masked and
    long texts cut; returns the document as written."""
    clean = (scrub or Scrub()).doc(result.model_dump(mode="json"))
    doc = ResultDocument.model_validate(clean)
    write_atomic(out_dir / "result.json", json.dumps(clean, indent=2) + "\n")
    write_atomic(out_dir / "report.md", render_markdown(doc))
    write_atomic(out_dir / "report.html", render_html(doc))
    return doc


def write_probe(out_dir: Path, outcome: ProbeOutcome, scrub: Scrub | None = None) -> None:
    """probe.json: one probe's outcome (the `check` command), secrets masked, long texts cut."""
    clean = (scrub or Scrub()).doc(outcome.to_json())
    write_atomic(out_dir / "probe.json", json.dumps(clean, indent=2) + "\n")


def result_of(
    state: JournalState, warnings: Sequence[str] = (), golden: Path | None = None
) -> tuple[Answer | Candidate, ResultDocument | None]:
    """The search's next step for a journal state, and result.json once it has an answer;
    `golden`: the file the run judged by (an error where the next step cannot be judged
    without it, as the run ends: golden.unjudged)."""
    used = count(state.plan, state.probes, state.symptom).used
    seen = history(used, state.policy)
    if state.policy.exact:
        step = plan_step(state.plan, seen, reprobe=state.reprobe, policy=state.policy)
    else:  # as the run's search stepped: with where each verdict came from
        batch = plan_batch(state.plan, seen, 1, policy=state.policy, starts=starts_of(used))
        step = batch if isinstance(batch, Answer) else batch[0]
    if isinstance(step, Candidate) and golden is not None:
        good = state.plan.good.commit
        why = unjudged(golden, good, {step.commit}, state.probes, state.regress)
        step = step if why is None else Answer(Status.ERROR, None, (), why)
    if isinstance(step, Answer):
        return step, build_result(
            state.plan,
            step,
            state.probes,
            Ran(
                state.regress,
                warnings,
                spans=state.spans,
                context=Context.model_validate(state.context),
                started=state.started,
                ended=state.ended,
                parallel=1 + max((s.slot or 0 for s in state.spans), default=0),
                policy=state.policy,
                symptom=state.symptom,
            ),
        )
    return step, None


def history(probes: Sequence[ProbeOutcome], policy: Policy = EXACT) -> dict[str, list[Verdict]]:
    """Commit → the verdict of each of its probes, in order (what the search reads). Under
    the posterior search an `unsure` probe counts as what most of its repeats said (one
    server start: one observation); verdicts taken as facts keep it unsure."""
    if policy.exact:
        return verdicts_by_commit(probes)
    leant = [replace(p, verdict=p.leaning) if p.leaning is not None else p for p in probes]
    return verdicts_by_commit(leant)


def starts_of(probes: Sequence[ProbeOutcome]) -> dict[str, list[Start]]:
    """Commit → where and when each of its probes ran, in order (aligned with `history`)."""
    found: dict[str, list[Start]] = {}
    for p in probes:
        place = place_key(p.fingerprint.node, p.fingerprint.devices)
        found.setdefault(p.commit, []).append(Start(p.slot, p.began, place))
    return found


@dataclass(frozen=True)
class Record:
    """Where a run is recorded (DIR's journal and documents) and what it is recorded as."""

    out_dir: Path
    digest: str
    """The config's digest: a journal of another config is not resumed."""
    settings: Mapping[str, str] | None = None
    """The config's settings, to name those that differ when the digest does."""
    context: Context | None = None
    """documents.Context: the refs as given, the config, the node."""
    given: Sequence[tuple[ProbeOutcome, str]] = ()
    """Verdicts the run starts with instead of probing (outcome, where it came from)."""
    again: bool = False
    """The search goes on in the process that ran it: the journal's probes are its own."""
    scrub: Scrub | None = None
    """Everything written to DIR passes through it."""


@dataclass(frozen=True)
class Probing:
    """How each probe runs: its launcher, its checks and how often they run."""

    launcher: Launcher
    checks: Sequence[Check]
    client: Callable[[Server], OpenAIClient]
    repeats: int = 1
    """Runs of the check suite on each server."""
    early_stop: bool = False
    """A probe's suite stops at its first failed check, except at the ends."""
    regress: Regress = Regress.SEMANTIC
    golden: GoldenStore | None = None
    """None: one is recorded from the good end into DIR/golden.json."""


@dataclass(frozen=True)
class Searching:
    """How the search weighs verdicts and picks the next probes, and how many run at once."""

    policy: Policy = EXACT
    reprobe: bool = False
    symptom: Symptom = Symptom.ANY
    parallel: int = 1
    coarse: bool = False
    first: frozenset[str] = frozenset()
    priced: bool = False
    priors: Priors | None = None


def run(
    plan: Plan,
    record: Record,
    probing: Probing,
    searching: Searching = Searching(),
    *,
    progress: Progress | None = None,
    clock: Clock = SYSTEM,
) -> RunResult:
    """Bisect `plan` to an answer with up to `parallel` probes in flight, resuming from DIR's
    journal when there is one. `again`: the search goes on in the process that ran it (a
    confirmation's trials weighed): the journal's probes are its own, none resumed.

    `record` (Record): DIR, the config's digest and settings, and what the run starts with;
    `probing` (Probing): how each probe runs; `searching` (Searching): the search's rules.

    `repeats`: runs of the check suite on each server; `reprobe`: a verdict that contradicts
    a neighbour's is probed again (a new server) before it is used (`probe.repeats: auto`).
    `policy`: how verdicts are weighed (`search:`; EXACT: as facts) and the verdicts known from
    elsewhere it weighs (`Policy.known`, in the first event's `search`); a resume under another
    policy (another known_verdicts file) journals it and goes on under it.

    `early_stop`: a probe's suite stops at its first failed check, except at the ends.
    `symptom` (`search.symptom`): `same` counts a middle probe bad only with the bad end's
    symptom (symptom.py); its suite stops only at a failed check of that symptom. A resume
    under another rule journals it and derives every verdict again.

    `coarse`: candidates whose artifact is ready (an image, a published wheel, a
    cached build) are probed first, then the rest within the range left. `first`: commits
    probed first in their place, instead (a fast setup's answer, probed in the full one).
    `priced`: of candidates that tell nearly as much, the one whose artifact costs least
    (launchers.price: on the node, a download, a build) is probed (search.plan_batch).

    `priors` (`search.priors`): the candidates' prior weights from the files the good end's
    server loaded (the golden's `loads`), weighed from the moment the golden holds them (it is
    recorded by the good end's probe, which goes first); journalled with the policy.

        `context` (documents.Context: the refs as given, the config, the node) goes into the
    journal's first event and the report. `given`: verdicts the run starts with instead of
    probing (outcome, where it came from), e.g. the gate's two ends; journalled once.

    Without a `golden`, one is recorded from the good end into DIR/golden.json (the good
    end's probe runs alone, first). Everything written to DIR passes through `scrub`.
    """
    out_dir, launcher, checks, regress = (
        record.out_dir, probing.launcher, probing.checks, probing.regress
    )  # fmt: skip
    policy, symptom = searching.policy, searching.symptom
    progress = progress or SilentProgress()
    scrub = record.scrub or Scrub()
    golden = probing.golden or GoldenStore(
        out_dir / "golden.json", checks, plan.good.commit, scrub=scrub
    )
    ctx = ProbeContext(
        launcher, checks, probing.client, progress, probing.repeats, golden, regress,
        clock.monotonic,
    )  # fmt: skip
    if searching.priors is not None and not policy.exact:
        policy = with_prior(policy, searching.priors, golden)
    ends = frozenset({plan.good.commit, plan.bad.commit})  # their suites always run whole
    reference = _Reference()
    decisive = reference.decisive if symptom is Symptom.SAME else None
    ctx = replace(ctx, early_stop=probing.early_stop, full=ends, decisive=decisive)
    with Journal(out_dir / FILENAME, scrub) as journal:
        state = journal.reading.state
        resumed = 0 if state is None or record.again else len(state.probes)  # before this process
        if journal.reading.dropped:
            progress.note(f"journal: cut off its {journal.reading.dropped}")
        if state is not None and (
            state.digest != record.digest or _commits(state.plan) != _commits(plan)
        ):
            changed = differing(state.settings, record.settings or {}) if state.settings else []
            what = f" ({', '.join(changed)} differ)" if changed else ""
            raise JournalError(
                f"{out_dir}: holds a run of another config or range{what}; "
                "resume it with the same config, or pick a new --out"
            )
        if state is None:
            journal.append(
                "run",
                version=VERSION,
                digest=record.digest,
                **({"settings": dict(record.settings)} if record.settings else {}),
                plan=plan_json(plan),
                good=plan.good.commit,
                bad=plan.bad.commit,
                regress=regress.value,
                reprobe=searching.reprobe,
                **({} if policy.exact else {"search": policy.to_json()}),
                **({} if symptom is Symptom.ANY else {"symptom": symptom.value}),
                context=(record.context or Context()).model_dump(mode="json"),
                time=clock.time(),
            )
            for outcome, source in record.given:
                journal.append("probe", outcome=outcome.to_json(), given=source, time=clock.time())
            state = read_journal(out_dir / FILENAME).state
            assert state is not None
        elif (weighed := _weighed_from(state.policy, policy)) is not None:
            if weighed != state.policy:  # another flake or confidence, or `confirm` off
                journal.append("search", search=weighed.to_json(), time=clock.time())
            if _settings(weighed) != _settings(state.policy):
                progress.note(f"search: verdicts weighed by {_weighed(policy)} from here on")
            policy = weighed  # a culprit's trials stay weighed on resume
        elif state.policy != policy:
            journal.append("search", search=policy.to_json(), time=clock.time())
            if _settings(policy) != _settings(state.policy):  # not a confirmation weighed
                progress.note(f"search: verdicts weighed by {_weighed(policy)} from here on")
        if state.policy.known != policy.known:  # journalled with the policy, just above
            progress.note(
                f"candidates.known_verdicts: {len(policy.known)} verdict(s) known from "
                "elsewhere weighed from here on"
            )
        if state.symptom is not symptom:
            journal.append("symptom", symptom=symptom.value, time=clock.time())
            progress.note(
                f"search.symptom: {symptom.value} from here on (every verdict counted again "
                "from the probes' records)"
            )
        progress.planned(plan, len(state.probes), resumed)
        for line in launcher.reap():  # what killed llm-bisect processes left
            progress.note(line)
        slots = _Slots(
            plan, journal, state, ctx, replace(searching, policy=policy), out_dir, clock,
            reference,
        )  # fmt: skip
        step = slots.run()
        policy = slots.policy
        done = clock.time()
        journal.append("done", status=step.status.value, time=done)
    said = golden_warnings(golden.data) if golden.data else []
    for warning in said:
        progress.note(f"warning: {warning}")
    result = build_result(
        plan,
        step,
        slots.probes,
        Ran(
            regress,
            said,
            spans=slots.spans,
            context=Context.model_validate(state.context),
            started=state.started,
            ended=done,
            parallel=max(1, searching.parallel),
            policy=policy,
            symptom=symptom,
        ),
    )
    written = write_outputs(out_dir, result, scrub)
    return RunResult(step, written, out_dir)


def _weighed_from(journalled: Policy, policy: Policy) -> Policy | None:
    """The policy a resume goes on under where the journal's has confirmations weighed into
    it (services/stages.py Confirm): the config's, with those trials and looks kept (they are
    evidence whatever the rate), stopping for a confirmation only where both do (`confirm`
    may have been turned off since); None where it has none, or where `policy` carries its
    own (the Confirm stage's, which is the newer)."""
    if not (journalled.evidence or journalled.looks) or policy.evidence or policy.looks:
        return None
    return replace(
        policy,
        evidence=journalled.evidence,
        looks=journalled.looks,
        confirming=policy.confirming and journalled.confirming,
    )


def _settings(policy: Policy) -> Policy:
    """What a person set of a policy (flake, confidence, budget, batch)."""
    return replace(policy, evidence=(), looks=(), confirming=False, known=(), prior=())


Priors = Callable[[Loads], Mapping[str, float]]
"""The candidates' prior weights (by commit; those not named weigh 1) from a golden's record
of the files its server loaded (services/priors.py)."""


def with_prior(policy: Policy, priors: Priors, golden: GoldenStore) -> Policy:
    """The policy with the candidates' prior weights, where the golden holds its server's
    loads and the policy has none yet."""
    record = golden.data.loads if golden.data is not None else None
    if policy.prior or record is None:
        return policy
    weighed = tuple(sorted((c, w) for c, w in priors(record).items() if w != 1.0))
    return replace(policy, prior=weighed) if weighed else policy


def _weighed(policy: Policy) -> str:
    """How a policy weighs verdicts, for a person."""
    if policy.exact:
        return "flake 0 (as facts)"
    rate = "auto" if policy.flake is None else f"{policy.flake:g}"
    return f"flake {rate}, confidence {policy.confidence:g}"


def avoided(probes: Sequence[ProbeOutcome], commit: str) -> tuple[str, ...]:
    """The nodes a re-probe of `commit` keeps off where the cluster picks the node: those its
    earlier probes ran on, as their fingerprints say (launchers.Avoids). Pure."""
    return tuple(dict.fromkeys(p.fingerprint.node for p in probes
                               if p.commit == commit and p.fingerprint.node))  # fmt: skip


class _Reference:
    """What the search counts so far (symptom.Counted), for the probes' suites to read the bad
    end's symptom from (`decisive`): written by the runner's thread, read by the probes'."""

    def __init__(self) -> None:
        self.counted = Counted((), ())

    def decisive(self, check: str) -> bool:
        return self.counted.decisive(check)


@dataclass
class _Flight:
    """One probe in flight on a slot."""

    candidate: Candidate
    slot: int
    round: int
    began: float
    cancel: Cancel = field(default_factory=Cancel)


class _Slots:
    """Keeps up to k probes in flight: fills free slots from the search, journals each probe
    as it ends, cancels those no longer needed. The journal is written from this thread only.

    A probe's round is one more than the latest round whose answer was in when it started:
    one slot gives a round per probe; k slots in step give log_(k+1) n rounds."""

    def __init__(
        self,
        plan: Plan,
        journal: Journal,
        state: JournalState,
        ctx: ProbeContext,
        searching: Searching,
        out_dir: Path,
        clock: Clock = SYSTEM,
        reference: _Reference | None = None,
    ) -> None:
        self.plan, self.out_dir, self.journal, self.ctx = plan, out_dir, journal, ctx
        self.clock, self.policy = clock, searching.policy
        self.k, self.reprobe = max(1, searching.parallel), searching.reprobe
        arts = (
            {c.commit: ctx.launcher.artifact(c) for c in plan.candidates}
            if searching.coarse or searching.priced
            else {}
        )
        self.prefer = searching.first or (
            frozenset(c for c, art in arts.items() if art.ready)
            if searching.coarse
            else frozenset()
        )
        """Commits probed first in their place (`first`, else those ready where `coarse`)."""
        costs = {c: float(price(art)) for c, art in arts.items()} if searching.priced else None
        self.probes = list(state.probes)
        self.spans = list(state.spans)
        self.depth = state.rounds
        """The latest round whose answer is in: a probe started now is in the next one."""
        self.running: dict[Future[ProbeOutcome], _Flight] = {}
        self.broken: list[int] = []
        """The slots of the good end's starts whose answers were broken (BrokenGoodEnd): the
        good end starts again, elsewhere first, until search.broken_for_sure says it is."""
        self.symptom = searching.symptom
        """Which bad probes count as bad (`search.symptom`)."""
        self.reference = reference or _Reference()
        """What the search counts so far, for the probes' suites (`decisive`)."""
        self.costs = costs
        """What making each candidate runnable costs (launchers.price), where priced."""
        self.priors = None if searching.policy.exact else searching.priors
        """The candidates' prior weights from the golden's record (`search.priors`)."""

    def run(self) -> Answer:
        with ThreadPoolExecutor(max_workers=self.k, thread_name_prefix="probe") as pool:
            try:
                return self._loop(pool)
            except BaseException:
                for flight in self.running.values():  # Ctrl-C, SIGTERM, a bug: stop them all
                    flight.cancel()
                raise

    def _loop(self, pool: ThreadPoolExecutor) -> Answer:
        reprobe = self.reprobe
        while True:
            policy = self._weighed()
            counted = count(self.plan, self.probes, self.symptom)
            self.reference.counted = counted
            seen = history(counted.used, policy)
            starts = starts_of(counted.used)
            busy = {f.candidate.commit: f for f in self.running.values()}
            # a bad probe waiting for the bad end's symptom is waited for as a running one
            waiting = frozenset(busy) | counted.held
            needless = no_longer_needed(
                self.plan, seen, frozenset(busy), reprobe=reprobe, policy=policy, starts=starts
            )
            for commit in needless:
                if not busy[commit].cancel.cancelled:
                    busy[commit].cancel()
            # A cancelled probe still holds its slot and its commit until it ends: the search
            # may want that commit again (verdicts that are not monotone move the range back).
            free = self.k - len(self.running)
            step = plan_batch(
                self.plan, seen, free, self.prefer, waiting, reprobe=reprobe, policy=policy,
                starts=starts, costs=self.costs,
            )  # fmt: skip
            if isinstance(step, Answer) and not self.running:
                return step
            golden = self.ctx.golden
            if isinstance(step, list) and step and not self.running and golden is not None:
                wanted = {c.commit for c in step}
                if (why := golden.unjudged(wanted, self.probes, self.ctx.regress)) is not None:
                    return Answer(Status.ERROR, None, (), why)  # never a probe it cannot judge
            if isinstance(step, list):
                # re-probes pick their slots first: each prefers one that has not probed it
                raw = {c.commit: sum(1 for p in self.probes if p.commit == c.commit) for c in step}
                for candidate in sorted(step, key=lambda c: not raw[c.commit]):
                    self._start(pool, candidate, raw[candidate.commit], seen)
                if self.k == 1 and step:
                    ahead = lookahead(
                        self.plan, seen, step[0], self.prefer, reprobe=reprobe, policy=policy
                    )
                    self.ctx.launcher.prefetch(ahead)
            self.ctx.progress.narrowed(*left_of(self.plan, seen, reprobe=reprobe, policy=policy))
            if not self.running:  # never: the search waits only while a probe runs
                raise RuntimeError(f"the search stalled at {step!r}")
            done, _ = wait(self.running, return_when=FIRST_COMPLETED)
            for future in done:
                self._finish(future)

    def _weighed(self) -> Policy:
        """The policy, with the candidates' priors once the golden holds its server's loads
        (recorded by the good end's probe): journalled and said once."""
        if self.priors is None or self.ctx.golden is None:
            return self.policy
        weighed = with_prior(self.policy, self.priors, self.ctx.golden)
        if weighed != self.policy:
            self.policy = weighed
            self.journal.append("search", search=weighed.to_json(), time=self.clock.time())
            low = len(weighed.prior)
            self.ctx.progress.note(
                f"search.priors: {low} of {len(self.plan.sequence) - 1} candidates weighed low "
                "from here on (they touch only files the good end's server never loaded, docs "
                "or tests)"
            )
        return self.policy

    def _start(
        self,
        pool: ThreadPoolExecutor,
        candidate: Candidate,
        before: int,
        seen: Seen,
    ) -> None:
        """Start a probe on a free slot (pick_slot); `before`: its finished probes (a re-probe
        has one, and its own folder); `seen`: the verdicts the search counts now (a re-probe
        of one that contradicts, search.contradicted, starts on an empty engine cache)."""
        taken = {f.slot for f in self.running.values()}
        tried = [
            span.slot
            for done, span in zip(self.probes, self.spans, strict=False)
            if done.commit == candidate.commit and span.slot is not None
        ]
        if candidate.commit == self.plan.good.commit:
            tried += self.broken  # its broken starts were journalled as none
        slot = pick_slot(self.k, taken, tried)
        began, round_ = self.clock.time(), self.depth + 1
        self.journal.append(
            "probe-start", commit=candidate.commit, slot=slot, round=round_, time=began
        )
        flight = _Flight(candidate, slot, round_, began)
        name = candidate.short if not before else f"{candidate.short}-{before + 1}"
        if before:
            why = (
                "its probe stopped before the checks the bad end failed (search.symptom: same)"
                if candidate.commit in self.reference.counted.untold
                else "its verdict contradicts a neighbour's"
                if self.policy.exact
                else "another verdict of it tells most about the culprit now"
            )
            self.ctx.progress.note(f"{candidate.short}: probing again, {why}")
            doubted = candidate.commit in contradicted(self.plan, seen)
            if doubted and isinstance(self.ctx.launcher, StartsCold):
                self.ctx.launcher.start_cold(candidate)  # not on what its first start compiled
        probe_dir = self.out_dir / "probes" / name
        ctx = self.ctx
        if ctx.early_stop and not self.running and self._settles(candidate, seen):
            # its verdict ends the search either way: its suite is the answer's evidence,
            # run whole now rather than by another start after the search (stages.Evidence)
            ctx = replace(ctx, full=ctx.full | {candidate.commit})
        avoid = avoided(self.probes, candidate.commit) if before else ()
        future = pool.submit(probe, candidate, probe_dir, ctx, flight.cancel, slot, avoid)
        self.running[future] = flight

    def _settles(self, candidate: Candidate, seen: Seen) -> bool:
        return settles(self.plan, seen, candidate, reprobe=self.reprobe, policy=self.policy)

    def _finish(self, future: Future[ProbeOutcome]) -> None:
        flight = self.running.pop(future)
        try:
            outcome = future.result()
        except BrokenGoodEnd as exc:
            self.broken.append(flight.slot)
            if flight.cancel.cancelled or broken_for_sure(self.broken, self.policy.exact):
                raise
            again = "a start that glitched?"
            if len(set(self.broken)) == 1 and len(self.broken) > 1:
                again = f"{len(self.broken)} starts in one place may lie together"
            self.ctx.progress.note(f"{exc}; starting it again ({again})")
            return  # nothing journalled: the search asks for the good end again
        except Exception:
            if not flight.cancel.cancelled:
                raise  # a bug: the run stops, and says so
            outcome = ProbeOutcome(flight.candidate.commit, Verdict.SKIP, CANCELLED)
        ended = self.clock.time()
        if flight.cancel.cancelled:
            self.journal.append(
                "probe-cancel", commit=flight.candidate.commit, slot=flight.slot, time=ended
            )
            self.ctx.progress.finished(flight.candidate, outcome)  # says: cancelled
            return
        self.journal.append(
            "probe",
            outcome=outcome.to_json(),
            slot=flight.slot,
            round=flight.round,
            time=ended,
        )
        self.probes.append(replace(outcome, slot=flight.slot, began=flight.began))
        self.spans.append(Span(flight.began, ended, slot=flight.slot, round=flight.round))
        self.depth = max(self.depth, flight.round)
        self.ctx.progress.finished(flight.candidate, outcome)
