"""Where the regression ends (`candidates.later`): after a run found its culprit, builds newer
than the bad end are probed with the run's checks; one good again gives the `--find-fix`
command, which, run as printed, finds the fix. Also: the next step a run that was not
confirmed prints (`confirm: continue`, the same command again)."""

from __future__ import annotations

import itertools
import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from helpers import (
    HOSTILE_TAGS,
    History,
    github_render,
    printed_after,
    run_as_printed,
    shell_words,
    sim_command,
    write_config,
)
from llm_bisect.cli import cli
from llm_bisect.model import Verdict
from llm_bisect.report.documents import Context, LaterDoc, ResultDocument
from llm_bisect.report.markdown import render_markdown

CHECKS = [{"type": "canary"}, {"type": "expect"}]


def config_of(h: History, tmp_path: Path, **over: Any) -> Path:
    launches = tmp_path / "launches"
    server = {"command": [*sim_command(h.repo), "--launch-log", str(launches)]}
    return h.config(server=server, checks=CHECKS, **over)


def launched(tmp_path: Path) -> list[str]:
    log = tmp_path / "launches"
    return log.read_text().split() if log.exists() else []


def tag(h: History, name: str, commit: str) -> None:
    subprocess.run(["git", "-C", str(h.repo), "tag", name, commit], check=True)


def commands(md: str, word: str) -> list[str]:
    """The command lines of report.md's bash blocks that hold `word`."""
    return [
        line
        for info, content in github_render(md).fences
        if info == "bash"
        for line in content.splitlines()
        if word in line
    ]


def test_a_later_build_good_again_gives_the_command_that_finds_the_fix(tmp_path: Path) -> None:
    h = History(tmp_path, {5: "degenerate-content", 9: "none"}, 12)
    tag(h, "v0.28.0", h.shas[10])
    tag(h, "nightly", h.shas[8])
    config = config_of(h, tmp_path, bad=h.shas[7], confirm=False,
                       candidates={"later": ["v0.28.0", "nightly"]})  # fmt: skip
    out = tmp_path / "out"
    done = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert done.exit_code == 0, done.output
    doc = json.loads((out / "result.json").read_text())
    assert doc["culprit"]["commit"] == h.shas[5]
    # oldest first by ancestry, whatever the config's order ("newest" was the last written)
    assert [{k: x[k] for k in ("ref", "commit", "verdict")} for x in doc["later"]] == [
        {"ref": "nightly", "commit": h.shas[8], "verdict": "bad"},
        {"ref": "v0.28.0", "commit": h.shas[10], "verdict": "good"},
    ]
    first = launched(tmp_path)
    assert h.shas[8] in first and h.shas[10] in first
    md = (out / "report.md").read_text()
    assert "## Where it ends" in md
    assert f"- `nightly` (`{h.shas[8][:12]}`): **still bad**" in md
    assert f"- `v0.28.0` (`{h.shas[10][:12]}`): **good again**" in md
    [line] = commands(md, "--find-fix")
    assert line == shlex.join(["llm-bisect", "run", str(config.absolute()), "--find-fix",
                               "--good", h.shas[10], "--bad", h.shas[7], "--out",
                               f"{out.absolute()}-fix"])  # fmt: skip
    assert f"later: to find the fix: {line}" in done.output  # the terminal says the same
    # run again: the later probes come back from DIR/later.jsonl, none repeated
    again = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert launched(tmp_path) == first
    assert json.loads((out / "result.json").read_text())["later"] == doc["later"]
    assert CliRunner().invoke(cli, ["report", str(out)]).exit_code == 0  # `report` keeps it
    assert json.loads((out / "result.json").read_text())["later"] == doc["later"]
    # the command as printed finds the fix
    words = shlex.split(line)
    assert words[0] == "llm-bisect"
    fixed = CliRunner().invoke(cli, words[1:])
    assert fixed.exit_code == 0, fixed.output
    fix = json.loads((Path(f"{out}-fix") / "result.json").read_text())
    assert fix["mode"] == "fix" and fix["status"] == "found"
    assert fix["culprit"]["commit"] == h.shas[9]


