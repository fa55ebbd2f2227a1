"""The post-run stages: what a bisection does once its search has an answer, in one list.

    search ─► fast ─► confirm ─► evidence ─► later ─► localize ─► bumps ─► reach ─► continue
      ▲         ▲       │ a look weighed: the search on,                               │
      └─────────┴───────┘ then fast again                       run_bisect into DIR/continued
    ╰───────── the run's launcher held ──────────╯ (given back: no stage left probes with it)
    each stage's part of DIR: fast.json, confirmation.json, evidence.json, later.json,
    localization.json, bumps.json, reach.json, continued.json

Each stage is a small object: `apply` runs it after the search (it may probe; it saves what
it found in its part of DIR and writes result.json again), `restore` reads that part back
into a result without starting anything (`report DIR`). `apply` (services/bisection.py
calls it) loops the stages' `apply`, `restore` (`report DIR`) their `restore`: both go
through the same list, so a stage added here is in both, and `report DIR` rewrites the
result.json the run wrote. A stage declares what it needs: `probes`, the run's launcher
(held while a stage left needs it); `each_search`, to follow every search (`Search`, run
again by `confirm`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from ..checks.golden import GoldenStore
from ..config import Config, FastConfig
from ..journal import FILENAME, Journal, begin_side, read_journal, side_probes
from ..launchers import Launcher
from ..model import Candidate, ProbeOutcome, Regress, Verdict
from ..pins import commit_bumps
from ..posterior import Policy, Trial as Weighed, reverts_at_once
from ..probe import ProbeContext, Progress, SilentProgress, probe
from ..redact import redact
from ..report.documents import (
    BumpDoc,
    Confirmation,
    Context,
    CulpritDoc,
    FastDoc,
    PickDoc,
    ProbeDoc,
    ReachDoc,
    ResultDocument,
    Together,
)
from ..report.result import probe_doc
from ..runner import (
    Priors,
    Probing,
    Record,
    RunResult,
    Searching,
    avoided,
    run as run_search,
    write_atomic,
    write_outputs,
)
from ..search import Answer, Mode, Plan, Status, trial_slots
from ..secretnames import argv_secrets, secret_names
from ..sources.releases import reach
from ..symptom import Symptom
from .confirm import (
    CONTINUED,
    Look,
    as_a_whole,
    confirm,
    continue_after,
    goes_on,
    keep,
    looked,
    placed,
    second_look,
    unconfirmed,
    weighed_trials,
    with_confirmation,
)
from .later import probe_later, with_later
from .localization import culprit_pair, localize_after_run, with_localization
from .setup import Setup

EVIDENCE_JOURNAL = "evidence.jsonl"


@dataclass
class Search:
    """The run's search (runner.run) with all it runs with but the policy: run by the run,
    then again by `confirm` under a policy with a look's trials weighed. Only its first run
    reads the journal as this process found it: the probes read then are resumed, those of
    a search run again are this process's own."""

    s: Setup
    config: Config
    """The run's config (its ends as given)."""
    plan: Plan
    out_dir: Path
    launcher: Launcher
    golden: GoldenStore
    digest: str
    settings: Mapping[str, str]
    context: Context
    progress: Progress | None = None
    given: Sequence[tuple[ProbeOutcome, str]] = ()
    first: frozenset[str] = frozenset()
    priced: bool = False
    """Candidates' artifacts priced for the search's cost-aware choice (the config builds)."""
    priors: Priors | None = None
    """What each candidate touches, for its prior weight (`search.priors`; None: off)."""
    runs: int = 0
    """How many times it ran in this process."""

    def run(self, policy: Policy) -> RunResult:
        c = self.config
        done = run_search(
            self.plan,
            Record(
                self.out_dir, self.digest, self.settings, self.context, self.given,
                again=self.runs > 0, scrub=self.s.scrub,
            ),
            Probing(
                self.launcher, self.s.checks, self.s.client, c.probe.runs, c.probe.early_stop,
                Regress(c.regress), self.golden,
            ),
            Searching(
                policy, c.probe.reprobe, Symptom(c.search.symptom), c.parallel,
                c.candidates.coarse, self.first, self.priced, self.priors,
            ),
            progress=self.progress,
        )  # fmt: skip
        self.runs += 1
        return done


