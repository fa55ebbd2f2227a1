"""End to end: the real CLI, real git histories, the simulated server, real signals."""

from __future__ import annotations

import io
import json
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
import yaml
from typer.testing import CliRunner

from helpers import (
    HOSTILE_LOG,
    History,
    as_in_an_issue,
    live_processes,
    printed_after,
    printed_commands,
    probe_order,
    run_as_printed,
    sim_command,
    wait_until,
    write_config,
)
from llm_bisect.cli import EXIT_AMBIGUOUS, cli
from llm_bisect.journal import read_events
from test_sources_git import branched


def invoke(*args: str, env: Mapping[str, str | None] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), env=env)
    return result.exit_code, result.output


def result_of(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "result.json").read_text())
    return data


def test_run_finds_the_culprit_with_evidence(tmp_path: Path, history: Any) -> None:
    h: History = history({9: "degenerate-reasoning"}, n=16)
    out = tmp_path / "out"
    code, output = invoke("run", str(h.config()), "--out", str(out))
    assert code == 0, output
    assert f"found: {h.shas[9]}" in output
    result = result_of(out)
    assert result["status"] == "found"
    assert result["culprit"]["commit"] == h.shas[9]
    assert result["culprit"]["subject"].endswith("(#24009)")
    assert result["culprit"]["author"] == "Demo Maintainer <maintainer@example.com>"
    assert result["range"] == [h.shas[8], h.shas[9]]
    assert len(result["probes"]) <= math.ceil(math.log2(17)) + 2
    assert {p["verdict"] for p in result["probes"]} == {"good", "bad"}
    bad_probe = next(p for p in result["probes"] if p["commit"] == h.shas[9])
    canary = next(c for c in bad_probe["checks"] if c["name"] == "canary")
    assert not canary["passed"] and "now now now" in canary["evidence"]
    report = (out / "report.md").read_text()
    assert h.shas[9] in report
    assert "**first bad**" in report and "**last good**" in report
    assert "I'm doing well" in report  # the last good build's output, next to the bad one
    assert result["eval_power"]["n"] == 64  # the bundled set is too small for small drops
    assert (
        "⚠ The eval (bundled arithmetic, 64 problems, not GSM8K) detects, on its 64 "
        "answers compared, an accuracy drop of" in report
    )
    assert (out / "probes" / h.shas[9][:12] / "server.log").exists()
    assert live_processes(str(h.repo)) == []


def test_skipped_neighbours_make_it_ambiguous(tmp_path: Path, history: Any) -> None:
    h: History = history({8: "crash-on-start", 9: "null-content"}, n=12)
    out = tmp_path / "out"
    code, output = invoke("run", str(h.config()), "--out", str(out))
    assert code == 3, output
    result = result_of(out)
    assert result["status"] == "ambiguous" and result["culprit"] is None
    assert result["range"] == [h.shas[7], h.shas[8], h.shas[9]]
    skip = next(p for p in result["probes"] if p["commit"] == h.shas[8])
    assert skip["verdict"] == "skip"
    assert "exited with code 3 before ready" in skip["reason"]
    assert "no kernel image" in skip["log_tail"]
    assert "## Untestable builds" in (out / "report.md").read_text()


def test_untestable_builds_are_never_bad(tmp_path: Path, history: Any) -> None:
    h: History = history({3: "crash-on-request", 5: "never-ready", 7: "degenerate-content"}, n=9)
    out = tmp_path / "out"
    code, _output = invoke("run", str(h.config(server={"ready_timeout": 10})), "--out", str(out))
    result = result_of(out)
    verdicts = {p["commit"]: p for p in result["probes"]}
    for i in range(3, 7):
        if h.shas[i] in verdicts:
            assert verdicts[h.shas[i]]["verdict"] == "skip", verdicts[h.shas[i]]
    crashed = verdicts[h.shas[4]]  # the first midpoint
    assert "crashed during checks" in crashed["reason"]
    assert "exited with code 134" in crashed["reason"]
    assert result["culprit"] is None or result["culprit"]["commit"] == h.shas[7]
    assert h.shas[7] in result["range"]
    assert code in (0, 3)


CRASHES = {  # from commit 3 on: a server that answers 500, or one that dies, during checks
    "http-500": ({}, {3: {"hostile": {"error_env": ["HOME"]}}}),
    "dies": ({3: "crash-on-request"}, {}),
}


@pytest.mark.parametrize("kind", CRASHES)
@pytest.mark.parametrize(
    ("regress", "status", "found"),
    [("crash", "found", True), ("any", "found", True), ("semantic", "error", False)],
)
def test_crashes_during_checks_are_the_regression_only_when_asked(
    tmp_path: Path, history: Any, kind: str, regress: str, status: str, found: bool
) -> None:
    faults, changes = CRASHES[kind]
    h: History = history(faults, n=6, changes=changes)
    out = tmp_path / "out"
    code, output = invoke("run", str(h.config(regress=regress)), "--out", str(out))
    result = result_of(out)
    assert result["status"] == status and result["regress"] == regress, output
    assert code == (0 if found else 1)
    if found:
        assert result["culprit"]["commit"] == h.shas[3]
        bad = next(p for p in result["probes"] if p["commit"] == h.shas[3])
        assert bad["reason"].startswith(f"crashed during checks (regress: {regress})")
    else:  # semantic: a crash is untestable, never bad
        assert "the bad end could not be tested (skip)" in result["message"]
    assert f"`regress: {regress}`" in (out / "report.md").read_text()


@pytest.mark.parametrize("regress", ["crash", "any"])
def test_a_good_end_that_crashes_during_its_checks_is_an_error_with_a_report_and_no_more_probes(
    tmp_path: Path, history: Any, regress: str
) -> None:
    """Under `regress: crash` (or `any`) a good end that crashes during its checks is bad, and
    no golden could be recorded from it: nothing can be judged, so no other build is started.
    The run ends `error` (exit 1) with its report; a resume and `report DIR` end the same way
    without starting a server."""
    h: History = history({0: "crash-on-request"}, n=6)
    launches = tmp_path / "launches"
    command = [*h.config_command(), "--launch-log", str(launches)]
    config = str(h.config(server={"command": command}, checks=SIMPLE_CHECKS, regress=regress,
                          search={"flake": "auto"}))  # fmt: skip
    out = tmp_path / "out"
    said = (
        f"the good end {h.shas[0][:12]} is bad under regress: {regress} (it crashed during its "
        "checks): nothing to bisect"
    )
    for command_ in (["run", config, "--out", str(out)], ["run", config, "--out", str(out)],
                     ["report", str(out)]):  # fmt: skip
        code, output = invoke(*command_)
        assert code == 1 and f"error: {said}" in output, output
        assert "golden: none recorded yet" not in output
        result = result_of(out)
        assert result["status"] == "error" and result["message"].startswith(said)
        assert [p["commit"] for p in result["probes"]] == [h.shas[0]]
        assert said in (out / "report.md").read_text()
        assert launches.read_text().split() == [h.shas[0]]  # the good end's one start
    assert not (out / "golden.json").exists()


def test_a_golden_missing_on_resume_is_an_error_until_it_is_recorded_again(
    tmp_path: Path, history: Any
) -> None:
    """golden.json gone from a run killed after its good end: no build can be judged without
    it. The run ends `error` (exit 1) naming the file, with its report, and starts nothing;
    once the golden is recorded again as it says, the same command goes on to the culprit."""
    h: History = history({2: "null-content"}, n=4)
    launches = tmp_path / "launches"
    command = [*h.config_command(), "--launch-log", str(launches)]
    quick = {"checks": SIMPLE_CHECKS, "confirm": False, "localize": {"enabled": False},
             "probe": {"early_stop": False}}  # fmt: skip
    config = str(h.config(server={"command": command}, **quick))
    out = tmp_path / "out"
    assert invoke("run", config, "--out", str(out))[0] == 0
    journal = (out / "journal.jsonl").read_text().splitlines(keepends=True)
    assert [json.loads(line)["event"] for line in journal[:3]] == ["run", "probe-start", "probe"]
    (out / "journal.jsonl").write_text("".join(journal[:3]))  # killed after the good end
    (out / "golden.json").unlink()
    (out / "result.json").unlink()
    starts = launches.read_text().split()
    for command in (["run", config, "--out", str(out)], ["report", str(out)]):
        code, output = invoke(*command)
        assert code == 1, output
        assert f"error: golden: '{out / 'golden.json'}' is missing; the good end " in output
        assert "golden: none recorded yet" not in output
        result = result_of(out)
        assert result["status"] == "error" and "`llm-bisect golden`" in result["message"]
        assert "is missing" in (out / "report.md").read_text()
        assert launches.read_text().split() == starts
    assert invoke("golden", config, "--candidate", h.shas[0], "-o", str(out))[0] == 0
    code, output = invoke("run", config, "--out", str(out))
    assert code == 0 and f"found: {h.shas[2]}" in output, output


@pytest.mark.parametrize(
    ("regress", "status"), [("crash", "no-regression"), ("any", "found"), ("semantic", "found")]
)
def test_failed_checks_are_no_regression_when_only_crashes_count(
    tmp_path: Path, history: Any, regress: str, status: str
) -> None:
    h: History = history({4: "null-content"}, n=6)
    out = tmp_path / "out"
    code, output = invoke("run", str(h.config(regress=regress)), "--out", str(out))
    result = result_of(out)
    assert result["status"] == status, output
    if regress == "crash":
        assert code == 4
        bad_end = next(p for p in result["probes"] if p["commit"] == h.shas[-1])
        assert bad_end["verdict"] == "good" and "regress: crash" in bad_end["reason"]
    else:
        assert code == 0 and result["culprit"]["commit"] == h.shas[4]


