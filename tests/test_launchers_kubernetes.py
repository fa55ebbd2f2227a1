"""The Kubernetes launcher: its Jobs against the API's OpenAPI schema, and probes through the
official client against a stand-in API server (tests/kubeapi.py) whose pods are real
Docker containers running the simulated server, with images pulled by digest from a
real registry on loopback (distribution 2.8, tests/localregistry.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import docker
import docker.errors
import httpx
import jsonschema
import kubernetes
import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from helpers import History, wait_until, write_config
from kubeapi import KUBERNETES_VERSION, Fault, StandIn, expand, lws_schema
from llm_bisect.cli import cli
from llm_bisect.config import load_config, verdict_settings
from llm_bisect.errors import ConfigError, LaunchError
from llm_bisect.kinds import LAUNCHERS, LauncherContext
from llm_bisect.launchers import INSTRUMENT_DIR, Instrument
from llm_bisect.launchers.kubernetes import (
    COMMIT_LABEL,
    MANAGED_BY,
    OWNER_ANNOTATION,
    RUN_LABEL,
    Api,
    KubernetesLauncher,
    KubernetesServerConfig,
    Workload,
    away_from,
    config_map_manifest,
    group_manifests,
    job_manifest,
    only_avoided,
    pod_trouble,
    shipped_files,
)
from llm_bisect.model import Candidate, ProbeOutcome, Verdict
from llm_bisect.report.markdown import render_markdown
from llm_bisect.report.result import Ran, build_result
from llm_bisect.search import Answer, Mode, Plan, plan_step
from llm_bisect.services.localization import localize_instrument
from llm_bisect.services.setup import run_context, setup
from llm_bisect.sim.docker import PYTHON, SRC
from localregistry import LocalRegistry, serving
from test_collectenv import SMI

SHA = "0123456789abcdef0123456789abcdef01234567"
PLANTED = "hf_PLANTEDsecretVALUE_0123456789"


def candidate(sha: str = SHA) -> Candidate:
    return Candidate(commit=sha, subject="s", author="a")


def k8s_config(**over: Any) -> KubernetesServerConfig:
    data: dict[str, Any] = {
        "launcher": "kubernetes",
        "image": "vllm/vllm-openai:nightly-{commit}",
        "args": ["--model", "RedHatAI/Kimi-K3-NVFP4", "--port", "{port}", "-tp", "8"],
        "gpus": 8,
        "node_selector": {"nvidia.com/gpu.product": "NVIDIA-B300"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
                            ]
                        }
                    ]
                }
            }
        },
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "image_pull_secrets": ["regcred"],
        "secret_env": {"HF_TOKEN": {"secret": "hf", "key": "token"}},
        "model_cache": {"pvc": "hf-cache"},
        "env": {"VLLM_USE_V2_MODEL_RUNNER": "1"},
        "memory": "512Gi",
    }
    data.update(over)
    return KubernetesServerConfig.model_validate(data)


def manifest(cfg: KubernetesServerConfig, **env: str) -> dict[str, Any]:
    digest = "sha256:" + "ab" * 32
    return job_manifest(
        cfg,
        Workload(
            name=f"llm-bisect-{SHA[:12]}-a1b2c3",
            image=f"vllm/vllm-openai@{digest}",
            ref=f"vllm/vllm-openai:nightly-{SHA}",
            candidate=candidate(),
            env=env,
            run_id="0f1e2d3c4b5a",
            owner="gpu-node-7:4242:987654",
        ),
    )


def test_the_job_validates_against_the_api_schema_and_holds_what_a_gpu_probe_needs() -> None:
    job = manifest(k8s_config(), VLLM_USE_V2_MODEL_RUNNER="1")
    kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
    spec = job["spec"]
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] > 0
    assert spec["ttlSecondsAfterFinished"] >= 0
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (server,) = pod["containers"]
    assert "@sha256:" in server["image"]
    assert server["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert server["args"][-3:] == ["8000", "-tp", "8"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-B300"}
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    assert volumes["model-cache"]["persistentVolumeClaim"]["claimName"] == "hf-cache"
    mounts = {m["mountPath"] for m in server["volumeMounts"]}
    assert {"/dev/shm", "/root/.cache/huggingface"} <= mounts
    token = next(e for e in server["env"] if e["name"] == "HF_TOKEN")
    assert token == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}},
    }
    labels = job["metadata"]["labels"]
    assert labels[MANAGED_BY] == "llm-bisect" and labels[COMMIT_LABEL] == SHA
    assert job["metadata"]["annotations"][OWNER_ANNOTATION] == "gpu-node-7:4242:987654"
    assert spec["template"]["metadata"]["labels"] == labels


def test_a_dollar_in_the_command_args_or_env_reaches_the_server_as_written() -> None:
    # the kubelet expands `$(VAR)` in a container's command, args and env values and reads
    # `$$` as `$`: a word the user wrote must reach vLLM unchanged (a JSON override holding
    # `$(HOME)`, a price in a name), whether the pod is one Job's or a group's
    written = ["--served-model-name", "kimi-$(HOME)-costs-$$5", "--port", "{port}"]
    env = {"HOME": "/root", "PATH": "/usr/bin"}
    cfg = k8s_config(args=written, entrypoint=["vllm", "serve", "$(PATH)"])
    job = manifest(cfg, PROMPT_NOTE="$(HOME)/$$")
    kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
    (server,) = job["spec"]["template"]["spec"]["containers"]
    assert [expand(a, env) for a in server["args"]] == [*written[:3], "8000"]
    assert [expand(a, env) for a in server["command"]] == ["vllm", "serve", "$(PATH)"]
    (note,) = [e for e in server["env"] if e["name"] == "PROMPT_NOTE"]
    assert expand(note["value"], env) == "$(HOME)/$$"
    # a group's pods: the same words, as the shell or LWS's pods get them
    two = glm_config(args=[*glm_config().args, *written[:2]])
    for kind in ("leaderworkerset", "indexed-job"):
        pods = [
            m["spec"]["template"]["spec"] if m["kind"] == "Job" else template["spec"]
            for m in group(two, kind)
            if m["kind"] != "Service"
            for template in (
                [m["spec"]["leaderWorkerTemplate"]["leaderTemplate"]]
                if m["kind"] == "LeaderWorkerSet"
                else [None]
            )
        ]
        assert pods, kind
        for pod in pods:
            server = pod["containers"][0]
            words = [expand(w, env) for w in [*server.get("command", []), *server.get("args", [])]]
            assert any(written[1] in w for w in words), (kind, words)


def test_a_host_path_cache_and_no_gpus_validate_too() -> None:
    cfg = k8s_config(
        model_cache={"host_path": "/mnt/hf", "mount": "/cache"},
        gpus=None,
        host_paths=["/usr:/usr:ro"],
        shm_size=None,
        affinity=None,
        entrypoint=["python3", "-m", "vllm.entrypoints.openai.api_server"],
    )
    job = manifest(cfg)
    kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
    pod = job["spec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in pod["containers"][0]["resources"]["limits"]
    assert pod["containers"][0]["command"][0] == "python3"
    assert {v["name"] for v in pod["volumes"]} == {"model-cache", "host-0"}


def test_a_manifest_with_a_wrong_field_is_refused_by_the_schema() -> None:
    """The check is real: a field the API does not know fails it."""
    job = manifest(k8s_config())
    job["spec"]["template"]["spec"]["containers"][0]["gpus"] = 8
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)


def test_a_planted_secret_never_reaches_the_manifest(tmp_path: Path) -> None:
    job = manifest(k8s_config(), VLLM_USE_V2_MODEL_RUNNER="1")
    assert PLANTED not in json.dumps(job)


def test_a_secret_in_server_env_is_refused_in_one_line_and_nothing_starts(
    tmp_path: Path, history: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    h: History = history({}, n=2)
    monkeypatch.setenv("HF_TOKEN", PLANTED)
    config = write_config(
        tmp_path / "k.yaml",
        {
            "candidates": {"repo": str(h.repo), "good": h.shas[0], "bad": h.shas[-1]},
            "server": {
                "launcher": "kubernetes",
                "image": "vllm/vllm-openai:nightly-{commit}",
                "kubeconfig": str(tmp_path / "absent-kubeconfig"),
                "env": {"HF_TOKEN": "${HF_TOKEN}"},
            },
        },
    )
    result = CliRunner().invoke(cli, ["check", str(config), "--candidate", h.shas[1]])
    assert result.exit_code not in (0, 1, 125), result.output
    assert "server.env.HF_TOKEN: a secret would be written into the Job" in result.output
    assert "server.secret_env" in result.output
    assert "Traceback" not in result.output and PLANTED not in result.output


SK = "sk-PLANTEDapiKEY0123456789"


@pytest.mark.parametrize(
    ("over", "said"),
    [
        ({"args": ["--model", "m", "--api-key", SK]}, "server.args: the value of '--api-key'"),
        ({"args": [f"--api-key={SK}"]}, "server.args: the value of '--api-key'"),
        (
            {"args": ["--otlp-traces-endpoint", f"https://bob:{SK}@otel:4318/v1/traces"]},
            "server.args: the value of '--otlp-traces-endpoint'",
        ),
        ({"entrypoint": ["vllm", "serve", f"--hf-token={SK}"]}, "server.entrypoint"),
        (
            {"env": {"HTTPS_PROXY": f"http://bob:{SK}@proxy:3128"}},
            "server.env.HTTPS_PROXY: a login in a URL would be written into the Job",
        ),
    ],
)
def test_a_secret_on_the_command_line_or_in_a_url_of_server_env_is_refused_in_one_line(
    tmp_path: Path, history: Any, over: dict[str, Any], said: str
) -> None:
    """As a variable named like a secret is: only secret_env's Secrets reach the pod, and
    job.json and the Job sent hold no secret."""
    h: History = history({}, n=2)
    server = {
        "launcher": "kubernetes",
        "image": "vllm/vllm-openai:nightly-{commit}",
        "kubeconfig": str(tmp_path / "absent-kubeconfig"),
        **over,
    }
    config = write_config(
        tmp_path / "k.yaml",
        {
            "candidates": {"repo": str(h.repo), "good": h.shas[0], "bad": h.shas[-1]},
            "server": server,
        },
    )
    result = CliRunner().invoke(cli, ["check", str(config), "--candidate", h.shas[1]])
    assert result.exit_code == 128, result.output
    (line,) = [x for x in result.output.splitlines() if x.strip()]
    assert said in line and "server.secret_env" in line, line
    assert SK not in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("over", "said"),
    [
        ({"namespace": "ML_Team"}, "server.namespace: 'ML_Team'"),
        ({"namespace": "a" * 64}, "server.namespace: 'aaaa"),
        ({"node_selector": {"gpu product": "B300"}}, "server.node_selector: 'gpu product'"),
        ({"node_selector": {"-x.io/gpu": "B300"}}, "server.node_selector: '-x.io/gpu'"),
        (
            {"node_selector": {"nvidia.com/gpu.product": "NVIDIA B300"}},
            "server.node_selector: nvidia.com/gpu.product: 'NVIDIA B300'",
        ),
        ({"env": {"MY VAR": "1"}}, "server.env: 'MY VAR'"),
        (
            {"secret_env": {"HF=TOKEN": {"secret": "hf", "key": "t"}}},
            "server.secret_env: 'HF=TOKEN'",
        ),
        ({"memory": "512GB"}, "server.memory: '512GB' is not a Kubernetes quantity"),
        ({"memory": "-1Gi"}, "server.memory: '-1Gi'"),
        ({"shm_size": "lots"}, "server.shm_size: 'lots'"),
        ({"extra_resources": {"rdma/ib": "one"}}, "server.extra_resources: rdma/ib: 'one'"),
    ],
)
def test_what_the_api_would_refuse_is_refused_when_the_config_is_read(
    tmp_path: Path, over: dict[str, Any], said: str
) -> None:
    """Not at the API, where every probe would be skip: one line naming the key and value."""
    server = {"launcher": "kubernetes", "image": "vllm/vllm-openai:nightly-{commit}", **over}
    ends = {"repo": ".", "good": "a", "bad": "b"}
    config = write_config(tmp_path / "k.yaml", {"candidates": ends, "server": server})
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert str(caught.value).startswith(said) and "\n" not in str(caught.value), caught.value


def test_names_and_quantities_the_api_takes_are_taken() -> None:
    cfg = k8s_config(
        namespace="ml-team-7",
        node_selector={"nvidia.com/gpu.product": "NVIDIA-B300", "node.kubernetes.io/pool": ""},
        env={"VLLM_USE_V2_MODEL_RUNNER": "1", "my.var-2": "x", "_X": "y"},
        memory="1.5Ti",
        shm_size="100M",
        extra_resources={"rdma/ib": "1", "example.com/foo": "500m", "hugepages-2Mi": "1e3"},
    )
    kubernetes_validate.validate(manifest(cfg, **cfg.env), KUBERNETES_VERSION, strict=True)


def test_the_report_says_once_that_echoes_of_secret_env_values_are_not_masked(
    tmp_path: Path, history: Any
) -> None:
    """llm-bisect never learns a secret_env value unless told to read it
    (secret_env_read): report.md's caveats say so, once, naming the variables."""
    h: History = history({}, n=2)
    server = {
        "launcher": "kubernetes",
        "image": "vllm/vllm-openai:nightly-{commit}",
        "kubeconfig": str(tmp_path / "absent-kubeconfig"),
        "secret_env": {"HF_TOKEN": {"secret": "hf", "key": "token"}},
    }
    ends = {"repo": str(h.repo), "good": h.shas[0], "bad": h.shas[-1]}
    config = write_config(tmp_path / "k.yaml", {"candidates": ends, "server": server})
    s = setup(config, {})
    ctx = run_context(s, s.config)
    assert len(ctx.caveats) == 1 and "server.secret_env (HF_TOKEN)" in ctx.caveats[0]
    assert "secret_env_read" in ctx.caveats[0]
    seq = [Candidate(sha, subject="s", author="a") for sha in (h.shas[0], h.shas[-1])]
    plan = Plan(Mode.REGRESSION, tuple(seq))
    probes = [
        ProbeOutcome(seq[0].commit, Verdict.GOOD, "fine"),
        ProbeOutcome(seq[-1].commit, Verdict.BAD, "bad"),
    ]
    seen = {p.commit: [p.verdict] for p in probes}
    answer = plan_step(plan, seen)
    assert isinstance(answer, Answer)
    md = render_markdown(build_result(plan, answer, probes, Ran(context=ctx)))
    caveats = md.split("## Caveats", 1)[1]
    assert caveats.count("cannot be masked") == 1 and md.count("cannot be masked") == 1
    read = KubernetesServerConfig.model_validate({**server, "secret_env_read": True})
    assert LAUNCHERS["kubernetes"].caveats(read) == []
    # what is masked, never what the server answers: a run resumes with it turned on
    with_read = s.config.model_copy(update={"server": read})
    assert verdict_settings(with_read) == verdict_settings(s.config)


