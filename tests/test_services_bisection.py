"""`probe.fast`: the search runs in a cheaper setup, its answer is probed at full fidelity.

The simulator reads the server's flags (`fault_when`): here the full setup serves with
`--max-model-len 4096` and the fast one adds `--max-model-len 256` (vLLM takes a repeated
flag's last value), as a user would add `--enforce-eager` or a shorter context."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from helpers import History, live_processes, probe_order, sim_command, wait_until
from llm_bisect.cli import cli
from llm_bisect.journal import read_events

FULL = ["--max-model-len", "4096"]
FAST = ["--max-model-len", "256"]
CHECKS = [{"type": "canary"}, {"type": "expect"}]


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def fast_run(
    tmp_path: Path, faults: dict[int, str], n: int = 16, **kw: Any
) -> tuple[History, Path, Path]:
    h = History(tmp_path, faults, n, **kw)
    launches = tmp_path / "launches"
    command = [*sim_command(h.repo), "--launch-log", str(launches), *FULL]
    config = h.config(
        server={"command": command, "ready_timeout": 20},
        checks=CHECKS,
        probe={"fast": {"args": FAST, "env": {"SIM_FAST": "1"}}},
        localize=False,
    )
    return h, config, launches


def result(out: Path) -> dict[str, Any]:
    return json.loads((out / "result.json").read_text())


def setups_of(doc: dict[str, Any]) -> dict[str, list[str]]:
    """Per probe, the --max-model-len its server ran with (from its fingerprint)."""
    found: dict[str, list[str]] = {}
    for p in doc["probes"]:
        command = p["fingerprint"]["command"]
        found.setdefault(command.split("--max-model-len ")[-1].split()[0], []).append(p["commit"])
    return found


def test_the_search_runs_fast_and_the_full_setup_probes_its_answer(tmp_path: Path) -> None:
    h, config, launches = fast_run(tmp_path, {11: "degenerate-content"})
    out = tmp_path / "out"
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    full, quick = result(out), result(out / "fast")
    assert full["culprit"]["commit"] == h.shas[11] == quick["culprit"]["commit"]
    # the full setup probed the ends and the fast answer only: the last good, the first bad
    assert setups_of(full) == {"4096": [h.shas[0], h.shas[16], h.shas[10], h.shas[11]]}
    assert set(setups_of(quick)) == {"256"} and len(quick["probes"]) == len(probe_order(16, 11))
    fast = full["fast"]
    assert fast["reproduced"] and fast["agreed"] and fast["probes"] == len(quick["probes"])
    assert fast["args"] == FAST and fast["env"] == {"SIM_FAST": "1"}
    line = (f"fast setup (--max-model-len 256 SIM_FAST=1): {len(quick['probes'])} probes found "
            f"{h.shas[11][:12]}; the full setup agrees (4 probes in full)")  # fmt: skip
    assert fast["line"] == line and line in output
    assert f"## Fast probes\n\n{line}" in (out / "report.md").read_text()
    # each setup judged by a golden of its own, recorded from the good end in it
    assert json.loads((out / "golden.json").read_text())["commit"] == h.shas[0]
    assert json.loads((out / "fast" / "golden.json").read_text())["commit"] == h.shas[0]
    # run again: both journals answer, nothing starts
    before = launches.read_text()
    code, again = invoke("run", str(config), "--out", str(out))
    assert code == 0 and result(out)["fast"] == fast, again
    assert launches.read_text() == before
    assert live_processes(str(h.repo)) == []


def test_a_fast_setup_that_breaks_the_good_end_is_not_used(tmp_path: Path) -> None:
    """The fast flags garble every build alike: judged by the fast setup's own golden the bad
    end is no worse than the good one, so the ends do not reproduce in it; it says so and the
    search runs in the full setup."""
    rules = [{"flags": {"--max-model-len": "256"}, "fault": "garbled-math"}]
    h, config, _ = fast_run(tmp_path, {11: "degenerate-content"}, settings={"fault_when": rules})
    out = tmp_path / "out"
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    full = result(out)
    assert full["culprit"]["commit"] == h.shas[11]
    fast = full["fast"]
    assert not fast["reproduced"] and fast["agreed"] is None and fast["status"] == "no-regression"
    assert "the search ran in the full setup" in fast["line"], fast
    assert "searching in the full setup" in output
    assert setups_of(result(out / "fast")) == {"256": [h.shas[0], h.shas[16]]}  # the ends
    assert set(setups_of(full)) == {"4096"} and len(full["probes"]) == len(probe_order(16, 11))


def test_where_the_full_setup_disagrees_it_searches_on_in_full(tmp_path: Path) -> None:
    """A bug the fast setup cannot show (from commit 5, only at --max-model-len 4096: a
    compiled path --enforce-eager skips) before one it shows (commit 11): the fast search
    names 11; in full its last good (10) is bad, and the range before it is searched again."""
    full_only = [{"flags": {"--max-model-len": "4096"}, "fault": "garbled-math"}]
    h, config, _ = fast_run(
        tmp_path, {11: "degenerate-content"}, changes={5: {"fault_when": full_only}}
    )
    out = tmp_path / "out"
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    full, quick = result(out), result(out / "fast")
    assert quick["culprit"]["commit"] == h.shas[11]
    assert full["culprit"]["commit"] == h.shas[5]
    fast = full["fast"]
    assert fast["reproduced"] and fast["agreed"] is False
    assert f"{h.shas[10][:12]} is bad in full" in fast["line"], fast
    assert f"searched on in full: {h.shas[5][:12]}" in fast["line"], fast
    full_probes = [p["commit"] for p in full["probes"]]
    assert full_probes[:3] == [h.shas[0], h.shas[16], h.shas[10]]  # the fast answer first
    assert h.shas[4] in full_probes and h.shas[5] in full_probes


def test_a_fast_run_killed_in_its_full_phase_resumes_without_repeating_a_probe(
    tmp_path: Path,
) -> None:
    n, culprit = 16, 11
    hold = tmp_path / "hold"
    hold.write_text("")
    # the full setup's server of the last good is held before it listens (the fast one, whose
    # environment sets SIM_FAST, is not)
    held = {"hold_file": str(hold), "hold_unless_env": "SIM_FAST"}
    h, config, launches = fast_run(
        tmp_path, {culprit: "degenerate-content"}, n, changes={10: held, 11: {"hold_file": ""}}
    )
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "llm_bisect.cli", "run", str(config), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        assert wait_until(lambda: launches.exists() and _held(launches, h.shas[10]), timeout=120)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
    fast_done = [e["outcome"]["commit"] for e in read_events(out / "fast" / "journal.jsonl")
                 if e["event"] == "probe"]  # fmt: skip
    full_done = [e["outcome"]["commit"] for e in read_events(out / "journal.jsonl")
                 if e["event"] == "probe"]  # fmt: skip
    assert len(fast_done) == len(probe_order(n, culprit)) and full_done == [h.shas[0], h.shas[16]]
    assert wait_until(lambda: live_processes(str(h.repo)) == [], timeout=15), "server left behind"
    hold.unlink()
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    assert result(out)["culprit"]["commit"] == h.shas[culprit] and result(out)["fast"]["agreed"]
    counts = Counter(launches.read_text().split())
    assert counts[h.shas[10]] == 3  # fast once, full killed, full again
    assert all(counts[c] == 2 for c in (h.shas[0], h.shas[16])), counts  # fast + full, once each
    assert live_processes(str(h.repo)) == []


def _held(launches: Path, commit: str) -> bool:
    """The full setup's server of `commit` started (its second launch: the fast one first)."""
    return launches.read_text().split().count(commit) >= 2


