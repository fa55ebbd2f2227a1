"""The verdict policy: check results (or a crash) and the user's `regress` in, verdict out. Pure.

                      checks passed   checks failed   crash / 5xx / reset in checks
    regress semantic  good            bad             skip
    regress crash     good            good            bad
    regress any       good            bad             bad

Repeats whose checks disagree are `unsure`, except under `crash`: there checks are not
the regression, so their disagreement says nothing (good, when nothing crashed).

A build that never became ready is skip under every policy (the runner never asks).
"""

from __future__ import annotations

from collections.abc import Sequence

from .model import CheckResult, Regress, Verdict


def judge(results: Sequence[CheckResult]) -> tuple[Verdict, str]:
    """Good when every check passed; else bad, naming the failing checks."""
    failed = [r for r in results if not r.passed]
    if not failed:
        return Verdict.GOOD, f"{len(results)} check(s) passed"
    names = ", ".join(r.name for r in failed)
    return Verdict.BAD, f"failed: {names} — {failed[0].evidence}"


def combine_repeats(runs: Sequence[tuple[Verdict, str]]) -> tuple[Verdict, str]:
    """One verdict from repeated runs of the check suite; disagreement is `unsure`."""
    if not runs:
        raise ValueError("no runs to combine")
    kinds = {v for v, _ in runs}
    if len(kinds) == 1:
        return runs[0]
    bad = sum(1 for v, _ in runs if v is Verdict.BAD)
    return Verdict.UNSURE, f"checks disagree across repeats: {bad} of {len(runs)} bad"


def decide(
    regress: Regress, checked: tuple[Verdict, str] | None, crash: str | None
) -> tuple[Verdict, str]:
    """The verdict under `regress`, from the checks' verdict or from a crash during checks."""
    if crash is not None:
        if regress is Regress.SEMANTIC:
            return Verdict.SKIP, f"crashed during checks: {crash}"
        return Verdict.BAD, f"crashed during checks (regress: {regress.value}): {crash}"
    if checked is None:
        raise ValueError("a verdict needs checks or a crash")
    verdict, reason = checked
    if regress is Regress.CRASH and verdict is not Verdict.GOOD:
        return Verdict.GOOD, f"no crash (regress: crash; the checks said {reason})"
    return verdict, reason