def test_pod_trouble_tells_the_cluster_from_the_server() -> None:
    def pod(**status: Any) -> dict[str, Any]:
        return {"status": status}

    def waiting(reason: str, message: str = "") -> dict[str, Any]:
        return pod(
            phase="Pending",
            containerStatuses=[{"state": {"waiting": {"reason": reason, "message": message}}}],
        )

    assert pod_trouble(pod(phase="Pending")) is None
    assert pod_trouble(waiting("ContainerCreating")) is None
    missing = waiting("CreateContainerConfigError", 'secret "hf-token" not found')
    assert pod_trouble(missing) == (
        "unplaced",
        'CreateContainerConfigError: secret "hf-token" not found',
    )
    assert pod_trouble(waiting("ErrImagePull", "manifest unknown"))[0] == "no-image"  # type: ignore[index]
    assert pod_trouble(waiting("ErrImagePull", "429 Too Many Requests"))[0] == "pulling"  # type: ignore[index]
    unsched = pod(
        phase="Pending",
        conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    )
    assert pod_trouble(unsched)[0] == "pending"  # type: ignore[index]
    oom = pod(
        phase="Failed",
        containerStatuses=[{"state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}],
    )
    assert pod_trouble(oom) == ("exited", "container OOMKilled, exit code 137")
    assert pod_trouble(pod(phase="Failed", reason="Evicted"))[0] == "unplaced"  # type: ignore[index]


# ---- probes through the official client, against the stand-in API server --------------------


def test_a_probe_kept_off_nodes_carries_a_node_anti_affinity_in_each_term() -> None:
    """A re-probe, a confirmation trial or the Evidence stage's probe runs off the nodes of
    the verdict it checks: a required node affinity on the node's name (what a pod's
    spec.nodeName holds), in every term of the config's own (terms are ORed)."""
    cfg = k8s_config()
    arch = cfg.affinity
    off = {"key": "metadata.name", "operator": "NotIn", "values": ["gpu-17", "gpu-3", "gpu-4"]}
    kept = cfg.model_copy(update={"affinity": away_from(arch, ["gpu-17", "gpu-3,gpu-4"])})
    job = manifest(kept)
    kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
    pod = job["spec"]["template"]["spec"]
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchFields"] == [off]
    assert term["matchExpressions"] == [
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
    ]
    assert cfg.affinity == arch and "matchFields" not in json.dumps(cfg.affinity)  # untouched
    alone = away_from(None, ["gpu-17"])["nodeAffinity"]
    assert alone["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchFields": [{**off, "values": ["gpu-17"]}]}
    ]
    # where no node fits the affinity (a one-node cluster), it runs on the same node again
    every = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    assert only_avoided(f"Unschedulable: {every} preemption: 0/3 nodes are available")
    busy = "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 "
    assert not only_avoided(f"Unschedulable: {busy}Insufficient nvidia.com/gpu.")


@pytest.fixture
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegistry]:
    """A real registry (distribution 2.8) on loopback: the kubelet pulls from it by digest."""
    with serving(tmp_path_factory.mktemp("registry") / "r") as found:
        yield found


@pytest.fixture
def standin(client: docker.DockerClient, registry: LocalRegistry) -> Iterator[StandIn]:
    api = StandIn(client)
    api.secrets[("default", "hf")] = {"token": PLANTED}
    with api.running():
        yield api
    for image in client.images.list():
        for name in [*image.tags, *(image.attrs.get("RepoDigests") or [])]:
            if name.startswith(registry.host + "/"):
                with suppress(docker.errors.DockerException):
                    client.images.remove(name, force=True)


def publish(
    registry: LocalRegistry,
    h: History,
    repo: str,
    missing: frozenset[int] = frozenset(),
    env: Mapping[str, str] | None = None,
    tag: str = "{sha}",
) -> None:
    """One image per commit in the registry, its sim-engine.json from the commit (and `env`
    in its config), tagged `tag` (`nightly-{sha}`)."""
    nonce = uuid.uuid4().hex
    for i, sha in enumerate(h.shas):
        if i in missing:
            continue
        shown = subprocess.run(
            ["git", "-C", str(h.repo), "show", f"{sha}:sim-engine.json"],
            capture_output=True,
            check=True,
            text=True,
        )
        labels = {"ai.vllm.build.commit": sha, "test-nonce": nonce}  # an image of its own:
        settings = json.loads(shown.stdout)
        tagged = tag.format(sha=sha)
        registry.image(repo, settings, labels=labels, tag=tagged, env=env)  # pulled anew


