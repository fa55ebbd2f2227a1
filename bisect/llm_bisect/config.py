"""The YAML config: schema, validation and the one-line errors users see.

Relative paths in a config are resolved against the folder holding the
config file, so a config and its repository can move together.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .checks.lm_eval import LmEvalConfig
from .checks.vllm_eval import VllmEvalConfig
from .errors import ConfigError
from .files import read_capped
from .report.escape import safe_url

PROCESS_PLACEHOLDERS = frozenset({"commit", "short", "port", "python", "build", "gpus"})
COLLECT_PLACEHOLDERS = frozenset({"commit", "short", "python", "build"})
BUILD_PLACEHOLDERS = frozenset({"python", "build"})
"""Placeholders a build fills (the build's interpreter and folder); they need `build:`."""
IMAGE_PLACEHOLDERS = frozenset({"commit", "short"})
DOCKER_ARG_PLACEHOLDERS = frozenset({"commit", "short", "port", "image"})
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class _Strict(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True
    )


class CandidatesConfig(_Strict):
    """Where the candidates come from: a local clone and the two ends."""

    repo: str
    """Path to a local git clone (relative to the config file; `${VAR}` from the environment;
    `--repo` overrides it)."""
    good: str
    """A ref that tests good (in --find-fix mode: the newer build that works)."""
    bad: str
    """A ref that tests bad (in --find-fix mode: the older build that is broken)."""
    coarse: bool = False
    """Coarse then fine: bisect first among candidates whose artifact is ready (an image, a
    published wheel, a cached build), then within the range left with any build."""
    url: str | None = None
    """The repository's web address, for links in report.md (commit, PR, compare range);
    default: from the clone's `origin` remote, when it is a GitHub or GitLab address."""

    @field_validator("url")
    @classmethod
    def _http_only(cls, url: str | None) -> str | None:
        if url is not None and not safe_url(url):
            raise ValueError(f"not an http(s) address of a repository: {url!r}")
        return url


def _check_placeholders(templates: list[str], key: str, allowed: frozenset[str]) -> None:
    for i, arg in enumerate(templates):
        for field in template_fields(arg, f"{key}.{i}"):
            if field not in allowed:
                known = ", ".join("{" + p + "}" for p in sorted(allowed))
                raise ValueError(f"unknown placeholder '{{{field}}}' (known: {known})")


class _ServerBase(_Strict):
    ready_timeout: float = Field(default=600.0, gt=0, allow_inf_nan=False)
    """Seconds to wait for /health and /v1/models before the build is untestable."""
    request_timeout: float = Field(default=120.0, gt=0, allow_inf_nan=False)
    """Seconds one request to the server may take."""
    max_reply_mb: float = Field(default=32.0, gt=0, le=4096, allow_inf_nan=False)
    """The most MiB read of one reply; a longer reply fails its check, with that as evidence."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment; `${VAR}` takes VAR from the caller. The report's server command
    shows the values, but a secret's (a secret-like name, a `${VAR}`, a login in a URL)."""
    model: str | None = None
    """Model name for requests; default: the first one /v1/models lists."""
    collect_env: list[str] | None = None
    """What reports the candidate's environment, run where its server runs (the build's
    python, inside the container, on the allocated node) while it starts; its output is
    kept per probe (collect_env.txt) and its versions and GPUs are in the fingerprint.
    Default: `python -m vllm.collect_env` with the candidate's python (vLLM's issue
    template asks for it); `[]`: none. `{commit}`, `{short}`, `{python}`, `{build}`."""

    @field_validator("collect_env")
    @classmethod
    def _collect_placeholders(cls, argv: list[str] | None) -> list[str] | None:
        if argv is not None:
            _check_placeholders(argv, "server.collect_env", COLLECT_PLACEHOLDERS)
        return argv


class _SlotGpus(_Strict):
    slot_gpus: list[list[str]] | None = None
    """The GPUs of each slot on one host, e.g. `[[0,1,2,3],[4,5,6,7]]` for `parallel: 2`
    on an 8-GPU node (a process gets CUDA_VISIBLE_DEVICES and `{gpus}`, a container its
    device ids); default: the host's GPUs split in `parallel` equal parts, else refused."""

    @field_validator("slot_gpus", mode="before")
    @classmethod
    def _ids_as_text(cls, value: Any) -> Any:
        """YAML reads `[[0, 1], [2, 3]]` as numbers; device ids are text (`GPU-5b2e...`)."""
        if not isinstance(value, list):
            return value
        return [
            [str(d) if isinstance(d, int) and not isinstance(d, bool) else d for d in v]
            if isinstance(v, list)
            else v
            for v in value
        ]

    @field_validator("slot_gpus")
    @classmethod
    def _own_devices(cls, slots: list[list[str]] | None) -> list[list[str]] | None:
        seen: set[str] = set()
        for i, devices in enumerate(slots or []):
            if not devices or any(not d.strip() for d in devices):
                raise ValueError(f"slot {i}: give it at least one device id")
            twice = sorted((seen & set(devices)) | {d for d in devices if devices.count(d) > 1})
            if twice:
                raise ValueError(f"device {', '.join(twice)} is given twice: slots never share one")
            seen |= set(devices)
        return slots


class ProcessServerConfig(_ServerBase, _SlotGpus):
    """A local command per candidate."""

    launcher: Literal["process"] = "process"
    """`process`: the server runs as a local process group."""
    command: list[str] = Field(min_length=1)
    """argv template; `{commit}`, `{short}`, `{port}`, `{gpus}` (the slot's devices, comma
    separated) are filled in. Never run through a shell."""
    cwd: str | None = None
    """Working folder of the server (relative to the config file); default: the config's folder."""

    @field_validator("command")
    @classmethod
    def _placeholders(cls, command: list[str]) -> list[str]:
        _check_placeholders(command, "server.command", PROCESS_PLACEHOLDERS)
        return command


class UlimitConfig(_Strict):
    soft: int
    """The soft limit."""
    hard: int
    """The hard limit."""


class PrefetchConfig(_Strict):
    """Pulling the images that could be probed next while one probe runs."""

    enabled: bool = True
    """Pull the images of the candidates that could be probed next."""
    disk_budget_gb: float = Field(default=100.0, ge=0, allow_inf_nan=False)
    """Prefetched images may take at most this much disk at a time."""


class RegistryConfig(_Strict):
    """Credentials for the registry's manifest API (Docker Hub works anonymously)."""

    username: str | None = None
    """The registry login; `${VAR}` takes VAR from the caller."""
    password: str | None = None
    """`${VAR}` takes VAR from the caller; never written out."""


class DockerServerConfig(_ServerBase, _SlotGpus):
    """One container image per candidate, through the Docker engine."""

    launcher: Literal["docker"]
    """`docker`: one container per probe, on a Docker engine."""
    image: str
    """Image template, e.g. `vllm/vllm-openai:nightly-{commit}` (`{commit}`, `{short}`)."""
    docker_hosts: list[str] = Field(default_factory=list)
    """Engines to run probes on, a slot each in turn (`unix:///var/run/docker.sock`,
    `ssh://gpu-node-2`, `tcp://10.0.0.5:2376`); default: DOCKER_HOST, else the local one."""
    args: list[str] = Field(default_factory=list)
    """Arguments after the entrypoint (`vllm serve` flags); `{commit}`, `{short}`, `{port}`,
    `{image}` (the image reference the candidate runs)."""
    port: int = Field(default=8000, gt=0, lt=65536)
    """The port the server listens on inside the container."""
    gpus: Literal["all"] | int | list[str] | None = None
    """`all`, a count, or device ids: becomes the container's device requests."""
    ipc: str | None = None
    """IPC mode, usually `host` for vLLM's shared memory."""
    shm_size: str | None = None
    """Size of /dev/shm, e.g. `16g`."""
    volumes: list[str] = Field(default_factory=list)
    """`HOST:CONTAINER[:ro]`; relative host paths are relative to the config file."""
    entrypoint: list[str] | None = None
    """Replaces the image's entrypoint; default: the image's."""
    user: str | None = None
    """The user the container runs as (`uid[:gid]`); default: the image's."""
    ulimits: dict[str, int | UlimitConfig] = Field(default_factory=dict)
    """e.g. `{memlock: -1, stack: 67108864}`."""
    network_mode: str | None = None
    """`host` publishes nothing: the server then listens on `{port}`, a free port on the node."""
    pull: Literal["missing", "always", "never"] = "missing"
    """When to pull an image: only when not in the engine, always, or never."""
    stop_timeout: float = Field(default=30.0, ge=0, allow_inf_nan=False)
    """Seconds between SIGTERM and SIGKILL when a container is stopped."""
    init: bool = True
    """Run an init as PID 1 (Docker's `--init`), so a server that ignores SIGTERM as PID 1
    still stops when the container is stopped."""
    prefetch: PrefetchConfig = Field(default_factory=PrefetchConfig)
    """Pulling the next probes' images while one runs."""
    registry: RegistryConfig = Field(default_factory=RegistryConfig)
    """Credentials for the registry's manifest API (tags, digests)."""

    @field_validator("image")
    @classmethod
    def _image_placeholders(cls, image: str) -> str:
        _check_placeholders([image], "server.image", IMAGE_PLACEHOLDERS)
        return image

    @field_validator("args")
    @classmethod
    def _args_placeholders(cls, args: list[str]) -> list[str]:
        _check_placeholders(args, "server.args", DOCKER_ARG_PLACEHOLDERS)
        return args


SLURM_PLACEHOLDERS = (PROCESS_PLACEHOLDERS - {"gpus"}) | {"head", "node_rank", "nnodes"}
"""On a Slurm probe's nodes: the head node's host name, this node's rank, the node count."""
HOST_PLACEHOLDERS = frozenset({"node"})
"""`server.host` (Slurm): the head node's Slurm name, known once its job runs."""


class SlurmServerConfig(ProcessServerConfig):
    """One Slurm job per candidate: `sbatch`, followed with `squeue`/`scontrol`, ended with
    `scancel` on every exit path. The command runs on the allocated node(s)."""

    launcher: Literal["slurm"]  # type: ignore[assignment]
    """`slurm`: one job per probe (`sbatch`), on one or several nodes."""
    partition: str | None = None
    """`--partition`; default: the cluster's."""
    nodes: int = Field(default=1, ge=1, le=64)
    """Nodes per probe (two for DP across two 4-GPU GB200 nodes)."""
    gpus_per_node: int | None = Field(default=None, ge=1)
    """`--gpus-per-node`."""
    gres: str | None = None
    """`--gres`, e.g. `gpu:b300:8`, where the cluster wants that instead of gpus_per_node."""
    time: str | None = None
    """The job's time limit, as sbatch takes it (`02:00:00`)."""
    account: str | None = None
    """`--account`; default: yours."""
    exclusive: bool = False
    """`--exclusive`: the job's nodes are shared with no other job."""
    sbatch_args: list[str] = Field(default_factory=list)
    """More `sbatch` options, one per item (`--qos=high`, `--constraint=gb200`)."""
    worker_command: list[str] | None = None
    """What nodes other than the head run in a multi-node probe (`--headless` ...);
    default: `command`."""
    container_image: str | None = None
    """Run the command in this image through `srun --container-image` (pyxis/enroot)."""
    container_mounts: list[str] = Field(default_factory=list)
    """pyxis `--container-mounts` (`SRC:DST[:FLAGS]`), with `container_image`."""
    port: int | None = Field(default=None, ge=1, le=65535)
    """The server's port on the node; default: a free port of this host (one per probe)."""
    host: str = "{node}"
    """How to reach the head node from here; `{node}` is its Slurm name (`{node}-ib0`)."""
    pending_timeout: float = Field(default=3600.0, gt=0, allow_inf_nan=False)
    """Seconds a job may wait in PENDING before it is cancelled; the probe is then skip."""
    retries: int = Field(default=1, ge=0, le=10)
    """Resubmits (excluding the node) after NODE_FAIL, PREEMPTED, TIMEOUT or a boot failure."""

    @field_validator("command", "worker_command")
    @classmethod
    def _placeholders(cls, command: list[str] | None) -> list[str] | None:  # type: ignore[override]
        if command is not None:
            _check_placeholders(command, "server.command", SLURM_PLACEHOLDERS)
        return command

    @field_validator("slot_gpus")
    @classmethod
    def _no_slot_gpus(cls, slots: list[list[str]] | None) -> None:
        if slots is not None:
            raise ValueError("each Slurm probe has its own allocation (gpus_per_node, gres)")
        return None

    @field_validator("container_image")
    @classmethod
    def _image(cls, image: str | None) -> str | None:
        if image is not None:
            _check_placeholders([image], "server.container_image", IMAGE_PLACEHOLDERS)
        return image

    @field_validator("host")
    @classmethod
    def _host(cls, host: str) -> str:
        _check_placeholders([host], "server.host", HOST_PLACEHOLDERS)
        return host


ServerConfig = Annotated[
    ProcessServerConfig | DockerServerConfig | SlurmServerConfig, Field(discriminator="launcher")
]


MAX_TOKENS = 2**20
"""No completion budget above this: past any model's context, so a typo, not a wish."""

CHAT_PROMPTS = (
    "hello how are you",
    "Write two sentences about the sea.",
    "Explain in a few sentences why the sky is blue.",
)
"""Short everyday prompts the canary and the logprobs check send by default."""


RESERVED_BODY = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "temperature",
        "top_p",
        "seed",
        "logprobs",
        "top_logprobs",
        "return_token_ids",
        "return_tokens_as_token_ids",
        "stream",
    }
)
"""Request fields a check sets itself; `extra_body` may not override them."""
MAX_TOKENS_CAP = 16384
"""Default budget cap: the good build's answers are asked again, doubling, up to this."""


