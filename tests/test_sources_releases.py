"""Where a culprit (or a fix) lives: release tags and branches, cherry-picks included."""

from __future__ import annotations

import subprocess
from pathlib import Path

from llm_bisect.sources.releases import reach


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True)  # fmt: skip
    return done.stdout.strip()


def commit(repo: Path, message: str, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def test_a_culprit_on_main_is_named_in_the_releases_that_picked_it(tmp_path: Path) -> None:
    """The Kimi shape: main's culprit reached v0.27.0 as a cherry-pick on its release
    branch (another commit, the same change); v0.26's branch never had it. The fix on
    main was not picked to releases/v0.27: a backport is needed."""
    repo = tmp_path / "vllm"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "base", {"vllm/attn.py": "a = 1\nb = 2\nc = 3\n", "README": "r\n"})
    git(repo, "branch", "releases/v0.26")
    git(repo, "tag", "v0.26.0")
    commit(repo, "[Doc] words", {"README": "r2\n"})
    git(repo, "branch", "releases/v0.27")  # the branch point, before the culprit
    culprit = commit(repo, "[Kernel] reorder", {"vllm/attn.py": "a = 1\nb = 20\nc = 3\n"})
    commit(repo, "[CI] more", {"ci.txt": "x\n"})
    git(repo, "checkout", "-q", "releases/v0.27")
    commit(repo, "[Release] notes", {"NOTES": "n\n"})  # the pick lands on another parent
    git(repo, "cherry-pick", culprit)  # no -x: found by its patch id alone
    picked = git(repo, "rev-parse", "HEAD")
    git(repo, "tag", "v0.27.0")
    git(repo, "tag", "v0.27.1")
    git(repo, "checkout", "-q", "main")
    git(repo, "tag", "v0.28.0rc1")
    fix = commit(repo, "[Bugfix] restore b", {"vllm/attn.py": "a = 1\nb = 2\nc = 3\n"})

    found = reach(repo, culprit)
    assert found.tags == ("v0.28.0rc1",) and found.branches == ("main",)
    assert [(p.commit, p.tags, p.branches) for p in found.picks] == [
        (picked, ("v0.27.0", "v0.27.1"), ("releases/v0.27",))
    ]
    assert found.missing == ("releases/v0.26",)
    said = found.sentence()
    assert said == (
        f"in v0.28.0rc1, v0.27.0 (picked as {picked[:12]}), v0.27.1 (picked as {picked[:12]}); "
        "on main, releases/v0.27 (picked); not on releases/v0.26"
    ), said

    fixed = reach(repo, fix, regression=culprit)
    assert fixed.sentence() == (
        "in no release tag yet; on main; a backport is needed on releases/v0.27"
    ), fixed.sentence()
    # picked there with -x: found by its note too, and no backport is needed any more
    git(repo, "checkout", "-q", "releases/v0.27")
    (repo / "vllm" / "attn.py").write_text("a = 1\nb = 2\nc = 3\n\n")  # not the same patch
    git(repo, "commit", "-qam", f"[Bugfix] restore b\n\n(cherry picked from commit {fix})")
    git(repo, "checkout", "-q", "main")
    fixed = reach(repo, fix, regression=culprit)
    assert fixed.backport == () and [p.branches for p in fixed.picks] == [("releases/v0.27",)]
