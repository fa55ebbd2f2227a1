"""Making the builds of the candidates that can come next while a probe runs.

    runner: prefetch([next if good, next if bad, next if skip])
            └► a background thread builds them in that order (those not in the cache)
    runner: with quiet():  checks run; no build starts until they are done

A build the probe then needs is taken from the cache, or waited for if the
thread is making it (Builder makes one commit once). A build that fails in the
background is not an error: the probe that needs it builds it again and skips
if it fails there too. close() ends the thread; a build step in flight is
stopped with its process group.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from ..model import Candidate
from . import Builder


class BuildPrefetcher:
    """One background thread making the builds a run may need next."""

    def __init__(self, builder: Builder) -> None:
        self.builder = builder
        self._cond = threading.Condition()
        self._wanted: list[Candidate] = []
        self._quiet = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self.made: list[str] = []
        """Commits whose build this thread made (for the report and tests)."""

    def want(self, candidates: Sequence[Candidate]) -> None:
        """Make these next, in order (replacing what was wanted before)."""
        with self._cond:
            self._wanted = [c for c in candidates if c.commit not in self.made]
            if self._thread is None and self._wanted:
                self._thread = threading.Thread(target=self._work, daemon=True)
                self._thread.start()
            self._cond.notify_all()

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """No build starts inside (checks are timing a server)."""
        with self._cond:
            self._quiet += 1
        try:
            yield
        finally:
            with self._cond:
                self._quiet -= 1
                self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._wanted = []
            self._cond.notify_all()
        # the thread is a daemon: a build step in flight ends with its process group when
        # the interpreter exits; a finished run does not wait for a speculative build

    def _next(self) -> Candidate | None:
        with self._cond:
            while not self._closed and (self._quiet or not self._wanted):
                self._cond.wait()
            if self._closed:
                return None
            return self._wanted.pop(0)

    def _work(self) -> None:
        while (candidate := self._next()) is not None:
            try:
                route = self.builder.route(candidate)
                if route.strategy is None:
                    continue
                if not self.builder.cached(candidate, route):
                    self.builder.build(candidate).release()  # made; used by a probe later
                    self.made.append(candidate.commit)
            except Exception:  # the probe that needs it builds again, and says why
                continue