class Bisect(Protocol):
    """A bisection into a DIR of its own (services/bisection.run_bisect), passed in: several
    culprits go on with one after a culprit (`Continue`)."""

    def __call__(
        self, s: Setup, out_dir: Path, *, good: str | None = None, bad: str | None = None,
        progress: Progress | None = None,
    ) -> RunResult: ...  # fmt: skip


@dataclass
class StageRun:
    """What the stages of one run share."""

    s: Setup
    out_dir: Path
    plan: Plan
    note: Callable[[str], None]
    golden: GoldenStore
    search: Search
    progress: Progress | None = None
    launcher: Launcher | None = None
    """The run's launcher, while a stage left probes with it (None after)."""
    quick: ResultDocument | None = None
    """The fast setup's result (`probe.fast`), else None."""
    later: Sequence[tuple[str, Candidate]] = ()
    """`candidates.later`, resolved, oldest first."""
    bisect: Bisect | None = None
    """What several culprits go on with after a culprit (`search.culprits`, `confirm:
    continue`): run_bisect; None: they do not."""
    where: bool = True
    """Say which releases hold the culprit (`reach`); not for `deps` (made-up commits)."""

    def search_on(self, policy: Policy) -> RunResult:
        """The search again under `policy` (a look's trials weighed), and the stages that
        follow every search (`each_search`: fast) applied to its answer again."""
        done = self.search.run(policy)
        for stage in STAGES:
            if stage.each_search:
                done = stage.apply(self, done)
        return done

    def probe_context(self) -> ProbeContext:
        assert self.launcher is not None
        c = self.s.config
        return ProbeContext(self.launcher, self.s.checks, self.s.client,
                            self.progress or SilentProgress(), c.probe.runs, self.golden,
                            Regress(c.regress), self.s.clock)  # fmt: skip


class Stage(Protocol):
    """One step after the search."""

    name: str
    probes: bool
    """Whether `apply` probes with the run's launcher (it is held while a stage left does)."""
    each_search: bool
    """Whether it follows every search, those `confirm` runs again included (it reads the
    search's answer alone; only a stage before `confirm`)."""

    def apply(self, run: StageRun, done: RunResult) -> RunResult:
        """The run's answer and result with this stage done (probing what it needs)."""
        ...

    def restore(self, done: RunResult) -> RunResult:
        """The answer and result with what this stage saved in DIR (`report DIR`). Pure but
        for reading DIR."""
        ...


def _written(done: RunResult, result: ResultDocument, run: StageRun) -> RunResult:
    return RunResult(done.answer, write_outputs(done.out_dir, result, run.s.scrub), done.out_dir)


def save(out_dir: Path, name: str, result: ResultDocument, part: object, run: StageRun) -> None:
    """DIR/<name>.json: a stage's part, with the answer it belongs to (culprit and ends)."""
    culprit = result.culprit.commit if result.culprit else None
    stored = {"culprit": culprit, "good": result.good, "bad": result.bad, name: part}
    write_atomic(out_dir / f"{name}.json", json.dumps(run.s.scrub.doc(stored), indent=2) + "\n")


