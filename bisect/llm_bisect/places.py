"""Place evidence: where each verdict ran (its node and GPUs, as the probe's fingerprint
says; its slot where it does not), and a place whose verdicts stand apart from the others'
on the same candidates. Pure: probes in, lines out.

Lies on a cluster are not independent: a bad GPU, NVLink or driver lies on every start it
serves, and a node in a bad state lies for several starts in a row. The search takes that
into account (posterior.fragile: no answer stands on one slot's or one burst's verdicts
alone; a re-probe, a confirmation trial and the Evidence stage's probe run elsewhere:
runner.pick_slot, confirm.trial_slots, `--exclude` on Slurm, node anti-affinity on
Kubernetes); this module says it to a person. On Slurm and Kubernetes a slot is no place
(slot k's jobs land on other nodes): the node is.

    node gpu-17  c7 bad   c9 bad   c4 bad     ← reads bad where the other nodes read good
    node gpu-18  c7 good           c4 good
    node gpu-19           c9 good
                 ⇒ node gpu-17 disagreed with the other nodes on 3 of 3 candidates
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .model import Verdict
from .posterior import BURST, FALSE_BAD_MOST
from .report.documents import ProbeDoc

ASSUMED = (
    "Verdicts may lie, and lies may cluster: by place (a bad GPU or node lies on many of the "
    f"starts it serves; a place is the node and GPUs the fingerprint names, else the slot, so "
    f"two slots on one node are one place) and in time (up to {BURST} consecutive starts in "
    "one place lying together). An answer is said only where no one place and no "
    f"{BURST} consecutive starts in one place could have given it alone: the confirmation's "
    "trials run elsewhere than the verdicts they check (or on later starts), and a "
    "verdict that carries the answer alone is probed again elsewhere. Lies that last longer "
    f"than {BURST} starts on every place at once are not covered. A bad build may read good "
    "on up to half its starts (an intermittent regression: then the search needs about four "
    "times the starts, and a culprit whose picks alone read good gets five confirmations, "
    f"not three); a good build is assumed to read bad on at most {FALSE_BAD_MOST:.0%} of its "
    "starts (more is a broken check: `calibrate` shows it). A culprit is confirmed only once "
    "its revert has read good on two starts, more than read bad: with a second regression "
    "after it, one lying revert would confirm it alone."
)
"""What the search assumes about lies, in one paragraph (report.md's Confidence, docs)."""
ASSUMED_LINE = (
    f"verdicts may lie, clustered by place or in up to {BURST} consecutive starts in one place; "
    f"no answer stands on one place's or one such burst's verdicts alone (lies longer than "
    f"{BURST} starts on every place at once are not covered); a bad build may read good on up "
    f"to half its starts, a good one bad on up to {FALSE_BAD_MOST:.0%}"
)
"""The same in one line (report.md's first screen)."""

ONE_PLACE = (
    "every probe ran in one place (one node and its GPUs, or one slot): lies that cluster by "
    "place (a bad GPU or node) cannot be told apart from the builds' own behaviour here, and "
    "a check meant for another place ran there again, on a later start; run with `parallel` "
    "> 1 (or on more nodes) to learn it"
)
"""Said where one place served every verdict (report.md's Confidence)."""


@dataclass(frozen=True, order=True)
class Place:
    """Where a verdict ran, as a person finds it again: the node and its GPUs, as the probe's
    fingerprint says (a process's host, the Docker engine's, the Slurm job's or the Kubernetes
    pod's node: slot k's jobs land on other nodes there), else its slot."""

    node: str = ""
    """The node ("" where the fingerprint does not say)."""
    gpus: tuple[str, ...] = ()
    """Its GPUs (the slot's devices; () where not known: the node as a whole)."""
    slot: int | None = None
    """The slot, only where the node is not known."""

    @property
    def name(self) -> str:
        """`node gpu-17, GPUs 0-3`, `node gpu-17`, `slot 0`."""
        if not self.node:
            return f"slot {self.slot}"
        return f"node {self.node}" + (f", GPUs {gpu_list(self.gpus)}" if self.gpus else "")


def gpu_list(gpus: Sequence[str]) -> str:
    """GPU indices as a person reads them: `0-3`, `0,2`, `4-7`; other names as they are."""
    if len(gpus) > 2 and all(g.isdigit() for g in gpus):
        numbers = [int(g) for g in gpus]
        if numbers == list(range(numbers[0], numbers[0] + len(numbers))):
            return f"{numbers[0]}-{numbers[-1]}"
    return ",".join(gpus)


def place_key(node: str, devices: Sequence[str]) -> str:
    """A probe's place as the search groups its verdicts by (posterior.Start.place): its node
    and GPUs (`node gpu-17, GPUs 0-3`), "" where the fingerprint names no node (its slot is
    its place then). Pure."""
    return Place(node, tuple(devices)).name if node else ""


def place_of(probe: ProbeDoc) -> Place:
    """The place of one probe (Place). Pure."""
    facts = probe.fingerprint
    if facts.node:
        return Place(facts.node, tuple(facts.devices))
    return Place(slot=probe.slot)


@dataclass(frozen=True)
class Doubt:
    """A place whose verdicts disagree with the other places' on the candidates both probed."""

    place: Place
    disagreed: int
    """Candidates on which its verdicts went against the other places'."""
    shared: int
    """Candidates it probed that another place probed too."""
    kind: str = "slot"
    """What the places are: `node` (several nodes), `GPU` (one node's GPU sets), `slot`."""

    @property
    def line(self) -> str:
        others = {"node": "nodes", "GPU": "GPUs", "slot": "slots"}[self.kind]
        guess = {"node": "node", "GPU": "GPU", "slot": "node or GPU"}[self.kind]
        name = self.place.name
        return (
            f"{name}{',' if self.place.node else ''} disagreed with the other {others} on "
            f"{self.disagreed} of {self.shared} candidates: a bad {guess}?"
        )


def tested(probes: Sequence[ProbeDoc]) -> list[ProbeDoc]:
    """The probes that gave a verdict (good or bad) and say where they ran."""
    return [
        p
        for p in probes
        if (p.slot is not None or p.fingerprint.node) and p.verdict in (Verdict.GOOD, Verdict.BAD)
    ]


def one_place(probes: Sequence[ProbeDoc]) -> bool:
    """Whether every tested probe ran in one place (place lies cannot be learnt then)."""
    return len({place_of(p) for p in tested(probes)}) <= 1


def _kind(places: Sequence[Place]) -> str:
    if any(not p.node for p in places):
        return "slot"
    return "GPU" if len({p.node for p in places}) == 1 else "node"


def doubted(probes: Sequence[ProbeDoc]) -> list[Doubt]:
    """Each place (node and GPUs, else slot: Place) that disagreed with the other places on
    at least two candidates and on more than half of those they both probed, most
    disagreeing first."""
    mine = [(place_of(p), p) for p in tested(probes)]
    by_place: dict[Place, list[ProbeDoc]] = {}
    for place, p in mine:
        by_place.setdefault(place, []).append(p)
    kind = _kind(list(by_place))
    found: list[Doubt] = []
    for place, own in by_place.items():
        shared = disagreed = 0
        for commit in dict.fromkeys(p.commit for p in own):
            theirs = [p.verdict for at, p in mine if p.commit == commit and at != place]
            if not theirs:
                continue
            shared += 1
            said = [p.verdict for p in own if p.commit == commit]
            others = max((Verdict.GOOD, Verdict.BAD), key=theirs.count)
            if theirs.count(others) * 2 > len(theirs) and all(v is not others for v in said):
                disagreed += 1
        if disagreed >= 2 and disagreed * 2 > shared:
            found.append(Doubt(place, disagreed, shared, kind))
    return sorted(found, key=lambda d: (-d.disagreed, d.place.node, d.place.gpus,
                                        d.place.slot or 0))  # fmt: skip


def _where(probe: ProbeDoc) -> str:
    place = place_of(probe)
    return place.name if place.node else ""


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
        where = _where(p)
        said.append(" ".join(at) + (f", {where}" if where else ""))
    return "; ".join(said)
