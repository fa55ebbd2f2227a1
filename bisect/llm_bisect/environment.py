"""The node a run ran on, for the report: GPUs, driver and CUDA from `nvidia-smi` when it is
there (said so when not), the OS, Python and llm-bisect. Parsing is pure; `node_environment`
runs the commands."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from collections.abc import Callable

from . import __version__
from .jsonvalue import Json

QUERY = "index,name,driver_version,memory.total,pci.bus_id"
SMI_TIMEOUT_S = 20.0
_CUDA = re.compile(r"CUDA Version:\s*([\d.]+)")


def parse_gpus(csv: str) -> list[dict[str, str]]:
    """`nvidia-smi --query-gpu=QUERY --format=csv,noheader` as one dict per GPU."""
    keys = QUERY.split(",")
    gpus = []
    for line in csv.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == len(keys):
            gpus.append(dict(zip(keys, cells, strict=True)))
    return gpus


def parse_cuda(banner: str) -> str:
    """The CUDA version the driver supports, from plain `nvidia-smi`'s banner; "" if absent."""
    m = _CUDA.search(banner)
    return m.group(1) if m else ""


def _run(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def gpu_ids(
    which: Callable[[str], str | None] = shutil.which,
    run: Callable[[list[str]], str | None] = _run,
) -> list[str] | None:
    """The indices of the GPUs nvidia-smi lists; None without nvidia-smi or an answer."""
    smi = which("nvidia-smi")
    listing = run([smi, "--query-gpu=index", "--format=csv,noheader"]) if smi else None
    if listing is None:
        return None
    return [line.strip() for line in listing.splitlines() if line.strip()]


def node_environment(
    which: Callable[[str], str | None] = shutil.which,
    run: Callable[[list[str]], str | None] = _run,
) -> dict[str, Json]:
    """What the report says of this node. Never raises: a fact that cannot be had is said so."""
    found: dict[str, Json] = {
        "os": platform.platform(),
        "python": platform.python_version(),
        "llm_bisect": __version__,
    }
    smi = which("nvidia-smi")
    if smi is None:
        found["gpu_note"] = "nvidia-smi not found on this node: no GPU, driver or CUDA facts"
        return found
    listing = run([smi, f"--query-gpu={QUERY}", "--format=csv,noheader"])
    if listing is None:
        found["gpu_note"] = "nvidia-smi did not answer: no GPU, driver or CUDA facts"
        return found
    gpus = parse_gpus(listing)
    found["gpus"] = gpus
    found["gpu_count"] = len(gpus)
    found["driver"] = gpus[0]["driver_version"] if gpus else ""
    found["cuda"] = parse_cuda(run([smi]) or "")
    return found