def sim_k8s_server(image: str, kubeconfig: Path, **over: Any) -> dict[str, Any]:
    """A kubernetes `server:` section whose pods run the simulated server with this
    machine's Python (hostPath volumes: no base image is pulled)."""
    base = Path(sys.base_prefix)
    server: dict[str, Any] = {
        "launcher": "kubernetes",
        "image": image,
        "kubeconfig": str(kubeconfig),
        "entrypoint": [PYTHON, "-m", "llm_bisect.sim"],
        "args": [
            "--engine-file",
            "/engine/sim-engine.json",
            "--commit",
            "{commit}",
            "--port",
            "{port}",
            "--host",
            "0.0.0.0",
        ],
        "env": {"PYTHONPATH": "/src", "PYTHONDONTWRITEBYTECODE": "1"},
        "secret_env": {"HF_TOKEN": {"secret": "hf", "key": "token"}},
        "host_paths": [
            "/usr:/usr:ro",
            "/lib:/lib:ro",
            "/lib64:/lib64:ro",
            f"{base}:{base}:ro",
            f"{SRC}:/src:ro",
        ],
        "shm_size": "64Mi",
        "ready_timeout": 60,
        "pending_timeout": 60,
        "stop_timeout": 2,
    }
    server.update(over)
    return server


def k8s_yaml(
    h: History, server: dict[str, Any], checks: list[Any] | None = None, **ends: str
) -> Path:
    h.configs += 1
    data: dict[str, Any] = {
        "candidates": {"repo": str(h.repo), "good": h.shas[0], "bad": h.shas[-1], **ends},
        "server": server,
    }
    if checks is not None:
        data["checks"] = checks
    return write_config(h.root / f"k8s-{h.configs}.yaml", data)


SIMPLE_CHECKS = [{"type": "canary"}, {"type": "expect"}]


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def nothing_left(standin: StandIn) -> bool:
    return (
        not standin.jobs
        and not standin.pods
        and not standin.services
        and not standin.leaderworkersets
        and not standin.config_maps
        and not standin.running_containers()
    )


@pytest.mark.docker
@pytest.mark.parametrize("reach", ["port-forward", "pod-ip"])
def test_one_probe_runs_as_a_job_streams_its_log_and_leaves_nothing(
    standin: StandIn, registry: LocalRegistry, history: Any, tmp_path: Path, reach: str
) -> None:
    """Reached through the API's port-forward (the default: from a laptop too), or at the
    pod's IP (from inside the cluster)."""
    h: History = history({}, n=1)
    repo = f"sim/k8s-{uuid.uuid4().hex[:6]}"
    publish(registry, h, repo)
    kubeconfig = standin.kubeconfig(tmp_path / "kubeconfig")
    server = sim_k8s_server(f"{registry.host}/{repo}:{{commit}}", kubeconfig, reach=reach)
    config = k8s_yaml(h, server, SIMPLE_CHECKS)
    out = tmp_path / "c"
    code, output = invoke("check", str(config), "--candidate", h.shas[1], "--out", str(out))
    assert code == 0, output
    probe = out / "probes" / h.shas[1][:12]
    log = (probe / "server.log").read_text()
    assert "Uvicorn" in log or "sim" in log.lower(), log
    job = json.loads((probe / "job.json").read_text())
    kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
    assert "@sha256:" in job["spec"]["template"]["spec"]["containers"][0]["image"]
    # the Secret reached the pod, and its value no request, file or output
    assert standin.started_env[0]["HF_TOKEN"] == PLANTED
    assert PLANTED not in json.dumps(standin.requests, default=str)
    for path in out.rglob("*"):
        if path.is_file():
            assert PLANTED.encode() not in path.read_bytes(), path
    assert (standin.forwards > 0) == (reach == "port-forward")
    deletes = [r for r in standin.requests if r[0] == "DELETE" and "/jobs/" in r[1]]
    assert deletes and all("propagationPolicy=Foreground" in r[1] for r in deletes)
    assert nothing_left(standin)


@pytest.mark.docker
def test_the_standin_keeps_the_apis_defaults_and_refuses_what_the_api_refuses(
    standin: StandIn, registry: LocalRegistry, history: Any, tmp_path: Path
) -> None:
    """What the launcher relies on is what a real API server does: without a
    propagationPolicy, deleting a Job orphans its pods, which keep running."""
    from kubernetes import client, config

    h: History = history({}, n=1)
    repo = f"sim/k8s-{uuid.uuid4().hex[:6]}"
    publish(registry, h, repo)
    api = config.new_client_from_config(config_file=str(standin.kubeconfig(tmp_path / "kc")))
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    server = sim_k8s_server(f"{registry.host}/{repo}:{h.shas[0]}", tmp_path / "kc")
    cfg = KubernetesServerConfig.model_validate(server)
    job = job_manifest(
        cfg,
        Workload(
            name="llm-bisect-orphan-test",
            image=f"{registry.host}/{repo}:{h.shas[0]}",
            ref="",
            candidate=candidate(h.shas[0]),
            env=dict(cfg.env),
            run_id="r",
            owner="o",
        ),
    )
    wrong = json.loads(json.dumps(job))
    wrong["spec"]["template"]["spec"]["containers"][0]["gpus"] = 1
    # the client refuses it itself; the API server, asked straight, too
    refused = httpx.post(f"{standin.url}/apis/batch/v1/namespaces/default/jobs", json=wrong)
    assert refused.status_code == 422 and "gpus" in refused.json()["message"]
    made = batch.create_namespaced_job("default", client.V1Job.from_dict(job))
    assert made.metadata.resource_version and made.spec.completions == 1
    assert wait_until(lambda: len(standin.running_containers()) == 1, timeout=60)
    (pod,) = core.list_namespaced_pod(
        "default", label_selector="job-name=llm-bisect-orphan-test"
    ).items
    assert pod.metadata.labels["llm-bisect/commit"] == h.shas[0]
    batch.delete_namespaced_job("llm-bisect-orphan-test", "default")  # no propagationPolicy
    assert not standin.jobs
    assert core.read_namespaced_pod(pod.metadata.name, "default").status.phase == "Running"
    assert len(standin.running_containers()) == 1, "an orphaned pod keeps running"
    core.delete_namespaced_pod(pod.metadata.name, "default")
    assert standin.running_containers() == []


