"""The verdict policy: check results in, verdict out. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from .model import CheckResult, Verdict


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
