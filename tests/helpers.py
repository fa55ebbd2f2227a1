"""Test helpers: real git histories, configs for the simulated server, process lookups."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from llm_bisect.demo import build_history
from llm_bisect.model import Verdict
from llm_bisect.search import next_step


def sim_command(repo: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "llm_bisect.sim",
        "--repo",
        str(repo),
        "--commit",
        "{commit}",
        "--port",
        "{port}",
        *extra,
    ]


def write_config(path: Path, data: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(data), sort_keys=False))
    return path


def live_processes(marker: str) -> list[int]:
    """Pids of live (not zombie) processes whose command line holds `marker`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids


def wait_until(predicate: Callable[[], bool], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


class History:
    """A real git repository in tmp_path whose commits play builds of an engine."""

    def __init__(self, root: Path, faults: Mapping[int, str], n: int, **kw: Any) -> None:
        self.repo = root / "engine"
        self.shas = build_history(self.repo, faults, n_commits=n, **kw)
        self.root = root
        self.configs = 0

    def config_command(self) -> list[str]:
        return sim_command(self.repo)

    def config(self, *, good: str | None = None, bad: str | None = None, **over: Any) -> Path:
        data: dict[str, Any] = {
            "candidates": {
                "repo": str(self.repo),
                "good": good or self.shas[0],
                "bad": bad or self.shas[-1],
            },
            "server": {"command": sim_command(self.repo), "ready_timeout": 20},
        }
        for key, value in over.items():
            if key in data and isinstance(value, dict):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        self.configs += 1
        return write_config(self.root / f"config-{self.configs}.yaml", data)


def probe_order(n: int, culprit: int) -> list[int]:
    """The indices a bisection of n+1 commits probes, in order, when `culprit` is first bad."""
    verdicts: dict[int, Verdict] = {}
    order = []
    while isinstance(step := next_step(n + 1, verdicts), int):
        order.append(step)
        verdicts[step] = Verdict.BAD if step >= culprit else Verdict.GOOD
    return order


BOUNDED_MEMORY = 4 * 2**30
"""Address space of a CLI run by `cli_bounded`: a read with no cap fails there, not the node."""


def cli_bounded(*args: str, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """The real CLI in a subprocess whose memory is capped and whose wait is bounded (a read
    that hangs fails the test instead of hanging it); exit code and stdout+stderr."""
    import resource
    import subprocess

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (BOUNDED_MEMORY, BOUNDED_MEMORY))

    done = subprocess.run(
        [sys.executable, "-m", "llm_bisect.cli", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ if env is None else env),
        timeout=120,
        preexec_fn=cap,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr
