"""result.json: the contract users script against. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..fingerprint import differences
from ..model import Candidate, ProbeOutcome, Regress
from ..search import Answer, Plan, Status


def thresholds_of(probes: Sequence[ProbeOutcome]) -> dict[str, Any]:
    """The thresholds each golden check judged by (value and where it came from)."""
    found: dict[str, Any] = {}
    for p in probes:
        for check in p.checks:
            if "thresholds" in check.details and check.name not in found:
                found[check.name] = check.details["thresholds"]
    return found


def power_of(probes: Sequence[ProbeOutcome]) -> dict[str, Any] | None:
    """What the eval could detect: n, the golden's accuracy, the smallest detectable drop."""
    for p in probes:
        for check in p.checks:
            if "power" in check.details:
                found: dict[str, Any] = check.details["power"]
                return found
    return None


def build_result(
    plan: Plan,
    answer: Answer,
    probes: Sequence[ProbeOutcome],
    regress: Regress = Regress.SEMANTIC,
    warnings: Sequence[str] = (),
) -> dict[str, Any]:
    """The result.json document of a finished (or stopped) search; `warnings`: where the good
    build fails a rule itself (from its golden)."""
    by_commit: Mapping[str, Candidate] = {c.commit: c for c in plan.candidates}
    culprit = answer.culprit
    last = {p.commit: p for p in probes}  # a commit probed again: its latest outcome counts
    sides = None
    if len(answer.range) >= 2 and answer.range[0] in last and answer.range[-1] in last:
        old, new = last[answer.range[0]], last[answer.range[-1]]
        sides = {
            "old": {"commit": old.commit, "verdict": old.verdict.value, **old.fingerprint},
            "new": {"commit": new.commit, "verdict": new.verdict.value, **new.fingerprint},
            "differences": differences(old.fingerprint, new.fingerprint),
        }
    message = answer.message
    end = last.get(plan.good.commit)
    if answer.status is Status.ERROR and end is not None and end.reason:
        message += f" (the good end: {end.reason})"
    return {
        "status": answer.status.value,
        "message": message,
        "mode": plan.mode.value,
        "regress": regress.value,
        "good": plan.good.commit,
        "bad": plan.bad.commit,
        "culprit": culprit.to_json() if culprit else None,
        "range": list(answer.range),
        "fix_range": list(answer.fix_range) if answer.fix_range else None,
        "merge_base": plan.sequence[0].commit if plan.anchor else None,
        "candidates": len(plan.candidates),
        "fingerprints": sides,
        "thresholds": thresholds_of(probes),
        "eval_power": power_of(probes),
        "warnings": list(warnings),
        "probes": [
            {
                **p.to_json(),
                "subject": by_commit[p.commit].subject if p.commit in by_commit else "",
            }
            for p in probes
        ],
    }
