"""The Kubernetes launcher against a hostile API (tests/hostilekube.py): an API that never
answers, trickles, answers HTML, objects that are not, or without end, and an exec that is
never answered. Each ends the command within `server.api`'s deadline and bounds, in one
line: never a hang, a traceback, or memory without bound. No Docker: the pod is at
127.0.0.1, where the test runs the simulated server when the probe needs one."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from helpers import History, wait_until, write_config
from hostilekube import HostileApi
from llm_bisect.cli import cli as cli_app
from llm_bisect.sim.docker import SRC
from localregistry import serving

DIGEST = "sha256:" + "ab" * 32
SLACK_S = 30.0
"""A command not ended within its deadline and this is a hang."""


@pytest.fixture
def api() -> Iterator[HostileApi]:
    hostile = HostileApi(huge_bytes=4 * 2**20)
    with hostile.running():
        yield hostile


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config(h: History, api: HostileApi, port: int = 0, **limits: Any) -> Path:
    server = {
        "launcher": "kubernetes",
        "image": f"registry.invalid/sim@{DIGEST}",
        "kubeconfig": str(api.kubeconfig(h.root / "kubeconfig")),
        "reach": "pod-ip",
        "port": port or free_port(),
        "ready_timeout": 20,
        "pending_timeout": 20,
        "api": {"timeout": 1, "max_bytes": 65536, "max_line": 4096, **limits},
    }
    data = {
        "candidates": {"repo": str(h.repo), "good": h.shas[0], "bad": h.shas[-1]},
        "server": server,
        "checks": [{"type": "expect"}],
    }
    return write_config(h.root / "hostile.yaml", data)


class Hung(BaseException):
    """The command ran past its deadline and SLACK_S (a BaseException: no handler of the
    command's takes it for its own error)."""


def cli(*args: str, timeout: float) -> tuple[int, str, float]:
    """Exit code, output and seconds of the CLI; exit -9 where it hung (SIGALRM, again each
    second until the command gives way: a true process edge)."""

    def alarm(*_: object) -> None:
        raise Hung

    started = time.monotonic()
    before = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout, 1.0)
    try:
        result = CliRunner().invoke(cli_app, list(args))
    except Hung:
        return -9, "hang", time.monotonic() - started
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    return result.exit_code, result.output, time.monotonic() - started


def one_line_error(output: str) -> None:
    assert "Traceback" not in output and "internal error" not in output, output


def test_reap_against_an_api_that_never_answers_ends_at_its_deadline(
    api: HostileApi, history: Any
) -> None:
    """Accepted, read, never answered: each list ends at `server.api.timeout` (0.5 s here),
    said in one line, and reap ends (it used to wait forever, as `check` and `run` did in
    their reap at start)."""
    h: History = history({}, n=1)
    api.faults["*"] = "silent"
    code, output, took = cli("reap", str(config(h, api, timeout=0.5)), timeout=4 + SLACK_S)
    assert code != -9, "reap hung on a silent API"
    one_line_error(output)
    assert "list jobs app.kubernetes.io/managed-by=llm-bisect: no answer within 0.5s" in output
    assert "(server.api.timeout)" in output, output
    assert took < 4 * 0.5 + 10, took


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("silent", "list pods job-name="),
        ("trickle", "list pods job-name="),
        ("html", "the answer is not JSON"),
        ("not-objects", "items[0] is str, not an object"),
        ("huge", "the answer is over 65536 bytes (server.api.max_bytes)"),
    ],
)
def test_a_pod_list_answered_wrongly_is_a_one_line_error_within_the_deadline(
    api: HostileApi, history: Any, fault: str, said: str
) -> None:
    """The launcher lists the probe's pods after it created the Job: an API that never
    answers that list or trickles it is stopped at the deadline; HTML from a proxy (200),
    items that are not objects, an answer over `max_bytes` (the process took 1 GB for
    300 MB) are one line, never an internal error (exit 129). The Job is deleted."""
    h: History = history({}, n=1)
    api.faults["list pods"] = fault
    code, output, _ = cli(
        "check", str(config(h, api)), "--candidate", h.shas[1], "--out", str(h.root / "o"),
        timeout=20 + SLACK_S,
    )  # fmt: skip
    assert code != -9, f"check hung on a pod list answered {fault}"
    one_line_error(output)
    assert code not in (0, 1, 129), output  # never a verdict, never an internal error
    assert said in output, output
    assert not api.jobs, "the Job was deleted"


