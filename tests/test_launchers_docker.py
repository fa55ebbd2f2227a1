"""The Docker launcher against a real Docker engine, with images built here from nothing pulled."""

from __future__ import annotations

import base64
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import docker
import docker.errors
import httpx
import pytest
import yaml
from typer.testing import CliRunner

from helpers import History, probe_order, shell_words, wait_until, write_config
from llm_bisect import lease
from llm_bisect.builds import Builder, ImageStrategy
from llm_bisect.builds.cache import BuildCache
from llm_bisect.cli import cli
from llm_bisect.errors import PortTaken
from llm_bisect.journal import read_events
from llm_bisect.kinds import LauncherContext
from llm_bisect.launchers.common import owner_label
from llm_bisect.launchers.docker import (
    Containers,
    DockerLauncher,
    DockerServerConfig,
    container_spec,
    run_line,
)
from llm_bisect.launchers.docker_engine import (
    COMMIT_LABEL,
    OWNER_LABEL,
    RUN_LABEL,
    engine_address,
)
from llm_bisect.launchers.spread import Spread
from llm_bisect.model import Candidate
from llm_bisect.registry import RegistryClient, parse_image_ref
from llm_bisect.services.setup import setup
from llm_bisect.sim.docker import (
    PYTHON,
    SimRegistry,
    containers_of,
    import_history,
    import_image,
    sim_server,
)
from localregistry import LocalRegistry
from test_collectenv import SMI

pytestmark = pytest.mark.docker


@pytest.fixture
def repo_name(client: docker.DockerClient) -> Iterator[str]:
    name = f"llm-bisect-test-{uuid.uuid4().hex[:8]}"
    yield name
    for image in client.images.list(name=name):
        for tag in image.tags:
            client.images.remove(tag, force=True)


def build_images(
    client: docker.DockerClient, h: History, repo: str, missing: frozenset[int] = frozenset()
) -> None:
    import_history(client, h.repo, h.shas, repo, missing)


SIMPLE_CHECKS = [{"type": "canary"}, {"type": "expect"}]
"""Checks that need no golden, for `check` runs that test the launcher."""


def docker_config(
    h: History, server: dict[str, Any], checks: list[Any] | None = None, **candidates: str
) -> Path:
    h.configs += 1
    data: dict[str, Any] = {
        "candidates": {"repo": str(h.repo), "good": h.shas[0], "bad": h.shas[-1], **candidates},
        "server": server,
    }
    if checks is not None:
        data["checks"] = checks
    return write_config(h.root / f"docker-{h.configs}.yaml", data)


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_container_spec_maps_docker_run_options(tmp_path: Path) -> None:
    cfg = DockerServerConfig.model_validate(
        {
            "launcher": "docker",
            "image": "vllm/vllm-openai:nightly-{commit}",
            "args": [
                "--model",
                "m",
                "--port",
                "{port}",
                "--served-model-name",
                "{short}",
                "--revision",
                "{image}",
            ],
            "gpus": ["0", "3"],
            "ipc": "host",
            "shm_size": "16g",
            "volumes": ["./hf:/root/.cache/huggingface", "models:/models"],
            "ulimits": {"memlock": -1, "stack": {"soft": 67108864, "hard": 67108864}},
            "user": "1000:1000",
        }
    )
    cand = Candidate("ab" * 20)
    spec = container_spec(
        cfg,
        Containers(
            "r1",
            tmp_path,
            {"A": "1", "NCCL_MNNVL_ENABLE": "1", "HF_TOKEN": "hf_dockerSecret99"},
            owner="node-1:4242:99",
        ),
        image="sha256:abc",
        ref="vllm/vllm-openai:nightly-" + cand.commit,
        candidate=cand,
        port=8000,
        host_port=12345,
    )
    assert spec["command"] == [
        "--model",
        "m",
        "--port",
        "8000",
        "--served-model-name",
        cand.short,
        "--revision",
        f"vllm/vllm-openai:nightly-{cand.commit}",
    ]
    assert spec["image"] == "sha256:abc"
    assert spec["ports"] == {"8000/tcp": ("127.0.0.1", 12345)}
    assert spec["device_requests"][0]["DeviceIDs"] == ["0", "3"]
    assert spec["volumes"] == [f"{tmp_path}/hf:/root/.cache/huggingface", "models:/models"]
    assert [(u["Name"], u["Soft"]) for u in spec["ulimits"]] == [
        ("memlock", -1),
        ("stack", 67108864),
    ]
    assert spec["labels"] == {
        RUN_LABEL: "r1",
        COMMIT_LABEL: cand.commit,
        OWNER_LABEL: "node-1:4242:99",
    }
    assert spec["init"] is True
    # What report.md's Reproduce block shows: the same container as a person types it, its
    # environment with values but a secret's (`-e NAME` takes the caller's).
    line = run_line(spec, "vllm/vllm-openai:nightly-" + cand.commit, ["HF_TOKEN"])
    assert "hf_dockerSecret99" not in line
    assert shlex.split(line) == [
        "docker", "run", "--rm", "--init", "--gpus", '"device=0,3"', "--ipc", "host",
        "--shm-size", "16g", "--user", "1000:1000", "-p", "127.0.0.1:12345:8000",
        "-v", f"{tmp_path}/hf:/root/.cache/huggingface", "-v", "models:/models",
        "--ulimit", "memlock=-1:-1", "--ulimit", "stack=67108864:67108864", "-e", "A=1",
        "-e", "HF_TOKEN", "-e", "NCCL_MNNVL_ENABLE=1",
        f"vllm/vllm-openai:nightly-{cand.commit}", *spec["command"],
    ]  # fmt: skip
    hostile = {**spec, "command": ["$(touch pwned)", "a\nb;touch pwned-nl", "`touch pwned-t`"]}
    hostile["volumes"] = ["/d $(touch pwned-v):/m"]
    (tmp_path / "sh").mkdir()
    hostile["environment"] = {"X": "$(touch pwned-e)", "$(touch pwned-n)": "`touch pwned-b`"}
    words = shell_words(run_line(hostile, "img:tag", []), tmp_path / "sh")
    assert words[-4:] == ["img:tag", *hostile["command"]] and "/d $(touch pwned-v):/m" in words
    assert "X=$(touch pwned-e)" in words and "$(touch pwned-n)=`touch pwned-b`" in words
    assert list((tmp_path / "sh").iterdir()) == []  # pasted into sh, it runs nothing
    host = cfg.model_copy(update={"network_mode": "host"})
    spec = container_spec(
        host,
        Containers("r1", tmp_path, owner="node-1:4242:99"),
        image="img",
        candidate=cand,
        port=40000,
        host_port=40000,
    )
    assert spec["network_mode"] == "host" and "ports" not in spec
    assert "--port" in spec["command"] and "40000" in spec["command"]