@pytest.mark.docker
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_delete_the_job_and_its_pod(
    standin: StandIn, registry: LocalRegistry, history: Any, tmp_path: Path, sig: signal.Signals
) -> None:
    hold = tmp_path / "hold"
    hold.touch()
    h: History = history({}, n=1, changes={1: {"hold_file": str(hold)}})
    repo = f"sim/k8s-{uuid.uuid4().hex[:6]}"
    publish(registry, h, repo)
    server = sim_k8s_server(
        f"{registry.host}/{repo}:{{commit}}", standin.kubeconfig(tmp_path / "kc")
    )
    server["host_paths"].append(f"{tmp_path}:{tmp_path}:ro")
    config = k8s_yaml(h, server, SIMPLE_CHECKS)
    proc = subprocess.Popen(
        [sys.executable, "-m", "llm_bisect.cli", "check", str(config), "--candidate", h.shas[1]],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    try:
        assert wait_until(lambda: bool(standin.running_containers()), timeout=120)
        proc.send_signal(sig)
        output = proc.communicate(timeout=120)[0].decode()
    finally:
        proc.kill()
    assert proc.returncode == 130, output
    assert "Traceback" not in output
    assert nothing_left(standin), (standin.jobs, standin.pods)


@pytest.mark.docker
def test_a_bisection_of_images_on_kubernetes_finds_the_culprit_and_skips_a_missing_image(
    standin: StandIn, registry: LocalRegistry, history: Any, tmp_path: Path
) -> None:
    h: History = history({5: "garbled-math"}, n=7, changes={5: {"moe_backend": "CUTLASS"}})
    repo = f"sim/k8s-{uuid.uuid4().hex[:6]}"
    # the images say where their Python is (the config does not): kept under localisation
    publish(registry, h, repo, missing=frozenset({3}), env={"PYTHONPATH": "/src"})
    good, bad = f"{registry.host}/{repo}:{h.shas[0]}", f"{registry.host}/{repo}:{h.shas[-1]}"
    template = f"{registry.host}/{repo}:{{commit}}"
    server = sim_k8s_server(template, standin.kubeconfig(tmp_path / "kc"))
    server["env"] = {k: v for k, v in server["env"].items() if k != "PYTHONPATH"}
    config = k8s_yaml(h, server, good=good, bad=bad)
    code, output = invoke("candidates", str(config))
    assert code == 0, output
    assert output.count("MISSING") == 1, output
    out = tmp_path / "out"
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == h.shas[5]
    probes = {p["commit"]: p for p in result["probes"]}
    if h.shas[3] in probes:
        assert probes[h.shas[3]]["verdict"] == "skip"
        assert probes[h.shas[3]]["reason"].startswith("no artifact")
    for p in result["probes"]:
        if p["verdict"] in ("good", "bad"):
            image = p["fingerprint"]["image"]
            assert "@sha256:" in image["digest"] and image["id"].endswith(
                image["digest"].split("@")[1]
            ), image
            assert p["fingerprint"]["node"] == standin.node
    assert "kernels.moe_backend" in result["fingerprints"]["differences"]
    for job in (out / "probes").rglob("job.json"):
        kubernetes_validate.validate(json.loads(job.read_text()), KUBERNETES_VERSION, strict=True)
    # localised in pods: the worker extension's files in a ConfigMap of the probe's name,
    # mounted and first on PYTHONPATH, before the image's own (the server imports it, as
    # vLLM's workers do, and would not start without either); deleted with its Job
    assert result["localization"] is not None and result["localization"]["module"], result
    captured = out / "localize" / h.shas[5][:12]
    assert "worker_extension_cls" in (captured / "server.log").read_text()
    made = json.loads((captured / "configmap.json").read_text())
    kubernetes_validate.validate(made, KUBERNETES_VERSION, strict=True)
    assert any(k.endswith("llm_bisect_worker.py") for k in made["data"]), made["data"].keys()
    job = json.loads((captured / "job.json").read_text())
    pod = job["spec"]["template"]["spec"]
    assert {"name": "instrument-0", "configMap": {"name": made["metadata"]["name"],
            "items": [{"key": k, "path": "llm_bisect_worker.py"} for k in made["data"]]}} in (
        pod["volumes"]
    )  # fmt: skip
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["PYTHONPATH"] == f"{INSTRUMENT_DIR}/0:/src", env
    # owned by its Job: the cluster deletes it with the Job (a SIGKILLed run's too)
    (owned,) = made["metadata"]["ownerReferences"]
    assert owned["kind"] == "Job" and owned["name"] == job["metadata"]["name"], owned
    assert owned["apiVersion"] == "batch/v1" and owned["uid"], owned
    posts = [r[1] for r in standin.requests if r[0] == "POST" and "/configmaps" in r[1]]
    assert len(posts) == 2, posts  # the good side's and the bad side's
    assert nothing_left(standin)


def one_probe(
    standin: StandIn,
    registry: LocalRegistry,
    h: History,
    tmp_path: Path,
    **over: Any,
) -> tuple[Path, dict[str, Any]]:
    """A config of one published commit's images on the stand-in."""
    repo = f"sim/k8s-{uuid.uuid4().hex[:6]}"
    publish(registry, h, repo)
    server = sim_k8s_server(
        f"{registry.host}/{repo}:{{commit}}", standin.kubeconfig(tmp_path / "kc"), **over
    )
    return k8s_yaml(h, server, SIMPLE_CHECKS), {"repo": repo}


def check(config: Path, sha: str, out: Path) -> tuple[int, str]:
    return invoke("check", str(config), "--candidate", sha, "--out", str(out))


def check_while(
    config: Path, sha: str, out: Path, when: Callable[[], bool], then: Callable[[], Any]
) -> tuple[int, str]:
    """`check`, with `then` done (the cluster's doing, from another thread) once `when`
    holds."""
    ended = threading.Thread(target=lambda: wait_until(when, timeout=120) and then())
    ended.start()
    try:
        return check(config, sha, out)
    finally:
        ended.join()


@pytest.mark.docker
@pytest.mark.parametrize(
    ("over", "said"),
    [
        (
            {"node_selector": {"nvidia.com/gpu.product": "NVIDIA-B300"}},
            "didn't match Pod's node affinity/selector",
        ),
        ({"gpus": 16}, "Insufficient nvidia.com/gpu"),
    ],
)
def test_a_pod_the_scheduler_never_places_is_skip_after_pending_timeout(
    standin: StandIn,
    registry: LocalRegistry,
    history: Any,
    tmp_path: Path,
    over: dict[str, Any],
    said: str,
) -> None:
    h: History = history({}, n=1)
    config, _ = one_probe(standin, registry, h, tmp_path, pending_timeout=2, **over)
    code, output = check(config, h.shas[1], tmp_path / "c")
    assert code == 125, output
    assert "pod pending for 2s (Unschedulable" in output and said in output
    assert wait_until(lambda: nothing_left(standin))


@pytest.mark.docker
def test_a_pod_kept_off_the_only_node_runs_there_again_and_says_so(
    standin: StandIn, registry: LocalRegistry, history: Any, tmp_path: Path
) -> None:
    """A probe that must run elsewhere than the verdict it checks keeps off that verdict's
    node (its pod's node anti-affinity); on a one-node cluster no node fits, so it runs on
    the same node again, a later start: no hang (`pending_timeout` is an hour), no error,
    said."""
    h: History = history({}, n=1)
    repo = f"sim/k8s-{uuid.uuid4().hex[:6]}"
    publish(registry, h, repo)
    kubeconfig = standin.kubeconfig(tmp_path / "kubeconfig")
    server = sim_k8s_server(f"{registry.host}/{repo}:{{commit}}", kubeconfig,
                            pending_timeout=3600)  # fmt: skip
    cfg = KubernetesServerConfig.model_validate(server)
    notes: list[str] = []
    launcher = KubernetesLauncher(cfg, LauncherContext(tmp_path, uuid.uuid4().hex[:12], cfg.env,
                                                       report=notes.append))  # fmt: skip
    one = candidate(h.shas[1])
    launcher.avoid(one, [standin.node])
    with launcher.launch(one, tmp_path / "probe") as running:
        running.wait_ready()
        facts = running.fingerprint()
    with standin.lock:
        made = [pod for _, event, pod in standin.pod_events if event == "ADDED"]
    required = made[0]["spec"]["affinity"]["nodeAffinity"]
    assert required["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": [standin.node]}]}
    ]
    assert "affinity" not in made[-1]["spec"] and len(made) == 2  # then made again, as it was
    assert facts["node"] == standin.node
    assert facts["kubernetes"]["avoid"] == [standin.node] and not facts["kubernetes"]["avoided"]
    [said] = [n for n in notes if "no node but" in n]
    assert said == (
        f"{one.short}: no node but {standin.node} takes its pod (Unschedulable: 0/1 nodes are "
        "available: 1 node(s) didn't match Pod's node affinity/selector.): on the same node "
        "again, a later start, not elsewhere"
    )
    assert wait_until(lambda: nothing_left(standin))


@pytest.mark.docker
def test_a_pod_deleted_while_it_waits_to_be_placed_is_skip_at_once(
    standin: StandIn, registry: LocalRegistry, history: Any, tmp_path: Path
) -> None:
    """Deleted while Pending (someone's `kubectl delete pod`): the probe is skip as soon as
    the watch says so, not after `pending_timeout` (an hour here) waiting for a pod."""
    h: History = history({}, n=1)
    config, _ = one_probe(standin, registry, h, tmp_path, gpus=16, pending_timeout=3600)

    def pending() -> bool:  # Unschedulable, and the launcher has listed it (it watches)
        with standin.lock:
            seen = bool(standin.watches)
            return seen and any(p["status"].get("conditions") for p in standin.pods.values())

    code, output = check_while(config, h.shas[1], tmp_path / "c", pending, standin.delete_pods)
    assert code == 125, output
    assert "the pod is gone (deleted)" in output, output
    assert wait_until(lambda: nothing_left(standin))


@pytest.mark.docker
def test_an_image_the_kubelet_cannot_pull_is_skip_no_artifact(
    standin: StandIn, registry: LocalRegistry, history: Any, tmp_path: Path
) -> None:
    h: History = history({}, n=1)
    config, made = one_probe(standin, registry, h, tmp_path)
    registry.drop_blobs(made["repo"], h.shas[1])  # the manifest is there, its blobs are not
    code, output = check(config, h.shas[1], tmp_path / "c")
    assert code == 125, output
    assert re.search(r"SKIP .* no artifact: (ErrImagePull|ImagePullBackOff)", output), output
    assert wait_until(lambda: nothing_left(standin))


@pytest.mark.docker
def test_an_oom_kill_before_ready_is_skip_with_its_reason(
    standin: StandIn, registry: LocalRegistry, history: Any, tmp_path: Path
) -> None:
    h: History = history({}, n=1)
    config, _ = one_probe(standin, registry, h, tmp_path, memory="8Mi")
    code, output = check(config, h.shas[1], tmp_path / "c")
    assert code == 125, output
    assert "container OOMKilled, exit code 137 before ready" in output
    assert wait_until(lambda: nothing_left(standin))


@pytest.mark.docker
@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("lose_node", "pod NodeLost"),
        ("evict", "pod Evicted"),
        ("delete_pods", "the pod is gone (deleted)"),
    ],
)
def test_a_pod_the_cluster_ends_is_skip_with_its_reason(
    standin: StandIn,
    registry: LocalRegistry,
    history: Any,
    tmp_path: Path,
    fault: str,
    said: str,
) -> None:
    hold = tmp_path / "hold"
    hold.touch()  # the server never listens: the cluster ends it while it starts
    h: History = history({}, n=1, changes={1: {"hold_file": str(hold)}})
    config, _ = one_probe(
        standin,
        registry,
        h,
        tmp_path,
        host_paths=[*sim_k8s_server("", Path())["host_paths"], f"{tmp_path}:{tmp_path}:ro"],
    )
    code, output = check_while(  # once it runs, and the launcher watches it
        config,
        h.shas[1],
        tmp_path / "c",
        lambda: bool(standin.running_containers() and standin.watches),
        getattr(standin, fault),
    )
    assert code == 125, output
    assert said in output
    assert wait_until(lambda: nothing_left(standin))


