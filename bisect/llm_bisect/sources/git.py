"""A local git clone as a source of candidates (GitPython)."""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path

import git

from ..errors import ConfigError
from ..model import Candidate

_FIELDS = 4
_FORMAT = "%H%x00%s%x00%an <%ae>%x00%aI%x00"
"""NUL ends each field: the one byte no commit message can hold (a subject may hold any other,
control characters included)."""


def _parse(out: str) -> list[Candidate]:
    fields = out.strip("\n").split("\x00")
    records = [
        [f.lstrip("\n") for f in fields[i : i + _FIELDS]]
        for i in range(0, len(fields) - 1, _FIELDS)
    ]
    return [Candidate(commit=sha, subject=s, author=a, date=d) for sha, s, a, d in records]


class GitSource:
    """Candidates from a local clone, in topological order."""

    def __init__(self, path: Path, key: str = "candidates.repo") -> None:
        try:
            self._repo = git.Repo(path)
        except (git.NoSuchPathError, git.InvalidGitRepositoryError) as exc:
            raise ConfigError(f"{key}: not a git repository '{path}'") from exc
        self.path = path

    def remote_url(self) -> str:
        """The fetch URL of `origin` (else of the first remote); "" when there is none."""
        remotes = sorted(self._repo.remotes, key=lambda r: r.name != "origin")
        for remote in remotes:
            with suppress(git.GitCommandError, StopIteration):
                return str(next(iter(remote.urls)))
        return ""

    def _log(self, *args: str) -> list[Candidate]:
        out: str = self._repo.git.log(f"--format={_FORMAT}", *args)
        return _parse(out)

    def resolve(self, ref: str, key: str) -> Candidate:
        if not ref or ref.startswith("-"):
            raise ConfigError(f"{key}: no such ref {ref!r}")
        try:
            sha: str = self._repo.git.rev_parse("--verify", "--quiet", f"{ref}^{{commit}}")
        except git.GitCommandError as exc:
            raise ConfigError(f"{key}: no such ref {ref!r}") from exc
        return self._log("-1", sha)[0]

    def is_ancestor(self, older: str, newer: str) -> bool:
        try:
            self._repo.git.merge_base("--is-ancestor", older, newer)
        except git.GitCommandError as exc:
            if exc.status == 1:
                return False
            raise ConfigError(
                f"candidates.repo: git merge-base failed: {exc.stderr.strip()}"
            ) from exc
        return True

    def merge_base(self, a: str, b: str) -> Candidate:
        try:
            sha: str = self._repo.git.merge_base(a, b)
        except git.GitCommandError as exc:
            raise ConfigError(f"candidates: {a[:12]} and {b[:12]} share no history") from exc
        return self._log("-1", sha.strip())[0]

    def between(self, old: str, new: str) -> list[Candidate]:
        return self._log("--topo-order", "--reverse", f"{old}..{new}")

    def changed_files(self, old: str, new: str) -> list[str]:
        """Paths that differ between two commits (added, changed, removed, renamed)."""
        out: str = self._repo.git.diff("--name-only", "--no-renames", "-z", old, new)
        return [p for p in out.split("\0") if p]

    def read(self, commit: str, path: str) -> bytes | None:
        """A file's bytes at a commit; None when the commit has no such file."""
        try:
            blob = self._repo.commit(commit).tree / path
        except KeyError:
            return None
        data: bytes = blob.data_stream.read()
        return data
