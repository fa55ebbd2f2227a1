"""A launcher whose servers keep the engine's compile caches (`probe.engine_cache`): each
slot's server is given its own folder on its node (enginecache), and each probe records
what that folder held when the server was ready.

    launch(candidate, slot k) ─► the folder ROOT/<node>/slot-k made, its variables in the
        server's environment (beside an instrument's) ─► inner launcher's server
    fingerprint() (the server is ready) ─► `engine_cache`: the folder, files held before the
        start and written since, and `cold` / `hit` / `warm`

start_cold(candidate): that candidate's next server gets an empty folder of its own
(`fresh-<short>-<random>` beside the slots' folders, removed once it stops where this
machine can): the runner asks it for a re-probe of a verdict that contradicts its
neighbours (search.contradicted), which is then not believed on a cache its first start
may have written.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from types import TracebackType
from typing import Any

from ..enginecache import CACHES, NODE, Census, EngineCache, folder
from ..jsonvalue import Json
from ..model import Candidate
from . import Artifact, Avoids, Instrument, Launcher, Server


def census(where: Path, since: float) -> Census | None:
    """What `where` holds: files last written before `since` (seconds since the epoch) and
    files written at or after it; None when the folder is not visible on this machine."""
    if not where.is_dir():
        return None
    held = written = 0
    for top, _, files in os.walk(where):
        for name in files:
            with suppress(OSError):  # a file removed while counted
                if os.stat(os.path.join(top, name)).st_mtime < since:
                    held += 1
                else:
                    written += 1
    return Census(held, written)


class CachedServer:
    """A server whose fingerprint says what its engine cache folder held."""

    def __init__(
        self,
        inner: Server,
        cache: EngineCache,
        node: str,
        slot: int,
        now: Callable[[], float],
        fresh: str = "",
    ) -> None:
        self.inner = inner
        self.cache = cache
        self.node = node
        self.slot = slot
        self.now = now
        self.fresh = fresh
        """The name of its own empty folder (start_cold); "": the slot's."""
        self.began = 0.0

    @property
    def base_url(self) -> str:
        return self.inner.base_url

    @base_url.setter
    def base_url(self, value: str) -> None:
        self.inner.base_url = value

    def __enter__(self) -> CachedServer:
        self.began = self.now()
        self.inner.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.inner.__exit__(exc_type, exc, tb)
        finally:
            if self.fresh and self.cache.place == "here":  # what a container wrote as root
                shutil.rmtree(folder(self.cache.root, self.node, 0, self.fresh), True)

    def wait_ready(self) -> None:
        self.inner.wait_ready()

    def check_alive(self, wait: float = 0.0) -> None:
        self.inner.check_alive(wait)

    def log_tail(self, lines: int = 20) -> str:
        return self.inner.log_tail(lines)

    def stop(self) -> None:
        self.inner.stop()

    def fingerprint(self) -> Mapping[str, Any]:
        facts = dict(self.inner.fingerprint())
        ran_on = str(facts.get("node", ""))
        node, place = self.node, self.cache.place
        if place == "node":  # filled on the node: the Slurm job's (one name, not a list)
            visible = bool(ran_on) and not any(c in ran_on for c in "[,")
            node = ran_on if visible else node
        elif place == "here":  # another machine's Docker engine: its folder is over there
            visible = not ran_on or ran_on == node
        else:
            visible = False  # a pod's node
        where = folder(self.cache.root, node, self.slot, self.fresh)
        said: dict[str, Json] = {"folder": str(where)}
        if self.fresh:
            said["fresh"] = True
        counted = census(where, self.began) if visible else None
        if counted is not None:
            said |= {"held": counted.held, "written": counted.written, "state": counted.state}
        return {**facts, "engine_cache": said}


class CachedLauncher:
    """A Launcher whose servers keep the engine cache (see the module docstring)."""

    def __init__(
        self,
        inner: Launcher,
        cache: EngineCache,
        now: Callable[[], float] = time.time,
        node: Callable[[], str] = socket.gethostname,
    ) -> None:
        self.inner = inner
        self.cache = cache
        self.now = now
        self.node = {"here": node(), "node": NODE, "configured": ""}[cache.place]
        self._cold: set[str] = set()
        self._lock = threading.Lock()

    def start_cold(self, candidate: Candidate) -> None:
        with self._lock:
            self._cold.add(candidate.commit)

    def avoid(self, candidate: Candidate, nodes: Sequence[str]) -> None:
        if isinstance(self.inner, Avoids):  # a cluster's: the slots are places elsewhere
            self.inner.avoid(candidate, nodes)

    def artifact(self, candidate: Candidate) -> Artifact:
        return self.inner.artifact(candidate)

    def launch(
        self,
        candidate: Candidate,
        probe_dir: Path,
        instrument: Instrument | None = None,
        slot: int = 0,
    ) -> Server:
        with self._lock:
            cold = candidate.commit in self._cold
            self._cold.discard(candidate.commit)
        fresh = f"{candidate.short}-{secrets.token_hex(4)}" if cold else ""
        env = self.cache.env(self.node, slot, fresh)
        if self.cache.place == "here":  # made by this user, not by a Docker engine as root
            mine = folder(self.cache.root, self.node, slot, fresh)
            for name, sub in CACHES.items():
                if name in env:
                    (mine / sub).mkdir(parents=True, exist_ok=True)
        given = instrument or Instrument()
        with_cache = Instrument(given.args, {**env, **given.env}, given.paths)
        server = self.inner.launch(candidate, probe_dir, with_cache, slot)
        return CachedServer(server, self.cache, self.node, slot, self.now, fresh)

    def prefetch(self, candidates: list[Candidate]) -> None:
        self.inner.prefetch(candidates)

    def quiet(self) -> AbstractContextManager[None]:
        return self.inner.quiet()

    def reap(self) -> list[str]:
        return self.inner.reap()

    def close(self) -> None:
        self.inner.close()
