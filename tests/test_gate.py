"""The release gate end to end: the real CLI, real git histories, the simulated server."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from helpers import (
    CACHE_VARIABLES,
    HOSTILE_LINE,
    HOSTILE_LOG,
    HOSTILE_TAGS,
    History,
    cli_on_path,
    first_screen,
    github_render,
    live_processes,
    printed_commands,
    shell_words,
    sim_command,
    wait_until,
)
from llm_bisect.fingerprint import Fingerprint
from llm_bisect.journal import read_events
from llm_bisect.logs import LINE_CHARS
from llm_bisect.model import Stage
from llm_bisect.report.documents import GateDocument, ResultDocument
from llm_bisect.report.gate import HEADLINE, HEADLINE_OF, render_gate_markdown, render_junit
from llm_bisect.services.gate import GateAsk, run_gate
from llm_bisect.services.setup import setup
from llm_bisect.terminal import TerminalProgress
from test_cli import held_history, invoke, launched


def gate_of(out: Path) -> GateDocument:
    return GateDocument.model_validate_json((out / "gate.json").read_bytes())


def record(h: History, config: Path, tmp_path: Path) -> Path:
    golden = tmp_path / "golden.json"
    code, output = invoke("golden", str(config), "--candidate", h.shas[0], "-o", str(golden))
    assert code == 0, output
    return golden


def test_allow_on_a_good_candidate(tmp_path: Path, history: Any) -> None:
    h: History = history({12: "degenerate-reasoning"}, n=16)
    config = h.config()
    golden = record(h, config, tmp_path)
    out, junit = tmp_path / "gate", tmp_path / "ci" / "junit.xml"
    code, output = invoke(
        "gate", str(config), "--candidate", h.shas[6], "--golden", str(golden),
        "--out", str(out), "--junit", str(junit),
    )  # fmt: skip
    assert code == 0, output
    assert output.splitlines()[-1] == f"gate: {out / 'gate.json'}, report: {out / 'report.md'}"
    doc = gate_of(out)
    assert (doc.decision, doc.exit_code, doc.probe.verdict.value) == ("allow", 0, "good")
    assert doc.golden.commit == h.shas[0] and doc.candidate.commit == h.shas[6]
    assert doc.bisection is None
    suite = ET.parse(junit).getroot()
    assert suite.get("failures") == "0" and suite.get("errors") == "0"
    assert {c.get("name") for c in suite} == {"canary", "expect", "logprobs", "eval", "decision"}
    md = (out / "report.md").read_text()
    assert md.startswith(f"# llm-bisect gate: ALLOW {h.shas[6]}")
    assert (out / "report.html").exists()
    assert live_processes(str(h.repo)) == []
    # what the eval is and what it could see, on the terminal, in JUnit and the reports: the
    # bundled set is not GSM8K; its power with the chance flips it assumed (nothing measured
    # them: no calibration, no answer gained); the ALLOW's smallest drop it would have caught
    power = doc.eval_power
    named = "bundled arithmetic, 64 problems, not GSM8K"
    assert power is not None and power.data == named and power.flips_from == "assumed"
    drop = f"{power.detectable_drop:.1%}"
    said = output.replace("\n", " ")
    assert f"eval: pass — {named}: accuracy" in said, output
    assert f"eval power: the eval ({named}) catches an accuracy drop of {drop} or more" in said
    assert "flips: 0 assumed: nothing measured how many answers change by chance" in said
    caught = f"allow: the smallest accuracy drop it would have caught is {drop}"
    assert caught in said, output
    props = {
        (case.get("name"), p.get("name")): p.get("value")
        for case in suite
        for p in case.iter("property")
    }
    assert props["eval", "data"] == named
    assert props["eval", "detectable drop"] == f"{power.detectable_drop:.4f}"
    assert props["eval", "flips assumption"].startswith("flips: 0 assumed")
    assert (props["decision", "eval power"] or "").startswith(f"the eval ({named}) catches")
    assert (props["decision", "allow"] or "").startswith(caught.removeprefix("allow: "))
    assert f"**allow:** the smallest accuracy drop it would have caught is {drop}" in first_screen(
        md
    )
    assert (
        f"allow: the smallest accuracy drop it would have caught is {drop}"
        in (out / "report.html").read_text()
    )


def test_block_on_a_bad_candidate_with_json_and_junit(tmp_path: Path, history: Any) -> None:
    h: History = history({12: "degenerate-reasoning"}, n=16)
    config = h.config()
    golden = record(h, config, tmp_path)
    out, junit = tmp_path / "gate", tmp_path / "junit.xml"
    code, output = invoke(
        "gate", str(config), "--candidate", h.shas[-1], "--golden", str(golden),
        "--out", str(out), "--junit", str(junit), "--json",
    )  # fmt: skip
    assert code == 1, output
    printed = json.loads(output[output.index("{") :])
    assert printed["decision"] == "block" and printed == json.loads((out / "gate.json").read_text())
    # the candidate may become a bisection's bad end: every check ran (no early stop)
    ran = [c["name"] for c in printed["probe"]["checks"]]
    assert ran == ["canary", "expect", "logprobs", "eval"]
    assert printed["probe"].get("not_run", []) == []  # written only where some were not run
    suite = ET.parse(junit).getroot()
    decision = next(c for c in suite if c.get("name") == "decision")
    assert decision.find("failure") is not None
    canary = next(c for c in suite if c.get("name") == "canary")
    failure = canary.find("failure")
    assert failure is not None and "now now" in (failure.text or "")
    report = (out / "report.md").read_text()
    assert "BLOCK: the release candidate regressed" in report
    assert "| canary | **FAIL** |" in report and "First divergence from the golden" in report
    # what it could miss, as the run report says it: the eval's n and its detectable drop
    power = printed["eval_power"]
    assert 0 < power["detectable_drop"] < 1 and power["n"] > 0
    said = f"on its {power['n']} answers compared, an accuracy drop of"
    assert said in report, report
    # the golden keeps the good build's fingerprint; the gate compares the two builds
    kept = json.loads(golden.read_text())["fingerprint"]
    assert kept["server"]["system_fingerprint"] == f"sim-0.1.0-{h.shas[0][:12]}", kept
    assert "<b>Builds compared</b>" in report, report
    assert f"| | golden `{h.shas[0][:12]}` | candidate `{h.shas[-1][:12]}` |" in report
    assert f"sim-0.1.0-{h.shas[0][:12]}" in report and f"sim-0.1.0-{h.shas[-1][:12]}" in report
    # a viewer splits a JUnit classname at its dots: none in ours, whatever the ref holds
    assert {c.get("classname") for c in suite} == {f"llm-bisect/gate/{h.shas[-1]}"}
    tagged = render_junit(gate_of(out).model_copy(update={"candidate_ref": "v0.27.0"}))
    assert {c.get("classname") for c in ET.fromstring(tagged)} == {"llm-bisect/gate/v0_27_0"}


def counted(h: History, launches: Path, **over: Any) -> Path:
    """A config whose servers append their commit to `launches` as each starts."""
    return h.config(server={"command": sim_command(h.repo, "--launch-log", str(launches))}, **over)


BROKEN_NODE = {"fault_when": [{"env": {"SIM_NODE": "broken"}, "fault": "crash-on-start"}]}
"""Settings under which every build crashes on start where SIM_NODE=broken: a node that
starts nothing (its driver, its GPUs), whatever the build."""
CUDA_ERROR = "RuntimeError: CUDA error: no kernel image is available (simulated)"


def test_block_on_a_candidate_that_cannot_start_where_the_good_build_starts(
    tmp_path: Path, history: Any
) -> None:
    """It used to be inconclusive (125), which CI passes with a warning. The candidate is
    started once more, then the golden's build on the same launcher: it serves, so the node
    is fine and the candidate blocks (exit 1, `start-failure`); all three starts recorded."""
    h: History = history({10: "crash-on-start"}, n=12)
    launches = tmp_path / "launches"
    config = counted(h, launches)
    golden = record(h, config, tmp_path)
    out, junit = tmp_path / "gate", tmp_path / "junit.xml"
    code, output = invoke(
        "gate", str(config), "--candidate", h.shas[-1], "--golden", str(golden),
        "--out", str(out), "--junit", str(junit),
    )  # fmt: skip
    assert code == 1, output
    assert f"then golden-build {h.shas[0][:12]}: ready" in output
    assert f"start-failure: {HEADLINE_OF['start-failure']}" in output
    doc = gate_of(out)
    assert (doc.decision, doc.exit_code, doc.reason) == ("block", 1, "start-failure")
    assert doc.message == HEADLINE_OF["start-failure"]
    assert doc.probe.verdict.value == "skip" and doc.probe.failed_at == Stage.READY
    assert [(t.role, t.probe.commit) for t in doc.trials] == [
        ("candidate", h.shas[-1]),
        ("golden-build", h.shas[0]),
    ]
    again, good = doc.trials[0].probe, doc.trials[1].probe
    assert again.failed_at == Stage.READY and "exited with code 3" in again.reason
    assert good.failed_at is None and "ready" in good.timings and good.checks == []
    counts = Counter(launched(launches))
    assert counts == {h.shas[0]: 2, h.shas[-1]: 2}  # recorded, then the node's start; 2 tries
    assert doc.bisection is None
    suite = ET.parse(junit).getroot()
    decision = next(c for c in suite if c.get("name") == "decision")
    failure = decision.find("failure")
    assert failure is not None and CUDA_ERROR in (failure.text or "")
    md = (out / "report.md").read_text()
    assert "does not start where the last good build does" in md and "## Starts" in md
    assert f"| 3 | the golden's build `{h.shas[0][:12]}` |" in md, md
    assert "Builds compared" in md  # it said its kernels first
    # a candidate that said nothing of itself: the golden is sound, not the one to record anew
    said_nothing = doc.probe.model_copy(update={"fingerprint": Fingerprint()})
    silent = doc.model_copy(update={"fingerprints": None, "probe": said_nothing})
    md = render_gate_markdown(silent)
    assert "record it anew" not in md and "never served, so no builds are compared" in md, md
    assert live_processes(str(h.repo)) == []


def test_inconclusive_when_the_good_build_does_not_start_on_this_node_either(
    tmp_path: Path, history: Any
) -> None:
    """A node that starts nothing (here: every build crashes where SIM_NODE=broken): the
    candidate fails twice, the golden's build fails too; inconclusive (125) naming the node,
    and no bisection from a candidate the node could not test."""
    h: History = history({10: "crash-on-start"}, n=12, settings=BROKEN_NODE)
    launches = tmp_path / "launches"
    config = counted(h, launches)
    golden = record(h, config, tmp_path)  # the node was fine then
    out = tmp_path / "gate"
    code, output = invoke(
        "gate", str(config), "--candidate", h.shas[6], "--golden", str(golden),
        "--out", str(out), "--bisect-on-block", env={"SIM_NODE": "broken"},
    )  # fmt: skip
    assert code == 125, output
    doc = gate_of(out)
    assert (doc.decision, doc.exit_code, doc.reason) == ("inconclusive", 125, "node")
    assert doc.message == HEADLINE_OF["node"]
    assert [t.role for t in doc.trials] == ["candidate", "golden-build"]
    assert all(t.probe.failed_at == Stage.READY for t in doc.trials)
    assert doc.bisection is None
    assert Counter(launched(launches)) == {h.shas[0]: 2, h.shas[6]: 2}
    assert (
        "neither the release candidate nor the last good build starts"
        in (out / "report.md").read_text()
    )


def test_a_candidate_that_starts_on_its_second_try_is_inconclusive(
    tmp_path: Path, history: Any
) -> None:
    """Its first start crashed, the second served: a start that glitched is no block (nor an
    allow): inconclusive (125, `flaky-start`), the golden's build not started."""
    h: History = history({}, n=4, changes={4: {"crash_first": 1}})
    launches = tmp_path / "launches"
    config = counted(h, launches, checks=[{"type": "canary"}])
    golden = record(h, config, tmp_path)
    out = tmp_path / "gate"
    code, output = invoke(
        "gate", str(config), "--candidate", h.shas[4], "--golden", str(golden), "--out", str(out)
    )
    assert code == 125, output
    doc = gate_of(out)
    assert (doc.decision, doc.reason) == ("inconclusive", "flaky-start")
    assert [t.role for t in doc.trials] == ["candidate"]
    assert doc.trials[0].probe.verdict.value == "good" and doc.trials[0].probe.failed_at is None
    assert Counter(launched(launches)) == {h.shas[0]: 1, h.shas[4]: 2}


