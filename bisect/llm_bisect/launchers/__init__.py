"""Launchers: start a server for a candidate, yield an endpoint, always tear it down."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Protocol

from ..model import Candidate


class Server(Protocol):
    """A running server for one candidate. Leaving the context stops it, whatever happened."""

    base_url: str
    """Where the OpenAI API answers, e.g. `http://127.0.0.1:8123`."""

    def __enter__(self) -> Server: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def wait_ready(self) -> None:
        """Block until /health and /v1/models answer; raise ServerExited or NotReady."""
        ...

    def check_alive(self, wait: float = 0.0) -> None:
        """Raise ServerExited when the server has ended (waiting up to `wait` s for it to)."""
        ...

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the server's output, secrets removed."""
        ...


class Launcher(Protocol):
    """Makes a Server for a candidate; its output goes to `probe_dir`."""

    def launch(self, candidate: Candidate, probe_dir: Path) -> Server: ...