def test_the_printed_find_fix_command_runs_as_printed_with_a_config_golden(
    tmp_path: Path,
) -> None:
    """With `golden: golden.json` (recorded from the regression's good end), the printed
    `--find-fix` command once exited 2 (the golden was not of its good end). Pasted from the
    terminal and from report.md into `sh` in another folder, it finds the fix: its own good
    end's golden is recorded into its --out, and it says so."""
    h = History(tmp_path, {5: "degenerate-content", 9: "none"}, 12)
    tag(h, "v0.28.0", h.shas[10])
    config = config_of(h, tmp_path, bad=h.shas[7], confirm=False, golden="golden.json",
                       candidates={"later": ["v0.28.0"]})  # fmt: skip
    recorded = CliRunner().invoke(cli, ["golden", str(config), "--candidate", h.shas[0]])
    assert recorded.exit_code == 0 and (tmp_path / "golden.json").is_file(), recorded.output
    out = tmp_path / "out"
    done = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert done.exit_code == 0, done.output
    line = printed_after(done.output, "later: to find the fix: ")
    assert commands((out / "report.md").read_text(), "--find-fix") == [line]
    fixed = run_as_printed(line, tmp_path / "elsewhere", tmp_path / "bin")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    said = " ".join(fixed.stderr.split())
    assert (f"golden: {tmp_path / 'golden.json'} was recorded from {h.shas[0][:12]}, not from "
            f"this run's good end {h.shas[10][:12]}") in said, said  # fmt: skip
    fix = json.loads((Path(f"{out}-fix") / "result.json").read_text())
    assert (fix["mode"], fix["status"]) == ("fix", "found")
    assert fix["culprit"]["commit"] == h.shas[9]
    assert (Path(f"{out}-fix") / "golden.json").is_file()
    assert (tmp_path / "golden.json").is_file()  # the config's golden is left as it was


def kimi_shape(root: Path) -> dict[str, str]:
    """The Kimi case's lines: main m0..m4 (the good nightly at m2, `nightly-main` at m4, after
    everything else); the release branch from m2: r1, r2 (the culprit), r3 (`v0.27.0`, bad),
    r4 (`v0.27.1`, the fix). Main never had the culprit."""
    repo = root / "engine"
    repo.mkdir()
    shas: dict[str, str] = {}
    clock = itertools.count(1_786_000_000, 60)  # one a git call: the order is the dates'

    def git(*args: str) -> str:
        when = f"{next(clock)} +0000"
        env = {"GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "T",
               "GIT_COMMITTER_EMAIL": "t@x", "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when,
               "PATH": "/usr/bin:/bin"}  # fmt: skip
        return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                              text=True, env=env).stdout.strip()  # fmt: skip

    def commit(name: str, fault: str) -> None:
        (repo / "sim-engine.json").write_text(json.dumps({"fault": fault}))
        (repo / "log.txt").open("a").write(name + "\n")
        git("add", "-A")
        git("commit", "-q", "-m", name)
        shas[name] = git("rev-parse", "HEAD")

    git("init", "-q", "-b", "main")
    for name in ("m0", "m1", "m2"):
        commit(name, "none")
    git("tag", "nightly-0809", shas["m2"])
    git("checkout", "-q", "-b", "releases/v0.27", shas["m2"])
    for name, fault in (("r1", "none"), ("r2", "degenerate-content"),
                        ("r3", "degenerate-content"), ("r4", "none")):  # fmt: skip
        commit(name, fault)
    git("tag", "v0.27.0", shas["r3"])
    git("tag", "v0.27.1", shas["r4"])
    git("checkout", "-q", "main")
    for name in ("m3", "m4"):
        commit(name, "none")
    git("tag", "nightly-main", shas["m4"])
    return shas


def test_a_later_nightly_that_never_had_the_culprit_is_said_so_and_bounds_no_fix(
    tmp_path: Path,
) -> None:
    """The Kimi shape: the culprit is a release branch's commit; a later nightly of main,
    which never had it, reads good. It was called "good again" and gave a `--find-fix` line
    that exited 4 ("was undone ... on the bad side"). It is said not to contain the culprit;
    the later release that has it and reads good gives the line, which, pasted into `sh` in
    another folder, finds the fix."""
    shas = kimi_shape(tmp_path)
    repo = tmp_path / "engine"
    config = write_config(tmp_path / "kimi.yaml", {
        "candidates": {"repo": str(repo), "good": "nightly-0809", "bad": "v0.27.0",
                       "later": ["v0.27.1", "nightly-main"]},
        "server": {"command": sim_command(repo), "ready_timeout": 20},
        "checks": CHECKS, "search": {"flake": 0}, "confirm": False,
    })  # fmt: skip
    out = tmp_path / "out"
    done = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert done.exit_code == 0, done.output
    md = (out / "report.md").read_text()
    [line] = commands(md, "--find-fix")  # pasted first, as a reader would
    fixed = run_as_printed(line, tmp_path / "elsewhere", tmp_path / "bin")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    fix = json.loads((Path(f"{out}-fix") / "result.json").read_text())
    assert (fix["mode"], fix["status"], fix["culprit"]["commit"]) == ("fix", "found", shas["r4"])
    assert printed_after(done.output, "later: to find the fix: ") == line
    assert shlex.split(line)[4:8] == ["--good", shas["r4"], "--bad", shas["r3"]]
    assert f"- `v0.27.1` (`{shas['r4'][:12]}`): **good again**" in md
    said = "does not contain the culprit (tested good; never had it: no fix to find)"
    assert f"- `nightly-main` (`{shas['m4'][:12]}`): **{said}**" in md
    assert f"later: nightly-main ({shas['m4'][:12]}): {said}" in done.output
    doc = json.loads((out / "result.json").read_text())
    assert doc["culprit"]["commit"] == shas["r2"]
    assert [(x["ref"], x["verdict"], x["contains"]) for x in doc["later"]] == [
        ("v0.27.1", "good", True), ("nightly-main", "good", False),
    ]  # fmt: skip


