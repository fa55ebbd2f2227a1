"""The guard: runs a server command and takes its whole process group down with it.

    harness ──stdin pipe──► guard (session + process-group leader)
                              └── server command (same group) └── its workers

The guard is started in a new session, so its process group holds the server
and every process the server forks. It ends the group when
- its stdin reaches EOF: the harness closed the pipe or died, even by SIGKILL;
- it receives SIGTERM or SIGINT;
- the server exits (stray workers are not left behind).
Then it exits with the server's code (128+N for a signal N).

The server's output passes through the guard, which masks the values of
the environment variables named with --redact (secrets never reach a log).

Run as a file with `python -I guard.py GRACE [--redact NAME,...] -- ARGV...`;
stdlib only, so it starts fast and needs nothing installed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import types
from typing import IO


def _end_group(child: subprocess.Popen[bytes], grace: float) -> None:
    try:
        os.killpg(0, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=grace)
    # Whatever ignored SIGTERM, the guard included, ends here.
    os.killpg(0, signal.SIGKILL)


def _copy_output(source: IO[bytes], secrets: list[bytes]) -> None:
    out = sys.stdout.buffer
    for line in source:
        for secret in secrets:
            line = line.replace(secret, b"***")
        out.write(line)
        out.flush()


def main(argv: list[str]) -> int:
    names: list[str] = []
    if len(argv) > 2 and argv[1] == "--redact":
        names = [n for n in argv[2].split(",") if n]
        argv = [argv[0], *argv[3:]]
    if len(argv) < 3 or argv[1] != "--":
        print("usage: guard.py GRACE [--redact NAME,...] -- ARGV...", file=sys.stderr)
        return 2
    grace = float(argv[0])
    secrets = sorted(
        (os.environ[n].encode() for n in names if len(os.environ.get(n, "")) >= 4),
        key=len,
        reverse=True,
    )
    ending = threading.Event()

    def on_signal(signum: int, frame: types.FrameType | None) -> None:
        ending.set()

    # Python-level handlers are reset to the default in the exec'd child.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    try:
        child = subprocess.Popen(
            argv[2:], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
    except OSError as exc:
        print(f"llm-bisect guard: cannot start {argv[2]!r}: {exc.strerror}", file=sys.stderr)
        return 127
    assert child.stdout is not None
    copier = threading.Thread(target=_copy_output, args=(child.stdout, secrets), daemon=True)
    copier.start()

    def watch_stdin() -> None:
        while os.read(0, 4096):
            pass
        ending.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    while child.poll() is None and not ending.wait(0.05):
        pass
    if child.poll() is None:
        _end_group(child, grace)
    code = child.wait()
    # The server is gone; take down anything it forked.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)
    copier.join(timeout=2)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