def test_a_candidate_whose_second_start_tests_bad_blocks(tmp_path: Path, history: Any) -> None:
    """Its first start crashed, the second served degenerate answers: the checks decided,
    bad. A block (1), not a flaky start (125): the first start failed, the second tested bad."""
    h: History = history({3: "degenerate-content"}, n=4, changes={4: {"crash_first": 1}})
    launches = tmp_path / "launches"
    config = counted(h, launches, checks=[{"type": "canary"}])
    golden = record(h, config, tmp_path)
    out = tmp_path / "gate"
    code, output = invoke(
        "gate", str(config), "--candidate", h.shas[4], "--golden", str(golden), "--out", str(out)
    )
    assert code == 1, output
    doc = gate_of(out)
    assert (doc.decision, doc.reason) == ("block", "second-start-bad")
    assert doc.message.startswith("BLOCK: the release candidate's first start failed; its second")
    assert doc.probe.verdict.value == "bad"  # what --bisect-on-block bisects from
    assert [t.role for t in doc.trials] == ["candidate"]
    assert doc.trials[0].probe.verdict.value == "bad"
    assert Counter(launched(launches)) == {h.shas[0]: 1, h.shas[4]: 2}


def test_a_candidate_that_cannot_be_built_stays_inconclusive(tmp_path: Path, history: Any) -> None:
    """No build is no start failure: inconclusive (125) as before, nothing started again."""
    h: History = history({}, n=4)
    script = "import sys; sys.exit(3 if sys.argv[1] == sys.argv[2] else 0)"
    build = {
        "strategies": [
            {"type": "command", "run": [sys.executable, "-c", script, "{commit}", h.shas[-1]]}
        ],
        "cache": {"dir": str(tmp_path / "cache")},
    }
    launches = tmp_path / "launches"
    config = counted(h, launches, build=build, checks=[{"type": "canary"}])
    golden = record(h, config, tmp_path)
    out = tmp_path / "gate"
    code, output = invoke(
        "gate", str(config), "--candidate", h.shas[-1], "--golden", str(golden),
        "--out", str(out), "--bisect-on-block",
    )  # fmt: skip
    assert code == 125, output
    doc = gate_of(out)
    assert (doc.decision, doc.reason, doc.trials) == ("inconclusive", None, [])
    assert doc.probe.failed_at == Stage.LAUNCH and "exited with 3" in doc.probe.reason
    assert doc.message == HEADLINE["inconclusive"] and doc.bisection is None
    assert launched(launches) == [h.shas[0]]  # the golden's recording only


