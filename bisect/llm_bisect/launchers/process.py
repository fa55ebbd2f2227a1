"""The process launcher: one local command per candidate, in its own process group.

The command runs under the guard (launchers/guard.py), which ends the whole
group when the harness closes its stdin or dies, so even a SIGKILLed run
leaves no server behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from pathlib import Path
from typing import IO, Any

from ..builds import Builder
from ..builds.prefetch import BuildPrefetcher
from ..config import fill
from ..errors import LaunchError, ServerExited
from ..model import Candidate
from ..report import escape as esc
from . import Artifact, Instrument, guard
from .commands import Prefetching, command_artifact, prepare
from .common import Held, LoggedServer, free_port, wait_ready

GRACE_S = 5.0
"""Seconds a server gets between SIGTERM and SIGKILL."""


class ProcessServer(LoggedServer):
    """One server process group. Enter starts it; exit ends the whole group."""

    def __init__(
        self,
        argv: list[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path,
        ready_timeout: float,
        secret_names: list[str],
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        port: int,
        facts: Mapping[str, Any] | None = None,
        held: Held | None = None,
    ) -> None:
        self.facts = dict(facts or {})
        self.held = held
        self.argv = argv
        self.env = dict(env)
        self.cwd = cwd
        self.log_path = log_path
        self.ready_timeout = ready_timeout
        self.secret_names = secret_names
        self.secrets = [self.env[n] for n in secret_names if n in self.env]
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
                [
                    sys.executable,
                    "-I",
                    guard.__file__,
                    str(GRACE_S),
                    "--redact",
                    ",".join(self.secret_names),
                    "--",
                    *self.argv,
                ],
                stdin=subprocess.PIPE,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                env=self.env,
                start_new_session=True,
            )
        except OSError as exc:
            self._close_log()
            self.release()
            raise LaunchError(f"cannot start the guard: {exc.strerror}") from exc
        return self

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
        self._close_log()

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
        wait_ready(self, self.ready_timeout, clock=self.clock, sleep=self.sleep)

    def fingerprint(self) -> dict[str, Any]:
        """The build's facts and `command`, the server's command line (never its environment)."""
        return {**self.facts, "command": esc.shell(self.argv)}


class ProcessLauncher(Prefetching):
    """Starts `command` (an argv template) for each candidate, never through a shell."""

    def __init__(
        self,
        command: list[str],
        *,
        env: Mapping[str, str],
        secret_names: list[str],
        cwd: Path,
        ready_timeout: float,
        base_env: Mapping[str, str] | None = None,
        builder: Builder | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.builder = builder
        self.prefetcher = BuildPrefetcher(builder) if builder is not None else None
        self.command = command
        self.env = {**(os.environ if base_env is None else base_env), **env}
        self.secret_names = secret_names
        self.cwd = cwd
        self.ready_timeout = ready_timeout
        self.clock = clock
        self.sleep = sleep

    def artifact(self, candidate: Candidate) -> Artifact:
        return command_artifact(self.builder, candidate, " ".join(self.command))

    def reap(self) -> list[str]:
        return []  # the guard ends a killed run's servers itself

    def launch(
        self,
        candidate: Candidate,
        probe_dir: Path,
        instrument: Instrument | None = None,
        slot: int = 0,
    ) -> ProcessServer:
        """A server for the candidate (built first, when there is a builder: a build that
        fails is a LaunchError, so the probe is skip); `instrument` adds arguments,
        environment and Python paths."""
        port = free_port()
        ready = prepare(self.builder, candidate, probe_dir, self.env, instrument)
        values = {"commit": candidate.commit, "short": candidate.short, "port": str(port)}
        argv = [fill(arg, values | ready.values) for arg in self.command]
        if instrument is not None:
            argv += instrument.args
        return ProcessServer(
            argv,
            facts=ready.facts,
            env=ready.env,
            cwd=self.cwd,
            log_path=probe_dir / "server.log",
            ready_timeout=self.ready_timeout,
            secret_names=self.secret_names,
            clock=self.clock,
            sleep=self.sleep,
            port=port,
            held=ready.build,
        )
