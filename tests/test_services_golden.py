"""`golden` and `calibrate` show their server's progress as `run` shows a probe's."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from helpers import History


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llm_bisect.cli", *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_golden_and_calibrate_say_what_their_server_is_doing(
    history: Callable[..., History], tmp_path: Path
) -> None:
    h = history({}, n=3)
    config, short = h.config(), h.shas[0][:12]
    done = cli("golden", str(config), "--candidate", h.shas[0], "-o", str(tmp_path / "g.json"))
    assert done.returncode == 0, done.stderr
    said = done.stderr
    assert re.search(rf"^\[1\] {short} starting +0\.0s", said, re.M), said
    assert re.search(rf"^\[1\] {short} recording +\d+\.\d+s", said, re.M), said
    done = cli(
        "calibrate", str(config), "--candidate", h.shas[0], "--runs", "1", "--restarts", "1",
        "-o", str(tmp_path / "c.json"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for start in (1, 2):
        line = rf"^\[\d\] {short} checking \({start} of 2 starts\)"
        assert re.search(line, done.stderr, re.M), done.stderr