def test_regress_start_finds_the_first_build_that_does_not_start(
    tmp_path: Path, history: Any
) -> None:
    """Under every other policy a build that never starts is skip; under `regress: start` it
    is bad, and the search finds the first one. A build that starts is good there, though it
    garbles its answers (2) or dies during its checks (4)."""
    h: History = history({2: "degenerate-content", 4: "crash-on-request", 6: "crash-on-start"}, n=9)
    out = tmp_path / "out"
    code, output = invoke("run", str(h.config(regress="start")), "--out", str(out))
    assert code == 0, output
    result = result_of(out)
    assert result["status"] == "found" and result["regress"] == "start", output
    assert result["culprit"]["commit"] == h.shas[6] and result["range"] == h.shas[5:7]
    for p in result["probes"]:
        started = h.shas.index(p["commit"]) < 6
        assert p["verdict"] == ("good" if started else "bad"), p
        assert p["reason"].startswith("started (regress: start" if started else "did not start")
        assert started or p["failed_at"] == "ready"
    assert "`regress: start`" in (out / "report.md").read_text()
    assert not (out / "localization.json").exists()  # a build that never starts: nothing to hook
    assert live_processes(str(h.repo)) == []


@pytest.mark.parametrize("early_stop", [True, False])
def test_a_suite_stops_at_its_first_failed_check_except_at_the_ends(
    tmp_path: Path, history: Any, early_stop: bool
) -> None:
    h: History = history({4: "degenerate-reasoning"}, n=8)
    out = tmp_path / "out"
    everything = ["canary", "expect", "logprobs", "eval"]
    listed = [{"type": name} for name in reversed(everything)]  # they run cheapest first
    config = h.config(probe={"early_stop": early_stop}, checks=listed)
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    result = result_of(out)
    assert result["culprit"]["commit"] == h.shas[4]
    for p in result["probes"]:
        ran = [c["name"] for c in p["checks"]]
        if early_stop and p["verdict"] == "bad" and p["commit"] != h.shas[-1]:
            assert ran == ["canary"] and p["not_run"] == everything[1:], p["commit"]
        else:  # good builds, the ends (the bad end too) and every probe without early stop
            assert ran == everything and p.get("not_run", []) == [], p["commit"]
    stopped = [p for p in result["probes"] if p.get("not_run")]
    assert bool(stopped) is early_stop
    report = (out / "report.md").read_text()
    assert ("not run, the verdict settled: expect, logprobs, eval" in report) is early_stop


def test_no_regression_and_a_good_end_that_fails_a_rule_itself(
    tmp_path: Path, history: Any
) -> None:
    h: History = history({}, n=6)
    code, output = invoke("run", str(h.config()), "--out", str(tmp_path / "a"))
    assert code == 4, output
    assert result_of(tmp_path / "a")["status"] == "no-regression"
    assert result_of(tmp_path / "a")["warnings"] == []
    # The good end already garbles its arithmetic: what it always does is not a regression,
    # and the warning names the prompt that cannot tell builds apart.
    h2 = History(tmp_path / "b", {0: "garbled-math"}, 6)
    code, output = invoke("run", str(h2.config()), "--out", str(tmp_path / "b" / "out"))
    assert code == 4, output
    result = result_of(tmp_path / "b" / "out")
    assert result["status"] == "no-regression"
    assert [p["verdict"] for p in result["probes"]] == ["good", "good"]
    (warning,) = result["warnings"]
    assert "expect: the good build's answer to 'What is 2+2?" in warning, warning
    assert "warning: expect: the good build" in output
    assert "## Warnings" in (tmp_path / "b" / "out" / "report.md").read_text()
    (tmp_path / "b" / "out" / "result.json").unlink()
    code, output = invoke("report", str(tmp_path / "b" / "out"))
    assert code == 4, output
    assert result_of(tmp_path / "b" / "out")["warnings"] == [warning]


def test_find_fix_names_the_first_good_commit(tmp_path: Path, history: Any) -> None:
    h: History = history({0: "garbled-math", 11: "none"}, n=14)
    out = tmp_path / "out"
    code, output = invoke(
        "run", str(h.config(good=h.shas[-1], bad=h.shas[0])), "--out", str(out), "--find-fix"
    )
    assert code == 0, output
    result = result_of(out)
    assert result["mode"] == "fix"
    assert result["culprit"]["commit"] == h.shas[11]
    assert result["good"] == h.shas[-1] and result["bad"] == h.shas[0]
    assert "**last bad**" in (out / "report.md").read_text()


def test_branch_bisects_from_the_merge_base(tmp_path: Path) -> None:
    shas = branched(tmp_path)
    h = History.__new__(History)
    h.repo, h.root, h.shas, h.configs = tmp_path / "engine", tmp_path, [], 0
    code, output = invoke(
        "run", str(h.config(good=shas["m5"], bad="v1")), "--out", str(tmp_path / "o")
    )
    assert code == 0, output
    result = result_of(tmp_path / "o")
    assert result["culprit"]["commit"] == shas["r2"]
    assert result["merge_base"] == shas["m2"]


def test_branch_whose_merge_base_is_bad_reports_the_fix_range(tmp_path: Path) -> None:
    shas = branched(tmp_path, base_fault="null-content")
    h = History.__new__(History)
    h.repo, h.root, h.shas, h.configs = tmp_path / "engine", tmp_path, [], 0
    out = tmp_path / "o"
    code, output = invoke("run", str(h.config(good=shas["m5"], bad="v1")), "--out", str(out))
    assert code == 4, output
    result = result_of(out)
    assert result["status"] == "no-regression"
    assert result["fix_range"] == [shas["m2"], shas["m5"]]
    assert "predates the branch point" in result["message"]
    assert "--find-fix" in (out / "report.md").read_text()


@pytest.mark.parametrize("release_fault", ["none", "crash-on-start"])
def test_an_untestable_merge_base_is_stepped_over_and_the_report_says_what_it_cost(
    tmp_path: Path, release_fault: str
) -> None:
    # The merge base m2 crashes on start. git bisect warns and goes on; so does the run.
    shas = branched(tmp_path, base_fault="crash-on-start", release_fault=release_fault)
    h = History.__new__(History)
    h.repo, h.root, h.shas, h.configs = tmp_path / "engine", tmp_path, [], 0
    out = tmp_path / "o"
    code, output = invoke("run", str(h.config(good=shas["m5"], bad="v1")), "--out", str(out))
    result = result_of(out)
    report = (out / "report.md").read_text()
    assert f"The merge base {shas['m2'][:12]} could not be tested (skip)" in report
    if release_fault == "none":  # r1 after it tested good: the merge base cost nothing
        assert code == 0, output
        assert result["culprit"]["commit"] == shas["r2"]
        assert "That cost nothing here" in report
    else:  # nothing after it tested good: the change may predate the branch point
        assert code == 3, output
        assert result["status"] == "ambiguous"
        assert result["range"] == [shas[k] for k in ("m5", "m2", "r1", "r2")]
        assert "That cost the answer" in report and "--find-fix" in report


def test_check_exit_codes_work_for_git_bisect_run(tmp_path: Path, history: Any) -> None:
    h: History = history({2: "degenerate-content", 3: "crash-on-start", 4: "crash-on-request"}, n=4)
    config = str(h.config())
    golden = str(tmp_path / "golden.json")
    code, output = invoke("check", config, "--candidate", h.shas[0], "--golden", golden)
    assert code == 128 and "record one with `llm-bisect golden`" in output
    code, output = invoke("golden", config, "--candidate", h.shas[0], "-o", golden)
    assert code == 0 and f"golden of {h.shas[0]}" in output, output
    expected = {0: 0, 2: 1, 3: 125, 4: 125}
    for index, exit_code in expected.items():
        code, output = invoke(
            "check",
            config,
            "--candidate",
            h.shas[index],
            "--out",
            str(tmp_path / "c"),
            "--golden",
            golden,
        )
        assert code == exit_code, output
    code, output = invoke(
        "check", config, "--candidate", h.shas[4], "--out", str(tmp_path / "c"), "--golden", golden
    )
    assert "crashed during checks" in output
    assert live_processes(str(h.repo)) == []


def test_check_prints_a_server_log_as_text_never_as_terminal_escapes(history: Any) -> None:
    """A log that clears the screen and writes the clipboard (OSC 52) is shown, not obeyed."""
    h: History = history({1: "crash-on-start"}, n=1, changes={1: {"log_lines": HOSTILE_LOG}})
    code, output = invoke(
        "check", str(h.config(checks=[{"type": "canary"}])), "--candidate", h.shas[1]
    )
    assert code == 125, output
    assert "\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J" in output and "onerror=alert(1)" in output
    assert not any(c in output for c in "\x1b\x07\x00\x9b"), output


