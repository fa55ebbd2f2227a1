"""The build cache: one folder per (commit, strategy), kept within a disk budget.

    DIR/<commit>-<strategy>/          a finished build
    DIR/<commit>-<strategy>/BUILD.json  its facts; written last, so a folder without it
                                        (a build killed halfway) is not a build
    DIR/.tmp-<pid>-<key>/             a build being made; renamed into place when done

A finished build is reused by every later run; the least recently used are
removed past the budget, never the one just made or used. Hard-linked files
cost their disk once: a build is charged only for files that are its own.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

MARK = "BUILD.json"


def disk_bytes(folder: Path) -> int:
    """Bytes a folder holds of its own (files hard-linked from elsewhere are free)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            st = os.lstat(os.path.join(root, name))
            if st.st_nlink == 1:
                total += st.st_blocks * 512
    return total


class BuildCache:
    """Finished builds under `root`, at most `budget_bytes` of their own disk."""

    def __init__(self, root: Path, budget_bytes: int) -> None:
        self.root = root
        self.budget_bytes = budget_bytes

    def path(self, key: str) -> Path:
        return self.root / key

    def get(self, key: str) -> tuple[Path, dict[str, Any]] | None:
        """A finished build's folder and facts (marked as just used); None when absent."""
        mark = self.path(key) / MARK
        try:
            facts: dict[str, Any] = json.loads(mark.read_text())
        except (OSError, ValueError):
            return None
        os.utime(mark)
        return self.path(key), facts

    def has(self, key: str) -> bool:
        """Whether a finished build is there; a query, so its last use stays as it was."""
        return (self.path(key) / MARK).is_file()

    @contextmanager
    def making(self, key: str) -> Iterator[tuple[Path, dict[str, Any]]]:
        """A fresh folder and a facts dict to fill; moved into place when the block succeeds."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.sweep()
        tmp = self.root / f".tmp-{os.getpid()}-{key}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        facts: dict[str, Any] = {}
        try:
            t0 = time.monotonic()
            yield tmp, facts
            facts["seconds"] = round(time.monotonic() - t0, 3)
            facts["disk_bytes"] = disk_bytes(tmp)
            (tmp / MARK).write_text(json.dumps(facts, indent=1) + "\n")
            final = self.path(key)
            shutil.rmtree(final, ignore_errors=True)  # a folder a killed build left
            tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.evict(keep=key)

    def sweep(self) -> list[str]:
        """Remove what builds killed halfway left (`.tmp-<pid>-...` of a process now gone)."""
        removed = []
        for entry in self.root.glob(".tmp-*"):
            pid = entry.name.split("-")[1]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry.name)
        return removed

    def finished(self) -> Mapping[str, float]:
        """Every finished build's key and last use (the mark's mtime)."""
        if not self.root.is_dir():
            return {}
        found = {}
        for entry in self.root.iterdir():
            mark = entry / MARK
            if not entry.name.startswith(".") and mark.is_file():
                found[entry.name] = mark.stat().st_mtime
        return found

    def evict(self, keep: str) -> list[str]:
        """Remove least recently used builds until the rest fit the budget; never `keep`."""
        used = self.finished()
        sizes = {key: disk_bytes(self.path(key)) for key in used}
        total = sum(sizes.values())
        removed = []
        for key in sorted(used, key=lambda k: used[k]):
            if total <= self.budget_bytes:
                break
            if key == keep:
                continue
            shutil.rmtree(self.path(key), ignore_errors=True)
            total -= sizes[key]
            removed.append(key)
        return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
