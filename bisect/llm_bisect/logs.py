"""Logs: a log's tail as errors show it (the lines that look like errors, then the last
ones, each cut), and a build step run under the guard with its output appended to a log.
The ground floor: launchers, builds and checks (lm-eval's harness) all use it; it imports
nothing of the package above errors, guard and redact."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path

from . import guard
from .errors import LaunchError
from .redact import redact, redact as redact_text

__all__ = [
    "ERROR",
    "ERROR_LINES",
    "GRACE_S",
    "LINE_CHARS",
    "SCAN_BYTES",
    "cut_line",
    "run_logged",
    "tail",
    "tail_of",
]

LINE_CHARS = 400
"""Each line of a log tail is cut to about this many characters (its start and its end)."""
SCAN_BYTES = 4 * 2**20
"""How far back from a log's end its tail looks for lines that look like errors."""
ERROR_LINES = 10
"""The most lines that look like errors kept from before the last lines."""
ERROR = re.compile(
    r"error|traceback|exception|killed|out of memory|segmentation fault|core dumped|fatal|abort",
    re.IGNORECASE,
)
"""Lines that may say why a server died (`CUDA error`, `RuntimeError`, `Killed`, ...)."""


def cut_line(line: str, limit: int = LINE_CHARS) -> str:
    """A line of at most about `limit` characters: its start and end, and how much is left
    out between them. Pure."""
    if len(line) <= limit:
        return line
    half = limit // 2
    return f"{line[:half]} … [{len(line) - 2 * half} characters cut] … {line[-half:]}"


def tail_of(lines: Sequence[str], keep: int = 20) -> str:
    """A log's tail: the last `keep` lines, and above them (then `…`) the last lines before
    those that look like errors, every line cut to LINE_CHARS. Pure.

    A crash's reason is often followed by pages of teardown, or by one endless line (a
    progress bar): the reason still shows, and the tail stays a few kilobytes."""
    last = list(lines[-keep:]) if keep > 0 else []
    before = lines[: len(lines) - len(last)]
    errors = [line for line in before if ERROR.search(line)][-ERROR_LINES:]
    kept = [*errors, "…"] if errors else []
    return "\n".join(cut_line(line) for line in [*kept, *last])


def tail(path: Path, lines: int = 20, secrets: Sequence[str] = ()) -> str:
    """The tail of a log file (`tail_of`), secrets removed; read from its last SCAN_BYTES."""
    try:
        with path.open("rb") as f:
            end = f.seek(0, os.SEEK_END)
            start = max(0, end - SCAN_BYTES)
            f.seek(start)
            data = f.read(SCAN_BYTES)
    except OSError:
        return ""
    every = redact(data.decode("utf-8", "replace"), secrets).splitlines()
    if start > 0 and every:  # it begins mid-line, maybe mid-secret: only its end is shown
        every[0] = "…" + every[0][-(LINE_CHARS // 2) :]
    return tail_of(every, lines)


GRACE_S = 5.0
"""Seconds a build step gets between SIGTERM and SIGKILL."""


def run_logged(
    argv: Sequence[str],
    log: Path,
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    timeout: float | None = None,
    what: str,
    redact: Sequence[str] = (),
    secrets: Sequence[str] = (),
) -> None:
    """Run a build step under the guard (guard.py), output appended to `log`.

    The values of the `redact` variables and the `secrets` never reach the log (the
    command line written first included). A non-zero exit or
    a timeout is a LaunchError (the candidate is skip). The
    guard ends the step and everything it started when this process stops
    waiting: a timeout, Ctrl-C, the run ending, even a SIGKILL of llm-bisect.
    """
    with log.open("ab") as f:
        f.write(("$ " + redact_text(" ".join(argv), secrets) + "\n").encode())
        f.flush()
        try:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    guard.__file__,
                    str(GRACE_S),
                    "--redact",
                    ",".join(redact),
                    "--",
                    *argv,
                ],
                cwd=cwd,
                env={**env, guard.SECRETS_VAR: json.dumps(list(secrets))},
                stdout=f,
                stderr=subprocess.STDOUT,
                stdin=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise LaunchError(f"{what} could not run: {exc.strerror}") from None
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _end(proc)
            raise LaunchError(f"{what} ran past {timeout:g}s (build log)", tail(log)) from None
        except BaseException:
            _end(proc)
            raise
        finally:
            if proc.stdin is not None:
                proc.stdin.close()
    if code != 0:
        raise LaunchError(f"{what} exited with {code}", tail(log))


def _end(proc: subprocess.Popen[bytes]) -> None:
    """The guard ends its group when stdin closes; SIGKILL after the grace if it lingers."""
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(timeout=GRACE_S + 2)
    except subprocess.TimeoutExpired:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
