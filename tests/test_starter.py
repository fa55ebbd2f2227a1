"""`llm-bisect init`: a config from what the user has, which then runs as printed."""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest
import yaml

from helpers import History, cli_on_path
from llm_bisect.config import parse_config
from llm_bisect.errors import ConfigError
from llm_bisect.starter import Start, parse_serve, render
from llm_bisect.templates import expand_env, shown

SECRET = "hf_planted_4c0ffee"


def llm_bisect(*args: str, cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    done = subprocess.run(
        ["llm-bisect", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    return done.returncode, done.stdout, done.stderr


def test_init_from_two_commits_writes_a_config_whose_printed_commands_find_the_culprit(
    history: Callable[..., History], tmp_path: Path
) -> None:
    h = history({5: "degenerate-reasoning"}, n=8)
    env = cli_on_path(tmp_path / "bin")
    work = tmp_path / "work"
    work.mkdir()
    serve = h.config_command()  # another server than vLLM's: taken as given, {port} and all
    code, out, err = llm_bisect(
        "init", "--good", h.shas[0], "--bad", h.shas[-1], "--repo", str(h.repo), "--",
        *serve, cwd=work, env=env,
    )  # fmt: skip
    assert code == 0, err
    config = work / "llm-bisect.yaml"
    assert f"wrote {config.name} (process: two commits)" in err
    printed = [line.strip() for line in err.splitlines() if line.startswith("  llm-bisect ")]
    assert printed == [
        "llm-bisect candidates llm-bisect.yaml",
        "llm-bisect run llm-bisect.yaml --out bisect-run",
    ], err
    for line in printed:  # as printed, in the folder it was printed in
        code, out, err = llm_bisect(*shlex.split(line)[1:], cwd=work, env=env)
        assert code == 0, out + err
    result = json.loads((work / "bisect-run" / "result.json").read_text())
    assert result["culprit"]["commit"] == h.shas[5], result["status"]
    # a second init never overwrites the config a run used
    before = config.read_text()
    again = ("init", "--good", "a", "--bad", "b", "--", *serve)
    code, out, err = llm_bisect(*again, cwd=work, env=env)
    assert code == 2 and err.count("\n") == 1 and "exists" in err, err
    assert config.read_text() == before


def test_init_from_two_images_serves_the_vllm_command_by_docker(tmp_path: Path) -> None:
    env = cli_on_path(tmp_path / "bin")
    overrides = '{"rms_norm_eps": 0.1}'
    code, out, err = llm_bisect(
        "init", "--good", "vllm/vllm-openai:nightly-2026-08-09",
        "--bad", "vllm/vllm-openai:v0.27.0", "-o", "kimi.yaml", "--",
        f"HF_TOKEN={SECRET}", "VLLM_USE_DEEP_GEMM=1", "vllm", "serve", "RedHatAI/Kimi-K3-NVFP4",
        "--tensor-parallel-size", "8", "--port", "9000", "--host=0.0.0.0",
        "--hf-overrides", overrides,
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert code == 0, err
    text = (tmp_path / "kimi.yaml").read_text()
    assert SECRET not in text + out + err
    config = parse_config(yaml.safe_load(text))
    server = config.server.model_dump()
    assert server["launcher"] == "docker"
    assert server["image"] == "vllm/vllm-openai:nightly-{commit}"
    assert [shown(a) for a in server["args"]] == [
        "--model", "RedHatAI/Kimi-K3-NVFP4", "--tensor-parallel-size", "8",
        "--hf-overrides", overrides, "--port", "{port}",
    ]  # fmt: skip
    assert server["env"] == {"HF_TOKEN": "${HF_TOKEN}", "VLLM_USE_DEEP_GEMM": "1"}
    assert (config.candidates.good, config.candidates.bad) == (
        "vllm/vllm-openai:nightly-2026-08-09",
        "vllm/vllm-openai:v0.27.0",
    )
    assert [s.type for s in config.build.strategies] == ["image", "wheel", "overlay"]


def test_init_from_two_wheels_reads_their_commits(tmp_path: Path) -> None:
    env = cli_on_path(tmp_path / "bin")
    good = "vllm-0.32.0+cu129.gabcdef1-cp38-abi3-manylinux1_x86_64.whl"
    bad = "https://wheels.example/vllm-0.33.0%2Bcu129.g1234567-cp38-abi3-manylinux1_x86_64.whl"
    code, _, err = llm_bisect(
        "init", "--good", good, "--bad", bad, "--", "vllm", "serve", "Qwen/Qwen3-0.6B",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert code == 0, err
    config = parse_config(yaml.safe_load((tmp_path / "llm-bisect.yaml").read_text()))
    assert (config.candidates.good, config.candidates.bad) == ("abcdef1", "1234567")
    command = config.server.model_dump()["command"]
    assert command[:5] == ["{python}", "-m", "vllm.entrypoints.openai.api_server", "--model",
                           "Qwen/Qwen3-0.6B"]  # fmt: skip


def test_init_refuses_what_it_cannot_write_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    env = cli_on_path(tmp_path / "bin")
    cases = [
        (["--good", "a", "--bad", "b", "--", "vllm", "serve", "M", "--api-key", SECRET],
         "secret"),
        (["--good", "a", "--bad", "b", "--", "python", "server.py"], "{port}"),
        (["--good", "img/x:1", "--bad", "b", "--", "vllm", "serve", "M"], "both"),
        (["--good", "vllm-1.0-py3-none-any.whl", "--bad", "vllm-1.1-py3-none-any.whl", "--",
          "vllm", "serve", "M"], "names no commit"),
        (["--good", "a", "--bad", "b"], "no serve command"),
        (["--good", "a", "--bad", "b", "--", "vllm", "serve", "--dtype", "half"], "no model"),
    ]  # fmt: skip
    for args, said in cases:
        code, out, err = llm_bisect("init", *args, cwd=tmp_path, env=env)
        assert code == 2 and said in err and err.count("\n") == 1, (args, err)
        assert "Traceback" not in err and SECRET not in out + err
        assert not (tmp_path / "llm-bisect.yaml").exists(), args


def test_init_reads_the_login_in_a_variables_address_from_the_shell(tmp_path: Path) -> None:
    """A proxy's login is a secret like HF_TOKEN: the config reads it from the shell, init
    says to export it, and the server gets the address it was given (issue 48 item 3)."""
    env = cli_on_path(tmp_path / "bin")
    proxy = "http://bob:hunter2@proxy:3128"
    indexes = "https://ci:pw-one@a.example/simple https://ci:pw-two@b.example/simple"
    code, out, err = llm_bisect(
        "init", "--good", "a" * 40, "--bad", "b" * 40, "--",
        f"HF_TOKEN={SECRET}", f"HTTPS_PROXY={proxy}", "NO_PROXY=localhost",
        f"PIP_EXTRA_INDEX_URL={indexes}",
        "vllm", "serve", "Qwen/Qwen3-0.6B",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert code == 0, err
    text = (tmp_path / "llm-bisect.yaml").read_text()
    for secret in (SECRET, "hunter2", "bob", "pw-one", "pw-two"):
        assert secret not in text + out + err, secret
    written = parse_config(yaml.safe_load(text)).server.env
    assert written == {
        "HF_TOKEN": "${HF_TOKEN}",
        "HTTPS_PROXY": "http://${HTTPS_PROXY_LOGIN}@proxy:3128",  # the proxy stays readable
        "NO_PROXY": "localhost",
        "PIP_EXTRA_INDEX_URL": "${PIP_EXTRA_INDEX_URL}",  # two logins: read whole
    }
    shell = {"HF_TOKEN": SECRET, "HTTPS_PROXY_LOGIN": "bob:hunter2", "PIP_EXTRA_INDEX_URL": indexes}
    assert expand_env(written, shell) == {"HF_TOKEN": SECRET, "HTTPS_PROXY": proxy,
                                          "NO_PROXY": "localhost",
                                          "PIP_EXTRA_INDEX_URL": indexes}  # fmt: skip
    said = err.splitlines()[0]
    assert "export" in said and "HF_TOKEN, HTTPS_PROXY_LOGIN" in said, err
    assert "PIP_EXTRA_INDEX_URL" in said, err


DIGEST = "sha256:" + "c" * 64


@pytest.mark.parametrize(
    ("good", "image"),
    [
        ("myreg:5000/vllm", "myreg:5000/vllm:nightly-{commit}"),
        (f"127.0.0.1:5000/vllm@{DIGEST}", "127.0.0.1:5000/vllm:nightly-{commit}"),
        (f"127.0.0.1:5000/ci/vllm:nightly-x@{DIGEST}", "127.0.0.1:5000/ci/vllm:nightly-{commit}"),
        ("localhost:5000/vllm:v1", "localhost:5000/vllm:nightly-{commit}"),
        ("vllm/vllm-openai:nightly-2026-08-09", "vllm/vllm-openai:nightly-{commit}"),
    ],
)
def test_init_keeps_a_registrys_port_in_the_image_of_each_commit(good: str, image: str) -> None:
    """A registry's port is no tag, nor is a digest (issue 48 item 13)."""
    start = Start(good, "myreg:5000/vllm:v0.27.0", parse_serve(["vllm", "serve", "M"]), "vllm")
    config = parse_config(yaml.safe_load(render(start)[0]))
    server = config.server.model_dump()
    assert server["image"] == image
    assert config.candidates.good == good
    wheel = config.build.strategies[1].model_dump() if config.build else {}
    assert wheel["image"] == good  # the good end's image, as given, serves each wheel
    with pytest.raises(ConfigError, match="--bad: not an image reference"):
        render(Start(good, "Vllm/X:1", start.serve, "vllm"))


GLM = ["RedHatAI/GLM-5.3-MXFP4", "--data-parallel-size", "8", "--enable-expert-parallel"]


def test_init_for_kubernetes_writes_a_two_node_dp_ep_probe_as_a_leaderworkerset(
    tmp_path: Path,
) -> None:
    """The GLM case (DP8+EP8, two 4-GPU nodes a probe) in one line: namespace, pull Secret,
    GPUs per pod, the head serving and the worker headless from rank 4; HF_TOKEN from a
    Secret, never in the file (issue 49 item 6)."""
    from kubeapi import lws_schema
    from llm_bisect.launchers.kubernetes import KubernetesServerConfig
    from test_launchers_kubernetes import group

    env = cli_on_path(tmp_path / "bin")
    code, out, err = llm_bisect(
        "init", "--launcher", "kubernetes", "--nodes", "2", "--namespace", "llm-bisect",
        "--image-pull-secret", "regcred", "--good", "vllm/vllm-openai:v0.29.0",
        "--bad", "vllm/vllm-openai:v0.30.0", "-o", "glm.yaml", "--",
        f"HF_TOKEN={SECRET}", "NCCL_MNNVL_ENABLE=1", "vllm", "serve", *GLM,
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert code == 0, err
    text = (tmp_path / "glm.yaml").read_text()
    assert SECRET not in text + out + err
    assert "kubectl -n llm-bisect create secret generic hf-token" in err, err
    server = parse_config(yaml.safe_load(text)).server
    dumped = server.model_dump()
    assert (dumped["namespace"], dumped["image_pull_secrets"]) == ("llm-bisect", ["regcred"])
    assert (dumped["nodes"], dumped["gpus"], dumped["entrypoint"]) == (2, 4, ["vllm", "serve"])
    assert dumped["secret_env"] == {"HF_TOKEN": {"secret": "hf-token", "key": "value"}}
    assert dumped["env"] == {"NCCL_MNNVL_ENABLE": "1"}
    assert isinstance(server, KubernetesServerConfig)
    (lws,) = group(server, "leaderworkerset")
    jsonschema.validate(lws, lws_schema())
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    worker = template["workerTemplate"]["spec"]["containers"][0]
    assert leader["args"][:4] == GLM and worker["args"][:4] == GLM
    for args in (leader["args"], worker["args"]):
        assert "--enable-expert-parallel" in args and "$(LWS_LEADER_ADDRESS)" in args
        assert args[args.index("--data-parallel-size-local") + 1] == "4"
    assert "--headless" in worker["args"] and "--headless" not in leader["args"]
    assert worker["args"][worker["args"].index("--data-parallel-start-rank") + 1] == "4"
    assert leader["args"][-4:] == ["--host", "0.0.0.0", "--port", "8000"]
    assert leader["resources"]["limits"]["nvidia.com/gpu"] == "4"
    pod = template["leaderTemplate"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]


def test_what_init_leaves_to_the_user_is_named_by_the_first_command_until_filled(
    tmp_path: Path,
) -> None:
    """No --namespace: a placeholder that `candidates` names in one line; Slurm of two
    images: the commits they were built from (pyxis runs each commit's image)."""
    env = cli_on_path(tmp_path / "bin")
    cases = [
        (["--launcher", "kubernetes", "--good", "vllm/vllm-openai:v0.29.0",
          "--bad", "vllm/vllm-openai:v0.30.0"], "server.namespace: fill in '<edit: your "),
        (["--launcher", "slurm", "--good", "vllm/vllm-openai:v0.29.0",
          "--bad", "vllm/vllm-openai:v0.30.0"], "candidates.good: fill in '<edit: the commit "),
    ]  # fmt: skip
    for i, (args, said) in enumerate(cases):
        name = f"c{i}.yaml"
        code, _, err = llm_bisect("init", *args, "-o", name, "--", "vllm", "serve", "M",
                                  cwd=tmp_path, env=env)  # fmt: skip
        assert code == 0 and "fill in each `<edit: ...>`" in err, err
        code, _, err = llm_bisect("candidates", name, cwd=tmp_path, env=env)
        assert code == 2 and said in err and err.count("\n") == 1, err
        assert "Traceback" not in err
    text = (tmp_path / "c1.yaml").read_text()
    server = yaml.safe_load(text)["server"]
    assert server["container_image"] == "vllm/vllm-openai:nightly-{commit}"
    assert server["command"][:3] == ["vllm", "serve", "M"]


def test_init_refuses_a_launcher_that_cannot_run_what_it_was_given(tmp_path: Path) -> None:
    env = cli_on_path(tmp_path / "bin")
    serve = ["--", "vllm", "serve", "M", "--data-parallel-size", "8"]
    images = ["--good", "img/x:1", "--bad", "img/x:2"]
    cases = [
        (["--launcher", "kubernetes", "--good", "a", "--bad", "b"], "runs images"),
        (["--launcher", "docker", "--good", "a", "--bad", "b"], "runs images"),
        (["--launcher", "process", *images], "commits or wheels"),
        (["--launcher", "kube", *images], "--launcher: one of"),
        (["--launcher", "kubernetes", "--nodes", "3", *images], "--nodes 3"),
        (["--nodes", "2", *images], "with --launcher slurm or kubernetes"),
        (["--launcher", "slurm", "--namespace", "ns", "--good", "a", "--bad", "b"],
         "with --launcher kubernetes"),
    ]  # fmt: skip
    for args, said in cases:
        code, _, err = llm_bisect("init", *args, *serve, cwd=tmp_path, env=env)
        assert code == 2 and said in err and err.count("\n") == 1, (args, err)
        assert not (tmp_path / "llm-bisect.yaml").exists(), args
