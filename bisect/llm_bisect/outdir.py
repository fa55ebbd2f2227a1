"""The output folder: made and checked before anything starts, and held by one run at a time.

Two runs on one DIR would both probe everything, append to one journal and,
with Docker, clean up each other's containers. `hold(DIR)` takes an exclusive
`flock` on `DIR/.lock` (the kernel drops it when the holder dies, even by
SIGKILL) and writes the holder's pid there, so a second run can name it.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import ConfigError, DirInUse

LOCK_FILE = ".lock"
KINDS = (
    ("configs", "configs.jsonl"),
    ("deps", "versions.git"),
    ("gate", "gate.json"),
    ("run", "journal.jsonl"),
)
"""The kind of run a folder holds, by the file that only that kind writes (first match)."""


def kind_of(out_dir: Path) -> str | None:
    """Which command's run the folder holds (`run`, `configs`, `deps`, `gate`), or None."""
    return next((kind for kind, marker in KINDS if (out_dir / marker).exists()), None)


def claim(out_dir: Path, kind: str, key: str = "--out") -> None:
    """ConfigError when DIR holds another kind of run: a folder holds one kind (a `run`
    would take the golden `configs` recorded at another build, and overwrite its report).
    `report`, `localize`, a resume and `confirm: continue` read or extend a run as it is."""
    found = kind_of(out_dir)
    if found is not None and found != kind:
        raise ConfigError(
            f"{key}: '{out_dir}' holds a `{found}` run, and a folder holds one kind of run: "
            f"pick a new {key} for `{kind}`"
        )


def prepare(out_dir: Path, key: str = "--out") -> Path:
    """Make DIR (and its parents); ConfigError naming `key` when it cannot be written."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{key}: cannot make folder '{out_dir}' ({exc.strerror})") from None
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise ConfigError(f"{key}: cannot write to folder '{out_dir}'")
    return out_dir


@contextmanager
def hold(out_dir: Path, key: str = "--out") -> Iterator[Path]:
    """DIR, made if needed and held by this process until the block ends."""
    prepare(out_dir, key)
    path = out_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ConfigError(f"{key}: cannot write to folder '{out_dir}' ({exc.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise DirInUse(
                f"{out_dir}: in use by another llm-bisect run (pid {holder}); "
                "wait for it, or pick another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield out_dir
    finally:
        os.close(fd)  # closing the descriptor drops the lock
