"""The journal: durable lines, torn tails tolerated."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_bisect.errors import JournalError
from llm_bisect.journal import Journal, read_events


def test_events_round_trip_and_a_torn_last_line_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    with Journal(path) as j:
        j.append("run", digest="d")
        j.append("probe", outcome={"commit": "c"})
    with path.open("a") as f:
        f.write('{"event": "probe", "outc')  # killed mid-write
    assert [e["event"] for e in read_events(path)] == ["run", "probe"]
    with Journal(path) as j:  # resuming appends on a fresh line
        j.append("probe-start", commit="x")
    assert [e["event"] for e in read_events(path)] == ["run", "probe", "probe-start"]


def test_a_corrupt_middle_line_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_text('{"event": "run"}\nnot json\n{"event": "done"}\n')
    with pytest.raises(JournalError, match=":2: not a journal event"):
        read_events(path)


def test_no_journal_reads_as_empty(tmp_path: Path) -> None:
    assert read_events(tmp_path / "journal.jsonl") == []
