"""Reverts and cherry-picks made as commits of the candidates repository, without a work tree.

A culprit is confirmed by building the first bad commit with it reverted and the last good
with it picked. Both are made here as ordinary commits (a three-way merge into a private
index, then `write-tree` and `commit-tree`), kept under `refs/llm-bisect/…` so that git
does not collect them, and so every build strategy builds them like any other commit.

    revert C onto B:  merge base C,  ours B, theirs C^     (C's change taken back)
    pick   C onto G:  merge base C^, ours G, theirs C      (C's change made again)

Trees are merged path by path (`read-tree -m`); a path both sides changed is merged by
content (`merge-file`); a path that will not merge, a merge commit (which parent's change
would it be?) and a blob the repository lacks are reasons it cannot be made, said as such.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError

REF_PREFIX = "refs/llm-bisect/confirm"
STAMP = {
    "GIT_AUTHOR_NAME": "llm-bisect",
    "GIT_AUTHOR_EMAIL": "llm-bisect@localhost",
    "GIT_COMMITTER_NAME": "llm-bisect",
    "GIT_COMMITTER_EMAIL": "llm-bisect@localhost",
    "GIT_AUTHOR_DATE": "@0 +0000",  # the same inputs make the same commit, run after run
    "GIT_COMMITTER_DATE": "@0 +0000",
}
"""Who and when the commits llm-bisect makes say (confirmation's, the versions repository's):
fixed, so the same inputs make the same commits, run after run."""


@dataclass(frozen=True)
class Made:
    """The commit made, or why it could not be."""

    commit: str | None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.commit is not None


class _Cannot(Exception):
    pass


def _git(
    repo: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    ok: Sequence[int] = (0,),
) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run(
        ["git", "-C", str(repo), *args],
        input=input,
        capture_output=True,
        env={**os.environ, **(env or {})},
    )
    if done.returncode not in ok:
        why = done.stderr.decode(errors="replace").strip().splitlines()
        raise ConfigError(f"candidates.repo: git {args[0]} failed: {why[-1] if why else ''}")
    return done


def _parents(repo: Path, commit: str) -> list[str]:
    out = _git(repo, "rev-list", "--parents", "-n", "1", commit).stdout.decode().split()
    return out[1:]


def _blob(repo: Path, blob: str) -> bytes:
    done = _git(repo, "cat-file", "blob", blob, ok=(0, 128))
    if done.returncode != 0:
        raise _Cannot(f"the repository lacks blob {blob[:12]}")
    return done.stdout


def _merge_trees(repo: Path, base: str, ours: str, theirs: str) -> str:
    """The tree of a three-way merge of three commits' trees; _Cannot on a conflict."""
    with tempfile.TemporaryDirectory(prefix="llm-bisect-pick-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git(repo, "read-tree", "-m", "-i", "--aggressive", base, ours, theirs, env=env)
        stages: dict[str, dict[int, tuple[str, str]]] = {}
        listed = _git(repo, "ls-files", "-u", "-z", env=env).stdout.decode(
            "utf-8", "surrogateescape"
        )
        for entry in filter(None, listed.split("\0")):
            info, path = entry.split("\t", 1)
            mode, blob, stage = info.split()
            stages.setdefault(path, {})[int(stage)] = (mode, blob)
        for path, by_stage in sorted(stages.items()):
            if set(by_stage) != {1, 2, 3}:
                raise _Cannot(f"{path}: changed on one side, removed or added on the other")
            modes = {m for m, _ in by_stage.values()}
            if len(modes) != 1 or modes & {"120000", "160000"}:
                raise _Cannot(f"{path}: a link, submodule or mode change on both sides")
            files = []
            for n in (2, 1, 3):  # merge-file's order: ours, base, theirs
                file = Path(tmp) / str(n)
                file.write_bytes(_blob(repo, by_stage[n][1]))
                files.append(str(file))
            # merge-file: 0 clean, N > 0 conflicts, 255 an error (a binary file)
            merged = _git(repo, "merge-file", "-p", "-q", *files, ok=range(0, 256))
            if merged.returncode != 0:
                why = "a conflict" if merged.returncode < 128 else "not text, or unmergeable"
                raise _Cannot(f"{path}: the change does not apply here ({why})")
            written = _git(repo, "hash-object", "-w", "--stdin", input=merged.stdout).stdout
            # the unmerged stages out, the merged entry in: plumbing that needs no work tree
            # (a bare clone), NUL-ended so any path goes through as it is
            raw = path.encode("utf-8", "surrogateescape")
            lines = b"0 " + b"0" * 40 + b"\t" + raw + b"\0"
            lines += modes.pop().encode() + b" " + written.strip() + b"\t" + raw + b"\0"
            _git(repo, "update-index", "-z", "--index-info", env=env, input=lines)
        return _git(repo, "write-tree", "--missing-ok", env=env).stdout.decode().strip()


def _subject(repo: Path, commit: str) -> str:
    return _git(repo, "log", "-1", "--format=%s", commit).stdout.decode(errors="replace").strip()


def _make(repo: Path, *, kind: str, culprit: str, onto: str, message: str) -> Made:
    parents = _parents(repo, culprit)
    if len(parents) != 1:
        what = "a merge commit" if parents else "a root commit"
        return Made(None, f"{culprit[:12]} is {what}: which change to {kind} is not one")
    parent = parents[0]
    base, theirs = (culprit, parent) if kind == "revert" else (parent, culprit)
    try:
        tree = _merge_trees(repo, base, onto, theirs)
    except _Cannot as exc:
        return Made(None, f"{kind} of {culprit[:12]} onto {onto[:12]}: {exc}")
    made = _git(repo, "commit-tree", tree, "-p", onto, "-F", "-", env=STAMP,
                input=message.encode()).stdout.decode().strip()  # fmt: skip
    _git(repo, "update-ref", f"{REF_PREFIX}/{culprit}/{kind}-onto-{onto}", made)
    return Made(made)


def revert(repo: Path, culprit: str, onto: str) -> Made:
    """`onto` (the first bad build) with the culprit's change taken back."""
    subject = _subject(repo, culprit)
    return _make(
        repo, kind="revert", culprit=culprit, onto=onto,
        message=f'Revert "{subject}"\n\nThis reverts commit {culprit} (made by llm-bisect '
        f"to confirm it).\n",
    )  # fmt: skip


def pick(repo: Path, culprit: str, onto: str) -> Made:
    """`onto` (the last good build) with the culprit's change made."""
    subject = _subject(repo, culprit)
    return _make(
        repo, kind="pick", culprit=culprit, onto=onto,
        message=f"{subject}\n\n(cherry picked from commit {culprit} by llm-bisect to "
        "confirm it)\n",
    )  # fmt: skip


def reverted_line(repo: Path, culprit: str, commits: Sequence[str]) -> tuple[list[str], str]:
    """A line of commits, one per given commit (oldest first), each that commit's tree with
    the culprit reverted, each the child of the one before: the history as it would have been
    without the culprit, to bisect what else broke after it. (The line, "") or ([], why not:
    the first commit the revert does not apply to)."""
    parents = _parents(repo, culprit)
    if len(parents) != 1:
        return [], f"{culprit[:12]} is a merge commit: which change to revert is not one"
    line: list[str] = []
    for commit in commits:
        try:
            tree = _merge_trees(repo, culprit, commit, parents[0])
        except _Cannot as exc:
            return [], f"revert of {culprit[:12]} onto {commit[:12]}: {exc}"
        subject = _subject(repo, commit)
        message = (f"{subject} (without {culprit[:12]})\n\nReverted-onto: {commit}\n"
                   f"Reverts: {culprit}\n")  # fmt: skip
        made = _git(repo, "commit-tree", tree, "-p", line[-1] if line else commit, "-F", "-",
                    env=STAMP, input=message.encode()).stdout.decode().strip()  # fmt: skip
        line.append(made)
    if not line:
        return [], "no commits after the culprit"
    _git(repo, "update-ref", f"{REF_PREFIX}/{culprit}/line-{commits[-1]}", line[-1])
    return line, ""


def tree_of(repo: Path, commit: str) -> str:
    """The commit's tree ("" when git cannot say): two commits with one tree build alike."""
    done = _git(repo, "rev-parse", f"{commit}^{{tree}}", ok=range(256))
    return done.stdout.decode().strip() if done.returncode == 0 else ""


def reverted_onto(repo: Path, commit: str) -> str | None:
    """The commit a commit of a reverted line stands for (its Reverted-onto trailer)."""
    body = _git(repo, "log", "-1", "--format=%B", commit).stdout.decode(errors="replace")
    found = None
    for line in body.splitlines():  # the last: a subject may start with the same words
        if line.startswith("Reverted-onto: "):
            found = line.removeprefix("Reverted-onto: ").strip()
    return found
