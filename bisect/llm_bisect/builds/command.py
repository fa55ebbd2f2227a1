"""Command builds: your own build script, once per commit, with a timeout and its log kept.

    run: ["./build.sh", "{commit}", "{out}"]     {out}: the build's folder

A non-zero exit or a timeout is no build: the probe is `skip`, never bad. The
build's interpreter (`{python}`) is `{out}/bin/python` when the script made a
venv there, else the Python llm-bisect runs on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

from ..config import fill
from ..errors import LaunchError
from ..model import Candidate
from . import Build


class CommandStrategy:
    """Run the user's build command."""

    name = "command"

    def __init__(
        self, run: Sequence[str], *, cwd: Path, timeout: float, env: Mapping[str, str]
    ) -> None:
        self.run = list(run)
        self.cwd = cwd
        self.timeout = timeout
        self.env = dict(env)

    def applies(self, candidate: Candidate) -> tuple[bool, str]:
        return True, " ".join(self.run)

    def make(self, candidate: Candidate, out: Path, log: Path) -> dict[str, Any]:
        argv = [
            fill(a, {"commit": candidate.commit, "short": candidate.short, "out": str(out)})
            for a in self.run
        ]
        with log.open("ab") as f:
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=self.cwd,
                    env=self.env,
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            except OSError as exc:
                raise LaunchError(f"build command could not run: {exc.strerror}") from None
            try:
                code = proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                _end(proc)
                raise LaunchError(
                    f"build command ran past {self.timeout:g}s (build.log)", _tail(log)
                ) from None
            except BaseException:
                _end(proc)  # Ctrl-C: the build's whole process group goes too
                raise
        if code != 0:
            raise LaunchError(f"build command exited with {code}", _tail(log))
        return {"command": argv}

    def load(self, candidate: Candidate, folder: Path, facts: Mapping[str, Any]) -> Build:
        venv = folder / "bin" / "python"
        python = str(venv) if venv.exists() else sys.executable
        return Build("command", folder, python, {}, dict(facts))


def _end(proc: subprocess.Popen[bytes]) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
