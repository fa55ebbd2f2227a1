"""Several launchers as one, a slot each: one Docker engine per host (`docker_hosts`).

Slot i runs on launcher i mod n; what a candidate's artifact is, the first one says."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path

from ..model import Candidate
from . import Artifact, Instrument, Launcher, Server


class Spread:
    """A Launcher over several (see the module docstring)."""

    def __init__(self, launchers: Sequence[Launcher]) -> None:
        if not launchers:
            raise ValueError("a spread needs at least one launcher")
        self.launchers = list(launchers)

    def artifact(self, candidate: Candidate) -> Artifact:
        return self.launchers[0].artifact(candidate)

    def launch(
        self,
        candidate: Candidate,
        probe_dir: Path,
        instrument: Instrument | None = None,
        slot: int = 0,
    ) -> Server:
        mine = self.launchers[slot % len(self.launchers)]
        return mine.launch(candidate, probe_dir, instrument, slot)

    def prefetch(self, candidates: list[Candidate]) -> None:
        for launcher in self.launchers:
            launcher.prefetch(candidates)

    def quiet(self) -> AbstractContextManager[None]:
        return self._quiet()

    @contextmanager
    def _quiet(self) -> Iterator[None]:
        with ExitStack() as stack:
            for launcher in self.launchers:
                stack.enter_context(launcher.quiet())
            yield

    def reap(self) -> list[str]:
        return [line for launcher in self.launchers for line in launcher.reap()]

    def close(self) -> None:
        for launcher in self.launchers:
            launcher.close()