def test_gpu_options_reach_the_engine(
    client: docker.DockerClient, repo_name: str, tmp_path: Path
) -> None:
    import_image(client, f"{repo_name}:gpu", {"fault": "none"})
    cfg = DockerServerConfig.model_validate(
        sim_server(
            f"{repo_name}:gpu",
            gpus="all",
            ipc="host",
            shm_size="1g",
            ulimits={"memlock": -1},
            user="1000:1000",
        )
    )
    spec = container_spec(
        cfg,
        Containers("gpu", tmp_path),
        image=f"{repo_name}:gpu",
        candidate=Candidate("cd" * 20),
        port=8000,
        host_port=23456,
    )
    container = client.containers.create(**spec)  # created, not started: no GPU on this machine
    try:
        host = client.api.inspect_container(container.id)["HostConfig"]
        [request] = host["DeviceRequests"]  # what `docker run --gpus all` sets
        assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]
        assert not request["DeviceIDs"]
        assert host["IpcMode"] == "host"
        assert host["ShmSize"] == 1024**3
        assert host["Ulimits"] == [{"Name": "memlock", "Soft": -1, "Hard": -1}]
        assert host["PortBindings"] == {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "23456"}]}
        assert client.api.inspect_container(container.id)["Config"]["User"] == "1000:1000"
    finally:
        container.remove(force=True)


