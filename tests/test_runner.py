"""Slots: probes in flight at once on real simulated servers, cancelled when no longer needed,
and a killed parallel run resumed. Events, never guessed times: a held server proves two
probes run at once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from helpers import History, live_processes, probe_order, wait_until
from llm_bisect.journal import read_events
from test_cli import held_history, invoke, launched


def held(
    tmp_path: Path, culprit: int, hold_at: int, k: int, timeout: float = 600
) -> tuple[History, Path, Path, Path]:
    """16 commits, the server of `hold_at` held, `parallel: k`, no localisation probes."""
    return held_history(
        tmp_path, culprit, hold_at, n=16, timeout=timeout, parallel=k, localize=False
    )


def events(out: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in read_events(out / "journal.jsonl") if e["event"] == kind]


def start(config: Path, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "llm_bisect.cli", "run", str(config), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_two_slots_run_two_probes_at_once_in_fewer_rounds(tmp_path: Path) -> None:
    # After the good end (alone: the golden is recorded from it), two slots take the bad
    # end and the middle. The bad end is held: the middle must start while it waits.
    h, config, launches, hold = held(tmp_path, culprit=9, hold_at=16, k=2)
    out = tmp_path / "out"
    proc = start(config, out)
    try:
        assert wait_until(lambda: {h.shas[16], h.shas[8]} <= set(launched(launches)), 120)
        finished = {e["outcome"]["commit"] for e in events(out, "probe")}
        assert h.shas[16] not in finished  # still held: the two were in flight together
        hold.unlink()
        assert proc.wait(timeout=300) == 0
    finally:
        proc.kill()
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == h.shas[9]
    assert result["parallel"] == 2 and {p["slot"] for p in result["probes"]} == {0, 1}
    serial = len(probe_order(16, culprit=9))  # one slot: a round per probe
    assert result["rounds"] < serial, (result["rounds"], serial)
    starts = events(out, "probe-start")
    assert [e["round"] for e in starts[:3]] == [1, 2, 2]
    assert Counter(launched(launches)).most_common(1)[0][1] == 1  # nothing probed twice
    assert live_processes(str(h.repo)) == []


def test_a_probe_no_longer_needed_is_cancelled(tmp_path: Path) -> None:
    # Three slots: the bad end, 5 and 11 after the good end. 11 is held and never released:
    # once 5 tests bad the culprit is below 5, and 11's server must be stopped, not awaited.
    h, config, launches, _ = held(tmp_path, culprit=4, hold_at=11, k=3, timeout=120)
    out = tmp_path / "out"
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    assert f"{h.shas[11][:12]} SKIP" in output and "cancelled" in output
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == h.shas[4]
    assert h.shas[11] not in {p["commit"] for p in result["probes"]}  # not a verdict
    cancelled = [e["commit"] for e in events(out, "probe-cancel")]
    assert h.shas[11] in cancelled  # and any speculative probe the range then left behind
    assert not set(cancelled) & {p["commit"] for p in result["probes"]}
    assert launched(launches).count(h.shas[11]) == 1
    assert live_processes(str(h.repo)) == []


def test_a_killed_parallel_run_resumes_without_repeating_a_finished_probe(
    tmp_path: Path,
) -> None:
    h, config, launches, hold = held(tmp_path, culprit=9, hold_at=16, k=2)
    out = tmp_path / "out"
    proc = start(config, out)
    try:
        assert wait_until(lambda: {h.shas[16], h.shas[8]} <= set(launched(launches)), 120)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
    assert wait_until(lambda: live_processes(str(h.repo)) == [], 15), "server left behind"
    finished = [e["outcome"]["commit"] for e in events(out, "probe")]
    assert h.shas[16] not in finished  # in flight when killed
    hold.unlink()
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    assert json.loads((out / "result.json").read_text())["culprit"]["commit"] == h.shas[9]
    counts = Counter(launched(launches))
    assert all(counts[c] == 1 for c in finished), "a finished probe ran again"
    assert counts[h.shas[16]] == 2  # the one in flight ran again, once
    assert live_processes(str(h.repo)) == []
