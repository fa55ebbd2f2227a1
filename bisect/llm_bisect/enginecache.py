"""The engine's compile and JIT caches, kept between probes (`probe.engine_cache`, on by
default): where each lives, as the environment a server is given. Pure.

One folder per node and slot under the root, so no two servers ever write one folder at
once (vLLM's compile cache is corrupted by concurrent writers on older versions), and a
node's compiled kernels stay on that node:

    ROOT = ${XDG_CACHE_HOME:-~/.cache}/llm-bisect/engine-cache   (or probe.engine_cache.dir)
    FOLDER = ROOT/<node>/slot-<k>      <node>: this host's name (process, docker), or the
                                       Slurm node's, filled there ({node}, node.sh)
    FOLDER/vllm        VLLM_CACHE_ROOT           torch_compile_cache/<hash of config, envs,
                                               traced source, compiler>, torch_aot_compile/...
    FOLDER/inductor    TORCHINDUCTOR_CACHE_DIR   FX-graph and kernel cache (graph + torch + config)
    FOLDER/triton      TRITON_CACHE_DIR          compiled kernels (source + backend + version)
    FOLDER/flashinfer  FLASHINFER_WORKSPACE_BASE FlashInfer JIT (version/arch/kernel URI)
    FOLDER/deep_gemm   DG_JIT_CACHE_DIR          DeepGEMM JIT (kernel source + flags)

Each is keyed by what it was compiled from, so builds of different commits share the root
and never read each other's entries (see EngineCacheConfig and docs/configuration.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

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


NODE = "{node}"
"""In a folder's path: the node's name, filled on the node where the server runs (Slurm)."""
Place = Literal["here", "node", "configured"]
"""Where a launcher's servers find the folder (kinds.LauncherKind.cache_place): `here`, this
machine's files (process, a local Docker engine); `node`, the node's, its name filled there
(Slurm); `configured`, only where the config names a root (Kubernetes: a pod's node does not
have this machine's home)."""


def default_root(environ: Mapping[str, str]) -> Path:
    """The user's cache of engine caches: `$XDG_CACHE_HOME/llm-bisect/engine-cache` (an
    absolute XDG_CACHE_HOME, as the XDG spec reads it), else `$HOME/.cache/...`."""
    xdg = environ.get("XDG_CACHE_HOME", "")
    if xdg and Path(xdg).is_absolute():
        base = Path(xdg)
    else:
        base = Path(environ.get("HOME") or Path.home()) / ".cache"
    return base / "llm-bisect" / "engine-cache"


def folder(root: Path, node: str, slot: int, fresh: str = "") -> Path:
    """One slot's folder on one node (`node` NODE: filled on the node; "": the root is the
    node's own, a Kubernetes hostPath); `fresh`: instead, an empty one of that name for one
    probe (`fresh-<name>`)."""
    name = f"fresh-{fresh}" if fresh else f"slot-{slot}"
    return (root / node.replace("/", "_") if node else root) / name


@dataclass(frozen=True)
class EngineCache:
    """A run's engine cache: its root and how its servers find their folders."""

    root: Path
    """Absolute, on the node."""
    place: Place = "here"
    own: frozenset[str] = frozenset()
    """Cache variables the config's server.env sets itself: they win over the folder's."""

    def env(self, node: str, slot: int, fresh: str = "") -> dict[str, str]:
        """The environment of a server on `node` (NODE: its node's) in `slot` (`fresh`: in
        an empty folder of its own, folder())."""
        mine = cache_env(folder(self.root, node, slot, fresh))
        return {k: v for k, v in mine.items() if k not in self.own}


@dataclass(frozen=True)
class Census:
    """What a probe's folder held, counted when its server was ready."""

    held: int
    """Files last written before the server started: what it could load."""
    written: int
    """Files written since (compiled anew), by the time it was ready."""

    @property
    def state(self) -> str:
        """`cold`: the folder was empty; `hit`: it held entries and nothing new was written
        (all it compiled came from the cache); `warm`: it held entries and more were written
        (another build's, or a part this build compiled anew)."""
        if self.held == 0:
            return "cold"
        return "hit" if self.written == 0 else "warm"