def test_later_builds_none_of_which_has_the_culprit_offer_no_fix_command() -> None:
    doc = ResultDocument.model_validate(
        {
            "status": "found", "message": "m", "mode": "regression", "good": "b" * 40,
            "bad": "c" * 40, "culprit": {"commit": "d" * 40}, "range": ["b" * 40, "d" * 40],
            "candidates": 3, "probes": [],
            "later": [{"ref": "nightly", "commit": "e" * 40, "verdict": v, "contains": False}
                      for v in ("good", "bad")],
        }
    )  # fmt: skip
    md = render_markdown(doc)
    assert "--find-fix" not in md and "good again**" not in md and "still bad" not in md
    assert "**does not contain the culprit (tested bad; never had it: no fix to find)**" in md
    assert "No later build tested contains the culprit `dddddddddddd`" in md


def test_a_later_build_still_bad_or_untestable_offers_no_fix_command(tmp_path: Path) -> None:
    h = History(tmp_path, {5: "degenerate-content", 11: "crash-on-start"}, 12)
    config = config_of(h, tmp_path, bad=h.shas[7], confirm=False,
                       candidates={"later": [h.shas[9], h.shas[11]]})  # fmt: skip
    out = tmp_path / "out"
    done = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert done.exit_code == 0, done.output
    doc = json.loads((out / "result.json").read_text())
    assert [(x["commit"], x["verdict"]) for x in doc["later"]] == [
        (h.shas[9], "bad"),
        (h.shas[11], "skip"),
    ]
    md = (out / "report.md").read_text()
    assert f"(`{h.shas[9][:12]}`): **still bad**" in md
    assert f"(`{h.shas[11][:12]}`): **could not be tested (skip)**" in md
    assert "--find-fix" not in md and "--find-fix" not in done.output
    assert "**good again**" not in md
    assert "No later build tested is good again: the regression has not ended." in md


def test_a_later_ref_whose_tree_was_probed_takes_its_verdict(tmp_path: Path) -> None:
    h = History(tmp_path, {5: "degenerate-content"}, 8)
    same = subprocess.run(  # the bad end's tree, another commit
        ["git", "-C", str(h.repo), "commit-tree", f"{h.shas[-1]}^{{tree}}", "-p", h.shas[-1],
         "-m", "rebuild"], capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    config = config_of(h, tmp_path, confirm=False, candidates={"later": [same]})
    out = tmp_path / "out"
    done = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert done.exit_code == 0, done.output
    [later] = json.loads((out / "result.json").read_text())["later"]
    assert later["verdict"] == "bad" and later["commit"] == same
    assert later["reason"].startswith(f"the tree of {h.shas[-1][:12]}, probed")
    assert same not in launched(tmp_path)


def test_an_unknown_later_ref_is_one_line_and_starts_nothing(tmp_path: Path) -> None:
    h = History(tmp_path, {5: "degenerate-content"}, 8)
    config = config_of(h, tmp_path, candidates={"later": ["v9.9.9"]})
    out = tmp_path / "out"
    done = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert done.exit_code == 2
    assert done.output == "llm-bisect: error: candidates.later: no such ref 'v9.9.9'\n"
    assert not out.exists() and launched(tmp_path) == []


def test_a_run_not_confirmed_says_how_to_bisect_what_remains(tmp_path: Path) -> None:
    second = {"fault_when": [{"flags": {}, "env": {}, "fault": "null-content"}]}
    spaced = {"fault_spacer": 0, "fault_when": []}
    h = History(tmp_path, {5: "degenerate-content"}, 12, settings=spaced, changes={9: second})
    config = config_of(h, tmp_path, search={"culprits": 1})  # one culprit: it stops there
    out = tmp_path / "out"
    done = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert done.exit_code == 0, done.output
    md = (out / "report.md").read_text()
    assert "set `confirm: continue` in the config and run the same command again" in md
    [line] = commands(md, "llm-bisect run")
    assert line == shlex.join(["llm-bisect", "run", str(config.absolute()), "--good", h.shas[0],
                               "--bad", h.shas[-1], "--out", str(out.absolute())])  # fmt: skip
    assert line in done.output  # the terminal's last note
    first = launched(tmp_path)
    # as the report says: `confirm: continue` in the config, the same command again
    data = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**data, "confirm": "continue"}, sort_keys=False))
    again = CliRunner().invoke(cli, shlex.split(line)[1:])
    assert again.exit_code == 0, again.output
    assert not set(launched(tmp_path)[len(first) :]) & set(first)
    went_on = json.loads((out / "result.json").read_text())["confirmation"]["continued"]
    assert went_on["culprit"] == h.shas[9]
    md = (out / "report.md").read_text()
    assert "confirm: continue" not in md and "confirm: to bisect" not in again.output


