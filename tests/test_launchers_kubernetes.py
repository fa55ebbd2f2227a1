"""The Kubernetes launcher: its Jobs against the API's OpenAPI schema, and probes through the
official client against a stand-in API server (tests/kubeapi.py) whose pods are real
Docker containers running the simulated server, with images pulled by digest from a
registry on loopback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from typer.testing import CliRunner

from helpers import History, write_config
from kubeapi import KUBERNETES_VERSION
from llm_bisect.cli import cli
from llm_bisect.launchers.kubernetes import (
    COMMIT_LABEL,
    MANAGED_BY,
    OWNER_ANNOTATION,
    KubernetesServerConfig,
    job_manifest,
    pod_trouble,
)
from llm_bisect.model import Candidate

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
        name=f"llm-bisect-{SHA[:12]}-a1b2c3",
        image=f"vllm/vllm-openai@{digest}",
        ref=f"vllm/vllm-openai:nightly-{SHA}",
        candidate=candidate(),
        env=env,
        run_id="0f1e2d3c4b5a",
        owner="gpu-node-7:4242:987654",
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
