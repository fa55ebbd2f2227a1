"""The process launcher: one local command per candidate, in its own process group.

The command runs under the guard (guard.py), which ends the whole
group when the harness closes its stdin or dies, so even a SIGKILLed run
leaves no server behind.

Each slot gets its own port (common.PortBook) and, given `slot_devices`, its own GPUs
(CUDA_VISIBLE_DEVICES and `{gpus}`, empty without). What answers on the port must be the
server's own session: a port another process took between its pick and the bind (a lost
race) starts the server again on another port.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, cast

from pydantic import field_validator

from .. import collectenv, escape as esc, guard, weights
from ..builds.prefetch import BuildPrefetcher
from ..clock import SYSTEM
from ..collectenv import LocalCollect
from ..config import CommandServerBase, check_placeholders
from ..errors import ConfigError, LaunchError, PortTaken, ServerExited
from ..fingerprint import Facts
from ..kinds import (
    LAUNCHERS,
    DeviceContext,
    LauncherContext,
    LauncherKind,
    Preflight,
    PreflightContext,
)
from ..model import Candidate
from ..secretnames import argv_secrets
from ..templates import expand_value, fill, template_fields
from . import Artifact, Instrument
from .commands import Prefetching, command_artifact, prepare
from .common import (
    Held,
    LoggedServer,
    PortBook,
    placement_facts,
    stranger_on,
    wait_ready,
    weights_facts,
)
from .devices import cuda_visible, slot_devices

GRACE_S = 5.0
"""Seconds a server gets between SIGTERM and SIGKILL."""
PORT_MOVES = 3
"""How many times a server whose port another process took starts again on another one."""


@dataclass(frozen=True)
class Serving:
    """What a process launcher's servers share: where they run, how long they get to be
    ready, the variables masked in their logs, the clock, the ports they take."""

    cwd: Path
    ready_timeout: float
    secret_names: list[str]
    ports: PortBook
    clock: Callable[[], float] = SYSTEM.monotonic
    sleep: Callable[[float], None] = SYSTEM.sleep


class ProcessServer(LoggedServer):
    """One server process group. Enter starts it; exit ends the whole group."""

    def __init__(
        self,
        argv_for: Callable[[int], list[str]],
        serving: Serving,
        *,
        env: Mapping[str, str],
        log_path: Path,
        facts: Mapping[str, Any] | None = None,
        held: Held | None = None,
        collect: LocalCollect | None = None,
        shown_env: Mapping[str, str] | None = None,
    ) -> None:
        """A server on a port taken from `serving.ports` (given back when it stops)."""
        cwd, ready_timeout, secret_names = serving.cwd, serving.ready_timeout, serving.secret_names
        clock, sleep = serving.clock, serving.sleep
        ports: PortBook | None = serving.ports
        port = serving.ports.take()
        self.facts = cast(Facts, dict(facts or {}))  # the build's (commands.Prepared's)
        self.collect = collect
        """collect_env beside the server, in its environment (finished before it stops)."""
        self.shown_env = dict(shown_env or {})
        """What the command line in the report names of its environment: what llm-bisect
        set over the caller's (server.env, the build's, the slot's devices)."""
        self.held = held
        self.argv_for = argv_for
        """The command line for a port (a server moved to another port runs it again)."""
        self.port = port
        self.argv = argv_for(port)
        self.ports = ports
        self.env = dict(env)
        self.cwd = cwd
        self.log_path = log_path
        self.ready_timeout = ready_timeout
        self.secret_names = secret_names
        self.argv_secrets = argv_secrets(self.argv)
        """What the command line carries (`--api-key X`, a URL login): the guard masks them
        in the log as it masks the named variables."""
        self.secrets = [self.env[n] for n in secret_names if n in self.env] + self.argv_secrets
        self.clock = clock
        self.sleep = sleep
        self.base_url = f"http://127.0.0.1:{port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def __enter__(self) -> ProcessServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._spawn()
        if self.collect is not None:
            self.collect.start()
        return self

    def _spawn(self) -> None:
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
                env={**self.env, guard.SECRETS_VAR: json.dumps(self.argv_secrets)},
                start_new_session=True,
            )
        except OSError as exc:
            self.stop()
            self.release()
            raise LaunchError(f"cannot start the guard: {exc.strerror}") from exc

    @property
    def pid(self) -> int:
        """The process-group id (the guard's pid)."""
        if self._proc is None:
            raise LaunchError("the server was not started")
        return self._proc.pid

    def stop(self) -> None:
        if self.collect is not None:
            self.collect.stop()
        self._end_group()
        if self.ports is not None:
            self.ports.give_back(self.port)
            self.ports = None
        self._close_log()

    def _end_group(self) -> None:
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
        """Ready, and what answers on the port is this server's session; a port another
        process took first (a lost race) starts the server again on another port."""
        deadline = self.clock() + self.ready_timeout
        for moves in range(PORT_MOVES + 1):
            try:
                wait_ready(
                    self,
                    max(0.0, deadline - self.clock()) if moves else self.ready_timeout,
                    clock=self.clock,
                    sleep=self.sleep,
                    verify=self._verify_port,
                )
                return
            except (PortTaken, ServerExited) as exc:
                stranger = exc if isinstance(exc, PortTaken) else self._stranger()
                if stranger is None:
                    raise  # it died on its own
                if moves == PORT_MOVES or self.ports is None:
                    raise PortTaken(  # the node's, not the build's: never a start failure
                        f"{stranger}, not this probe's server ({moves + 1} port(s) tried)",
                        self.log_tail(),
                    ) from None
                self._move(str(stranger))

    def _stranger(self) -> PortTaken | None:
        who = stranger_on(self.port, self.pid) if self._proc is not None else None
        return None if who is None else PortTaken(f"port {self.port} is served by {who}")

    def _verify_port(self) -> None:
        stranger = self._stranger()
        if stranger is not None:
            raise stranger

    def _move(self, why: str) -> None:
        """Stop the server and start it again on another port."""
        assert self.ports is not None
        self._end_group()
        old, self.port = self.port, self.ports.take()
        self.ports.give_back(old)
        self.argv = self.argv_for(self.port)
        self.base_url = f"http://127.0.0.1:{self.port}"
        if self._log is not None:
            self._log.write(
                f"llm-bisect: {why}, not this probe's server; starting it again on port "
                f"{self.port}\n".encode()
            )
            self._log.flush()
        self._spawn()

    def fingerprint(self) -> Facts:
        """The build's facts and `command`, the server's command line with the environment
        llm-bisect gave it (a secret by name only), and the weights it loaded (resolved here,
        in its environment); collect_env has finished (its facts are read from the probe
        folder)."""
        if self.collect is not None:
            self.collect.finish()
        command = esc.env_shell(self.shown_env, self.argv, self.secret_names)
        loaded = weights.resolve(weights.asked(self.argv), self.env, str(self.cwd))
        return {
            **self.facts,
            "command": command,
            **weights_facts(loaded),
            **placement_facts(socket.gethostname(), self.env),
        }


