"""The process launcher: one local command per candidate, in its own process group.

The command runs under the guard (launchers/guard.py), which ends the whole
group when the harness closes its stdin or dies, so even a SIGKILLed run
leaves no server behind.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import IO

import httpx

from ..config import fill
from ..errors import LaunchError, NotReady, ServerExited
from ..model import Candidate
from ..redact import redact
from ..retry import NotYetReady, readiness
from . import guard

GRACE_S = 5.0
"""Seconds a server gets between SIGTERM and SIGKILL."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM while cleaning up, so a second Ctrl-C cannot cut it short."""
    held = {signal.SIGINT, signal.SIGTERM}
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    except (ValueError, OSError):  # not the main thread's business here
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def tail(path: Path, lines: int, secrets: list[str]) -> str:
    """The last lines of a log file, secrets removed."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return redact("\n".join(text.splitlines()[-lines:]), secrets)


def ready_once(http: httpx.Client) -> None:
    """One readiness poll: /health answers 200 and /v1/models lists a model."""
    try:
        health = http.get("/health")
        if health.status_code != 200:
            raise NotYetReady(f"/health answered {health.status_code}")
        models = http.get("/v1/models")
        data = models.json().get("data") if models.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        raise NotYetReady(f"{type(exc).__name__}: {exc}") from exc
    if not data:
        raise NotYetReady("/v1/models lists no model yet")


class ProcessServer:
    """One server process group. Enter starts it; exit ends the whole group."""

    def __init__(
        self,
        argv: list[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path,
        ready_timeout: float,
        secrets: list[str],
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        port: int,
    ) -> None:
        self.argv = argv
        self.env = dict(env)
        self.cwd = cwd
        self.log_path = log_path
        self.ready_timeout = ready_timeout
        self.secrets = secrets
        self.clock = clock
        self.sleep = sleep
        self.base_url = f"http://127.0.0.1:{port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def __enter__(self) -> ProcessServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", guard.__file__, str(GRACE_S), "--", *self.argv],
                stdin=subprocess.PIPE,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                env=self.env,
                start_new_session=True,
            )
        except OSError as exc:
            self._log.close()
            raise LaunchError(f"cannot start the guard: {exc.strerror}") from exc
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with signals_deferred():
            self.stop()

    @property
    def pid(self) -> int:
        """The process-group id (the guard's pid)."""
        if self._proc is None:
            raise LaunchError("the server was not started")
        return self._proc.pid

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=GRACE_S + 2)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if proc.stdin is not None:
                proc.stdin.close()
        if self._log is not None:
            self._log.close()
            self._log = None

    def check_alive(self, wait: float = 0.0) -> None:
        if self._proc is None:
            raise ServerExited("the server is not running", None)
        try:
            code = self._proc.wait(timeout=wait) if wait > 0 else self._proc.poll()
        except subprocess.TimeoutExpired:
            code = None
        if code is not None:
            raise ServerExited(f"server exited with code {code}", code, self.log_tail())

    def wait_ready(self) -> None:
        started = self.clock()
        with httpx.Client(base_url=self.base_url, timeout=2.0) as http:

            def poll() -> None:
                self.check_alive()
                ready_once(http)

            try:
                for attempt in readiness(self.ready_timeout, clock=self.clock, sleep=self.sleep):
                    with attempt:
                        poll()
            except ServerExited as exc:
                raise ServerExited(f"{exc} before ready", exc.returncode, exc.log_tail) from None
            except NotYetReady as exc:
                waited = self.clock() - started
                raise NotReady(
                    f"not ready after {waited:.0f}s (ready_timeout {self.ready_timeout:g}s): {exc}",
                    self.log_tail(),
                ) from None

    def log_tail(self, lines: int = 20) -> str:
        if self._log is not None:
            self._log.flush()
        return tail(self.log_path, lines, self.secrets)


class ProcessLauncher:
    """Starts `command` (an argv template) for each candidate, never through a shell."""

    def __init__(
        self,
        command: list[str],
        *,
        env: Mapping[str, str],
        secrets: list[str],
        cwd: Path,
        ready_timeout: float,
        base_env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.command = command
        self.env = {**(os.environ if base_env is None else base_env), **env}
        self.secrets = secrets
        self.cwd = cwd
        self.ready_timeout = ready_timeout
        self.clock = clock
        self.sleep = sleep

    def launch(self, candidate: Candidate, probe_dir: Path) -> ProcessServer:
        port = free_port()
        values = {"commit": candidate.commit, "short": candidate.short, "port": str(port)}
        return ProcessServer(
            [fill(arg, values) for arg in self.command],
            env=self.env,
            cwd=self.cwd,
            log_path=probe_dir / "server.log",
            ready_timeout=self.ready_timeout,
            secrets=self.secrets,
            clock=self.clock,
            sleep=self.sleep,
            port=port,
        )
