"""What every launcher shares: free ports, readiness, log tails, uninterruptible cleanup.

A port is free when it is picked, not when the server binds it: `PortBook` keeps one
launcher's slots from picking the same one, and `stranger_on` tells whether what answers on
a port is a local server's own process session or someone else's (a lost race).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import IO, Protocol

import httpx

from .. import lease
from ..client import ModelList, parse_reply
from ..errors import EndpointError, LaunchError, NotReady, ServerExited
from ..fingerprint import BATCH_INVARIANT_VAR, Facts
from ..logs import tail
from ..retry import NotYetReady, readiness


def placement_facts(node: str, env: Mapping[str, str]) -> Facts:
    """A server's fingerprint facts of where and how it ran, the same for every launcher:
    `node` (the host), and `batch_invariant` where its environment asks vLLM for
    batch-invariant kernels (VLLM_BATCH_INVARIANT a number other than 0, as vllm/envs.py
    reads it). Pure."""
    facts: Facts = {"node": node} if node else {}
    value = env.get(BATCH_INVARIANT_VAR, "").strip()
    if value.lstrip("+-").isdigit() and int(value) != 0:
        facts["batch_invariant"] = True
    return facts


def weights_facts(found: object) -> Facts:
    """The fingerprint's `weights` from what weights.resolve said where the server ran (a
    mapping of text, as it printed it); nothing where it named no model. Pure."""
    if not isinstance(found, Mapping) or not found.get("model"):
        return {}
    return {"weights": {str(k): str(v) for k, v in found.items() if v}}


def last_json(out: bytes) -> object:
    """The JSON value on the last line a snippet printed (None where there is none). Pure."""
    lines = out.decode("utf-8", "replace").strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else None
    except ValueError:
        return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PortBook:
    """Ports handed to one launcher's servers and not given back yet: two slots never get
    the same port."""

    PICKS = 64

    def __init__(self, pick: Callable[[], int] = free_port) -> None:
        self._pick = pick
        self._held: set[int] = set()
        self._lock = threading.Lock()

    def take(self) -> int:
        """A port free now that no server of this launcher holds."""
        with self._lock:
            for _ in range(self.PICKS):
                port = self._pick()
                if port not in self._held:
                    self._held.add(port)
                    return port
        raise LaunchError(f"no free port: {self.PICKS} picks were all held by this run")

    def give_back(self, port: int) -> None:
        with self._lock:
            self._held.discard(port)


PROC = lease.PROC


def _listening(port: int, proc: Path) -> set[int] | None:
    """Inodes of the TCP sockets listening on `port` (any address, IPv4 and IPv6); None
    where /proc/net cannot say."""
    found: set[int] = set()
    readable = False
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()  # sl local remote st ... uid timeout inode
            if (
                len(fields) > 9
                and fields[3] == "0A"
                and int(fields[1].rsplit(":", 1)[1], 16) == port
            ):
                found.add(int(fields[9]))
    return found if readable else None


def _sockets(pid_dir: Path) -> set[int]:
    """Inodes of the sockets one process holds (none when it cannot be read)."""
    found: set[int] = set()
    try:
        for fd in (pid_dir / "fd").iterdir():
            with suppress(OSError):
                link = os.readlink(fd)
                if link.startswith("socket:["):
                    found.add(int(link[8:-1]))
    except OSError:
        pass
    return found


def _processes(proc: Path) -> Iterator[tuple[Path, list[str]]]:
    """Every process's folder and the fields of its stat after the command name."""
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        yield entry, fields


def stranger_on(
    port: int,
    session: int | None = None,
    pids: frozenset[int] = frozenset(),
    proc: Path = PROC,
) -> str | None:
    """Who listens on `port` when it is none of the server's own processes: those of
    `session` (a local server's session: the guard and all it started) and `pids` (a
    container's): `pid N (program)`, never its arguments; None when it is theirs, when
    nothing listens, or where /proc cannot tell."""
    listening = _listening(port, proc)
    if not listening:
        return None
    ours: set[int] = set()
    for pid_dir, fields in _processes(proc):
        if int(pid_dir.name) in pids or (len(fields) > 3 and fields[3] == str(session)):
            ours |= _sockets(pid_dir)
    strangers = listening - ours
    if not strangers:
        return None
    for pid_dir, _ in _processes(proc):
        if strangers & _sockets(pid_dir):
            with suppress(OSError):
                return f"pid {pid_dir.name} ({(pid_dir / 'comm').read_text().strip()[:32]})"
            return f"pid {pid_dir.name}"
    return "a process of another user"


