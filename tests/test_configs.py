"""Every shipped config validates, and names what its case needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_bisect.config import Config, DockerServerConfig, SlurmServerConfig, load_config

ROOT = Path(__file__).parent.parent
CONFIGS = sorted((Path(__file__).parent.parent / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_shipped_configs_validate(path: Path) -> None:
    config = load_config(path)
    # an image per commit (Docker, or pyxis under Slurm), else a build per commit
    images = isinstance(config.server, DockerServerConfig) or (
        isinstance(config.server, SlurmServerConfig) and config.server.container_image
    )
    assert images or config.build is not None


GLM_ENV = {
    "VLLM_USE_V2_MODEL_RUNNER": "1",
    "VLLM_USE_RUST_FRONTEND": "1",
    "VLLM_USE_DEEP_GEMM": "1",
    "VLLM_USE_NCCL_SYMM_MEM": "1",
    "NCCL_MNNVL_ENABLE": "1",
    "NCCL_NVLS_ENABLE": "1",
    "NCCL_CUMEM_ENABLE": "1",
    "TORCH_SYMMMEM": "NVSHMEM",
}
"""The environment the GLM case's thread lists (docs/architecture.md, the cases)."""


def served_model(config: Config) -> str:
    """The checkpoint a config serves: `--model X` (Docker) or `vllm serve X` (Slurm)."""
    server = config.server
    if isinstance(server, DockerServerConfig):
        return server.args[server.args.index("--model") + 1]
    assert isinstance(server, SlurmServerConfig) and server.command[:2] == ["vllm", "serve"]
    return server.command[2]


def test_each_gpu_config_is_its_cases_own_setup() -> None:
    """The checkpoint the reporter served, the environment they set and nothing they did not;
    GLM's DP8 over two 4-GPU GB200 nodes only where a probe can span two nodes (Slurm)."""
    for name in ("kimi-k3-nvfp4-tp8-b300", "kimi-k3-nvfp4-tp8-b300-slurm"):
        kimi = load_config(ROOT / "configs" / f"{name}.yaml")
        assert served_model(kimi) == "RedHatAI/Kimi-K3-NVFP4", name
        assert set(kimi.server.env) == {"HF_TOKEN"}, (name, kimi.server.env)
    glm = load_config(ROOT / "configs" / "glm-5.3-mxfp4-dp8-ep8-gb200-slurm.yaml")
    assert isinstance(glm.server, SlurmServerConfig) and glm.server.worker_command
    assert served_model(glm) == "RedHatAI/GLM-5.3-MXFP4"
    assert glm.server.worker_command[2] == "RedHatAI/GLM-5.3-MXFP4"
    assert {k: v for k, v in glm.server.env.items() if k != "HF_TOKEN"} == GLM_ENV
    # one Docker engine is one node: a GB200 node has 4 GPUs, the case needs 8
    docker_glm = [
        p.name
        for p in CONFIGS
        if "glm" in p.name and isinstance(load_config(p).server, DockerServerConfig)
    ]
    assert docker_glm == []
    assert "no Docker config for GLM" in (ROOT / "configs" / "README.md").read_text()


def test_the_gpu_cases_carry_their_deployment_flags() -> None:
    kimi = load_config(Path(__file__).parent.parent / "configs/kimi-k3-nvfp4-tp8-b300.yaml")
    glm = load_config(ROOT / "configs" / "glm-5.3-mxfp4-dp8-ep8-gb200-slurm.yaml")
    assert isinstance(kimi.server, DockerServerConfig)
    assert isinstance(glm.server, SlurmServerConfig)
    assert kimi.candidates.bad.endswith("v0.27.0") and "8" in kimi.server.args
    assert kimi.server.gpus == "all" and kimi.server.ipc == "host"
    assert glm.candidates.bad == "v0.30.0"
    assert glm.server.nodes == 2 and glm.server.gpus_per_node == 4
    assert "--enable-expert-parallel" in glm.server.command
    assert glm.server.command[glm.server.command.index("--data-parallel-size") + 1] == "8"
    assert kimi.server.env["HF_TOKEN"] == "${HF_TOKEN}"
    # past image retention: wheels and overlays become images derived from the good one
    assert kimi.build is not None
    assert [s.type for s in kimi.build.strategies] == ["image", "wheel", "overlay"]
    wheel, overlay = kimi.build.strategies[1:]
    assert getattr(wheel, "image", None) == kimi.candidates.good
    # the release branch's picks: over the wheel of the branch point, for a CUDA build
    assert getattr(overlay, "base", None) == "nearest" and getattr(overlay, "target", "") == "cuda"