class _Asks(_Strict):
    """How a check's requests are shaped (every check has these)."""

    max_tokens: int = Field(default=256, gt=0, le=MAX_TOKENS)
    """The first token budget per prompt (reasoning and content share it)."""
    max_tokens_cap: int = Field(default=MAX_TOKENS_CAP, gt=0, le=MAX_TOKENS)
    """While the good build's answer is cut, the budget doubles up to this."""
    chat_template_kwargs: dict[str, Any] | None = None
    """Passed to vLLM's chat template, e.g. {"enable_thinking": false}."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """More request fields, sent as they are (e.g. {"reasoning_effort": "low"})."""

    @field_validator("extra_body")
    @classmethod
    def _not_reserved(cls, body: dict[str, Any]) -> dict[str, Any]:
        taken = sorted(RESERVED_BODY & body.keys())
        if taken:
            raise ValueError(f"'{taken[0]}' is set by the check itself")
        return body

    @field_validator("extra_body", "chat_template_kwargs")
    @classmethod
    def _json(cls, body: dict[str, Any] | None) -> dict[str, Any] | None:
        wrong = not_json(body)
        if wrong is not None:
            raise ValueError(f"not JSON: {wrong}")
        return body

    @model_validator(mode="after")
    def _cap_above_start(self) -> _Asks:
        if self.max_tokens_cap < self.max_tokens:
            raise ValueError(
                f"max_tokens_cap {self.max_tokens_cap} is below max_tokens {self.max_tokens}"
            )
        return self

    def extra(self) -> dict[str, Any]:
        """The fields every request of this check carries beside the prompt."""
        fields = dict(self.extra_body)
        if self.chat_template_kwargs is not None:
            fields["chat_template_kwargs"] = self.chat_template_kwargs
        return fields


class CanaryConfig(_Asks):
    """Degeneration canary on content and reasoning."""

    type: Literal["canary"]
    """`canary`: degenerate text or null content on short fixed prompts."""
    prompts: list[str] = Field(default_factory=lambda: list(CHAT_PROMPTS), min_length=1)
    """Short fixed prompts sent with greedy sampling."""


class ExpectCase(_Strict):
    """A prompt and a regular expression its content must match."""

    prompt: str
    """The prompt, sent with greedy sampling."""
    match: str
    """A regular expression the answer's content must match (re.search)."""

    @field_validator("match")
    @classmethod
    def _regex(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"not a regular expression ({exc})") from exc
        return pattern


