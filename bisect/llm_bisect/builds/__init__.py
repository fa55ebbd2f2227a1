"""Builds: how a candidate becomes runnable, apart from where it runs (the launcher).

    candidate ─► Builder.route ─► first strategy that applies (or why none does)
                      │                       shown by `candidates` before anything runs
                      ▼
               Builder.build ─► cache/<commit>-<route>-<identity>/  (made once, in place,
                      │         reused by every config that would make the same; leased
                      ▼         while in use, LRU-evicted past the budget: cache.py)
               Build: the folder, its interpreter (`{python}`), env, facts for result.json,
                      the lease the server holds until it stops

Strategies: wheel.py (uv, a per-commit index), overlay.py (Python over a
precompiled install), command.py (yours); cache.py keeps what they made,
prefetch.py makes the next ones in the background; images.py turns a wheel or
overlay build into an image derived from a base image (Docker launcher). A strategy says whether it
applies without building anything (`applies`), what makes its build (`identity`: the
cache key), then makes the build (`make`).
A build that fails is a LaunchError: the probe is `skip`, never bad.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from ..errors import ConfigError, LaunchError
from ..launchers import guard
from ..launchers.common import tail as log_tail
from ..model import Candidate
from .cache import BuildCache, Lease, as_json


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
    lease: Lease | None = field(default=None, compare=False, repr=False)
    """Holds it in use (never evicted) until released: whoever runs from it releases it."""

    def release(self) -> None:
        """Done with it: the cache may evict it."""
        if self.lease is not None:
            self.lease.release()


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

    def identity(self, candidate: Candidate) -> Mapping[str, Any]:
        """All that makes its build of this candidate besides the commit (JSON values): its
        config, its base, the platform, tool versions. The cache key: a build is reused
        only where the identity is the same."""
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

    def identity(self, candidate: Candidate) -> Mapping[str, Any]:
        return {}  # never cached: the launcher pulls it

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

    Safe to call from the prefetch thread, the probes of several slots and other runs
    sharing the cache at once: a build is made once (the key's lock), and another caller
    waits for it.
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
        self._logs: dict[str, Path] = {}

    def route(self, candidate: Candidate) -> Route:
        why = []
        for strategy in self.strategies:
            ok, detail = strategy.applies(candidate)
            if ok:
                return Route(strategy.name, detail)
            why.append(f"{strategy.name}: {detail}")
        return Route(None, "; ".join(why))

    def strategy(self, name: str | None) -> Strategy | None:
        """The strategy a route names."""
        return next((s for s in self.strategies if s.name == name), None)

    def key(self, candidate: Candidate, strategy: Strategy) -> tuple[str, dict[str, Any]]:
        """The cache key of the candidate's build by `strategy`, and its identity."""
        identity = as_json({"strategy": strategy.cache_name, **strategy.identity(candidate)})
        text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        return f"{candidate.commit}-{strategy.cache_name}-{digest}", identity

    def log_of(self, candidate: Candidate) -> Path:
        """Where the build of this candidate logs (kept beside the cache)."""
        if candidate.commit in self._logs:
            return self._logs[candidate.commit]
        strategy = self.strategy(self.route(candidate).strategy)
        if strategy is None:
            return self.cache.root / "logs" / f"{candidate.commit}.log"
        return self.cache.log(self.key(candidate, strategy)[0])

    def cached(self, candidate: Candidate, route: Route | None = None) -> bool:
        """Whether the candidate's build is in the cache (`route`: already worked out)."""
        strategy = self.strategy((route or self.route(candidate)).strategy)
        return strategy is not None and self.cache.has(*self.key(candidate, strategy))

    def build(self, candidate: Candidate) -> Build:
        """The candidate's build, from the cache or made now, leased: release it when done
        with it. LaunchError when it cannot be made; ConfigError when the cache cannot
        be written."""
        route = self.route(candidate)
        strategy = self.strategy(route.strategy)
        if strategy is None:
            raise LaunchError(str(route))
        key, identity = self.key(candidate, strategy)
        log = self._logs[candidate.commit] = self.cache.log(key)

        def make(folder: Path) -> Mapping[str, Any]:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text("")
            try:
                return strategy.make(candidate, folder, log)
            except OSError as exc:  # the build's own I/O: this candidate is skip
                raise LaunchError(f"{strategy.name}: {exc}", tail(log)) from exc

        try:
            lease, made = self.cache.obtain(key, identity, make)
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise ConfigError(f"build.cache.dir: cannot use '{self.cache.root}' ({why})") from exc
        try:
            build = strategy.load(candidate, lease.folder, lease.facts)
        except BaseException:
            lease.release()
            raise
        facts = {**build.facts, "route": build.route, "cached": not made}
        return replace(build, facts=facts, lease=lease)


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