@pytest.mark.parametrize("name", ["kimi-k3-nvfp4-tp8-b300", "glm-5.3-mxfp4-dp8-ep8-gb200-slurm"])
def test_the_gpu_configs_name_real_parsers_budgets_and_a_repo_that_resolves(name: str) -> None:
    path = ROOT / "configs" / f"{name}.yaml"
    config = load_config(path)
    server = config.server
    assert isinstance(server, DockerServerConfig | SlurmServerConfig)
    args = server.args if isinstance(server, DockerServerConfig) else server.command
    parser = args[args.index("--reasoning-parser") + 1]
    # the parser names vLLM registers (vllm/reasoning/__init__.py, 0.32)
    assert parser == {"kimi": "kimi_k3", "glm-": "glm47"}[name[:4]]
    # the comment says: clone vllm beside the llm-bisect checkout
    assert "beside your llm-bisect checkout" in path.read_text()
    assert (path.parent / config.candidates.repo).resolve() == ROOT.resolve().parent / "vllm"
    # budgets that fit a thinking model, growing to a cap
    for check in config.checks:
        if check.type in ("canary", "expect", "eval"):
            assert check.max_tokens >= 1024 and check.max_tokens_cap >= 16384, check


def test_the_cpu_config_builds_wheels_then_overlays_past_image_retention() -> None:
    config = load_config(ROOT / "configs" / "vllm-cpu-builds.yaml")
    assert config.build is not None and config.candidates.coarse
    kinds = [s.type for s in config.build.strategies]
    assert kinds == ["wheel", "overlay"]
    assert not isinstance(config.server, DockerServerConfig)
    assert config.server.command[0] == "{python}"


def test_the_ci_gate_steps_call_the_gate_with_flags_it_has() -> None:
    """configs/ci: each step is YAML that runs `llm-bisect gate` with flags the command takes."""
    import shlex

    import yaml
    from typer.testing import CliRunner

    from llm_bisect.cli import cli

    help_text = CliRunner().invoke(cli, ["gate", "--help"], env={"COLUMNS": "200"}).output
    folder = Path(__file__).parent.parent / "configs" / "ci"
    commands = []
    for path in sorted(folder.glob("*.yml")):
        doc = yaml.safe_load(path.read_text())
        steps = doc["jobs"]["gate"]["steps"] if "jobs" in doc else doc["steps"]
        commands += [s.get("run") or s.get("command") for s in steps]
    gates = [c for c in commands if c and c.startswith("llm-bisect gate")]
    assert len(gates) == 2
    for command in gates:
        flags = [w for w in shlex.split(command) if w.startswith("--")]
        assert {"--candidate", "--golden", "--junit", "--bisect-on-block"} <= set(flags)
        assert all(flag in help_text for flag in flags), command


def test_the_readme_points_only_at_files_in_the_repository() -> None:
    """README named a DESIGN.md the repository does not hold; contributors' notes are in
    docs/architecture.md, and every docs/, schemas/ and configs/ path it names exists."""
    import re

    text = (ROOT / "README.md").read_text()
    named = set(re.findall(r"`((?:docs|schemas|configs)/[\w./-]*\w)`", text))
    assert "docs/architecture.md" in named
    assert sorted(p for p in named if not (ROOT / p).exists()) == []
    assert "DESIGN.md" not in text
