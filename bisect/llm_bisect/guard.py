"""The guard: runs a server command and takes everything it started down with it.

    harness ──stdin pipe──► guard (session + process-group leader, child subreaper)
                              └── server command (same group) └── its workers
                                    └── a worker that called setsid() (own session)

The guard is started in a new session, so its process group holds the server
and every process the server forks. It is also a child subreaper (Linux
prctl PR_SET_CHILD_SUBREAPER): a process that leaves the group with setsid()
and loses its parent is adopted by the guard, not by init. The guard ends
all of them, the group and every descendant, when
- its stdin reaches EOF: the harness closed the pipe or died, even by SIGKILL;
- it receives SIGTERM or SIGINT;
- the server exits (stray workers are not left behind).
Then it exits with the server's code (128+N for a signal N).

The server's output passes through the guard, which masks the values of
the environment variables named with --redact and the values listed (JSON) in
LLM_BISECT_GUARD_SECRETS, which the guard takes out of the server's environment
(secrets never reach a log: a command line's `--api-key X` or URL login included).

Run as a file with `python -I guard.py GRACE [--cap BYTES] [--redact NAME,...] -- ARGV...`
(`--cap`: the most bytes of output passed on; the rest is dropped);
stdlib only, so it starts fast and needs nothing installed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import types
from typing import IO

PR_SET_CHILD_SUBREAPER = 36
SECRETS_VAR = "LLM_BISECT_GUARD_SECRETS"


def _become_subreaper() -> None:
    """Adopt orphaned descendants (Linux); elsewhere the process group must do."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _ours() -> list[int]:
    """Every live process below the guard or in its process group (not the guard), from /proc."""
    me = os.getpid()
    parent: dict[int, int] = {}
    group: set[int] = set()
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    state, ppid, pgrp = f.read().rsplit(")", 1)[1].split()[:3]
            except (OSError, ValueError):
                continue
            if state != "Z":
                parent[int(entry)] = int(ppid)
                if int(pgrp) == me:
                    group.add(int(entry))
    found: set[int] = set()
    frontier = [me]
    while frontier:
        pid = frontier.pop()
        children = [p for p, pp in parent.items() if pp == pid and p not in found]
        found.update(children)
        frontier += children
    return sorted((found | group) - {me})


def _signal_all(sig: int) -> int:
    """Send `sig` to every process of ours; how many there were."""
    pids = _ours()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    return len(pids)


def _reap_adopted() -> None:
    """Collect the exit status of adopted orphans, so they leave no zombie."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def _end_all(child: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM everything, give it `grace` seconds to end, then SIGKILL whatever is left."""
    deadline = time.monotonic() + grace
    if _signal_all(signal.SIGTERM):
        while _ours() and time.monotonic() < deadline:
            time.sleep(0.05)  # exited processes show as zombies, which _ours() leaves out
    for _ in range(100):
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        if not _signal_all(signal.SIGKILL):
            break
        _reap_adopted()
        time.sleep(0.01)
    _reap_adopted()


def _copy_output(source: IO[bytes], secrets: list[bytes], cap: int | None = None) -> None:
    """The child's output, secrets masked; past `cap` bytes the rest is read and dropped
    (said once), so a chatty child cannot fill the disk."""
    out = sys.stdout.buffer
    left = cap
    for line in source:
        if left is not None and left <= 0:
            if left == 0:
                out.write(f"\n[llm-bisect: output cut at {cap} bytes]\n".encode())
                out.flush()
                left = -1
            continue
        for secret in secrets:
            line = line.replace(secret, b"***")
        if left is not None:
            line, left = line[:left], left - len(line[:left])
        out.write(line)
        out.flush()


def main(argv: list[str]) -> int:
    names: list[str] = []
    cap: int | None = None
    if len(argv) > 2 and argv[1] == "--cap":
        cap = int(argv[2])
        argv = [argv[0], *argv[3:]]
    if len(argv) > 2 and argv[1] == "--redact":
        names = [n for n in argv[2].split(",") if n]
        argv = [argv[0], *argv[3:]]
    if len(argv) < 3 or argv[1] != "--":
        print("usage: guard.py GRACE [--cap N] [--redact NAME,...] -- ARGV...", file=sys.stderr)
        return 2
    grace = float(argv[0])
    given = json.loads(os.environ.pop(SECRETS_VAR, "[]") or "[]")  # the child never sees it
    values = [os.environ.get(n, "") for n in names] + [v for v in given if isinstance(v, str)]
    secrets = sorted({v.encode() for v in values if len(v) >= 4}, key=len, reverse=True)
    ending = threading.Event()

    def on_signal(signum: int, frame: types.FrameType | None) -> None:
        ending.set()

    # Python-level handlers are reset to the default in the exec'd child.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    _become_subreaper()
    try:
        child = subprocess.Popen(
            argv[2:], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
    except OSError as exc:
        print(f"llm-bisect guard: cannot start {argv[2]!r}: {exc.strerror}", file=sys.stderr)
        return 127
    assert child.stdout is not None
    copier = threading.Thread(target=_copy_output, args=(child.stdout, secrets, cap), daemon=True)
    copier.start()

    def watch_stdin() -> None:
        while os.read(0, 4096):
            pass
        ending.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    while child.poll() is None and not ending.wait(0.05):
        pass
    # Ending, or the server is gone: take down the group and anything it forked or orphaned.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _end_all(child, grace)
    code = child.wait()
    copier.join(timeout=2)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