def test_bisect_on_block_after_a_start_failure_names_the_first_build_that_does_not_start(
    tmp_path: Path, history: Any
) -> None:
    """The block's bisection runs under `regress: start`: the candidate given bad (it never
    started), and the first commit whose server does not start is the culprit, though an
    older commit garbles its answers (it starts: under `start` that is good)."""
    h: History = history({3: "degenerate-content", 7: "crash-on-start"}, n=12)
    config = h.config(checks=[{"type": "canary"}])
    golden = record(h, config, tmp_path)
    out = tmp_path / "gate"
    code, output = invoke(
        "gate", str(config), "--candidate", h.shas[-1], "--golden", str(golden),
        "--out", str(out), "--bisect-on-block",
    )  # fmt: skip
    assert code == 1, output
    assert f"bisection: found: {h.shas[7]}" in output
    doc = gate_of(out)
    assert doc.reason == "start-failure" and doc.bisection is not None
    assert doc.bisection.culprit is not None and doc.bisection.culprit.commit == h.shas[7]
    result = ResultDocument.model_validate_json((out / "bisect" / "result.json").read_bytes())
    assert result.regress.value == "start" and result.range == [h.shas[6], h.shas[7]]
    given = {p.commit: (p.given, p.verdict.value) for p in result.probes if p.given}
    assert given[h.shas[-1]] == ("gate: the candidate's probe", "bad")
    first_bad = next(p for p in result.probes if p.commit == h.shas[7] and not p.given)
    assert first_bad.verdict.value == "bad" and first_bad.failed_at == Stage.READY
    assert first_bad.reason.startswith("did not start (regress: start)")
    assert live_processes(str(h.repo)) == []


