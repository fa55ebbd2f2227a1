"""Overlay builds: a commit's Python written over a precompiled install of the package.

    venv/site-packages/vllm/ ──hard links──► build/vllm/   (compiled _C*.so included)
    git diff base..commit -- vllm/ ──────────► those files written over (links broken first)
    server: {python} = venv/bin/python, PYTHONPATH = build/

For the Docker launcher (no venv: `package_dir` None) the build is only a stage,
files/<repo path> plus the removed paths in its facts; images.py writes it over the
package inside a base image.

Applies only when nothing between the base commit and the candidate touches a
compiled source (`compiled` globs: csrc/, *.cu, CMakeLists.txt, setup.py, ...);
else the route says which file stops it. What `applies` decides is pure
(`compiled_changes`); `make` does the I/O.
"""

from __future__ import annotations

import fnmatch
import os
import platform
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..errors import ConfigError, LaunchError
from ..model import Candidate
from . import Build


class Tree(Protocol):
    """What an overlay needs of the repository."""

    def changed_files(self, old: str, new: str) -> list[str]: ...

    def read(self, commit: str, path: str) -> bytes | None: ...


def compiled_changes(paths: Sequence[str], patterns: Sequence[str]) -> list[str]:
    """The changed paths an overlay cannot carry. Pure."""
    return [
        p
        for p in paths
        if any(
            fnmatch.fnmatch(p, pat) or fnmatch.fnmatch(p.rsplit("/", 1)[-1], pat)
            for pat in patterns
        )
    ]


def installed_package(python: str, package: str) -> Path:
    """Where `package` is installed for this interpreter (its folder)."""
    code = (
        "import importlib.util, os, sys; s = importlib.util.find_spec(sys.argv[1]); "
        "print(os.path.dirname(s.origin) if s and s.origin else '')"
    )
    try:
        done = subprocess.run(
            [python, "-I", "-c", code, package], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"build: cannot run '{python}' ({exc})") from None
    where = done.stdout.strip()
    if done.returncode != 0 or not where:
        raise ConfigError(f"build: '{python}' has no package '{package}' installed")
    return Path(where)


class OverlayStrategy:
    """Hard-link the installed package, write the candidate's changed files over it."""

    name = "overlay"

    def __init__(
        self,
        tree: Tree,
        *,
        python: str,
        package_dir: Path | None,
        package: str,
        base_commit: str,
        compiled: Sequence[str],
    ) -> None:
        self.tree = tree
        self.python = python
        self.package_dir = package_dir
        self.package = package
        self.base_commit = base_commit
        self.compiled = list(compiled)
        self.cache_name = "overlay" if package_dir is not None else "overlay-stage"

    def _changes(self, candidate: Candidate) -> tuple[list[str], list[str]]:
        """(the package's changed files, changed files an overlay cannot carry)."""
        changed = self.tree.changed_files(self.base_commit, candidate.commit)
        mine = [p for p in changed if p.startswith(self.package + "/") and p.endswith(".py")]
        return mine, compiled_changes(changed, self.compiled)

    def applies(self, candidate: Candidate) -> tuple[bool, str]:
        mine, blocked = self._changes(candidate)
        base = self.base_commit[:12]
        if blocked:
            more = f" and {len(blocked) - 1} more" if len(blocked) > 1 else ""
            return False, f"{blocked[0]}{more} changed since {base} (compiled sources)"
        return True, f"{len(mine)} Python files over {base}"

    def identity(self, candidate: Candidate) -> dict[str, Any]:
        """The base (the install and the commit it was built from), the package, the machine."""
        return {
            "package": self.package,
            "base_commit": self.base_commit,
            "python": self.python,
            "package_dir": str(self.package_dir or ""),
            "machine": platform.machine(),
        }

    def make(self, candidate: Candidate, out: Path, log: Path) -> dict[str, Any]:
        mine, blocked = self._changes(candidate)
        if blocked:
            raise LaunchError(f"overlay: {blocked[0]} changed (compiled sources)")
        if self.package_dir is None:
            return self._stage(candidate, mine, out, log)
        target = out / self.package
        shutil.copytree(self.package_dir, target, copy_function=os.link)
        written = removed = 0
        for path in mine:
            dest = out / path
            dest.unlink(missing_ok=True)  # a hard link: never write through it
            cache = dest.parent / "__pycache__"
            if cache.is_dir():
                for stale in cache.glob(f"{dest.stem}.*.pyc"):
                    stale.unlink()
            data = self.tree.read(candidate.commit, path)
            if data is None:
                removed += 1
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            written += 1
        log.write_text(
            f"overlay of {candidate.commit} over {self.base_commit}: "
            f"{written} written, {removed} removed\n"
        )
        return {"base_commit": self.base_commit, "written": written, "removed": removed}

    def _stage(self, candidate: Candidate, mine: list[str], out: Path, log: Path) -> dict[str, Any]:
        """The changed files under out/files, for an image (images.py applies them)."""
        removed = []
        for path in mine:
            data = self.tree.read(candidate.commit, path)
            if data is None:
                removed.append(path)
                continue
            dest = out / "files" / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        log.write_text(
            f"overlay stage of {candidate.commit} over {self.base_commit}: "
            f"{len(mine) - len(removed)} to write, {len(removed)} to remove\n"
        )
        return {
            "base_commit": self.base_commit,
            "written": len(mine) - len(removed),
            "removed": len(removed),
            "removed_paths": removed,
        }

    def load(self, candidate: Candidate, folder: Path, facts: Mapping[str, Any]) -> Build:
        if self.package_dir is None:
            return Build("overlay", folder, "", {}, dict(facts))
        return Build("overlay", folder, self.python, {"PYTHONPATH": str(folder)}, dict(facts))
