"""The git source on real repositories in tmp_path."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from llm_bisect.errors import ConfigError
from llm_bisect.search import Mode, build_plan
from llm_bisect.sources.git import GitSource


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
        env={
            "GIT_AUTHOR_NAME": "T",
            "GIT_AUTHOR_EMAIL": "t@x",
            "GIT_COMMITTER_NAME": "T",
            "GIT_COMMITTER_EMAIL": "t@x",
            "PATH": "/usr/bin:/bin",
        },
    ).stdout.strip()


def commit(repo: Path, subject: str, fault: str = "none") -> str:
    (repo / "sim-engine.json").write_text(json.dumps({"fault": fault}))
    (repo / "log.txt").open("a").write(subject + "\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", subject)
    return git(repo, "rev-parse", "HEAD")


def branched(
    root: Path, base_fault: str = "none", release_fault: str | None = None
) -> dict[str, str]:
    """main: m0..m5 (nightly at m5); release branched at m2: r1..r3 (tag v1 at r3, bad).
    `base_fault`: m0..m2's and r1's; `release_fault`: r1's instead."""
    repo = root / "engine"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = {f"m{i}": commit(repo, f"main {i}", base_fault if i <= 2 else "none") for i in range(6)}
    git(repo, "checkout", "-q", "-b", "release", shas["m2"])
    shas["r1"] = commit(repo, "release 1", base_fault if release_fault is None else release_fault)
    shas["r2"] = commit(repo, "release 2: the bug", "degenerate-reasoning")
    shas["r3"] = commit(repo, "release 3", "degenerate-reasoning")
    git(repo, "tag", "v1", shas["r3"])
    git(repo, "checkout", "-q", "main")
    return shas


def test_linear_range_in_topological_order(history: object) -> None:
    h = history({}, n=6)  # type: ignore[operator]
    source = GitSource(h.repo)
    plan = build_plan(source, h.shas[0], h.shas[-1], Mode.REGRESSION)
    assert [c.commit for c in plan.sequence] == h.shas
    assert plan.anchor is None
    assert plan.sequence[1].subject.endswith("(#24001)")
    assert plan.sequence[1].author == "Demo Maintainer <maintainer@example.com>"


def test_refs_resolve_to_40_hex(history: object) -> None:
    h = history({}, n=2)  # type: ignore[operator]
    source = GitSource(h.repo)
    assert source.resolve("HEAD~1", "x").commit == h.shas[1]
    assert source.resolve(h.shas[0][:7], "x").commit == h.shas[0]
    with pytest.raises(ConfigError, match=r"candidates\.good: no such ref 'v9'"):
        source.resolve("v9", "candidates.good")


def test_a_branch_bisects_from_the_merge_base(tmp_path: Path) -> None:
    shas = branched(tmp_path)
    plan = build_plan(GitSource(tmp_path / "engine"), shas["m5"], "v1", Mode.REGRESSION)
    assert plan.anchor is not None and plan.anchor.commit == shas["m5"]
    assert [c.commit for c in plan.sequence] == [shas[k] for k in ("m2", "r1", "r2", "r3")]
    assert plan.good.commit == shas["m5"] and plan.bad.commit == shas["r3"]


def test_same_commit_is_an_error(history: object) -> None:
    h = history({}, n=2)  # type: ignore[operator]
    with pytest.raises(ConfigError, match="same commit"):
        build_plan(GitSource(h.repo), "HEAD", h.shas[-1], Mode.REGRESSION)
