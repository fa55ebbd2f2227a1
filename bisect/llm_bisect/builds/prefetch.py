"""Making ready what the candidates that can come next need, while a probe runs.

    runner: prefetch([next if good, next if bad, next if skip])
            └► one background thread fetches them in that order: builds (those not in the
               cache), images to pull (Docker), images derived from builds (Docker)
    runner: with quiet():  checks run; nothing starts until they are done, and a step that
               comes in pieces (a pull's layers) waits between them (`hold`)

What a probe then needs is taken from the cache or the engine, or waited for if the
thread is making it (Builder makes one commit once; the Docker launcher pulls one image
once). A fetch that fails in the background is not an error: the probe that needs it
makes it again and skips if it fails there too. close() ends the thread; a build step
in flight is stopped with its process group.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from ..model import Candidate
from . import Builder


class Prefetcher:
    """One background thread fetching ahead what a run may need next (see the module
    docstring); `fetch` makes one candidate ready and says whether it made anything."""

    def __init__(self, fetch: Callable[[Candidate], bool]) -> None:
        self._fetch = fetch
        self._cond = threading.Condition()
        self._wanted: list[Candidate] = []
        self._quiet = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self.made: list[str] = []
        """Commits this thread made something for (for the report and tests)."""

    def want(self, candidates: Sequence[Candidate]) -> None:
        """Fetch these next, in order (replacing what was wanted before)."""
        with self._cond:
            self._wanted = [c for c in candidates if c.commit not in self.made]
            if self._thread is None and self._wanted and not self._closed:
                self._thread = threading.Thread(target=self._work, daemon=True)
                self._thread.start()
            self._cond.notify_all()

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """Nothing starts inside (checks are timing a server); several may be inside."""
        with self._cond:
            self._quiet += 1
        try:
            yield
        finally:
            with self._cond:
                self._quiet -= 1
                self._cond.notify_all()

    def hold(self) -> bool:
        """Between the pieces of a fetch: wait while quiet; False once closed."""
        with self._cond:
            while self._quiet and not self._closed:
                self._cond.wait()
            return not self._closed

    def close(self, wait: float = 0.0) -> None:
        """End the thread, waiting up to `wait` s for a fetch in flight to finish."""
        with self._cond:
            self._closed = True
            self._wanted = []
            self._cond.notify_all()
            thread = self._thread
        # the thread is a daemon: a build step in flight ends with its process group when
        # the interpreter exits; a finished run does not wait for a speculative build
        if thread is not None and wait > 0:
            thread.join(timeout=wait)

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
                if self._fetch(candidate):
                    self.made.append(candidate.commit)
            except Exception:  # the probe that needs it makes it again, and says why
                continue


class BuildPrefetcher(Prefetcher):
    """The builds (not in the cache yet) a run may need next."""

    def __init__(self, builder: Builder) -> None:
        super().__init__(self._build)
        self.builder = builder

    def _build(self, candidate: Candidate) -> bool:
        route = self.builder.route(candidate)
        if route.strategy is None or self.builder.cached(candidate, route):
            return False
        self.builder.build(candidate).release()  # made; used by a probe later
        return True
