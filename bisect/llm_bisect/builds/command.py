"""Command builds: your own build script, once per commit, with a timeout and its log kept.

    run: ["./build.sh", "{commit}", "{out}"]     {out}: the build's folder

A non-zero exit or a timeout is no build: the probe is `skip`, never bad. The
build's interpreter (`{python}`) is `{out}/bin/python` when the script made a
venv there, else the Python llm-bisect runs on. Its builds are keyed by the command,
the folder it runs in and the machine (a build of another command is never reused).
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..config import fill
from ..model import Candidate
from . import Build, run_logged


class CommandStrategy:
    """Run the user's build command."""

    name = "command"
    cache_name = "command"

    def __init__(
        self,
        run: Sequence[str],
        *,
        cwd: Path,
        timeout: float,
        env: Mapping[str, str],
        secret_names: Sequence[str] = (),
    ) -> None:
        self.secret_names = list(secret_names)
        self.run = list(run)
        self.cwd = cwd
        self.timeout = timeout
        self.env = dict(env)

    def applies(self, candidate: Candidate) -> tuple[bool, str]:
        return True, " ".join(self.run)

    def identity(self, candidate: Candidate) -> dict[str, Any]:
        return {"run": self.run, "cwd": str(self.cwd), "machine": platform.machine()}

    def make(self, candidate: Candidate, out: Path, log: Path) -> dict[str, Any]:
        values = {"commit": candidate.commit, "short": candidate.short, "out": str(out)}
        argv = [fill(a, values) for a in self.run]
        run_logged(
            argv,
            log,
            env=self.env,
            cwd=self.cwd,
            timeout=self.timeout,
            what="build command",
            redact=self.secret_names,
        )
        return {"command": argv}

    def load(self, candidate: Candidate, folder: Path, facts: Mapping[str, Any]) -> Build:
        venv = folder / "bin" / "python"
        python = str(venv) if venv.exists() else sys.executable
        return Build("command", folder, python, {}, dict(facts))