def test_record_then_bisect_on_block_reuses_both_verdicts(tmp_path: Path, history: Any) -> None:
    h: History = history({9: "degenerate-reasoning"}, n=16)
    config = h.config()
    out, golden = tmp_path / "gate", tmp_path / "g" / "golden.json"
    code, output = invoke(
        "gate", str(config), "--candidate", h.shas[-1], "--golden", str(golden),
        "--record", "--out", str(out), "--bisect-on-block",
    )  # fmt: skip
    assert code == 1, output
    assert f"bisection: found: {h.shas[9]}" in output
    doc = gate_of(out)
    assert doc.golden.recorded and doc.golden.commit == h.shas[0]
    assert doc.bisection is not None and doc.bisection.culprit is not None
    assert doc.bisection.culprit.commit == h.shas[9]
    where = out / "bisect"
    result = ResultDocument.model_validate_json((where / "result.json").read_bytes())
    assert result.status.value == "found" and result.range == [h.shas[8], h.shas[9]]
    given = {p.commit: p.given for p in result.probes if p.given}
    assert given == {
        h.shas[0]: "gate: the golden's build",
        h.shas[-1]: "gate: the candidate's probe",
    }
    started = [
        e["commit"] for e in read_events(where / "journal.jsonl") if e["event"] == "probe-start"
    ]
    assert h.shas[0] not in started and h.shas[-1] not in started  # neither end probed again
    assert doc.bisection.probes == len(started) == len(result.probes) - 2
    assert (
        "verdicts given: gate: the golden's build, gate: the candidate's probe"
        in (where / "report.md").read_text()
    )
    # The golden is reused the second time: nothing recorded, the verdict the same.
    code, output = invoke(
        "gate", str(config), "--candidate", h.shas[-1], "--golden", str(golden), "--record",
        "--out", str(tmp_path / "again"),
    )  # fmt: skip
    assert code == 1, output
    assert not gate_of(tmp_path / "again").golden.recorded
    assert live_processes(str(h.repo)) == []