def test_ctrl_c_while_an_exec_waits_for_its_websocket_is_an_interrupt(tmp_path: Path) -> None:
    """The client turns a KeyboardInterrupt while it opens the websocket into
    ApiException(status=0): raised again as the interrupt it is, never a failed exec (the
    fingerprint would go on without it, and the probe to a verdict)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def answer_never() -> None:
        conn, _ = listener.accept()
        held.append(conn)
        request = b""
        while b"\r\n\r\n" not in request:
            request += conn.recv(4096)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, the upgrade still unanswered

    threading.Thread(target=answer_never, daemon=True).start()
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": _url(listener)}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    api = Api("default", str(kubeconfig), None)
    try:
        with pytest.raises(KeyboardInterrupt):
            api.exec("llm-bisect-pod", ["python3", "-c", "pass"], 30)
    finally:
        api.close()
        listener.close()
        for conn in held:
            conn.close()


def _url(listener: socket.socket) -> str:
    return f"http://127.0.0.1:{listener.getsockname()[1]}"


@pytest.mark.docker
def test_ctrl_c_during_the_fingerprints_exec_exits_130_with_no_verdict(
    standin: StandIn, registry: LocalRegistry, history: Any, tmp_path: Path
) -> None:
    """Ctrl-C while the exec that reads the pod's packages waits for its websocket: exit
    130, no probe.json, no verdict said, and the Job deleted."""
    h: History = history({}, n=1)
    config, _ = one_probe(standin, registry, h, tmp_path)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "llm_bisect.cli", "check", str(config), "--candidate", h.shas[1],
         "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )  # fmt: skip

    def ctrl_c() -> bool:
        proc.send_signal(signal.SIGINT)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=120)
        return False  # never answered: the client is gone

    standin.on_exec = ctrl_c
    try:
        output = proc.communicate(timeout=300)[0].decode()
    finally:
        proc.kill()
    assert proc.returncode == 130, output
    assert "llm-bisect: interrupted" in output and standin.execs == [], output
    assert "GOOD" not in output and not (out / "probe.json").exists(), output
    assert "Traceback" not in output
    assert wait_until(lambda: nothing_left(standin))


@pytest.mark.docker
@pytest.mark.parametrize(
    ("fault", "said"),
    [
        (
            Fault("GET", "/secrets/hf", 403),
            "server.secret_env.HF_TOKEN: kubernetes: read secret hf: HTTP 403 Forbidden "
            "(server.secret_env_read: the Role needs `get` on Secret 'hf')",
        ),
        (
            Fault("GET", "/secrets/hf", 404),
            "server.secret_env.HF_TOKEN: no Secret 'hf' with a key 'token' in namespace 'default'",
        ),
    ],
)
def test_a_secret_env_that_cannot_be_read_is_one_line_and_nothing_starts(
    standin: StandIn, history: Any, tmp_path: Path, fault: Fault, said: str
) -> None:
    h: History = history({}, n=1)
    server = sim_k8s_server("127.0.0.1:5000/absent:{commit}", standin.kubeconfig(tmp_path / "kc"))
    config = k8s_yaml(h, {**server, "secret_env_read": True})
    standin.faults.append(fault)
    code, output = check(config, h.shas[1], tmp_path / "out")
    assert code == 128, output
    assert said in output and len(output.strip().splitlines()) == 1, output
    assert not standin.jobs and not [r for r in standin.requests if r[0] == "POST"]


@pytest.mark.docker
def test_a_secret_env_value_the_server_echoes_is_masked_where_it_is_read(
    standin: StandIn, registry: LocalRegistry, history: Any, tmp_path: Path
) -> None:
    """`secret_env_read: true`: the launcher reads the Secret's value (`get` on it, and
    nothing else) and every output masks it: the reply that echoes it (probe.json, the
    terminal), the server's log that prints it."""
    names = ["HF_TOKEN"]
    h: History = history(
        {}, n=1, settings={"print_env": names}, changes={1: {"hostile": {"echo_env": names}}}
    )
    config, _ = one_probe(standin, registry, h, tmp_path, secret_env_read=True)
    out = tmp_path / "out"
    code, output = check(config, h.shas[1], out)
    assert code in (0, 1), output
    assert standin.started_env[0]["HF_TOKEN"] == PLANTED
    probe = (out / "probe.json").read_text()
    assert "HF_TOKEN=***" in probe, probe  # the echo happened, and was masked
    assert PLANTED not in output
    for path in out.rglob("*"):
        if path.is_file():
            assert PLANTED.encode() not in path.read_bytes(), path
    reads = [r[1] for r in standin.requests if "/secrets/" in r[1]]
    assert reads and all(r == "/api/v1/namespaces/default/secrets/hf" for r in reads), reads
    assert wait_until(lambda: nothing_left(standin))


@pytest.mark.docker
def test_api_errors_are_retried_and_the_probe_goes_on(
    standin: StandIn, registry: LocalRegistry, history: Any, tmp_path: Path
) -> None:
    h: History = history({}, n=1)
    config, _ = one_probe(standin, registry, h, tmp_path)
    standin.faults += [
        Fault("POST", "/jobs", 503, times=2),
        Fault("GET", "/pods", 429, times=2),
        Fault("DELETE", "/jobs/", 500, times=1),
    ]
    code, output = check(config, h.shas[1], tmp_path / "c")
    assert code == 0, output
    assert all(f.times == 0 for f in standin.faults), "every fault was met"
    posts = [r for r in standin.requests if r[0] == "POST"]
    assert len(posts) == 3
    assert wait_until(lambda: nothing_left(standin))


def pod_lists(standin: StandIn) -> int:
    """How many times the pods were listed (a watch is not a list)."""
    return sum(
        1
        for method, path, _ in standin.requests
        if method == "GET" and urlsplit(path).path.endswith("/pods") and "watch=" not in path
    )


@pytest.mark.docker
def test_the_pods_are_watched_and_a_watch_the_api_expired_lists_again(
    standin: StandIn, registry: LocalRegistry, history: Any, tmp_path: Path
) -> None:
    """A probe's pods are followed by one list and a watch from its resourceVersion, not a
    list every half second; when the API ends the watch and its resourceVersion is gone (an
    etcd compaction as the pod turns Running: 410 Expired), the launcher lists again and
    watches from there, and the probe goes on."""
    h: History = history({}, n=1)
    config, _ = one_probe(standin, registry, h, tmp_path)
    standin.expire_once_running = True
    code, output = check(config, h.shas[1], tmp_path / "c")
    assert code == 0, output
    assert standin.expired >= 1, standin.watches
    listed = [int(w) for w in standin.watches if w]
    assert listed and max(listed) >= standin.oldest, (standin.watches, standin.oldest)
    assert pod_lists(standin) == 1 + standin.expired, standin.requests
    assert wait_until(lambda: nothing_left(standin))


@pytest.mark.docker
@pytest.mark.parametrize(("status", "times"), [(403, 1000), (500, 2)])
def test_a_watch_the_api_refuses_or_fails_still_follows_the_pods(
    standin: StandIn, registry: LocalRegistry, history: Any, tmp_path: Path, status: int, times: int
) -> None:
    """A Role without `watch` on pods (403 on every watch): the pods are listed every half
    second instead, and the probe goes on; a watch that fails (500) is listed again and
    watched from there."""
    h: History = history({}, n=1)
    config, _ = one_probe(standin, registry, h, tmp_path)
    (fault,) = standin.faults = [Fault("GET", "/pods", status, times=times, query="watch=")]
    code, output = check(config, h.shas[1], tmp_path / "c")
    assert code == 0, output
    assert fault.times < times, "the watch was asked for"
    if status == 403:
        assert fault.times == times - 1, "refused once, then listed instead"
        assert pod_lists(standin) >= 2, "listed again: the pod it found Pending ran"
    else:
        assert fault.times == 0 and pod_lists(standin) == 1 + times, standin.requests
    assert wait_until(lambda: nothing_left(standin))


@pytest.mark.docker
def test_reap_deletes_the_job_a_sigkilled_run_left(
    standin: StandIn, registry: LocalRegistry, history: Any, tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    hold.touch()
    h: History = history({}, n=1, changes={1: {"hold_file": str(hold)}})
    config, _ = one_probe(
        standin,
        registry,
        h,
        tmp_path,
        host_paths=[*sim_k8s_server("", Path())["host_paths"], f"{tmp_path}:{tmp_path}:ro"],
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "llm_bisect.cli", "check", str(config), "--candidate", h.shas[1]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    try:
        assert wait_until(lambda: bool(standin.running_containers()), timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert len(standin.jobs) == 1, "SIGKILL leaves the Job"
    # and, had it been localising, the ConfigMap of the worker extension, owned by the Job
    (job,) = standin.jobs.values()
    meta = {k: job["metadata"][k] for k in ("name", "labels", "annotations")}
    meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job",
                                "name": meta["name"], "uid": job["metadata"]["uid"]}]  # fmt: skip
    kube = kubernetes.config.new_client_from_config(str(tmp_path / "kc"))
    kubernetes.client.CoreV1Api(kube).create_namespaced_config_map(
        "default", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"a": "b"}}
    )
    code, output = invoke("reap", str(config))
    assert code == 0, output
    (name,) = [n for _, n in standin.jobs] or ["gone"]
    assert "kubernetes: deleted job llm-bisect-" in output  # its ConfigMap with it, or by reap
    assert f"its llm-bisect process {proc.pid} is gone" in output
    assert wait_until(lambda: nothing_left(standin)), name


def test_the_kimi_kubernetes_config_is_the_cases_setup_and_its_job_validates() -> None:
    path = SRC.parent / "configs" / "kimi-k3-nvfp4-tp8-b300-kubernetes.yaml"
    config = load_config(path)
    server = config.server
    assert isinstance(server, KubernetesServerConfig)
    assert server.args[server.args.index("--model") + 1] == "RedHatAI/Kimi-K3-NVFP4"
    assert server.args[server.args.index("--reasoning-parser") + 1] == "kimi_k3"
    assert server.env == {} and set(server.secret_env) == {"HF_TOKEN"}
    assert config.candidates.bad.endswith("v0.27.0") and server.gpus == 8
    job = manifest(server)
    kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
    assert "${HF_TOKEN}" not in path.read_text()