class ExpectConfig(_Asks):
    """Prompts with known answers."""

    type: Literal["expect"]
    """`expect`: prompts with a known answer."""
    cases: list[ExpectCase] = Field(
        default_factory=lambda: [
            ExpectCase(prompt="What is 2+2? Reply with the number only.", match=r"^\s*4\b")
        ],
        min_length=1,
    )
    """The prompts and the pattern each answer must match."""
    max_tokens: int = Field(default=64, gt=0, le=MAX_TOKENS)
    """The first token budget per prompt (reasoning and content share it)."""


class LogprobsConfig(_Asks):
    """Token ids and top-k logprobs against the golden; thresholds from calibration.

    Its budget never grows: it compares the first `max_tokens` tokens, reasoning included."""

    type: Literal["logprobs"]
    """`logprobs`: token ids and top-k logprobs against the golden."""
    prompts: list[str] = Field(
        default_factory=lambda: [*CHAT_PROMPTS, "Name three colours."], min_length=1
    )
    """The prompts whose greedy tokens are compared, sent as chat messages."""
    max_tokens: int = Field(default=32, gt=0, le=MAX_TOKENS)
    """Tokens compared per prompt."""
    top_k: int = Field(default=5, ge=1, le=20)
    """Alternatives recorded per position (`top_logprobs`)."""
    max_abs_delta: float | None = Field(default=None, gt=0)
    """|Δlogprob| allowed on agreeing tokens; default: from calibration."""
    teacher_mean_abs_delta: float | None = Field(default=None, gt=0)
    """Mean |Δlogprob| allowed on the teacher-forced golden text; default: from calibration."""
    topk_max_abs_delta: float | None = Field(default=None, gt=0)
    """|Δlogprob| allowed on top-k alternatives where the chosen tokens agree."""


