"""The node's facts for the report: a real `nvidia-smi` process on PATH (a stand-in script
that prints what the real one prints on a B300 node), or none."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from llm_bisect.environment import node_environment, parse_cuda, parse_gpus
from llm_bisect.report.documents import Context
from llm_bisect.report.markdown import environment_lines

LISTING = "".join(
    f"{i}, NVIDIA B300 SXM6 AC, 580.65.06, 275040 MiB, 00000000:{0x18 + i:02X}:00.0\n"
    for i in range(8)
)
BANNER = """+------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.65.06              Driver Version: 580.65.06      CUDA Version: 13.0     |
|-----------------------------------------+------------------------+----------------------+
"""


def fake_smi(folder: Path, listing: str, banner: str, code: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ -n "$1" ]; then cat <<"EOF"\n{listing}EOF\nelse cat <<"EOF"\n{banner}EOF\nfi\n'
        f"exit {code}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_gpus_driver_and_cuda_from_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_smi(tmp_path / "bin", LISTING, BANNER)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    env = node_environment()
    assert env["gpu_count"] == 8 and env["driver"] == "580.65.06" and env["cuda"] == "13.0"
    assert env["gpus"][3]["pci.bus_id"] == "00000000:1B:00.0"
    lines = environment_lines(Context(environment=env))
    assert "- GPUs: 8 x NVIDIA B300 SXM6 AC (275040 MiB)" in lines
    assert "- driver 580.65.06, CUDA 13.0" in lines


def test_no_nvidia_smi_is_said_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    env = node_environment()
    assert "gpus" not in env and env["gpu_note"].startswith("nvidia-smi not found on this node")
    assert any(
        "nvidia-smi not found" in line for line in environment_lines(Context(environment=env))
    )
    fake_smi(tmp_path / "broken", "", "", code=9)  # a driver that does not answer
    monkeypatch.setenv("PATH", str(tmp_path / "broken"))
    assert node_environment()["gpu_note"].startswith("nvidia-smi did not answer")


def test_parsers_keep_only_whole_rows() -> None:
    assert parse_gpus("0, A, 1, 2 MiB\nnot a row\n") == []
    assert len(parse_gpus(LISTING)) == 8
    assert parse_cuda(BANNER) == "13.0" and parse_cuda("no banner") == ""