def test_the_report_says_which_releases_hold_the_culprit_picks_included(
    history: Any, tmp_path: Path
) -> None:
    """The release engineer's question after the answer: the culprit, found on main, also
    ships in v0.27.0, whose release branch cherry-picked it (another commit, the same
    change); releases/v0.26 never had it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(h.repo), *args], capture_output=True,
                              text=True, check=True)  # fmt: skip
        return done.stdout.strip()

    h: History = history({5: "degenerate-reasoning"}, n=8)
    git("branch", "releases/v0.26", h.shas[2])
    git("checkout", "-q", "-b", "releases/v0.27", h.shas[4])
    (h.repo / "RELEASE").write_text("v0.27\n")
    git("add", "RELEASE")
    git("commit", "-qm", "[Release] v0.27 notes")
    git("cherry-pick", h.shas[5])
    picked = git("rev-parse", "HEAD")
    git("tag", "v0.27.0")
    git("checkout", "-q", h.shas[-1])
    out = tmp_path / "out"
    code, output = invoke("run", str(h.config(confirm=False, localize=False)), "--out", str(out))
    assert code == 0, output
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == h.shas[5]
    reach = result["reach"]
    assert reach["picks"] == [{"commit": picked, "tags": ["v0.27.0"],
                               "branches": ["releases/v0.27"]}]  # fmt: skip
    assert reach["missing"] == ["releases/v0.26"] and reach["tags"] == []
    line = f"- where it is: in v0.27.0 (picked as {picked[:12]}); "
    report = (out / "report.md").read_text()
    assert line in report and "not on releases/v0.26" in report, report
    # `report DIR` keeps it
    code, output = invoke("report", str(out))
    assert code == 0, output
    assert json.loads((out / "result.json").read_text())["reach"] == reach


def test_a_resume_with_another_server_environment_is_refused_naming_the_key(
    tmp_path: Path, history: Any
) -> None:
    """A run begun with MODE=a, resumed with MODE=b (in server.env, or inherited from the
    caller by the process launcher), would name a culprit of neither setup: refused, and the
    message says which variable differs."""
    h: History = history({3: "null-content"}, n=6)
    out = tmp_path / "out"
    begun = h.config(server={"env": {"MODE": "a"}}, checks=[{"type": "canary"}])
    code, output = invoke_env({"VLLM_SIM_KNOB": "1"}, "run", str(begun), "--out", str(out))
    assert code == 0, output
    other = h.config(server={"env": {"MODE": "b"}}, checks=[{"type": "canary"}])
    code, output = invoke_env({"VLLM_SIM_KNOB": "1"}, "run", str(other), "--out", str(out))
    assert code == 2 and "another config" in output and "server.env.MODE" in output, output
    code, output = invoke_env({"VLLM_SIM_KNOB": "2"}, "run", str(begun), "--out", str(out))
    assert code == 2 and "server.env.VLLM_SIM_KNOB" in output, output
    assert "server.env.MODE" not in output
    code, output = invoke_env({"VLLM_SIM_KNOB": "1"}, "run", str(begun), "--out", str(out))
    assert code == 0 and "resumed" in output, output


def test_a_resume_after_a_longer_ready_timeout_resumes(tmp_path: Path, history: Any) -> None:
    """How long the server may take to start never changes a verdict: the run resumes with
    its finished probes (none probed again)."""
    h: History = history({3: "null-content"}, n=6)
    launches = tmp_path / "launches"
    command = [*h.config_command(), "--launch-log", str(launches)]
    out = tmp_path / "out"
    begun = h.config(server={"command": command, "ready_timeout": 30}, checks=[{"type": "canary"}])
    assert invoke("run", str(begun), "--out", str(out))[0] == 0
    first = launches.read_text()
    later = h.config(server={"command": command, "ready_timeout": 60}, checks=[{"type": "canary"}])
    code, output = invoke("run", str(later), "--out", str(out))
    assert code == 0 and f"found: {h.shas[3]}" in output, output
    assert launches.read_text() == first


def invoke_env(env: dict[str, str], *args: str) -> tuple[int, str]:
    """The CLI run with these variables in the caller's environment."""
    result = CliRunner().invoke(cli, list(args), env=env)
    return result.exit_code, result.output
