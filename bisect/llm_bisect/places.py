"""Slot evidence: which slot (its node, its GPUs) gave each verdict, and a slot whose
verdicts stand apart from the others' on the same candidates. Pure: probes in, lines out.

Lies on a cluster are not independent: a bad GPU, NVLink or driver lies on every start it
serves, and a node in a bad state lies for several starts in a row. The search takes that
into account (posterior.fragile: no answer stands on one slot's or one burst's verdicts
alone); this module says it to a person.

    slot 0  c7 bad   c9 bad   c4 bad          ← reads bad where slots 1 and 2 read good
    slot 1  c7 good           c4 good
    slot 2           c9 good
                     ⇒ slot 0 disagreed with the other slots on 3 of 3 candidates
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .model import Verdict
from .posterior import BURST
from .report.documents import ProbeDoc

ASSUMED = (
    "Verdicts may lie, and lies may cluster: by slot (a bad GPU or node lies on many of the "
    f"starts it serves) and in time (up to {BURST} consecutive starts on one slot lying "
    "together). An answer is said only where no one slot and no "
    f"{BURST} consecutive starts on one slot could have given it alone: the confirmation's "
    "trials run on other slots than the verdicts they check (or on later starts), and a "
    "verdict that carries the answer alone is probed again elsewhere. Lies that last longer "
    f"than {BURST} starts on every slot at once are not covered."
)
"""What the search assumes about lies, in one paragraph (report.md's Confidence, docs)."""
ASSUMED_LINE = (
    f"verdicts may lie, clustered by slot or in up to {BURST} consecutive starts on one slot; "
    f"no answer stands on one slot's or one such burst's verdicts alone (lies longer than {BURST} "
    "starts on every slot at once are not covered)"
)
"""The same in one line (report.md's first screen)."""

ONE_PLACE = (
    "every probe ran on one slot: lies that cluster by slot (a bad GPU) cannot be told apart "
    "from the builds' own behaviour here; run with `parallel` > 1 (or another node) to learn it"
)


@dataclass(frozen=True)
class Doubt:
    """A slot whose verdicts disagree with the other slots' on the candidates both probed."""

    slot: int
    where: str
    """Its node and GPUs as its probes' fingerprints say ("" where unknown)."""
    disagreed: int
    """Candidates on which its verdicts went against the other slots'."""
    shared: int
    """Candidates it probed that another slot probed too."""

    @property
    def line(self) -> str:
        at = f" ({self.where})" if self.where else ""
        return (
            f"slot {self.slot}{at} disagreed with the other slots on {self.disagreed} of "
            f"{self.shared} candidates: a bad node or GPU?"
        )


def _where(probes: Sequence[ProbeDoc]) -> str:
    nodes = sorted({p.fingerprint.node for p in probes if p.fingerprint.node})
    gpus = sorted({",".join(p.fingerprint.devices) for p in probes if p.fingerprint.devices})
    said = []
    if nodes:
        said.append(f"node {', '.join(nodes)}")
    if gpus:
        said.append(f"GPUs {'; '.join(gpus)}")
    return ", ".join(said)


def tested(probes: Sequence[ProbeDoc]) -> list[ProbeDoc]:
    """The probes that gave a verdict (good or bad) and say where they ran."""
    return [p for p in probes if p.slot is not None and p.verdict in (Verdict.GOOD, Verdict.BAD)]


def one_place(probes: Sequence[ProbeDoc]) -> bool:
    """Whether every tested probe ran on one slot (place lies cannot be learnt then)."""
    return len({p.slot for p in tested(probes)}) <= 1


def doubted(probes: Sequence[ProbeDoc]) -> list[Doubt]:
    """Each slot that disagreed with the other slots on at least two candidates and on more
    than half of those they both probed, most disagreeing first."""
    mine = tested(probes)
    by_slot: dict[int, list[ProbeDoc]] = {}
    for p in mine:
        assert p.slot is not None
        by_slot.setdefault(p.slot, []).append(p)
    found: list[Doubt] = []
    for slot, own in by_slot.items():
        shared = disagreed = 0
        for commit in dict.fromkeys(p.commit for p in own):
            theirs = [p.verdict for p in mine if p.commit == commit and p.slot != slot]
            if not theirs:
                continue
            shared += 1
            said = [p.verdict for p in own if p.commit == commit]
            others = max((Verdict.GOOD, Verdict.BAD), key=theirs.count)
            if theirs.count(others) * 2 > len(theirs) and all(v is not others for v in said):
                disagreed += 1
        if disagreed >= 2 and disagreed * 2 > shared:
            found.append(Doubt(slot, _where(own), disagreed, shared))
    return sorted(found, key=lambda d: (-d.disagreed, d.slot))


def started_where(probes: Sequence[ProbeDoc], commit: str, verdict: Verdict) -> str:
    """Where each probe of `commit` that said `verdict` ran (a doubted start, for a person):
    `probe 3 on slot 0, node gpu-17, GPUs 0,1`; "" where none says."""
    said = []
    for number, p in enumerate(probes, 1):
        if p.commit != commit or p.verdict is not verdict:
            continue
        at = [f"probe {number}"]
        if p.slot is not None:
            at.append(f"on slot {p.slot}")
        where = _where([p])
        said.append(" ".join(at) + (f", {where}" if where else ""))
    return "; ".join(said)
