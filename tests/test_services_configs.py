"""`llm-bisect configs`: the smallest flag/variable difference between a good and a bad
server setup at one build, on the simulator whose fault depends on flags and variables
(`fault_when`), as the GLM case's did on the MoE backend."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from helpers import (
    History,
    cli_on_path,
    first_screen,
    github_render,
    live_processes,
    printed_commands,
    run_as_printed,
    served_as_printed,
    shell_words,
    sim_command,
    wait_until,
    write_config,
)
from llm_bisect.checks.metrics import degeneration
from llm_bisect.cli import cli
from llm_bisect.journal import read_events

RULES = [  # the fault needs both: cutlass with DeepGEMM on
    {"flags": {"--moe-backend": "cutlass"}, "env": {"VLLM_USE_DEEP_GEMM": "1"},
     "fault": "garbled-math"},
]  # fmt: skip
FLAGS_GOOD = ["--moe-backend", "marlin", "--max-num-seqs", "8"]
FLAGS_BAD = ["--moe-backend", "cutlass", "--max-num-seqs", "16", "--enable-expert-parallel"]
ENV_GOOD = {"NCCL_CUMEM_ENABLE": "1", "VLLM_USE_DEEP_GEMM": "0"}
ENV_BAD = {"NCCL_CUMEM_ENABLE": "0", "VLLM_USE_DEEP_GEMM": "1", "HF_TOKEN": "hf_s3cretvalue"}


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def setups(
    tmp_path: Path,
    rules: list[dict[str, Any]] = RULES,
    *,
    sim: tuple[str, ...] = (),
    flake: float | str = 0,
    **bad_over: Any,
) -> dict[str, Any]:
    """GOOD and BAD over the simulator; `sim`: its own flags (starts that lie); `flake`: the
    config's search.flake (0, as History's configs: today's ddmin, trial for trial)."""
    h = History(tmp_path, {}, 2, settings={"fault_when": rules})
    launches = tmp_path / "launches"
    command = [*sim_command(h.repo), "--launch-log", str(launches), *sim]
    config = h.config(checks=[{"type": "canary"}, {"type": "expect"}], search={"flake": flake},
                      localize={"enabled": False} if flake != 0 else {})  # fmt: skip
    good = write_config(tmp_path / "good.yaml", {"server": {
        "command": [*command, *FLAGS_GOOD], "env": ENV_GOOD, "ready_timeout": 20}})  # fmt: skip
    bad = write_config(tmp_path / "bad.yaml", {"server": {
        "command": [*command, *FLAGS_BAD], "env": ENV_BAD, "ready_timeout": 20,
        **bad_over}})  # fmt: skip
    return {"h": h, "config": config, "good": good, "bad": bad, "launches": launches}


def args(s: dict[str, Any], out: Path) -> list[str]:
    return ["configs", str(s["config"]), "--build", s["h"].shas[-1], "--good-server",
            str(s["good"]), "--bad-server", str(s["bad"]), "--out", str(out)]  # fmt: skip


