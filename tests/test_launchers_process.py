"""The process launcher against the real simulated server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import cli_bounded, live_processes, wait_until
from llm_bisect.errors import LaunchError, NotReady, ServerExited
from llm_bisect.kinds import LauncherContext
from llm_bisect.launchers.common import PortBook
from llm_bisect.launchers.process import ProcessLauncher
from llm_bisect.model import Candidate
from llm_bisect.report.documents import ResultDocument

COMMIT = "ab" * 20
OTHER = "cd" * 20


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
        LauncherContext(tmp_path, "t", env=env or {}, secret_names=list(env or {})),
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
        ["/nonexistent/serve", "{port}"], LauncherContext(tmp_path, "t"), cwd=tmp_path,
        ready_timeout=60,
    )  # fmt: skip
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
        LauncherContext(
            tmp_path, "t", env={"HF_TOKEN": "hf_supersecret123"}, secret_names=["HF_TOKEN"]
        ),
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


@pytest.mark.parametrize("ours", ["held", "crashes"])
def test_a_port_another_server_took_first_is_never_mistaken_for_the_probes(
    tmp_path: Path, ours: str
) -> None:
    """Another slot's server (another commit) binds the port this probe was given, between
    the pick and the bind. This probe's server, held before it listens or crashing on the
    taken port, starts again on another port; the checks never reach the other server."""
    engine = tmp_path / "engine.json"
    hold = tmp_path / "hold"
    if ours == "held":
        hold.touch()
    engine.write_text(json.dumps({"hold_file": str(hold)}))
    server = launcher(tmp_path, "--engine-file", str(engine)).launch(
        Candidate(COMMIT), tmp_path / "probe"
    )
    taken = server.base_url
    other = subprocess.Popen(
        [sys.executable, "-m", "llm_bisect.sim", "--commit", OTHER, "--port", taken.split(":")[-1]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    log = tmp_path / "probe" / "server.log"

    def moved() -> bool:
        return log.exists() and "starting it again on port" in log.read_text()

    def release() -> None:  # once this probe's server has moved, let it listen
        wait_until(moved, timeout=60)
        hold.unlink(missing_ok=True)

    releaser = threading.Thread(target=release)
    try:
        assert wait_until(lambda: _answers(taken), timeout=30)
        releaser.start()
        with server:
            server.wait_ready()
            version = httpx.get(server.base_url + "/version").json()["version"]
            assert version == f"0.1.0+g{COMMIT[:12]}", "the checks reached another server"
        assert server.base_url != taken
        said = log.read_text()
        assert f"port {taken.split(':')[-1]} is served by pid {other.pid} (" in said
        assert "not this probe's server" in said
    finally:
        hold.unlink(missing_ok=True)
        releaser.join(timeout=90)
        other.terminate()
        other.wait()
    assert wait_until(lambda: not live_processes(str(tmp_path)))


def _answers(base_url: str) -> bool:
    try:
        return httpx.get(base_url + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_slots_get_their_own_devices_and_ports(tmp_path: Path) -> None:
    lau = ProcessLauncher(
        [sys.executable, "serve.py", "--port", "{port}", "--devices", "{gpus}"],
        LauncherContext(tmp_path, "t", slot_devices=[("0", "1"), ("2", "3")]),
        cwd=tmp_path,
        ready_timeout=20,
        ports=PortBook(lambda: 40123),  # the OS offers one port twice
    )
    first = lau.launch(Candidate(COMMIT), tmp_path / "a", slot=0)
    with pytest.raises(LaunchError, match="no free port"):
        lau.launch(Candidate(COMMIT), tmp_path / "b", slot=1)
    first.stop()  # a stopped server gives its port back
    second = lau.launch(Candidate(COMMIT), tmp_path / "b", slot=1)
    assert second.base_url == "http://127.0.0.1:40123"
    assert second.env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert second.argv[-2:] == ["--devices", "2,3"]
    assert second.fingerprint()["devices"] == ["2", "3"]
    second.stop()


def test_batch_invariance_reaches_every_server_and_each_probe_records_it_and_its_node(
    tmp_path: Path, history: Any
) -> None:
    """`probe.batch_invariant` sets VLLM_BATCH_INVARIANT=1 in the server's environment; each
    probe's fingerprint says it was asked, where it ran, and whether the build's startup log
    said it does not know the variable (these builds up to the change are older than it)."""
    h = history(
        {2: "garbled-math"},
        n=3,
        settings={"print_env": ["VLLM_BATCH_INVARIANT"], "unknown_env": ["VLLM_BATCH_INVARIANT"]},
        changes={2: {"unknown_env": []}},
    )
    config = h.config(checks=[{"type": "expect"}], probe={"batch_invariant": True})
    out = tmp_path / "out"
    code, said = cli_bounded("run", str(config), "--out", str(out))
    assert code == 0 and f"found: {h.shas[2]}" in said, said
    doc = ResultDocument.model_validate_json((out / "result.json").read_bytes())
    here = socket.gethostname()
    for p in doc.probes:
        assert (p.fingerprint.node, p.fingerprint.batch_invariant) == (here, True), p.commit
        log = (out / "probes" / p.commit[:12] / "server.log").read_text()
        assert "sim: VLLM_BATCH_INVARIANT=1" in log
    old, new = doc.probe_of(h.shas[1]), doc.probe_of(h.shas[2])
    assert old is not None and new is not None
    assert old.fingerprint.kernels["unknown_env"] == "VLLM_BATCH_INVARIANT"
    assert "unknown_env" not in new.fingerprint.kernels
    report = (out / "report.md").read_text()
    assert "| seconds | node |" in report and f"| {here} |" in report
    assert "| batch_invariant | True | True |" in report  # the builds compared
    assert "**⚠ kernels.unknown_env**" in report
