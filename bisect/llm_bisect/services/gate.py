"""The gate service: one release candidate against the golden (allow, block,
inconclusive), and on block the bisection it starts.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..checks.golden import Golden
from ..checks.golden import stale as golden_stale
from ..checks.golden import warnings as golden_warnings
from ..config import config_digest
from ..errors import ConfigError, JournalError
from ..fingerprint import differences as fingerprint_differences
from ..journal import Span
from ..model import ProbeOutcome, Verdict
from ..probe import Progress
from ..redact import Scrub
from ..report.documents import (
    Bisection,
    Build,
    GateDocument,
    GoldenRef,
    Sides,
)
from ..report.gate import (
    DECISION_OF,
    EXIT_OF,
    HEADLINE,
    render_gate_html,
    render_gate_markdown,
    render_junit,
)
from ..report.result import candidate_doc, outcome_of, probe_doc
from ..runner import write_atomic
from ..search import Status
from .bisection import check_one, run_bisect
from .golden import record_golden
from .setup import Setup, golden_file_of, run_context

GATE_FILE = "gate.json"
BISECT_DIR = "bisect"
"""Where `gate --bisect-on-block` bisects, inside the gate's folder."""


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
    """DIR/gate.json of a blocked gate whose bisection a kill left unfinished, for the same
    config and candidate: its verdict stands, the probe is not run again."""
    try:
        doc = GateDocument.model_validate_json((out_dir / GATE_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    same = doc.config_digest == digest and doc.candidate.commit == candidate
    if same and doc.decision == "block" and doc.bisection is not None:
        return doc if doc.bisection.status is None else None
    return None


def run_gate(
    s: Setup,
    candidate_ref: str,
    out_dir: Path,
    progress: Progress,
    *,
    golden_file: Path | None = None,
    record: bool = False,
    good: str | None = None,
    bisect_on_block: bool = False,
    junit: Path | None = None,
    eval_config: Path | None = None,
) -> GateDocument:
    """The `gate` command: one release candidate against the last good build's golden
    (recorded first with `record`), allow, block or inconclusive; on block with
    `bisect_on_block`, the bisection from the golden's build to the candidate, which starts
    with those two verdicts instead of probing them again. Writes DIR/gate.json, report.md,
    report.html and `junit`."""
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
            record_golden(s, good_ref, path, out_dir)
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
        progress.note(f"gate: {GATE_FILE} holds this candidate's verdict; the bisection resumes")
        doc = resumed
    else:
        _, outcome = check_one(s, candidate_ref, out_dir, progress, path, whole=True)
        decision = DECISION_OF[outcome.verdict]
        doc = GateDocument(
            decision=decision,
            exit_code=EXIT_OF[decision],
            message=HEADLINE[decision],
            candidate_ref=candidate_ref,
            candidate=candidate_doc(candidate),
            golden=GoldenRef(path=str(path), commit=golden.commit, recorded=recorded),
            probe=probe_doc(outcome, candidate.subject, Span(started, s.now())),
            fingerprints=compared_builds(golden, outcome),
            warnings=golden_warnings(golden),
            eval_config=str(eval_config.absolute()) if eval_config else "",
            context=context,
            config_digest=digest,
            started_at=started,
            ended_at=s.now(),
        )
    if doc.decision == "block" and bisect_on_block:
        where = out_dir / BISECT_DIR
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
            (
                outcome_of(doc.probe),
                "gate: the candidate's probe",
            ),
        ]
        try:
            done = run_bisect(
                s,
                where,
                good=golden.commit,
                bad=candidate_ref,
                progress=progress,
                golden_file=path,
                given=given,
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