def _start_time(pid: int, proc: Path = PROC) -> str | None:
    """When a process started (clock ticks since boot), to tell it from a later one with its
    pid; None where it is gone, or where there is no /proc to say (macOS)."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def owner_label(pid: int | None = None, proc: Path = PROC) -> str:
    """This process as the owner of what it starts (a container label, a Slurm job's
    comment); its lease (lease.py) is held from here on, renewed while it lives. `proc`: where
    the system tells of processes (the start time is "" without it)."""
    own = pid is None
    pid = os.getpid() if pid is None else pid
    label = f"{socket.gethostname()}:{pid}:{_start_time(pid, proc) or ''}"
    if own:
        lease.hold(label)
    return label


def owner_alive(label: str, proc: Path = PROC) -> bool:
    """Whether the owner a label names may still run. False where its lease lapsed, or where
    the lease says it lived in this very PID namespace on this host and no process of its
    pid and start time is there (a resume right after a SIGKILL need not wait the lease
    out). No lease to read (another PID namespace's disk, an older llm-bisect) is no proof
    of death: a PID alone never condemns a server. Where a process's life cannot be read
    (no /proc, as on macOS: no PID namespace, no start time), the lease alone decides."""
    found = lease.read(label)
    if found is None:
        return True
    host, _, rest = label.partition(":")
    pid, _, started = rest.partition(":")
    here = lease.namespace(proc)
    seen = here != "" and found.namespace == here and host == socket.gethostname()
    if seen and pid.isdigit() and started != "":
        # its process is ours to see: it decides (a run stopped by Ctrl-Z or a paused VM
        # renews nothing, yet lives)
        return _start_time(int(pid), proc) == started
    return found.expires > time.time()


def reapable(owner: str, mine: bool) -> bool:
    """Whether `reap` removes a server: one whose owner is gone (owner_alive), or one with no
    owner (an older llm-bisect) of this run (`mine`)."""
    return not owner_alive(owner) if owner else mine


def owner_pid(label: str) -> str:
    """The pid an owner label names, for messages (`vm:4242:123` → `4242`)."""
    return label.split(":")[1] if label.count(":") >= 2 else label


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM while cleaning up, so a second Ctrl-C cannot cut it short."""
    held = {signal.SIGINT, signal.SIGTERM}
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    except (ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def ready_once(http: httpx.Client) -> None:
    """One readiness poll: /health answers 200 and /v1/models lists a model, or answers 401:
    a server started with an API key (`--api-key`) serves its API only to requests that
    carry it, which the checks' client does (Setup.api_key); vLLM listens only once its
    engine is up, so that answer is the API's own."""
    try:
        health = http.get("/health")
        if health.status_code != 200:
            raise NotYetReady(f"/health answered {health.status_code}")
        models = http.get("/v1/models")
    except httpx.HTTPError as exc:
        raise NotYetReady(f"{type(exc).__name__}: {exc}") from exc
    if models.status_code == 401:
        return
    if models.status_code != 200:
        raise NotYetReady(f"/v1/models answered {models.status_code}")
    try:
        listed = parse_reply(ModelList, models.content, "GET /v1/models").data
    except EndpointError as exc:
        raise NotYetReady(str(exc)) from exc
    if not listed:
        raise NotYetReady("/v1/models lists no model yet")


class _Alive(Protocol):
    base_url: str

    def check_alive(self, wait: float = 0.0) -> None: ...

    def log_tail(self, lines: int = 20) -> str: ...


def wait_ready(
    server: _Alive,
    timeout: float,
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    verify: Callable[[], None] | None = None,
) -> None:
    """Poll until ready; ServerExited when it ends first, NotReady at the deadline. `verify`
    runs once the port answers: it raises (PortTaken) when what answers is not the server."""
    started = clock()
    with httpx.Client(base_url=server.base_url, timeout=2.0) as http:
        try:
            for attempt in readiness(timeout, clock=clock, sleep=sleep):
                with attempt:
                    server.check_alive()
                    ready_once(http)
                    if verify is not None:
                        verify()
        except ServerExited as exc:
            raise ServerExited(f"{exc} before ready", exc.returncode, exc.log_tail) from None
        except NotYetReady as exc:
            raise NotReady(
                f"not ready after {clock() - started:.0f}s (ready_timeout {timeout:g}s): {exc}",
                server.log_tail(),
            ) from None


class Held(Protocol):
    """Something a server holds while it runs (a build's lease: builds/cache.py)."""

    def release(self) -> None: ...


class LoggedServer:
    """What both servers share: a log file in the probe folder, and a stop that always runs.

    Subclasses set `log_path`, `secrets` and `_log`, and implement `stop()`.
    """

    log_path: Path
    secrets: list[str]
    _log: IO[bytes] | None = None
    held: Held | None = None
    """What the server runs from, held in use until it stops (a build's lease)."""

    def stop(self) -> None:
        raise NotImplementedError

    def release(self) -> None:
        """Let go of what it runs from (after stop)."""
        held, self.held = self.held, None
        if held is not None:
            held.release()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with signals_deferred():
            try:
                self.stop()
            finally:
                self.release()

    def log_tail(self, lines: int = 20) -> str:
        if self._log is not None:
            self._log.flush()
        return tail(self.log_path, lines, self.secrets)
