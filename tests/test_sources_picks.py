"""Reverts and picks made as commits without a work tree, in a real repository shaped as a
release branch: a culprit that changes Python and a JSON config, later commits touching the
same files, a merge, and a later change that conflicts with the revert."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from llm_bisect.sources.picks import REF_PREFIX, pick, revert

LAYER = "def forward(x):\n    x = norm(x)\n    x = attn(x)\n    x = mlp(x)\n    return x\n"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def commit(repo: Path, message: str, files: dict[str, str | None]) -> str:
    for path, text in files.items():
        target = repo / path
        if text is None:
            target.unlink()
            git(repo, "rm", "-q", path)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        git(repo, "add", path)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def show(repo: Path, rev: str, path: str) -> str:
    return git(repo, "show", f"{rev}:{path}")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "vllm"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@t")
    git(repo, "config", "user.name", "t")
    return repo


def test_the_culprit_reverted_on_the_bad_end_and_picked_on_the_good_end(repo: Path) -> None:
    good = commit(repo, "good", {"vllm/layer.py": LAYER, "vllm/configs/moe.json": '{"tile": 64}\n',
                                 "README": "v\n"})  # fmt: skip
    culprit = commit(repo, "[Kernel] fused norm", {
        "vllm/layer.py": LAYER.replace("norm(x)", "fused_norm(x)"),
        "vllm/configs/moe.json": '{"tile": 128}\n',
    })  # fmt: skip
    bad = commit(repo, "[Perf] later", {
        "vllm/layer.py": LAYER.replace("norm(x)", "fused_norm(x)").replace("mlp(x)", "mlp2(x)"),
        "README": "v2\n",
    })  # fmt: skip
    reverted = revert(repo, culprit, bad)
    assert reverted.ok, reverted.reason
    assert git(repo, "rev-parse", f"{reverted.commit}^") == bad
    assert show(repo, reverted.commit or "", "vllm/layer.py") == LAYER.replace(
        "mlp(x)", "mlp2(x)"
    ).rstrip("\n")  # the culprit's line back, the later change kept
    assert show(repo, reverted.commit or "", "vllm/configs/moe.json") == '{"tile": 64}'
    assert show(repo, reverted.commit or "", "README") == "v2"
    assert git(repo, "log", "-1", "--format=%s", reverted.commit or "") == (
        'Revert "[Kernel] fused norm"'
    )
    picked = pick(repo, culprit, good)
    assert picked.ok and git(repo, "rev-parse", f"{picked.commit}^") == good
    assert git(repo, "rev-parse", f"{picked.commit}^{{tree}}") == git(
        repo, "rev-parse", f"{culprit}^{{tree}}"
    )
    refs = git(repo, "for-each-ref", "--format=%(refname)", REF_PREFIX).splitlines()
    assert refs == [
        f"{REF_PREFIX}/{culprit}/pick-onto-{good}",
        f"{REF_PREFIX}/{culprit}/revert-onto-{bad}",
    ]  # kept from git's garbage collection, and where a user can look
    assert revert(repo, culprit, bad) == reverted  # made again: the same commit
    assert git(repo, "status", "--porcelain") == ""  # no work tree or index touched


def test_what_cannot_be_made_says_why(repo: Path) -> None:
    commit(repo, "base", {"vllm/layer.py": LAYER, "vllm/old.py": "x = 1\n"})
    culprit = commit(repo, "culprit", {"vllm/layer.py": LAYER.replace("attn(x)", "attn_v2(x)"),
                                       "vllm/old.py": "x = 2\n"})  # fmt: skip
    conflicting = commit(repo, "rework", {"vllm/layer.py": LAYER.replace("attn(x)", "attn_v3(x)")})
    made = revert(repo, culprit, conflicting)
    assert not made.ok and made.reason == (
        f"revert of {culprit[:12]} onto {conflicting[:12]}: vllm/layer.py: the change does "
        "not apply here (a conflict)"
    )
    git(repo, "checkout", "-q", "-b", "cleanup", culprit)
    removed = commit(repo, "remove old", {"vllm/old.py": None})
    made = revert(repo, culprit, removed)
    assert "vllm/old.py: changed on one side, removed or added on the other" in made.reason
    git(repo, "checkout", "-q", "-b", "side", culprit)
    side = commit(repo, "side", {"vllm/side.py": "s\n"})
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side", side)
    merge = git(repo, "rev-parse", "HEAD")
    made = revert(repo, merge, merge)
    assert not made.ok
    assert made.reason == f"{merge[:12]} is a merge commit: which change to revert is not one"


def test_a_binary_file_both_sides_changed_cannot_be_merged_and_says_so(repo: Path) -> None:
    (repo / "w.bin").write_bytes(b"\0weights-1\0")
    git(repo, "add", "w.bin")
    commit(repo, "base", {"vllm/layer.py": LAYER})
    (repo / "w.bin").write_bytes(b"\0weights-2\0")
    git(repo, "add", "w.bin")
    culprit = commit(repo, "culprit", {"vllm/layer.py": LAYER.replace("attn(x)", "attn2(x)")})
    (repo / "w.bin").write_bytes(b"\0weights-3\0")
    git(repo, "add", "w.bin")
    later = commit(repo, "later", {"README": "x\n"})
    made = revert(repo, culprit, later)
    assert not made.ok and "w.bin: the change does not apply here" in made.reason


def test_a_bare_clone_and_a_path_with_spaces_merge_as_well(repo: Path, tmp_path: Path) -> None:
    spaced = "vllm/model executor/layer one.py"
    commit(repo, "base", {spaced: LAYER, "README": "v\n"})
    culprit = commit(repo, "culprit", {spaced: LAYER.replace("norm(x)", "fused_norm(x)")})
    bad = commit(repo, "later", {spaced: LAYER.replace("norm(x)", "fused_norm(x)").replace(
        "mlp(x)", "mlp2(x)")})  # fmt: skip
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(bare)], check=True)
    made = revert(bare, culprit, bad)
    assert made.ok, made.reason
    assert show(bare, made.commit or "", spaced) == LAYER.replace("mlp(x)", "mlp2(x)").rstrip()
