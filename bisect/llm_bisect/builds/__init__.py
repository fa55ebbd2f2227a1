"""Builds: how a candidate becomes runnable, apart from where it runs (the launcher).

    candidate ─► Builder.route ─► first strategy that applies (or why none does)
                      │                       shown by `candidates` before anything runs
                      ▼
               Builder.build ─► cache/<commit>/<route>/  (made once, reused, LRU-evicted)
                      │
                      ▼
               Build: the folder, its interpreter (`{python}`), env, facts for result.json

A strategy says whether it applies without building anything (`route`), then
makes the build (`make`). A build that fails is a LaunchError: the probe is
`skip`, never bad.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from ..errors import LaunchError
from ..model import Candidate
from .cache import BuildCache


@dataclass(frozen=True)
class Build:
    """A runnable candidate."""

    route: str
    """The strategy that made it: overlay, command."""
    folder: Path
    """`{build}` in server.command."""
    python: str
    """`{python}` in server.command: the build's interpreter."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Added to the server's environment (an overlay's PYTHONPATH)."""
    facts: Mapping[str, Any] = field(default_factory=dict)
    """What result.json records of it (base commit, files written, seconds)."""


@dataclass(frozen=True)
class Route:
    """How a candidate would be built, or why it cannot be."""

    strategy: str | None
    """The strategy that applies; None when none does."""
    detail: str
    """What it will do, or (no strategy) why each one does not apply."""

    def __str__(self) -> str:
        return f"{self.strategy}: {self.detail}" if self.strategy else f"no build: {self.detail}"


class Strategy(Protocol):
    """One way to build a candidate."""

    name: str

    def applies(self, candidate: Candidate) -> tuple[bool, str]:
        """Whether it can build this candidate, and what it will do or why not. Cheap."""
        ...

    def make(self, candidate: Candidate, out: Path, log: Path) -> dict[str, Any]:
        """Build into `out` (a fresh folder); its facts. LaunchError when the build fails."""
        ...

    def load(self, candidate: Candidate, folder: Path, facts: Mapping[str, Any]) -> Build:
        """The Build held by a finished folder."""
        ...


class Builder:
    """The strategies of a config, in order, over one cache."""

    def __init__(self, strategies: Sequence[Strategy], cache: BuildCache) -> None:
        self.strategies = list(strategies)
        self.cache = cache

    def route(self, candidate: Candidate) -> Route:
        why = []
        for strategy in self.strategies:
            ok, detail = strategy.applies(candidate)
            if ok:
                return Route(strategy.name, detail)
            why.append(f"{strategy.name}: {detail}")
        return Route(None, "; ".join(why))

    def build(self, candidate: Candidate, log_dir: Path) -> Build:
        """The candidate's build, from the cache or made now (its log in `log_dir`)."""
        route = self.route(candidate)
        strategy = next((s for s in self.strategies if s.name == route.strategy), None)
        if strategy is None:
            raise LaunchError(str(route))
        key = f"{candidate.commit}-{strategy.name}"
        found = self.cache.get(key)
        cached = found is not None
        if found is None:
            log_dir.mkdir(parents=True, exist_ok=True)
            with self.cache.making(key) as (out, facts):
                facts.update(strategy.make(candidate, out, log_dir / "build.log"))
            found = self.cache.get(key)
            assert found is not None
        folder, facts = found
        build = strategy.load(candidate, folder, facts)
        return replace(build, facts={"route": build.route, **build.facts, "cached": cached})