def test_a_gate_without_a_golden_is_one_line_and_starts_nothing(
    tmp_path: Path, history: Any
) -> None:
    h: History = history({}, n=4)
    out = tmp_path / "gate"
    code, output = invoke(
        "gate", str(h.config()), "--candidate", h.shas[-1], "--golden",
        str(tmp_path / "none.json"), "--out", str(out),
    )  # fmt: skip
    assert code == 128
    assert output.strip().splitlines() == [
        f"llm-bisect: error: --golden: no golden at '{tmp_path / 'none.json'}'; record the last "
        "good build's with `llm-bisect golden CONFIG --candidate GOOD`, or run the gate with "
        "--record"
    ]
    assert not (out / "probes").exists()
    code, output = invoke(
        "gate", str(h.config()), "--candidate", "no-such-ref", "--record", "--out", str(out)
    )
    assert (
        code == 128
        and output.strip() == "llm-bisect: error: --candidate: no such ref 'no-such-ref'"
    )


def test_a_gate_killed_in_its_bisection_resumes_without_probing_again(tmp_path: Path) -> None:
    """SIGKILL while the bisection's first probe is held: the gate run again resumes the
    bisection; the golden's build and the candidate never start again, no server is left."""
    first = 12  # the bisection's first probe: the middle, since both ends are given
    h, config, launches, hold = held_history(tmp_path, culprit=17, held=first)
    out, golden = tmp_path / "gate", tmp_path / "golden.json"
    args = ["gate", str(config), "--candidate", h.shas[-1], "--golden", str(golden), "--record",
            "--out", str(out), "--bisect-on-block"]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "llm_bisect.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_until(lambda: h.shas[first] in launched(launches), timeout=120)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
    assert wait_until(lambda: live_processes(str(h.repo)) == [], timeout=15), "server left behind"
    held = gate_of(out)
    assert held.decision == "block" and held.bisection is not None
    assert held.bisection.status is None  # under way when killed
    hold.unlink()
    code, output = invoke(*args)
    assert code == 1, output
    assert "the bisection resumes" in output
    doc = gate_of(out)
    assert doc.bisection is not None and doc.bisection.culprit is not None
    assert doc.bisection.culprit.commit == h.shas[17]
    assert doc.probe == held.probe  # the candidate's verdict is the one from before the kill
    counts = Counter(launched(launches))
    assert counts[h.shas[0]] == 1 and counts[h.shas[-1]] == 1  # golden recorded, gate probe
    assert counts[h.shas[first]] == 2  # the probe the kill cut short runs again, once
    finished = [e["outcome"]["commit"] for e in read_events(out / "bisect" / "journal.jsonl")
                if e["event"] == "probe"]  # fmt: skip
    assert len(finished) == len(set(finished))  # no finished probe ran again
    assert live_processes(str(h.repo)) == []


def test_a_block_whose_range_cannot_be_bisected_keeps_its_decision(
    tmp_path: Path, history: Any
) -> None:
    """The golden's build is newer than the candidate: the block stands (exit 1) and
    gate.json says why no bisection ran."""
    h: History = history({2: "degenerate-reasoning", 3: "none"}, n=8)
    config = h.config()
    golden = tmp_path / "golden.json"
    code, output = invoke("golden", str(config), "--candidate", h.shas[6], "-o", str(golden))
    assert code == 0, output
    out = tmp_path / "gate"
    code, output = invoke(
        "gate", str(config), "--candidate", h.shas[2], "--golden", str(golden),
        "--out", str(out), "--bisect-on-block",
    )  # fmt: skip
    assert code == 1, output
    doc = gate_of(out)
    assert doc.decision == "block" and doc.bisection is not None
    assert doc.bisection.status is not None and doc.bisection.status.value == "error"
    assert "older than" in doc.bisection.message
    assert "## Bisection" in (out / "report.md").read_text()