@pytest.mark.docker
def test_two_slots_run_two_jobs_at_once(
    standin: StandIn, registry: LocalRegistry, history: Any, tmp_path: Path
) -> None:
    """parallel: 2 is two Jobs at once, each its own pod (the scheduler places them): the
    held bad end's and another's run together."""
    hold = tmp_path / "hold"
    hold.touch()
    h: History = history({5: "degenerate-reasoning"}, n=8, changes={8: {"hold_file": str(hold)}})
    repo = f"sim/k8s-{uuid.uuid4().hex[:6]}"
    publish(registry, h, repo)
    server = sim_k8s_server(
        f"{registry.host}/{repo}:{{commit}}", standin.kubeconfig(tmp_path / "kc"), gpus=4
    )
    server["host_paths"].append(f"{tmp_path}:{tmp_path}:ro")
    config = k8s_yaml(h, server)
    data = yaml.safe_load(config.read_text())
    data.update(parallel=2, localize=False, search={"flake": 0})
    config.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "llm_bisect.cli", "run", str(config), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    try:
        assert wait_until(lambda: len(standin.running_containers()) == 2, timeout=180)

        def ips() -> set[str]:  # a started container's pod reports its IP just after
            return {p["status"].get("podIP") for p in list(standin.pods.values())} - {None}

        assert wait_until(lambda: len(ips()) == 2), "two pods, each its own IP"
        hold.unlink()
        output = proc.communicate(timeout=300)[0].decode()
    finally:
        proc.kill()
    assert proc.returncode == 0, output
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == h.shas[5]
    assert {p["slot"] for p in result["probes"]} == {0, 1} and result["parallel"] == 2
    assert wait_until(lambda: nothing_left(standin))


@pytest.mark.docker
def test_collect_env_nvidia_smi_and_packages_come_from_inside_the_pod(
    standin: StandIn, registry: LocalRegistry, history: Any, tmp_path: Path
) -> None:
    """Through the API's exec (a websocket): collect_env and nvidia-smi run in each
    candidate's pod, and the report shows the torch bump between the two; the weights'
    revision each server loaded is resolved in its pod, in the pod's hub cache."""
    bump = {2: {"packages": {"torch": "2.14.0"}, "snapshot": "2" * 40}}
    snapshot = {"snapshot": "1" * 40}
    h: History = history({2: "degenerate-content"}, n=2, changes=bump, settings=snapshot)
    smi = tmp_path / "smi"
    smi.mkdir()
    (smi / "nvidia-smi").write_text(SMI.replace("#!/bin/sh", "#!/usr/bin/sh"))
    (smi / "nvidia-smi").chmod(0o755)
    repo = f"sim/k8s-{uuid.uuid4().hex[:6]}"
    publish(registry, h, repo)
    server = sim_k8s_server(
        f"{registry.host}/{repo}:{{commit}}", standin.kubeconfig(tmp_path / "kc")
    )
    server["host_paths"].append(f"{smi}:/smi:ro")
    server["env"]["PATH"] = "/smi:/usr/local/bin:/usr/bin:/bin"
    engine = "/engine/sim-engine.json"
    server["collect_env"] = [
        PYTHON,
        "-m",
        "llm_bisect.sim.collect_env",
        "--engine-file",
        engine,
        "--commit",
        "{commit}",
    ]
    server["args"] += ["--model", "org/m"]
    server["env"]["HF_HUB_CACHE"] = "/hub"
    config = k8s_yaml(h, server, SIMPLE_CHECKS)
    out = tmp_path / "out"
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    result = json.loads((out / "result.json").read_text())
    old, new = (result["fingerprints"][side]["weights"] for side in ("old", "new"))
    assert (old["revision"], new["revision"]) == ("1" * 40, "2" * 40), (old, new)
    assert new["model"] == "org/m" and "weights.revision" in result["fingerprints"]["differences"]
    new = result["fingerprints"]["new"]["collect_env"]
    assert new["torch"] == "2.14.0" and new["gpu_count"] == "2", new
    assert result["fingerprints"]["old"]["collect_env"]["torch"] == "2.13.0+cu130"
    assert "| **torch** | `2.13.0+cu130` | `2.14.0` |" in (out / "report.md").read_text()
    assert any(c[:1] == ["nvidia-smi"] or "nvidia-smi" in c[0] for c in standin.execs)
    assert wait_until(lambda: nothing_left(standin))


@pytest.mark.docker
@pytest.mark.parametrize("fault", ["lose_node", "evict", "delete_pods"])
def test_a_node_lost_during_the_checks_is_skip_even_under_regress_crash(
    standin: StandIn, registry: LocalRegistry, history: Any, tmp_path: Path, fault: str
) -> None:
    """The cluster ending a pod mid-check (or someone deleting it: the watch's DELETED
    event) is no crash of the build (regress: crash)."""
    h: History = history({}, n=1, changes={1: {"hostile": {"hang": True}}})
    config, _ = one_probe(standin, registry, h, tmp_path, request_timeout=60)
    data = yaml.safe_load(config.read_text())
    data["regress"] = "crash"
    config.write_text(yaml.safe_dump(data))
    out = tmp_path / "c"
    log = out / "probes" / h.shas[1][:12] / "server.log"

    def holding() -> bool:
        return log.exists() and "holding request (hang)" in log.read_text(errors="replace")

    code, output = check_while(config, h.shas[1], out, holding, getattr(standin, fault))
    assert code == 125, output
    said = {"lose_node": "NodeLost", "evict": "Evicted", "delete_pods": "the pod is gone (deleted)"}
    assert "checks could not run" in output and said[fault] in output, output
    assert wait_until(lambda: nothing_left(standin))


# ---- two-node probes (the GLM case: DP8 over two 4-GPU GB200 nodes) -------------------------

TESTS = Path(__file__).resolve().parent


def glm_config(**over: Any) -> KubernetesServerConfig:
    """Two GB200 nodes a probe: DP8 as two pods of 4 GPUs, the head's address to the worker,
    the IMEX channel of a ComputeDomain and an RDMA device in each pod."""
    data: dict[str, Any] = {
        "launcher": "kubernetes",
        "image": "vllm/vllm-openai:nightly-{commit}",
        "nodes": 2,
        "entrypoint": ["vllm", "serve"],
        "args": [
            "RedHatAI/GLM-5.3-MXFP4",
            "--data-parallel-size",
            "8",
            "--data-parallel-size-local",
            "4",
            "--data-parallel-address",
            "{head}",
            "--data-parallel-rpc-port",
            "13345",
            "--enable-expert-parallel",
            "--port",
            "{port}",
        ],
        "worker_args": [
            "RedHatAI/GLM-5.3-MXFP4",
            "--headless",
            "--data-parallel-size",
            "8",
            "--data-parallel-size-local",
            "4",
            "--data-parallel-start-rank",
            "4",
            "--data-parallel-address",
            "{head}",
            "--data-parallel-rpc-port",
            "13345",
            "--enable-expert-parallel",
        ],
        "gpus": 4,
        "node_selector": {"nvidia.com/gpu.product": "NVIDIA-GB200"},
        "resource_claims": [{"name": "imex-channel", "template": "glm-domain-channel"}],
        "extra_resources": {"rdma/ib": "1"},
        "secret_env": {"HF_TOKEN": {"secret": "hf", "key": "token"}},
        "model_cache": {"pvc": "hf-cache"},
    }
    data.update(over)
    return KubernetesServerConfig.model_validate(data)


def group(cfg: KubernetesServerConfig, kind: Any) -> list[dict[str, Any]]:
    digest = "sha256:" + "ab" * 32
    return group_manifests(
        cfg,
        kind,
        Workload(
            name=f"llm-bisect-{SHA[:12]}-a1b2c3",
            image=f"vllm/vllm-openai@{digest}",
            ref=f"vllm/vllm-openai:nightly-{SHA}",
            candidate=candidate(),
            env={"NCCL_MNNVL_ENABLE": "1"},
            run_id="0f1e2d3c4b5a",
            owner="gpu-node-7:4242:987654",
        ),
    )


def test_a_localising_probe_on_two_nodes_mounts_the_extension_in_every_pod() -> None:
    """Both ways a two-node probe is made, with localisation's instrument: each pod mounts
    the worker extension from the ConfigMap of the probe's name and puts it first on
    PYTHONPATH (vLLM imports it in every worker, the head's and the others'); the
    ConfigMap, the Job and the LeaderWorkerSet validate."""
    instrument = localize_instrument()
    shipped = shipped_files(instrument)
    assert [f.path for f in shipped] == ["llm_bisect_worker.py"]
    made = config_map_manifest(
        glm_config(), name="llm-bisect-x", candidate=candidate(), run_id="r", owner="o",
        shipped=shipped,
    )  # fmt: skip
    kubernetes_validate.validate(made, KUBERNETES_VERSION, strict=True)
    assert made["immutable"] and list(made["data"]) == [shipped[0].key]
    for kind in ("indexed-job", "leaderworkerset"):
        objects = group_manifests(glm_config(), kind, Workload(
            name="llm-bisect-x", image="vllm/vllm-openai@sha256:" + "ab" * 32,
            ref="vllm/vllm-openai:nightly", candidate=candidate(), env={"PYTHONPATH": "/extra"},
            run_id="r", owner="o", instrument=instrument, shipped=shipped,
        ))  # fmt: skip
        if kind == "leaderworkerset":
            jsonschema.validate(objects[0], lws_schema())
            templates = objects[0]["spec"]["leaderWorkerTemplate"]
            pods = [templates["leaderTemplate"]["spec"], templates["workerTemplate"]["spec"]]
        else:
            for obj in objects:
                kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
            pods = [objects[1]["spec"]["template"]["spec"]]
        for pod in pods:
            volume = next(v for v in pod["volumes"] if v["name"] == "instrument-0")
            assert volume["configMap"] == {
                "name": "llm-bisect-x",
                "items": [{"key": shipped[0].key, "path": "llm_bisect_worker.py"}],
            }
            (server,) = pod["containers"]
            mount = {"name": "instrument-0", "mountPath": f"{INSTRUMENT_DIR}/0", "readOnly": True}
            assert mount in server["volumeMounts"]
            env = {e["name"]: e.get("value") for e in server["env"]}
            assert env["PYTHONPATH"] == f"{INSTRUMENT_DIR}/0:/extra"
            assert env["VLLM_SERVER_DEV_MODE"] == "1"
            words = server["args"] or server["command"]
            assert "--worker-extension-cls" in " ".join(words), words


