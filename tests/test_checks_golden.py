"""Golden, calibration and the detection table on the simulator: each fault, each check."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from helpers import History, cli_bounded, live_processes
from llm_bisect.checks.golden import load, schema
from llm_bisect.cli import cli
from llm_bisect.errors import ConfigError
from llm_bisect.services.bisection import check_one
from llm_bisect.services.golden import record_golden
from llm_bisect.services.setup import setup
from llm_bisect.terminal import TerminalProgress

FAULTS = [
    "none",
    "kernel-noise",
    "numerics",
    "reasoning-parser",
    "degenerate-reasoning",
    "degenerate-content",
    "garbled-math",
    "eos-ignored",
    "nan-logprobs",
]
CAUGHT = {
    # fault: the checks that must fail (all others must pass)
    "none": set(),
    "kernel-noise": set(),
    "numerics": {"logprobs", "eval"},
    "reasoning-parser": {"canary", "expect", "logprobs", "eval"},
    "degenerate-reasoning": {"canary", "logprobs", "eval"},
    "degenerate-content": {"canary", "expect", "logprobs", "eval"},
    "garbled-math": {"expect"},
    "eos-ignored": {"canary", "expect", "logprobs", "eval"},
    "nan-logprobs": {"logprobs"},  # the text is the golden's: only the numbers tell
}


def faulty_history(history: Any) -> History:
    """Commit i serves FAULTS[i] (commit 0 the good build)."""
    h: History = history({i: f for i, f in enumerate(FAULTS)}, n=len(FAULTS) - 1)
    return h


def test_calibrate_records_the_golden_and_the_noise_floor(tmp_path: Path, history: Any) -> None:
    h = faulty_history(history)
    golden = tmp_path / "golden.json"
    result = CliRunner().invoke(
        cli,
        [
            "calibrate",
            str(h.config()),
            "--candidate",
            h.shas[0],
            "-o",
            str(golden),
            "--runs",
            "2",
            "--restarts",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "calibrated over 4 runs, 2 server start(s)" in result.output
    assert "good-vs-good: 0 of 4 runs flagged" in result.output, result.output
    data = json.loads(golden.read_text())
    assert data["commit"] == h.shas[0]
    case = data["checks"]["logprobs"]["cases"][0]
    assert (
        case["token_ids"]
        and case["prompt_token_ids"]
        and len(case["teacher"]) == len(case["token_ids"])
    )
    assert data["checks"]["eval"]["n"] == 64 and 0.8 < data["checks"]["eval"]["accuracy"] < 1
    assert data["calibration"]["runs"] == 4
    assert data["calibration"]["logprobs"]["max_abs_delta"] == 0.0  # the simulator is deterministic
    assert "logprobs.max_abs_delta <= 0.1  (calibration (0.0000 x 3))" in result.output
    # its restart read the good build good: the posterior search (flake auto) of a run judged
    # by this golden weighs that as it weighs its own verdicts (the journal's policy says it)
    assert data["calibration"]["flagged_restarts"] == 0
    out = tmp_path / "run"
    config = h.config(golden=str(golden), search={"flake": "auto"}, localize=False)
    ran = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert ran.exit_code == 0, ran.output
    (begun,) = [e for e in map(json.loads, (out / "journal.jsonl").read_text().splitlines())
                if e["event"] == "run"]  # fmt: skip
    assert begun["search"]["calibrated"] == [0, 1], begun["search"]


def test_detection_table_on_the_simulator(tmp_path: Path, history: Any) -> None:
    h = faulty_history(history)
    env = dict(os.environ)  # PYTHONPATH: the simulator of this source tree
    s = setup(h.config(), env)
    golden = tmp_path / "golden.json"
    record_golden(s, h.shas[0], golden, tmp_path / "g")
    table = {}
    for i, fault in enumerate(FAULTS):
        s = setup(h.config(), env)
        out = tmp_path / fault  # every check runs: the table is what each one catches
        _, outcome = check_one(s, h.shas[i], out, TerminalProgress(), golden, whole=True)
        table[fault] = {c.name for c in outcome.checks if not c.passed}
        assert table[fault] == CAUGHT[fault], (fault, outcome.reason)
        assert (outcome.verdict.value == "good") == (not CAUGHT[fault])


def test_the_golden_is_a_typed_document_with_a_published_schema(tmp_path: Path) -> None:
    shipped = Path(__file__).parent.parent / "schemas" / "golden.schema.json"
    assert json.loads(shipped.read_text()) == schema(), "regenerate schemas/golden.schema.json"
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"version": 1, "commit": "a" * 40, "checks": {}}))
    with pytest.raises(ConfigError, match="is version 1, this llm-bisect reads version 2"):
        load(old)


def test_a_logprobs_failure_shows_where_and_how_the_tokens_part(
    tmp_path: Path, history: Any
) -> None:
    h: History = history({0: "none", 3: "numerics"}, n=4)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli, ["run", str(h.config(checks=[{"type": "logprobs"}])), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "result.json").read_text())
    bad = next(p for p in doc["probes"] if p["commit"] == h.shas[3])
    case = bad["checks"][0]["details"]["cases"][0]
    d = case["divergence"]
    assert d["position"] == 3
    golden_text, now_text = d["golden"]["text"], d["candidate"]["text"]
    assert golden_text and now_text and golden_text != now_text  # from /detokenize
    assert d["golden"]["token"] != d["candidate"]["token"] and d["candidate"]["top"]
    assert case["teacher_mean_abs_delta"] > 0.5
    report = (out / "report.md").read_text()
    assert "First divergence from the golden" in report
    assert repr(now_text) in report


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_golden_that_is_no_regular_file_is_one_line(
    tmp_path: Path, history: Any, kind: str
) -> None:
    """`--golden` naming a FIFO used to hang `check` forever; /dev/zero to read until killed."""
    h: History = history({}, n=2)
    golden = tmp_path / "golden.json"
    if kind == "fifo":
        os.mkfifo(golden)
    else:
        golden.symlink_to("/dev/zero")
    config = str(h.config(checks=[{"type": "canary"}]))
    code, output = cli_bounded("check", config, "--candidate", h.shas[1], "--golden", str(golden))
    assert code == 128, output
    assert output.strip().splitlines() == [
        f"llm-bisect: error: golden: cannot read '{golden}' (not a regular file: a {kind})"
    ]
    assert live_processes(str(h.repo)) == []
