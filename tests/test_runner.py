"""Slots: probes in flight at once on real simulated servers, cancelled when no longer needed,
and a killed parallel run resumed. Events, never guessed times: a held server proves two
probes run at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from helpers import History, live_processes, probe_order, wait_until
from llm_bisect.fingerprint import Fingerprint
from llm_bisect.journal import Journal, read_events
from llm_bisect.model import ProbeOutcome, Verdict
from llm_bisect.runner import avoided
from llm_bisect.search import pick_slot
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
    searched = Counter(p["commit"] for p in result["probes"])
    assert searched.most_common(1)[0][1] == 1  # the search probed nothing twice
    # after it, only the decisive builds whose suite stopped early, again with every check;
    # and a probe cancelled as no longer needed, where the range moved back to it (on a
    # loaded machine the slots finish in another order: one CI run started one twice)
    again = {c for c, n in Counter(launched(launches)).items() if n > 1}
    cancelled = {e["commit"] for e in events(out, "probe-cancel")}
    order = [h.shas.index(c) if c in h.shas else c[:12] for c in launched(launches)]
    journal = [(e["event"], e.get("commit") or e.get("outcome", {}).get("commit"))
               for e in read_events(out / "journal.jsonl")]  # fmt: skip
    assert again <= {h.shas[8], h.shas[9], *cancelled}, (order, journal)
    assert live_processes(str(h.repo)) == []


def test_a_middle_probe_done_before_the_bad_end_waits_for_its_symptom(tmp_path: Path) -> None:
    """`search.symptom: same` with two slots: the middle (8, degenerate reasoning: another
    regression, fixed by 11) finishes while the bad end (garbled arithmetic from 13) is held.
    Its suite cannot stop at the canary (the bad end's symptom is not known), and it is
    judged once the bad end's probe is in: counted good, the culprit is 13."""
    hold = tmp_path / "hold"
    hold.touch()
    faults = {5: "degenerate-reasoning", 11: "none", 13: "garbled-math"}
    h = History(tmp_path, faults, 16, changes={16: {"hold_file": str(hold)}})
    launches = tmp_path / "launches"
    config = h.config(
        server={"command": [*h.config_command(), "--launch-log", str(launches)]},
        checks=[{"type": "canary"}, {"type": "expect"}],
        search={"symptom": "same"},
        parallel=2,
        localize=False,
    )
    out = tmp_path / "out"
    proc = start(config, out)

    def finished() -> set[str]:
        return {e["outcome"]["commit"] for e in events(out, "probe")}

    try:
        assert wait_until(lambda: h.shas[8] in finished(), 120)
        assert h.shas[16] not in finished()  # held: the middle's answer came first
        hold.unlink()
        assert proc.wait(timeout=300) == 0
    finally:
        proc.kill()
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == h.shas[13]
    middle = next(p for p in result["probes"] if p["commit"] == h.shas[8])
    assert middle["verdict"] == "good" and middle["reason"].startswith("another symptom")
    assert [c["name"] for c in middle["checks"]] == ["canary", "expect"]  # ran whole
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


def test_a_resumed_run_whose_verdicts_contradict_probes_both_again_and_names_the_flaky_one(
    tmp_path: Path,
) -> None:
    # Two slots whose probes ended together wrote contradicting verdicts: 10 bad, and 12
    # good although the bug (at 9) is in it, a flaky good. The old search bisected 8..10
    # while its batches read 12..16: every resume stalled. Now both are probed again first.
    h, config, launches, hold = held(tmp_path, culprit=9, hold_at=16, k=2)
    out = tmp_path / "out"
    proc = start(config, out)

    def probed() -> set[str]:
        return {e["outcome"]["commit"] for e in events(out, "probe")}

    try:
        assert wait_until(lambda: h.shas[8] in probed(), 120)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
    assert wait_until(lambda: live_processes(str(h.repo)) == [], 15), "server left behind"
    assert probed() == {h.shas[0], h.shas[8]}
    with Journal(out / "journal.jsonl") as journal:
        for i, verdict in ((10, Verdict.BAD), (12, Verdict.GOOD)):
            outcome = ProbeOutcome(h.shas[i], verdict, "as its slot said")
            journal.append("probe", outcome=outcome.to_json(), slot=i % 2, round=2, time=0.0)
    hold.unlink()
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    assert "probing again" in output
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == h.shas[9]
    retests = {r["commit"]: (r["verdicts"], r["flaky"]) for r in result["retests"]}
    assert retests[h.shas[12]] == (["good", "bad"], True)
    # 10's second probe is cancelled when 12's ends first: flaky 12 contradicts nothing then
    assert retests.get(h.shas[10], (["bad", "bad"], False)) == (["bad", "bad"], False)
    assert any(f"Flaky: {h.shas[12][:12]}" in note for note in result["notes"])
    report = (out / "report.md").read_text()
    assert "## Caveats" in report and f"`{h.shas[12][:12]}`: good, then bad" in report
    counts = Counter(launched(launches))
    assert counts[h.shas[0]] == counts[h.shas[8]] == 1, "a finished probe ran again"
    assert counts[h.shas[10]] == counts[h.shas[12]] == 1  # both probed again at once, for real
    assert (out / "probes" / f"{h.shas[12][:12]}-2" / "server.log").exists()
    # a re-probe is not believed on what an earlier start compiled: its engine cache is an
    # empty folder of its own (the slots' stay as they are), removed once it stopped
    (cache,) = [p["fingerprint"]["engine_cache"] for p in result["probes"]
                if p["commit"] == h.shas[12] and "engine_cache" in p["fingerprint"]]  # fmt: skip
    assert cache["fresh"] is True and cache["state"] == "cold", cache
    assert Path(cache["folder"]).name.startswith(f"fresh-{h.shas[12][:12]}-")
    assert not Path(cache["folder"]).exists()
    assert live_processes(str(h.repo)) == []


FAKE_SMI = """#!/usr/bin/env python3
import sys
gpus = [f"{i}, NVIDIA H200, 550.54.15, 143771 MiB, 00000000:{i:02x}:00.0" for i in range(8)]
if "--query-gpu=index" in sys.argv:
    print("\\n".join(str(i) for i in range(8)))
elif any(a.startswith("--query-gpu=") for a in sys.argv):
    print("\\n".join(gpus))
else:
    print("NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4")
"""


def test_slots_on_one_host_get_their_own_gpus_and_each_probe_records_them(
    tmp_path: Path,
) -> None:
    # An 8-GPU node (nvidia-smi, faked at the process edge): two slots get four GPUs each,
    # never the same; three slots cannot split eight and are refused before anything starts.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": None}
    shown = {"print_env": ["CUDA_VISIBLE_DEVICES"]}
    h = History(tmp_path, {5: "degenerate-reasoning"}, 8, settings=shown)
    code, output = invoke(
        "run", str(h.config(parallel=3)), "--out", str(tmp_path / "three"), env=env
    )
    assert code == 2, output
    assert "parallel: 3 puts 3 slots on one host, and the GPUs nvidia-smi lists" in output
    assert not (tmp_path / "three" / "journal.jsonl").exists()
    out = tmp_path / "two"
    code, output = invoke(
        "run", str(h.config(parallel=2, localize=False)), "--out", str(out), env=env
    )
    assert code == 0, output
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == h.shas[5]
    mine = {0: ["0", "1", "2", "3"], 1: ["4", "5", "6", "7"]}
    assert {p["slot"] for p in result["probes"]} == {0, 1}
    for p in result["probes"]:
        assert p["fingerprint"]["devices"] == mine[p["slot"]], p
        log = (out / "probes" / p["commit"][:12] / "server.log").read_text()
        assert f"sim: CUDA_VISIBLE_DEVICES={','.join(mine[p['slot']])}" in log


def test_a_start_that_lies_is_outvoted_and_the_report_names_the_verdict(tmp_path: Path) -> None:
    # The third server start serves the other side's behaviour (a good build answers as a
    # bad one). Taken as a fact it moves the answer; weighed (`search.flake: auto`) it is
    # outvoted (the search stops for the culprit's confirmation, whose trials are weighed
    # like probes) and named.
    h = History(tmp_path, {17: "degenerate-reasoning"}, 24)

    def config(name: str, search: dict[str, Any]) -> tuple[Path, Path]:
        launches = tmp_path / f"launches-{name}"
        command = [*h.config_command(), "--launch-log", str(launches), "--lie-at", "3"]
        server = {"command": command, "ready_timeout": 60}
        return h.config(server=server, search=search, localize={"enabled": False}), launches

    today, _ = config("today", {"flake": 0})
    code, output = invoke("run", str(today), "--out", str(tmp_path / "today"))
    assert code == 0, output
    assert (
        json.loads((tmp_path / "today" / "result.json").read_text())["culprit"]["commit"]
        != (h.shas[17])
    )

    weighed, launches = config("auto", {"flake": "auto"})
    out = tmp_path / "auto"
    code, output = invoke("run", str(weighed), "--out", str(out))
    assert code == 0, output
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "found" and result["culprit"]["commit"] == h.shas[17]
    liar = launched(launches)[2]
    search = result["search"]
    assert [(d["commit"], d["verdict"]) for d in search["disagreed"]] == [(liar, "bad")]
    assert search["flake"] == "auto" and result["confirmation"]["status"] == "confirmed"
    trials = [(e["commit"], e["kind"], e["verdict"]) for e in search["evidence"]]
    # the search stopped for the liar's confirmation first: its revert stays bad (weighed),
    # then for 17's, which bears it out
    assert trials == [(liar, "revert", "bad"), (h.shas[17], "revert", "good"),
                      (h.shas[17], "pick", "bad"), (h.shas[17], "revert", "good"),
                      (h.shas[17], "pick", "bad")], trials  # fmt: skip
    assert result["culprit"]["posterior"] == search["posterior"] >= 0.99
    first = (out / "report.md").read_text().splitlines()[0]
    assert f"found: {h.shas[17][:12]}" in first
    disagreed = "1 verdict disagreed" + (
        " and was probed again" if liar in search["again"] else
        ", outweighed with the confirmation's trials"
    )  # fmt: skip
    shown = f"(posterior {search['posterior']:.3f}"  # at least 0.99 (above)
    assert shown in first and disagreed in first, first

    code, output = invoke("report", str(out))  # from the journal: the same weighing
    assert code == 0, output
    assert json.loads((out / "result.json").read_text())["search"] == search

    stricter, _ = config("auto", {"flake": 0.05, "confidence": 0.999})  # resumes: same verdicts
    code, output = invoke("run", str(stricter), "--out", str(out))
    assert code == 0, output
    # the first run's three weighed confirmations (the liar's, then 17's twice: its revert
    # reads good on two starts), then the new rate, their trials kept
    assert [e["search"]["flake"] for e in events(out, "search")] == ["auto"] * 3 + [0.05]
    assert events(out, "search")[-1]["search"]["evidence"] == search["evidence"]
    again = json.loads((out / "result.json").read_text())
    assert again["search"]["confidence"] == 0.999 and again["search"]["posterior"] >= 0.999
    assert again["culprit"]["commit"] == h.shas[17]
    assert live_processes(str(h.repo)) == []


def test_a_probe_starts_on_a_free_slot_that_has_not_probed_its_candidate() -> None:
    assert pick_slot(1, set(), set()) == 0
    assert pick_slot(1, set(), {0}) == 0  # one slot: a re-probe has no other
    assert pick_slot(2, set(), {0}) == 1
    assert pick_slot(3, {1}, {0}) == 2
    assert pick_slot(2, {1}, {0}) == 0  # the other is busy: the same slot, a new server
    assert pick_slot(4, set(), set()) == 0


def test_re_probes_take_the_slots_their_candidate_ran_on_in_turn() -> None:
    # every slot has probed it: the one that probed it least recently, not always the lowest
    # (two slots under lies: a verdict the answer needs from slot 1 never came, and the probe
    # budget ran out re-probing on slot 0)
    assert pick_slot(2, set(), [1, 0]) == 1
    assert pick_slot(2, set(), [0, 1, 0]) == 1
    assert pick_slot(3, set(), [2, 0, 1]) == 2
    assert pick_slot(3, {2}, [2, 0, 1]) == 0


def test_a_re_probe_keeps_off_the_nodes_its_candidate_ran_on() -> None:
    """Where the cluster picks the node (Slurm, Kubernetes) a slot is no place: a re-probe
    keeps off the nodes of its candidate's earlier probes, as their fingerprints name them."""
    a, b = "a" * 40, "b" * 40

    def on(commit: str, node: str) -> ProbeOutcome:
        return ProbeOutcome(commit, Verdict.BAD, fingerprint=Fingerprint(node=node))

    probes = [on(a, "gpu-17"), on(b, "gpu-18"), on(a, "gpu[01-02]"), on(a, "gpu-17"), on(a, "")]
    assert avoided(probes, a) == ("gpu-17", "gpu[01-02]")
    assert avoided(probes, "c" * 40) == ()


def test_a_re_probe_goes_to_a_slot_that_has_not_probed_its_candidate(tmp_path: Path) -> None:
    # As the resumed run above: 10 said bad on slot 0 and 12 good on slot 1 contradict each
    # other, so both are probed again first, with both slots free: each on the other slot.
    h, config, _, hold = held(tmp_path, culprit=9, hold_at=16, k=2)
    out = tmp_path / "out"
    proc = start(config, out)
    try:
        assert wait_until(
            lambda: h.shas[8] in {e["outcome"]["commit"] for e in events(out, "probe")}, 120
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
    assert wait_until(lambda: live_processes(str(h.repo)) == [], 15), "server left behind"
    with Journal(out / "journal.jsonl") as journal:
        for i, verdict, slot in ((10, Verdict.BAD, 0), (12, Verdict.GOOD, 1)):
            outcome = ProbeOutcome(h.shas[i], verdict, "as its slot said")
            journal.append("probe-start", commit=h.shas[i], slot=slot, round=2, time=0.0)
            journal.append("probe", outcome=outcome.to_json(), slot=slot, round=2, time=0.0)
    resumed = len(events(out, "probe-start"))
    hold.unlink()
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    again = {e["commit"]: e["slot"] for e in events(out, "probe-start")[resumed:][:2]}
    assert again == {h.shas[10]: 1, h.shas[12]: 0}, again
