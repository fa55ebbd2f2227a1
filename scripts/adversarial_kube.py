"""Try to break the Kubernetes launcher with a hostile API, and print what happened.

    A Kubernetes API on 127.0.0.1 (tests/hostilekube.py) that answers one route, or every
    route, wrongly: never (silent), a byte every 0.1 s (trickle), a proxy's HTML page,
    `items` that are not objects, 300 MB, a watch line without end, an error with a 300 MB
    body, an exec websocket never answered. The shipped CLI (`reap`, `check`) runs against
    it as a subprocess, with a short `server.api.timeout` in its config.

Tallied: cases; one-line errors (the command ended and said why in a line naming the
bound or the fault); verdicts reached (the API's trouble did not touch the probe: a watch
never answered beside a list that answers; an exec never answered, the fingerprint then
without what it reads and collect_env.rc saying why); tracebacks (a Traceback, an internal
error, exit 129, or a process killed by its own signal); hangs (not ended within its
deadlines + 30 s); leaks (the kubeconfig's planted token in an output or a file written);
orphans (a Job the API would have deleted, left); the largest memory a command took.
Figures, not assertions (tests/test_launchers_kubernetes_api.py asserts).
Usage: python scripts/adversarial_kube.py [--timeout 2]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from hostilekube import HostileApi  # type: ignore[import-not-found]  # noqa: E402
from llm_bisect.demo import build_history  # noqa: E402

CLI = [sys.executable, "-m", "llm_bisect.cli"]
TOKEN = "kube-PLANTED-token-0123456789abcdef"
HUGE = 300 * 10**6
SLACK_S = 30.0
CALLS = 12
"""At most this many API calls end at their deadline in one command (its reap's four lists,
create, list, delete, read...): its deadline is CALLS times server.api.timeout."""
SAID = re.compile(
    r"server\.api\.(timeout|max_bytes|max_line)|not JSON|not an object|HTTP 500|no answer"
)

# (command, route, fault): what each case asks of the API
CASES: list[tuple[str, str, str]] = [
    *(("reap", "*", f) for f in ("silent", "trickle", "html", "not-objects", "huge")),
    ("reap", "discover", "silent"),
    *(("check", "*", f) for f in ("silent", "trickle")),
    *(
        ("check", "list pods", f)
        for f in ("silent", "trickle", "html", "not-objects", "huge", "error-huge")
    ),
    ("check", "create job", "silent"),
    ("check", "watch pods", "no-newline"),
    ("check", "watch pods", "silent"),
    ("check", "exec", "silent"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(work: Path, repo: Path, shas: list[str], api: HostileApi, port: int,
                 timeout: float) -> Path:  # fmt: skip
    kubeconfig = api.kubeconfig(work / "kubeconfig")
    data = yaml.safe_load(kubeconfig.read_text())
    data["users"][0]["user"]["token"] = TOKEN
    kubeconfig.write_text(yaml.safe_dump(data))
    config = {
        "candidates": {"repo": str(repo), "good": shas[0], "bad": shas[-1]},
        "server": {
            "launcher": "kubernetes",
            "image": "registry.invalid/sim@sha256:" + "ab" * 32,
            "kubeconfig": str(kubeconfig),
            "reach": "pod-ip",
            "port": port,
            "ready_timeout": 30,
            "pending_timeout": 10,
            "api": {"timeout": timeout},
        },
        "checks": [{"type": "expect"}],
    }
    path = work / "hostile.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run(args: list[str], timeout: float) -> tuple[int, str, float, float]:
    """Exit code (-9: a hang), output, seconds, and the peak memory (MB) of the command."""
    started = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "bisect")}
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen([*CLI, *args], stdout=out, stderr=subprocess.STDOUT, env=env)
        deadline = started + timeout
        status = None
        while status is None and time.monotonic() < deadline:
            pid, code, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                status = (os.waitstatus_to_exitcode(code), usage.ru_maxrss / 1024)
            else:
                time.sleep(0.05)
        if status is None:
            proc.kill()
            proc.wait()
            status = (-9, 0.0)
        proc.returncode = status[0]
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    return status[0], text, time.monotonic() - started, status[1]


@contextmanager
def sim_server(repo: Path, sha: str, port: int) -> Iterator[None]:
    """The simulated server at the pod's IP (127.0.0.1), for the probe that reaches it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "bisect")}
    argv = [sys.executable, "-m", "llm_bisect.sim", "--repo", str(repo), "--commit", sha,
            "--port", str(port)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield
    finally:
        proc.terminate()
        proc.wait()


def files_text(folder: Path) -> str:
    return "".join(p.read_text("utf-8", "replace") for p in folder.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timeout", type=float, default=1.0, help="server.api.timeout")
    options = parser.parse_args()
    tally: dict[str, Any] = dict.fromkeys(
        ("cases", "one-line errors", "verdicts", "tracebacks", "hangs", "leaks", "orphans"), 0
    )
    peak = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        repo = work / "engine"
        shas = build_history(repo, {}, n_commits=1)
        port = free_port()
        with sim_server(repo, shas[1], port):
            for i, (command, route, fault) in enumerate(CASES):
                api = HostileApi(huge_bytes=HUGE)
                with api.running():
                    api.faults[route] = fault
                    if (route, fault) == ("watch pods", "no-newline"):
                        api.jobs["keep-pending"] = {}  # no pod yet: the probe watches
                    case = work / f"case-{i}"
                    case.mkdir()
                    config = write_config(case, repo, shas, api, port, options.timeout)
                    args = [command, str(config)]
                    if command == "check":
                        args += ["--candidate", shas[1], "--out", str(case / "out")]
                    limit = CALLS * options.timeout + SLACK_S
                    code, output, took, memory = run(args, limit)
                    left = [n for n in api.jobs if n != "keep-pending"]
                    deleted = {"delete job", "read job"}
                    if route != "*" and route not in deleted:
                        tally["orphans"] += len(left)  # an API that deletes: nothing left
                tally["cases"] += 1
                peak = max(peak, memory)
                # a traceback, an internal error, or the process killed by a signal of its own
                traceback = "Traceback" in output or code == 129 or (code < 0 and code != -9)
                hang = code == -9
                rc = [p.read_text() for p in case.glob("out/probes/*/collect_env.rc")]
                said_in = [*output.splitlines(), *(f"collect_env.rc: {t.strip()}" for t in rc)]
                lines = [line for line in said_in if SAID.search(line)]
                tally["tracebacks"] += traceback
                tally["hangs"] += hang
                verdict = command == "check" and code in (0, 1)  # the probe's own
                tally["verdicts"] += verdict and not traceback
                tally["one-line errors"] += bool(lines) and not (traceback or hang or verdict)
                written = files_text(case / "out") if (case / "out").exists() else ""
                tally["leaks"] += TOKEN in output or TOKEN in written
                said = (lines or output.strip().splitlines() or [""])[0]
                print(f"  {command:<5} {route:<11} {fault:<11} exit {code:4d} {took:5.1f}s "
                      f"{memory:6.0f} MB  {said[:100]}")  # fmt: skip
    print(
        f"hostile Kubernetes API: {tally['cases']} cases, "
        f"one-line errors {tally['one-line errors']}, verdicts reached {tally['verdicts']}, "
        f"tracebacks {tally['tracebacks']}, "
        f"hangs {tally['hangs']}, leaks {tally['leaks']}, orphans {tally['orphans']}, "
        f"peak memory {peak:.0f} MB (answers of {HUGE // 10**6} MB)"
    )
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  (this script: {own:.0f} MB)")


if __name__ == "__main__":
    main()