def stored(out_dir: Path, name: str, result: ResultDocument) -> Any:
    """What DIR/<name>.json holds for this answer; None when it holds none or another's."""
    try:
        doc = json.loads((out_dir / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None
    culprit = result.culprit.commit if result.culprit else None
    if not isinstance(doc, dict) or name not in doc:
        return None
    if (doc.get("culprit"), doc.get("good"), doc.get("bad")) != (culprit, result.good, result.bad):
        return None
    return doc[name]


class Fast:
    """`probe.fast`: where the search ran first and whether the full setup agrees."""

    name = "fast"
    probes = False
    each_search = True

    def apply(self, run: StageRun, done: RunResult) -> RunResult:
        if run.quick is None:
            return done
        secret = run.s.secret_names
        doc = fast_doc(run.s.config.probe.fast, secret, run.quick, done.result)
        run.note(doc.line)
        save(done.out_dir, self.name, done.result, doc.model_dump(mode="json"), run)
        return _written(done, done.result.model_copy(update={"fast": doc}), run)

    def restore(self, done: RunResult) -> RunResult:
        part = stored(done.out_dir, self.name, done.result)
        if part is None:
            return done
        doc = FastDoc.model_validate(part)
        return replace_result(done, done.result.model_copy(update={"fast": doc}))


class Confirm:
    """The culprit reverted and picked (services/confirm.py). Under the posterior search the
    trials are evidence like any probe: weighed, and the search goes on where the posterior
    then points (where the search stopped for them, they carry its culprit to the
    confidence); a culprit it names after one look was not borne out gets a look on new
    starts (posterior.next_look: at most five looks a run, three a culprit)."""

    name = "confirm"
    probes = True
    each_search = False

    def apply(self, run: StageRun, done: RunResult) -> RunResult:
        s, out_dir, note = run.s, done.out_dir, run.note
        if s.config.confirm is False:
            return done
        ctx = run.probe_context()
        policy = _journalled(out_dir, s.config.search_policy(run.plan.mode is Mode.FIX))
        said: set[str] = set()

        held: list[str] = []

        def once(line: str) -> None:
            """A look judged again after the search went on (its trials from its journal)
            says its judgement once a run, not once a judging. Under the posterior search a
            look's "confirmed" waits for the end: one look is not yet a confirmation
            (posterior.reverts_hold), and is never said of a culprit whose revert reads bad
            on the next."""
            if not policy.exact and ": confirmed: " in line:
                held[:] = [line]
                return
            say(line)

        def say(line: str) -> None:
            if line not in said:
                said.add(line)
                note(line)

        def look(now: RunResult, weighed: Policy, at: int) -> Confirmation | None:
            checked = _checked(out_dir, now.result)
            where = _trial_slots(s.config.parallel, checked, now.result, weighed.evidence)
            clean = len(set(where) - {p.slot for p in checked})
            this = Look(at, where, at >= len(weighed.looks), _checked_nodes(checked, now.result),
                        reverts_at_once(clean, weighed.exact))  # fmt: skip
            return confirm(s.source.path, out_dir, now.result, ctx, once, s.scrub, this, s.now)

        done, found, policy = looked(done, policy, _answer_of, look, run.search_on, note)
        if found is not None and found.status == "confirmed" and held:
            say(held[0])  # the look that stood, said once
        evidence = done.result.search.evidence if done.result.search else []
        if found is not None and found.status == "confirmed" and len(policy.looks) > 1:
            own = len(weighed_trials(found, "")) if policy.looks[-1][1] else 0
            earlier = evidence[: len(evidence) - own]  # the looks before this one
            if earlier:  # (a look whose trials reused the run's probes weighed none)
                why = second_look(done.result, earlier)
                note(f"confirm: {why}")
                found = found.model_copy(update={"reason": f"{found.reason}; {why}"})
                keep(out_dir, done.result, found, s.scrub)  # as `report DIR` reads it
        if found is None:
            return done
        confirmed = done.result.model_copy(update={"confirmation": found})
        answer, confirmed = unconfirmed(done.answer, confirmed)
        return RunResult(answer, write_outputs(out_dir, confirmed, s.scrub), out_dir)

    def restore(self, done: RunResult) -> RunResult:
        answer, result = unconfirmed(done.answer, with_confirmation(done.result, done.out_dir))
        return RunResult(answer, result, done.out_dir)  # as the run ended it


def _answer_of(done: RunResult) -> Answer:
    return done.answer


def _checked(out_dir: Path, result: ResultDocument) -> list[ProbeOutcome]:
    """The probes whose verdicts a confirmation checks: the culprit's and its parent's, as
    the search's journal holds them, oldest first (read once a look)."""
    pair = set(culprit_pair(result) or ())
    state = read_journal(out_dir / FILENAME).state
    return [p for p in state.probes if p.commit in pair] if state is not None else []


def _trial_slots(
    k: int, checked: Sequence[ProbeOutcome], result: ResultDocument, earlier: Sequence[Weighed]
) -> tuple[int, ...]:
    """Where a confirmation's trials run (confirm.trial_slots): away from the slots whose
    verdicts named the culprit (`checked`) and from those of its earlier looks' trials (a
    burst there would lie to every look)."""
    culprit = result.culprit.commit if result.culprit is not None else ""
    return placed(k, [p.slot for p in checked], earlier, culprit)


def _checked_nodes(checked: Sequence[ProbeOutcome], result: ResultDocument) -> tuple[str, ...]:
    """The nodes the verdicts a confirmation checks ran on (the parent's, then the
    culprit's), as their fingerprints name them: its trials keep off them where the cluster
    picks the node (launchers.Avoids)."""
    pair = culprit_pair(result) or ()
    return tuple(node for commit in pair for node in avoided(checked, commit))


def _journalled(out_dir: Path, policy: Policy) -> Policy:
    """The policy the run's search went by, as its journal holds it (with confirmations
    weighed, `calibrate`'s restarts); `policy` where there is no journal."""
    state = read_journal(out_dir / FILENAME).state
    return policy if state is None else state.policy


class Evidence:
    """The decisive builds (the last good and the first bad) with every check: where the
    search's probe of one stopped at its first failed check (`probe.early_stop`), it is
    probed again in full, into DIR/evidence/<short>; journalled in DIR/evidence.jsonl (a
    resume does not repeat it), kept in DIR/evidence.json. A probe of it that ran every check
    already is used as it is: a good one always did, and so did the search's last probe,
    whose verdict ended the search either way (runner: `settles`). Rarely more than one.
    It runs elsewhere than the probe it completes: another slot (confirm.trial_slots), and,
    where the cluster picks the node, off that probe's node (launchers.Avoids)."""

    name = "evidence"
    probes = True
    each_search = False

    def apply(self, run: StageRun, done: RunResult) -> RunResult:
        result = done.result
        pair = culprit_pair(result)
        if pair is None:
            return done
        wanted = [c for c in pair if _stopped_early(result.probe_of(c))]
        if not wanted:
            return done
        plan = run.plan
        known = {c.commit: c for c in (*plan.candidates, plan.good, plan.bad)}
        digest = hashlib.sha256("\0".join(pair).encode()).hexdigest()[:16]
        path = done.out_dir / EVIDENCE_JOURNAL
        found = side_probes(path, digest)  # another pair's is dropped
        ctx = replace(run.probe_context(), early_stop=False)
        with Journal(path, run.s.scrub) as journal:
            begin_side(journal, self.name, digest, 1)
            for commit in wanted:
                if commit in found:
                    continue
                candidate = known.get(commit) or run.s.source.resolve(commit, "evidence")
                ran = result.probe_of(commit)
                slot = trial_slots(run.s.config.parallel, [ran.slot if ran else None])[0]
                node = ran.fingerprint.node if ran else ""  # off it, where a cluster picks
                run.note(f"evidence: probing {candidate.short} again with every check")
                where = done.out_dir / "evidence" / candidate.short
                outcome = probe(candidate, where, ctx, slot=slot, avoid=(node,) if node else ())
                journal.append("probe", outcome=outcome.to_json())
                found[commit] = outcome
        subjects = {p.commit: p.subject for p in result.probes}
        full = [probe_doc(found[c], subjects.get(c, "")) for c in wanted if c in found]
        save(done.out_dir, self.name, result, [p.model_dump(mode="json") for p in full], run)
        return _written(done, result.model_copy(update={"decisive": full}), run)

    def restore(self, done: RunResult) -> RunResult:
        part = stored(done.out_dir, self.name, done.result)
        if part is None:
            return done
        full = [ProbeDoc.model_validate(p) for p in part]
        return replace_result(done, done.result.model_copy(update={"decisive": full}))


def _stopped_early(p: ProbeDoc | None) -> bool:
    """A tested probe whose suite stopped before every check ran."""
    return p is not None and bool(p.not_run) and p.verdict in (Verdict.GOOD, Verdict.BAD)


class Later:
    """`candidates.later`: builds newer than the bad end (services/later.py)."""

    name = "later"
    probes = True
    each_search = False

    def apply(self, run: StageRun, done: RunResult) -> RunResult:
        if not run.later:
            return done
        ends = probe_later(run.s.source.path, done.out_dir, done.result, run.later,
                           run.probe_context(), run.note, run.s.scrub,
                           run.s.source.is_ancestor)  # fmt: skip
        if not ends:
            return done
        return _written(done, done.result.model_copy(update={"later": ends}), run)

    def restore(self, done: RunResult) -> RunResult:
        return replace_result(done, with_later(done.result, done.out_dir))


class Localize:
    """The first module whose output differs (services/localization.py)."""

    name = "localize"
    probes = False  # it starts servers of its own, with the worker extension
    each_search = False

    def apply(self, run: StageRun, done: RunResult) -> RunResult:
        plan = run.plan
        known = {c.commit: c for c in (*plan.candidates, plan.good, plan.bad)}
        located = localize_after_run(run.s, done.result, done.out_dir, run.note, known)
        if located is None:
            return done
        run.note(located.line)
        return _written(done, done.result.model_copy(update={"localization": located}), run)

    def restore(self, done: RunResult) -> RunResult:
        return replace_result(done, with_localization(done.result, done.out_dir))


class Bumps:
    """The dependency pins the culprit changes (pins.py), read from its diff once."""

    name = "bumps"
    probes = False
    each_search = False

    def apply(self, run: StageRun, done: RunResult) -> RunResult:
        result = done.result
        if result.status is not Status.FOUND or result.culprit is None:
            return done
        found = [
            BumpDoc(name=b.name, old=b.old, new=b.new, files=list(b.files), label=b.label)
            for b in commit_bumps(run.s.source.path, result.culprit.commit)
        ]
        save(done.out_dir, self.name, result, [b.model_dump(mode="json") for b in found], run)
        if not found:
            return done
        run.note("the culprit bumps " + ", ".join(b.label for b in found))
        return _written(done, result.model_copy(update={"bumps": found}), run)

    def restore(self, done: RunResult) -> RunResult:
        part = stored(done.out_dir, self.name, done.result)
        if part is None:
            return replace_result(done, _bumps_written(done.result, done.out_dir))
        found = [BumpDoc.model_validate(b) for b in part]
        return replace_result(done, done.result.model_copy(update={"bumps": found}))


def _bumps_written(result: ResultDocument, out_dir: Path) -> ResultDocument:
    """A DIR from before bumps.json: the bumps the result.json written before held."""
    before = _written_before(result, out_dir)
    return result if before is None else result.model_copy(update={"bumps": before.bumps})


def _written_before(result: ResultDocument, out_dir: Path) -> ResultDocument | None:
    """The result.json written before, where it names the same culprit (git is not read
    again); None otherwise."""
    try:
        before = ResultDocument.model_validate_json((out_dir / "result.json").read_bytes())
    except (OSError, ValueError):
        return None
    same = before.culprit and result.culprit and before.culprit.commit == result.culprit.commit
    return before if same else None


class Reach:
    """Where the culprit lives (sources/releases.py): release tags and branches, picks
    included; for a fix, where a backport is needed."""

    name = "reach"
    probes = False
    each_search = False

    def apply(self, run: StageRun, done: RunResult) -> RunResult:
        result = done.result
        if not run.where or result.status is not Status.FOUND or result.culprit is None:
            return done
        where = reach_doc(run.s.source.path, result)
        run.note(f"{result.culprit.commit[:12]}: {where.sentence}")
        save(done.out_dir, self.name, result, where.model_dump(mode="json"), run)
        return _written(done, result.model_copy(update={"reach": where}), run)

    def restore(self, done: RunResult) -> RunResult:
        part = stored(done.out_dir, self.name, done.result)
        if part is None:  # a DIR from before reach.json: what result.json held
            before = _written_before(done.result, done.out_dir)
            where = before.reach if before is not None else None
        else:
            where = ReachDoc.model_validate(part)
        if where is None:
            return done
        return replace_result(done, done.result.model_copy(update={"reach": where}))


def reach_doc(repo: Path, result: ResultDocument) -> ReachDoc:
    """Where the culprit lives; for a fix (`--find-fix`), where a backport is needed: the
    release branches that hold the broken old end but not the fix."""
    assert result.culprit is not None
    regression = result.bad if result.mode is Mode.FIX else None
    found = reach(repo, result.culprit.commit, regression)
    picks = [PickDoc(commit=p.commit, tags=list(p.tags), branches=list(p.branches))
             for p in found.picks]  # fmt: skip
    return ReachDoc(
        tags=list(found.tags), branches=list(found.branches), picks=picks,
        missing=list(found.missing), backport=list(found.backport), sentence=found.sentence(),
    )  # fmt: skip


class Continue:
    """Several culprits (`search.culprits`, `confirm: continue`): a revert that did not fix
    the bad end on verdicts the search believes (confirm.goes_on); what remains is bisected
    on the reverted line, into DIR/continued (which goes on in its own DIR/continued, up to
    the culprits allowed). result.json lists every culprit and whether the bad end is good
    with all of them reverted (`together`): found where it is."""

    name = "continued"
    probes = False  # the bisection it starts holds a launcher of its own
    each_search = False

    def apply(self, run: StageRun, done: RunResult) -> RunResult:
        culprits = run.s.config.culprits
        asked = run.s.config.confirm == "continue"
        if culprits < 2 or run.bisect is None or not goes_on(done.result, asked):
            return done
        sequence = [c.commit for c in run.plan.sequence]
        went_on = continue_after(run.s.source.path, done.result, sequence,
                                 partial(self.after, run, run.bisect), run.note,
                                 culprits)  # fmt: skip
        run.note(f"confirm: {went_on['message']}")
        save(done.out_dir, self.name, done.result, went_on, run)
        answer, result = _went_on(done, went_on)
        if result.together is not None:
            shown = ", ".join(c.commit[:12] for c in result.culprits)
            run.note(f"culprits: {shown}; together: {result.together.status}: "
                     f"{result.together.reason}")  # fmt: skip
        written = write_outputs(done.out_dir, result, run.s.scrub)
        return RunResult(answer, written, done.out_dir)

    @staticmethod
    def after(run: StageRun, bisect: Bisect, good: str, bad: str, culprits: int) -> ResultDocument:
        """What remains, on the reverted line from `good` to `bad`, bisected into
        DIR/continued, naming at most `culprits` (it goes on itself where that is more)."""
        c = run.s.config
        # the outer run's later refs; its known verdicts are of other trees than this line's
        only = c.candidates.model_copy(update={"later": [], "known_verdicts": None})
        named = c.search.model_copy(update={"culprits": culprits})
        # its good end is the culprit reverted, not the config golden's: its own golden
        inner = c.model_copy(update={"confirm": True, "candidates": only, "golden": None,
                                     "search": named})  # fmt: skip
        return bisect(replace(run.s, config=inner), run.out_dir / CONTINUED, good=good, bad=bad,
                      progress=run.progress).result  # fmt: skip

    def restore(self, done: RunResult) -> RunResult:
        part = stored(done.out_dir, self.name, done.result)
        if not isinstance(part, dict) or done.result.confirmation is None:
            return done
        answer, result = _went_on(done, part)
        return RunResult(answer, result, done.out_dir)


def _went_on(done: RunResult, went_on: dict[str, Any]) -> tuple[Answer, ResultDocument]:
    """The answer and result with what the bisection after the culprit found (continued.json:
    the next culprit in `confirmation.continued`; every culprit, and them together). Pure."""
    result = done.result
    assert result.confirmation is not None
    kept = {k: v for k, v in went_on.items() if k not in ("culprits", "together")}
    went = result.confirmation.model_copy(update={"continued": kept})
    named = [CulpritDoc.model_validate(c) for c in went_on.get("culprits") or ()]
    said = went_on.get("together")
    together = None if said is None else Together.model_validate(said)
    update = {"confirmation": went, "culprits": named, "together": together}
    return as_a_whole(done.answer, result.model_copy(update=update))


def replace_result(done: RunResult, result: ResultDocument) -> RunResult:
    return RunResult(done.answer, result, done.out_dir)


STAGES: tuple[Stage, ...] = (
    Fast(), Confirm(), Evidence(), Later(), Localize(), Bumps(), Reach(), Continue(),
)  # fmt: skip
"""In the order a run applies them (`apply`) and `report DIR` restores them (`restore`)."""


def apply(
    run: StageRun, done: RunResult, launcher: ExitStack, stages: Sequence[Stage] = STAGES
) -> RunResult:
    """The run's answer and result with every stage applied, in order; `launcher` holds the
    run's launcher, given back as soon as no stage left probes with it (before localisation
    and the bisection after a culprit, which start servers of their own)."""
    for i, stage in enumerate(stages):
        if not any(left.probes for left in stages[i:]):
            launcher.close()
            run.launcher = None
        done = stage.apply(run, done)
    return done


def restore(done: RunResult, stages: Sequence[Stage] = STAGES) -> RunResult:
    """`report DIR`: the search's answer and result with every stage's part of DIR, as the run
    ended it; nothing is started."""
    for stage in stages:
        done = stage.restore(done)
    return done


def fast_shown(fast: FastConfig | None, secret: Collection[str]) -> str:
    """The fast setup as output shows it: its flags and variables, a secret's value masked."""
    assert fast is not None
    hidden = set(argv_secrets(fast.args))
    words = [redact(a, hidden) for a in fast.args]
    named = {*secret, *secret_names(fast.env)}  # the fast setup's own secrets too
    words += [f"{k}={'***' if k in named else redact(v, hidden)}" for k, v in fast.env.items()]
    return " ".join(words)


def fast_doc(
    fast: FastConfig | None, secret: Collection[str], quick: ResultDocument, full: ResultDocument
) -> FastDoc:
    """What the fast search found and whether the full run agrees. Pure."""
    assert fast is not None
    shown = fast_shown(fast, secret)
    reproduced = quick.status in (Status.FOUND, Status.AMBIGUOUS)
    n, m = len(quick.probes), len(full.probes)
    env = {k: "***" if k in {*secret, *secret_names(fast.env)} else v for k, v in fast.env.items()}
    doc = FastDoc(args=list(fast.args), env=env, status=quick.status, message=quick.message,
                  reproduced=reproduced, range=list(quick.range), probes=n, agreed=None,
                  line="")  # fmt: skip
    if not reproduced:
        line = (f"fast setup ({shown}): {quick.message}; the search ran in the full setup "
                f"({m} probes)")  # fmt: skip
        return doc.model_copy(update={"line": line})
    last = len(quick.range) - 1
    found_fast = quick.culprit.commit[:12] if quick.culprit else f"{last} candidates"
    said = f"fast setup ({shown}): {n} probes found {found_fast}"
    if (
        full.status is Status.FOUND
        and quick.culprit is not None
        and full.culprit is not None
        and full.culprit.commit == quick.culprit.commit
    ):
        line = f"{said}; the full setup agrees ({m} probes in full)"
        return doc.model_copy(update={"agreed": True, "line": line})
    differs = []
    for commit in quick.range:
        in_full, in_fast = full.probe_of(commit), quick.probe_of(commit)
        if in_full is not None and in_fast is not None and in_full.verdict != in_fast.verdict:
            differs.append(f"{commit[:12]} is {in_full.verdict.value} in full")
    why = "; ".join(differs) or full.message
    found = full.culprit.commit[:12] if full.culprit else full.status.value
    line = f"{said}; the full setup disagrees ({why}) and searched on in full: {found} ({m} probes)"
    return doc.model_copy(update={"agreed": False, "line": line})
