"""Place evidence for a person (places.py): a place (a node and its GPUs, from the probes'
fingerprints; a slot where they do not say) whose verdicts stand apart from the other places'
on the same candidates, where a doubted start ran, and when one place cannot tell."""

from __future__ import annotations

from llm_bisect.fingerprint import Fingerprint
from llm_bisect.model import Verdict
from llm_bisect.places import ASSUMED, Place, doubted, one_place, started_where
from llm_bisect.report.documents import ProbeDoc

A, B, C, D = (f"{i:040x}" for i in range(1, 5))


def probe(
    commit: str, verdict: Verdict, slot: int | None, gpus: str = "", node: str = "gpu-17"
) -> ProbeDoc:
    facts = Fingerprint(node=node, devices=gpus.split(",") if gpus else [])
    return ProbeDoc(commit=commit, verdict=verdict, slot=slot, fingerprint=facts)


def test_a_slot_that_reads_the_other_way_on_shared_candidates_is_named() -> None:
    good, bad = Verdict.GOOD, Verdict.BAD
    probes = [
        probe(A, good, 0, "0,1"), probe(A, good, 1, "2,3"),
        probe(B, bad, 0, "0,1"), probe(B, good, 1, "2,3"), probe(B, good, 2, "4,5"),
        probe(C, bad, 0, "0,1"), probe(C, good, 2, "4,5"),
        probe(D, good, 0, "0,1"), probe(D, bad, 1, "2,3"), probe(D, bad, 2, "4,5"),
    ]  # fmt: skip
    [doubt] = doubted(probes)
    assert doubt.place == Place("gpu-17", ("0", "1")) and (doubt.disagreed, doubt.shared) == (3, 4)
    assert doubt.line == (
        "node gpu-17, GPUs 0,1, disagreed with the other GPUs on 3 of 4 candidates: a bad GPU?"
    )
    assert not one_place(probes)
    unknown = [probe(p.commit, p.verdict, p.slot, node="") for p in probes]  # no node said
    [doubt] = doubted(unknown)
    assert doubt.line == (
        "slot 0 disagreed with the other slots on 3 of 4 candidates: a bad node or GPU?"
    )


def test_a_bad_node_is_named_whatever_slots_its_jobs_ran_in() -> None:
    """Slurm and Kubernetes: slot k's jobs land on any node, so a slot says nothing of where
    a verdict ran; the node does. gpu-17 serves slots 0, 1 and 2 and reads bad where the other
    nodes read good; slot by slot none stands apart (each lied once in four)."""
    good, bad = Verdict.GOOD, Verdict.BAD
    probes = [
        probe(A, bad, 0, "0,1,2,3", "gpu-17"), probe(A, good, 1, "0,1,2,3", "gpu-18"),
        probe(A, good, 2, "0,1,2,3", "gpu-19"),
        probe(B, bad, 1, "0,1,2,3", "gpu-17"), probe(B, good, 0, "0,1,2,3", "gpu-18"),
        probe(B, good, 2, "0,1,2,3", "gpu-19"),
        probe(C, bad, 2, "0,1,2,3", "gpu-17"), probe(C, good, 0, "0,1,2,3", "gpu-19"),
        probe(C, good, 1, "0,1,2,3", "gpu-18"),
        probe(D, good, 0, "0,1,2,3", "gpu-17"), probe(D, good, 1, "0,1,2,3", "gpu-18"),
        probe(D, good, 2, "0,1,2,3", "gpu-19"),
    ]  # fmt: skip
    [doubt] = doubted(probes)
    assert doubt.line == (
        "node gpu-17, GPUs 0-3, disagreed with the other nodes on 3 of 4 candidates: a bad node?"
    )
    by_slot = [probe(p.commit, p.verdict, p.slot, node="") for p in probes]
    assert doubted(by_slot) == []  # what grouping by slot alone saw
    one_node = [probe(A, good, 0, node="n"), probe(B, bad, 1, node="n"), probe(B, good, 3, "", "n")]
    assert one_place(one_node)  # four slots, one node, its GPUs not said: one place


def test_one_disagreement_or_a_lone_slot_names_nothing() -> None:
    good, bad = Verdict.GOOD, Verdict.BAD
    once = [probe(A, good, 0), probe(A, bad, 1), probe(B, good, 0), probe(B, good, 1)]
    assert doubted(once) == []  # one lie is a lie, not a bad slot
    alone = [probe(A, good, 0), probe(B, bad, 0), probe(B, good, 0), probe(C, Verdict.SKIP, 1)]
    assert doubted(alone) == [] and one_place(alone)  # a skip tells nothing of its slot
    assert "3 consecutive starts in one place" in ASSUMED and "up to half its starts" in ASSUMED


def test_a_doubted_start_is_named_with_where_it_ran() -> None:
    probes = [probe(A, Verdict.GOOD, 0), probe(B, Verdict.BAD, 1, "2"), probe(B, Verdict.GOOD, 0)]
    assert started_where(probes, B, Verdict.BAD) == "probe 2 on slot 1, node gpu-17, GPUs 2"
    wide = [probe(B, Verdict.BAD, 0, "4,5,6,7", "gpu-3")]
    assert started_where(wide, B, Verdict.BAD) == "probe 1 on slot 0, node gpu-3, GPUs 4-7"
    assert started_where(probes, C, Verdict.BAD) == ""
