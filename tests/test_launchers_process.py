"""The process launcher against the real simulated server."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from helpers import live_processes, wait_until
from llm_bisect.errors import NotReady, ServerExited
from llm_bisect.launchers.process import ProcessLauncher
from llm_bisect.model import Candidate

COMMIT = "ab" * 20


def launcher(
    tmp_path: Path, *extra: str, ready_timeout: float = 20, env: dict[str, str] | None = None
) -> ProcessLauncher:
    marker = str(tmp_path)
    command = [
        sys.executable,
        "-m",
        "llm_bisect.sim",
        "--commit",
        "{commit}",
        "--port",
        "{port}",
        "--launch-log",
        f"{marker}/launches",
        *extra,
    ]
    return ProcessLauncher(
        command,
        env=env or {},
        secret_names=list(env or {}),
        cwd=tmp_path,
        ready_timeout=ready_timeout,
    )


def test_starts_waits_for_ready_and_leaves_nothing_behind(tmp_path: Path) -> None:
    with launcher(tmp_path).launch(Candidate(COMMIT), tmp_path / "probe") as server:
        server.wait_ready()
        models = httpx.get(server.base_url + "/v1/models").json()
        assert models["data"][0]["id"] == "sim/tiny-chat"
        assert live_processes(str(tmp_path))
    assert wait_until(lambda: not live_processes(str(tmp_path)))
    assert (tmp_path / "launches").read_text() == COMMIT + "\n"
    assert "sim: serving ababababab" in (tmp_path / "probe" / "server.log").read_text()


def test_exit_before_ready_carries_code_and_log(tmp_path: Path) -> None:
    with (
        pytest.raises(ServerExited) as err,
        launcher(tmp_path, "--fault", "crash-on-start").launch(
            Candidate(COMMIT), tmp_path / "probe"
        ) as server,
    ):
        server.wait_ready()
    assert err.value.returncode == 3
    assert "exited with code 3 before ready" in str(err.value)
    assert "no kernel image is available" in err.value.log_tail


def test_ready_timeout_is_a_deadline(tmp_path: Path) -> None:
    with (
        pytest.raises(NotReady, match=r"not ready after \d+s \(ready_timeout 1s\)") as err,
        launcher(tmp_path, "--fault", "never-ready", ready_timeout=1).launch(
            Candidate(COMMIT), tmp_path / "probe"
        ) as server,
    ):
        server.wait_ready()
    assert "sim: serving" in err.value.log_tail
    assert wait_until(lambda: not live_processes(str(tmp_path)))


def test_ctrl_c_inside_the_probe_stops_the_server(tmp_path: Path) -> None:
    with (
        pytest.raises(KeyboardInterrupt),
        launcher(tmp_path).launch(Candidate(COMMIT), tmp_path / "probe") as server,
    ):
        server.wait_ready()
        raise KeyboardInterrupt
    assert wait_until(lambda: not live_processes(str(tmp_path)))


def test_a_missing_program_is_untestable_not_bad(tmp_path: Path) -> None:
    lau = ProcessLauncher(
        ["/nonexistent/serve", "{port}"], env={}, secret_names=[], cwd=tmp_path, ready_timeout=60
    )
    with (
        pytest.raises(ServerExited, match="code 127") as err,
        lau.launch(Candidate(COMMIT), tmp_path / "probe") as server,
    ):
        server.wait_ready()
    assert "cannot start '/nonexistent/serve'" in err.value.log_tail


def test_secrets_never_reach_the_log_tail(tmp_path: Path) -> None:
    lau = ProcessLauncher(
        [
            sys.executable,
            "-c",
            "import os; print('token is', os.environ['HF_TOKEN']); raise SystemExit(1)",
        ],
        env={"HF_TOKEN": "hf_supersecret123"},
        secret_names=["HF_TOKEN"],
        cwd=tmp_path,
        ready_timeout=60,
    )
    with (
        pytest.raises(ServerExited) as err,
        lau.launch(Candidate(COMMIT), tmp_path / "probe") as server,
    ):
        server.wait_ready()
    assert "token is ***" in err.value.log_tail
    assert "hf_supersecret123" not in (tmp_path / "probe" / "server.log").read_text()