@pytest.fixture(scope="module")
def hostile_gates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two gates whose candidates are tags a shell or a markdown renderer would act on, whose
    config and golden lie in folders named like commands: one blocked by a server that answers
    with markup and control characters, one inconclusive on a build whose log holds them (it
    crashes during checks: a build that does not start where the good one does blocks)."""
    root = tmp_path_factory.mktemp("hostile")
    h = History(
        root,
        {3: "crash-on-request", 4: "degenerate-content"},
        4,
        changes={
            3: {"log_lines": HOSTILE_LOG},
            4: {"log_lines": [], "hostile": {"say": HOSTILE_LINE}},
        },
    )
    for tag, sha in zip(HOSTILE_TAGS, (h.shas[4], h.shas[3]), strict=True):
        subprocess.run(["git", "-C", str(h.repo), "tag", tag, sha], check=True)
    folder = root / "cfg $(touch pwned-cfg)"
    folder.mkdir()
    config = folder / "gate `touch pwned-tick`;touch pwned-semi.yaml"
    config.write_text(h.config().read_text())
    golden = root / "g;touch pwned-g" / "golden.json"
    code, output = invoke("golden", str(config), "--candidate", h.shas[0], "-o", str(golden))
    assert code == 0, output
    gates: dict[str, Any] = {"config": config, "golden": golden, "root": root}
    for tag, decision in zip(HOSTILE_TAGS, ("block", "inconclusive"), strict=True):
        out = root / decision
        code, output = invoke(
            "gate", str(config), "--candidate", tag, "--golden", str(golden),
            "--out", str(out), "--junit", str(out / "junit.xml"),
        )  # fmt: skip
        assert code == {"block": 1, "inconclusive": 125}[decision], output
        gates[decision] = (tag, out)
    return gates


def test_the_reproduce_lines_run_nothing_a_tag_or_path_holds(
    hostile_gates: dict[str, Any], tmp_path: Path
) -> None:
    """Each command report.md prints, pasted into `sh`, runs the command it names with the
    words it names: no `;`, `$(...)` or backtick in a tag or a path runs."""
    config, golden = str(hostile_gates["config"]), str(hostile_gates["golden"])
    for decision in ("block", "inconclusive"):
        tag, out = hostile_gates[decision]
        fences = github_render((out / "report.md").read_text()).fences
        commands = [content for info, content in fences if info == "bash"]
        assert commands, decision
        cwd = tmp_path / decision
        cwd.mkdir()
        words = shell_words(commands[0], cwd)
        assert words == ["llm-bisect", "gate", config, "--candidate", tag, "--golden", golden]
        for command in commands[1:]:  # the server's command line, after the engine cache's
            words = [w for w in shell_words(command, cwd) if not w.startswith(CACHE_VARIABLES)]
            assert words[0] == sys.executable
        assert sorted(p.name for p in cwd.iterdir()) == [], "the pasted lines ran commands"


def test_gate_report_md_shows_what_servers_logs_and_refs_say_as_text(
    hostile_gates: dict[str, Any],
) -> None:
    """Rendered as GitHub renders it, the report holds no tag, link, image or mention that the
    report did not make, and no control character; what was said is still there to read."""
    for decision, reason in (("block", "failed: canary"), ("inconclusive", "exited with code 134")):
        tag, out = hostile_gates[decision]
        shown = github_render((out / "report.md").read_text())
        assert shown.problems == [], decision
        assert shown.headings[0] == f"llm-bisect gate: {decision.upper()} {tag}"
        assert "</details><img src=x onerror=alert(1)> @octocat red" in shown.text
        assert reason in shown.text
    _, out = hostile_gates["inconclusive"]
    log = [c for info, c in github_render((out / "report.md").read_text()).fences if not info]
    assert len(log) == 1 and "```\n</details><img src=x onerror=alert(1)> @octocat" in log[0]


def test_junit_is_well_formed_whatever_a_server_said(hostile_gates: dict[str, Any]) -> None:
    """Control characters XML 1.0 forbids (a reply's, a log's) are left out; the text stays."""
    for decision, said in (("block", "canary"), ("inconclusive", "decision")):
        _, out = hostile_gates[decision]
        suite = ET.parse(out / "junit.xml").getroot()
        case = next(c for c in suite if c.get("name") == said)
        found = case.find("failure" if decision == "block" else "error")
        assert found is not None and "<img src=x onerror=alert(1)> @octocat red" in (
            found.text or ""
        )


def test_the_crash_reason_survives_a_long_line_after_it(tmp_path: Path, history: Any) -> None:
    """The server prints its CUDA error, then a 70 KB line, then exits (where the good build
    starts: a block): the log tail in gate.json, report.md and the JUnit XML keeps the reason;
    every line of it is bounded."""
    h: History = history({3: "crash-on-start"}, n=4, changes={3: {"crash_trailer": 70_000}})
    config = h.config(checks=[{"type": "canary"}])
    golden = record(h, config, tmp_path)
    out, junit = tmp_path / "gate", tmp_path / "junit.xml"
    code, output = invoke(
        "gate", str(config), "--candidate", h.shas[3], "--golden", str(golden),
        "--out", str(out), "--junit", str(junit),
    )  # fmt: skip
    assert code == 1, output
    reason = CUDA_ERROR
    tail = gate_of(out).probe.log_tail
    assert reason in tail
    assert max(len(line) for line in tail.splitlines()) <= LINE_CHARS + 40
    assert reason in (out / "report.md").read_text()
    assert reason in (ET.parse(junit).getroot().findtext(".//failure") or "")


RECORD_ANEW = "record it anew: `llm-bisect golden CONFIG --candidate {}`, or gate --record"


@pytest.mark.parametrize(
    ("recorded", "now", "why"),
    [
        (
            {"fault": "numerics"},
            {},
            "was recorded with another server command (command, image, args or env)",
        ),
        (
            {"checks": [{"type": "logprobs", "prompts": ["Say hi."]}]},
            {},
            "was recorded with other 'logprobs' settings (checks.0)",
        ),
        (
            {},
            {"model": "another-model"},
            "was recorded serving 'sim/tiny-chat', and server.model is 'another-model'",
        ),
    ],
)
def test_a_golden_of_another_config_is_refused_before_anything_starts(
    tmp_path: Path, history: Any, recorded: dict[str, Any], now: dict[str, Any], why: str
) -> None:
    """A golden recorded with another server command (here: a build that garbles numbers),
    other check settings or another model used to block a good candidate, and with
    --bisect-on-block to name an innocent commit. It is refused, exit 128, nothing started;
    --record makes a new one."""
    h: History = history({}, n=6)  # every build is good
    launches = tmp_path / "launches"
    command = [*h.config_command(), "--launch-log", str(launches)]
    fault = ["--fault", recorded["fault"]] if "fault" in recorded else []
    checks = [{"type": "logprobs"}]
    golden = record(
        h,
        h.config(server={"command": [*command, *fault]}, checks=recorded.get("checks", checks)),
        tmp_path,
    )
    launches.unlink()
    config = h.config(server={"command": command, **now}, checks=checks)
    out = tmp_path / "gate"
    args = ["gate", str(config), "--candidate", h.shas[-1], "--golden", str(golden),
            "--out", str(out), "--bisect-on-block"]  # fmt: skip
    code, output = invoke(*args)
    assert code == 128, output
    assert output.strip().splitlines() == [
        f"llm-bisect: error: golden: '{golden}' {why}; {RECORD_ANEW.format(h.shas[0][:12])}"
    ]
    code, output = invoke("check", str(config), "--candidate", h.shas[2], "--golden", str(golden))
    assert code == 128 and why in output, output
    assert not launches.exists() and not (out / "probes").exists()  # nothing started
    code, output = invoke(*args, "--record")
    assert code == 0, output
    assert gate_of(out).golden.recorded and gate_of(out).decision == "allow"


def test_a_golden_of_another_repository_is_refused_before_anything_starts(
    tmp_path: Path, history: Any
) -> None:
    """Its build is not in candidates.repo: the gate used to block, then fail to bisect."""
    other = History(tmp_path / "other", {0: "numerics", 1: "none"}, 2)
    golden = record(other, other.config(checks=[{"type": "canary"}]), tmp_path)
    h: History = history({}, n=4)
    out = tmp_path / "gate"
    code, output = invoke(
        "gate", str(h.config(checks=[{"type": "canary"}])), "--candidate", h.shas[-1],
        "--golden", str(golden), "--out", str(out), "--bisect-on-block",
    )  # fmt: skip
    assert code == 128, output
    assert output.strip().splitlines() == [
        f"llm-bisect: error: golden: '{golden}' was recorded from {other.shas[0][:12]}, which "
        "is not in candidates.repo: a golden of another repository"
    ]
    assert not (out / "probes").exists()


def test_a_golden_that_does_not_say_what_it_was_made_with_is_recorded_anew(
    tmp_path: Path, history: Any
) -> None:
    """A golden an older llm-bisect wrote records no identity: it cannot be checked, so it is
    refused with one line; gate --record replaces it."""
    h: History = history({}, n=4)
    config = h.config(checks=[{"type": "canary"}])
    golden = record(h, config, tmp_path)
    data = json.loads(golden.read_text())
    assert set(data["identity"]) == {"model", "served", "server", "checks", "repository"}
    del data["identity"]
    golden.write_text(json.dumps(data))
    out = tmp_path / "gate"
    args = ["gate", str(config), "--candidate", h.shas[-1], "--golden", str(golden),
            "--out", str(out)]  # fmt: skip
    code, output = invoke(*args)
    assert code == 128, output
    assert output.strip().splitlines() == [
        f"llm-bisect: error: golden: '{golden}' does not say what it was recorded with (an "
        f"older llm-bisect); {RECORD_ANEW.format(h.shas[0][:12])}"
    ]
    code, output = invoke(*args, "--record")
    assert code == 0, output
    assert gate_of(out).golden.recorded and "identity" in json.loads(golden.read_text())


def test_the_reproduce_line_runs_as_printed_from_another_folder(tmp_path: Path) -> None:
    """A gate run in CI's way (relative config, golden and `--repo`, the config's own
    candidates.repo not there): its report's command, pasted into `sh` in another folder,
    gates the same candidate to the same decision."""
    work = tmp_path / "work"
    h = History(work, {4: "degenerate-content"}, 4)
    h.config(candidates={"repo": "./not-a-clone"}, checks=[{"type": "canary"}])
    env = cli_on_path(tmp_path / "bin")

    def cli(*args: str, cwd: Path = work) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "llm_bisect.cli", *args], cwd=cwd, env=env,
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip

    recorded = cli("golden", "config-1.yaml", "--repo", "engine", "--candidate", h.shas[0])
    assert recorded.returncode == 0, recorded.stderr
    gated = cli(
        "gate", "config-1.yaml", "--repo", "engine", "--candidate", h.shas[4],
        "--golden", "golden.json", "--out", "gate",
    )  # fmt: skip
    assert gated.returncode == 1, gated.stderr
    ((line, code),) = printed_commands((work / "gate" / "report.md").read_text())
    assert code == 1 and f"--repo {h.repo}" in line and f"--golden {work}/golden.json" in line
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    again = subprocess.run(
        ["sh", "-c", line], cwd=elsewhere, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert again.returncode == 1, f"{line}\n{again.stdout}{again.stderr}"
    assert gate_of(elsewhere / "llm-bisect-gate").decision == "block"


def test_the_gate_dates_its_document_by_the_clock_it_is_given(tmp_path: Path, history: Any) -> None:
    h: History = history({12: "degenerate-reasoning"}, n=16)
    config = h.config()
    golden = record(h, config, tmp_path)
    ticks = iter(range(1_000, 2_000))
    s = setup(config, os.environ, now=lambda: float(next(ticks)))
    doc = run_gate(s, h.shas[6], tmp_path / "gate", TerminalProgress(), GateAsk(golden))
    assert doc.decision == "allow"
    assert doc.started_at == 1_000.0 and 1_000.0 < doc.ended_at < 2_000.0
    assert gate_of(tmp_path / "gate").started_at == 1_000.0


PLANTED_KEY = "sk-plantedGateKey4711"


def test_the_gate_report_stands_alone_in_an_issue_as_the_run_report_does(tmp_path: Path) -> None:
    """A blocked gate's report.md, pasted into an issue with golden.json attached and its
    embedded config saved as config.yaml: the backends are on the first screen, its portable
    lines (the gate, `check` of the candidate and of the golden's build, by the attachments'
    names) exit as they say in a folder of their own, and the canary's `curl` sends the
    server's API key from the reader's environment by its name, never its value."""
    h = History(tmp_path / "work", {3: "degenerate-content"}, 4)
    config = h.config(
        server={"command": [*sim_command(h.repo), "--api-key", PLANTED_KEY]},
        checks=[{"type": "canary"}, {"type": "expect"}],
    )
    golden = record(h, config, tmp_path)
    out = tmp_path / "gate"
    code, output = invoke("gate", str(config), "--candidate", h.shas[3], "--golden", str(golden),
                          "--out", str(out))  # fmt: skip
    assert code == 1, output
    md = (out / "report.md").read_text()
    shown = github_render(md)
    assert shown.problems == []
    assert "- backends (golden → candidate): attention `FLASH_ATTN`" in first_screen(md), md
    assert "### Away from this machine" in md and "attach `golden.json`" in md
    assert "<summary><b>config.yaml</b>" in md
    (embedded,) = [c for info, c in shown.fences if info == "yaml"]
    issue = tmp_path / "issue"
    issue.mkdir()
    (issue / "config.yaml").write_text(embedded)
    shutil.copy(golden, issue / "golden.json")
    subprocess.run(["git", "clone", "-q", str(h.repo), str(issue / "repo")], check=True)
    commands = printed_commands(md, "sh")
    assert [shell_words(line, tmp_path)[:3] for line, _ in commands] == [
        ["llm-bisect", "gate", "config.yaml"], *[["llm-bisect", "check", "config.yaml"]] * 2
    ]  # fmt: skip
    assert [code for _, code in commands] == [1, 1, 0]
    assert not [line for line, _ in commands if str(tmp_path) in line]
    env = cli_on_path(tmp_path / "bin")
    for line, said in commands:
        done = subprocess.run(["sh", "-c", line], cwd=issue, env=env, capture_output=True,
                              text=True, timeout=300, check=False)  # fmt: skip
        assert done.returncode == said, f"{line}\n{done.stdout}{done.stderr}"
    (curl,) = [x for info, c in shown.fences if info == "sh" for x in c.splitlines()
               if x.startswith("curl ")]  # fmt: skip
    assert curl.endswith('-H "Authorization: Bearer ${LLM_BISECT_API_KEY}"'), curl
    words = subprocess.run(["sh", "-c", "printf '%s\\0' " + curl], capture_output=True,
                           env={"LLM_BISECT_API_KEY": "readers-own"}, check=True)  # fmt: skip
    assert "Authorization: Bearer readers-own" in words.stdout.decode().split("\0")
    for path in [*out.rglob("*"), *issue.glob("*.*")]:
        if path.is_file():
            assert PLANTED_KEY.encode() not in path.read_bytes(), path
    assert live_processes(str(h.repo)) == []