class EvalConfig(_Asks):
    """A small GSM8K-format accuracy eval against the golden's accuracy."""

    type: Literal["eval"]
    """`eval`: GSM8K-format accuracy against the golden's."""
    path: str | None = None
    """GSM8K-format JSONL or parquet (`question`, `answer` ending in `#### N`), relative to the
    config; default: the bundled set."""
    dataset: str | None = None
    """A Hugging Face dataset, e.g. `openai/gsm8k` (read through `datasets` and its cache)."""
    dataset_config: str | None = None
    """Its config name (`main` for openai/gsm8k, the default there)."""
    split: str = "test"
    """The dataset split to read (with `dataset`)."""
    format: Literal["instruct", "vllm"] = "instruct"
    """Prompt and extraction: `instruct` ("... end with 'The answer is N.'") or `vllm`
    (vLLM's own few-shot "Question: ...\nAnswer:" prompts, the last integer)."""
    shots: int = Field(default=5, ge=0, le=32)
    """Worked examples before each question in the `vllm` format."""
    limit: int | None = Field(default=None, gt=0)
    """The first this-many problems only; default: all."""
    concurrency: int = Field(default=8, ge=1, le=256)
    """Requests in flight at once."""
    tolerance: float | None = Field(default=None, ge=0, le=1)
    """Accuracy drop allowed beyond chance (which the paired test judges); default 0."""
    null_share_jump: float = Field(default=0.1, ge=0, le=1)
    """Rise allowed in the share of answers with null content."""
    min_accuracy: float | None = Field(default=None, ge=0, le=1)
    """An absolute floor beside the golden (a vLLM gsm8k config's threshold - tolerance)."""

    download: bool = False
    """Fetch `dataset` from the Hugging Face Hub when the node's cache lacks it; default: the
    cache or a local folder only, so a misspelt name is one line, not a minute of retries."""

    @model_validator(mode="after")
    def _one_source(self) -> EvalConfig:
        if self.path is not None and self.dataset is not None:
            raise ValueError("give path or dataset, not both")
        return self

    @field_validator("dataset_config", "split", "download")
    @classmethod
    def _with_dataset(cls, value: Any, info: ValidationInfo) -> Any:
        if info.data.get("dataset") is None:  # fields are checked in order: dataset is known
            raise ValueError("goes with `dataset`, and no dataset is given")
        return value


CheckConfig = Annotated[
    CanaryConfig | ExpectConfig | LogprobsConfig | EvalConfig | LmEvalConfig | VllmEvalConfig,
    Field(discriminator="type"),
]


class ProbeConfig(_Strict):
    """How each candidate is judged."""

    repeats: Annotated[int, Field(ge=1, le=10)] | Literal["auto"] = "auto"
    """`auto`: the check suite runs once per probe, and a verdict that contradicts a
    neighbour's (good after bad) is probed again, on a new server, before it is used; a build
    whose probes disagree is flaky (unsure). N: the suite runs N times on one server, runs
    that disagree make the verdict `unsure`, and no probe is repeated."""

    @field_validator("repeats", mode="before")
    @classmethod
    def _auto_or_count(cls, value: Any) -> Any:
        if isinstance(value, str) and value != "auto":
            raise ValueError("a number of runs (1 to 10) or auto")
        return value

    @property
    def runs(self) -> int:
        """Runs of the check suite on one server."""
        return 1 if self.repeats == "auto" else self.repeats

    @property
    def reprobe(self) -> bool:
        """Whether a verdict that contradicts a neighbour's is probed again."""
        return self.repeats == "auto"


LOCALIZE_PROMPT = "The capital of France is Paris. The capital of Italy is"


