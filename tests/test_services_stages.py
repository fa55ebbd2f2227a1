"""The post-run stages as one list (services/stages.py): `report DIR` restores every stage's
part of DIR, so the result.json it writes is the one the run wrote."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from helpers import History, sim_command
from llm_bisect.cli import cli

SPACED = {"fault_spacer": 0, "fault_when": []}  # keeps the two culprits' lines apart
SECOND = {"fault_when": [{"flags": {}, "env": {}, "fault": "null-content"}]}


def differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Every key path where two JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [
            d
            for k in sorted({*a, *b})
            for d in (
                differences(a[k], b[k], f"{where}.{k}")
                if k in a and k in b
                else [f"{where}.{k}: only in {'the run' if k in a else 'report'}"]
            )
        ]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def test_report_rewrites_the_result_json_the_run_wrote_every_section_included(
    tmp_path: Path,
) -> None:
    # commit 5 breaks the canary, commit 9 adds null content: the culprit (5) is not
    # confirmed (its revert stays bad), `confirm: continue` names 9; a later build (12) is
    # probed; the search ran first in a fast setup
    h = History(tmp_path, {5: "degenerate-content"}, 12, settings=SPACED, changes={9: SECOND})
    subprocess.run(["git", "-C", str(h.repo), "tag", "v0.28.0", h.shas[12]], check=True)
    command = [*sim_command(h.repo), "--max-model-len", "4096"]
    config = h.config(
        bad=h.shas[10],
        server={"command": command},
        checks=[{"type": "canary"}, {"type": "expect"}],
        probe={"fast": {"args": ["--max-model-len", "256"], "env": {"SIM_FAST": "1"}}},
        confirm="continue",
        candidates={"later": ["v0.28.0"]},
        localize=False,
    )
    out = tmp_path / "out"
    done = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert done.exit_code == 0, done.output
    written = json.loads((out / "result.json").read_text())
    assert written["fast"]["reproduced"], written["fast"]
    assert written["confirmation"]["status"] == "not-confirmed"
    assert written["confirmation"]["continued"]["culprit"] == h.shas[9]
    assert [x["ref"] for x in written["later"]] == ["v0.28.0"]
    report = (out / "report.md").read_text()
    (out / "result.json").unlink()
    (out / "report.md").unlink()
    again = CliRunner().invoke(cli, ["report", str(out)])
    assert again.exit_code == done.exit_code, again.output
    rewritten = json.loads((out / "result.json").read_text())
    assert differences(written, rewritten) == []
    assert (out / "report.md").read_text() == report
