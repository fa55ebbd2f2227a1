"""A local git clone as a source of candidates (GitPython), and what builds read of it.

Route facts (builds/overlay.py) come from the changes of each commit against its first
parent, read for a whole range by one `git log` and parsed as they arrive:

    \x01<commit> <parents>\0                      one header per commit
    \n:<old mode> <new mode> <old blob> <new blob> <status>\0<path>\0   one per path
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Iterator, Sequence
from contextlib import suppress
from datetime import date, datetime, timezone
from pathlib import Path
from typing import IO

import git

from ..config import CandidatesConfig
from ..errors import ConfigError
from ..kinds import GIT, SOURCES, SourceKind
from ..model import Candidate
from . import Change, Step

_RAW = ("--raw", "--no-renames", "--no-abbrev", "-z", "--diff-merges=first-parent", "--root")


def _tokens(stream: IO[bytes]) -> Iterator[str]:
    """NUL-separated fields as they arrive (paths are bytes: undecodable ones survive)."""
    rest = b""
    while chunk := stream.read1(1 << 16):  # type: ignore[attr-defined]
        rest += chunk
        *done, rest = rest.split(b"\0")
        for field in done:
            yield field.decode("utf-8", "surrogateescape")
    if rest:
        yield rest.decode("utf-8", "surrogateescape")


def parse_raw(fields: Iterable[str]) -> Iterator[Step | Change]:
    """`git log`/`git diff` raw output (-z) as headers (a Step without changes yet) and the
    changes that follow each. A path is taken by position, whatever bytes it holds."""
    meta: str | None = None
    for field in fields:
        if meta is not None:
            old_mode, new_mode, old_blob, new_blob = meta[1:].split(" ")[:4]
            yield Change(field, f"{old_mode} {old_blob}", f"{new_mode} {new_blob}")
            meta = None
            continue
        field = field.lstrip("\n")
        if field.startswith("\x01"):
            ids = field[1:].split()
            yield Step(ids[0], ids[1] if len(ids) > 1 else None, ())
        elif field.startswith(":"):
            meta = field


def parse_steps(fields: Iterable[str]) -> Iterator[Step]:
    """`git log --raw -z --format=%x01%H %P` output as Steps."""
    head: Step | None = None
    changes: list[Change] = []
    for item in parse_raw(fields):
        if isinstance(item, Change):
            changes.append(item)
            continue
        if head is not None:
            yield Step(head.commit, head.parent, tuple(changes))
        head, changes = item, []
    if head is not None:
        yield Step(head.commit, head.parent, tuple(changes))


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
        with self._repo.config_reader("repository") as conf:  # read, no git run
            found = str(conf.get_value("extensions", "objectformat", "sha1")).lower()
        if found != "sha1":
            raise ConfigError(
                f"{key}: '{path}' is a {found.upper()} repository (git's objectformat); "
                "llm-bisect reads SHA-1 ones (commit ids of 40 hex digits): a SHA-1 clone"
                " of the same history works"
            )

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

    def last_of_day(self, day: str, tip: str) -> tuple[Candidate, str] | None:
        """The last commit committed by the end of `day` (YYYY-MM-DD, UTC) on `tip`'s
        first-parent history (a nightly is the branch as it was that night), with the UTC day
        it was committed (an earlier one where that day has none); None: none is that old."""
        try:
            out: str = self._repo.git.log(
                "-1", "--first-parent", f"--until={day} 23:59:59 +0000", "--format=%H %ct", tip
            )
        except git.GitCommandError as exc:
            raise ConfigError(f"candidates.repo: git log of {tip!r} failed") from exc
        if not out.strip():
            return None
        sha, when = out.split()
        committed = datetime.fromtimestamp(int(when), timezone.utc).date().isoformat()
        return self._log("-1", sha)[0], committed

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

    def _stream(self, args: Sequence[str], stdin: str = "") -> Iterator[Step]:
        """Steps from one `git log` process, parsed as they arrive; the process ends with
        the iterator (exhausted, closed or collected)."""
        proc = subprocess.Popen(
            ["git", "-C", str(self.path), "log", *_RAW, "--format=%x01%H %P", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            with suppress(BrokenPipeError):
                proc.stdin.write(stdin.encode())
            proc.stdin.close()
            yield from parse_steps(_tokens(proc.stdout))
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.stdout.close()
            proc.wait()

    def steps(self, commits: Sequence[str]) -> Iterator[Step]:
        """Each of these commits with its changes against its first parent, in this order:
        one `git log` for them all, read as far as the caller goes."""
        return self._stream(["--no-walk=unsorted", "--stdin"], "".join(f"{c}\n" for c in commits))

    def lineage(self, commit: str) -> Iterator[Step]:
        """The commit and its first-parent ancestors, newest first, each with its changes."""
        return self._stream(["--first-parent", commit, "--"])

    def differences(self, old: str, new: str) -> list[Change]:
        """Every path whose entry (mode and blob) differs between two commits."""
        out = subprocess.run(
            ["git", "-C", str(self.path), "diff", *_RAW[:4], old, new, "--"],
            capture_output=True,
        )
        if out.returncode != 0:
            why = out.stderr.decode(errors="replace").strip()
            raise ConfigError(f"candidates.repo: git diff {old[:12]} {new[:12]} failed: {why}")
        found = parse_raw(f.decode("utf-8", "surrogateescape") for f in out.stdout.split(b"\0"))
        return [c for c in found if isinstance(c, Change)]

    def blobs(self, ids: Sequence[str]) -> dict[str, bytes | None]:
        """The bytes of these blobs (one `git cat-file --batch`); None for one the
        repository does not hold."""
        done = subprocess.run(
            ["git", "-C", str(self.path), "cat-file", "--batch"],
            input="".join(f"{i}\n" for i in ids).encode(),
            capture_output=True,
        )
        out, at = done.stdout, 0
        found: dict[str, bytes | None] = {}
        for blob in ids:
            end = out.find(b"\n", at)
            header = out[at:end].split() if end >= 0 else []
            if len(header) != 3:  # `<id> missing`, or git said nothing at all
                found[blob] = None
                at = end + 1 if end >= 0 else at
                continue
            size = int(header[2])
            found[blob] = out[end + 1 : end + 1 + size]
            at = end + 2 + size
        return found

    def read(self, commit: str, path: str) -> bytes | None:
        """A file's bytes at a commit; None when the commit has no such file."""
        try:
            blob = self._repo.commit(commit).tree / path
        except KeyError:
            return None
        data: bytes = blob.data_stream.read()
        return data


class NoRepository(GitSource):
    """No clone at all (`configs` of a build the launcher starts as it is, with no
    `candidates:`): a full commit id stands for itself; anything that reads the repository is
    a ConfigError saying why one is needed."""

    def __init__(self, why: str) -> None:
        self.path = Path()
        self.why = why

    @property  # every read of the clone goes through `_repo`
    def _repo(self) -> git.Repo:  # type: ignore[override]
        raise ConfigError(self.why)

    def remote_url(self) -> str:
        return ""

    def resolve(self, ref: str, key: str) -> Candidate:
        if _SHA.fullmatch(ref):
            return Candidate(commit=ref)
        raise ConfigError(f"{key}: {ref!r} is not a full commit id, and {self.why}")


_SHA = re.compile(r"[0-9a-f]{40}")
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def nightly_day(ref: str) -> str | None:
    """`ref` as a day (YYYY-MM-DD, a real date: its nightly stands for it), else None."""
    if not _DAY.fullmatch(ref):
        return None
    try:
        return date.fromisoformat(ref).isoformat()
    except ValueError:
        return None


KIND = SOURCES.register(
    SourceKind(GIT, CandidatesConfig, make=lambda cfg, ctx: GitSource(ctx.repo, ctx.key))
)