class LocalizeConfig(_Strict):
    """Where in the model: after a run finds its culprit, the last good and first bad builds
    run once more with llm-bisect's worker extension (vLLM, eager mode)."""

    enabled: bool = True
    """Localise the culprit's effect after a run finds it."""
    prompt: str = Field(default=LOCALIZE_PROMPT, min_length=1)
    """Its tokens and the good build's greedy continuation are fed to both builds."""
    tokens: int = Field(default=16, ge=0, le=512)
    """How many tokens the good build continues the prompt with (teacher-forced in both)."""
    sample: int = Field(default=32, ge=1, le=4096)
    """Values kept per module and token position (the same indices in both builds)."""
    tolerance: float = Field(default=1e-3, gt=0, lt=1, allow_inf_nan=False)
    """The least relative difference that counts (more where the good build differs from
    itself on a second run)."""
    save_tensors: bool = False
    """Also save every module's full input and output (process launcher: under
    DIR/localize/<short>/tensors)."""

    @model_validator(mode="before")
    @classmethod
    def _from_bool(cls, value: Any) -> Any:
        return {"enabled": value} if isinstance(value, bool) else value


def _default_checks() -> list[
    CanaryConfig | ExpectConfig | LogprobsConfig | EvalConfig | LmEvalConfig | VllmEvalConfig
]:
    return [
        CanaryConfig(type="canary"),
        ExpectConfig(type="expect"),
        LogprobsConfig(type="logprobs"),
        EvalConfig(type="eval"),
    ]


COMPILED = (
    "CMakeLists.txt",
    "setup.py",
    "pyproject.toml",
    "cmake/*",
    "csrc/*",
    "rust/*",
    "requirements/*",
    "*.cu",
    "*.cuh",
    "*.cpp",
    "*.cc",
    "*.c",
    "*.h",
    "*.hpp",
    "*.cmake",
    "!tests/*",
    "!docs/*",
    "!examples/*",
    "!benchmarks/*",
    "!requirements/test/*",
    "!requirements/dev.txt",
    "!requirements/lint.txt",
    "!requirements/docs.*",
)
"""Paths whose change needs a compiled build (a glob over the whole path; `!` leaves out;
the last match decides): the root's build files, csrc/, cmake/, the Rust frontend, the
requirements, C/C++/CUDA sources anywhere but in tests, docs, examples and benchmarks."""
_OTHER_DEVICES = ("rocm", "xpu", "tpu")
NOT_BUILT_BY: dict[str, tuple[str, ...]] = {
    "any": (),
    "cuda": (
        "!csrc/cpu/*",
        "!csrc/rocm/*",
        "!cmake/cpu_extension.cmake",
        "!requirements/cpu*",
        "!requirements/build/cpu.txt",
        *(f"!requirements/{d}*" for d in _OTHER_DEVICES),
        *(f"!requirements/build/{d}.txt" for d in _OTHER_DEVICES),
    ),
    "rocm": (
        "!csrc/cpu/*",
        "!cmake/cpu_extension.cmake",
        "!requirements/cpu*",
        "!requirements/build/cpu.txt",
        "!requirements/cuda.txt",
        "!requirements/build/cuda.txt",
        "!requirements/xpu*",
        "!requirements/tpu*",
    ),
    "cpu": (
        "!*.cu",
        "!*.cuh",
        "!csrc/rocm/*",
        "!requirements/cuda.txt",
        "!requirements/build/cuda.txt",
        *(f"!requirements/{d}*" for d in _OTHER_DEVICES),
        *(f"!requirements/build/{d}.txt" for d in _OTHER_DEVICES),
    ),
}
"""What a build for each target does not compile: a CUDA build is not changed by
csrc/cpu/, a CPU build not by *.cu."""
Target = Literal["any", "cuda", "rocm", "cpu"]


def compiled_patterns(target: str) -> list[str]:
    """The compiled-sources rule of a target (`any`: everything any target builds)."""
    return [*COMPILED, *NOT_BUILT_BY[target]]


class ImageStrategy(_Strict):
    """Today's behaviour: the launcher's image template (Docker launcher only)."""

    type: Literal["image"]
    """`image`: the launcher's image template names the commit's image."""


class OverlayStrategy(_Strict):
    """The commit's files written over a precompiled install of `package`: in `venv` or
    `image` (with its `base_commit`), or (`base: nearest`) over the build of its nearest
    ancestor that a strategy before this one has a precompiled artifact of."""

    type: Literal["overlay"]
    """`overlay`: the commit's files over a precompiled install."""
    venv: str | None = None
    """Process launcher: a venv whose site-packages holds the precompiled package (relative
    to the config)."""
    image: str | None = None
    """Docker launcher: the base image holding the precompiled package; each build is an
    image derived from it."""
    base: Literal["nearest"] | None = None
    """`nearest`: no fixed install; the base is the candidate's nearest first-parent
    ancestor with a wheel, an image or a cached build of the strategies before this one (a
    release branch's commits: the wheel of its branch point on main)."""
    python: str | None = None
    """With `image`: the image's interpreter (default `python3`)."""
    package: str = "vllm"
    """The installed package; the repository's folder of the same name maps onto it."""
    base_commit: str | None = None
    """The commit the installed package was built from (a ref); with `image`, default: the
    commit the base image names (label, env, tag or version, as for an image end)."""
    target: Target = "any"
    """What the precompiled install was built for (`cuda`, `rocm`, `cpu`): only the sources
    that target compiles stop an overlay (`any`: every one)."""
    compiled: list[str] | None = None
    """Glob patterns over whole paths (`!` leaves out, the last match decides) of what an
    overlay cannot carry; default: the target's. Taken as written: it replaces the default."""

    @model_validator(mode="after")
    def _one_base(self) -> OverlayStrategy:
        if self.base == "nearest":
            given = [k for k in ("venv", "image", "base_commit") if getattr(self, k) is not None]
            if given:
                raise ValueError(
                    f"overlay: base: nearest takes its base from the strategies before it; "
                    f"leave out {given[0]}"
                )
            return self
        if (self.venv is None) == (self.image is None):
            raise ValueError(
                "overlay takes one of venv (launcher: process) or image (docker), or base: nearest"
            )
        if self.venv is not None and self.base_commit is None:
            raise ValueError("overlay: base_commit is the commit the venv's package was built from")
        if self.python is not None and self.image is None:
            raise ValueError("overlay: python is the image's interpreter; with venv, leave it out")
        return self

    def patterns(self) -> list[str]:
        """The compiled-sources rule in force."""
        return list(self.compiled) if self.compiled is not None else compiled_patterns(self.target)


