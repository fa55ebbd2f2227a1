"""Every shipped config validates, and names what its case needs."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import History, cli_on_path
from llm_bisect.config import Config, load_config
from llm_bisect.kinds import LAUNCHERS
from llm_bisect.launchers.docker import DockerServerConfig
from llm_bisect.launchers.slurm import SlurmServerConfig
from localregistry import LocalRegistry

ROOT = Path(__file__).parent.parent
CONFIGS = sorted((Path(__file__).parent.parent / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_shipped_configs_validate(path: Path) -> None:
    config = load_config(path)
    # an image per commit (Docker, Kubernetes, or pyxis under Slurm), else a build per commit
    images = LAUNCHERS[config.server.launcher].runs_images or (
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


CI = ROOT / "configs" / "ci"


def _ci_steps(bisect: bool = False) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Each template's gate step (or, `bisect`, the step that bisects after a block) and the
    environment its job sets, by template."""
    github = yaml.safe_load((CI / "github-actions-gate.yml").read_text())
    job = github["jobs"]["bisect" if bisect else "gate"]
    (gh_step,) = [s for s in job["steps"] if "llm-bisect gate" in s.get("run", "")]
    buildkite = yaml.safe_load((CI / "buildkite-gate.yml").read_text())
    (bk_step,) = [
        s
        for s in buildkite["steps"]
        if "llm-bisect gate" in s.get("command", "")
        and ("--bisect-on-block" in s["command"]) == bisect
    ]
    return {"github": (gh_step, job["env"]), "buildkite": (bk_step, bk_step["env"])}


def test_the_ci_gate_steps_call_the_gate_with_flags_it_has() -> None:
    """configs/ci: each step runs `llm-bisect gate` with flags the command takes, on the
    runner's checkout (`--repo`), before a release is tagged (release branches, by hand)."""
    from typer.testing import CliRunner

    from llm_bisect.cli import cli

    help_text = CliRunner().invoke(cli, ["gate", "--help"], env={"COLUMNS": "200"}).output
    for bisect in (False, True):  # the gate, then a job of its own that bisects a block
        for name, (step, _) in _ci_steps(bisect).items():
            script = (step.get("run") or step["command"]).replace("$$", "$")
            line = next(
                x for x in script.replace("\\\n", " ").splitlines() if "llm-bisect gate" in x
            )
            flags = [w for w in shlex.split(line) if w.startswith("--")]
            assert {"--candidate", "--golden", "--junit", "--repo"} <= set(flags), name
            assert ("--bisect-on-block" in flags) == bisect, name
            assert all(flag in help_text for flag in flags), (name, flags)
    github = yaml.safe_load((CI / "github-actions-gate.yml").read_text())
    on = github[True]  # YAML 1.1 reads the key `on` as true
    assert on["push"] == {"branches": ["releases/**"]}  # no tag: the gate runs before it
    assert "candidate" in on["workflow_dispatch"]["inputs"]
    buildkite = yaml.safe_load((CI / "buildkite-gate.yml").read_text())
    assert "releases" in buildkite["steps"][0]["if"] and "ui" in buildkite["steps"][0]["if"]
    assert buildkite["steps"][0]["soft_fail"] == [{"exit_status": 125}]