def test_an_instruments_files_become_configmap_keys_the_api_takes(tmp_path: Path) -> None:
    """Any file name (spaces, non-ASCII, nested folders) becomes a valid key mounted at its
    own path; bytes that are not UTF-8 go as binaryData; a folder over a ConfigMap's size is
    one clear error, before anything is created; __pycache__ stays home."""
    folder = tmp_path / "ext"
    (folder / "pkg" / "__pycache__").mkdir(parents=True)
    (folder / "pkg" / "__init__.py").write_text("")
    (folder / "pkg" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    (folder / "a file é.py").write_text("x = 1\n")
    (folder / "table.bin").write_bytes(bytes(range(256)))
    shipped = shipped_files(Instrument(paths=(folder,)))
    assert [f.path for f in shipped] == ["a file é.py", "pkg/__init__.py", "table.bin"]
    assert all(re.fullmatch(r"[-._a-zA-Z0-9]{1,253}", f.key) for f in shipped), shipped
    made = config_map_manifest(
        glm_config(), name="llm-bisect-x", candidate=candidate(), run_id="r", owner="o",
        shipped=shipped,
    )  # fmt: skip
    kubernetes_validate.validate(made, KUBERNETES_VERSION, strict=True)
    assert len(made["data"]) == 2 and len(made["binaryData"]) == 1
    (folder / "weights.bin").write_bytes(b"\1" * 1_000_001)
    with pytest.raises(LaunchError, match="over one ConfigMap"):
        shipped_files(Instrument(paths=(folder,)))


def gb200_pod(pod: dict[str, Any]) -> None:
    """What a GB200 pod over NVLink needs is in it: its IMEX channel (a ComputeDomain's
    claim template), an RDMA device, 4 GPUs, the token by secretKeyRef only."""
    assert pod["resourceClaims"] == [
        {"name": "imex-channel", "resourceClaimTemplateName": "glm-domain-channel"}
    ]
    (server,) = pod["containers"]
    assert server["resources"]["claims"] == [{"name": "imex-channel"}]
    assert server["resources"]["limits"] == {"nvidia.com/gpu": "4", "rdma/ib": "1"}
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}} in (
        server["env"]
    )


def test_a_two_node_probe_without_lws_is_an_indexed_job_and_a_headless_service_that_validate() -> (
    None
):
    service, job = group(glm_config(), "indexed-job")
    for made in (service, job):
        kubernetes_validate.validate(made, KUBERNETES_VERSION, strict=True)
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] > 0
    pod = spec["template"]["spec"]
    name = job["metadata"]["name"]
    assert pod["subdomain"] == service["metadata"]["name"] == name
    assert service["spec"]["clusterIP"] == "None"
    # the Service selects the Job's pods: the template's labels and the controller's job-name
    labels = {**spec["template"]["metadata"]["labels"], "batch.kubernetes.io/job-name": name}
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["selector"][RUN_LABEL] == "0f1e2d3c4b5a"
    (server,) = pod["containers"]
    head = next(e for e in server["env"] if e["name"] == "LLM_BISECT_HEAD")
    assert head["value"] == f"{name}-0.{name}.default"
    shell, flag, script = server["command"]
    assert (shell, flag) == ("/bin/sh", "-c") and not server["args"]
    assert script.startswith('if [ "$JOB_COMPLETION_INDEX" = 0 ]; then exec vllm serve ')
    head_words, worker_words = script.split("; else exec ")
    assert "--data-parallel-address '$(LLM_BISECT_HEAD)'" in head_words
    assert "--headless" in worker_words and "--headless" not in head_words
    gb200_pod(pod)
    assert service["metadata"]["labels"][MANAGED_BY] == "llm-bisect"
    assert service["metadata"]["annotations"][OWNER_ANNOTATION] == "gpu-node-7:4242:987654"
    assert PLANTED not in json.dumps([service, job])


def test_a_two_node_probe_with_lws_is_a_leaderworkerset_valid_under_lws_own_crd() -> None:
    """Against the openAPIV3Schema of LWS's CRD (a copy from kubernetes-sigs/lws, strict
    as the API server's field validation), its pod templates against Kubernetes' own."""
    (lws,) = group(glm_config(), "leaderworkerset")
    jsonschema.validate(lws, lws_schema())
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2 and lws["spec"]["replicas"] == 1
    for key in ("leaderTemplate", "workerTemplate"):
        kubernetes_validate.validate(
            {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": "t"},
                "template": template[key],
            },
            KUBERNETES_VERSION,
            strict=True,
        )
        pod = template[key]["spec"]
        assert "restartPolicy" not in pod  # a StatefulSet's pods: Always, the only one allowed
        gb200_pod(pod)
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    worker = template["workerTemplate"]["spec"]["containers"][0]
    assert leader["command"] == worker["command"] == ["vllm", "serve"]
    assert "$(LWS_LEADER_ADDRESS)" in leader["args"] and "$(LWS_LEADER_ADDRESS)" in worker["args"]
    assert "--headless" in worker["args"] and "--headless" not in leader["args"]
    wrong = json.loads(json.dumps(lws))
    wrong["spec"]["leaderWorkerTemplate"]["nodes"] = 2  # the check is real
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong, lws_schema())


@pytest.mark.parametrize(
    ("over", "said"),
    [
        ({"entrypoint": None}, "entrypoint: a multi-node probe's pods run a shell"),
        ({"nodes": 1, "worker_args": None}, "{head}, {node_rank} and {nnodes} need nodes above 1"),
        ({"nodes": 1, "args": ["x"]}, "worker_args: only with nodes above 1"),
        ({"resource_claims": [{"name": "imex"}]}, "give one of template or claim"),
    ],
)
def test_a_multi_node_config_that_cannot_work_is_refused(over: dict[str, Any], said: str) -> None:
    with pytest.raises(ValueError, match=re.escape(said)):
        glm_config(**over)


def two_node_server(image: str, kubeconfig: Path, **over: Any) -> dict[str, Any]:
    """On the head, the simulated server once a worker joined; on the worker, a process
    that joins the head by the address the launcher gave it and stays (tests/nodeworker.py:
    vLLM's head serves only once its ranks joined)."""
    server = sim_k8s_server(image, kubeconfig, nodes=2, gpus=4, entrypoint=[PYTHON])
    sim = [PYTHON, "-m", "llm_bisect.sim", *server["args"]]
    server["args"] = ["/tests/nodeworker.py", "head", "{port}", "--", *sim]
    server["worker_args"] = ["/tests/nodeworker.py", "worker", "{head}", "{port}"]
    server["host_paths"] += ["/usr/bin:/bin:ro", f"{TESTS}:/tests:ro"]  # /bin/sh for the pods
    server.update(over)
    return server


@pytest.fixture(params=["indexed-job", "leaderworkerset"])
def two_nodes(request: pytest.FixtureRequest, standin: StandIn) -> str:
    """Both ways a two-node probe is made: LWS's CRD installed, or not."""
    standin.lws_installed = request.param == "leaderworkerset"
    return str(request.param)


@pytest.mark.docker
def test_a_two_node_probe_starts_head_and_worker_answers_and_leaves_nothing(
    standin: StandIn, registry: LocalRegistry, history: Any, tmp_path: Path, two_nodes: str
) -> None:
    h: History = history({}, n=1)
    repo = f"sim/k8s-{uuid.uuid4().hex[:6]}"
    publish(registry, h, repo)
    kubeconfig = standin.kubeconfig(tmp_path / "kubeconfig")
    config = k8s_yaml(
        h, two_node_server(f"{registry.host}/{repo}:{{commit}}", kubeconfig), SIMPLE_CHECKS
    )
    seen: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.1):  # how many pods' containers run, as the probe goes
            seen.append(len(standin.running_containers()))

    watcher = threading.Thread(target=watch)
    watcher.start()
    out = tmp_path / "c"
    try:
        code, output = invoke("check", str(config), "--candidate", h.shas[1], "--out", str(out))
    finally:
        done.set()
        watcher.join()
    assert code == 0, output
    assert max(seen) == 2, "head and worker ran together"
    probe = out / "probes" / h.shas[1][:12]
    made = {
        f.name: json.loads(f.read_text()) for f in probe.glob("*.json") if f.name != "probe.json"
    }
    if two_nodes == "leaderworkerset":
        assert set(made) >= {"lws.json"} and "job.json" not in made
        jsonschema.validate(made["lws.json"], lws_schema())
        name = made["lws.json"]["metadata"]["name"]
        head = f"{name}-0.{name}.default"
    else:
        assert set(made) >= {"service.json", "job.json"}
        for kind in ("service.json", "job.json"):
            kubernetes_validate.validate(made[kind], KUBERNETES_VERSION, strict=True)
        name = made["job.json"]["metadata"]["name"]
        head = f"{name}-0.{name}.default"
    # the worker reached the head's server by the address it was given, its log followed
    assert f"worker: connected to {head}:8000" in (probe / "server-1.log").read_text()
    assert "sim" in (probe / "server.log").read_text().lower()
    assert standin.forwards > 0
    deletes = [r for r in standin.requests if r[0] == "DELETE"]
    owners = [r for r in deletes if "/jobs/" in r[1] or "/leaderworkersets/" in r[1]]
    assert owners and all("propagationPolicy=Foreground" in r[1] for r in owners)
    for path in out.rglob("*"):
        if path.is_file():
            assert PLANTED.encode() not in path.read_bytes(), path
    assert nothing_left(standin), (standin.jobs, standin.services, standin.pods)


