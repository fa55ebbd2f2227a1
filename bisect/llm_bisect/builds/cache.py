"""The build cache: one folder per build key, shared by slots, runs and configs, kept
within a disk budget.

    DIR/<key>/               a build, made in place: nothing is moved once made, so the
                             paths a venv wrote (console scripts' shebangs) stay true
    DIR/<key>/BUILD.json     its record {key, identity, facts}, written last and whole
                             (rename); a folder without a valid one (killed halfway,
                             corrupt, made by another version) is no build: made again
    DIR/.locks/<key>.lock    the key's lock (flock):
                               exclusive  while it is made: one maker per key; another
                                          run, slot or thread waits, then uses it
                               shared     while a probe uses it (a lease): never evicted
    DIR/.trash/              deletion: BUILD.json removed first, the folder renamed here,
                             then deleted; what a killed deletion left is deleted later
    DIR/logs/<key>.log       how it was made

A key is `<commit>-<strategy>-<hash of its identity>`: the identity is all that makes
the build (the strategy's config, its base, the platform, tool versions; see
Strategy.identity), so a build made under another config is never reused.

Least recently used builds (BUILD.json's mtime) are removed past the budget, never one
that is leased or being made. Hard-linked files cost their disk once: a build is charged
only for files that are its own. Locks are flock(2) locks on open files: the kernel
drops them when their holder dies, in whatever PID namespace; no pid is ever read.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ..clock import SYSTEM, Clock
from ..jsonvalue import Json

MARK = "BUILD.json"
MAX_MARK_BYTES = 1 << 20
"""A BUILD.json larger than this is not a record (it is never read whole)."""
LOGS = "logs"


class Record(BaseModel):
    """BUILD.json: what a finished build is and what result.json records of it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    key: str
    """The folder's name: a record copied elsewhere is no build there."""
    identity: dict[str, Any]
    """All that made it (normalised as JSON); must equal what is asked for."""
    facts: dict[str, Any]
    """The strategy's facts, with `seconds` and `disk_bytes`."""


def as_json(value: Mapping[str, Any]) -> dict[str, Json]:
    """`value` as BUILD.json holds it (tuples become lists, keys sorted)."""
    loaded: dict[str, Json] = json.loads(json.dumps(value, sort_keys=True))
    return loaded