def test_a_watch_line_without_end_is_a_one_line_error_at_max_line(
    api: HostileApi, history: Any
) -> None:
    """A watch stream that never ends its line (memory grew 2.4 MB/s until
    pending_timeout): stopped at `max_line` bytes, said."""
    h: History = history({}, n=1)
    api.jobs["keep-pending"] = {}  # the list: no pod of this Job, so the probe waits for one
    api.faults["watch pods"] = "no-newline"
    code, output, took = cli(
        "check", str(config(h, api)), "--candidate", h.shas[1], "--out", str(h.root / "o"),
        timeout=20 + SLACK_S,
    )  # fmt: skip
    assert code != -9, "check hung on a watch without newline"
    one_line_error(output)
    assert "watch pods: a line over 4096 bytes (server.api.max_line)" in output, output
    assert took < 20, took  # well before pending_timeout


def test_an_exec_never_answered_leaves_the_fingerprint_without_packages_not_a_hang(
    api: HostileApi, history: Any
) -> None:
    """The fingerprint's exec in the pod (package versions, collect_env): a websocket the
    API accepts and never answers is given up at its deadline (it hung a probe 900 s), the
    probe goes on to its verdict, and collect_env says why it is off."""
    h: History = history({}, n=1)
    api.faults["exec"] = "silent"
    port = free_port()
    sim = subprocess.Popen(
        [sys.executable, "-m", "llm_bisect.sim", "--repo", str(h.repo),
         "--commit", h.shas[1], "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )  # fmt: skip
    try:
        assert wait_until(lambda: _listening(port), timeout=30)
        out = h.root / "o"
        code, output, _ = cli(
            "check", str(config(h, api, port)), "--candidate", h.shas[1], "--out", str(out),
            timeout=60 + SLACK_S,
        )  # fmt: skip
    finally:
        sim.terminate()
        sim.wait()
    assert code != -9, "check hung on an exec never answered"
    one_line_error(output)
    assert code == 0, output
    assert "exec" in api.routes()
    (said,) = out.glob("probes/*/collect_env.rc")
    assert "no answer within 1s (server.api.timeout)" in said.read_text(), said.read_text()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_images_as_ends_resolve_to_their_commits_from_the_registry(
    api: HostileApi, history: Any
) -> None:
    """An end given as an image is read from its registry, never pulled here (the cluster
    pulls): its commit from a label or a version, and one line where the image names none or
    is not there, in the words the Docker launcher uses (both resolve through one function)."""
    h: History = history({}, n=3)
    with serving(h.root / "registry") as registry:
        sim = f"{registry.host}/sim"
        registry.image("sim", {}, labels={"ai.vllm.build.commit": h.shas[0]}, tag="nightly")
        registry.image("sim", {}, env={"VLLM_VERSION": f"0.27.0+g{h.shas[-1][:9]}"}, tag="v1")
        registry.image("sim", {}, tag="mystery")

        def candidates(good: str, bad: str) -> tuple[int, str]:
            data = yaml.safe_load(config(h, api).read_text())
            data["candidates"].update(good=good, bad=bad)
            data["server"]["image"] = sim + ":nightly-{commit}"
            code, output, _ = cli(
                "candidates", str(write_config(h.root / "ends.yaml", data)), timeout=60
            )
            one_line_error(output)
            return code, output

        code, output = candidates(f"{sim}:nightly", f"{sim}:v1")
        assert code == 0, output
        said = {line.split(":")[0]: line.split()[1] for line in output.splitlines()[1:3]}
        assert said == {"good": h.shas[0], "bad": h.shas[-1]}, output
        code, output = candidates(f"{sim}:nightly", f"{sim}:mystery")
        assert code == 2 and f"candidates.bad: image '{sim}:mystery' names no commit" in output
        code, output = candidates(f"{sim}:nightly", f"{sim}:absent")
        assert code == 2 and f"candidates.bad: no such ref or image '{sim}:absent'" in output
