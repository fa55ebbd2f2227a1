"""The journal: durable lines; one rule for a damaged tail; damage in the middle named."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from llm_bisect.errors import JournalError
from llm_bisect.journal import (
    Journal,
    begin_side,
    look_digest,
    look_name,
    plan_json,
    read_events,
    read_journal,
)
from llm_bisect.model import Candidate, ProbeOutcome, Verdict
from llm_bisect.posterior import Policy, Trial
from llm_bisect.redact import Scrub
from llm_bisect.search import Mode, Plan
from llm_bisect.symptom import Symptom

A, B, C = "a" * 40, "b" * 40, "c" * 40
PLAN = Plan(Mode.REGRESSION, (Candidate(A), Candidate(B), Candidate(C)))


def started(path: Path, scrub: Scrub | None = None) -> None:
    with Journal(path, scrub) as j:
        j.append("run", version=1, digest="d", plan=plan_json(PLAN))
        j.append("probe-start", commit=A)
        j.append("probe", outcome=ProbeOutcome(A, Verdict.GOOD, "ok").to_json())


def test_events_round_trip_into_the_runs_state(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    started(path)
    reading = read_journal(path)
    assert [e["event"] for e in reading.events] == ["run", "probe-start", "probe"]
    assert reading.state is not None and reading.state.plan == PLAN
    assert reading.state.probes == (ProbeOutcome(A, Verdict.GOOD, "ok"),)
    assert reading.dropped is None


@pytest.mark.parametrize(
    "tail",
    [
        '{"event": "probe", "outc',  # killed mid-write
        "garbage\n",  # newline-terminated garbage
        '{"event": "probe", "outcome": {"commit": 5}}\n',  # whole JSON, malformed fields
        '{"event": "probe", "outcome": {"commit": "' + B + '", "verdict": "maybe"}}\n',
        b"\xff\xfe\n".decode("latin-1"),  # not UTF-8
    ],
)
def test_a_damaged_last_line_is_dropped_and_cut_on_resume(tmp_path: Path, tail: str) -> None:
    path = tmp_path / "journal.jsonl"
    started(path)
    with path.open("a", encoding="latin-1") as f:
        f.write(tail)
    reading = read_journal(path)
    assert [e["event"] for e in reading.events] == ["run", "probe-start", "probe"]
    assert reading.dropped is not None and reading.dropped.startswith("line 4")
    with Journal(path) as j:  # resuming cuts it and appends on a clean line
        assert j.reading.dropped == reading.dropped
        j.append("probe-start", commit=B)
    again = read_journal(path)
    assert [e["event"] for e in again.events] == ["run", "probe-start", "probe", "probe-start"]
    assert again.dropped is None


def test_a_last_event_that_lost_its_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    started(path)
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    with Journal(path) as j:
        j.append("done", status="found")
    assert [e["event"] for e in read_events(path)] == ["run", "probe-start", "probe", "done"]


@pytest.mark.parametrize(
    ("middle", "why"),
    [
        ("not json\n", "not JSON"),
        ('{"event": "probe", "outcome": {"verdict": "good"}}\n', "malformed 'probe' event"),
        ('{"event": "probe-start", "commit": "HEAD"}\n', "malformed 'probe-start' event"),
        ('{"event": "party"}\n', "not a journal event"),
        ('{"event": "symptom", "symptom": "some"}\n', "malformed 'symptom' event"),
    ],
)
def test_damage_in_the_middle_is_a_clear_error(tmp_path: Path, middle: str, why: str) -> None:
    path = tmp_path / "journal.jsonl"
    started(path)
    with path.open("a") as f:
        f.write(middle + '{"event": "done", "status": "found"}\n')
    with pytest.raises(JournalError, match=f":4: {why}.*cannot be resumed"):
        read_journal(path)


def test_the_symptom_rule_is_the_heads_then_each_later_events(tmp_path: Path) -> None:
    """`search.symptom`: none in the head is `any` (journals before it); a resume under
    another rule appends a `symptom` event, and the latest holds."""
    path = tmp_path / "journal.jsonl"
    started(path)
    state = read_journal(path).state
    assert state is not None and state.symptom is Symptom.ANY
    with Journal(path) as j:
        j.append("symptom", symptom="same")
    state = read_journal(path).state
    assert state is not None and state.symptom is Symptom.SAME
    with Journal(path) as j:
        j.append("symptom", symptom="any")
    state = read_journal(path).state
    assert state is not None and state.symptom is Symptom.ANY


def test_a_journal_that_does_not_start_with_its_run_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_text('{"event": "done", "status": "found"}\n{"event": "done", "status": "x"}\n')
    with pytest.raises(JournalError, match=":1: the first event is not 'run'"):
        read_journal(path)


def test_no_journal_reads_as_empty(tmp_path: Path) -> None:
    assert read_events(tmp_path / "journal.jsonl") == []
    assert read_journal(tmp_path / "journal.jsonl").state is None


def test_what_goes_in_is_scrubbed(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    scrub = Scrub(max_text=100).with_secrets(["hf_secret_value"])
    started(path, scrub)
    long: dict[str, Any] = {"reason": "token hf_secret_value echoed " + "y" * 500}  # 517 masked
    with Journal(path, scrub) as j:
        j.append("probe", outcome=ProbeOutcome(B, Verdict.SKIP, long["reason"]).to_json())
    text = path.read_text()
    assert "hf_secret_value" not in text and "token *** echoed" in text
    assert "[cut: 517 characters in all, sha256 " in text
    assert read_journal(path).state is not None


REVERT, PICK = "d" * 40, "e" * 40  # B reverted onto the bad end, picked onto the good end
WEIGHED = Policy(
    flake=None,
    evidence=(Trial(B, "revert", Verdict.GOOD), Trial(B, "pick", Verdict.BAD)),
    looks=((B, True),),
)


def confirmed(path: Path, policy: Policy = WEIGHED, culprit: str = B) -> None:
    """A run whose search named B, whose confirmation's trials (DIR/confirm.jsonl, lines 2
    and 3) bore it out, weighed into the search (journal.jsonl line 4)."""
    started(path)
    with Journal(path.parent / "confirm.jsonl") as side:
        begin_side(side, "confirm", look_digest(culprit, A, C), 1)
        side.append("probe", kind="revert", outcome=ProbeOutcome(REVERT, Verdict.GOOD).to_json())
        side.append("probe", kind="pick", outcome=ProbeOutcome(PICK, Verdict.BAD).to_json())
    with Journal(path) as j:
        j.append("search", search=policy.to_json())


def test_evidence_as_its_confirmation_journalled_it_is_read_back(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    confirmed(path)
    state = read_journal(path).state
    assert state is not None and state.policy == WEIGHED
    assert look_name(0) == "confirm" and look_name(2) == "confirm-again-2"


GOOD_A = Trial(A, "revert", Verdict.GOOD)  # A: the good end, which the journal found good


@pytest.mark.parametrize(
    ("policy", "why"),
    [
        (  # the edit: the evidence names a commit the journal's own probe found good
            Policy(
                flake=None, evidence=(GOOD_A, Trial(A, "pick", Verdict.BAD)), looks=WEIGHED.looks
            ),
            f"evidence names the revert of {A[:12]} tested good, but confirm.jsonl:2 holds the "
            f"revert of {B[:12]} tested good",
        ),
        (
            Policy(flake=None, evidence=(Trial(B, "revert", Verdict.BAD),), looks=WEIGHED.looks),
            f"evidence names the revert of {B[:12]} tested bad, but confirm.jsonl:2 holds the "
            f"revert of {B[:12]} tested good",
        ),
        (
            Policy(flake=None, evidence=(*WEIGHED.evidence, GOOD_A), looks=WEIGHED.looks),
            f"evidence names the revert of {A[:12]} tested good, but no confirmation it weighs "
            "holds it",
        ),
        (
            Policy(flake=None, evidence=WEIGHED.evidence[:1], looks=WEIGHED.looks),
            f"evidence leaves out the pick of {B[:12]} tested bad (confirm.jsonl:3)",
        ),
        (
            Policy(flake=None, evidence=(GOOD_A,)),
            f"evidence names the revert of {A[:12]} tested good, but no confirmation it weighs "
            "holds it",
        ),
        (  # the look names A, and so does its evidence: its side journal confirms B
            Policy(
                flake=None, evidence=(GOOD_A, Trial(A, "pick", Verdict.BAD)), looks=((A, True),)
            ),
            f"its search weighs look 1 at {A[:12]}, but confirm.jsonl confirms another culprit",
        ),
        (  # a second look whose side journal is gone
            Policy(flake=None, evidence=WEIGHED.evidence, looks=(*WEIGHED.looks, (C, False))),
            f"its search weighs look 2 at {C[:12]}, but confirm-again.jsonl, where its trials "
            "are journalled, does not exist",
        ),
    ],
    ids=["a-good-commit", "verdict", "extra", "left-out", "no-look", "look-edited", "look-gone"],
)
def test_evidence_that_contradicts_its_confirmation_is_a_one_line_error_naming_the_line(
    tmp_path: Path, policy: Policy, why: str
) -> None:
    """Evidence weighs like verdicts: each entry must be a trial its confirmation's side
    journal holds (an edited journal named a commit its own probe found good, and `report
    DIR` named it the culprit)."""
    path = tmp_path / "journal.jsonl"
    confirmed(path, policy)
    said = re.escape(f"journal.jsonl:4: {why}: the journal contradicts what it was weighed from")
    with pytest.raises(JournalError, match=said) as e:
        read_journal(path)
    assert "\n" not in str(e.value)
    with pytest.raises(JournalError, match=":4: "), Journal(path):  # a resume reads it so
        pass


def test_a_confirmation_journal_that_is_gone_or_another_culprits_is_an_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.jsonl"
    confirmed(path, culprit=C)
    with pytest.raises(JournalError, match=f"look 1 at {B[:12]}, but confirm[.]jsonl confirms"):
        read_journal(path)
    (tmp_path / "confirm.jsonl").unlink()
    with pytest.raises(JournalError, match=r"confirm\.jsonl, where its trials are journalled, do"):
        read_journal(path)