def test_the_two_differences_that_together_break_it_are_found(tmp_path: Path) -> None:
    s = setups(tmp_path)
    out = tmp_path / "out"
    code, output = invoke(*args(s, out))
    assert code == 0, output
    assert "found: turns GOOD bad: --moe-backend cutlass, VLLM_USE_DEEP_GEMM=1" in output
    result = json.loads((out / "result.json").read_text())
    assert [d["label"] for d in result["difference"]] == [
        "--moe-backend cutlass", "VLLM_USE_DEEP_GEMM=1",
    ]  # fmt: skip
    assert [d["label"] for d in result["differences"]] == [
        "--moe-backend cutlass", "--max-num-seqs 16", "--enable-expert-parallel",
        "NCCL_CUMEM_ENABLE=0", "VLLM_USE_DEEP_GEMM=1", "HF_TOKEN=***",
    ]  # fmt: skip
    trials = result["trials"]
    assert trials[0] == {"applied": [], "verdict": "good", "counted": "good",
                         "reason": "2 check(s) passed"}  # fmt: skip
    assert trials[1]["verdict"] == "bad" and len(trials[1]["applied"]) == 6  # BAD reproduces
    assert len(trials) == 17  # ddmin on 6 differences whose 2 culprits sit in different halves
    assert result["retests"] == [] and result["only"] is None  # flake 0: today's ddmin
    report = (out / "report.md").read_text()
    assert "`--moe-backend cutlass`" in report and "hf_s3cretvalue" not in report
    located = result["localization"]  # GOOD against the smallest bad setup, at the build
    assert located["good"] == located["bad"] == s["h"].shas[-1] and "error" not in located
    # at one build, only the smallest bad setup's differences make it diverge (on real
    # vLLM: tests/test_vllm.py's configs test left this here, two vLLM starts saved)
    assert located["module"] == "model.layers.0.mlp" and located["before_max"] == 0.0, located
    assert located["line"] in report
    for path in out.rglob("*"):
        if path.is_file():
            assert b"hf_s3cretvalue" not in path.read_bytes(), path
    # a folder holds one kind of run: `run` there once took configs' golden (recorded at
    # another build, with another server), said "the good end is already bad" and
    # overwrote configs' result.json and report.md
    written = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    gate = ["gate", str(s["config"]), "--candidate", "HEAD"]
    for command, usage in ((["run", str(s["config"])], 2), (gate, 128)):
        code, output = invoke(*command, "--out", str(out), "--repo", str(s["h"].repo))
        assert code == usage, output
        (line,) = output.strip().splitlines()
        assert "holds a `configs` run, and a folder holds one kind of run" in line, line
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == written
    code, output = invoke(*args(s, out))  # configs itself reads its run back
    assert code == 0 and "found: turns GOOD bad" in output, output
    assert live_processes(str(s["h"].repo)) == []


def test_a_bad_setup_that_is_not_bad_and_setups_that_differ_elsewhere(tmp_path: Path) -> None:
    s = setups(tmp_path, rules=[])
    code, output = invoke(*args(s, tmp_path / "out"))
    assert code == 4, output
    assert "not-bad: BAD tests good at this build" in output
    s = setups(tmp_path / "other", ready_timeout=30)
    code, output = invoke(*args(s, tmp_path / "out2"))
    assert code == 2, output  # a config error, as `run` says it
    assert output.strip().splitlines()[-1] == (
        "llm-bisect: error: --bad-server: server.ready_timeout differs from GOOD's: only the flags "
        "(server.command) and server.env may differ"
    )
    assert not (tmp_path / "out2").exists() and not s["launches"].exists()  # nothing started
    (tmp_path / "empty.yaml").write_text("checks: []\n")
    code, output = invoke(*[a if a != str(s["bad"]) else str(tmp_path / "empty.yaml")
                            for a in args(s, tmp_path / "out3")])  # fmt: skip
    assert code == 2 and "no server: section" in output and "Traceback" not in output


