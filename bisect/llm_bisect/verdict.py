"""The verdict policy: check results (or a crash) and the user's `regress` in, verdict out. Pure.

                      checks passed   checks failed   crash / 5xx / reset in checks   never ready
    regress semantic  good            bad             skip                            skip
    regress crash     good            good            bad                             skip
    regress any       good            bad             bad                             skip
    regress start     good            good            good                            bad

Repeats whose checks disagree are `unsure`, except under `crash` and `start`: there checks
are not the regression, so their disagreement says nothing.

"Never ready" is a server that ran and exited or timed out before ready (Stage.READY); no
artifact, a build that failed or a launch that did not run a server is skip under every
policy, `start` too.
"""

from __future__ import annotations

from collections.abc import Sequence

from .model import CheckResult, Regress, Stage, Verdict


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


def leaning(runs: Sequence[tuple[Verdict, str]]) -> Verdict | None:
    """What most of the repeats said, where they disagree (None on a tie, or where they
    agree: the verdict says it)."""
    bad = sum(1 for v, _ in runs if v is Verdict.BAD)
    good = sum(1 for v, _ in runs if v is Verdict.GOOD)
    if not (bad and good) or bad == good:
        return None
    return Verdict.BAD if bad > good else Verdict.GOOD


def decide(
    regress: Regress, checked: tuple[Verdict, str] | None, crash: str | None
) -> tuple[Verdict, str]:
    """The verdict under `regress`, from the checks' verdict or from a crash during checks."""
    if regress is Regress.START:  # it became ready: that is all `start` asks
        said = f"crashed during checks: {crash}" if crash is not None else None
        if said is None and checked is not None:
            said = f"the checks said {checked[1]}"
        if said is None:
            raise ValueError("a verdict needs checks or a crash")
        return Verdict.GOOD, f"started (regress: start; {said})"
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


def untested(regress: Regress, failed_at: Stage, reason: str) -> tuple[Verdict, str]:
    """The verdict on a probe that stopped short before its checks: bad only for a server that
    never became ready under `regress: start`, else skip (never evidence of badness)."""
    if regress is Regress.START and failed_at is Stage.READY:
        return Verdict.BAD, f"did not start (regress: start): {reason}"
    return Verdict.SKIP, reason
