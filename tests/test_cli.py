"""End to end: the real CLI, real git histories, the simulated server, real signals."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from helpers import History, live_processes, wait_until
from llm_bisect.cli import cli
from llm_bisect.journal import read_events
from test_sources_git import branched


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
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
    code, _output = invoke("run", str(h.config(server={"ready_timeout": 1.5})), "--out", str(out))
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


def test_no_regression_and_good_end_already_bad(tmp_path: Path, history: Any) -> None:
    h: History = history({}, n=6)
    code, output = invoke("run", str(h.config()), "--out", str(tmp_path / "a"))
    assert code == 4, output
    assert result_of(tmp_path / "a")["status"] == "no-regression"
    h2 = History(tmp_path / "b", {0: "garbled-math"}, 6)
    code, output = invoke("run", str(h2.config()), "--out", str(tmp_path / "b" / "out"))
    assert code == 1, output
    result = result_of(tmp_path / "b" / "out")
    assert result["status"] == "error"
    assert "good end is already bad" in result["message"]
    assert len(result["probes"]) == 1


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


def test_check_exit_codes_work_for_git_bisect_run(tmp_path: Path, history: Any) -> None:
    h: History = history({2: "degenerate-content", 3: "crash-on-start", 4: "crash-on-request"}, n=4)
    config = str(h.config())
    golden = str(tmp_path / "golden.json")
    code, output = invoke("check", config, "--candidate", h.shas[0], "--golden", golden)
    assert code == 2 and "record one with `llm-bisect golden`" in output
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


def test_repeats_that_disagree_are_unsure(tmp_path: Path, history: Any) -> None:
    h: History = history({1: "bad-warmup"}, n=1)
    config = str(h.config(probe={"repeats": 2}, checks=[{"type": "canary"}, {"type": "expect"}]))
    code, output = invoke("check", config, "--candidate", h.shas[1])
    assert code == 125, output
    assert "unsure" in output and "1 of 2 bad" in output


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


def start_run(config: Path, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "llm_bisect.cli", "run", str(config), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def probes_in(out: Path) -> list[dict[str, Any]]:
    return [e for e in read_events(out / "journal.jsonl") if e["event"] == "probe"]


def slow_history(tmp_path: Path, culprit: int, n: int = 24) -> tuple[History, Path, Path]:
    h = History(tmp_path, {culprit: "degenerate-reasoning"}, n, settings={"startup_delay": 0.6})
    launches = tmp_path / "launches"
    config = h.config(server={"command": [*h.config_command(), "--launch-log", str(launches)]})
    return h, config, launches


def test_sigkill_mid_probe_resumes_without_repeating_and_leaves_no_server(tmp_path: Path) -> None:
    h, config, launches = slow_history(tmp_path, culprit=17)
    out = tmp_path / "out"
    proc = start_run(config, out)
    try:
        # Kill once three probes are finished and the fourth server is starting.
        assert wait_until(
            lambda: (
                len(probes_in(out)) >= 3
                and launches.exists()
                and len(launches.read_text().split()) >= 4
            ),
            timeout=60,
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
    finished = {e["outcome"]["commit"] for e in probes_in(out)}
    assert len(finished) >= 3
    assert wait_until(lambda: live_processes(str(h.repo)) == [], timeout=15), "server left behind"

    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    assert result_of(out)["culprit"]["commit"] == h.shas[17]
    counts = Counter(launches.read_text().split())
    for commit in finished:
        assert counts[commit] == 1, "a finished probe ran again"
    commits = [p["commit"] for p in result_of(out)["probes"]]
    assert len(commits) == len(set(commits))
    assert live_processes(str(h.repo)) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_stop_the_server(tmp_path: Path, sig: signal.Signals) -> None:
    h, config, launches = slow_history(tmp_path, culprit=5, n=8)
    out = tmp_path / "out"
    proc = start_run(config, out)
    try:
        assert wait_until(
            lambda: launches.exists() and len(launches.read_text().split()) >= 2, timeout=60
        )
        proc.send_signal(sig)
        output = proc.communicate(timeout=30)[0].decode()
    finally:
        proc.kill()
    assert proc.returncode == 130, output
    assert "the journal keeps every finished probe" in output
    assert "Traceback" not in output
    assert live_processes(str(h.repo)) == []


def test_the_demo_finds_its_planted_culprit(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "llm_bisect.cli", "demo"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "found:" in done.stdout and "Bump FlashInfer" in done.stdout
    report = Path(done.stdout.split("report: ")[1].strip())
    assert report.exists()