def test_repeats_that_disagree_are_unsure(tmp_path: Path, history: Any) -> None:
    h: History = history({1: "bad-warmup"}, n=1)
    config = str(h.config(probe={"repeats": 2}, checks=[{"type": "canary"}, {"type": "expect"}]))
    code, output = invoke("check", config, "--candidate", h.shas[1])
    assert code == 125, output
    assert "unsure" in output and "1 of 2 bad" in output


def test_under_regress_crash_flapping_checks_do_not_make_a_probe_untestable(
    tmp_path: Path, history: Any
) -> None:
    h: History = history({1: "bad-warmup"}, n=1)
    checks = [{"type": "canary"}, {"type": "expect"}]
    config = str(h.config(probe={"repeats": 2}, checks=checks, regress="crash"))
    code, output = invoke("check", config, "--candidate", h.shas[1])
    assert code == 0, output
    assert "no crash (regress: crash" in output and "unsure" not in output


def test_a_finished_run_resumes_without_probing_again(tmp_path: Path, history: Any) -> None:
    h: History = history({5: "null-content"}, n=10)
    launches = tmp_path / "launches"
    config = h.config(server={"command": [*h.config_command(), "--launch-log", str(launches)]})
    out = tmp_path / "out"
    assert invoke("run", str(config), "--out", str(out))[0] == 0
    first = launches.read_text()
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0 and f"found: {h.shas[5]}" in output
    assert launches.read_text() == first
    other = h.config(good=h.shas[1])
    code, output = invoke("run", str(other), "--out", str(out))
    assert code == 2 and "another config" in output
    (out / "report.md").unlink()
    code, output = invoke("report", str(out))
    assert code == 0 and (out / "report.md").exists()


def test_secrets_from_env_reach_no_file(tmp_path: Path, history: Any) -> None:
    h: History = history(
        {3: "crash-on-start", 4: "none"}, n=6, settings={"print_env": ["HF_TOKEN"]}
    )
    secret = "hf_TopSecretValue42"
    config = h.config(server={"env": {"HF_TOKEN": "${MY_HF_TOKEN}"}})
    out = tmp_path / "out"
    code, output = invoke("run", str(config), "--out", str(out), env={"MY_HF_TOKEN": secret})
    assert code == 4, output
    skip_probes = invoke(
        "check",
        str(config),
        "--candidate",
        h.shas[3],
        "--out",
        str(out / "c"),
        "--golden",
        str(out / "golden.json"),
        env={"MY_HF_TOKEN": secret},
    )
    assert skip_probes[0] == 125 and secret not in skip_probes[1]
    for name in ("journal.jsonl", "result.json", "report.md", "golden.json"):
        assert secret not in (out / name).read_text(), name
    # The server got it (its log shows the variable), but the log holds only the mask.
    logs = "".join(p.read_text() for p in out.rglob("server.log"))
    assert "HF_TOKEN=***" in logs
    assert secret not in logs


# --- killed runs: a real harness process, signalled from outside -------------------------