class WheelStrategy(_Strict):
    """The commit's wheel from a per-commit PEP 503 index, installed by uv into a fresh venv."""

    type: Literal["wheel"]
    """`wheel`: the commit's wheel from a per-commit index."""
    index: str
    """URL template of the commit's index: `{commit}`, `{short}`; `${VAR}` takes VAR from the
    caller (a login: `https://${USER}:${TOKEN}@host/{commit}/`, never written out)."""
    package: str = "vllm"
    """The distribution to install from the index."""
    base_venv: str | None = None
    """A venv whose packages the build reuses (a .pth file); only the package is installed."""
    python: str | None = None
    """The build venv's interpreter; default: base_venv's, else the one llm-bisect runs on.
    With `image`: the image's interpreter (default `python3`)."""
    image: str | None = None
    """Docker launcher: the base image the wheel is installed into (its dependencies are
    reused); each build is an image derived from it."""
    system_site_packages: bool = False
    """Give the build venv the interpreter's own site-packages too."""

    @field_validator("index")
    @classmethod
    def _index_placeholders(cls, index: str) -> str:
        _check_placeholders([_ENV_REF.sub("", index)], "index", IMAGE_PLACEHOLDERS)
        return index


class CommandStrategy(_Strict):
    """Your own build: `run` once per commit; `{out}` is the build's folder."""

    type: Literal["command"]
    """`command`: your own build command."""
    run: list[str] = Field(min_length=1)
    """argv template: `{commit}`, `{short}`, `{out}`; never run through a shell."""
    timeout: float = Field(default=3600.0, gt=0, allow_inf_nan=False)
    """Seconds a build may take; past them the candidate is skip."""

    @field_validator("run")
    @classmethod
    def _placeholders(cls, run: list[str]) -> list[str]:
        _check_placeholders(run, "run", frozenset({"commit", "short", "out"}))
        return run


Strategy = Annotated[
    ImageStrategy | WheelStrategy | OverlayStrategy | CommandStrategy,
    Field(discriminator="type"),
]
BUILD_TYPES = "image, wheel, overlay, command"


class BuildCacheConfig(_Strict):
    dir: str = "~/.cache/llm-bisect/builds"
    """Where builds are kept and reused across runs."""
    disk_budget_gb: float = Field(default=200.0, gt=0, allow_inf_nan=False)
    """Least recently used builds are removed past this; never the one in use."""


class BuildConfig(_Strict):
    """How a candidate becomes runnable: strategies tried in order, the first that applies."""

    strategies: list[Strategy] = Field(min_length=1)
    """Tried in order per candidate; a candidate none applies to is skip."""
    cache: BuildCacheConfig = Field(default_factory=BuildCacheConfig)
    """The folder finished builds are kept in, and its disk budget."""


class Config(_Strict):
    """A whole llm-bisect config."""

    candidates: CandidatesConfig
    """Where the candidates come from: the clone and the two ends."""
    server: ServerConfig
    """How a build's server starts: `launcher` process, docker or slurm."""
    checks: list[CheckConfig] = Field(default_factory=_default_checks, min_length=1)
    """What each probe asks the server; default: canary, expect, logprobs and eval."""
    probe: ProbeConfig = Field(default_factory=ProbeConfig)
    """How each candidate is judged: `repeats`."""
    regress: Literal["semantic", "crash", "any"] = "semantic"
    """What counts as a regression: failed checks (semantic), a crash, 5xx or reset during
    checks (crash), or both (any). A build that never starts is skip under every policy."""
    golden: str | None = None
    """A golden file (relative to the config); default for `run`: recorded from the good end."""
    build: BuildConfig | None = None
    """How candidates become runnable (overlay, command); default: as the launcher starts them."""
    localize: LocalizeConfig = Field(default_factory=LocalizeConfig)
    """`false`: no localisation probes after a run finds its culprit."""
    parallel: int = Field(default=1, ge=1, le=64)
    """The most probes in flight at once: k slots split the range into k+1 parts per round
    (local servers for the process launcher, containers on the engine for Docker)."""

    @model_validator(mode="after")
    def _build_fits_the_launcher(self) -> Config:
        kinds = [s.type for s in self.build.strategies] if self.build else []
        strategies = self.build.strategies if self.build else []
        docker = isinstance(self.server, DockerServerConfig)
        if docker and self.localize.save_tensors:
            raise ValueError("localize.save_tensors: the process launcher's only")
        for i, strategy in enumerate(strategies):
            key = f"build.strategies.{i}"
            if isinstance(strategy, CommandStrategy) and docker:
                raise ValueError(f"{key}: command builds run with launcher: process")
            if isinstance(strategy, ImageStrategy) and not docker:
                raise ValueError(f"{key}: image builds need launcher: docker")
            if isinstance(strategy, OverlayStrategy) and strategy.base == "nearest":
                kinds_before = {s.type for s in strategies[:i]} - {"overlay"}
                fixed = any(isinstance(s, OverlayStrategy) and s.base is None
                            for s in strategies[:i])  # fmt: skip
                if not kinds_before and not fixed:
                    raise ValueError(
                        f"{key}: base: nearest needs a strategy before it (image, wheel, "
                        "command or an overlay with a fixed base) whose builds it starts from"
                    )
                if strategy.python is not None and not docker:
                    raise ValueError(f"{key}: python is the base image's interpreter (docker)")
                continue
            if isinstance(strategy, WheelStrategy | OverlayStrategy):
                image = strategy.image is not None
                if docker and not image:
                    raise ValueError(
                        f"{key}: with launcher: docker a {strategy.type} build needs image: "
                        "(the base image it is applied to)"
                    )
                if image and not docker:
                    raise ValueError(f"{key}: image: is for launcher: docker")
        if isinstance(self.server, DockerServerConfig):
            return self
        used = {f for arg in self.server.command for f in template_fields(arg, "server.command")}
        if used & BUILD_PLACEHOLDERS and not kinds:
            raise ValueError("server.command: {python} and {build} need build.strategies")
        return self


