"""Sources: where candidates come from."""

from __future__ import annotations

from typing import Protocol

from ..model import Candidate


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
