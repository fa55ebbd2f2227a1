"""Where a commit lives: the release tags and branches that hold it, cherry-picks included.

A culprit found on main also ships in the releases whose branch picked it (vLLM's release
branches are cherry-picks: `releases/v0.27.0`); a fix on main reaches a release only when
it is picked there too. A pick is another commit with the same change: found by its patch
id (`git patch-id --stable`: the diff, whitespace and line numbers aside) or by the line
`git cherry-pick -x` writes ("(cherry picked from commit <sha>)").

    reach(repo, culprit)  ->  in v0.27.0, v0.27.1 (picked as 5f1c2d3e4f5a); on main;
                              not on releases/v0.26

Git is read here (an edge); `Reach` and its sentence are plain data.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

RELEASE_BRANCH = re.compile(r"(^|/)releases?/")
"""A release branch's name (`releases/v0.27.0`, `origin/release/1.2`)."""
NEWEST_TAGS = 8
"""Tags named in a sentence (the oldest that hold it first; the rest counted)."""


@dataclass(frozen=True)
class Pick:
    """A commit that makes the same change on another line."""

    commit: str
    tags: tuple[str, ...] = ()
    branches: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reach:
    """The refs that hold a commit, itself or picked."""

    commit: str
    tags: tuple[str, ...] = ()
    """Tags that contain the commit itself, oldest first."""
    branches: tuple[str, ...] = ()
    """Branches (local and remote-tracking) that contain it."""
    picks: tuple[Pick, ...] = ()
    missing: tuple[str, ...] = ()
    """Release branches that hold neither the commit nor a pick of it."""
    backport: tuple[str, ...] = field(default=())
    """(A fix) release branches that hold the regression it fixes but not the fix."""

    def sentence(self, what: str = "in") -> str:
        """`in v0.27.0 and v0.27.1 (picked as 5f1c2d3e4f5a); on main; not on releases/v0.26`."""
        parts = []
        tags = list(self.tags)
        for pick in self.picks:
            tags += [f"{t} (picked as {pick.commit[:12]})" for t in pick.tags if t not in tags]
        if tags:
            shown = tags[:NEWEST_TAGS]
            more = f" and {len(tags) - len(shown)} more" if len(tags) > len(shown) else ""
            parts.append(f"{what} {', '.join(shown)}{more}")
        else:
            parts.append("in no release tag yet")
        branches = list(self.branches)
        for pick in self.picks:
            branches += [f"{b} (picked)" for b in pick.branches if b not in branches]
        if branches:
            parts.append(f"on {', '.join(branches[:NEWEST_TAGS])}")
        if self.missing:
            parts.append(f"not on {', '.join(self.missing)}")
        if self.backport:
            parts.append(f"a backport is needed on {', '.join(self.backport)}")
        return "; ".join(parts)


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], input=stdin, capture_output=True, check=False
    )
    return done.stdout.decode("utf-8", "replace") if done.returncode == 0 else ""


def _tags(repo: Path, commit: str) -> tuple[str, ...]:
    out = _git(repo, "tag", "--contains", commit, "--sort=creatordate")
    return tuple(out.split())


def _branches(repo: Path, commit: str) -> tuple[str, ...]:
    out = _git(repo, "branch", "-a", "--contains", commit, "--format=%(refname:short)")
    return tuple(b for b in out.split() if not b.endswith("/HEAD") and b != "HEAD")


def _all_branches(repo: Path) -> list[str]:
    out = _git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads", "refs/remotes")
    return [b for b in out.split() if not b.endswith("/HEAD")]


def _patch_ids(repo: Path, log_args: list[str]) -> dict[str, str]:
    """commit → patch id, for the commits `git log` lists (one `git patch-id` for all)."""
    patches = subprocess.run(
        ["git", "-C", str(repo), "log", "-p", "--no-merges", "--format=commit %H", *log_args],
        capture_output=True, check=False,
    )  # fmt: skip
    if patches.returncode != 0 or not patches.stdout:
        return {}
    ids = _git(repo, "patch-id", "--stable", stdin=patches.stdout)
    return {commit: pid for pid, commit in (line.split() for line in ids.splitlines())}


def picks_of(repo: Path, commit: str) -> list[str]:
    """Other commits that make the same change (same patch id, or `cherry-pick -x`'s note)."""
    own = _patch_ids(repo, ["-1", commit]).get(commit)
    files = _git(repo, "show", "--format=", "--name-only", "--no-renames", commit).split()
    found: list[str] = []
    if own is not None and files:
        # commits on any line that the commit is not an ancestor of, touching its files
        others = _patch_ids(repo, ["--branches", "--remotes", "--tags", f"^{commit}", "--",
                                   *files])  # fmt: skip
        found += [c for c, pid in others.items() if pid == own and c != commit]
    noted = _git(repo, "log", "--branches", "--remotes", "--tags", "--format=%H",
                 f"--grep=cherry picked from commit {commit}", "-F")  # fmt: skip
    found += [c for c in noted.split() if c not in found and c != commit]
    return found


def reach(repo: Path, commit: str, regression: str | None = None) -> Reach:
    """Where `commit` lives; with `regression` (a fix's), the release branches that hold
    the regression (itself or picked) but not the fix need a backport."""
    branches = _branches(repo, commit)
    picks = tuple(Pick(p, _tags(repo, p), _branches(repo, p)) for p in picks_of(repo, commit))
    holding = set(branches) | {b for p in picks for b in p.branches}
    releases = [b for b in _all_branches(repo) if RELEASE_BRANCH.search(b)]
    missing = tuple(b for b in releases if b not in holding)
    backport: tuple[str, ...] = ()
    if regression is not None:
        broken = set(_branches(repo, regression))
        for pick in picks_of(repo, regression):
            broken |= set(_branches(repo, pick))
        backport = tuple(b for b in missing if b in broken)
        missing = ()  # a release line that never had the regression needs no fix
    return Reach(commit, _tags(repo, commit), branches, picks, missing, backport)