def test_later_refs_and_commands_are_escaped(tmp_path: Path) -> None:
    sha = "a" * 40
    doc = ResultDocument.model_validate(
        {
            "status": "found", "message": "m", "mode": "regression", "good": "b" * 40,
            "bad": "c" * 40, "culprit": {"commit": "d" * 40}, "range": ["b" * 40, "d" * 40],
            "candidates": 3, "probes": [],
        }
    )  # fmt: skip
    hostile = f"{tmp_path}/{HOSTILE_TAGS[0]}"
    doc = doc.model_copy(
        update={
            "later": [
                LaterDoc(ref=t, commit=sha, verdict=Verdict.GOOD, reason=HOSTILE_TAGS[1])
                for t in HOSTILE_TAGS
            ],
            "context": Context(config=hostile, out=hostile, repo=hostile),
        }
    )
    md = render_markdown(doc)
    rendered = github_render(md)
    assert rendered.problems == []
    for t in HOSTILE_TAGS:
        assert t in rendered.text
    [line] = commands(md, "--find-fix")
    (tmp_path / "sh").mkdir()
    words = shell_words(line, tmp_path / "sh")
    assert words == ["llm-bisect", "run", hostile, "--find-fix", "--good", sha, "--bad", "c" * 40,
                     "--out", f"{hostile}-fix", "--repo", hostile]  # fmt: skip
    assert list((tmp_path / "sh").iterdir()) == []  # nothing in it ran


def test_a_later_ref_older_than_the_bad_end_is_one_line_and_another_branch_is_not(
    tmp_path: Path,
) -> None:
    """A ref older than the bad end once made the printed `--find-fix` command fail ("good
    ... is older than bad"). A release tag on its own branch is newer, not older."""
    from llm_bisect.services.later import resolve_later
    from llm_bisect.sources.git import GitSource

    h = History(tmp_path, {5: "degenerate-content"}, 8)
    tag(h, "v0.26.0", h.shas[3])
    config = config_of(h, tmp_path, candidates={"later": ["v0.26.0"]})
    out = tmp_path / "out"
    done = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert done.exit_code == 2, done.output
    assert done.output == (
        f"llm-bisect: error: candidates.later: 'v0.26.0' ({h.shas[3][:12]}) is not newer "
        f"than the bad end {h.shas[-1][:12]} (it is older): a later build comes after it\n"
    )
    assert not out.exists() and launched(tmp_path) == []
    git = ["git", "-C", str(h.repo)]
    tree = subprocess.run([*git, "rev-parse", f"{h.shas[6]}^{{tree}}"], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    branch = subprocess.run(
        [*git, "-c", "user.name=r", "-c", "user.email=r@e", "commit-tree", tree, "-p",
         h.shas[6], "-m", "release v0.27.1"], capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    tag(h, "v0.27.1", branch)
    source = GitSource(h.repo)
    bad = source.resolve(h.shas[-1], "bad")
    found = resolve_later(["v0.27.1"], source.resolve, bad, source.is_ancestor)
    assert [(r, c.commit) for r, c in found] == [("v0.27.1", branch)]


def test_unrelated_later_refs_are_ordered_by_their_instant_not_their_date_text() -> None:
    """`%aI` keeps each author's zone: 10:00+01:00 is before 09:30+00:00."""
    from llm_bisect.model import Candidate
    from llm_bisect.services.later import resolve_later

    refs = {
        "v0.27.1": Candidate("1" * 40, date="2025-03-01T10:00:00+01:00"),
        "v0.28.0": Candidate("2" * 40, date="2025-03-01T09:30:00+00:00"),
    }
    bad = Candidate("3" * 40)
    found = resolve_later(["v0.28.0", "v0.27.1"], lambda r, _: refs[r], bad, lambda a, b: False)
    assert [r for r, _ in found] == ["v0.27.1", "v0.28.0"]
