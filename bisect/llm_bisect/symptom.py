"""The symptom rule (`search.symptom`): which bad probes the search counts as bad. Pure.

A bad probe's symptom is the checks it failed, by name; a bad probe that failed none
crashed (`regress: crash` or `any`), and its symptom is `crash`.

    any    every bad probe counts as bad (the default)
    same   a candidate between the ends counts as bad only when its symptom shares a check
           with the bad end's; one that fails other checks only has another regression, not
           the one bisected: it counts as good, its record says so and keeps its failures

        good end ......... [fails expect] ......... [fails canary] ......... bad end
                            counted good             bad                     fails canary

The journal holds every probe as it tested (the facts); what the search counts is derived
here from them and the bad end's probes, each time the search reads them, so a resume
under another rule and `report DIR` derive the same. The ends (and a merge base, the old
end of the index search) count as they test: the bad end's symptom is the reference.

    the bad end's symptom not known yet (k slots: a middle probe may finish first)
        a bad middle probe is held: the search waits for it as for a running probe
    a middle probe stopped early (`probe.early_stop` under `any`) before it ran every
    check the bad end failed
        it cannot tell: not counted, the search probes it again where it needs it (under
        `same` a suite never stops at a failed check outside the bad end's symptom:
        `decisive`)
    a middle probe that crashed (its checks' results are lost) where the bad end did not
        it cannot tell either: skip, never evidence (it would crash again)

Check names, not prompts: one regression fails different prompts on different builds
(degenerate text on some prompts of one build, on others of the next; the eval's sequential
test stops on a different subset; logprobs and eval fail as aggregates, naming no prompt),
and counting a build good that has the regression moves the answer. Check names are what
builds of one regression share.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .model import ProbeOutcome, Verdict
from .search import Plan

CRASH = "crash"
"""The symptom of a bad probe that failed no check: it crashed during its checks."""


class Symptom(str, enum.Enum):
    """`search.symptom`: which bad probes count as bad."""

    ANY = "any"
    """Every bad probe."""
    SAME = "same"
    """A probe that shares a failed check with the bad end's (or crashed as it did)."""


def symptom_of(outcome: ProbeOutcome) -> tuple[str, ...]:
    """The checks a bad probe failed, by name in the order they ran (`crash` when it failed
    none); () for a probe that is not bad."""
    if outcome.verdict is not Verdict.BAD:
        return ()
    failed = tuple(dict.fromkeys(c.name for c in outcome.checks if not c.passed))
    return failed or (CRASH,)


def said(symptom: Sequence[str]) -> str:
    """A symptom for a person: `failed canary, expect`, or `crashed`."""
    if CRASH in symptom:
        return "crashed"
    return f"failed {', '.join(symptom)}"


@dataclass(frozen=True)
class Counted:
    """The probes of a run as the search counts them under a symptom rule (`count`)."""

    shown: tuple[ProbeOutcome, ...]
    """Every probe, in order, as result.json shows it: counted good for another symptom
    (its reason says so), skip where it cannot tell; else as it tested."""
    used: tuple[ProbeOutcome, ...]
    """What the search reads: `shown` less the held probes and those that cannot tell."""
    held: frozenset[str] = frozenset()
    """Commits with a bad probe that waits for the bad end's symptom (the search waits for
    them as for running probes)."""
    reference: tuple[str, ...] | None = None
    """The bad end's symptom (every check its bad probes failed); () when it tested, but not
    bad; None while no probe of it finished."""
    other: tuple[str, ...] = ()
    """Commits counted good for another symptom, in order."""
    untold: tuple[str, ...] = ()
    """Commits with a probe that cannot tell, in order: not counted (probed again where the
    search needs them)."""

    def decisive(self, check: str) -> bool:
        """Whether a failed check ends a suite early (`probe.early_stop`) under `same`: one in
        the bad end's symptom; none while it is not known (a suite then runs whole); any when
        the bad end did not test bad (the rule has nothing to compare with)."""
        return self.reference is not None and (not self.reference or check in self.reference)


def count(plan: Plan, probes: Sequence[ProbeOutcome], rule: Symptom) -> Counted:
    """The probes as the search counts them under `rule` (see the module docstring)."""
    probes = tuple(probes)
    if rule is Symptom.ANY:
        return Counted(probes, probes)
    bad = plan.bad.commit
    ends = [p for p in probes if p.commit == bad]
    reference = tuple(dict.fromkeys(name for p in ends for name in symptom_of(p))) if ends else None
    middle = {c.commit for c in plan.sequence[1:-1]} - {bad, plan.good.commit}
    shown: list[ProbeOutcome] = []
    used: list[ProbeOutcome] = []
    held: set[str] = set()
    other: list[str] = []
    untold: list[str] = []
    for p in probes:
        theirs = symptom_of(p)
        if p.commit not in middle or not theirs or reference == ():
            shown.append(p)
            used.append(p)
            continue
        if reference is None:
            shown.append(p)
            held.add(p.commit)
            continue
        if set(theirs) & set(reference):
            shown.append(p)
            used.append(p)
            continue
        if CRASH in theirs:  # its checks' results are lost: never a verdict either way
            why = f"crashed: cannot tell whether it {said(reference)}, as the bad end did"
            counted = replace(p, verdict=Verdict.SKIP, reason=f"{why} — {p.reason}")
        elif _unrun(reference, p.not_run):
            unrun = [name for name in reference if name in p.not_run] or list(p.not_run)
            first = p.commit not in untold
            why = (
                f"cannot tell under search.symptom: same: it {said(theirs)} and stopped early "
                f"(probe.early_stop) before {', '.join(unrun)}; the bad end {said(reference)}"
                + ("; not counted" if first else "")
            )
            counted = replace(p, verdict=Verdict.SKIP, reason=f"{why} — {p.reason}")
            if first:  # the search probes it again where it needs it
                shown.append(counted)
                untold.append(p.commit)
                continue
            # probed again already and still cannot tell: untestable, never a loop
        else:
            why = (
                f"another symptom: {said(theirs)}; the bad end {said(reference)} (counted "
                "good: search.symptom: same)"
            )
            counted = replace(p, verdict=Verdict.GOOD, reason=f"{why} — {p.reason}")
            other.append(p.commit)
        shown.append(counted)
        used.append(counted)
    return Counted(
        tuple(shown),
        tuple(used),
        frozenset(held),
        reference,
        tuple(dict.fromkeys(other)),
        tuple(dict.fromkeys(untold)),
    )


def _unrun(reference: Sequence[str], not_run: Sequence[str]) -> bool:
    """Whether a suite that stopped early left out what the bad end's symptom needs: one of
    its checks, or any check at all when the bad end crashed (a later check may crash)."""
    return bool(set(reference) & set(not_run)) or (CRASH in reference and bool(not_run))
