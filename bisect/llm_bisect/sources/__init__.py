"""Sources: where candidates come from. The seams (Source, Repository) and the values a
repository answers with; no kind is registered here (sources/git.py registers `git`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..model import Candidate

ABSENT = "000000 " + "0" * 40
"""A path's entry where it does not exist: `<mode> <blob>` of nothing."""


@dataclass(frozen=True)
class Change:
    """One path that differs between an older and a newer commit."""

    path: str
    old: str
    """`<mode> <blob>` in the older commit; ABSENT where it was not there."""
    new: str
    """`<mode> <blob>` in the newer commit; ABSENT where it is gone."""


@dataclass(frozen=True)
class Step:
    """A commit and what it changed against its first parent."""

    commit: str
    parent: str | None
    """Its first parent; None for a root commit."""
    changes: tuple[Change, ...]


class Source(Protocol):
    """Resolves refs and lists the candidates between two commits."""

    def resolve(self, ref: str, key: str) -> Candidate:
        """The candidate a ref names; `key` names the config key in errors."""
        ...

    def is_ancestor(self, older: str, newer: str) -> bool:
        """True when `older` is an ancestor of (or equal to) `newer`."""
        ...

    def merge_base(self, a: str, b: str) -> Candidate:
        """The best common ancestor of two commits."""
        ...

    def between(self, old: str, new: str) -> list[Candidate]:
        """Commits `new` has and `old` lacks, oldest first, `new` last (`old` excluded)."""
        ...


class Repository(Source, Protocol):
    """A clone as the kinds and services read it (sources/git.GitSource): what a source kind
    makes (kinds.SourceKind), and what a strategy or a launcher's end is handed
    (kinds.BuildContext, EndContext)."""

    @property
    def path(self) -> Path: ...

    def remote_url(self) -> str:
        """The fetch URL of `origin` (else of the first remote); "" when there is none."""
        ...

    def last_of_day(self, day: str, tip: str) -> tuple[Candidate, str] | None: ...

    def changed_files(self, old: str, new: str) -> list[str]: ...

    def steps(self, commits: Sequence[str]) -> Iterator[Step]: ...

    def lineage(self, commit: str) -> Iterator[Step]: ...

    def differences(self, old: str, new: str) -> list[Change]: ...

    def blobs(self, ids: Sequence[str]) -> dict[str, bytes | None]: ...

    def read(self, commit: str, path: str) -> bytes | None: ...
