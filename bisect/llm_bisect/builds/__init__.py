"""Builds: how a candidate becomes runnable, apart from where it runs (the launcher).

    candidate ─► Builder.route ─► first strategy that applies (or why none does)
                      │                       shown by `candidates` before anything runs
                      ▼
               Builder.build ─► cache/<commit>-<route>/  (made once, reused, LRU-evicted)
                      │
                      ▼
               Build: the folder, its interpreter (`{python}`), env, facts for result.json

Strategies: wheel.py (uv, a per-commit index), overlay.py (Python over a
precompiled install), command.py (yours); cache.py keeps what they made,
prefetch.py makes the next ones in the background; images.py turns a wheel or
overlay build into an image derived from a base image (Docker launcher). A strategy says whether it
applies without building anything (`applies`), then makes the build (`make`).
A build that fails is a LaunchError: the probe is `skip`, never bad.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from ..errors import LaunchError
from ..launchers import guard
from ..launchers.common import tail as log_tail
from ..model import Candidate
from .cache import BuildCache


@dataclass(frozen=True)
class Build:
    """A runnable candidate."""

    route: str
    """The strategy that made it: wheel, overlay, command."""
    folder: Path
    """`{build}` in server.command."""
    python: str
    """`{python}` in server.command: the build's interpreter."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Added to the server's environment (an overlay's PYTHONPATH)."""
    facts: Mapping[str, Any] = field(default_factory=dict)
    """What result.json records of it (base commit, files written, seconds)."""


@dataclass(frozen=True)
class ImageTarget:
    """What a wheel or overlay build is applied to with the Docker launcher (images.py)."""

    base: str
    """The base image: a reference in the engine or a registry."""
    python: str = "python3"
    """The base image's interpreter (on its PATH, or a path)."""
    package: str = "vllm"


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
    """The route it gives: image, wheel, overlay, command."""
    cache_name: str
    """Its builds' name in the cache (`<commit>-<cache_name>`): a stage for an image
    differs from a build run in place."""

    def applies(self, candidate: Candidate) -> tuple[bool, str]:
        """Whether it can build this candidate, and what it will do or why not. Cheap."""
        ...

    def make(self, candidate: Candidate, out: Path, log: Path) -> dict[str, Any]:
        """Build into `out` (a fresh folder); its facts. LaunchError when the build fails."""
        ...

    def load(self, candidate: Candidate, folder: Path, facts: Mapping[str, Any]) -> Build:
        """The Build held by a finished folder."""
        ...


class ImageStrategy:
    """The `image` route: the launcher's image template, as it has always been."""

    name = "image"
    cache_name = "image"

    def __init__(self) -> None:
        self.lookup: Callable[[Candidate], tuple[bool | None, str]] | None = None
        """Set by the Docker launcher: (exists?, the image or why not) without pulling."""

    def applies(self, candidate: Candidate) -> tuple[bool, str]:
        if self.lookup is None:
            return False, "images run with launcher: docker"
        found, detail = self.lookup(candidate)
        if found is None:  # a pull would fail as the lookup did: let the next route try
            return False, f"could not tell whether it exists: {detail}"
        return found, detail

    def make(self, candidate: Candidate, out: Path, log: Path) -> dict[str, Any]:
        raise LaunchError("image: pulled by the Docker launcher, not built")

    def load(self, candidate: Candidate, folder: Path, facts: Mapping[str, Any]) -> Build:
        raise LaunchError("image: pulled by the Docker launcher, not built")


class Builder:
    """The strategies of a config, in order, over one cache.

    Safe to call from the prefetch thread and the probe at once: a build of one
    commit is made once, and a second caller waits for it.
    """

    def __init__(
        self,
        strategies: Sequence[Strategy],
        cache: BuildCache,
        targets: Mapping[str, ImageTarget] | None = None,
    ) -> None:
        self.strategies = list(strategies)
        self.cache = cache
        self.targets = dict(targets or {})
        """Route → the base image its builds are applied to (Docker launcher only)."""
        self._lock = threading.Lock()
        self._making: dict[str, threading.Event] = {}

    def route(self, candidate: Candidate) -> Route:
        why = []
        for strategy in self.strategies:
            ok, detail = strategy.applies(candidate)
            if ok:
                return Route(strategy.name, detail)
            why.append(f"{strategy.name}: {detail}")
        return Route(None, "; ".join(why))

    def log_of(self, candidate: Candidate) -> Path:
        """Where the build of this candidate logs (kept beside the cache)."""
        return self.cache.root / "logs" / f"{candidate.commit}.log"

    def cached(self, candidate: Candidate, route: Route | None = None) -> bool:
        """Whether the candidate's build is in the cache (`route`: already worked out)."""
        route = route or self.route(candidate)
        strategy = next((s for s in self.strategies if s.name == route.strategy), None)
        return strategy is not None and self.cache.has(f"{candidate.commit}-{strategy.cache_name}")

    def build(self, candidate: Candidate) -> Build:
        """The candidate's build, from the cache or made now; LaunchError when it cannot be."""
        route = self.route(candidate)
        strategy = next((s for s in self.strategies if s.name == route.strategy), None)
        if strategy is None:
            raise LaunchError(str(route))
        key = f"{candidate.commit}-{strategy.cache_name}"
        while True:
            with self._lock:
                making = self._making.get(key)
                if making is None:
                    self._making[key] = threading.Event()
                    break
            making.wait()  # the prefetch thread is making it: use what it made
        try:
            found = self.cache.get(key)
            cached = found is not None
            if found is None:
                log = self.log_of(candidate)
                log.parent.mkdir(parents=True, exist_ok=True)
                log.write_text("")
                with self.cache.making(key) as (out, facts):
                    facts.update(strategy.make(candidate, out, log))
                found = self.cache.get(key)
                assert found is not None
        finally:
            with self._lock:
                self._making.pop(key).set()
        folder, facts = found
        build = strategy.load(candidate, folder, facts)
        return replace(build, facts={"route": build.route, **build.facts, "cached": cached})


GRACE_S = 5.0
"""Seconds a build step gets between SIGTERM and SIGKILL."""


def run_logged(
    argv: Sequence[str],
    log: Path,
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    timeout: float | None = None,
    what: str,
    redact: Sequence[str] = (),
) -> None:
    """Run a build step under the guard (launchers/guard.py), output appended to `log`.

    The values of the `redact` variables never reach the log. A non-zero exit or
    a timeout is a LaunchError (the candidate is skip). The
    guard ends the step and everything it started when this process stops
    waiting: a timeout, Ctrl-C, the run ending, even a SIGKILL of llm-bisect.
    """
    with log.open("ab") as f:
        f.write(("$ " + " ".join(argv) + "\n").encode())
        f.flush()
        try:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    guard.__file__,
                    str(GRACE_S),
                    "--redact",
                    ",".join(redact),
                    "--",
                    *argv,
                ],
                cwd=cwd,
                env=dict(env),
                stdout=f,
                stderr=subprocess.STDOUT,
                stdin=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise LaunchError(f"{what} could not run: {exc.strerror}") from None
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _end(proc)
            raise LaunchError(f"{what} ran past {timeout:g}s (build log)", tail(log)) from None
        except BaseException:
            _end(proc)
            raise
        finally:
            if proc.stdin is not None:
                proc.stdin.close()
    if code != 0:
        raise LaunchError(f"{what} exited with {code}", tail(log))


def _end(proc: subprocess.Popen[bytes]) -> None:
    """The guard ends its group when stdin closes; SIGKILL after the grace if it lingers."""
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(timeout=GRACE_S + 2)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def tail(log: Path, lines: int = 20) -> str:
    """A build log's tail (launchers.common.tail); the guard masked its secrets already."""
    return log_tail(log, lines, [])