def template_fields(template: str, key: str) -> list[str]:
    """The placeholder names in a `{...}` template; `{{` and `}}` are literal braces. A
    placeholder is a bare name: `{port:d}` or `{commit!r}` would fail only when filled."""
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"malformed template {template!r} ({exc})") from exc
    for _, field, spec, conversion in parts:
        if field is not None and (spec or conversion):
            written = field + (f"!{conversion}" if conversion else "")
            written += f":{spec}" if spec else ""
            raise ValueError(f"placeholder '{{{written}}}' takes no conversion or format")
    return [f for _, f, _, _ in parts if f is not None]


def not_json(value: Any, where: str = "") -> str | None:
    """What keeps a value parsed from YAML from being sent as JSON (`x.1.y is nan`), or None.

    YAML has `.nan`, `.inf`, dates, binary and sets; a request body holds none of them."""
    here = where or "the value"
    if value is None or isinstance(value, bool | int | str):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{here} is {value} (only finite numbers)"
    if isinstance(value, list):
        for i, item in enumerate(value):
            if (wrong := not_json(item, f"{where}.{i}" if where else str(i))) is not None:
                return wrong
        return None
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                return f"{here} has a key {k!r} that is not a string"
            if (wrong := not_json(item, f"{where}.{k}" if where else k)) is not None:
                return wrong
        return None
    return f"{here} is {type(value).__name__}"


def fill(template: str, values: Mapping[str, str]) -> str:
    """Fill a template validated by `template_fields`."""
    return template.format_map(dict(values))


def expand_value(value: str, environ: Mapping[str, str], key: str) -> str:
    """Expand `${VAR}` in one value from the caller's environment; `key` names it in errors."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in environ:
            raise ConfigError(f"{key}: ${{{name}}} is not set in the environment")
        return environ[name]

    return _ENV_REF.sub(sub, value)


def expand_template(template: str, environ: Mapping[str, str], key: str) -> str:
    """Expand `${VAR}` in a `{...}` template; the values' own braces stay literal."""
    parts = _ENV_REF.split(template)  # text, name, text, name, ..., text
    for i in range(1, len(parts), 2):
        value = expand_value("${" + parts[i] + "}", environ, key)
        parts[i] = value.replace("{", "{{").replace("}", "}}")
    return "".join(parts)