def disk_bytes(folder: Path) -> int:
    """Bytes a folder holds of its own (files hard-linked from elsewhere are free)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with suppress(OSError):
                st = os.lstat(os.path.join(root, name))
                if st.st_nlink == 1:
                    total += st.st_blocks * 512
    return total


def read_record(folder: Path, key: str) -> Record | None:
    """The folder's valid record, or None (missing, unreadable, too large, not a record)."""
    try:
        with (folder / MARK).open("rb") as f:
            data = f.read(MAX_MARK_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_MARK_BYTES:
        return None
    try:
        record = Record.model_validate_json(data)
    except ValidationError:
        return None
    return record if record.key == key else None


def unusable(root: Path) -> str | None:
    """Why `root` cannot hold the cache, without making anything; None when it can."""
    if root.exists():
        if not root.is_dir():
            return f"'{root}' is not a folder"
        if not os.access(root, os.W_OK | os.X_OK):
            return f"'{root}' is not writable"
        return None
    parent = root.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"cannot make '{root}': '{parent}' is not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot make '{root}': '{parent}' is not writable"
    return None


class Lease:
    """A finished build held in use: never evicted while held (a shared lock on its key).
    Release it when done; its process ending releases it too."""

    def __init__(self, key: str, folder: Path, facts: Mapping[str, Any], lock: IO[bytes]):
        self.key = key
        self.folder = folder
        self.facts = dict(facts)
        self._lock = lock

    def release(self) -> None:
        self._lock.close()

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class BuildCache:
    """Finished builds under `root`, at most `budget_bytes` of their own disk."""

    def __init__(
        self,
        root: Path,
        budget_bytes: int,
        report: Callable[[str], None] = lambda _: None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.root = root
        self.clock = clock
        """Times each build (its `seconds` fact)."""
        self.budget_bytes = budget_bytes
        self.report = report
        """Told when a build waits for another maker of its key, and what eviction removed."""

    def path(self, key: str) -> Path:
        return self.root / key

    def log(self, key: str) -> Path:
        return self.root / LOGS / f"{key}.log"

    def record(self, key: str, identity: Mapping[str, Any] | None = None) -> Record | None:
        """The key's finished build's record (None: none, or not made from `identity`)."""
        record = read_record(self.path(key), key)
        if record is None or (identity is not None and record.identity != as_json(identity)):
            return None
        return record

    def get(
        self, key: str, identity: Mapping[str, Any] | None = None
    ) -> tuple[Path, dict[str, Json]] | None:
        """A finished build's folder and facts, marked as just used; None when there is
        none. Not leased: see `lease`."""
        record = self.record(key, identity)
        if record is None:
            return None
        with suppress(OSError):
            os.utime(self.path(key) / MARK)
        return self.path(key), dict(record.facts)

    def has(self, key: str, identity: Mapping[str, Any] | None = None) -> bool:
        """Whether a finished build is there; a query, so its last use stays as it was."""
        return self.record(key, identity) is not None

    def lease(self, key: str, identity: Mapping[str, Any] | None = None) -> Lease | None:
        """The finished build, held in use (waits while it is being made); None if none."""
        if not self.root.is_dir():
            return None
        lock = self._lock(key)
        try:
            self._flock(lock, fcntl.LOCK_SH, key)
            found = self.get(key, identity)
        except BaseException:
            lock.close()
            raise
        if found is None:
            lock.close()
            return None
        return Lease(key, *found, lock)

    def obtain(
        self,
        key: str,
        identity: Mapping[str, Any],
        make: Callable[[Path], Mapping[str, Any]],
    ) -> tuple[Lease, bool]:
        """The build of `key`, leased, and whether it was made now: found, or made by
        `make(folder)` (returning its facts) while holding the key's lock."""
        while True:
            lease = self.lease(key, identity)
            if lease is not None:
                return lease, False
            self.root.mkdir(parents=True, exist_ok=True)
            lock = self._lock(key)
            try:
                self._flock(lock, fcntl.LOCK_EX, key)
                made = self.record(key, identity) is None  # else made while we waited
                if made:
                    folder = self._fresh(key)
                    t0 = self.clock.monotonic()
                    try:
                        facts = dict(make(folder))
                    except BaseException:
                        self._discard(key)
                        raise
                    self._finish(key, identity, facts, t0)
                fcntl.flock(lock, fcntl.LOCK_SH)  # in use from now on
                found = self.get(key, identity)
            except BaseException:
                lock.close()
                raise
            if found is None:  # evicted in the instant the lock changed hands: again
                lock.close()
                continue
            lease = Lease(key, *found, lock)
            if made:
                self.evict(keep=key)
            return lease, made

    @contextmanager
    def making(
        self, key: str, identity: Mapping[str, Any] | None = None
    ) -> Iterator[tuple[Path, dict[str, Json]]]:
        """The key's folder, emptied, and a facts dict to fill; the build is finished when
        the block succeeds. One maker of a key at a time (its lock)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with self._lock(key) as lock:
            self._flock(lock, fcntl.LOCK_EX, key)
            folder = self._fresh(key)
            facts: dict[str, Json] = {}
            t0 = self.clock.monotonic()
            try:
                yield folder, facts
            except BaseException:
                self._discard(key)
                raise
            self._finish(key, identity or {}, facts, t0)
        self.evict(keep=key)

    def finished(self) -> Mapping[str, float]:
        """Every finished build's key and last use (the record's mtime)."""
        found = {}
        for entry in self._entries():
            if read_record(entry, entry.name) is not None:
                with suppress(OSError):
                    found[entry.name] = (entry / MARK).stat().st_mtime
        return found

    def evict(self, keep: str) -> list[str]:
        """Remove least recently used builds until the rest fit the budget, and what is no
        build (killed halfway, corrupt); never `keep`, a leased build or one being made.
        The keys of the builds removed."""
        self._empty_trash()
        used = self.finished()
        for entry in self._entries():
            if entry.name not in used and entry.name != keep:
                self._try_discard(entry.name)
        sizes = {key: disk_bytes(self.path(key)) for key in used}
        total = sum(sizes.values())
        removed = []
        for key in sorted(used, key=lambda k: used[k]):
            if total <= self.budget_bytes:
                break
            if key != keep and self._try_discard(key):
                total -= sizes[key]
                removed.append(key)
                self.report(f"build cache: removed {key} (over the disk budget)")
        return removed

    # -- under the key's lock ------------------------------------------------------------

    def _lock(self, key: str) -> IO[bytes]:
        """The key's lock file, open; never deleted (a lock is only as good as its inode)."""
        locks = self.root / ".locks"
        locks.mkdir(parents=True, exist_ok=True)
        return (locks / f"{key}.lock").open("ab")

    def _flock(self, lock: IO[bytes], mode: int, key: str) -> None:
        try:
            fcntl.flock(lock, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            if mode == fcntl.LOCK_EX:
                self.report(f"build cache: waiting for {key}, in use or being made elsewhere")
            else:
                self.report(f"build cache: waiting for {key}, being made elsewhere")
            fcntl.flock(lock, mode)

    def _fresh(self, key: str) -> Path:
        """The key's folder, empty (what was there is discarded)."""
        self._discard(key)
        folder = self.path(key)
        folder.mkdir()
        return folder

    def _finish(
        self, key: str, identity: Mapping[str, Any], facts: dict[str, Json], t0: float
    ) -> None:
        folder = self.path(key)
        facts["seconds"] = round(self.clock.monotonic() - t0, 3)
        facts["disk_bytes"] = disk_bytes(folder)
        record = Record(key=key, identity=as_json(identity), facts=as_json(facts))
        part = folder / f".{MARK}.part"
        part.write_text(record.model_dump_json(indent=1) + "\n")
        os.replace(part, folder / MARK)  # whole, or not there

    def _discard(self, key: str) -> None:
        """Delete the key's folder: its record first, then renamed away, then deleted, so a
        kill at any point leaves no folder that passes for a build."""
        folder = self.path(key)
        with suppress(FileNotFoundError, NotADirectoryError):
            (folder / MARK).unlink()
        trash = self.root / ".trash"
        trash.mkdir(exist_ok=True)
        away = trash / f"{key}.{uuid.uuid4().hex[:12]}"
        try:
            folder.rename(away)
        except FileNotFoundError:
            return
        _delete(away)

    def _try_discard(self, key: str) -> bool:
        """Discard the key's folder unless it is leased or being made."""
        with self._lock(key) as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            self._discard(key)
            self.log(key).unlink(missing_ok=True)
        return True

    def _empty_trash(self) -> None:
        trash = self.root / ".trash"
        if trash.is_dir():
            for entry in trash.iterdir():
                _delete(entry)

    def _entries(self) -> list[Path]:
        """What may be a build: the root's entries but its own folders."""
        if not self.root.is_dir():
            return []
        return [e for e in self.root.iterdir() if not e.name.startswith(".") and e.name != LOGS]


def _delete(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with suppress(FileNotFoundError):
            path.unlink()
