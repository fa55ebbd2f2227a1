"""Reading files a user names (the config, a golden, an eval set): bounded, never blocking.

A FIFO with no writer blocks `open` forever, and `/dev/zero` never ends; a path
may name either, or a symlink to one. `read_capped` opens without blocking,
refuses anything that is not a regular file, and reads at most `cap` bytes,
so bad input is one line (an OSError naming why), never a hang or an OOM kill.
What llm-bisect writes whole (documents, the golden) goes through `write_atomic`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

KINDS = (
    (stat.S_ISFIFO, "fifo"),
    (stat.S_ISCHR, "device"),
    (stat.S_ISBLK, "device"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISDIR, "folder"),
)


class NotReadable(OSError):
    """A user's file that is not read: not a regular file, or over its cap (`strerror` says)."""


def _kind(mode: int) -> str:
    return next((name for test, name in KINDS if test(mode)), "special file")


def regular_size(path: Path) -> int:
    """The size of a regular file; NotReadable for a FIFO, device, socket or folder (stat
    only, nothing is opened), OSError when it cannot be reached."""
    found = os.stat(path)
    if not stat.S_ISREG(found.st_mode):
        raise NotReadable(0, f"not a regular file: a {_kind(found.st_mode)}")
    return found.st_size


def read_capped(path: Path, cap: int) -> bytes:
    """The bytes of a regular file of at most `cap` bytes.

    NotReadable (an OSError whose `strerror` says why: "not a regular file: a fifo",
    "over N bytes") for anything else; the other OSErrors as `open` raises them.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens at once
    try:
        mode = os.fstat(fd).st_mode  # the file opened, not the one a stat saw before
        if not stat.S_ISREG(mode):
            raise NotReadable(0, f"not a regular file: a {_kind(mode)}")
        chunks: list[bytes] = []
        size = 0
        while size <= cap:
            chunk = os.read(fd, min(2**20, cap + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > cap:
            raise NotReadable(0, f"over {cap} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def head_text(path: Path, limit: int) -> str:
    """The first `limit` bytes of a file as text (bytes that do not decode replaced); ""
    when it cannot be read. For logs and tool outputs that may grow without end."""
    try:
        with path.open("rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` in one step (fsync'd first); where it cannot be written
    (the disk full), nothing half-written is left (no `.tmp`) and the OSError goes on."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, exc.filename or str(path)) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