def cli_run(
    *args: str, env: dict[str, str], timeout: float = 300, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The real CLI in a process of its own (in `cwd`)."""
    return subprocess.run(
        [sys.executable, "-m", "llm_bisect.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=cwd,
    )


def start_run(config: Path, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "llm_bisect.cli", "run", str(config), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def probes_in(out: Path) -> list[dict[str, Any]]:
    return [e for e in read_events(out / "journal.jsonl") if e["event"] == "probe"]


def held_history(
    tmp_path: Path, culprit: int, held: int, n: int = 24, timeout: float = 600, **over: Any
) -> tuple[History, Path, Path, Path]:
    """A history whose server for commit `held` does not start while the hold file exists;
    `over`: more of the config (`parallel: 2`)."""
    hold = tmp_path / "hold"
    hold.touch()
    h = History(
        tmp_path,
        {culprit: "degenerate-reasoning"},
        n,
        changes={held: {"hold_file": str(hold)}, held + 1: {"hold_file": ""}},
    )
    launches = tmp_path / "launches"
    config = h.config(
        server={
            "command": [*h.config_command(), "--launch-log", str(launches)],
            "ready_timeout": timeout,
        },
        **over,
    )
    return h, config, launches, hold


def launched(launches: Path) -> list[str]:
    return launches.read_text().split() if launches.exists() else []


def test_sigkill_mid_probe_resumes_without_repeating_and_leaves_no_server(tmp_path: Path) -> None:
    fourth = probe_order(24, culprit=17)[3]
    h, config, launches, hold = held_history(tmp_path, culprit=17, held=fourth)
    out = tmp_path / "out"
    proc = start_run(config, out)
    try:
        # Three probes are finished and the fourth server is held before it listens.
        assert wait_until(lambda: h.shas[fourth] in launched(launches), timeout=120)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
    finished = {e["outcome"]["commit"] for e in probes_in(out)}
    assert len(finished) == 3
    assert wait_until(lambda: live_processes(str(h.repo)) == [], timeout=15), "server left behind"

    hold.unlink()
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    assert "3 finished probe(s) resumed from the journal" in output, output
    assert result_of(out)["culprit"]["commit"] == h.shas[17]
    counts = Counter(launched(launches))
    for commit in finished:
        assert counts[commit] == 1, "a finished probe ran again"
    commits = [p["commit"] for p in result_of(out)["probes"]]
    assert len(commits) == len(set(commits))
    assert live_processes(str(h.repo)) == []


@contextmanager
def run_held_at_the_bad_end(
    tmp_path: Path,
) -> Iterator[tuple[History, Path, subprocess.Popen[bytes]]]:
    """A real run whose second probe (the bad end) is held before its server listens."""
    bad_end = probe_order(8, culprit=5)[1]
    h, config, launches, _hold = held_history(tmp_path, culprit=5, held=bad_end, n=8)
    proc = start_run(config, tmp_path / "out")
    try:
        assert wait_until(lambda: h.shas[bad_end] in launched(launches), timeout=120)
        yield h, config, proc
    finally:
        proc.kill()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_stop_the_server(tmp_path: Path, sig: signal.Signals) -> None:
    with run_held_at_the_bad_end(tmp_path) as (h, _config, proc):
        proc.send_signal(sig)
        output = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 130, output
    assert "the journal keeps every finished probe" in output
    assert "Traceback" not in output
    assert live_processes(str(h.repo)) == []


def test_the_demo_finds_its_planted_culprit_without_docker_and_leaves_no_folder_behind(
    tmp_path: Path,
) -> None:
    """One demo run, as README's first command runs it on a machine without a Docker engine
    (and its resume): the culprit found, the backend switch in vLLM's words, a wall time,
    nothing left in TMPDIR; `--docker` without an engine is one line."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "DOCKER_HOST": "unix:///nonexistent.sock"}
    docker = cli_run("demo", "--docker", env=env)
    assert docker.returncode == 1
    lines = docker.stderr.strip().splitlines()
    assert len(lines) == 1 and "demo --docker: no Docker engine answers" in lines[0]
    assert "without --docker" in lines[0]
    out = tmp_path / "demo-out"
    # as `demo --help`'s example: a relative --out (once a 40-line FileNotFoundError)
    done = cli_run("demo", "--out", "demo-out", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "found:" in done.stdout and "Bump FlashInfer" in done.stdout
    assert f"report: {out / 'report.md'}" in done.stdout, done.stdout
    # the confirmation's judgement is said once, though the search went on beside its look
    said = done.stdout + done.stderr
    assert said.count("confirm: confirmed:") == 1, said
    md = (out / "report.md").read_text()  # the culprit switches the attention backend
    assert "| **⚠ kernels.attention_backend** | FLASH_ATTN | FLASHINFER |" in md, md
    assert "| kernels.moe_backend | TRITON | TRITON |" in md, md
    assert "Changed besides the build's identity: `kernels.attention_backend`\n" in md, md
    assert list(tmp.iterdir()) == []
    assert (out / "demo" / "engine" / ".git").is_dir()
    # the terminal and report.md give one wall time, from the result
    said = re.search(r"demo: \d+ probes in (\S+)", done.stdout + done.stderr)
    assert said is not None, done.stdout + done.stderr
    assert f"· {said.group(1)} (" in md, said.group(0)
    subjects = subprocess.run(
        ["git", "-C", str(out / "demo" / "engine"), "log", "--format=%s"],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    titles = [re.sub(r" \(#\d+\)$", "", s) for s in subjects]
    assert len(set(titles)) == len(titles), Counter(titles).most_common(3)
    # report.md's Reproduce lines pasted in another folder, its lines for an issue in one
    # laid out as the issue says: each exits as it says
    reproduce = printed_commands(md)
    issue = as_in_an_issue(md, out / "golden.json", out / "demo" / "engine", tmp_path / "issue")
    assert [code for _, code in reproduce] == [code for _, code in issue] == [1, 0]
    for (line, code), where in [*((x, tmp_path / "elsewhere") for x in reproduce),
                                *((x, tmp_path / "issue") for x in issue)]:  # fmt: skip
        ran = run_as_printed(line, where, tmp_path / "bin")
        assert ran.returncode == code, f"{line}\n{ran.stdout}{ran.stderr}"
    again = cli_run("demo", "--out", str(out), env=env)  # the finished run is read back
    assert again.returncode == 0, again.stderr
    assert "probes resumed from the journal" in again.stderr or "finished probe" in again.stderr


def test_the_docker_demos_printed_lines_run_after_it_and_its_kept_images_go_as_it_says(
    client: docker.DockerClient, tmp_path: Path
) -> None:
    """`demo --docker` once removed every image, and its report's `expect bad: exit 1` line
    gave 125 (the image is not in the engine). It keeps the images of the answer's range,
    which those lines run (pasted in another folder, after the demo exited, each exits as
    it says), removes the others, and prints the `docker rmi` line that removes the kept."""
    done = cli_run("demo", "--docker", "--out", "demo-out", env={**os.environ}, cwd=tmp_path)
    out = tmp_path / "demo-out"
    line = printed_after(done.stderr, "remove them with: ")
    kept = shlex.split(line)[2:]
    try:
        assert done.returncode == 0, done.stderr
        assert shlex.split(line)[:2] == ["docker", "rmi"] and len(kept) == 2, line
        shas = subprocess.run(
            ["git", "-C", str(out / "demo" / "engine"), "rev-list", "v0.27.0"],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        present = {ref for i in client.images.list(name="llm-bisect-demo") for ref in i.tags}
        assert {f"llm-bisect-demo:{sha}" for sha in shas} & present == set(kept)
        commands = printed_commands((out / "report.md").read_text())
        assert [code for _, code in commands] == [1, 0]
        assert {w for c, _ in commands for w in shlex.split(c)} >= {k.split(":")[1] for k in kept}
        for command, code in commands:
            ran = run_as_printed(command, tmp_path / "elsewhere", tmp_path / "bin")
            assert ran.returncode == code, f"{command}\n{ran.stdout}{ran.stderr}"
        removed = run_as_printed(line, tmp_path / "elsewhere", tmp_path / "bin")
        assert removed.returncode == 0, removed.stderr
        present = {ref for i in client.images.list(name="llm-bisect-demo") for ref in i.tags}
        assert not set(kept) & present
    finally:
        for ref in kept:
            with suppress(docker.errors.ImageNotFound):
                client.images.remove(ref, force=True)


# --- git bisect run: errors stop git, they never blame a commit ---------------------------

SIMPLE_CHECKS = [{"type": "canary"}, {"type": "expect"}]


def git_bisect_run(h: History, config: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "-C", str(h.repo), *args], capture_output=True, text=True, check=False
        )

    git("bisect", "start", h.shas[-1], h.shas[0])
    try:
        return git(
            "bisect",
            "run",
            sys.executable,
            "-m",
            "llm_bisect.cli",
            "check",
            str(config),
            "--candidate",
            "HEAD",
            *extra,
        )
    finally:
        git("bisect", "reset")


def test_git_bisect_run_finds_the_culprit_and_stops_on_errors(tmp_path: Path) -> None:
    h = History(tmp_path, {5: "degenerate-content"}, 8)
    found = git_bisect_run(h, h.config(checks=SIMPLE_CHECKS))
    assert f"{h.shas[5]} is the first bad commit" in found.stdout, found.stdout + found.stderr
    # Default checks compare with a golden, and there is none: git must stop, not blame.
    stopped = git_bisect_run(h, h.config())
    assert "is the first bad commit" not in stopped.stdout, stopped.stdout
    assert stopped.returncode != 0
    assert "exit code 128" in stopped.stdout + stopped.stderr
    assert live_processes(str(h.repo)) == []


def test_check_exit_codes_for_errors_that_are_not_about_the_candidate(
    tmp_path: Path, history: Any
) -> None:
    h: History = history({2: "none"}, n=3, changes={2: {"hostile": {"reply": '{"choices": 1}'}}})
    config = str(h.config(checks=SIMPLE_CHECKS))
    code, output = invoke("check", config)  # --candidate missing: a usage error
    assert code == 128, output
    code, output = invoke("check", config, "--candidate", "no-such-ref")
    assert code == 128 and "--candidate: no such ref 'no-such-ref'" in output, output
    docker = write_config(
        tmp_path / "docker.yaml",
        {
            "candidates": {"repo": str(h.repo), "good": h.shas[0], "bad": h.shas[-1]},
            "server": {"launcher": "docker", "image": "sim:{commit}"},
            "checks": SIMPLE_CHECKS,
        },
    )
    code, output = invoke(
        "check",
        str(docker),
        "--candidate",
        h.shas[1],
        env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"},
    )
    assert code == 129 and "docker: cannot reach the engine" in output, output
    # A malformed reply is the candidate's: untestable, so skip (git skips the commit).
    code, output = invoke("check", config, "--candidate", h.shas[2])
    assert code == 125, output
    assert "checks could not run" in output and "malformed reply (choices" in output


# --- hostile servers: malformed, oversized, echoing secrets, hanging ----------------------


def test_a_malformed_reply_is_skip_and_the_run_goes_on(tmp_path: Path, history: Any) -> None:
    nested = '{"choices": ' + "[" * 50_000 + "]" * 50_000 + "}"
    h: History = history(
        {6: "degenerate-content"},
        n=8,
        changes={4: {"hostile": {"reply": nested}}, 5: {"hostile": {}}},
    )
    out = tmp_path / "out"
    code, output = invoke("run", str(h.config(checks=SIMPLE_CHECKS)), "--out", str(out))
    assert code == 0, output
    result = result_of(out)
    assert result["culprit"]["commit"] == h.shas[6]
    skipped = next(p for p in result["probes"] if p["commit"] == h.shas[4])
    assert skipped["verdict"] == "skip" and "malformed reply" in skipped["reason"]


def test_an_oversized_reply_fails_its_check_and_long_texts_are_cut(
    tmp_path: Path, history: Any
) -> None:
    h: History = history(
        {}, n=3, changes={2: {"hostile": {"pad": 3_000_000}}, 3: {"hostile": {"pad": 60_000}}}
    )
    config = h.config(checks=SIMPLE_CHECKS, server={"max_reply_mb": 1})
    code, output = invoke("check", str(config), "--candidate", h.shas[2])
    assert code == 1, output
    assert "canary: FAIL — reply too large" in output and "over the cap of 1048576" in output
    out = tmp_path / "out"
    code, output = invoke("check", str(config), "--candidate", h.shas[3], "--out", str(out))
    code, output = invoke("run", str(config), "--out", str(out))
    journal = (out / "journal.jsonl").read_text()
    assert "characters in all, sha256 " in journal
    assert (out / "journal.jsonl").stat().st_size < 400_000
    assert "x" * 60_000 not in (out / "result.json").read_text()


def test_secrets_reach_no_file_and_no_terminal_whatever_the_server_echoes(
    tmp_path: Path,
) -> None:
    secret, literal = "hf_EchoedBackSecret77", "literal-pass-1234"
    names = ["HF_TOKEN", "DB_PASSWORD", "GITHUB_TOKEN"]
    h = History(
        tmp_path,
        {6: "degenerate-content"},
        8,
        settings={"hostile": {"echo_env": names}, "print_env": names},
        changes={4: {"hostile": {"error_env": names}}, 5: {"hostile": {"echo_env": names}}},
    )
    config = h.config(server={"env": {"HF_TOKEN": "${MY_HF_TOKEN}", "DB_PASSWORD": literal}})
    out = tmp_path / "out"
    env = {**os.environ, "MY_HF_TOKEN": secret, "GITHUB_TOKEN": "ghp_CallerTokenValue9"}
    done = cli_run("run", str(config), "--out", str(out), env=env)
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    files = {p: p.read_text(errors="replace") for p in out.rglob("*") if p.is_file()}
    assert {"journal.jsonl", "result.json", "report.md", "golden.json"} <= {p.name for p in files}
    for value in (secret, literal, "ghp_CallerTokenValue9"):
        assert value not in said
        for path, text in files.items():
            assert value not in text, path
    # The echoes happened, and were masked where they landed.
    assert "HF_TOKEN=***" in files[out / "journal.jsonl"]
    assert "HTTP 500" in said
    masked = "HF_TOKEN=*** DB_PASSWORD=*** GITHUB_TOKEN=***"  # the 500 body, in a reason
    assert masked in files[out / "result.json"] and masked in files[out / "report.md"]


def test_ctrl_c_during_eval_on_a_hanging_server_is_prompt(tmp_path: Path) -> None:
    h = History(tmp_path, {}, 2, changes={2: {"hostile": {"hang": True}}})
    config = h.config(
        checks=[{"type": "eval", "limit": 8, "concurrency": 4}], server={"request_timeout": 600}
    )
    golden = tmp_path / "golden.json"
    assert invoke("golden", str(config), "--candidate", h.shas[0], "-o", str(golden))[0] == 0
    out = tmp_path / "out"
    args = ["check", str(config), "--candidate", h.shas[2], "--golden", str(golden)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "llm_bisect.cli", *args, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    log = out / "probes" / h.shas[2][:12] / "server.log"
    try:
        held = wait_until(lambda: log.exists() and "holding request" in log.read_text(), 120)
        assert held, "the eval never reached the server"
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=60)[0].decode()  # request_timeout is 600 s
    finally:
        proc.kill()
    assert proc.returncode == 130, output
    assert "Traceback" not in output
    assert live_processes(str(h.repo)) == []


def test_the_engine_cache_is_on_by_default_a_folder_per_node_and_slot_and_probes_say_a_hit(
    tmp_path: Path, history: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was off unless configured, so every probe compiled from nothing; now a default
    config keeps it under the user's cache, each slot in its own folder (no two servers
    write one at once), and each probe says whether its folder held entries before it
    started. `engine_cache: false` gives the servers none (this test used to assert that of
    a plain config, when the cache was off by default)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    h: History = history({1: "degenerate-content"}, n=2)
    out = tmp_path / "out"
    config = h.config(checks=SIMPLE_CHECKS, parallel=2)
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    node = tmp_path / "xdg" / "llm-bisect" / "engine-cache" / socket.gethostname()
    probes = result_of(out)["probes"]
    slot0, slot1 = str(node / "slot-0"), str(node / "slot-1")
    caches = [p["fingerprint"]["engine_cache"] for p in probes]
    # the good end first (the golden), then two at once, one a slot: a folder each; the
    # second build on slot 0 finds the first's entries and compiles its own beside them
    assert sorted((c["folder"], c["state"], c["held"], c["written"]) for c in caches) == [
        (slot0, "cold", 0, 1),
        (slot0, "warm", 1, 1),
        (slot1, "cold", 0, 1),
    ], caches
    for p in probes:  # each cache in its slot's folder
        where = p["fingerprint"]["engine_cache"]["folder"]
        command = p["fingerprint"]["command"]
        for name, sub in (
            ("VLLM_CACHE_ROOT", "vllm"),
            ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
            ("TRITON_CACHE_DIR", "triton"),
            ("FLASHINFER_WORKSPACE_BASE", "flashinfer"),
            ("DG_JIT_CACHE_DIR", "deep_gemm"),
        ):
            assert f"{name}={where}/{sub}" in command, command
        # the simulator logs vLLM's engine line: its start splits at it, up to ready
        phases = p["startup"]["phases"]
        assert [x["name"] for x in phases][-1] == "config"
        assert phases[0]["start"] == p["timings"]["launch"]
        assert phases[-1]["end"] == p["timings"]["ready"]
    report = (out / "report.md").read_text()
    assert "Server starts" in report
    assert "| cold (0 held, 1 written) |" in report and "Engine cache: what each" in report
    # the same build started again on its slot loads what its first start compiled
    (again,) = [p["commit"] for p in probes if p["fingerprint"]["engine_cache"]["state"] == "cold"
                and p["fingerprint"]["engine_cache"]["folder"] == slot0]  # fmt: skip
    golden = str(out / "golden.json")
    checked = CliRunner().invoke(cli, ["check", str(config), "--candidate", again,
                                       "--golden", golden, "--json"])  # fmt: skip
    assert checked.exit_code == 0, checked.output
    probe = json.loads(checked.stdout)
    assert probe["startup"]["compile_cache"] == "hit"  # what the engine's own log said
    cache = probe["fingerprint"]["engine_cache"]
    # (held: the run's other builds on slot 0 too: the confirmation's, the localisation's)
    assert cache["state"] == "hit" and cache["written"] == 0 and cache["held"] >= 2, cache
    # off: the servers get none of it
    off = h.config(checks=SIMPLE_CHECKS, probe={"engine_cache": False})
    checked = CliRunner().invoke(cli, ["check", str(off), "--candidate", again,
                                       "--golden", golden, "--json"])  # fmt: skip
    assert checked.exit_code == 0, checked.output
    fingerprint = json.loads(checked.stdout)["fingerprint"]
    assert "VLLM_CACHE_ROOT" not in fingerprint["command"] and "engine_cache" not in fingerprint


# --- one run per DIR; nothing left behind ------------------------------------------------


def test_a_second_run_on_the_same_dir_is_refused_naming_the_holder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with run_held_at_the_bad_end(tmp_path) as (h, config, first):
        code, output = invoke("run", str(config), "--out", str(out))
        assert code == 2, output
        assert output.strip() == (
            f"llm-bisect: error: {out}: in use by another llm-bisect run (pid {first.pid}); "
            "wait for it, or pick another --out"
        )
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    started = [
        e["commit"] for e in read_events(out / "journal.jsonl") if e["event"] == "probe-start"
    ]
    assert started == [h.shas[0], h.shas[-1]]  # the second run started nothing
    assert launched(tmp_path / "launches") == [h.shas[0], h.shas[-1]]


def test_check_leaves_no_folder_behind(tmp_path: Path, history: Any) -> None:
    h: History = history({}, n=2)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    config = str(h.config(checks=SIMPLE_CHECKS))
    done = cli_run("check", config, "--candidate", h.shas[1], env=env)
    assert done.returncode == 0, done.stderr
    assert list(tmp.iterdir()) == []  # the demo's: in the demo's test above


def test_a_server_child_that_escapes_with_setsid_is_ended(tmp_path: Path, history: Any) -> None:
    h: History = history({}, n=2, changes={2: {"hostile": {"escape": True}}})
    out = tmp_path / "out"
    code, output = invoke(
        "check", str(h.config(checks=SIMPLE_CHECKS)), "--candidate", h.shas[2], "--out", str(out)
    )
    assert code == 0, output
    log = (out / "probes" / h.shas[2][:12] / "server.log").read_text()
    assert "sim: escaped as" in log
    assert wait_until(lambda: live_processes(f"escaped-{h.shas[2]}") == [], timeout=15)


def test_report_and_resume_survive_a_damaged_last_line(tmp_path: Path, history: Any) -> None:
    h: History = history({3: "null-content"}, n=6)
    config = h.config(checks=SIMPLE_CHECKS)
    out = tmp_path / "out"
    assert invoke("run", str(config), "--out", str(out))[0] == 0
    with (out / "journal.jsonl").open("a") as f:
        f.write("this line was damaged\n")
    code, output = invoke("report", str(out))
    assert code == 0, output
    assert "left out its line" in output and "damaged" in output
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0 and f"found: {h.shas[3]}" in output, output
    assert "journal: cut off its line" in output
    lines = (out / "journal.jsonl").read_text().splitlines()
    lines.insert(1, '{"event": "probe", "outcome": {"commit": 7}}')
    (out / "journal.jsonl").write_text("\n".join(lines) + "\n")
    code, output = invoke("report", str(out))
    assert code == 2, output
    assert output.strip().splitlines() == [
        f"llm-bisect: error: {out / 'journal.jsonl'}:2: malformed 'probe' event "
        "(KeyError: 'verdict'); the journal cannot be resumed (move it away to start the run over)"
    ]


def test_json_answers_go_to_stdout_alone(tmp_path: Path, history: Any) -> None:
    h: History = history({3: "null-content"}, n=4)
    config = h.config(checks=[{"type": "canary"}, {"type": "expect"}])
    result = CliRunner().invoke(cli, ["candidates", str(config), "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["mode"] == "regression" and plan["good"]["commit"] == h.shas[0]
    assert [c["commit"] for c in plan["candidates"]] == h.shas
    assert all(c["artifact"]["available"] for c in plan["candidates"])
    result = CliRunner().invoke(cli, ["check", str(config), "--candidate", h.shas[3], "--json"])
    assert result.exit_code == 1, result.output
    probe = json.loads(result.stdout)
    assert probe["verdict"] == "bad" and probe["commit"] == h.shas[3]
    # the canary failed: the verdict is settled and expect is not run (probe.early_stop)
    assert [c["name"] for c in probe["checks"]] == ["canary"] and probe["not_run"] == ["expect"]


def test_schema_and_shell_completion(monkeypatch: pytest.MonkeyPatch) -> None:
    # typer takes the shell's name only with its detection off; else it looks for the
    # shell above the process (none above a background job: "Shell  not supported")
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    code, output = invoke("schema")
    assert code == 0
    schema = json.loads(output)
    assert {"candidates", "server", "checks", "build", "localize"} <= set(schema["properties"])
    code, output = invoke("schema", "--golden")
    assert code == 0 and "calibration" in json.loads(output)["properties"]
    code, output = invoke("--show-completion", "bash")  # named: no shell above a CI job
    assert code == 0 and "_llm_bisect_completion" in output, output


def test_result_and_gate_schemas_are_published_and_hold() -> None:
    shipped = Path(__file__).parent.parent / "schemas"
    for name in ("result", "gate"):
        code, output = invoke("schema", f"--{name}")
        assert code == 0
        printed = json.loads(output)
        assert printed == json.loads((shipped / f"{name}.schema.json").read_text()), (
            f"regenerate schemas/{name}.schema.json with `llm-bisect schema --{name}`"
        )
        assert "version" in printed["properties"]
    code, output = invoke("schema", "--result", "--gate")
    assert code == 2 and "give one" in output


def test_a_run_links_its_commits_to_the_remote(tmp_path: Path, history: Any) -> None:
    """The clone's origin names the web address: report.md links the culprit, its PR and the
    compare range; result.json keeps the refs as given and the node it ran on."""
    h: History = history({9: "degenerate-reasoning"}, n=16)
    subprocess.run(
        ["git", "-C", str(h.repo), "remote", "add", "origin", "git@github.com:acme/engine.git"],
        check=True,
    )
    subprocess.run(["git", "-C", str(h.repo), "tag", "v1-good", h.shas[0]], check=True)
    out = tmp_path / "out"
    config = h.config(good="v1-good")
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    result = result_of(out)
    assert result["version"] == 2
    assert result["context"]["good_ref"] == "v1-good" and result["context"]["config"] == str(config)
    assert result["context"]["repo_url"] == "https://github.com/acme/engine"
    assert "python" in result["context"]["environment"]
    report = (out / "report.md").read_text()
    summary = report.split("\n\n")[1]
    assert f"(https://github.com/acme/engine/commit/{h.shas[9]})" in summary
    assert "([#24009](https://github.com/acme/engine/pull/24009))" in summary
    assert f"good `v1-good` (`{h.shas[0][:12]}`)" in summary
    assert f"https://github.com/acme/engine/compare/{h.shas[8]}...{h.shas[9]}" in summary
    assert f"llm-bisect check {config} --candidate {h.shas[9]}" in report
    assert f"--commit {h.shas[9]}" in report  # the server command line of the first bad
    probes = result["probes"]
    assert all(p["started_at"] <= p["ended_at"] for p in probes)
    # `report DIR` rebuilds the same from the journal, context and times included.
    before = result_of(out)
    code, output = invoke("report", str(out))
    assert code == 0 and result_of(out) == before
    # An explicit candidates.url wins over the remote.
    config = h.config(good="v1-good", candidates={"url": "https://github.com/fork/engine/"})
    code, output = invoke("run", str(config), "--out", str(tmp_path / "fork"))
    assert code == 0, output
    assert result_of(tmp_path / "fork")["context"]["repo_url"] == "https://github.com/fork/engine"


def test_progress_counts_steps_left_and_an_eta() -> None:
    """On a terminal the live line shows step i of ~N, the candidates left and an ETA from
    the probes so far; elsewhere each phase is one plain line with the same."""
    from io import StringIO

    from rich.console import Console

    from llm_bisect.model import Candidate, ProbeOutcome, Verdict
    from llm_bisect.search import Mode, Plan
    from llm_bisect.terminal import Terminal, TerminalProgress

    now = [100.0]
    seq = tuple(Candidate(f"{i:040x}", subject=f"c{i}") for i in range(17))
    plan = Plan(Mode.REGRESSION, seq)
    err = StringIO()
    tty = StringIO()
    progress = TerminalProgress(
        Terminal(err=err), clock=lambda: now[0], console=Console(file=tty, force_terminal=True)
    )
    progress.planned(plan, 0)
    progress.narrowed(16, 6)
    progress.phase(seq[0], "starting", 0.0)
    now[0] += 30
    assert progress.status_lines() == [
        f"[1/~6] {seq[0].short} starting    30.0s · 16 candidate(s) left"
    ]
    progress.finished(seq[0], ProbeOutcome(seq[0].commit, Verdict.GOOD, "", (), {"total": 60.0}))
    progress.narrowed(16, 5)
    progress.phase(seq[16], "checking", 20.0)
    assert progress.status_lines()[-1].endswith("16 candidate(s) left, ETA 4m 40s")  # 4x60 + 40
    # a second slot: both probes in flight get a line, and the rest goes two at a time
    progress.phase(seq[8], "starting", 0.0)
    lines = progress.status_lines()
    assert [line.split()[:2] for line in lines] == [
        ["[2/~6]", seq[16].short],
        ["[3/~6]", seq[8].short],
    ]
    assert lines[-1].endswith("ETA 3m 00s")  # 60 left of the newest, then 3 probes 2 at a time
    progress.close()
    assert progress.live is None and "[1/~6]" in err.getvalue()
    plain = StringIO()
    lines = TerminalProgress(Terminal(err=plain), console=Console(file=StringIO()))
    lines.planned(plan, 0)
    lines.narrowed(16, 6)
    lines.phase(seq[0], "starting", 0.0)
    assert "[1/~6]" in plain.getvalue() and "16 candidate(s) left" in plain.getvalue()
    assert lines.live is None


def test_o_names_a_folder_for_golden_too_and_a_file_still_works(
    tmp_path: Path, history: Any
) -> None:
    """`-o DIR` is a folder for run, check and gate; given to golden or calibrate it wrote a
    file named DIR (or failed on a folder). A folder gets DIR/golden.json, said on stderr;
    `-o FILE` still names the file, as scripts use it."""
    h: History = history({}, n=2)
    config = str(h.config(checks=SIMPLE_CHECKS))
    folder = tmp_path / "results"
    folder.mkdir()
    code, output = invoke("golden", config, "--candidate", h.shas[0], "-o", str(folder))
    assert code == 0, output
    assert json.loads((folder / "golden.json").read_text())["commit"] == h.shas[0]
    assert f"-o {folder} is a folder: the golden goes to {folder / 'golden.json'}" in output
    named = tmp_path / "mine.json"
    code, output = invoke("golden", config, "--candidate", h.shas[0], "-o", str(named))
    assert code == 0 and json.loads(named.read_text())["commit"] == h.shas[0], output
    new = tmp_path / "new"  # a folder not made yet, named as one by its trailing /
    code, output = invoke("golden", config, "--candidate", h.shas[0], "-o", f"{new}/")
    assert code == 0 and json.loads((new / "golden.json").read_text())["commit"] == h.shas[0]


class _Tty(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("stream", "environ", "coloured"),
    [
        (_Tty, {}, True),
        (_Tty, {"NO_COLOR": "1"}, False),  # https://no-color.org
        (_Tty, {"TERM": "dumb"}, False),
        (io.StringIO, {}, False),  # a pipe, a CI log
        (io.StringIO, {"FORCE_COLOR": "1"}, True),
    ],
)
def test_verdicts_and_errors_are_coloured_on_a_terminal_only(
    stream: type[io.StringIO], environ: dict[str, str], coloured: bool
) -> None:
    from rich.console import Console

    from llm_bisect.model import Candidate, ProbeOutcome, Verdict
    from llm_bisect.terminal import Terminal, TerminalProgress

    err = stream()
    term = Terminal(err=err, environ=environ)
    progress = TerminalProgress(term, console=Console(file=io.StringIO()))
    bad = Candidate("b" * 40, subject="[Kernel] x")
    progress.finished(bad, ProbeOutcome(bad.commit, Verdict.BAD, "canary failed", (), {}))
    term.error("candidates.good: no such ref 'x'")
    text = err.getvalue()
    assert ("\x1b[" in text) is coloured, repr(text)
    assert re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines() == [
        f"[1] {bad.short} BAD          0.0s  canary failed",
        "llm-bisect: error: candidates.good: no such ref 'x'",
    ]


def test_repo_names_the_clone_when_the_config_does_not(tmp_path: Path, history: Any) -> None:
    """A shared config whose candidates.repo is not here (a CI runner's /etc copy): `--repo`
    names the checkout, from whatever folder; a --repo that is no clone is one line, 128."""
    h: History = history({}, n=3)
    config = h.config(candidates={"repo": "./not-a-clone"})
    code, output = invoke("candidates", str(config))
    assert code == 2 and output.strip().endswith("not-a-clone'"), output
    assert "llm-bisect: error: candidates.repo: not a git repository" in output
    code, output = invoke("candidates", str(config), "--repo", str(h.repo))
    assert code == 0 and f"bad:  {h.shas[-1]}" in output, output
    code, output = invoke("check", str(config), "--candidate", "HEAD", "--repo", str(tmp_path))
    assert code == 128, output
    assert output.strip() == f"llm-bisect: error: --repo: not a git repository '{tmp_path}'"


def test_config_paths_take_environment_variables(tmp_path: Path, history: Any) -> None:
    """`repo: ${WORKSPACE}/engine`, as a CI job names its checkout; a variable that is not
    set is one line naming the key, exit 128 from `gate`, and nothing starts."""
    h: History = history({}, n=3)
    config = h.config(candidates={"repo": "${LLM_BISECT_WS}/engine"})
    code, output = invoke("candidates", str(config), env={"LLM_BISECT_WS": str(h.root)})
    assert code == 0 and f"good: {h.shas[0]}" in output, output
    code, output = invoke(
        "gate", str(config), "--candidate", h.shas[1], "--out", str(tmp_path / "gate"),
        env={"LLM_BISECT_WS": None},
    )  # fmt: skip
    assert code == 128, output
    assert output.strip() == (
        "llm-bisect: error: candidates.repo: ${LLM_BISECT_WS} is not set in the environment"
    )
    assert not (tmp_path / "gate").exists()
    # --repo names the clone: the config's variable (another CI's) need not be set
    code, output = invoke(
        "candidates", str(config), "--repo", str(h.repo), env={"LLM_BISECT_WS": None}
    )
    assert code == 0 and f"good: {h.shas[0]}" in output, output


def test_a_good_end_that_is_broken_itself_stops_the_run_instead_of_calling_all_good(
    tmp_path: Path, history: Any
) -> None:
    # The good end already degenerates (an older regression): its golden would excuse every
    # build, and the run used to end "no-regression" (exit 4). It stops, one line, exit 1.
    h: History = history({0: "degenerate-content"}, n=8)
    out = tmp_path / "out"
    code, output = invoke("run", str(h.config()), "--out", str(out))
    assert code == 1, output
    lines = [
        line for line in output.splitlines()
        if "canary prompts" in line and "starting it again" not in line
    ]  # fmt: skip
    assert len(lines) == 1 and f"the good end {h.shas[0][:12]} answers" in lines[0]
    assert "Pick an older good end" in lines[0] and "Traceback" not in output
    assert not (out / "golden.json").exists()  # not kept: a run again records anew
    assert output.count("starting it again") == 1  # started twice: a glitch is given a chance
    assert live_processes(str(h.repo)) == []
    # under lies (flake: auto, the default), not on what one burst of starts could give:
    # 4 starts on one slot (posterior.BURST + 1), then the same one line
    code, output = invoke(
        "run", str(h.config(search={"flake": "auto"})), "--out", str(tmp_path / "auto")
    )
    assert code == 1 and output.count("starting it again") == 3, output
    assert output.splitlines()[-1].startswith("llm-bisect: error: the good end ")


def test_a_good_end_whose_first_start_glitched_is_started_again(
    tmp_path: Path, history: Any
) -> None:
    h: History = history({6: "null-content"}, n=8)
    launches = tmp_path / "launches"
    command = [*h.config_command(), "--launch-log", str(launches), "--lie-at", "1"]
    out = tmp_path / "out"
    code, output = invoke("run", str(h.config(server={"command": command})), "--out", str(out))
    assert code == 0, output
    assert "starting it again" in output and result_of(out)["culprit"]["commit"] == h.shas[6]
    assert launched(launches)[:2] == [h.shas[0], h.shas[0]]


def test_a_good_end_is_never_called_broken_on_one_burst_or_one_gpu(
    tmp_path: Path, history: Any
) -> None:
    """Its first 3 starts lie together (a node in a bad state): on one slot the run used to
    stop after two, exit 1, "Pick an older good end"; it starts the good end until a start
    outside any one burst serves it. On three slots, GPU 0 lies on half its starts (its
    first among them, as the simulator's seed 0 draws start 1): the good end starts again
    on GPU 1, not on GPU 0 again. Which later start lands on GPU 0 follows the slots' timing,
    so the run may end ambiguous (its budget spent while GPU 0's verdicts are the ones that
    disagree): it never ends in an error about the good end, nor with exit 0 on a wrong
    culprit."""
    h: History = history({6: "null-content"}, n=8)
    launches = tmp_path / "launches"
    command = [*h.config_command(), "--launch-log", str(launches), "--lie-at", "1,2,3"]
    out = tmp_path / "out"
    code, output = invoke(
        "run", str(h.config(server={"command": command}, search={"flake": "auto"})), "--out",
        str(out),
    )  # fmt: skip
    assert code == 0, output
    assert result_of(out)["culprit"]["commit"] == h.shas[6]
    assert launched(launches)[:4] == [h.shas[0]] * 4
    assert "3 starts in one place may lie together" in output
    two = tmp_path / "two"
    command = [*h.config_command(), "--launch-log", str(two / "launches"), "--lie-gpus", "0:0.5"]
    server = {"command": command, "slot_gpus": [["0"], ["1"], ["2"]]}
    config = h.config(server=server, parallel=3, search={"flake": "auto"})
    code, output = invoke("run", str(config), "--out", str(two / "out"))
    assert "error" not in output and code in (0, EXIT_AMBIGUOUS), output
    assert launched(two / "launches")[:2] == [h.shas[0]] * 2
    first = [p for p in result_of(two / "out")["probes"] if p["commit"] == h.shas[0]]
    assert first and first[0]["slot"] != 0, first
    if code == 0:
        assert result_of(two / "out")["culprit"]["commit"] == h.shas[6]


def test_a_build_bad_with_another_symptom_than_the_bad_end_is_said(
    tmp_path: Path, history: Any
) -> None:
    # commits 5..8 garble arithmetic (expect fails); from 9 on, reasoning degenerates
    # (canary fails) and the arithmetic is right again: two regressions, two symptoms
    h: History = history({5: "garbled-math", 9: "degenerate-reasoning"}, n=12)
    out = tmp_path / "out"
    checks = [{"type": "canary"}, {"type": "expect"}]
    code, output = invoke("run", str(h.config(checks=checks, localize=False)), "--out", str(out))
    assert code == 0, output
    result = result_of(out)
    other = [n for n in result["notes"] if "another symptom than the bad end" in n]
    bad_mid = [
        p["commit"] for p in result["probes"]
        if p["verdict"] == "bad" and h.shas.index(p["commit"]) in range(5, 9)
    ]  # fmt: skip
    assert bad_mid and len(other) == len(set(bad_mid)), (other, bad_mid)
    assert "it failed expect, the bad end canary" in other[0]
    assert "another symptom than the bad end" in (out / "report.md").read_text()


TWO_CHECKS = [{"type": "canary"}, {"type": "expect"}]


def test_symptom_same_bisects_the_bad_ends_regression_past_another_one(
    tmp_path: Path, history: Any
) -> None:
    """Commits 10..19 garble arithmetic (expect fails), 20 fixes it, 30 makes reasoning
    degenerate (canary fails): two regressions in the range, the bad end has the second."""
    h: History = history({10: "garbled-math", 20: "none", 30: "degenerate-reasoning"}, n=36)
    other = range(10, 20)
    # `any` (the default): a build of the first regression is bad, and the report says
    # it failed with another symptom than the bad end's
    out = tmp_path / "any"
    code, output = invoke(
        "run", str(h.config(checks=TWO_CHECKS, localize=False)), "--out", str(out)
    )
    assert code == 0, output
    result = result_of(out)
    assert h.shas.index(result["culprit"]["commit"]) in other and "symptom" not in result
    assert any("another symptom than the bad end" in n for n in result["notes"])
    # `same`: only the bad end's symptom is bad; the other regression's builds count good
    out = tmp_path / "same"
    config = h.config(checks=TWO_CHECKS, localize=False, search={"symptom": "same"})
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    result = result_of(out)
    assert result["culprit"]["commit"] == h.shas[30]
    counted = [p for p in result["probes"] if h.shas.index(p["commit"]) in other]
    assert counted and all(p["verdict"] == "good" for p in counted)
    assert counted[0]["reason"].startswith(
        "another symptom: failed expect; the bad end failed canary (counted good: "
        "search.symptom: same)"
    )
    failed = {c["name"] for c in counted[0]["checks"] if not c["passed"]}
    assert failed == {"expect"}  # its own failure stays visible
    said = {"rule": "same", "bad_end": ["canary"], "untold": []}
    assert result["symptom"] == {**said, "counted_good": [p["commit"] for p in counted]}
    notes = [n for n in result["notes"] if "another symptom than the bad end" in n]
    assert len(notes) == len(counted) and notes[0].endswith("counted good (search.symptom: same)")
    report = (out / "report.md").read_text()
    assert "`search.symptom: same`, only the bad end's symptom (it failed `canary`)" in report
    assert f"counted good, bad with another symptom only: `{counted[0]['commit'][:12]}`" in report
    # `report DIR` derives the same from the journal's records
    code, output = invoke("report", str(out))
    assert code == 0 and result_of(out) == result, output


def test_symptom_same_never_stops_a_suite_at_another_symptom(tmp_path: Path, history: Any) -> None:
    """The cheaper check (canary) fails in 10..19, the bad end's symptom is the dearer one
    (expect): under `same` a probe there runs expect too before it is judged; a probe with
    the bad end's symptom still stops at it (`probe.early_stop`)."""
    h: History = history({10: "degenerate-reasoning", 20: "none", 30: "garbled-math"}, n=36)
    checks = [*TWO_CHECKS, {"type": "logprobs"}]
    config = h.config(checks=checks, localize=False, search={"symptom": "same"})
    out = tmp_path / "out"
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    result = result_of(out)
    assert result["culprit"]["commit"] == h.shas[30]
    probes = {h.shas.index(p["commit"]): p for p in result["probes"]}
    other = [p for i, p in probes.items() if i in range(10, 20)]
    assert other, sorted(probes)
    for p in other:
        assert p["verdict"] == "good" and "not_run" not in p, p
        ran = [(c["name"], c["passed"]) for c in p["checks"]]
        assert ran == [("canary", False), ("expect", True), ("logprobs", False)]
    # the search's last probe ended it either way: it ran whole, the answer's evidence
    last = result["probes"][-1]["commit"]
    stopped = [p for i, p in probes.items() if 30 <= i < 36 and p["commit"] != last]
    assert stopped and all(p["not_run"] == ["logprobs"] for p in stopped)
    assert all(p["verdict"] == "bad" for p in stopped)
    assert "not_run" not in probes[36]  # the bad end runs whole: its symptom is read in full


def test_a_run_resumed_under_symptom_same_counts_its_verdicts_again(
    tmp_path: Path, history: Any
) -> None:
    """A run under `any` found the first regression; resumed with `search.symptom: same` it
    goes on to the bad end's. A probe that stopped at the other symptom before the bad end's
    check (early stop under `any`) cannot tell, and is probed again where the search needs it."""
    # every middle probe of the first run stops at the canary: none of them tells
    h: History = history({1: "degenerate-reasoning", 25: "none", 30: "garbled-math"}, n=36)
    out = tmp_path / "out"
    code, output = invoke(
        "run", str(h.config(checks=TWO_CHECKS, localize=False)), "--out", str(out)
    )
    assert code == 0, output
    first = result_of(out)
    assert first["culprit"]["commit"] == h.shas[1]
    stopped = [p["commit"] for p in first["probes"] if p.get("not_run") == ["expect"]]
    assert stopped
    config = h.config(checks=TWO_CHECKS, localize=False, search={"symptom": "same"})
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    assert "search.symptom: same from here on" in output
    result = result_of(out)
    assert result["culprit"]["commit"] == h.shas[30]
    assert result["symptom"]["untold"] == stopped
    untold = [p for p in result["probes"] if p["commit"] == stopped[0]]  # the middle, first
    assert [p["verdict"] for p in untold] == ["skip", "good"]
    assert "cannot tell under search.symptom: same" in untold[0]["reason"]
    assert (out / "probes" / f"{stopped[0][:12]}-2").is_dir()
    assert [
        e["symptom"] for e in read_events(out / "journal.jsonl") if e["event"] == "symptom"
    ] == ["same"]
    code, output = invoke("report", str(out))
    assert code == 0 and result_of(out) == result, output


def test_a_full_disk_is_one_line_and_leaves_nothing_half_written(
    tmp_path: Path, history: Any
) -> None:
    """/dev/full answers every write with ENOSPC: report.html's temporary file is put there.
    It once was a traceback, and report.html.tmp was left behind."""
    h: History = history({3: "garbled-math"}, n=4)
    out = tmp_path / "out"
    code, said = invoke("run", str(h.config()), "--out", str(out))
    assert code == 0, said
    before = (out / "report.html").read_bytes()
    (out / "report.html.tmp").symlink_to("/dev/full")
    code, said = invoke("report", str(out))
    assert code == 1, said
    (line,) = [x for x in said.splitlines() if x.startswith("llm-bisect: error")]
    assert "report.html': No space left on device; the journal keeps every" in line, said
    assert not (out / "report.html.tmp").exists() and not (out / "report.html.tmp").is_symlink()
    assert (out / "report.html").read_bytes() == before
    code, said = invoke("report", str(out))  # space again: it writes
    assert code == 0, said


def test_a_server_started_with_an_api_key_is_asked_with_it_and_the_key_is_written_nowhere(
    tmp_path: Path, history: Any
) -> None:
    """vLLM started with `--api-key` (or VLLM_API_KEY) answers every /v1 request without the
    key 401: the checks send it (`Authorization: Bearer`), so the run finds its culprit
    instead of calling every build untestable; the key reaches no file."""
    key = "sk-bisect-0123456789abcdef"
    h: History = history({3: "null-content"}, n=6)
    out = tmp_path / "out"
    config = h.config(server={"command": [*sim_command(h.repo), "--api-key", key]})
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    assert json.loads((out / "result.json").read_text())["culprit"]["commit"] == h.shas[3]
    # the variable vLLM reads it from, set in server.env: the same
    config = h.config(server={"env": {"VLLM_API_KEY": key}}, checks=SIMPLE_CHECKS)
    code, output = invoke(
        "check", str(config), "--candidate", h.shas[1], "--out", str(tmp_path / "c")
    )
    assert code == 0 and "canary: pass" in output, output
    assert key not in output
    for path in [*out.rglob("*"), *(tmp_path / "c").rglob("*")]:
        if path.is_file():
            assert key not in path.read_text(errors="replace"), path


def test_a_day_names_its_nightly_and_says_which_it_picked(tmp_path: Path, history: Any) -> None:
    """`--good 2026-08-09` (or, in a config, the day quoted or as a YAML date) is that day's
    nightly: the last commit of that day (UTC) on the bad end's first-parent history, said
    in one line; a ref or tag of that name wins. (Commits every 3 hours from 2026-08-09
    09:00 UTC: the last of that day is the fifth.)"""
    h: History = history({12: "degenerate-reasoning"}, n=16)
    code, output = invoke("candidates", str(h.config()), "--good", "2026-08-09")
    assert code == 0, output
    said = (
        f"candidates.good 2026-08-09: {h.shas[4][:12]} (the last commit of 2026-08-09 (UTC) "
        f"on {h.shas[-1]}'s first-parent history)"
    )
    assert said in output, output
    assert h.shas[4][:12] in output and h.shas[3][:12] not in output
    # a YAML date (PyYAML reads an unquoted 2026-08-10 as a datetime.date) is a day too
    config = h.config(good=None)
    text = config.read_text().replace(f"good: {h.shas[0]}", "good: 2026-08-10")
    config.write_text(text)
    code, output = invoke("candidates", str(config))
    assert code == 0 and f"candidates.good 2026-08-10: {h.shas[12][:12]}" in output, output
    # a tag of that name wins, and is no nightly to pick
    subprocess.run(["git", "-C", str(h.repo), "tag", "2026-08-10", h.shas[2]], check=True)
    code, output = invoke("candidates", str(config))
    assert code == 0 and "candidates.good 2026-08-10" not in output, output
    assert h.shas[3][:12] in output and h.shas[2][:12] in output
    # a day before any commit is one line naming it
    code, output = invoke("candidates", str(h.config()), "--good", "2026-08-01")
    assert code == 2 and "candidates.good: no such ref '2026-08-01'" in output, output


def _ledger_of(path: Path, nightlies: dict[str, str]) -> None:
    """A keep ledger holding a nightly of each commit, first seen on its day."""
    from llm_bisect.ledger import Entry, Ledger, save

    kept = {
        f"nightly-{commit[:9]}": Entry("sha256:" + "3" * 64, commit[:9],
                                       first_seen=f"{day}T03:00:00+00:00")
        for commit, day in nightlies.items()
    }  # fmt: skip
    save(path, Ledger("registry-1.docker.io/vllm/vllm-openai", kept))


def test_a_day_is_the_nightly_keep_recorded_that_day(tmp_path: Path, history: Any) -> None:
    """Where the Docker launcher reads `keep`'s ledger (`server.ledger`), a day is the
    nightly the ledger holds of it (a tag with the date, else the tag first seen that day),
    said with the ledger's file; the repository's history is not asked."""
    from llm_bisect.services.setup import setup

    h: History = history({12: "degenerate-reasoning"}, n=16)
    ledger = tmp_path / "ledger.json"
    _ledger_of(ledger, {h.shas[1]: "2026-08-08", h.shas[6]: "2026-08-09"})
    config = h.config()
    data = yaml.safe_load(config.read_text())
    server = {"launcher": "docker", "image": "vllm/vllm-openai:nightly-{commit}",
              "ledger": str(ledger)}  # fmt: skip
    write_config(config, {**data, "server": server})
    notes: list[str] = []
    s = setup(config, {}, report=notes.append)
    assert s.resolve("2026-08-09", "--good").commit == h.shas[6]
    assert s.resolve("2026-08-09", "--good").commit == h.shas[6]  # said once
    assert notes == [
        f"--good 2026-08-09: {h.shas[6][:12]} (the nightly nightly-{h.shas[6][:9]}, first "
        f"seen 2026-08-09: {ledger})"
    ]
    # a day the ledger has no nightly of: the bad end's history that day
    assert s.resolve("2026-08-10", "--good").commit == h.shas[12]
    assert "the last commit of 2026-08-10 (UTC)" in notes[-1]
    # a later end's day is newer than the bad end: on the clone's own branch (HEAD), here a
    # branch with one more commit that day
    who = {"GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "T",
           "GIT_COMMITTER_EMAIL": "t@x", "GIT_COMMITTER_DATE": "2026-08-10T23:00:00Z"}  # fmt: skip
    git = ["git", "-C", str(h.repo)]
    subprocess.run([*git, "checkout", "-q", "-b", "main2", h.shas[12]], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x", "--date",
                    "2026-08-10T23:00:00Z"], check=True, env={**os.environ, **who})  # fmt: skip
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert s.resolve("2026-08-10", "candidates.later").commit == head.strip()
    assert "on HEAD's first-parent history" in notes[-1], notes


def test_a_day_is_the_image_the_registry_tags_with_it_before_the_ledger(
    tmp_path: Path, history: Any, registries: Any
) -> None:
    """Where the Docker launcher's image template names a registry, a day is the image of a
    tag holding the date there (before the ledger), run as that end and said with its
    digest; where the registry has none of that day, the ledger's."""
    from llm_bisect.services.setup import setup

    upstream, _ = registries
    h: History = history({12: "degenerate-reasoning"}, n=16)
    repo = f"dated-{tmp_path.name[-20:].lower()}".rstrip("_-.")
    digest, _ = upstream.image(repo, {"fault": "none"}, labels={"vllm.commit": h.shas[5]},
                               tag="nightly-2026-08-09")  # fmt: skip
    upstream.image(repo, {"fault": "none"}, labels={"vllm.commit": h.shas[3]},
                   tag="nightly-2026-08-09-cu126")  # fmt: skip
    ledger = tmp_path / "ledger.json"
    _ledger_of(ledger, {h.shas[7]: "2026-08-09", h.shas[9]: "2026-08-10"})
    config = h.config()
    data = yaml.safe_load(config.read_text())
    image = f"{upstream.host}/{repo}:nightly-{{commit}}"
    write_config(config, {**data, "server": {"launcher": "docker", "image": image,
                                             "ledger": str(ledger)}})  # fmt: skip
    notes: list[str] = []
    s = setup(config, {}, report=notes.append)
    picked = s.resolve("2026-08-09", "candidates.good")
    tagged = f"{upstream.host}/{repo}:nightly-2026-08-09"
    assert (picked.commit, picked.artifact) == (h.shas[5], tagged)
    assert notes == [f"candidates.good 2026-08-09: {h.shas[5][:12]} (the image {tagged}, {digest})"]
    assert s.resolve("2026-08-10", "candidates.good").commit == h.shas[9]  # the ledger's
    assert "(the nightly nightly-" in notes[-1]
