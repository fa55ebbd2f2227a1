"""The simulated engine's `collect_env`: what vLLM's `python -m vllm.collect_env` prints, in
its layout, with the package versions a commit's sim-engine.json names (`packages`) and
the GPUs `nvidia-smi -L` lists on this machine (as vLLM's does), so tests exercise the path.

    python -m llm_bisect.sim.collect_env (--repo REPO | --engine-file FILE) --commit COMMIT
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from .server import engine_settings
from .shapes import EngineSettings

DEFAULTS = {
    "torch": "2.13.0+cu130",
    "flashinfer-python": "0.6.16",
    "nvidia-nccl-cu13": "2.28.9",
    "transformers": "5.19.0",
    "triton": "3.9.0",
}


def _smi(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["nvidia-smi", *args], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def report(packages: dict[str, str], version: str) -> str:
    listing = _smi("-L")
    gpus = re.sub(r" \(UUID: .+?\)", "", listing).strip() if listing else "Could not collect"
    driver = re.search(r"Driver Version: (.*?) ", _smi() or "")
    if "\n" in gpus:  # several: on lines of their own, as vLLM's does
        gpus = f"\n{gpus}\n"
    rows = "\n".join(f"[pip3] {name}=={v}" for name, v in sorted(packages.items()))
    return f"""Collecting environment information...
==============================
       PyTorch Info
==============================
PyTorch version              : {packages.get("torch", "N/A")}
Is debug build               : False
CUDA used to build PyTorch   : 13.0

==============================
       CUDA / GPU Info
==============================
Is CUDA available            : True
CUDA runtime version         : 13.0.88
GPU models and configuration : {gpus}
Nvidia driver version        : {driver.group(1) if driver else "Could not collect"}

==============================
Versions of relevant libraries
==============================
{rows}
[conda] Could not collect

==============================
         vLLM Info
==============================
vLLM Version                 : {version}
"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m llm_bisect.sim.collect_env")
    parser.add_argument("--repo", type=Path, help="read the versions from COMMIT:sim-engine.json")
    parser.add_argument("--engine-file", type=Path, help="read them from this file instead")
    parser.add_argument("--commit", required=True)
    args = parser.parse_args(argv)
    settings: EngineSettings = {}
    if args.engine_file is not None:
        settings = json.loads(args.engine_file.read_text())
    elif args.repo is not None:
        settings = engine_settings(args.repo, args.commit)
    packages = {**DEFAULTS, **dict(settings.get("packages") or {})}
    print(report(packages, f"0.32.0.sim+g{args.commit[:9]}"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
