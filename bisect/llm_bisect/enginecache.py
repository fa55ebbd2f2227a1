"""The engine's compile and JIT caches, shared by the probes of a run (`probe.engine_cache`):
where each lives under one root, as the environment a server is given. Pure.

    ROOT/vllm        VLLM_CACHE_ROOT           torch_compile_cache/<hash of config, envs,
                                               traced source, compiler>, torch_aot_compile/...
    ROOT/inductor    TORCHINDUCTOR_CACHE_DIR   FX-graph and kernel cache (graph + torch + config)
    ROOT/triton      TRITON_CACHE_DIR          compiled kernels (source + backend + version)
    ROOT/flashinfer  FLASHINFER_WORKSPACE_BASE FlashInfer JIT (version/arch/kernel URI)
    ROOT/deep_gemm   DG_JIT_CACHE_DIR          DeepGEMM JIT (kernel source + flags)

Each is keyed by what it was compiled from, so builds of different commits share the root
and never read each other's entries (see EngineCacheConfig and docs/configuration.md).
"""

from __future__ import annotations

from pathlib import Path

CACHES: dict[str, str] = {
    "VLLM_CACHE_ROOT": "vllm",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_CACHE_DIR": "triton",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
    "DG_JIT_CACHE_DIR": "deep_gemm",
}
"""The variable each cache is placed by → its folder under the root."""


def cache_env(root: Path) -> dict[str, str]:
    """The environment that puts every cache under `root` (an absolute path on the node)."""
    return {name: str(root / folder) for name, folder in CACHES.items()}


def cache_volume(root: Path) -> str:
    """The bind that gives a container the root at the same path (`HOST:CONTAINER`)."""
    return f"{root}:{root}"
