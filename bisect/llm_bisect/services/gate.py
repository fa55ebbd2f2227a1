"""The gate service: one release candidate against the golden (allow, block,
inconclusive), and on block the bisection it starts.

A candidate that never becomes ready is not skip at once: the build or the node?

    candidate ─► ready? ─ yes ─► its checks decide
                   │ no
                   ▼
    candidate again ─► ready? ─ yes ─► its checks: bad ─► block (second-start-bad)
                   │ no                          else ─► inconclusive (flaky-start)
                   ▼
    golden's build, same launcher ─► ready? ─ yes ─► block (start-failure)
                                        │ no
                                        ▼
                                   inconclusive (node)

No artifact, a failed build or pull, or a lost race for a port is no start failure: the
gate stays inconclusive as before. A start-failure block bisects under `regress: start`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from ..checks.golden import Golden, stale as golden_stale, warnings as golden_warnings
from ..config import config_digest
from ..errors import ConfigError, JournalError
from ..fingerprint import differences as fingerprint_differences
from ..journal import Span
from ..model import Candidate, ProbeOutcome, Regress, Verdict
from ..outdir import hold
from ..probe import ProbeContext, Progress, probe
from ..redact import Scrub
from ..report.documents import (
    Bisection,
    Build,
    Decision,
    GateDocument,
    GateReason,
    GoldenRef,
    Sides,
    Trial,
)
from ..report.gate import (
    DECISION_OF,
    EXIT_OF,
    HEADLINE,
    HEADLINE_OF,
    render_gate_html,
    render_gate_markdown,
    render_junit,
)
from ..report.result import candidate_doc, outcome_of, power_of, probe_doc
from ..runner import write_atomic, write_probe
from ..search import Status
from .bisection import Terms, run_bisect
from .golden import record_golden
from .setup import Setup, golden_file_of, run_context, run_id_of

GATE_FILE = "gate.json"
BISECT_DIR = "bisect"
"""Where `gate --bisect-on-block` bisects, inside the gate's folder."""
STARTS_DIR = "starts"
"""Where the starts after a candidate that never became ready keep their logs."""
CANDIDATE_GIVEN = "gate: the candidate's probe"
"""How the gate's bisection names the candidate's verdict it was given."""


def _judged(
    s: Setup, candidate: Candidate, golden_commit: str, path: Path, out_dir: Path,
    progress: Progress,
) -> tuple[ProbeOutcome, list[Trial], Decision, GateReason | None]:  # fmt: skip
    """The candidate probed with every check (it may become a bisection's bad end), and when
    its server never became ready, the starts that tell the build from the node (the module's
    sketch), all on one launcher: the decision and why."""
    with hold(out_dir), s.launcher(run_id_of(out_dir, "check")) as launcher:
        for line in launcher.reap():
            progress.note(line)
        ctx = ProbeContext(launcher, s.checks, s.client, progress, s.config.probe.runs,
                           s.golden_store(path), Regress(s.config.regress))  # fmt: skip
        outcome = probe(candidate, out_dir / "probes" / candidate.short, ctx)
        write_probe(out_dir, outcome, s.scrub)
        progress.finished(candidate, outcome)
        if outcome.verdict is not Verdict.SKIP or not outcome.never_started:
            return outcome, [], DECISION_OF[outcome.verdict], None
        trials: list[Trial] = []

        def start(who: Candidate, role: str, why: str, on: ProbeContext) -> ProbeOutcome:
            progress.note(f"gate: starting {who.short}: {why}")
            began = s.now()
            found = probe(who, out_dir / STARTS_DIR / f"{len(trials) + 1}-{who.short}", on)
            if not on.checks and found.failed_at is None:  # a start only: no checks ran
                found = replace(found, reason="ready: it serves here (no checks run on it)")
            progress.finished(who, found)
            span = Span(began, s.now())
            doc = probe_doc(found, who.subject, span)
            trials.append(Trial.model_validate({"role": role, "why": why, "probe": doc}))
            return found

        why = f"the candidate never became ready ({outcome.reason}): once more"
        again = start(candidate, "candidate", why, ctx)
        if not again.never_started and again.verdict is Verdict.BAD:  # its checks decided
            return again, trials, "block", "second-start-bad"
        if not again.never_started:  # ready this time (or untestable another way)
            ready = "ready" in again.timings
            return outcome, trials, "inconclusive", "flaky-start" if ready else None
        good = s.resolve(golden_commit, "--golden")
        why = "the candidate never became ready, twice: does the golden's build, on this launcher?"
        served = start(good, "golden-build", why, replace(ctx, checks=(), golden=None, repeats=1))
        if served.failed_at is None and served.verdict is Verdict.GOOD:
            return outcome, trials, "block", "start-failure"
        return outcome, trials, "inconclusive", "node"


