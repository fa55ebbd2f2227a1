"""The journal: an append-only JSONL record of a run, fsynced per event.

    {"event": "run", ...}            once: the config digest, mode, candidates
    {"event": "probe-start", ...}    a probe began (a kill may follow)
    {"event": "probe", ...}          a probe finished: verdict, checks, timings
    {"event": "done", ...}           the search ended

A run resumes from it: finished probes are read back and never run again.
A line cut short by a kill is ignored.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any, TextIO

from .errors import JournalError

FILENAME = "journal.jsonl"


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every complete event of a journal; a torn last line is dropped."""
    events: list[dict[str, Any]] = []
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return events
    except OSError as exc:
        raise JournalError(f"{path}: cannot read journal ({exc.strerror})") from exc
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as exc:
            if number >= len(lines) - 1:  # the last line, cut by a kill
                break
            raise JournalError(f"{path}:{number}: not a journal event") from exc
        if not isinstance(event, dict) or "event" not in event:
            raise JournalError(f"{path}:{number}: not a journal event")
        events.append(event)
    return events


class Journal:
    """Appends events durably: each line is flushed and fsynced before `append` returns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: TextIO | None = None

    def __enter__(self) -> Journal:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # A line torn by a kill is cut off, so the next event starts a clean line.
        if self.path.exists():
            data = self.path.read_bytes()
            if data and not data.endswith(b"\n"):
                with self.path.open("r+b") as f:
                    f.truncate(data.rfind(b"\n") + 1)
        self._file = self.path.open("a", encoding="utf-8")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            with suppress(OSError):
                self._file.close()
            self._file = None

    def append(self, event: str, **fields: Any) -> None:
        if self._file is None:
            raise JournalError(f"{self.path}: journal is not open")
        line = json.dumps({"event": event, **fields}, sort_keys=True)
        self._file.write(line + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def events(self) -> Iterator[dict[str, Any]]:
        yield from read_events(self.path)