@pytest.mark.docker
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_ctrl_c_or_sigkill_then_reap_leaves_nothing_of_a_two_node_probe(
    standin: StandIn,
    registry: LocalRegistry,
    history: Any,
    tmp_path: Path,
    two_nodes: str,
    sig: signal.Signals,
) -> None:
    """Ctrl-C tears head, worker and Service (or LWS) down at once; after a SIGKILL,
    `reap` finds them by label."""
    hold = tmp_path / "hold"
    hold.touch()  # the head never listens: both pods run until the signal
    h: History = history({}, n=1, changes={1: {"hold_file": str(hold)}})
    repo = f"sim/k8s-{uuid.uuid4().hex[:6]}"
    publish(registry, h, repo)
    server = two_node_server(
        f"{registry.host}/{repo}:{{commit}}", standin.kubeconfig(tmp_path / "kc")
    )
    server["host_paths"].append(f"{tmp_path}:{tmp_path}:ro")
    config = k8s_yaml(h, server, SIMPLE_CHECKS)
    proc = subprocess.Popen(
        [sys.executable, "-m", "llm_bisect.cli", "check", str(config), "--candidate", h.shas[1]],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    try:
        assert wait_until(lambda: len(standin.running_containers()) == 2, timeout=120)
        proc.send_signal(sig)
        output = proc.communicate(timeout=120)[0].decode()
    finally:
        proc.kill()
    assert "Traceback" not in output
    if sig == signal.SIGINT:
        assert proc.returncode == 130, output
        assert nothing_left(standin), (standin.jobs, standin.services, standin.pods)
        return
    assert len(standin.running_containers()) == 2, "SIGKILL leaves both pods"
    assert standin.services if two_nodes == "indexed-job" else standin.leaderworkersets
    code, output = invoke("reap", str(config))
    assert code == 0, output
    kinds = ["service", "job"] if two_nodes == "indexed-job" else ["leaderworkerset"]
    for kind in kinds:
        assert f"kubernetes: deleted {kind} llm-bisect-" in output, output
    assert f"its llm-bisect process {proc.pid} is gone" in output
    assert wait_until(lambda: nothing_left(standin)), (standin.jobs, standin.services)


def test_the_glm_kubernetes_config_is_the_cases_setup_and_its_manifests_validate() -> None:
    path = SRC.parent / "configs" / "glm-5.3-mxfp4-dp8-ep8-gb200-kubernetes.yaml"
    config = load_config(path)
    server = config.server
    assert isinstance(server, KubernetesServerConfig) and server.worker_args
    assert server.nodes == 2 and server.gpus == 4 and config.candidates.bad.endswith("v0.30.0")
    assert server.args[0] == server.worker_args[0] == "RedHatAI/GLM-5.3-MXFP4"
    assert "--headless" in server.worker_args and "{head}" in server.args
    assert server.env["NCCL_MNNVL_ENABLE"] == "1" and set(server.secret_env) == {"HF_TOKEN"}
    assert [c.name for c in server.resource_claims] == ["imex-channel"]
    for made in group(server, "indexed-job"):
        kubernetes_validate.validate(made, KUBERNETES_VERSION, strict=True)
    (lws,) = group(server, "leaderworkerset")
    jsonschema.validate(lws, lws_schema())


@pytest.mark.docker
def test_a_worker_that_ends_before_ready_is_skip_naming_the_worker(
    standin: StandIn, registry: LocalRegistry, history: Any, tmp_path: Path, two_nodes: str
) -> None:
    """A worker is the probe's as much as the head: its container ending (an LWS pod
    restarting: CrashLoopBackOff) makes the probe skip before ready, its log kept."""
    hold = tmp_path / "hold"
    hold.touch()  # the head never gets ready: only the worker's end can end the probe
    h: History = history({}, n=1, changes={1: {"hold_file": str(hold)}})
    repo = f"sim/k8s-{uuid.uuid4().hex[:6]}"
    publish(registry, h, repo)
    server = two_node_server(
        f"{registry.host}/{repo}:{{commit}}",
        standin.kubeconfig(tmp_path / "kc"),
        worker_args=["-c", "print('worker: no such rank'); raise SystemExit(3)"],
    )
    server["host_paths"].append(f"{tmp_path}:{tmp_path}:ro")
    out = tmp_path / "c"
    code, output = check(k8s_yaml(h, server, SIMPLE_CHECKS), h.shas[1], out)
    assert code == 125, output
    assert re.search(
        r"worker pod llm-bisect-\S+: container Error, exit code 3 before ready", output
    )
    assert "worker: no such rank" in (out / "probes" / h.shas[1][:12] / "server-1.log").read_text()
    assert wait_until(lambda: nothing_left(standin))


@pytest.mark.docker
def test_the_standin_finds_an_indexed_jobs_head_by_name_and_orphans_its_pods_as_the_api_does(
    standin: StandIn, registry: LocalRegistry, history: Any, tmp_path: Path
) -> None:
    """What the launcher relies on, through the client alone: the head is found by the DNS
    name the headless Service publishes, and a Job deleted without a propagationPolicy
    leaves both pods running."""
    from kubernetes import client, config

    h: History = history({}, n=1)
    repo = f"sim/k8s-{uuid.uuid4().hex[:6]}"
    publish(registry, h, repo)
    api = config.new_client_from_config(config_file=str(standin.kubeconfig(tmp_path / "kc")))
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    cfg = KubernetesServerConfig.model_validate(
        two_node_server(f"{registry.host}/{repo}:{h.shas[0]}", tmp_path / "kc")
    )
    service, job = group_manifests(
        cfg,
        "indexed-job",
        Workload(
            name="llm-bisect-two-node-test",
            image=f"{registry.host}/{repo}:{h.shas[0]}",
            ref="",
            candidate=candidate(h.shas[0]),
            env=dict(cfg.env),
            run_id="r",
            owner="o",
        ),
    )
    core.create_namespaced_service("default", client.V1Service.from_dict(service))
    batch.create_namespaced_job("default", client.V1Job.from_dict(job))
    assert wait_until(lambda: len(standin.running_containers()) == 2, timeout=60)
    pods = core.list_namespaced_pod("default", label_selector="job-name=llm-bisect-two-node-test")
    ranks = sorted(
        p.metadata.labels["batch.kubernetes.io/job-completion-index"] for p in pods.items
    )
    assert ranks == ["0", "1"]
    worker = next(c for c in standin.running_containers() if "-1-" in c.labels["pod"])
    head = "llm-bisect-two-node-test-0.llm-bisect-two-node-test.default:8000"
    assert wait_until(lambda: f"worker: connected to {head}" in worker.logs().decode(), timeout=60)
    batch.delete_namespaced_job("llm-bisect-two-node-test", "default")  # no propagationPolicy
    assert not standin.jobs and len(standin.running_containers()) == 2, "orphaned, running"
    for pod in pods.items:
        core.delete_namespaced_pod(pod.metadata.name, "default")
    core.delete_namespaced_service("llm-bisect-two-node-test", "default")
    assert nothing_left(standin)


@pytest.mark.docker
def test_init_for_kubernetes_writes_a_config_whose_printed_commands_find_the_culprit(
    standin: StandIn,
    registry: LocalRegistry,
    history: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`init --launcher kubernetes` from two nightly images, as a user runs it: its namespace,
    pull Secret and HF_TOKEN's Secret (never in the file) reach the pods; the lines it
    prints bisect on the stand-in. The test adds only what points at the stand-in (its
    kubeconfig) and gives the pods this machine's Python (host paths); issue 49 item 6."""
    h: History = history({2: "garbled-math"}, n=3)
    repo = f"sim/k8s-{uuid.uuid4().hex[:6]}"
    publish(registry, h, repo, tag="nightly-{sha}")
    standin.secrets[("llm-bisect", "hf-token")] = {"value": PLANTED}
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    image = f"{registry.host}/{repo}"
    sim = [PYTHON, "-m", "llm_bisect.sim", "--engine-file", "/engine/sim-engine.json",
           "--commit", "{commit}", "--port", "{port}", "--host", "0.0.0.0"]  # fmt: skip
    code, output = invoke(
        "init", "--launcher", "kubernetes", "--namespace", "llm-bisect",
        "--image-pull-secret", "regcred", "--good", f"{image}:nightly-{h.shas[0]}",
        "--bad", f"{image}:nightly-{h.shas[-1]}", "--repo", str(h.repo), "--",
        f"HF_TOKEN={PLANTED}", "PYTHONPATH=/src", *sim,
    )  # fmt: skip
    assert code == 0, output
    written = work / "llm-bisect.yaml"
    assert PLANTED not in written.read_text() + output
    data = yaml.safe_load(written.read_text())
    stand_in = sim_k8s_server("", standin.kubeconfig(tmp_path / "kc"))
    for key in ("kubeconfig", "host_paths", "shm_size", "ready_timeout", "stop_timeout"):
        data["server"][key] = stand_in[key]
    write_config(written, {**data, "localize": False})
    printed = [line.strip() for line in output.splitlines() if line.startswith("  llm-bisect ")]
    assert printed == ["llm-bisect candidates llm-bisect.yaml",
                       "llm-bisect run llm-bisect.yaml --out bisect-run"]  # fmt: skip
    for line in printed:
        code, output = invoke(*line.split()[1:])
        assert code == 0, output
    result = json.loads((work / "bisect-run" / "result.json").read_text())
    assert result["culprit"]["commit"] == h.shas[2], result["status"]
    job = json.loads(next((work / "bisect-run" / "probes").rglob("job.json")).read_text())
    kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
    assert job["metadata"]["namespace"] == "llm-bisect"
    assert job["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert standin.started_env[0]["HF_TOKEN"] == PLANTED
    for path in (work / "bisect-run").rglob("*"):
        if path.is_file():
            assert PLANTED.encode() not in path.read_bytes(), path
    assert nothing_left(standin)