def test_a_kill_mid_trial_resumes_without_repeating_a_trial(tmp_path: Path) -> None:
    s = setups(tmp_path)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "llm_bisect.cli", *args(s, out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        assert wait_until(lambda: len(launched(s["launches"])) >= 3, timeout=120)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
    before = [e for e in read_events(out / "configs.jsonl") if e["event"] == "probe"]
    assert wait_until(lambda: live_processes(str(s["h"].repo)) == [], timeout=15)
    code, output = invoke(*args(s, out))
    assert code == 0, output
    after = [e for e in read_events(out / "configs.jsonl") if e["event"] == "probe"]
    assert after[: len(before)] == before
    subsets = [tuple(e["subset"]) for e in after]
    assert len(subsets) == len(set(subsets)), "a trial ran twice"
    # at most the one cut short, again; then localisation's two servers (GOOD, the smallest)
    assert len(launched(s["launches"])) <= len(after) + 1 + 2


def launched(launches: Path) -> list[str]:
    return launches.read_text().split() if launches.exists() else []


@pytest.mark.parametrize("missing", ["good", "bad"])
def test_a_missing_setup_file_is_one_line(tmp_path: Path, missing: str) -> None:
    s = setups(tmp_path)
    s[missing] = tmp_path / "nope.yaml"
    code, output = invoke(*args(s, tmp_path / "out"))
    assert code == 2 and "nope.yaml: cannot read" in output and "Traceback" not in output


def test_a_flag_named_like_a_secret_never_shows_its_value(tmp_path: Path) -> None:
    h = History(tmp_path, {}, 2, settings={"fault_when": []})
    command = sim_command(h.repo)
    config = h.config(checks=[{"type": "canary"}])
    good = write_config(tmp_path / "good.yaml", {"server": {
        "command": [*command, "--api-key", "sk-goodS3cret99"], "ready_timeout": 20}})  # fmt: skip
    bad = write_config(tmp_path / "bad.yaml", {"server": {
        "command": [*command, "--api-key=sk-badS3cret77"], "ready_timeout": 20}})  # fmt: skip
    out = tmp_path / "out"
    code, output = invoke("configs", str(config), "--build", h.shas[-1], "--good-server",
                          str(good), "--bad-server", str(bad), "--out", str(out))  # fmt: skip
    assert code == 4, output  # the key makes no fault: BAD is not bad
    assert "--api-key=***" in output
    for text in [output, *(p.read_text() for p in out.rglob("*") if p.is_file() and
                           p.suffix in (".json", ".jsonl", ".md", ".log", ".txt"))]:  # fmt: skip
        assert "S3cret" not in text


def test_one_start_that_lies_does_not_move_the_answer_and_is_named(tmp_path: Path) -> None:
    """Trial 7 (VLLM_USE_DEEP_GEMM=1 alone, good) starts a server that lies: it serves BAD's
    garbled math. Trusting every trial, ddmin named `VLLM_USE_DEEP_GEMM=1` alone (exit 0);
    weighed (`flake: auto`), the lie is seen on the re-test and the answer holds. GOOD's
    first start lies too, as its golden is recorded: a golden of garbled math would judge
    nothing (old: "BAD tests good", exit 4), so it is refused and GOOD recorded again."""
    sim = ("--lie-at", "1,8", "--lie-fault", "garbled-math")  # start 8: trial 7
    s = setups(tmp_path, sim=sim, flake="auto")
    out = tmp_path / "out"
    code, output = invoke(*args(s, out))
    assert code == 0, output
    assert "GOOD's golden: it matched none of its 1 expect case(s); a start that lied?" in output
    assert (out / "trials" / "1-golden-refused" / "server.log").exists()
    assert (
        "found: turns GOOD bad: --moe-backend cutlass, VLLM_USE_DEEP_GEMM=1; only these" in output
    )
    result = json.loads((out / "result.json").read_text())
    assert [d["label"] for d in result["difference"]] == ["--moe-backend cutlass",
                                                          "VLLM_USE_DEEP_GEMM=1"]  # fmt: skip
    assert result["trials"][6] == {
        "applied": ["VLLM_USE_DEEP_GEMM=1"], "verdict": "bad", "counted": "bad",
        "reason": result["trials"][6]["reason"],
    }  # fmt: skip
    assert result["notes"][0].startswith("trial 7 (VLLM_USE_DEEP_GEMM=1) read bad where ")
    assert result["notes"][0].endswith("read good: a start that lied")
    assert result["only"] is True and result["confidence"] >= 0.99
    assert result["lie_rate"] >= 0.05  # auto: the prior, or more when the repeats show more
    retests = {r["setup"]: r for r in result["retests"]}
    assert set(retests) == {"GOOD with only the set applied", "BAD with only the set reverted",
                            "GOOD with the set but --moe-backend cutlass",
                            "GOOD with the set but VLLM_USE_DEEP_GEMM=1"}  # fmt: skip
    reverted = retests["BAD with only the set reverted"]
    assert reverted["expect"] is None and set(reverted["verdicts"]) == {"good"}
    assert reverted["applied"] == ["--max-num-seqs 16", "--enable-expert-parallel",
                                   "NCCL_CUMEM_ENABLE=0", "HF_TOKEN=***"]  # fmt: skip
    alone = retests["GOOD with the set but --moe-backend cutlass"]  # DeepGEMM alone: trial 7
    assert alone["trials"][0] == 7 and alone["path_trials"] == 1  # the lie ddmin's path took
    assert alone["verdicts"].count("good") >= alone["verdicts"].count("bad") + 2
    report = (out / "report.md").read_text()
    assert "## The answer re-tested both ways" in report and "## Trials that disagreed" in report
    assert "hf_s3cretvalue" not in report
    # every trial is one journal event, one server start: repeats are just more of them
    probes = [e for e in read_events(out / "configs.jsonl") if e["event"] == "probe"]
    assert len(probes) == len(result["trials"]) == len(launched(s["launches"])) - 1
    assert len({tuple(e["subset"]) for e in probes}) < len(probes)
    # killed before its last 3 trials (the journal cut there): it resumes with those 3 alone
    lines = (out / "configs.jsonl").read_text().splitlines(keepends=True)
    last = [n for n, line in enumerate(lines) if '"event": "probe"' in line][-3]
    (out / "configs.jsonl").write_text("".join(lines[:last]))
    starts = len(launched(s["launches"]))
    code, output = invoke(*args(s, out))
    assert code == 0 and "only these" in output, output
    again = [e for e in read_events(out / "configs.jsonl") if e["event"] == "probe"]
    assert [e["subset"] for e in again] == [e["subset"] for e in probes]
    assert len(launched(s["launches"])) == starts + 3


def test_a_trial_bad_with_another_symptom_than_bads_is_not_bads_evidence(tmp_path: Path) -> None:
    """--enable-expert-parallel without the cause breaks the reasoning channel (canary) where
    BAD garbles arithmetic (expect): another failure. Counted bad, ddmin named
    `--enable-expert-parallel` alone (exit 0); it is unresolved, and the trial says why."""
    rules = [*RULES, {"flags": {"--enable-expert-parallel": ""}, "fault": "degenerate-reasoning"}]
    s = setups(tmp_path, rules)
    out = tmp_path / "out"
    code, output = invoke(*args(s, out))
    result = json.loads((out / "result.json").read_text())
    assert "--enable-expert-parallel" not in [d["label"] for d in result["difference"]]
    assert code == 3 and result["status"] == "ambiguous", output  # a smaller set may exist
    assert result["trials"][1]["verdict"] == "bad"  # BAD: expect fails
    other = [t for t in result["trials"] if t["verdict"] == "bad" and t["counted"] != "bad"]
    assert other and all("--enable-expert-parallel" in t["applied"] for t in other)
    for t in other:
        assert t["counted"] == "unresolved"
        assert t["reason"].startswith("another symptom than BAD's: it failed canary, BAD expect")
        assert t["reason"].count("another symptom") == 1, t["reason"]  # said once, not nested
    assert {d["label"] for d in result["difference"]} >= {"--moe-backend cutlass",
                                                          "VLLM_USE_DEEP_GEMM=1"}  # fmt: skip
    report = (out / "report.md").read_text()
    assert "not counted as bad" in report
    # killed before its last 2 trials: resumed, it says every trial as the whole run did
    lines = (out / "configs.jsonl").read_text().splitlines(keepends=True)
    last = [n for n, line in enumerate(lines) if '"event": "probe"' in line][-2]
    (out / "configs.jsonl").write_text("".join(lines[:last]))
    code, output = invoke(*args(s, out))
    assert code == 3, output
    assert json.loads((out / "result.json").read_text())["trials"] == result["trials"]
    assert (out / "report.md").read_text() == report


def test_the_answer_is_not_called_the_only_cause_when_bad_without_it_is_still_bad(
    tmp_path: Path,
) -> None:
    """Either the MoE backend or DeepGEMM alone garbles it: ddmin names the backend, and
    BAD with the backend reverted, re-tested, is still bad: never "only"."""
    rules = [{"flags": {"--moe-backend": "cutlass"}, "fault": "garbled-math"},
             {"env": {"VLLM_USE_DEEP_GEMM": "1"}, "fault": "garbled-math"}]  # fmt: skip
    s = setups(tmp_path, rules, flake="auto")
    out = tmp_path / "out"
    code, output = invoke(*args(s, out))
    assert code == 0, output
    assert (
        "found: turns GOOD bad: --moe-backend cutlass; not only these: BAD with only these "
        "reverted is still bad, another difference also turns GOOD bad"
    ) in output
    result = json.loads((out / "result.json").read_text())
    assert result["only"] is False
    (reverted,) = [r for r in result["retests"] if r["setup"] == "BAD with only the set reverted"]
    assert set(reverted["verdicts"]) == {"bad"} and len(reverted["verdicts"]) >= 2


def test_a_degenerate_golden_from_a_lying_good_start_is_recorded_again(tmp_path: Path) -> None:
    """GOOD's first start lies with a degenerate reasoning channel while its golden is
    recorded: refused (as `run` refuses a broken good end) and recorded from a new start,
    where the old run stopped with an error. BAD here is not bad: said at the confidence."""
    s = setups(tmp_path, rules=[], sim=("--lie-at", "1"), flake="auto")
    out = tmp_path / "out"
    code, output = invoke(*args(s, out))
    assert code == 4 and "not-bad: BAD tests good at this build" in output, output
    assert "degenerate or empty content" in output and "recording it again" in output
    result = json.loads((out / "result.json").read_text())
    assert [t["verdict"] for t in result["trials"]][:1] == ["good"]
    assert len(launched(s["launches"])) == len(result["trials"]) + 1


def test_a_golden_that_judges_nothing_once_more_stops_the_run_with_one_line(
    tmp_path: Path,
) -> None:
    """GOOD's first two starts both serve BAD's garbled math: its golden, recorded again,
    still judges nothing. Then it is GOOD's own answers, not one lying start: the run stops
    with one line (as `run` does after a second broken good end), never "BAD tests good"."""
    sim = ("--lie-at", "1,2", "--lie-fault", "garbled-math")
    s = setups(tmp_path, sim=sim, flake="auto")
    out = tmp_path / "out"
    code, output = invoke(*args(s, out))
    assert code == 1, output
    assert "not-bad" not in output and "Traceback" not in output
    assert "recorded again, still judges nothing: it matched none of its 1 expect" in output
    assert not (out / "result.json").exists()
    assert len(launched(s["launches"])) == 2  # one refusal, never a third golden


def test_a_run_killed_while_good_is_recorded_again_resumes_refusing_no_second_golden(
    tmp_path: Path,
) -> None:
    """Killed during GOOD's second start (its golden refused once, trials/1 half written,
    nothing journalled), the run resumes: a golden is refused once in total, so a resumed
    start that lies again stops it with one line, never a traceback (the refused folder's
    name was taken) nor a third golden. Rerun, it says the same before starting anything."""
    sim = ("--lie-at", "1,3", "--lie-fault", "garbled-math")
    s = setups(tmp_path, sim=sim, flake="auto")
    out = tmp_path / "out"
    code, output = invoke(*args(s, out))
    assert code == 0 and "recording it again" in output, output
    # as killed during start 2: the journal holds its head only, no golden, trials/1 partial
    lines = (out / "configs.jsonl").read_text().splitlines(keepends=True)
    first = next(n for n, line in enumerate(lines) if '"event": "probe"' in line)
    (out / "configs.jsonl").write_text("".join(lines[:first]))
    (out / "golden.json").unlink()
    for p in (out / "trials").iterdir():
        if p.name not in ("1", "1-golden-refused"):
            shutil.rmtree(p)
    s["launches"].write_text(" ".join(launched(s["launches"])[:2]) + "\n")  # next: start 3
    code, output = invoke(*args(s, out))
    assert code == 1 and "Traceback" not in output, output
    assert "recorded again, still judges nothing: it matched none of its 1 expect" in output
    assert len(launched(s["launches"])) == 3
    assert sorted(p.name for p in (out / "trials").iterdir()) == ["1", "1-golden-refused"]
    code, again = invoke(*args(s, out))
    assert code == 1 and "still judges nothing" in again and len(launched(s["launches"])) == 3


def test_bad_given_inline_runs_against_the_configs_own_server(tmp_path: Path) -> None:
    """The GLM case as its engineer says it: the config's server is GOOD; BAD is it with
    `--moe-backend cutlass` (marlin in GOOD: BAD's value takes its place), expert parallel
    on and DeepGEMM on. No server files to write."""
    s = setups(tmp_path)
    h: History = s["h"]
    command = [*sim_command(h.repo), *FLAGS_GOOD]
    config = h.config(
        server={"command": command, "env": ENV_GOOD, "ready_timeout": 20},
        checks=[{"type": "canary"}, {"type": "expect"}],
    )
    out = tmp_path / "inline"
    base = ["configs", str(config), "--build", h.shas[-1], "--out", str(out)]
    code, output = invoke(*base, "--bad-arg", "--moe-backend cutlass",
                          "--bad-arg", "--enable-expert-parallel",
                          "--bad-env", "VLLM_USE_DEEP_GEMM=1")  # fmt: skip
    assert code == 0, output
    assert "found: turns GOOD bad: --moe-backend cutlass, VLLM_USE_DEEP_GEMM=1" in output
    result = json.loads((out / "result.json").read_text())
    assert [d["label"] for d in result["differences"]] == [
        "--moe-backend cutlass", "--enable-expert-parallel", "VLLM_USE_DEEP_GEMM=1",
    ]  # fmt: skip
    # BAD given twice, or not at all, or a variable that is not NAME=VALUE: one line each
    for extra, said in (
        (["--bad-server", str(s["bad"]), "--bad-arg", "--x"], "not both"),
        ([], "BAD: give --bad-server FILE, or --bad-arg"),
        (["--bad-env", "VLLM_USE_DEEP_GEMM"], "is not NAME=VALUE"),
        (["--bad-arg", "'--unclosed"], "--bad-arg"),
    ):
        code, output = invoke(*base[:-2], "--out", str(tmp_path / "refused"), *extra)
        assert code == 2 and said in output and len(output.strip().splitlines()) == 1, output
        assert not (tmp_path / "refused").exists()


PLANTED = ("sk-plantedConfigsKey1", "hf_plantedConfigsTok2")


def test_the_report_holds_runs_evidence_and_its_reproduce_lines_run_as_printed(
    tmp_path: Path,
) -> None:
    """What `run`'s report has, for GOOD against the smallest bad setup: the backends each
    ran with on the first screen (the MoE kernel the flag switched, marked), the failing
    checks' evidence beside GOOD's with accuracy and content-null counts, NaN/Inf for both,
    the tensors where they part, a report.html; its Reproduce lines, pasted into `sh` in
    another folder, exit as they say. A planted key and token reach no output."""
    h = History(tmp_path, {}, 2, settings={"fault_when": RULES})
    command = [*sim_command(h.repo), *FLAGS_GOOD, "--api-key", PLANTED[0]]
    config = h.config(server={"command": command, "ready_timeout": 20,
                              "env": {**ENV_GOOD, "HF_TOKEN": PLANTED[1]}})  # fmt: skip
    out = tmp_path / "out"
    code, output = invoke("configs", str(config), "--build", h.shas[-1], "--out", str(out),
                          "--bad-arg", "--moe-backend cutlass", "--bad-env",
                          "VLLM_USE_DEEP_GEMM=1")  # fmt: skip
    assert code == 0 and "found: turns GOOD bad" in output, output
    md = (out / "report.md").read_text()
    shown = github_render(md)
    assert shown.problems == []
    top = first_screen(md)
    assert "- GOOD is the config's own `server:`" in top
    assert "**⚠ MoE** `MARLIN` → `CUTLASS`" in top and "attention `FLASH_ATTN`" in top, top
    evidence = md[md.index("## Evidence") :]
    short = h.shas[-1][:12]
    assert f"- **smallest bad setup** `{short}`: 'What is 2+2?" in evidence
    assert f"- **GOOD** `{short}`: 'What is 2+2? Reply with the number only.' → 4" in evidence
    assert "replies with content null; golden 0 of 64 replies" in evidence
    assert "#### First divergence from the golden (logprobs)" in evidence
    nan = md[md.index("## NaN / Inf") : md.index("## Evidence")]
    assert "- GOOD: 0 logprob position(s) NaN or Inf" in nan
    assert "- smallest bad setup: 0 logprob position(s) NaN or Inf" in nan
    assert "No NaN or Inf on either path." in nan
    assert "| tensor of `model.layers.0.mlp` | relative difference |" in md
    assert "<b>Builds compared</b>" in md and "**⚠ kernels.moe_backend**" in md
    html = (out / "report.html").read_text()
    assert 'id="plot-logprobs"' in html and "smallest bad setup" in html
    result = json.loads((out / "result.json").read_text())
    assert [p["verdict"] for p in result["decisive"]] == ["good", "bad"]
    commands = printed_commands(md)
    assert [shell_words(line, tmp_path)[:2] for line, _ in commands] == [
        ["llm-bisect", "check"], ["llm-bisect", "configs"]
    ]  # fmt: skip
    assert [c for _, c in commands] == [0, 0]
    for line, said in commands:
        done = run_as_printed(line, tmp_path / "elsewhere", tmp_path / "bin")
        assert done.returncode == said, f"{line}\n{done.stdout}{done.stderr}"
    again = json.loads(Path(f"{out}-smallest/result.json").read_text())
    assert [d["label"] for d in again["difference"]] == [d["label"] for d in result["difference"]]
    for path in [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".yaml"]:
        assert not [s for s in PLANTED if s.encode() in path.read_bytes()], path
    assert not [s for s in PLANTED if s in output]
    assert live_processes(str(h.repo)) == []


def test_the_printed_curl_reaches_the_server_started_by_the_printed_command_line(
    tmp_path: Path,
) -> None:
    """The report's curl of the canary's first failing prompt said its server was "started by
    its command line above", and no such line was printed. The curl's block starts with it
    (its secrets by their names); the two, pasted into `sh` in another folder with the
    reader's own key and token, show the symptom. No planted secret is printed."""
    if shutil.which("curl") is None:
        pytest.skip("no curl on this machine")
    rules = [{"flags": {"--moe-backend": "cutlass"}, "fault": "degenerate-content"}]
    h = History(tmp_path, {}, 2, settings={"fault_when": rules})
    command = [*sim_command(h.repo), *FLAGS_GOOD, "--api-key", PLANTED[0]]
    config = h.config(server={"command": command, "ready_timeout": 20,
                              "env": {**ENV_GOOD, "HF_TOKEN": PLANTED[1]}},
                      checks=[{"type": "canary"}], localize={"enabled": False})  # fmt: skip
    out = tmp_path / "out"
    code, output = invoke("configs", str(config), "--build", h.shas[-1], "--out", str(out),
                          "--bad-arg", "--moe-backend cutlass")  # fmt: skip
    assert code == 0 and "found: turns GOOD bad" in output, output
    md = (out / "report.md").read_text()
    assert "started by the block's first line" in md
    fences = github_render(md).fences
    (server,) = [x for info, c in fences if info == "sh" for x in c.splitlines()
                 if "llm_bisect.sim" in x]  # fmt: skip
    (curl,) = [x for info, c in fences if info == "sh" for x in c.splitlines()
               if x.startswith("curl ")]  # fmt: skip
    assert md.index(server) < md.index(curl)  # above it
    assert not [x for x in PLANTED if x in md]
    words = shell_words(server, tmp_path)
    assert "--moe-backend" in words and words[words.index("--moe-backend") + 1] == "cutlass"
    env = {**cli_on_path(tmp_path / "bin"), "HF_TOKEN": "hf_readersOwn",
           "LLM_BISECT_API_KEY": "sk-readersOwn"}  # fmt: skip
    reply = served_as_printed(server, curl, tmp_path / "elsewhere", env)
    content = json.loads(reply)["choices"][0]["message"]["content"]
    assert degeneration(content), content
    assert wait_until(lambda: live_processes(str(h.repo)) == [])  # the group was ended


def test_a_config_without_candidates_serves_and_an_ignored_server_is_said(
    tmp_path: Path,
) -> None:
    """`configs` at one build needs no range: a config without `candidates:` runs with the
    build named by its full commit; a ref needs a repository, and a build route that reads
    one (overlay) needs candidates.repo: one line each, nothing started. --good-server
    leaves the config's own `server:` unused: the terminal and report.md say so."""
    s = setups(tmp_path)
    h: History = s["h"]
    data = yaml.safe_load(Path(s["config"]).read_text())
    del data["candidates"]
    data["localize"] = {"enabled": False}
    bare = write_config(tmp_path / "bare.yaml", data)
    out = tmp_path / "out"
    base = ["configs", str(bare), "--good-server", str(s["good"]), "--bad-arg",
            "--moe-backend cutlass", "--bad-env", "VLLM_USE_DEEP_GEMM=1"]  # fmt: skip
    code, output = invoke(*base, "--build", h.shas[-1], "--out", str(out))
    assert code == 0 and "found: turns GOOD bad" in output, output
    assert "the config's own server: is not used" in output
    md = (out / "report.md").read_text()
    assert "(--good-server): **the config's own `server:` is not used**" in first_screen(md)
    assert json.loads((out / "result.json").read_text())["good_server"] == str(s["good"])
    starts = len(launched(s["launches"]))
    data["build"] = {"strategies": [{"type": "overlay", "venv": str(tmp_path), "package": "x",
                                     "base_commit": h.shas[0]}]}  # fmt: skip
    overlay = write_config(tmp_path / "overlay.yaml", data)
    for config, build, said in (
        (bare, "HEAD", "--build: 'HEAD' is not a full commit id, and the config has no "
         "candidates.repo"),
        (overlay, h.shas[-1], "build.strategies.0: `overlay` builds from the repository, and "
         "the config has no candidates.repo"),
    ):  # fmt: skip
        refused = tmp_path / "refused"
        code, output = invoke("configs", str(config), *base[2:], "--build", build,
                              "--out", str(refused))  # fmt: skip
        assert code == 2 and said in output and len(output.strip().splitlines()) == 1, output
        assert not refused.exists()
    assert len(launched(s["launches"])) == starts