def test_bisects_images_skips_a_missing_one_and_marks_the_kernel_change(
    client: docker.DockerClient, repo_name: str, history: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    h: History = history({6: "degenerate-reasoning"}, n=8, changes={6: {"moe_backend": "CUTLASS"}})
    monkeypatch.setenv("XDG_CACHE_HOME", str(h.root / "xdg"))
    build_images(client, h, repo_name, missing=frozenset({4}))
    config = docker_config(h, sim_server(repo_name + ":{commit}", pull="never"))
    code, output = invoke("candidates", str(config))
    assert code == 0, output
    assert output.count("MISSING") == 1 and "8 with an artifact" in output
    out = h.root / "out"
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == h.shas[6]
    probes = {p["commit"]: p for p in result["probes"]}
    assert probes[h.shas[4]]["verdict"] == "skip"
    assert probes[h.shas[4]]["reason"].startswith("no artifact")
    assert not (out / "probes" / h.shas[4][:12]).exists(), "nothing started for a missing image"
    sides = result["fingerprints"]
    assert sides["old"]["image"]["id"].startswith("sha256:")
    assert sides["old"]["image"]["labels"]["ai.vllm.build.commit"] == h.shas[5]
    assert "kernels.moe_backend" in sides["differences"]
    assert sides["new"]["kernels"]["moe_backend"] == "CUTLASS"
    report = (out / "report.md").read_text()
    assert "**⚠ kernels.moe_backend**" in report
    assert containers_of(client, h.shas[6], COMMIT_LABEL) == []
    # the engine cache, on by default: the user's cache folder mounted at the same path, the
    # slot's folder in the container's environment, what it compiled on this host's disk
    root = h.root / "xdg" / "llm-bisect" / "engine-cache"
    culprit = probes[h.shas[6]]["fingerprint"]
    cache = culprit["engine_cache"]
    assert cache["folder"].startswith(f"{root}/"), cache
    caches = [p["fingerprint"].get("engine_cache", {}) for p in result["probes"]]
    assert any(c.get("written", 0) >= 1 for c in caches), caches  # compiled through the mount
    assert any(c.get("state") == "hit" for c in caches), caches  # a build started again
    assert f"-v {root}:{root}" in culprit["command"], culprit["command"]
    assert f"VLLM_CACHE_ROOT={cache['folder']}/vllm" in culprit["command"]
    assert list((Path(cache["folder"]) / "vllm" / "torch_compile_cache").iterdir())
    # localised in containers: the extension bind-mounted, first on the PYTHONPATH
    assert result["localization"]["module"] == "model.layers.1.self_attn", result["localization"]
    assert "worker_extension_cls" in (out / "localize" / h.shas[6][:12] / "server.log").read_text()


def test_images_as_ends_resolve_to_their_commits(
    client: docker.DockerClient, repo_name: str, history: Any
) -> None:
    h: History = history({3: "null-content"}, n=5)
    build_images(client, h, repo_name)
    import_image(client, f"{repo_name}:nightly-{h.shas[0]}", {"fault": "none"})
    import_image(
        client,
        f"{repo_name}:v0.27.0",
        {"fault": "null-content"},
        env={"VLLM_VERSION": f"0.27.0+g{h.shas[-1][:9]}"},
    )
    import_image(client, f"{repo_name}:mystery", {"fault": "none"})
    server = sim_server(repo_name + ":{commit}")
    config = docker_config(
        h, server, good=f"{repo_name}:nightly-{h.shas[0]}", bad=f"{repo_name}:v0.27.0"
    )
    code, output = invoke("run", str(config), "--out", str(h.root / "out"))
    assert code == 0, output
    result = json.loads((h.root / "out" / "result.json").read_text())
    assert result["culprit"]["commit"] == h.shas[3]
    assert result["good"] == h.shas[0] and result["bad"] == h.shas[-1]
    bad_probe = next(p for p in result["probes"] if p["commit"] == h.shas[-1])
    assert bad_probe["fingerprint"]["image"]["ref"] == f"{repo_name}:v0.27.0"
    mystery = docker_config(h, server, bad=f"{repo_name}:mystery")
    code, output = invoke("candidates", str(mystery))
    assert code == 2
    assert f"candidates.bad: image '{repo_name}:mystery' names no commit" in output
    local_only = {**server, "pull": "never"}
    absent = docker_config(h, local_only, bad=f"{repo_name}:absent")
    code, output = invoke("candidates", str(absent))
    assert code == 2 and f"candidates.bad: no such ref or image '{repo_name}:absent'" in output


def test_a_container_that_dies_before_ready_is_skip_with_its_exit(
    client: docker.DockerClient, repo_name: str, history: Any
) -> None:
    h: History = history({1: "crash-on-start"}, n=1)
    build_images(client, h, repo_name)
    config = docker_config(h, sim_server(repo_name + ":{commit}"), SIMPLE_CHECKS)
    code, output = invoke(
        "check", str(config), "--candidate", h.shas[1], "--out", str(h.root / "c")
    )
    assert code == 125, output
    assert "container exited with code 3 before ready" in output
    log = (h.root / "c" / "probes" / h.shas[1][:12] / "server.log").read_text()
    assert "no kernel image is available" in log
    assert containers_of(client, h.shas[1], COMMIT_LABEL) == []


def test_secrets_in_env_never_reach_the_container_log_file(
    client: docker.DockerClient, repo_name: str, history: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    h: History = history({}, n=1, settings={"print_env": ["HF_TOKEN"]})
    build_images(client, h, repo_name)
    server = sim_server(repo_name + ":{commit}")
    server["env"]["HF_TOKEN"] = "${TEST_HF_TOKEN}"
    monkeypatch.setenv("TEST_HF_TOKEN", "hf_dockerSecret9")
    code, output = invoke(
        "check",
        str(docker_config(h, server, SIMPLE_CHECKS)),
        "--candidate",
        h.shas[1],
        "--out",
        str(h.root / "c"),
    )
    assert code == 0, output
    log = (h.root / "c" / "probes" / h.shas[1][:12] / "server.log").read_text()
    assert "HF_TOKEN=***" in log and "hf_dockerSecret9" not in log


def test_a_secret_across_the_engines_16k_log_split_never_reaches_the_log(
    client: docker.DockerClient, repo_name: str, history: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The engine cuts a log line every 16 KiB; the token straddles the first cut.
    token = "hf_" + "splitAcross16k" * 3
    at = 16 * 1024 - len(token) // 2
    h: History = history({}, n=1, settings={"print_env": ["HF_TOKEN"], "print_env_at": at})
    build_images(client, h, repo_name)
    server = sim_server(repo_name + ":{commit}")
    server["env"]["HF_TOKEN"] = "${TEST_HF_TOKEN}"
    monkeypatch.setenv("TEST_HF_TOKEN", token)
    config = docker_config(h, server, SIMPLE_CHECKS)
    code, output = invoke("check", str(config), "--candidate", h.shas[1], "--out", str(h.root))
    assert code == 0, output
    log = (h.root / "probes" / h.shas[1][:12] / "server.log").read_text()
    line = next(line for line in log.splitlines() if "sim: HF_TOKEN=" in line)
    assert token not in log and line.endswith("sim: HF_TOKEN=***"), line[at - 40 :]
    assert len(line) == at + len("***"), "the line is whole, the cut rejoined"


def test_a_short_value_named_like_a_secret_does_not_garble_the_log(
    client: docker.DockerClient, repo_name: str, history: Any
) -> None:
    h: History = history({}, n=1)
    build_images(client, h, repo_name)
    server = sim_server(repo_name + ":{commit}")
    server["env"]["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
    config = docker_config(h, server, SIMPLE_CHECKS)
    code, output = invoke(
        "check", str(config), "--candidate", h.shas[1], "--out", str(h.root), "--json"
    )
    assert code == 0, output
    log = (h.root / "probes" / h.shas[1][:12] / "server.log").read_text()
    assert f"Initializing a V1 LLM engine (v0.1.0+g{h.shas[1][:12]})" in log, log
    probe = json.loads((h.root / "probe.json").read_text())
    assert probe["fingerprint"]["kernels"]["engine_version"] == f"0.1.0+g{h.shas[1][:12]}"


def _start_run(config: Path, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "llm_bisect.cli", "run", str(config), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def held_images(
    client: docker.DockerClient, repo_name: str, h_root: Path, faults: dict[int, str], held: int
) -> tuple[History, Path, Path]:
    """Images whose commit `held` does not start while a hold file (mounted in) exists."""
    hold = h_root / "hold"
    hold.touch()
    h = History(
        h_root, faults, 8, changes={held: {"hold_file": str(hold)}, held + 1: {"hold_file": ""}}
    )
    build_images(client, h, repo_name)
    server = sim_server(repo_name + ":{commit}", ready_timeout=600)
    server["volumes"].append(f"{h_root}:{h_root}:ro")
    return h, docker_config(h, server), hold


def held_container(client: docker.DockerClient, commit: str) -> bool:
    return any(
        c.labels.get(COMMIT_LABEL) == commit and "sim: held" in c.logs().decode()
        for c in client.containers.list()
    )


def test_a_killed_run_leaves_a_container_that_resume_removes(
    client: docker.DockerClient, repo_name: str, tmp_path: Path
) -> None:
    third = probe_order(8, culprit=5)[2]
    h, config, hold = held_images(client, repo_name, tmp_path, {5: "degenerate-content"}, third)
    out = h.root / "out"
    proc = _start_run(config, out)
    try:
        assert wait_until(lambda: held_container(client, h.shas[third]), timeout=120)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
    run_id = containers_of(client, h.shas[third], COMMIT_LABEL)[0].labels[RUN_LABEL]
    assert containers_of(client, run_id, RUN_LABEL), (
        "SIGKILL leaves the container (nothing can stop it)"
    )
    assert sum(e["event"] == "probe" for e in read_events(out / "journal.jsonl")) == 2
    hold.unlink()
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    assert json.loads((out / "result.json").read_text())["culprit"]["commit"] == h.shas[5]
    assert containers_of(client, run_id, RUN_LABEL) == [], "the resumed run removed the orphan"


def test_ctrl_c_removes_the_container(
    client: docker.DockerClient, repo_name: str, tmp_path: Path
) -> None:
    second = probe_order(8, culprit=5)[1]
    h, config, _hold = held_images(client, repo_name, tmp_path, {5: "null-content"}, second)
    proc = _start_run(config, h.root / "out")
    try:
        assert wait_until(lambda: held_container(client, h.shas[second]), timeout=120)
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=60)[0].decode()
    finally:
        proc.kill()
    assert proc.returncode == 130, output
    assert all(containers_of(client, sha, COMMIT_LABEL) == [] for sha in h.shas)


def die_codes(client: docker.DockerClient, run_id: str, since: int) -> list[str]:
    """The exit codes the engine reported for this run's containers."""
    events = client.events(
        since=since,
        until=int(time.time()) + 1,
        filters={"event": "die", "label": f"{RUN_LABEL}={run_id}"},
        decode=True,
    )
    return [e["Actor"]["Attributes"]["exitCode"] for e in events]


def test_an_init_stops_a_server_that_leaves_sigterm_to_pid_1(
    client: docker.DockerClient, repo_name: str, history: Any
) -> None:
    h: History = history({}, n=1, settings={"hostile": {"default_sigterm": True}})
    build_images(client, h, repo_name)
    codes = {}
    for init in (True, False):
        cfg = DockerServerConfig.model_validate(
            sim_server(repo_name + ":{commit}", init=init, stop_timeout=2)
        )
        run_id = f"init-{init}-{uuid.uuid4().hex[:6]}"
        launcher = DockerLauncher(cfg, LauncherContext(h.root, run_id, cfg.env), client=client)
        since = int(time.time()) - 1
        with launcher.launch(Candidate(h.shas[1]), h.root / run_id) as server:
            server.wait_ready()
        launcher.close()
        codes[init] = die_codes(client, run_id, since)
    assert codes[True] == ["143"], "with an init, SIGTERM reaches the server and it stops"
    assert codes[False] == ["137"], "as PID 1 it ignores SIGTERM and is killed at stop_timeout"


def test_reap_spares_the_containers_of_a_live_run(
    client: docker.DockerClient, repo_name: str, tmp_path: Path
) -> None:
    import_image(client, f"{repo_name}:x", {"fault": "none"})
    ended = subprocess.Popen(["true"])
    ended.wait()
    run_id = f"reap-{uuid.uuid4().hex[:6]}"
    alive = client.containers.create(
        f"{repo_name}:x", ["x"], labels={RUN_LABEL: run_id, OWNER_LABEL: owner_label()}
    )
    orphan = client.containers.create(
        f"{repo_name}:x", ["x"], labels={RUN_LABEL: run_id, OWNER_LABEL: owner_label(ended.pid)}
    )
    lease.write(owner_label(ended.pid), 0.0)  # it died: its lease expired
    # an owner in another PID namespace (a CI runner container sharing the host name and
    # docker.sock): its pid is no process here, and its lease is on its own disk. It was
    # once removed, a live run's container, for its PID alone.
    elsewhere = client.containers.create(
        f"{repo_name}:x", ["x"],
        labels={RUN_LABEL: run_id, OWNER_LABEL: f"{socket.gethostname()}:4194000:77"},
    )  # fmt: skip
    cfg = DockerServerConfig.model_validate(sim_server(repo_name + ":{commit}"))
    launcher = DockerLauncher(cfg, LauncherContext(tmp_path, run_id), client=client)
    try:
        assert len(launcher.reap()) == 1
        left = {c.id for c in containers_of(client, run_id, RUN_LABEL)}
        assert left == {alive.id, elsewhere.id} and orphan.id not in left
        lease.write(f"{socket.gethostname()}:4194000:77", time.time() + 600, "pid:[4026530001]")
        assert launcher.reap() == []
        lease.write(f"{socket.gethostname()}:4194000:77", 0.0)  # expired: its owner died
        assert len(launcher.reap()) == 1
        assert {c.id for c in containers_of(client, run_id, RUN_LABEL)} == {alive.id}
    finally:
        launcher.close()
        alive.remove(force=True)
        with suppress(docker.errors.NotFound):
            elsewhere.remove(force=True)


def killed_check(client: docker.DockerClient, config: Path, commit: str, out: Path) -> Any:
    """The container a `check` left running when it was SIGKILLed (its server was starting)."""
    cli = [sys.executable, "-m", "llm_bisect.cli"]
    proc = subprocess.Popen(
        [*cli, "check", str(config), "--candidate", commit, "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "LLM_BISECT_LEASE_S": "2"},  # its lease lapses soon after the kill
    )
    log = out / "probes" / commit[:12] / "server.log"
    try:
        assert wait_until(lambda: log.exists() and "sim: serving" in log.read_text(), 60)
    finally:
        proc.kill()
        proc.wait()
    (left,) = containers_of(client, commit, COMMIT_LABEL)
    assert left.status in ("created", "running"), "a SIGKILLed check leaves its container"
    owner = left.labels[OWNER_LABEL]
    assert wait_until(lambda: lease.held(owner) is False, 30), "a dead owner's lease lapses"
    return left


def slow_history(client: docker.DockerClient, history: Any, repo_name: str) -> History:
    """Images for two commits, and a `slow-` image of the second whose server never listens."""
    h: History = history({}, n=1)
    build_images(client, h, repo_name)
    import_image(client, f"{repo_name}:slow-{h.shas[1]}", {"startup_delay": 600})
    return h


def test_a_container_a_killed_check_left_is_removed_by_the_next_run_which_says_so(
    client: docker.DockerClient, repo_name: str, history: Any
) -> None:
    h = slow_history(client, history, repo_name)
    slow = docker_config(h, sim_server(repo_name + ":slow-{commit}"), SIMPLE_CHECKS)
    try:
        left = killed_check(client, slow, h.shas[1], h.root / "check")
        config = docker_config(h, sim_server(repo_name + ":{commit}"), SIMPLE_CHECKS)
        code, output = invoke("run", str(config), "--out", str(h.root / "run"))
        assert code == 4, output  # no regression: both ends good
        said = f"docker: removed container {left.name} (commit {h.shas[1][:12]}, its llm-bisect"
        assert said in output, output
        assert containers_of(client, h.shas[1], COMMIT_LABEL) == []
    finally:
        for container in containers_of(client, h.shas[1], COMMIT_LABEL):
            container.remove(force=True)


def test_reap_removes_what_dead_processes_left_and_spares_a_live_ones(
    client: docker.DockerClient, repo_name: str, history: Any
) -> None:
    h = slow_history(client, history, repo_name)
    slow = docker_config(h, sim_server(repo_name + ":slow-{commit}"), SIMPLE_CHECKS)
    alive = subprocess.Popen(["sleep", "600"])  # another llm-bisect, still running
    spared = client.containers.create(
        f"{repo_name}:{h.shas[0]}",
        ["x"],
        labels={RUN_LABEL: "another-run", OWNER_LABEL: owner_label(alive.pid)},
    )
    try:
        left = killed_check(client, slow, h.shas[1], h.root / "check")
        code, output = invoke("reap")
        assert code == 0, output
        assert f"docker: removed container {left.name} (commit {h.shas[1][:12]}" in output
        assert "server(s) in the Docker engine" in output
        assert containers_of(client, h.shas[1], COMMIT_LABEL) == []
        assert [c.id for c in containers_of(client, "another-run", RUN_LABEL)] == [spared.id]
        code, output = invoke("reap", str(slow))  # with a config: its launcher
        assert code == 0 and "nothing to reap in the docker launcher of" in output, output
    finally:
        alive.kill()
        alive.wait()
        spared.remove(force=True)
        for container in containers_of(client, h.shas[1], COMMIT_LABEL):
            container.remove(force=True)


def test_docker_login_opens_a_private_registry_and_is_a_secret(
    client: docker.DockerClient, history: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    h: History = history({}, n=2)
    registry = SimRegistry(token="t0k3n", login=("ci-bot", "s3cret-pass-77"))
    repo = f"sim/private-{uuid.uuid4().hex[:6]}"
    for sha in h.shas:
        registry.add_image(repo, sha, {"fault": "none"})
    folder = h.root / "docker-config"
    folder.mkdir()
    auth = base64.b64encode(b"ci-bot:s3cret-pass-77").decode()
    with registry.running():
        (folder / "config.json").write_text(json.dumps({"auths": {registry.host: {"auth": auth}}}))
        config = docker_config(h, sim_server(f"{registry.host}/{repo}:{{commit}}"))
        code, output = invoke("candidates", str(config))
        rows = [line for line in output.splitlines() if line[:4].strip().isdigit()]
        assert code == 0 and len(rows) == 3, output
        assert all("MISSING" in row or "unknown" in row for row in rows), output
        monkeypatch.setenv("DOCKER_CONFIG", str(folder))
        code, output = invoke("candidates", str(config))
        assert code == 0, output
        assert "MISSING" not in output and "unknown" not in output, output
        assert "3 candidates, 3 with an artifact" in output
        assert "s3cret-pass-77" in setup(config, os.environ).scrub.secrets


def test_registry_images_are_checked_pulled_by_digest_and_prefetched(
    client: docker.DockerClient, history: Any
) -> None:
    h: History = history({5: "garbled-math"}, n=8)
    registry = SimRegistry(bytes_per_s=4e6)
    repo = f"sim/engine-{uuid.uuid4().hex[:6]}"
    digests = {}
    for i, sha in enumerate(h.shas):
        if i == 2:
            continue  # never published
        fault = "garbled-math" if i >= 5 else "none"
        digests[sha] = registry.add_image(
            repo, sha, {"fault": fault}, pad_bytes=1_500_000, labels={"ai.vllm.build.commit": sha}
        )
    with registry.running():
        config = docker_config(h, sim_server(f"{registry.host}/{repo}:{{commit}}"))
        try:
            code, output = invoke("candidates", str(config))
            assert code == 0, output
            assert output.count("MISSING") == 1 and "GB" in output
            out = h.root / "out"
            code, output = invoke("run", str(config), "--out", str(out))
            assert code == 0, output
            result = json.loads((out / "result.json").read_text())
            assert result["culprit"]["commit"] == h.shas[5]
            for p in result["probes"]:
                if p["verdict"] in ("good", "bad"):
                    assert p["fingerprint"]["image"]["digest"].endswith(digests[p["commit"]])
            pulled = {
                r.split("/manifests/")[1] for r in registry.requests if "/manifests/sha256:" in r
            }
            assert pulled, "images were pulled by digest"
            assert "prefetch" in output
        finally:
            for image in client.images.list(name=f"{registry.host}/{repo}"):
                client.images.remove(image.id, force=True)


def test_registry_client_follows_a_bearer_challenge() -> None:
    registry = SimRegistry(token="t0k3n")
    digest = registry.add_image("org/img", "v1", {"fault": "none"}, labels={"a": "b"})
    with registry.running():
        reg = RegistryClient()
        ref = parse_image_ref(f"{registry.host}/org/img:v1")
        manifest = reg.manifest(ref)
        assert manifest is not None and manifest.digest == digest and manifest.size > 0
        assert reg.image_config(ref, manifest)["config"]["Labels"] == {"a": "b"}
        assert reg.manifest(parse_image_ref(f"{registry.host}/org/img:v2")) is None
        reg.close()
    assert any(r.startswith("GET /token") for r in registry.requests)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://{registry.host}/v2/", timeout=1)


def test_the_laptop_config_bisects_images_built_by_the_script(
    client: docker.DockerClient, repo_name: str, tmp_path: Path
) -> None:
    # No image can be pulled here, so the base is an empty image and Python comes from
    # this machine (bind mounts); on a laptop the base is python:3.12-slim.
    base = f"{repo_name}:base"
    import_image(client, base, {"fault": "none"})
    built = subprocess.run(
        [
            sys.executable,
            "scripts/build_demo_images.py",
            "--base",
            base,
            "--dir",
            str(tmp_path / ".demo"),
        ],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    assert built.returncode == 0, built.stderr
    try:
        shipped = Path(__file__).parent.parent / "configs" / "laptop-docker.yaml"
        data = yaml.safe_load(shipped.read_text())
        here = sim_server(data["server"]["image"])
        data["server"].update(entrypoint=here["entrypoint"], volumes=here["volumes"][:-1])
        config = write_config(tmp_path / "laptop-docker.yaml", data)
        code, output = invoke("run", str(config), "--out", str(tmp_path / "out"))
        assert code == 0, output
        result = json.loads((tmp_path / "out" / "result.json").read_text())
        assert "Bump FlashInfer" in result["culprit"]["subject"]
    finally:
        for image in client.images.list(name="llm-bisect-demo"):
            client.images.remove(str(image.id), force=True)


def test_a_multi_arch_image_is_sized_for_this_node(
    registries: tuple[LocalRegistry, LocalRegistry],
) -> None:
    upstream, _ = registries  # a real registry (distribution 2.8)
    name = f"org/img-{uuid.uuid4().hex[:6]}"
    index = upstream.multi_arch(
        name, "v1", {"fault": "none"}, pads={"amd64": 1000, "arm64": 50_000}
    )
    ref = parse_image_ref(f"{upstream.host}/{name}:v1")
    on_gb200, on_x86 = RegistryClient(architecture="arm64"), RegistryClient(architecture="amd64")
    arm_m, amd_m = on_gb200.manifest(ref), on_x86.manifest(ref)
    assert arm_m is not None and amd_m is not None
    assert arm_m.digest == amd_m.digest == index  # the reference's own digest
    assert arm_m.size > 50_000 > amd_m.size
    on_gb200.close()
    on_x86.close()


def test_two_slots_run_two_containers_at_once_on_two_engine_clients(
    client: docker.DockerClient, repo_name: str, tmp_path: Path
) -> None:
    """parallel: 2 over docker_hosts (here one engine reached twice, a client each): the held
    bad end's container and the middle's run at once, on different ports."""
    h, config, hold = held_images(client, repo_name, tmp_path, {5: "degenerate-reasoning"}, 8)
    data = yaml.safe_load(config.read_text())
    socket = "unix:///var/run/docker.sock"
    data["server"]["docker_hosts"] = [socket, socket]
    data["parallel"] = 2
    data["localize"] = False
    data["search"] = {"flake": 0}  # the bisection's rounds, probe by probe
    config.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    proc = _start_run(config, out)
    try:
        assert wait_until(lambda: held_container(client, h.shas[8]), 120)
        assert wait_until(lambda: len(containers_of(client, h.shas[4], COMMIT_LABEL)) == 1, 120)
        ports = set()
        for commit in (h.shas[8], h.shas[4]):
            (container,) = containers_of(client, commit, COMMIT_LABEL)
            container.reload()
            ports |= {b["HostPort"] for b in container.ports["8000/tcp"]}
        assert len(ports) == 2  # two containers at once, each on its own port
        hold.unlink()
        assert proc.wait(timeout=300) == 0
    finally:
        proc.kill()
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == h.shas[5]
    assert {p["slot"] for p in result["probes"]} == {0, 1} and result["parallel"] == 2
    assert all(containers_of(client, c, COMMIT_LABEL) == [] for c in h.shas)


def test_an_engine_url_says_where_its_published_ports_are() -> None:
    assert engine_address("unix:///var/run/docker.sock") is None
    assert engine_address("") is None and engine_address("tcp://127.0.0.1:2375") is None
    assert engine_address("tcp://10.0.0.5:2376") == "10.0.0.5"
    assert engine_address("ssh://ops@gpu-node-2") == "gpu-node-2"
    assert engine_address("ssh://gpu-node-3:2222") == "gpu-node-3"


def test_a_host_port_taken_before_the_container_starts_moves_it_to_another(
    client: docker.DockerClient, repo_name: str, tmp_path: Path
) -> None:
    """Another process binds the host port a probe was given before its container starts
    (a port is free when picked, not when published): the container starts again on another
    port, and the checks reach it."""
    import_image(client, f"{repo_name}:port", {"fault": "none"})
    cfg = DockerServerConfig.model_validate(sim_server(f"{repo_name}:port"))
    launcher = DockerLauncher(cfg, LauncherContext(tmp_path, "port", cfg.env), client=client)
    server = launcher.launch(Candidate("ef" * 20), tmp_path / "probe")
    taken = server.host_port
    with socket.socket() as other:
        other.bind(("127.0.0.1", taken))
        other.listen()
        with server:
            server.wait_ready()
            version = httpx.get(server.base_url + "/version").json()["version"]
    assert version == f"0.1.0+g{'ef' * 6}"
    assert server.host_port != taken
    said = (tmp_path / "probe" / "server.log").read_text()
    assert f"host port {taken} was taken" in said
    assert containers_of(client, "ef" * 20, COMMIT_LABEL) == []
    launcher.close()


def test_each_slot_on_one_engine_gets_its_own_gpus(
    client: docker.DockerClient, repo_name: str, tmp_path: Path
) -> None:
    import_image(client, f"{repo_name}:gpus", {"fault": "none"})
    cfg = DockerServerConfig.model_validate(sim_server(f"{repo_name}:gpus", gpus="all"))
    launcher = DockerLauncher(
        cfg,
        LauncherContext(
            tmp_path,
            "gpus",
            env={"VLLM_BATCH_INVARIANT": "1"},  # probe.batch_invariant
            slot_devices=[("0", "1", "2", "3"), ("4", "5", "6", "7")],
        ),
        client=client,
    )
    server = launcher.launch(Candidate("cd" * 20), tmp_path / "probe", slot=1)
    assert server.image is None
    spec = server.spec(client.images.get(f"{repo_name}:gpus"))
    container = client.containers.create(**spec)  # created, not started: no GPU on this machine
    try:
        [request] = client.api.inspect_container(container.id)["HostConfig"]["DeviceRequests"]
        assert request["DeviceIDs"] == ["4", "5", "6", "7"] and request["Count"] == 0
        assert "--gpus '\"device=4,5,6,7\"'" in run_line(spec, f"{repo_name}:gpus", [])
    finally:
        container.remove(force=True)
    assert spec["environment"]["VLLM_BATCH_INVARIANT"] == "1"
    facts = server.fingerprint()
    assert facts["devices"] == ["4", "5", "6", "7"]
    assert facts["node"] == socket.gethostname() and facts["batch_invariant"] is True  # local
    server.stop()
    launcher.close()


def test_on_the_hosts_network_another_server_on_the_port_is_never_checked(
    client: docker.DockerClient, repo_name: str, tmp_path: Path
) -> None:
    """`network_mode: host`: the server in the container binds the port itself. While it is
    held before listening, another server answers on that port: the probe is untestable,
    never that server's verdict."""
    hold = tmp_path / "hold"
    hold.touch()
    import_image(client, f"{repo_name}:hostnet", {"fault": "none", "hold_file": str(hold)})
    server_cfg = sim_server(f"{repo_name}:hostnet", network_mode="host", ready_timeout=60)
    server_cfg["volumes"].append(f"{tmp_path}:{tmp_path}:ro")
    cfg = DockerServerConfig.model_validate(server_cfg)
    launcher = DockerLauncher(cfg, LauncherContext(tmp_path, "hostnet", cfg.env), client=client)
    server = launcher.launch(Candidate("ef" * 20), tmp_path / "probe")
    other = subprocess.Popen(
        [sys.executable, "-m", "llm_bisect.sim", "--commit", "cd" * 20, "--port", str(server.port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_until(lambda: _answers(server.base_url), timeout=30)
        with (
            pytest.raises(PortTaken, match=rf"served by pid {other.pid} \(python"),
            server,
        ):
            assert wait_until(lambda: held_container(client, "ef" * 20), timeout=60)
            server.wait_ready()
    finally:
        other.terminate()
        other.wait()
    assert containers_of(client, "ef" * 20, COMMIT_LABEL) == []
    launcher.close()


def _answers(base_url: str) -> bool:
    try:
        return httpx.get(base_url + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


SNAPSHOT = {"snapshot": "1" * 40}
"""The revision of the model's files the simulator's start fetches (sim/server.py)."""


def test_collect_env_and_the_gpus_come_from_inside_the_candidates_container(
    client: docker.DockerClient, repo_name: str, history: Any
) -> None:
    """collect_env runs in each candidate's container, and nvidia-smi there (a stand-in in
    the image, not on this host's PATH) names the GPUs: the report shows the torch bump.
    The weights' revision each server loaded is resolved there too, in the container's hub
    cache (the culprit's start fetched a new snapshot)."""
    bump = {2: {"packages": {"torch": "2.14.0"}, "snapshot": "2" * 40}}
    h: History = history({2: "degenerate-content"}, n=2, changes=bump, settings=SNAPSHOT)
    smi = {"engine/bin/nvidia-smi": SMI.replace("#!/bin/sh", "#!/usr/bin/sh").encode()}
    for sha in h.shas:
        shown = subprocess.run(
            ["git", "-C", str(h.repo), "show", f"{sha}:sim-engine.json"],
            capture_output=True, check=True, text=True,
        )  # fmt: skip
        import_image(
            client, f"{repo_name}:{sha}", json.loads(shown.stdout),
            env={"PATH": "/engine/bin:/usr/local/bin:/usr/bin"}, programs=smi,
        )  # fmt: skip
    engine = "/engine/sim-engine.json"
    collect = [PYTHON, "-m", "llm_bisect.sim.collect_env", "--engine-file", engine]
    server = sim_server(repo_name + ":{commit}", pull="never")
    server["collect_env"] = [*collect, "--commit", "{commit}"]
    server["args"] += ["--model", "org/m"]
    server["env"]["HF_HUB_CACHE"] = "/hub"  # inside the container: not this host's
    config = docker_config(h, server, SIMPLE_CHECKS)
    out = h.root / "out"
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    result = json.loads((out / "result.json").read_text())
    new = result["fingerprints"]["new"]["collect_env"]
    assert new["torch"] == "2.14.0" and new["gpu_count"] == "2", new
    assert new["gpu_models"] == "2 x NVIDIA H100 80GB HBM3 (81559 MiB)"
    assert result["fingerprints"]["old"]["collect_env"]["torch"] == "2.13.0+cu130"
    assert "collect_env.torch" in result["fingerprints"]["differences"]
    old, new = (result["fingerprints"][side]["weights"] for side in ("old", "new"))
    assert new == {"model": "org/m", "revision": "2" * 40, "origin": "hub cache: refs/main"}
    assert old["revision"] == "1" * 40 and not (h.root / "hub").exists()
    report = (out / "report.md").read_text()
    assert "| **torch** | `2.13.0+cu130` | `2.14.0` |" in report, report


class EmptyEngine(BaseHTTPRequestHandler):
    """A Docker engine with no images, on loopback: the API calls a launcher makes before it
    starts anything (a second `docker_hosts` entry; a second dockerd would take the host's
    docker0 bridge with it)."""

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path.endswith("/_ping"):
            self._reply(200, b"OK", "text/plain")
        elif path.endswith("/version"):
            self._reply(200, json.dumps({"ApiVersion": "1.41", "Version": "empty"}).encode())
        else:  # /images/<ref>/json, and anything else: not here
            self._reply(404, json.dumps({"message": f"No such image: {path}"}).encode())

    def _reply(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def empty_engine() -> Iterator[docker.DockerClient]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), EmptyEngine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    engine = docker.DockerClient(base_url=f"tcp://127.0.0.1:{server.server_address[1]}")
    try:
        yield engine
    finally:
        engine.close()
        server.shutdown()
        server.server_close()


def test_each_docker_host_routes_by_its_own_engines_images(
    client: docker.DockerClient,
    empty_engine: docker.DockerClient,
    repo_name: str,
    tmp_path: Path,
) -> None:
    """Two `docker_hosts`, an image on the first engine only (`pull: never`): the first says
    the candidate is its image and the second that it has none, whichever was made last;
    a Spread over both asks the first."""
    commit = "ab" * 20
    import_image(client, f"{repo_name}:{commit}", {"fault": "none"})
    server = {**sim_server(repo_name + ":{commit}"), "pull": "never"}
    cfg = DockerServerConfig.model_validate(server)
    builder = Builder([ImageStrategy()], BuildCache(tmp_path / "cache", 10**9))
    engines = [
        DockerLauncher(cfg, LauncherContext(tmp_path, "hosts", builder=builder), client=engine)
        for engine in (client, empty_engine)
    ]
    try:
        first, second = (e.artifact(Candidate(commit)) for e in engines)
        assert (first.available, first.local) == (True, True), first
        assert first.route.startswith("image:"), first
        assert second.available is False and "no build" in second.reason, second
        assert Spread(engines).artifact(Candidate(commit)) == first
    finally:
        for engine in engines:
            engine.close()


def test_a_ledger_that_is_not_there_is_one_line_before_anything_starts(
    client: docker.DockerClient, repo_name: str, history: Any
) -> None:
    h: History = history({}, n=2)
    config = docker_config(h, sim_server(repo_name + ":{commit}", ledger="kept.json"))
    for verb in ("candidates", "run"):
        code, output = invoke(
            verb, str(config), *(["--out", str(h.root / "out")] if verb == "run" else [])
        )
        assert code == 2, output
        assert f"server.ledger: no such ledger '{h.root / 'kept.json'}'" in output
        assert "Traceback" not in output
    assert not (h.root / "out" / "probes").exists()


def test_a_private_mirror_in_the_ledger_is_opened_with_its_docker_login(
    client: docker.DockerClient, history: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    h: History = history({}, n=2)
    mirror = SimRegistry(token="t0k3n", login=("ci-bot", "mirror-pass-55"))
    entries = {
        f"nightly-{sha}": {
            "digest": mirror.add_image("kept/vllm", f"nightly-{sha}", {"fault": "none"}),
            "commit": sha,
            "mirror": f"{mirror.host}/kept/vllm",
        }
        for sha in h.shas
    }
    source = "registry-1.docker.io/vllm/vllm-openai"
    ledger = {"version": 1, "source": source, "entries": entries}
    (h.root / "ledger.json").write_text(json.dumps(ledger))
    folder = h.root / "docker-config"
    folder.mkdir()
    auth = base64.b64encode(b"ci-bot:mirror-pass-55").decode()
    (folder / "config.json").write_text(json.dumps({"auths": {mirror.host: {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(folder))
    server = sim_server("vllm/vllm-openai:nightly-{commit}", ledger="ledger.json")
    with mirror.running():
        code, output = invoke("candidates", str(docker_config(h, server)))
    assert code == 0, output
    assert "unknown" not in output and "MISSING" not in output, output  # the mirror said
    assert f"{len(h.shas)} candidates, {len(h.shas)} with an artifact" in output, output
    assert "mirror-pass-55" not in output


def test_configs_of_an_image_needs_no_candidates(
    client: docker.DockerClient, repo_name: str, tmp_path: Path
) -> None:
    """`configs CONFIG --build IMAGE` with a config that has no `candidates:`: the image names
    its commit by a label and runs as it is; an image that names its commit by a short id
    (a version's +g<sha>) says in one line that a clone is needed to expand it."""
    commit = "ab" * 20
    rules = [{"flags": {"--moe-backend": "cutlass"}, "fault": "garbled-math"}]
    import_image(client, f"{repo_name}:v0.30.0", {"fault_when": rules},
                 labels={"org.opencontainers.image.revision": commit})  # fmt: skip
    import_image(client, f"{repo_name}:short", {"fault_when": rules},
                 env={"VLLM_VERSION": f"0.30.0+g{commit[:9]}"})  # fmt: skip
    server = sim_server(repo_name + ":{commit}")
    server["args"] += ["--moe-backend", "marlin"]
    config = write_config(tmp_path / "bare.yaml", {
        "server": server, "checks": SIMPLE_CHECKS, "localize": {"enabled": False},
        "search": {"flake": 0}})  # fmt: skip
    out = tmp_path / "out"
    code, output = invoke("configs", str(config), "--build", f"{repo_name}:v0.30.0",
                          "--bad-arg", "--moe-backend cutlass", "--out", str(out))  # fmt: skip
    assert code == 0 and "found: turns GOOD bad: --moe-backend cutlass" in output, output
    result = json.loads((out / "result.json").read_text())
    assert result["build"] == {"commit": commit, "subject": "", "author": "", "date": "",
                               "artifact": f"{repo_name}:v0.30.0"}  # fmt: skip
    assert [p["fingerprint"]["image"]["ref"] for p in result["decisive"]] == [
        f"{repo_name}:v0.30.0"] * 2  # fmt: skip
    code, output = invoke("configs", str(config), "--build", f"{repo_name}:short", "--bad-arg",
                          "--moe-backend cutlass", "--out", str(tmp_path / "no"))  # fmt: skip
    assert code == 2 and len(output.strip().splitlines()) == 1, output
    assert f"image '{repo_name}:short' names commit {commit[:9]}" in output
    assert "the config has no candidates.repo" in output and not (tmp_path / "no").exists()
