"""The golden service: a good build's reference recorded (`golden`), and its noise floor
measured against itself (`calibrate`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..checks.golden import (
    Calibration as GoldenCalibration,
    Golden,
    record as golden_record,
    save as golden_save,
    thresholds as golden_thresholds,
)
from ..model import CheckResult, Threshold
from ..outdir import prepare
from ..probe import Facts, Progress
from .setup import Setup, run_id_of, serving


def record_golden(
    s: Setup, ref: str, path: Path, out_dir: Path, progress: Progress | None = None
) -> Golden:
    """The `golden` command: record every check's reference from one (good) build."""
    candidate = s.resolve(ref, "--candidate")
    prepare(path.parent, "--output")
    facts = Facts()
    run_id = run_id_of(out_dir, "golden")
    with serving(s, candidate, out_dir, run_id, facts, progress, "recording") as api:
        data = golden_record(api, s.checks, candidate.commit, s.golden_identity())
    data = data.model_copy(update={"fingerprint": facts.fingerprint})
    golden_save(path, data, s.scrub)
    return data


@dataclass(frozen=True)
class Calibration:
    """What `calibrate` found."""

    thresholds: dict[str, dict[str, Threshold]]
    """Per check, the thresholds now in force, and where each came from."""
    runs: int
    flagged: int
    """Good-vs-good runs in which a golden check failed (by the thresholds in force then)."""


def calibrate(
    s: Setup,
    ref: str,
    path: Path,
    out_dir: Path,
    runs: int,
    restarts: int,
    progress: Progress | None = None,
) -> Calibration:
    """The `calibrate` command: the good build's checks against its own golden, `runs` times per
    server start, over 1 + `restarts` starts; the spread becomes the default thresholds."""
    candidate = s.resolve(ref, "--candidate")
    prepare(path.parent, "--output")
    store = s.golden_store(path, record_on=candidate.commit, of=candidate.commit)
    results: dict[str, list[CheckResult]] = {c.name: [] for c in s.checks}
    flagged = flagged_restarts = 0
    for start in range(1 + restarts):
        facts = Facts()
        run_id = run_id_of(out_dir, f"calibrate-{start}")
        doing = f"checking ({start + 1} of {1 + restarts} starts)"
        with serving(s, candidate, out_dir, run_id, facts, progress, doing) as api:
            golden = store.ensure(api, candidate.commit)
            flagged_here = False
            for _ in range(runs):
                found = [check.run(api, golden) for check in s.checks]
                flagged += not all(r.passed for r in found)
                flagged_here = flagged_here or not all(r.passed for r in found)
                for check, result in zip(s.checks, found, strict=True):
                    results[check.name].append(result)
            flagged_restarts += start > 0 and flagged_here
        store.keep(candidate.commit, facts.fingerprint)
    assert store.data is not None
    noise = {c.name: n for c in s.checks if (n := c.noise(results[c.name])) is not None}
    calibration = GoldenCalibration.model_validate(
        {
            "runs": runs * (1 + restarts),
            "restarts": restarts,
            "flagged_restarts": flagged_restarts,
            **noise,
        }
    )
    store.update(store.data.model_copy(update={"calibration": calibration}))
    return Calibration(golden_thresholds(store.data, s.checks), runs * (1 + restarts), flagged)