class ProcessLauncher(Prefetching):
    """Starts `command` (an argv template) for each candidate, never through a shell."""

    writes_probe_folder = True
    """Its servers can write the probe's folder at its path (loads.py: the path hook)."""

    def __init__(
        self,
        command: list[str],
        ctx: LauncherContext,
        *,
        cwd: Path,
        ready_timeout: float,
        collect_env: Sequence[str] | None = None,
        ports: PortBook | None = None,
    ) -> None:
        """`ctx.environ`: what its servers inherit, under `ctx.env`."""
        self.slot_devices = [None if d is None else tuple(d) for d in ctx.slot_devices]
        """Per slot, the GPUs its server alone uses (CUDA_VISIBLE_DEVICES, `{gpus}`)."""
        self.ports = ports or PortBook()
        self.builder = builder = ctx.builder
        self.prefetcher = BuildPrefetcher(builder) if builder is not None else None
        self.command = command
        self.collect_env = None if collect_env is None else list(collect_env)
        """server.collect_env: None runs vLLM's with the candidate's python, [] nothing."""
        self.base_env = dict(ctx.environ)
        self.config_env = dict(ctx.env)
        self.env = {**self.base_env, **ctx.env}
        self.secret_names = list(ctx.secret_names)
        self.cwd = cwd
        self.ready_timeout = ready_timeout
        self.clock = ctx.clock
        self.sleep = ctx.sleep
        self.serving = Serving(
            cwd, ready_timeout, self.secret_names, self.ports, self.clock, self.sleep
        )

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
        environment and Python paths; `slot` picks its devices."""
        ready = prepare(self.builder, candidate, probe_dir, self.env, instrument)
        devices = self.slot_devices[slot] if slot < len(self.slot_devices) else None
        env, facts = dict(ready.env), dict(ready.facts)
        values = {"commit": candidate.commit, "short": candidate.short, "gpus": ""}
        if devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = values["gpus"] = ",".join(devices)
            facts["devices"] = list(devices)
        extra = instrument.args if instrument is not None else ()

        def argv_for(port: int) -> list[str]:
            filled = values | ready.values | {"port": str(port)}
            return [*(fill(arg, filled) for arg in self.command), *extra]

        python = collectenv.python_of(self.command, ready.values.get("python", ""))
        collect_argv = collectenv.argv_for(self.collect_env, python)
        collect_values = values | ready.values | {"python": python}
        return ProcessServer(
            argv_for,
            self.serving,
            facts=facts,
            env=env,
            log_path=probe_dir / "server.log",
            held=ready.build,
            collect=LocalCollect(
                [fill(arg, collect_values) for arg in collect_argv] if collect_argv else None,
                env=env,
                cwd=self.cwd,
                into=probe_dir,
                secret_names=self.secret_names,
            ),
            shown_env={
                k: v for k, v in env.items() if k in self.config_env or self.base_env.get(k) != v
            },
        )


PROCESS_PLACEHOLDERS = frozenset({"commit", "short", "port", "python", "build", "gpus"})
"""What `server.command` may name (a Slurm head's too, but `{gpus}`)."""
BUILD_PLACEHOLDERS = frozenset({"python", "build"})
"""Placeholders a build fills (the build's interpreter and folder); they need `build:`."""


class ProcessServerConfig(CommandServerBase):
    """A local command per candidate."""

    launcher: Literal["process"] = "process"
    """`process`: the server runs as a local process group."""

    @field_validator("command")
    @classmethod
    def _placeholders(cls, command: list[str]) -> list[str]:
        check_placeholders(command, "server.command", PROCESS_PLACEHOLDERS)
        return command


def cwd_of(cfg: CommandServerBase, base_dir: Path) -> Path:
    """The server's working folder: server.cwd, relative to the config's folder."""
    return base_dir / cfg.cwd if cfg.cwd else base_dir


def from_config(cfg: ProcessServerConfig, ctx: LauncherContext) -> ProcessLauncher:
    """The process launcher of a `server:` section."""
    return ProcessLauncher(
        cfg.command,
        ctx,
        cwd=cwd_of(cfg, ctx.base_dir),
        ready_timeout=cfg.ready_timeout,
        collect_env=cfg.collect_env,
    )


def needs_build(cfg: CommandServerBase, config: Any) -> None:
    """`{python}` and `{build}` are a build's: without build.strategies nothing fills them."""
    used = {f for arg in cfg.command for f in template_fields(arg, "server.command")}
    if used & BUILD_PLACEHOLDERS and config.build is None:
        raise ValueError("server.command: {python} and {build} need build.strategies")


def expand_cwd(cfg: CommandServerBase, environ: Mapping[str, str]) -> CommandServerBase:
    """server.cwd with `${VAR}` expanded from the caller's environment."""
    if cfg.cwd is None:
        return cfg
    return cfg.model_copy(update={"cwd": expand_value(cfg.cwd, environ, "server.cwd")})


def check_cwd(cfg: CommandServerBase, base_dir: Path) -> Path:
    """server.cwd is a folder (before anything starts); the folder."""
    cwd = cwd_of(cfg, base_dir)
    if cfg.cwd and not cwd.is_dir():
        raise ConfigError(f"server.cwd: not a folder '{cfg.cwd}'")
    return cwd


def _preflight(cfg: ProcessServerConfig, ctx: PreflightContext) -> Preflight:
    cwd = check_cwd(cfg, ctx.base_dir)
    check_executable(cfg.command[0], cwd, {**ctx.environ, **ctx.env})
    return Preflight(cfg)


def check_executable(program: str, cwd: Path, env: Mapping[str, str]) -> None:
    """server.command's program exists and can run (before anything starts)."""
    if "{" in program:
        return  # a placeholder: known per candidate only
    if os.sep in program:
        path = cwd / Path(program).expanduser()
        if not path.is_file() or not os.access(path, os.X_OK):
            raise ConfigError(f"server.command.0: no executable file '{program}'")
    elif shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        raise ConfigError(f"server.command.0: '{program}' is not on PATH")


def _devices(cfg: ProcessServerConfig, ctx: DeviceContext) -> list[tuple[str, ...] | None]:
    pool = cuda_visible(ctx.env.get("CUDA_VISIBLE_DEVICES"))
    where = "server.env.CUDA_VISIBLE_DEVICES"
    if pool is None:
        pool, where = cuda_visible(ctx.environ.get("CUDA_VISIBLE_DEVICES")), "CUDA_VISIBLE_DEVICES"
    if pool is None and ctx.parallel > 1 and cfg.slot_gpus is None:
        pool, where = ctx.gpus(), "the GPUs nvidia-smi lists"
    return slot_devices(ctx.parallel, cfg.slot_gpus, pool, where=where)


KIND = LAUNCHERS.register(
    LauncherKind(
        "process",
        ProcessServerConfig,
        make=from_config,
        validate=needs_build,
        preflight=_preflight,
        devices=_devices,
        expand_paths=expand_cwd,
        inherits=True,
        shape=frozenset({"command"}),
        argv=("command",),
    )
)