def compared_builds(golden: Golden, outcome: ProbeOutcome) -> Sides | None:
    """The golden's build and a candidate's, side by side, when both are known."""
    if not golden.fingerprint.known or not outcome.fingerprint.known:
        return None
    differ = fingerprint_differences(golden.fingerprint, outcome.fingerprint)
    old = Build.of(golden.commit, None, golden.fingerprint)
    new = Build.of(outcome.commit, None, outcome.fingerprint)
    return Sides(old=old, new=new, differences=differ)


def _write_gate(out_dir: Path, doc: GateDocument, scrub: Scrub, junit: Path | None) -> None:
    clean = GateDocument.model_validate(scrub.doc(doc.model_dump(mode="json")))
    write_atomic(out_dir / GATE_FILE, json.dumps(clean.model_dump(mode="json"), indent=2) + "\n")
    write_atomic(out_dir / "report.md", render_gate_markdown(clean))
    write_atomic(out_dir / "report.html", render_gate_html(clean))
    if junit is not None:
        write_atomic(junit, render_junit(clean))


def _unfinished_gate(out_dir: Path, digest: str, candidate: str) -> GateDocument | None:
    """DIR/gate.json of a blocked gate whose bisection a kill left unfinished, or that did
    not bisect (a CI job that gates, then another that bisects), for the same config and
    candidate: its verdict stands, the probe is not run again."""
    try:
        doc = GateDocument.model_validate_json((out_dir / GATE_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    same = doc.config_digest == digest and doc.candidate.commit == candidate
    if same and doc.decision == "block":
        return doc if doc.bisection is None or doc.bisection.status is None else None
    return None


@dataclass(frozen=True)
class GateAsk:
    """What the gate is asked besides the candidate: the golden it judges by (recorded first
    from `good` with `record`), a bisection on block, a JUnit file, the eval files it ran."""

    golden_file: Path | None = None
    record: bool = False
    good: str | None = None
    """The last good build, for `record` (default candidates.good)."""
    bisect_on_block: bool = False
    junit: Path | None = None
    eval_config: Path | None = None
    """The vLLM eval config the setup judges by (recorded in gate.json)."""
    eval_data: Path | None = None


def run_gate(
    s: Setup, candidate_ref: str, out_dir: Path, progress: Progress, ask: GateAsk = GateAsk()
) -> GateDocument:
    """The `gate` command: one release candidate against the last good build's golden
    (recorded first with `record`), allow, block or inconclusive; on block with
    `bisect_on_block`, the bisection from the golden's build to the candidate, which starts
    with those two verdicts instead of probing them again. Writes DIR/gate.json, report.md,
    report.html and `junit` (each of `ask`, GateAsk)."""
    golden_file, record, good, junit = ask.golden_file, ask.record, ask.good, ask.junit
    bisect_on_block, eval_config, eval_data = ask.bisect_on_block, ask.eval_config, ask.eval_data
    started = s.now()
    path = golden_file_of(s, golden_file).absolute()  # its reproduce line runs anywhere
    candidate = s.resolve(candidate_ref, "--candidate")
    recorded = False
    if record:
        good_ref = good or s.config.candidates.good
        good_c = s.resolve(good_ref, "--good")
        why = golden_stale(path, good_c.commit, s.golden_identity())
        if why is not None:
            progress.note(f"gate: recording the golden from {good_c.short} into {path} ({why})")
            record_golden(s, good_ref, path, out_dir, progress)
            recorded = True
    if not path.exists():
        raise ConfigError(
            f"--golden: no golden at '{path}'; record the last good build's with "
            "`llm-bisect golden CONFIG --candidate GOOD`, or run the gate with --record"
        )
    golden = s.golden_store(path).data  # of this setup and repository, or refused here
    assert golden is not None
    digest = config_digest(s.config)
    context = run_context(s, s.config).model_copy(
        update={"good_ref": golden.commit, "bad_ref": candidate_ref}
    )
    resumed = _unfinished_gate(out_dir, digest, candidate.commit) if bisect_on_block else None
    if resumed is not None:
        how = "starts from it" if resumed.bisection is None else "resumes"
        progress.note(f"gate: {GATE_FILE} holds this candidate's verdict; the bisection {how}")
        doc = resumed
    else:
        outcome, trials, decision, reason = _judged(
            s, candidate, golden.commit, path, out_dir, progress
        )
        doc = GateDocument(
            decision=decision,
            exit_code=EXIT_OF[decision],
            message=HEADLINE_OF.get(reason, HEADLINE[decision]) if reason else HEADLINE[decision],
            reason=reason,
            trials=trials,
            eval_power=power_of([outcome]),
            candidate_ref=candidate_ref,
            candidate=candidate_doc(candidate),
            golden=GoldenRef(path=str(path), commit=golden.commit, recorded=recorded),
            probe=probe_doc(outcome, candidate.subject, Span(started, s.now())),
            fingerprints=compared_builds(golden, outcome),
            warnings=golden_warnings(golden),
            eval_config=str(eval_config.absolute()) if eval_config else "",
            eval_data=str(eval_data.absolute()) if eval_data else "",
            context=context,
            config_digest=digest,
            started_at=started,
            ended_at=s.now(),
        )
    if doc.decision == "block" and bisect_on_block:
        where = out_dir / BISECT_DIR
        bad_end = outcome_of(doc.probe)
        if doc.reason == "start-failure":  # the first build that does not start
            bad_end = replace(
                bad_end, verdict=Verdict.BAD, reason=f"{doc.message}: {bad_end.reason}"
            )
            s = replace(s, config=s.config.model_copy(update={"regress": Regress.START.value}))
            progress.note(
                "gate: bisecting under `regress: start` (the first build that does not start)"
            )
        doc = doc.model_copy(update={"bisection": Bisection(out=str(where), message="under way")})
        _write_gate(out_dir, doc, s.scrub, junit)  # a kill from here on resumes the bisection
        given = [
            (
                ProbeOutcome(
                    golden.commit,
                    Verdict.GOOD,
                    f"the golden's build: {path.name} was recorded from it",
                ),
                "gate: the golden's build",
            ),
            (bad_end, CANDIDATE_GIVEN),
        ]
        try:
            done = run_bisect(
                s,
                where,
                good=golden.commit,
                bad=candidate_ref,
                progress=progress,
                terms=Terms(golden_file=path, given=given),
            )
        except (ConfigError, JournalError) as exc:  # the decision stands; say why no bisection
            progress.note(f"gate: no bisection: {exc}")
            bisection = Bisection(out=str(where), status=Status.ERROR, message=str(exc))
        else:
            result = done.result
            bisection = Bisection(
                out=str(where),
                status=result.status,
                message=result.message,
                culprit=result.culprit,
                probes=len([p for p in result.probes if not p.given]),
            )
        doc = doc.model_copy(update={"bisection": bisection, "ended_at": s.now()})
    _write_gate(out_dir, doc, s.scrub, junit)
    return doc
