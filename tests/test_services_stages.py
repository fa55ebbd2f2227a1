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
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in differences(x, y, f"{where}[{i}]")
        ]
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


def test_the_culprit_and_the_last_good_run_every_check_for_the_report(tmp_path: Path) -> None:
    """`probe.early_stop` (the default) stops the culprit's probe at its first failed check;
    after the search it is probed again with every check, once, and the report's evidence is
    its own: the token-id / logprob diff, accuracy, answers with content null against the
    golden's, NaN/Inf on both sides; report.html plots the culprit's logprobs. (The culprit,
    6, is probed before the last good, 5: its verdict alone did not end the search.)"""
    h = History(tmp_path, {6: "null-content"}, 8)
    launches = tmp_path / "launches"
    config = h.config(server={"command": [*sim_command(h.repo), "--launch-log", str(launches)]})
    out = tmp_path / "out"
    done = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert done.exit_code == 0, done.output
    culprit, last_good = h.shas[6], h.shas[5]
    doc = json.loads((out / "result.json").read_text())
    assert doc["culprit"]["commit"] == culprit
    searched = [p for p in doc["probes"] if p["commit"] == culprit]
    assert searched and searched[-1]["not_run"], searched  # its suite stopped early
    report = (out / "report.md").read_text()
    evidence = report.split("## Evidence")[1].split("\n## ")[0]
    assert "#### First divergence from the golden (logprobs)" in evidence, evidence
    assert f"per position: {culprit[:12]}" in (out / "report.html").read_text()
    assert "eval; every check run after the search: see Evidence)" in report  # the probe table
    (full,) = doc["decisive"]
    assert full["commit"] == culprit and full["verdict"] == "bad" and not full.get("not_run")
    assert [c["name"] for c in full["checks"]] == [c["name"] for c in doc["probes"][0]["checks"]]
    eval_ = next(c for c in full["checks"] if c["name"] == "eval")["details"]
    n = eval_["metrics"]["n"]
    nulls = eval_["metrics"]["null_content"]
    assert nulls > 0 and eval_["golden_null_content"] == 0
    assert (f"`{culprit[:12]}`: accuracy {eval_['metrics']['accuracy']:.1%}" in evidence
            and f"{nulls:,} of {n:,} replies with content null; golden 0 of {n:,} replies"
            in evidence), evidence  # fmt: skip
    assert f"`{last_good[:12]}`: accuracy" in evidence, evidence
    assert f"`{culprit[:12]}`: 0 logprob position(s) NaN or Inf" in evidence, evidence
    assert f"`{last_good[:12]}`: 0 logprob position(s) NaN or Inf" in evidence, evidence
    # once: the same command again (it resumes) and `report DIR` start nothing, say the same
    before = launches.read_text().split()
    # the search's probe, the full one, localisation's (`localize`, on by default)
    assert before.count(culprit) == 3, before
    assert CliRunner().invoke(cli, ["run", str(config), "--out", str(out)]).exit_code == 0
    assert launches.read_text().split() == before
    doc = json.loads((out / "result.json").read_text())  # the resumed run's (its own end time)
    report = (out / "report.md").read_text()
    assert [p["commit"] for p in doc["decisive"]] == [culprit]
    (out / "result.json").unlink()
    assert CliRunner().invoke(cli, ["report", str(out)]).exit_code == 0
    assert differences(doc, json.loads((out / "result.json").read_text())) == []
    assert (out / "report.md").read_text() == report


def test_a_probe_whose_verdict_ends_the_search_runs_every_check_and_is_not_started_again(
    tmp_path: Path,
) -> None:
    """The culprit, 5, is the search's last probe: bad or good, its verdict ends the search,
    so its suite runs whole then (early stop is for the probes in between) and the evidence
    is that probe's: the build starts once for the search, once for localisation, and no
    more (it was three starts: the search's, the full suite's, localisation's)."""
    h = History(tmp_path, {5: "null-content"}, 8)
    launches = tmp_path / "launches"
    config = h.config(server={"command": [*sim_command(h.repo), "--launch-log", str(launches)]})
    out = tmp_path / "out"
    done = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert done.exit_code == 0, done.output
    culprit = h.shas[5]
    doc = json.loads((out / "result.json").read_text())
    assert doc["culprit"]["commit"] == culprit
    (searched,) = [p for p in doc["probes"] if p["commit"] == culprit]
    assert not searched.get("not_run"), searched  # every check ran
    assert [c["name"] for c in searched["checks"]] == ["canary", "expect", "logprobs", "eval"]
    middle = [p for p in doc["probes"] if p["verdict"] == "bad" and p["commit"] != h.shas[-1]]
    assert any(p.get("not_run") for p in middle), middle  # early stop still cut the others
    assert launches.read_text().split().count(culprit) == 2, launches.read_text()
    assert "again with every check" not in done.output, done.output
    report = (out / "report.md").read_text()
    evidence = report.split("## Evidence")[1].split("\n## ")[0]
    assert "#### First divergence from the golden (logprobs)" in evidence, evidence
    assert "replies with content null; golden 0" in evidence, evidence