@pytest.fixture(scope="module")
def ci_runner(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What a CI runner holds: a config in /etc whose candidates.repo is not here, the last
    good build's golden beside it, and the engine's checkout in the job's workspace."""
    root = tmp_path_factory.mktemp("ci")
    # 3 crashes during checks: untestable (a build that does not start where the good one
    # does blocks)
    h = History(root, {3: "crash-on-request", 4: "degenerate-content"}, 4)
    etc = root / "etc"
    etc.mkdir()
    config = etc / "gate.yaml"
    config.write_text(
        h.config(candidates={"repo": "./not-here"}, checks=[{"type": "canary"}]).read_text()
    )
    workspace = root / "workspace"
    workspace.mkdir()
    subprocess.run(["git", "clone", "-q", str(h.repo), str(workspace / "vllm")], check=True)
    env = cli_on_path(root / "bin")
    golden = etc / "golden.json"
    recorded = subprocess.run(
        ["llm-bisect", "golden", str(config), "--repo", str(h.repo), "--candidate", h.shas[0],
         "-o", str(golden)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert recorded.returncode == 0, recorded.stderr
    return {"history": h, "config": config, "golden": golden, "workspace": workspace, "env": env}


OUTCOMES = {"allow": (1, 0), "block": (4, 1), "inconclusive": (3, 125)}
"""decision: (the candidate's index in the history, the gate's exit)."""


@pytest.mark.parametrize("decision", list(OUTCOMES))
@pytest.mark.parametrize("ci", ["github", "buildkite"])
def test_each_ci_template_runs_as_written(
    ci: str, decision: str, ci_runner: dict[str, Any], tmp_path: Path
) -> None:
    """The step's shell, as the template writes it, with what the CI sets (the job's env
    pointed at this runner's config and golden, the workspace, the candidate): allow passes,
    block fails the job, inconclusive is neutral (GitHub: passes with a warning; Buildkite:
    exit 125, which the step soft-fails)."""
    h: History = ci_runner["history"]
    step, job_env = _ci_steps()[ci]
    assert set(job_env) == {"LLM_BISECT_CONFIG", "LLM_BISECT_GOLDEN"}
    index, code = OUTCOMES[decision]
    workspace = tmp_path / "workspace"
    shutil.copytree(ci_runner["workspace"], workspace, symlinks=True)
    env = {
        **ci_runner["env"],
        "LLM_BISECT_CONFIG": str(ci_runner["config"]),
        "LLM_BISECT_GOLDEN": str(ci_runner["golden"]),
    }
    if ci == "github":
        summary = tmp_path / "summary.md"
        env |= {
            "GITHUB_WORKSPACE": str(workspace),
            "GITHUB_STEP_SUMMARY": str(summary),
            "CANDIDATE": h.shas[index],  # ${{ inputs.candidate || github.sha }}
        }
        shell = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c"]  # Actions' bash
        script = step["run"]
    else:
        checkout = workspace / "vllm"
        env |= {
            "BUILDKITE_BUILD_CHECKOUT_PATH": str(checkout),
            "BUILDKITE_COMMIT": h.shas[index],
            "BUILDKITE_BUILD_ID": f"build-{ci}-{decision}",
            "LLM_BISECT_STATE": str(tmp_path / "agent-state"),  # kept across retries
        }
        shell = ["bash", "-e", "-c"]
        script = step["command"].replace("$$", "$")  # the pipeline upload's interpolation
        workspace = checkout  # a Buildkite command runs in the checkout
    done = subprocess.run(
        [*shell, script], cwd=workspace, env=env, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    said = done.stdout + done.stderr
    gate = json.loads((workspace / "gate-out" / "gate.json").read_text())
    assert gate["decision"] == decision and gate["candidate"]["commit"] == h.shas[index], said
    assert (workspace / "gate-out" / "junit.xml").is_file()
    if ci == "github":
        assert done.returncode == (1 if decision == "block" else 0), said
        warned = "::warning title=release gate inconclusive::" in done.stdout
        assert warned == (decision == "inconclusive"), said
        github = yaml.safe_load((CI / "github-actions-gate.yml").read_text())
        (tail,) = [s for s in github["jobs"]["gate"]["steps"] if s.get("name") == "summary"]
        ran = subprocess.run([*shell, tail["run"]], cwd=workspace, env=env, check=False)
        assert ran.returncode == 0 and decision.upper() in summary.read_text()
    else:
        assert done.returncode == code, said
        soft = {rule["exit_status"] for rule in step["soft_fail"]}
        assert (done.returncode in soft) == (decision == "inconclusive")
    # then the job that bisects (GitHub: only after a block; Buildkite: the step runs after
    # every gate and bisects a block only), in the same output folder (GitHub: restored
    # from the cache), from the gate's own verdicts: the candidate is not probed again
    if ci == "github" and decision != "block":
        return
    (bisect_step, _) = _ci_steps(bisect=True)[ci]
    script = bisect_step.get("run") or bisect_step["command"].replace("$$", "$")
    done = subprocess.run(
        [*shell, script], cwd=workspace, env=env, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    gate = json.loads((workspace / "gate-out" / "gate.json").read_text())
    if decision != "block":
        assert "nothing to bisect" in said and gate.get("bisection") is None, said
        return
    assert "holds this candidate's verdict; the bisection starts from it" in said, said
    # 3 crashes during checks (untestable): 3 or 4 is the first bad, as the history has it
    assert gate["bisection"]["status"] == "ambiguous", gate["bisection"]
    assert "any of 2 could be the first bad" in gate["bisection"]["message"]


def test_the_readme_points_only_at_files_in_the_repository() -> None:
    """README named a DESIGN.md the repository does not hold; contributors' notes are in
    docs/architecture.md, and every docs/, schemas/ and configs/ path it names exists."""
    import re

    text = (ROOT / "README.md").read_text()
    named = set(re.findall(r"`((?:docs|schemas|configs)/[\w./-]*\w)`", text))
    assert "docs/architecture.md" in named
    assert sorted(p for p in named if not (ROOT / p).exists()) == []
    assert "DESIGN.md" not in text


def test_the_keep_workflow_runs_as_written_and_commits_its_ledger(
    registries: tuple[LocalRegistry, LocalRegistry], tmp_path: Path
) -> None:
    """configs/ci/github-actions-keep.yml: daily (and by hand), its keep step's shell, with
    the job's env pointed at two local registries, keeps the nightly tags in the mirror;
    its last step commits the ledger to the repository and pushes it, once."""
    upstream, mirror = registries
    flow = yaml.safe_load((CI / "github-actions-keep.yml").read_text())
    assert "cron" in flow[True]["schedule"][0] and "workflow_dispatch" in flow[True]
    job = flow["jobs"]["keep"]
    steps = {s.get("name"): s for s in job["steps"]}
    sha = "0123456789abcdef0123456789abcdef01234567"
    index = upstream.multi_arch("vllm/vllm-openai", f"nightly-{sha}", {"fault": "none"})
    upstream.multi_arch("vllm/vllm-openai", "latest", {"fault": "none"})
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "-q", str(remote), str(work)], check=True, capture_output=True)
    env = {
        **cli_on_path(tmp_path / "bin"),
        **job["env"],
        "UPSTREAM": f"{upstream.host}/vllm/vllm-openai",
        "MIRROR": f"{mirror.host}/kept/vllm-openai",
    }
    shell = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c"]  # Actions' bash
    for _ in range(2):  # the second day: nothing new, nothing copied, nothing committed
        for name in ("keep", "commit the ledger"):
            done = subprocess.run(
                [*shell, steps[name]["run"]], cwd=work, env=env, capture_output=True,
                text=True, timeout=300, check=False,
            )  # fmt: skip
            assert done.returncode == 0, done.stdout + done.stderr
    copy = mirror.manifest("kept/vllm-openai", f"nightly-{sha}")
    assert copy.headers["Docker-Content-Digest"] == index
    assert mirror.manifest("kept/vllm-openai", "latest").status_code == 404
    log = subprocess.run(
        ["git", "-C", str(remote), "log", "--format=%s", "--name-only"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert log.count("keep: ledger of") == 1 and job["env"]["LEDGER"] in log
    shown = subprocess.run(
        ["git", "-C", str(remote), "show", f"HEAD:{job['env']['LEDGER']}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert json.loads(shown)["entries"][f"nightly-{sha}"]["digest"] == index


@pytest.mark.parametrize("launcher", ["slurm", "kubernetes"])
def test_the_glm_configs_show_the_flag_path_beside_the_commit_path(
    launcher: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GLM case was settled by one flag: each GLM config prints the `configs` line of
    its companion (the same setup with `--moe-backend marlin` on every node: GOOD), and
    that line's BAD puts cutlass in its place on the head and on the other node alike
    (issue 49 item 6)."""
    from llm_bisect.delta import Difference
    from llm_bisect.services.configs import Servers, _trial_setup, configs_setup

    monkeypatch.setenv("HF_TOKEN", "hf_glmFlagPath1")
    monkeypatch.chdir(ROOT)
    main = ROOT / "configs" / f"glm-5.3-mxfp4-dp8-ep8-gb200-{launcher}.yaml"
    companion = main.with_name(f"{main.stem}-marlin.yaml")
    lines = [line[1:].strip() for line in main.read_text().splitlines()
             if line.startswith("#   llm-bisect configs ")]  # fmt: skip
    assert lines and lines[0] in companion.read_text(), lines
    words = shlex.split(lines[0])
    assert words[:3] == ["llm-bisect", "configs", f"configs/{companion.name}"], words
    bad_arg = words[words.index("--bad-arg") + 1]
    assert bad_arg == "--moe-backend cutlass"
    # the companion is the commit path's config but for GOOD's flag, on every node
    head, worker = ("command", "worker_command") if launcher == "slurm" else ("args", "worker_args")
    own, good = load_config(main), load_config(companion)
    expected = own.server.model_dump()
    for key in (head, worker):
        argv = list(expected[key])
        at = argv.index("--enable-expert-parallel") + 1
        expected[key] = [*argv[:at], "--moe-backend", "marlin", *argv[at:]]
    assert good.server.model_dump() == expected
    assert good.model_dump(exclude={"server"}) == own.model_dump(exclude={"server"})
    repo = History(tmp_path, {}, 1).repo  # a clone of the engine, as candidates.repo is
    cs = configs_setup(Path(words[2]), dict(os.environ), Servers(bad_args=bad_arg.split()),
                       repo=repo)  # fmt: skip
    marlin, cutlass = ("--moe-backend", "marlin"), ("--moe-backend", "cutlass")
    assert cs.differences == [Difference("flag", "--moe-backend", marlin, cutlass)]

    def on_every_node(server: Any) -> None:
        for key in (head, worker):
            argv = getattr(server, key)
            assert argv[argv.index("--moe-backend") + 1] == "cutlass", (key, argv)
            assert argv.count("--moe-backend") == 1

    on_every_node(cs.bad.config.server)  # BAD as given, then BAD's trial as configs starts it
    on_every_node(
        _trial_setup(cs.good, cs.bad, cs.key, cs.differences, frozenset({0})).config.server
    )
