"""Slot evidence for a person (places.py): a slot whose verdicts stand apart from the other
slots' on the same candidates, where a doubted start ran, and when one slot cannot tell."""

from __future__ import annotations

from llm_bisect.fingerprint import Fingerprint
from llm_bisect.model import Verdict
from llm_bisect.places import ASSUMED, doubted, one_place, started_where
from llm_bisect.report.documents import ProbeDoc

A, B, C, D = (f"{i:040x}" for i in range(1, 5))


def probe(commit: str, verdict: Verdict, slot: int | None, gpus: str = "") -> ProbeDoc:
    facts = Fingerprint(node="gpu-17", devices=gpus.split(",") if gpus else [])
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
    assert doubt.slot == 0 and (doubt.disagreed, doubt.shared) == (3, 4)
    assert doubt.line == (
        "slot 0 (node gpu-17, GPUs 0,1) disagreed with the other slots on 3 of 4 candidates: "
        "a bad node or GPU?"
    )
    assert not one_place(probes)


def test_one_disagreement_or_a_lone_slot_names_nothing() -> None:
    good, bad = Verdict.GOOD, Verdict.BAD
    once = [probe(A, good, 0), probe(A, bad, 1), probe(B, good, 0), probe(B, good, 1)]
    assert doubted(once) == []  # one lie is a lie, not a bad slot
    alone = [probe(A, good, 0), probe(B, bad, 0), probe(B, good, 0), probe(C, Verdict.SKIP, 1)]
    assert doubted(alone) == [] and one_place(alone)  # a skip tells nothing of its slot
    assert "3 consecutive starts on one slot" in ASSUMED


def test_a_doubted_start_is_named_with_where_it_ran() -> None:
    probes = [probe(A, Verdict.GOOD, 0), probe(B, Verdict.BAD, 1, "2"), probe(B, Verdict.GOOD, 0)]
    assert started_where(probes, B, Verdict.BAD) == "probe 2 on slot 1, node gpu-17, GPUs 2"
    assert started_where(probes, C, Verdict.BAD) == ""
