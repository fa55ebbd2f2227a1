"""Confirmation: after a run names its culprit, the bad end with it reverted and the good end
with it picked are made as commits and probed (the simulator plays each commit's
sim-engine.json, one key a line, so a revert applies over later commits as in a real tree)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from helpers import History, printed_after, run_as_printed, sim_command
from llm_bisect.cli import cli
from llm_bisect.model import Verdict
from llm_bisect.services.confirm import Trial, confirmation, placed, trial_places

TWO_CHECKS = [{"type": "canary"}, {"type": "expect"}]
SPACED = {"fault_spacer": 0, "fault_when": []}  # keeps the two culprits' lines apart


def assert_report_rebuilds_the_search(out: Path) -> None:
    """`report DIR` with result.json gone writes the same `search` section from the journal."""
    before = json.loads((out / "result.json").read_text())
    (out / "result.json").unlink()
    assert CliRunner().invoke(cli, ["report", str(out)]).exit_code == 0
    assert json.loads((out / "result.json").read_text())["search"] == before["search"]


def run(h: History, tmp_path: Path, **over: Any) -> tuple[int, str, dict[str, Any], list[str]]:
    launches = tmp_path / "launches"
    config = h.config(
        server={"command": [*sim_command(h.repo), "--launch-log", str(launches)]},
        checks=[{"type": "canary"}, {"type": "expect"}],
        **over,
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    doc = json.loads((out / "result.json").read_text())
    return result.exit_code, result.output, doc, launches.read_text().split()


def test_a_lone_culprit_is_confirmed_by_its_revert_and_its_pick(tmp_path: Path) -> None:
    h = History(tmp_path, {9: "degenerate-content"}, 16, settings=SPACED)
    code, output, doc, launches = run(h, tmp_path)
    assert code == 0, output
    assert doc["culprit"]["commit"] == h.shas[9]
    found = doc["confirmation"]
    assert found["status"] == "confirmed", found
    assert found["reason"] == (
        "reverting it fixes the bad end; picking it onto the good end breaks it"
    )
    revert, pick = found["probes"]
    assert (revert["kind"], revert["onto"], revert["verdict"]) == ("revert", h.shas[-1], "good")
    assert (pick["kind"], pick["onto"], pick["verdict"]) == ("pick", h.shas[0], "bad")
    assert revert["commit"] in launches and pick["commit"] in launches  # probed, both
    refs = subprocess.run(
        [
            "git",
            "-C",
            str(h.repo),
            "for-each-ref",
            "--format=%(objectname)",
            "refs/llm-bisect/confirm/",
        ],
        capture_output=True,
        text=True,
    ).stdout
    assert set(refs.split()) == {revert["commit"], pick["commit"]}
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Confirmation" in report and "**confirmed**" in report
    # run again: read back from the journals, nothing probed anew; `report` keeps it
    code, _, again, relaunched = run(h, tmp_path)
    assert code == 0 and again["confirmation"] == found and relaunched == launches
    assert CliRunner().invoke(cli, ["report", str(tmp_path / "out")]).exit_code == 0
    assert json.loads((tmp_path / "out" / "result.json").read_text())["confirmation"] == found


def test_a_second_regression_after_the_culprit_is_said(tmp_path: Path) -> None:
    second = {"fault_when": [{"flags": {}, "env": {}, "fault": "null-content"}]}
    h = History(tmp_path, {5: "degenerate-content"}, 12, settings=SPACED, changes={9: second})
    code, output, doc, _ = run(h, tmp_path, search={"culprits": 1})
    assert code == 0, output
    assert doc["culprit"]["commit"] == h.shas[5]
    found = doc["confirmation"]
    assert found["status"] == "not-confirmed"
    assert found["reason"].startswith("reverting it does not fix the bad build")
    assert found["probes"][0]["verdict"] == "bad"
    pick = found["probes"][1]  # a pick cannot change "not confirmed": no probe spent on it
    assert (
        pick["commit"] is None and pick["reason"] == "not tried: the revert was bad: not confirmed"
    )


def test_a_revert_that_does_not_apply_cannot_confirm_and_costs_no_probe(tmp_path: Path) -> None:
    h = History(tmp_path, {5: "degenerate-content", 9: "null-content"}, 12)
    code, output, doc, launches = run(h, tmp_path)
    assert code == 0, output
    found = doc["confirmation"]
    assert found["status"] == "cannot-confirm"
    assert "sim-engine.json: the change does not apply here (a conflict)" in found["reason"]
    assert [p["commit"] for p in found["probes"]] == [None, None]
    assert set(launches) == {p["commit"] for p in doc["probes"]}  # the run's commits only
    # the posterior search stopped for trials that cannot run: it goes on by its probes to
    # the confidence, and says so (no look weighed)
    code, output, doc, launches = run(h, tmp_path / "auto", search={"flake": "auto"})
    assert code == 0 and doc["culprit"]["commit"] == h.shas[5], output
    assert doc["confirmation"]["status"] == "cannot-confirm"
    assert doc["search"]["posterior"] >= 0.99 and doc["culprit"]["posterior"] >= 0.99
    assert not doc["search"].get("looks") and not doc["search"].get("evidence")
    assert set(launches) == {p["commit"] for p in doc["probes"]}


def test_confirm_false_spends_nothing(tmp_path: Path) -> None:
    h = History(tmp_path, {9: "degenerate-content"}, 16)
    code, _, doc, launches = run(h, tmp_path, confirm=False)
    assert code == 0 and doc.get("confirmation") is None
    assert set(launches) == {p["commit"] for p in doc["probes"]}


def test_confirm_continue_bisects_the_reverted_line_to_the_next_regression(
    tmp_path: Path,
) -> None:
    second = {"fault_when": [{"flags": {}, "env": {}, "fault": "null-content"}]}
    h = History(tmp_path, {5: "degenerate-content"}, 12, settings=SPACED, changes={9: second})
    code, output, doc, _ = run(h, tmp_path, confirm="continue")
    assert code == 0, output
    found = doc["confirmation"]
    assert found["status"] == "not-confirmed"
    went_on = found["continued"]
    assert went_on["status"] == "found" and went_on["culprit"] == h.shas[9], went_on
    assert went_on["message"].startswith(f"{h.shas[9][:12]} ")
    nested = json.loads((tmp_path / "out" / "continued" / "result.json").read_text())
    assert nested["confirmation"]["status"] == "confirmed"  # the second one, alone, is it
    assert "Bisected on the reverted line" in (tmp_path / "out" / "report.md").read_text()


def test_what_each_pair_of_trials_says() -> None:
    from llm_bisect.model import Verdict
    from llm_bisect.services.confirm import Trial, judge

    g, b = "a" * 40, "b" * 40
    good, bad = Verdict.GOOD, Verdict.BAD
    assert judge(Trial("revert", b, "c" * 40, good, ""), Trial("pick", g, "d" * 40, bad, "")) == (
        "confirmed",
        "reverting it fixes the bad end; picking it onto the good end breaks it",
    )
    reused = judge(Trial("revert", b, "c" * 40, good, "", reused=g),
                   Trial("pick", g, "d" * 40, bad, "", reused=b))  # fmt: skip
    assert reused[0] == "confirmed" and reused[1].startswith("by the run's own probes only")
    alone = judge(Trial("revert", b, "c" * 40, good, ""), Trial("pick", g, None, None, "conflict"))
    assert alone == ("confirmed", "by the revert alone: reverting it fixes the bad end "
                     "(the pick: conflict)")  # fmt: skip
    assert judge(Trial("revert", b, None, None, "x: a conflict"),
                 Trial("pick", g, None, None, ""))[0] == "cannot-confirm"  # fmt: skip
    assert judge(Trial("revert", b, "c" * 40, good, ""),
                 Trial("pick", g, "d" * 40, good, ""))[0] == "not-confirmed"  # fmt: skip


def test_a_culprit_that_bumps_a_pin_names_it_and_the_deps_command(tmp_path: Path) -> None:
    h = History(tmp_path, {}, 2, settings=SPACED)
    engine = json.loads((h.repo / "sim-engine.json").read_text())

    def step(message: str, pin: str, fault: str) -> str:
        (h.repo / "requirements").mkdir(exist_ok=True)
        (h.repo / "requirements" / "cuda.txt").write_text(
            f"torch==2.13.0\nflashinfer-python=={pin}\n"
        )
        (h.repo / "sim-engine.json").write_text(json.dumps({**engine, "fault": fault}, indent=1,
                                                           sort_keys=True) + "\n")  # fmt: skip
        subprocess.run(["git", "-C", str(h.repo), "add", "-A"], check=True)
        subprocess.run(["git", "-C", str(h.repo), "-c", "user.name=t", "-c", "user.email=t@t",
                        "commit", "--allow-empty", "-qm", message], check=True)  # fmt: skip
        return subprocess.run(["git", "-C", str(h.repo), "rev-parse", "HEAD"], text=True,
                              capture_output=True, check=True).stdout.strip()  # fmt: skip

    good = step("pin flashinfer", "0.6.15.post1", "none")
    culprit = step("Bump Flashinfer version to 0.6.16.post3", "0.6.16.post3", "degenerate-content")
    h.shas += [good, culprit, step("[Doc] later", "0.6.16.post3", "degenerate-content")]
    code, output, doc, _ = run(h, tmp_path)
    assert code == 0, output
    assert doc["culprit"]["commit"] == culprit
    assert [b["label"] for b in doc["bumps"]] == ["flashinfer-python 0.6.15.post1 → 0.6.16.post3"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Dependencies it bumps" in report
    config = tmp_path / f"config-{h.configs}.yaml"
    assert (f"llm-bisect deps {config} --build '{culprit}^' --package flashinfer-python "
            "--good 0.6.15.post1 --bad 0.6.16.post3") in report  # fmt: skip
    assert CliRunner().invoke(cli, ["report", str(tmp_path / "out")]).exit_code == 0
    assert "## Dependencies it bumps" in (tmp_path / "out" / "report.md").read_text()


def test_confirm_continue_set_after_a_not_confirmed_run_resumes_it(tmp_path: Path) -> None:
    second = {"fault_when": [{"flags": {}, "env": {}, "fault": "null-content"}]}
    h = History(tmp_path, {5: "degenerate-content"}, 12, settings=SPACED, changes={9: second})
    code, output, doc, first = run(h, tmp_path, search={"culprits": 1})
    assert code == 0, output
    assert doc["confirmation"]["status"] == "not-confirmed"
    code, output, doc, launches = run(h, tmp_path, confirm="continue", search={"culprits": 1})
    assert code == 0, output
    again = launches[len(first) :]
    assert again and not set(again) & set(first), again  # nothing of the first run probed anew
    went_on = doc["confirmation"]["continued"]
    assert went_on["status"] == "found" and went_on["culprit"] == h.shas[9], went_on


def test_the_printed_continue_command_runs_as_printed_with_a_config_golden(
    tmp_path: Path,
) -> None:
    """With `golden: golden.json`, `confirm: continue` once exited 2 (the bisection of the
    reverted line took the config's golden, not of its good end). The printed next step,
    `confirm: continue` set and the command pasted into `sh` in another folder, bisects what
    remains and names the second regression."""
    second = {"fault_when": [{"flags": {}, "env": {}, "fault": "null-content"}]}
    h = History(tmp_path, {5: "degenerate-content"}, 12, settings=SPACED, changes={9: second})
    config = h.config(server={"command": sim_command(h.repo)}, golden="golden.json",
                      checks=[{"type": "canary"}, {"type": "expect"}],
                      search={"culprits": 1})  # fmt: skip
    made = CliRunner().invoke(cli, ["golden", str(config), "--candidate", h.shas[0]])
    assert made.exit_code == 0 and (tmp_path / "golden.json").is_file(), made.output
    out = tmp_path / "out"
    first = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert first.exit_code == 0, first.output
    doc = json.loads((out / "result.json").read_text())
    assert doc["confirmation"]["status"] == "not-confirmed"
    line = printed_after(first.output, "run the same command again (it resumes): ")
    data = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**data, "confirm": "continue"}, sort_keys=False))
    went = run_as_printed(line, tmp_path / "elsewhere", tmp_path / "bin")
    assert went.returncode == 0, went.stdout + went.stderr
    doc = json.loads((out / "result.json").read_text())
    continued = doc["confirmation"]["continued"]
    assert continued["status"] == "found" and continued["culprit"] == h.shas[9], continued
    assert (out / "continued" / "golden.json").is_file()


def test_a_culprit_a_lie_made_is_not_confirmed_and_the_search_probes_on_to_the_real_one(
    tmp_path: Path,
) -> None:
    # commit 16's first two starts serve the bad side: the search names 16; its
    # revert does not fix the bad end, and that trial is weighed as evidence: 16's posterior
    # falls, the search probes on and names 17, which its trials confirm. Exit 0 only then,
    # and the confirmation says a verdict on the way was wrong, naming it.
    h = History(tmp_path, {17: "degenerate-content"}, 24)
    lie = ["--lie-on", f"{h.shas[16]}:2"]
    launches = tmp_path / "launches"
    config = h.config(
        server={"command": [*sim_command(h.repo), "--launch-log", str(launches), *lie]},
        checks=[{"type": "canary"}, {"type": "expect"}],
        search={"flake": "auto"},
        localize={"enabled": False},
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "result.json").read_text())
    assert doc["status"] == "found" and doc["culprit"]["commit"] == h.shas[17]
    assert doc["confirmation"]["status"] == "confirmed"
    assert "are weighed as evidence" in result.output
    # the search went on twice after looks, in this process: nothing of it was resumed
    assert "resumed from the journal" not in result.output, result.output
    assert doc["search"]["confidence"] == 0.99
    # every look's trials are weighed: 16's revert stays bad on a new start too (17, after
    # it, is in the bad end: the trial is right), so the search probes on to 17, whose
    # trials bear it out and carry it to the confidence
    said = [(e["commit"], e["kind"], e["verdict"]) for e in doc["search"]["evidence"]]
    # 17's revert must read good on two starts (posterior.reverts_hold): a second look
    assert said == [(h.shas[16], "revert", "bad"), (h.shas[16], "revert", "bad"),
                    (h.shas[17], "revert", "good"), (h.shas[17], "pick", "bad"),
                    (h.shas[17], "revert", "good"), (h.shas[17], "pick", "bad")], said  # fmt: skip
    assert doc["search"]["posterior"] >= 0.99
    assert any(d["commit"] == h.shas[16] for d in doc["search"]["disagreed"])
    reason = doc["confirmation"]["reason"]
    wrong = f"a verdict on the way was probably wrong ({h.shas[16][:12]} was probed again: "
    assert wrong + "bad, bad, good" in reason, reason
    assert "another regression" not in reason
    # the same command again starts nothing (the journal keeps the trials weighed and the
    # second look's confirmation), and says the same; so does `report DIR`
    starts = launches.read_text().split()
    again = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert launches.read_text().split() == starts
    resumed = f"{len(doc['probes'])} finished probe(s) resumed from the journal"
    assert again.output.count("resumed from the journal") == 1, again.output
    assert resumed in again.output, again.output
    for rewritten in (again, CliRunner().invoke(cli, ["report", str(out)])):
        assert rewritten.exit_code == 0, rewritten.output
        later = json.loads((out / "result.json").read_text())
        for key in ("status", "message", "culprit", "confirmation", "search", "probes"):
            assert later[key] == doc[key], key


def test_a_second_regression_with_one_culprit_allowed_ends_ambiguous_not_found(
    tmp_path: Path,
) -> None:
    # two real steps, `search.culprits: 1` (the behaviour before several culprits): the
    # culprit's verdicts hold when probed again, its revert stays bad; never `found` with
    # exit 0, the message says it is more than one step, and nothing after it is bisected
    second = {"fault_when": [{"flags": {}, "env": {}, "fault": "null-content"}]}
    h = History(tmp_path, {5: "degenerate-content"}, 12, settings=SPACED, changes={9: second})
    code, output, doc, _ = run(h, tmp_path, search={"flake": "auto", "culprits": 1})
    assert code == 3, output
    assert not doc.get("culprits") and not doc.get("together")
    assert not (tmp_path / "out" / "continued").exists()
    assert doc["confirmation"].get("continued") is None
    assert doc["status"] == "ambiguous" and doc["culprit"]["commit"] == h.shas[5]
    assert doc["confirmation"]["status"] == "not-confirmed"
    assert "supports more than one step" in doc["message"]
    assert "another regression lies after it" in doc["message"]
    assert "supports more than one step" in (tmp_path / "out" / "report.md").read_text()
    # `report DIR` rebuilds it as the run ended it: ambiguous, never found with exit 0
    report = CliRunner().invoke(cli, ["report", str(tmp_path / "out")])
    assert report.exit_code == 3, report.output
    rebuilt = json.loads((tmp_path / "out" / "result.json").read_text())
    assert (rebuilt["status"], rebuilt["message"]) == (doc["status"], doc["message"])


def test_two_regressions_are_both_named_and_confirmed_together_by_default(
    tmp_path: Path,
) -> None:
    # two real steps, nothing lying, the defaults (`search.culprits: 3`, the posterior
    # search): the first culprit's revert leaves the bad end bad and holds, so the run goes
    # on after it with it reverted and names the second; the bad end with both reverted is
    # good, and only that is "confirmed": exit 0, both named, each with its evidence
    second = {"fault_when": [{"flags": {}, "env": {}, "fault": "null-content"}]}
    h = History(tmp_path, {5: "degenerate-content"}, 12, settings=SPACED, changes={9: second})
    code, output, doc, launches = run(h, tmp_path, search={"flake": "auto"})
    assert code == 0, output
    assert doc["status"] == "found" and doc["culprit"]["commit"] == h.shas[5]
    first, then = doc["culprits"]
    assert (first["commit"], then["commit"]) == (h.shas[5], h.shas[9])
    assert (first["reverted"], then["reverted"]) == ([], [h.shas[5]])
    assert then["bisection"] == "continued/result.json" and then["message"]
    assert set(first["verdicts"]) == set(then["verdicts"]) == {"bad"}, doc["culprits"]
    assert set(first["parent_verdicts"]) == set(then["parent_verdicts"]) == {"good"}
    assert then["subject"] == subprocess.run(
        ["git", "-C", str(h.repo), "log", "-1", "--format=%s", h.shas[9]],
        capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    together = doc["together"]
    assert together["status"] == "confirmed", together
    trial = together["trial"]
    assert (trial["kind"], trial["onto"], trial["verdict"]) == ("revert", h.shas[-1], "good")
    assert trial["commit"] in launches and trial["reused"] is None  # it ran, and was good
    assert h.shas[5][:12] in doc["message"] and h.shas[9][:12] in doc["message"]
    assert doc["confirmation"]["status"] == "not-confirmed"  # the first alone: never confirmed
    assert "confirm: confirmed" not in output
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Culprits" in report and h.shas[9][:12] in report
    # `report DIR` rebuilds it as the run ended it
    rebuilt = CliRunner().invoke(cli, ["report", str(tmp_path / "out")])
    assert rebuilt.exit_code == 0, rebuilt.output
    again = json.loads((tmp_path / "out" / "result.json").read_text())
    for key in ("status", "message", "culprits", "together", "confirmation"):
        assert again[key] == doc[key], key


def test_a_revert_that_does_not_apply_after_the_culprit_cannot_confirm_and_stops(
    tmp_path: Path,
) -> None:
    # two real steps; commit 7 changes the line beside the first culprit's and commit 8 takes
    # it back: its revert applies to the bad end (bad: the run goes on) but not to commit 7,
    # so the line without it cannot be made: cannot-confirm, said, and nothing more probed
    second = {"fault_when": [{"flags": {}, "env": {}, "fault": "null-content"}]}
    changes = {7: {"fault_spacer": 1}, 8: {"fault_spacer": 0}, 9: second}
    h = History(tmp_path, {5: "degenerate-content"}, 12, settings=SPACED, changes=changes)
    code, output, doc, launches = run(h, tmp_path, search={"flake": "auto"})
    assert code == 3, output  # never found with exit 0
    assert doc["culprit"]["commit"] == h.shas[5]
    assert doc["confirmation"]["probes"][0]["verdict"] == "bad"
    together = doc["together"]
    assert together["status"] == "cannot-confirm", together
    assert f"revert of {h.shas[5][:12]} onto {h.shas[7][:12]}" in together["reason"]
    assert "the change does not apply here (a conflict)" in together["reason"]
    assert [c["commit"] for c in doc["culprits"]] == [h.shas[5]]
    assert not (tmp_path / "out" / "continued").exists()  # stopped: nothing after it probed
    assert set(launches) <= {p["commit"] for p in doc["probes"]} | {
        t["commit"] for t in doc["confirmation"]["probes"]
    }
    assert "cannot confirm" in doc["message"] and "confirm: confirmed" not in output


def test_a_revert_trial_that_lies_is_outweighed_and_the_culprit_confirmed_on_new_starts(
    tmp_path: Path,
) -> None:
    # the search names 5 with no lie; then the revert's own start lies (it serves the bad
    # side). Its verdict is weighed: 5's posterior falls, 5 and its neighbour are probed
    # again and hold, and the trials on new starts confirm 5: found, exit 0, and the
    # confirmation says the first trial was the lie, not "another regression".
    h = History(tmp_path, {5: "degenerate-content"}, 12)
    code, output, doc, starts = run(h, tmp_path / "honest", search={"flake": "auto"},
                                    localize={"enabled": False})  # fmt: skip
    assert code == 0 and doc["confirmation"]["status"] == "confirmed", output
    # the revert's start: the first that is not a commit of the history (the search's probes
    # come before it; one may follow the trials, which carry the answer only with it)
    searched = next(i for i, commit in enumerate(starts) if commit not in h.shas)
    launches = tmp_path / "launches"
    config = h.config(
        server={"command": [*sim_command(h.repo), "--launch-log", str(launches),
                            "--lie-at", str(searched + 1)]},
        checks=[{"type": "canary"}, {"type": "expect"}],
        search={"flake": "auto"},
        localize={"enabled": False},
    )  # fmt: skip
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "result.json").read_text())
    assert doc["status"] == "found" and doc["culprit"]["commit"] == h.shas[5]
    said = [(e["commit"], e["kind"], e["verdict"]) for e in doc["search"]["evidence"]]
    assert said == [(h.shas[5], "revert", "bad"), (h.shas[5], "revert", "good"),
                    (h.shas[5], "pick", "bad"), (h.shas[5], "revert", "good"),
                    (h.shas[5], "pick", "bad")], said  # every look's trials weighed  # fmt: skip
    assert len(doc["probes"]) > searched  # the search went on after the trial
    reason = doc["confirmation"]["reason"]
    assert doc["confirmation"]["status"] == "confirmed", reason
    assert (
        "not confirmed at first (revert bad" in reason
        and "a first trial was probably wrong" in reason
    )
    assert "another regression" not in reason
    report = (out / "report.md").read_text()
    assert f"weighed as evidence: the revert of `{h.shas[5][:12]}` tested bad" in report
    # `report DIR` rebuilds the same search section from the journal (its evidence included)
    assert_report_rebuilds_the_search(out)


def test_the_search_stops_for_its_confirmation_whose_trials_carry_the_culprit(
    tmp_path: Path,
) -> None:
    # flake auto, no lie: by its probes alone the search doubts its last verdicts and probes
    # its culprit's neighbours again; with a confirmation to follow it stops where the
    # revert and the pick, if they agree, carry the culprit to 0.99. They do: found at the
    # confidence, the trials in the evidence, one look, and fewer search probes than a run
    # without confirmation spends
    h = History(tmp_path, {9: "degenerate-content"}, 24)
    code, output, doc, starts = run(h, tmp_path / "on", search={"flake": "auto"},
                                    localize={"enabled": False})  # fmt: skip
    assert code == 0, output
    assert doc["status"] == "found" and doc["culprit"]["commit"] == h.shas[9]
    search = doc["search"]
    assert search["posterior"] >= 0.99 and doc["confirmation"]["status"] == "confirmed"
    # two looks: a culprit's revert must read good on two starts (posterior.reverts_hold),
    # the first look's trials agreeing is not yet enough
    assert search["looks"] == [
        {"commit": h.shas[9], "confirmed": False},
        {"commit": h.shas[9], "confirmed": True},
    ]
    assert [(t["kind"], t["verdict"]) for t in search["evidence"]] == [
        ("revert", "good"),
        ("pick", "bad"),
    ] * 2
    report = (tmp_path / "on" / "out" / "report.md").read_text()
    said = f"confirmation 2: the search stopped for `{h.shas[9][:12]}`; its trials bore it out"
    assert said in report, report
    code, output, off, _ = run(h, tmp_path / "off", search={"flake": "auto"}, confirm=False,
                               localize={"enabled": False})  # fmt: skip
    assert code == 0 and off["culprit"]["commit"] == h.shas[9], output
    assert len(doc["probes"]) < len(off["probes"]), (len(doc["probes"]), len(off["probes"]))
    # `report DIR` rebuilds the same search section from the journal (look and trials)
    assert_report_rebuilds_the_search(tmp_path / "on" / "out")
    assert h.shas[9] in starts
    # a journal edited so that its evidence names a build it found good: `report DIR` named
    # that build the culprit (exit 0); it and a resume refuse it in one line naming the line
    out = tmp_path / "on" / "out"
    wrong = max((p["commit"] for p in doc["probes"] if p["verdict"] == "good"), key=h.shas.index)
    lines = (out / "journal.jsonl").read_text().splitlines()
    weighed = [
        i for i, line in enumerate(lines) if "evidence" in json.loads(line).get("search", {})
    ]
    for i in weighed:
        event = json.loads(lines[i])
        event["search"]["evidence"] = [{**t, "commit": wrong} for t in event["search"]["evidence"]]
        lines[i] = json.dumps(event)
    (out / "journal.jsonl").write_text("\n".join(lines) + "\n")
    said = (
        f"llm-bisect: error: {out / 'journal.jsonl'}:{weighed[0] + 1}: evidence names the revert "
        f"of {wrong[:12]} tested good, but confirm.jsonl:2 holds the revert of {h.shas[9][:12]} "
        "tested good: the journal contradicts what it was weighed from (move it away to start "
        "the run over)"
    )
    report = CliRunner().invoke(cli, ["report", str(out)])
    assert report.exit_code == 2 and report.output.splitlines() == [said], report.output
    code, output, _, _ = run(h, tmp_path / "on", search={"flake": "auto"},
                             localize={"enabled": False})  # fmt: skip
    assert code == 2 and said in output.splitlines(), output


def _slotted(h: History, tmp_path: Path, k: int, *extra: str) -> tuple[int, str, dict[str, Any]]:
    """A run on k slots of one GPU each (slot i: GPU i), the simulator's `extra` flags."""
    launches = tmp_path / "launches"
    command = [*sim_command(h.repo), "--launch-log", str(launches), *extra]
    config = h.config(
        server={"command": command, "slot_gpus": [[str(i)] for i in range(k)]},
        checks=[{"type": "canary"}, {"type": "expect"}],
        search={"flake": "auto"},
        localize={"enabled": False},
        parallel=k,
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    return result.exit_code, result.output, json.loads((out / "result.json").read_text())


def test_the_trials_run_at_once_each_on_a_slot_of_its_own(tmp_path: Path) -> None:
    # two slots: the revert and the pick start together, one on each slot, so that one bad
    # GPU or one burst of starts cannot give both (before: both on slot 0, one after the other)
    h = History(tmp_path, {9: "degenerate-content"}, 16, settings=SPACED)
    code, output, doc = _slotted(h, tmp_path, 2)
    assert code == 0, output
    assert doc["culprit"]["commit"] == h.shas[9]
    revert, pick = doc["confirmation"]["probes"]
    assert (revert["verdict"], pick["verdict"]) == ("good", "bad")
    assert {revert["slot"], pick["slot"]} == {0, 1}, doc["confirmation"]
    said = [(t["kind"], t["slot"]) for t in doc["search"]["evidence"]]
    # two looks (a culprit's revert reads good on two starts), each at once on both slots
    assert sorted(said[-2:]) == sorted([("revert", revert["slot"]), ("pick", pick["slot"])])
    assert len(said) == 4 and {slot for _, slot in said[:2]} == {0, 1}, said
    assert "confirm: probing the bad end with it reverted" in output and "on slot" in output


def test_on_six_slots_one_look_holds_the_two_reverts_a_culprit_needs(tmp_path: Path) -> None:
    """Six slots, nothing lies: the revert starts twice at once beside the pick, each on a
    slot of its own none of the culprit's and its parent's verdicts ran on, so the culprit is
    confirmed in one round of trials (before: a look of a revert and a pick, then a second
    look on new starts, confirm-again.jsonl, for the second good revert); a resume takes all
    three from the look's journal, none started again."""
    h = History(tmp_path, {9: "degenerate-content"}, 16, settings=SPACED)
    code, output, doc = _slotted(h, tmp_path, 6)
    assert code == 0 and doc["culprit"]["commit"] == h.shas[9], output
    found = doc["confirmation"]
    assert found["status"] == "confirmed", found
    trials = sorted((t["kind"], t["verdict"]) for t in found["probes"])
    assert trials == [("pick", "bad"), ("revert", "good"), ("revert", "good")], found
    named = {p["slot"] for p in doc["probes"] if p["commit"] in (h.shas[8], h.shas[9])}
    places = [t["slot"] for t in found["probes"]]
    assert len(set(places)) == 3 and not set(places) & named, (found, named)
    assert not (tmp_path / "out" / "confirm-again.jsonl").exists()
    assert output.count("confirm: confirmed") == 1, output
    launches = (tmp_path / "launches").read_text().split()
    config = max(tmp_path.rglob("config-*.yaml"), key=lambda c: c.stat().st_mtime)
    again = CliRunner().invoke(cli, ["run", str(config), "--out", str(tmp_path / "out")])
    assert again.exit_code == 0, again.output
    assert (tmp_path / "launches").read_text().split() == launches  # nothing started again
    resumed = json.loads((tmp_path / "out" / "result.json").read_text())["confirmation"]
    assert resumed["probes"] == found["probes"]


def test_a_resumed_look_starts_each_trial_on_the_slot_it_had_not_where_another_ran() -> None:
    """A look killed after its revert ended: the revert's second start and the pick start
    again on the slots they had (before, the trials left were placed from the first slot on:
    the second revert on the first's GPU, where one bad GPU would give both reverts)."""
    slots = placed(4, [0, 0], [], "c")  # the culprit's verdicts ran on slot 0
    kinds = ["revert", "revert-again", "pick"]
    first = trial_places(kinds, slots)
    assert len(set(first.values())) == 3 and 0 not in first.values(), first
    assert trial_places(kinds, slots) == first  # whatever of it is journalled


def test_a_look_whose_two_reverts_disagree_does_not_say_confirmed() -> None:
    """The revert good on one slot and bad on the other, the pick bad: the look is
    not-confirmed (a lie, or another regression after the culprit), not "confirmed" held
    back with a note that its trials agree; both reverts are among its trials."""
    revert = Trial("revert", "bad", "r" * 40, Verdict.GOOD, "", slot=1)
    pick = Trial("pick", "good", "p" * 40, Verdict.BAD, "", slot=3)
    again = Trial("revert", "bad", "r" * 40, Verdict.BAD, "", slot=2)
    found = confirmation(revert, pick, "good", True, None, again)
    assert found.status == "not-confirmed" and "bad on the other" in found.reason, found
    assert [(t.kind, t.slot) for t in found.probes] == [("revert", 1), ("pick", 3), ("revert", 2)]
    agreeing = replace(again, verdict=Verdict.GOOD)
    assert confirmation(revert, pick, "good", True, None, agreeing).status == "confirmed"
    # both bad (another regression after it): the second is left out, not weighed twice
    stays = confirmation(replace(revert, verdict=Verdict.BAD), pick, "good", True, None, again)
    assert [t.kind for t in stays.probes] == ["revert", "pick"], stays


def test_a_gpu_that_lies_on_every_start_never_confirms_a_wrong_culprit(tmp_path: Path) -> None:
    # four slots, GPU 1 serves the other side's behaviour on every start (a bad GPU): the
    # trials never run where the verdicts they check ran, and no answer stands on GPU 1's
    # verdicts alone; the report says what the search assumes of lies
    h = History(tmp_path, {9: "degenerate-content"}, 16, settings=SPACED)
    code, output, doc = _slotted(h, tmp_path, 4, "--lie-gpus", "1:1")
    assert code != 0 or doc["culprit"]["commit"] == h.shas[9], output
    culprit = doc["culprit"]["commit"] if doc["culprit"] else None
    named = [p for p in doc["probes"] if p["commit"] in (h.shas[8], h.shas[9])]
    for trial in (doc.get("confirmation") or {}).get("probes", []):
        if trial["slot"] is not None and culprit == h.shas[9]:
            assert trial["slot"] != 1 or all(p["slot"] != 1 for p in named), doc["confirmation"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "lies assumed: Verdicts may lie, and lies may cluster" in report
    lied = [p for p in doc["probes"] if p["slot"] == 1]
    shared = {p["commit"] for p in lied} & {p["commit"] for p in doc["probes"] if p["slot"] != 1}
    if len(shared) >= 2:  # GPU 1 and another probed the same candidates: it is named
        named_as = f"node {lied[0]['fingerprint']['node']}, GPUs 1, disagreed"  # the place
        assert f"{named_as} with the other GPUs on " in report and "a bad GPU?" in report
        assert f"warning: {named_as}" in output  # and the terminal says so


def test_a_lying_revert_never_confirms_the_first_of_two_regressions(tmp_path: Path) -> None:
    # two regressions (5, then 9); the first look's revert of 5 lies (it reads good though
    # 9 is still in it) and its pick is bad: the look agrees. One look used to say
    # "confirmed" and exit 0 naming 5 alone; a culprit's revert must read good on two
    # starts, so a second look sees it bad, and the run goes on to 9 with 5 reverted
    second = {"fault_when": [{"flags": {}, "env": {}, "fault": "null-content"}]}
    h = History(tmp_path, {5: "degenerate-content"}, 12, settings=SPACED, changes={9: second})
    auto = {"search": {"flake": "auto"}, "localize": {"enabled": False}}
    code, output, doc, starts = run(h, tmp_path / "honest", **auto)
    assert code == 0 and [c["commit"] for c in doc["culprits"]] == [h.shas[5], h.shas[9]], output
    revert = next(i for i, commit in enumerate(starts) if commit not in h.shas) + 1
    launches = tmp_path / "launches"
    command = [*sim_command(h.repo), "--launch-log", str(launches), "--lie-at", str(revert)]
    config = h.config(server={"command": command}, checks=TWO_CHECKS, **auto)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    doc = json.loads((out / "result.json").read_text())
    said = [(e["commit"], e["kind"], e["verdict"]) for e in doc["search"]["evidence"]]
    assert said[:2] == [(h.shas[5], "revert", "good"), (h.shas[5], "pick", "bad")], said
    assert "confirm: confirmed" not in result.output, result.output
    assert doc["confirmation"]["status"] != "confirmed", doc["confirmation"]
    assert result.exit_code != 0 or [c["commit"] for c in doc["culprits"]] == [
        h.shas[5],
        h.shas[9],
    ], result.output
