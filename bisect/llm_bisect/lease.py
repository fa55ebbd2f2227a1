"""Leases: how `reap` tells a live run's servers from a dead one's, without trusting a PID.

Every llm-bisect process that starts servers holds a lease: a file named by its owner
label (host, pid, start time) under the lease folder, holding the Unix time it expires
and the PID namespace its owner runs in.
A thread renews it every LEASE_S / 4 seconds while the process lives; a clean exit
expires it at once (the process removed its servers itself). `reap` removes a server
only when its owner's lease is there and expired:

    lease fresh             the owner lives (on this node or another sharing the folder),
                            unless it ran in this PID namespace and /proc shows its
                            process gone (no /proc, as on macOS: the lease alone decides)
    lease expired           the owner died (SIGKILL, OOM): its servers are reaped
    no lease to be read     cannot tell (another PID namespace, another host's disk, an
                            older llm-bisect): spared, and said

A PID alone never condemns a server: two CI runner containers sharing a host name and
docker.sock see each other's containers, but not each other's processes.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

LEASE_S = 60.0
"""How long a lease holds without renewal (`LLM_BISECT_LEASE_S`): a dead owner's servers
are reaped this long after it died, at most."""
FOLDER = "~/.cache/llm-bisect/leases"
"""Where leases live (`LLM_BISECT_LEASES`): the user's cache, shared by the nodes of a
cluster whose home folders are."""
KEEP_EXPIRED_S = 180 * 86400.0
"""Expired leases are deleted this long after they expired: a run resumed later than that
finds its old servers spared (no lease to read), so the window is long."""


def lease_seconds() -> float:
    try:
        value = float(os.environ.get("LLM_BISECT_LEASE_S", LEASE_S))
    except ValueError:
        return LEASE_S
    return value if 0 < value < 86400 else LEASE_S


def folder() -> Path:
    return Path(os.environ.get("LLM_BISECT_LEASES") or FOLDER).expanduser()


def path_of(owner: str) -> Path:
    """The lease file of an owner label (`host:pid:start`)."""
    safe = "".join(c if c.isalnum() or c in ".-_" else "-" for c in owner)
    return folder() / f"{safe}.lease"


PROC = Path("/proc")
"""Where the system tells of its processes (none on macOS)."""


def namespace(proc: Path = PROC) -> str:
    """This process's PID namespace (`pid:[4026531836]`): a pid means something only inside
    it; "" where the system does not say (no /proc: macOS)."""
    try:
        return os.readlink(proc / "self" / "ns" / "pid")
    except OSError:
        return ""


@dataclass(frozen=True)
class Lease:
    expires: float
    """Unix time."""
    namespace: str
    """The PID namespace its owner ran in."""


def write(owner: str, expires: float, space: str | None = None) -> None:
    """Write an owner's lease (atomically): it holds until `expires` (Unix time); `space`:
    the owner's PID namespace (default this process's)."""
    path = path_of(owner)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{expires:.3f}\n{namespace() if space is None else space}\n")
    tmp.replace(path)


def _read_file(path: Path) -> Lease | None:
    try:
        lines = path.read_text().splitlines()
        return Lease(float(lines[0]), lines[1] if len(lines) > 1 else "")
    except (OSError, ValueError, IndexError):
        return None


def read(owner: str) -> Lease | None:
    """An owner's lease; None where there is none to read."""
    return _read_file(path_of(owner))


def expires(owner: str) -> float | None:
    """When an owner's lease expires (Unix time); None where there is none to read."""
    found = read(owner)
    return found.expires if found else None


def held(owner: str, now: float | None = None) -> bool | None:
    """True: the owner's lease holds; False: it expired (the owner is gone); None: no lease
    to be read, so nothing can be said."""
    until = expires(owner)
    if until is None:
        return None
    return until > (time.time() if now is None else now)


class _Holder:
    """This process's lease, renewed by a daemon thread until the process ends."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.period = lease_seconds()
        self._stop = threading.Event()
        self.renew()
        threading.Thread(target=self._run, name="llm-bisect-lease", daemon=True).start()
        atexit.register(self.end)
        _prune()

    def renew(self) -> None:
        # no lease to write: reap then spares this run's servers (it cannot tell)
        with contextlib.suppress(OSError):
            write(self.owner, time.time() + self.period)

    def _run(self) -> None:
        while not self._stop.wait(self.period / 4):
            self.renew()

    def end(self) -> None:
        """Expire the lease now: a process that ends cleanly removed its servers itself."""
        self._stop.set()
        with contextlib.suppress(OSError):
            write(self.owner, time.time())


_HOLDER: _Holder | None = None
_LOCK = threading.Lock()


def hold(owner: str) -> None:
    """Start (once per process) the lease of this process's owner label."""
    global _HOLDER
    with _LOCK:
        if _HOLDER is None or _HOLDER.owner != owner:
            _HOLDER = _Holder(owner)


def _prune() -> None:
    """Delete leases that expired long ago."""
    now = time.time()
    try:
        entries = list(folder().glob("*.lease"))
    except OSError:
        return
    for path in entries:
        found = _read_file(path)
        if found is not None and found.expires + KEEP_EXPIRED_S < now:
            path.unlink(missing_ok=True)