def expand_env(env: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """Expand `${VAR}` in server.env values from the caller's environment."""
    return {k: expand_value(v, environ, f"server.env.{k}") for k, v in env.items()}


def expand_paths(config: Config, environ: Mapping[str, str], repo_given: bool = False) -> Config:
    """The config with `${VAR}` in its paths (candidates.repo, golden, server.cwd) expanded
    from the caller's environment, as a CI job names its checkout (`${GITHUB_WORKSPACE}/vllm`);
    a variable that is not set is a ConfigError naming the key. `repo_given`: `--repo` names
    the clone, so candidates.repo is not read (another CI's variable need not be set)."""
    update: dict[str, Any] = {}
    if not repo_given:
        repo = expand_value(config.candidates.repo, environ, "candidates.repo")
        update["candidates"] = config.candidates.model_copy(update={"repo": repo})
    if config.golden is not None:
        update["golden"] = expand_value(config.golden, environ, "golden")
    server = config.server
    if isinstance(server, ProcessServerConfig) and server.cwd is not None:
        cwd = expand_value(server.cwd, environ, "server.cwd")
        update["server"] = server.model_copy(update={"cwd": cwd})
    return config.model_copy(update=update)


CHECK_TYPES = "canary, expect, logprobs, eval, lm_eval, vllm-eval"
_SECRET_NAME = re.compile(
    r"(?:^|_)(?:TOKEN|SECRET|PASSWORD|PASSWD|PASS|API_?KEY|KEY|CREDENTIALS?|AUTH)(?:$|_)", re.I
)
"""Names of secrets: HF_TOKEN, AWS_SECRET_ACCESS_KEY, OPENAI_API_KEY; not TOKENIZERS_PARALLELISM."""


def secret_names(env: Mapping[str, str]) -> list[str]:
    """Env entries whose values are secrets: taken from the caller (`${VAR}`) or named like one.

    Literal values such as `VLLM_ATTENTION_BACKEND: FLASHINFER` stay readable in logs.
    """
    return sorted(k for k, v in env.items() if _ENV_REF.search(v) or _SECRET_NAME.search(k))


CALLER_SECRET_MIN = 8
"""A caller's variable named like a secret is masked from this length: real tokens are long,
while `HF_HUB_DISABLE_IMPLICIT_TOKEN=true` must not mask every `true`."""


def caller_secret_names(environ: Mapping[str, str]) -> list[str]:
    """The caller's variables named like secrets (a process server inherits them)."""
    return sorted(
        k for k, v in environ.items() if _SECRET_NAME.search(k) and len(v) >= CALLER_SECRET_MIN
    )


def _loc(loc: tuple[int | str, ...]) -> str:
    # pydantic puts the discriminator value into the location; users never wrote it.
    # "constrained-int": the branch of probe.repeats (a count or `auto`)
    tags = ("canary", "expect", "logprobs", "eval", "lm_eval", "vllm-eval", "process", "docker",
            "slurm", "constrained-int")  # fmt: skip
    parts = [str(p) for p in loc if p not in tags]
    return ".".join(parts)


def _one_line(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = _loc(tuple(err["loc"]))
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"{loc}: unknown key"
    if kind == "missing":
        return f"{loc}: required key is missing"
    if kind == "union_tag_invalid":
        ctx = err.get("ctx", {})
        tag = ctx.get("tag", err.get("input"))
        if ctx.get("discriminator") == "'launcher'":
            return f"{loc}.launcher: unknown launcher {tag!r} (known: process, docker, slurm)"
        if loc.startswith("build."):
            return f"{loc}: unknown build type {tag!r} (known: {BUILD_TYPES})"
        return f"{loc}: unknown check type {tag!r} (known: {CHECK_TYPES})"
    if kind == "union_tag_not_found":
        if loc.startswith("build."):
            return f"{loc}: a build strategy needs a 'type' ({BUILD_TYPES})"
        return f"{loc}: a check needs a 'type' ({CHECK_TYPES})"
    msg = str(err["msg"]).removeprefix("Value error, ")
    value = err.get("input")
    if not loc:  # a rule over the whole config: its message names the keys
        return msg
    if isinstance(value, dict | list) or value is None:
        return f"{loc}: {msg}"
    return f"{loc}: {msg}, got {value!r}"


def parse_config(data: Any) -> Config:
    """Validate parsed YAML; raise ConfigError with one line naming the key."""
    if not isinstance(data, dict):
        raise ConfigError("config: expected a mapping at the top level")
    server = data.get("server")
    if isinstance(server, dict) and "launcher" not in server:
        data = {**data, "server": {**server, "launcher": "process"}}
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc)) from None


MAX_CONFIG_BYTES = 16 * 2**20
"""The most bytes read of a config file: far past any real one."""


def load_config(path: Path) -> Config:
    """Read and validate a YAML config file."""
    try:
        text = read_capped(path, MAX_CONFIG_BYTES).decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        data = yaml.safe_load(text)
    except RecursionError:
        raise ConfigError(f"{path}: not valid YAML (nested too deep)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where}") from None
    return parse_config(data)


GOLDEN_NEUTRAL = frozenset(
    {
        "max_abs_delta",
        "teacher_mean_abs_delta",
        "topk_max_abs_delta",
        "tolerance",
        "null_share_jump",
        "concurrency",
        "download",
        "num_concurrent",
        "python",
        "thresholds",
        "timeout",
        "source",
        "min_accuracy",
    }
)
"""Check settings that judge against a golden, or say how fast or from where, without
shaping what it records: changing them keeps the golden."""
SERVER_SHAPE = frozenset(
    {"command", "worker_command", "image", "args", "entrypoint", "container_image", "env"}
)
"""What a server runs and with what environment; not where, how long or how it is reached."""


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def check_digest(check: CheckConfig) -> str:
    """A digest of the settings that shape a check's golden section (prompts, cases, budgets,
    request fields, the eval's source and format); thresholds are left out."""
    data = check.model_dump(mode="json", exclude_defaults=True, exclude=set(GOLDEN_NEUTRAL))
    return _digest({**data, "type": check.type})


def server_digest(server: ProcessServerConfig | DockerServerConfig) -> str:
    """A digest of how the server is started: its command (image, args, entrypoint) and its
    environment, where variables named like secrets count by name only. Timeouts, hosts and
    scheduling are left out; so is `model`, which a golden records apart."""
    data = server.model_dump(mode="json", include=set(SERVER_SHAPE), exclude_defaults=True)
    secret = set(secret_names(server.env))
    if "env" in data:
        data["env"] = {k: None if k in secret else v for k, v in data["env"].items()}
    return _digest(data)


def config_digest(config: Config) -> str:
    """A stable digest of what decides verdicts; env values are left out (secrets). Keys at
    their defaults are left out too, so a key a later llm-bisect adds does not turn a
    journal into "another config's"."""
    data = config.model_dump(mode="json", exclude_defaults=True)
    data.pop("localize", None)  # after the search: never a reason to start it again
    data["candidates"].pop("url", None)  # links in the report only
    data.pop("parallel", None)  # how many at once, and where, never change a verdict
    data["server"].pop("docker_hosts", None)
    data["server"].pop("slot_gpus", None)
    if "env" in data["server"]:
        data["server"]["env"] = sorted(data["server"]["env"])
    if "registry" in data["server"]:
        data["server"]["registry"].pop("password", None)
    blob = json.dumps(data, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()
