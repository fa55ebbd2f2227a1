"""The YAML config: schema, validation and the one-line errors users see.

Relative paths in a config are resolved against the folder holding the
config file, so a config and its repository can move together.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .errors import ConfigError
from .escape import safe_url
from .fingerprint import BATCH_INVARIANT_VAR
from .jsonvalue import Json
from .kinds import CHECKS, LAUNCHERS, STRATEGIES, StrategyRules, Tagged
from .posterior import EXACT, KNOWN_RATE, Policy
from .redact import MASK, Scrub, redact, url_credentials
from .secretnames import _SECRET_NAME, argv_secrets, secret_names
from .templates import _ENV_REF, ENV_REF, expand_value, template_fields
from .yamlfile import not_json, nul_at, placeholder_at, read_yaml

COLLECT_PLACEHOLDERS = frozenset({"commit", "short", "python", "build"})
"""What `server.collect_env` may name, whatever the launcher."""


class _Strict(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True
    )


Strict = _Strict
"""The base of every config model: a kind's model (launchers/*, builds/*, checks/*) too."""
_DEFERRED = ConfigDict(**_Strict.model_config, defer_build=True)
"""The models holding kind unions are built on first use: by then every kind module has
imported this one and registered its kind."""


class CandidatesConfig(_Strict):
    """Where the candidates come from: a local clone and the two ends."""

    repo: str
    """Path to a local git clone (relative to the config file; `${VAR}` from the environment;
    `--repo` overrides it)."""
    good: str
    """A ref that tests good (in --find-fix mode: the newer build that works); a day
    (YYYY-MM-DD, quoted or not) names that day's nightly."""
    bad: str
    """A ref that tests bad (in --find-fix mode: the older build that is broken); a day too."""
    coarse: bool = False
    """Coarse then fine: bisect first among candidates whose artifact is ready (an image, a
    published wheel, a cached build), then within the range left with any build."""
    later: list[str] = Field(default_factory=list)
    """Refs newer than the bad end, oldest first (a later release, a nightly): once the
    culprit is found, each is probed with the run's checks, to say where the regression
    ends; the newest good again gives the `--find-fix` command that finds the fix."""
    url: str | None = None
    """The repository's web address, for links in report.md (commit, PR, compare range);
    default: from the clone's `origin` remote, when it is a GitHub or GitLab address."""
    known_verdicts: str | None = None
    """A YAML or JSON file (relative to the config's folder) of verdicts known from elsewhere:
    a list of `{commit, verdict: good|bad, source, rate}` (a commit, ref or image tag as the
    ends are named; where it comes from, free text; its lie rate, default 0.1). Weighed at
    their own rates before the first start, they narrow the range before any server starts;
    the culprit and its parent are still probed here. Needs the posterior search (not
    `search.flake: 0`)."""

    @field_validator("good", "bad", mode="before")
    @classmethod
    def _a_day(cls, ref: Any) -> Any:
        """An unquoted YAML date (`good: 2026-08-09`, which YAML reads as a date) is that
        day's ref: its nightly (services/setup.py)."""
        return ref.isoformat() if isinstance(ref, date) and not isinstance(ref, datetime) else ref

    @field_validator("later", mode="before")
    @classmethod
    def _days(cls, refs: Any) -> Any:
        return [cls._a_day(r) for r in refs] if isinstance(refs, list) else refs

    @field_validator("url")
    @classmethod
    def _http_only(cls, url: str | None) -> str | None:
        if url is not None and not safe_url(url):
            raise ValueError(f"not an http(s) address of a repository: {url!r}")
        return url


class KnownVerdict(_Strict):
    """One verdict known from elsewhere (an entry of `candidates.known_verdicts`' file)."""

    commit: str = Field(min_length=1)
    """A commit, a ref or an image tag, resolved as the ends are."""
    verdict: Literal["good", "bad"]
    source: str = Field(min_length=1)
    """Where it comes from: `nightly CI eval 2026-08-10`, `alice by hand`, an earlier run."""
    rate: float = Field(default=KNOWN_RATE, gt=0, lt=0.5, allow_inf_nan=False)
    """How often such a verdict lies, both ways (default 0.1)."""


def read_known_verdicts(path: Path) -> list[KnownVerdict]:
    """The entries of a `candidates.known_verdicts` file (YAML or JSON: a list); ConfigError
    naming the file, the entry and its key for anything else."""
    key = f"candidates.known_verdicts: {path}"
    data = read_yaml(path, "candidates.known_verdicts")
    if not isinstance(data, list):
        raise ConfigError(f"{key}: expected a list of {{commit, verdict, source, rate}}")
    entries: list[KnownVerdict] = []
    for i, entry in enumerate(data):
        try:
            entries.append(KnownVerdict.model_validate(entry))
        except ValidationError as exc:
            raise ConfigError(f"{key}: entry {i}: {_one_line(exc)}") from None
    return entries


def _check_placeholders(templates: list[str], key: str, allowed: frozenset[str]) -> None:
    for i, arg in enumerate(templates):
        for field in template_fields(arg, f"{key}.{i}"):
            if field not in allowed:
                known = ", ".join("{" + p + "}" for p in sorted(allowed))
                raise ValueError(f"unknown placeholder '{{{field}}}' (known: {known})")


check_placeholders = _check_placeholders
"""Every placeholder in `templates` is one of `allowed` (ValueError naming it)."""


class ServerBase(_Strict):
    """What every launcher's config has; each launcher's model (launchers/*.py) adds its own."""

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
    launcher: str
    """The launcher's tag; each launcher's model narrows it to `Literal[tag]`."""

    @field_validator("collect_env")
    @classmethod
    def _collect_placeholders(cls, argv: list[str] | None) -> list[str] | None:
        if argv is not None:
            _check_placeholders(argv, "server.collect_env", COLLECT_PLACEHOLDERS)
        return argv


class SlotGpus(_Strict):
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


class CommandServerBase(ServerBase, SlotGpus):
    """A launcher that runs an argv template per candidate (process, slurm)."""

    command: list[str] = Field(min_length=1)
    """argv template; `{commit}`, `{short}`, `{port}`, `{gpus}` (the slot's devices, comma
    separated) are filled in. Never run through a shell."""
    cwd: str | None = None
    """Working folder of the server (relative to the config file); default: the config's folder."""


ServerConfig = Annotated[ServerBase, Tagged(LAUNCHERS)]
"""The `server:` section: the model of the launcher its `launcher` names (kinds.LAUNCHERS)."""


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
        "prompt",
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


class CheckBase(_Strict):
    """What every check's config is: its model (checks/*.py) has `type: Literal[tag]`."""

    if TYPE_CHECKING:  # declared by each check's model, after its request fields
        type: str


class Asks(CheckBase):
    """How a check's requests are shaped (every built-in check has these)."""

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
    def _cap_above_start(self) -> Asks:
        if self.max_tokens_cap < self.max_tokens:
            raise ValueError(
                f"max_tokens_cap {self.max_tokens_cap} is below max_tokens {self.max_tokens}"
            )
        return self

    def extra(self) -> dict[str, Json]:
        """The fields every request of this check carries beside the prompt."""
        fields = dict(self.extra_body)
        if self.chat_template_kwargs is not None:
            fields["chat_template_kwargs"] = self.chat_template_kwargs
        return fields


CheckConfig = Annotated[CheckBase, Tagged(CHECKS)]
"""One item of `checks:`: the model of the check its `type` names (kinds.CHECKS)."""


class EngineCacheConfig(_Strict):
    """The engine's compile and JIT caches, kept between probes (and runs) on each node:
    vLLM's torch.compile cache (VLLM_CACHE_ROOT), TorchInductor's (TORCHINDUCTOR_CACHE_DIR)
    and Triton's (TRITON_CACHE_DIR), FlashInfer's JIT (FLASHINFER_WORKSPACE_BASE) and
    DeepGEMM's (DG_JIT_CACHE_DIR), each a subfolder of `ROOT/<node>/slot-<k>`: one folder per
    node (its hostname; a Slurm job's resolved on its node) and per slot, so that two servers
    never write one folder at once (vLLM's compile cache is corrupted by concurrent writers
    on older versions; a slot runs one server at a time). On by default, under the user's
    cache (`$XDG_CACHE_HOME` or `~/.cache`, `/llm-bisect/engine-cache`); `engine_cache:
    false` turns it off. Each probe records whether its folder held entries before it started
    (result.json's fingerprint `engine_cache`, report.md's probe table).

    Safe across commits because each is keyed by what it compiled from: vLLM's
    torch_compile_cache folder by a hash of the config (compilation_config and the
    parts of vllm_config that change the graph), of vllm.envs' compile factors and of the
    source of every file Dynamo traced (the model's forward and what it calls: a commit
    that changes them gets a new folder); Inductor's FX-graph cache by the graph, torch's
    version and its config; Triton's by the kernel source and backend; FlashInfer's and
    DeepGEMM's JIT by the kernel's generated source and flags. A commit whose own compiled
    code (csrc) changes is another build and another torch version at most: the keys
    still differ. docs/configuration.md says more."""

    dir: str | None = Field(default=None, min_length=1)
    """The cache root, relative to the config's folder (on the node: a process or Slurm
    server reads it there; mounted into containers at the same path); None: the user's
    cache, `${XDG_CACHE_HOME:-~/.cache}/llm-bisect/engine-cache`. The Kubernetes launcher
    needs one (its pods run on nodes this machine's home is not on): none by default there."""
    enabled: bool = True
    """False: every probe compiles from nothing (the engine's default caches are not used)."""


class FastConfig(_Strict):
    """A cheaper server setup the search runs in (`run` only): the same build with flags added
    (e.g. `--enforce-eager`, a shorter `--max-model-len`) and variables set. The search runs
    in it only when the ends reproduce there (good end good, bad end bad); the answer is then
    probed in the full setup (the ends, the last good and the first bad) before it is given,
    and a disagreement is searched again in full."""

    args: list[str] = Field(default_factory=list)
    """Added after the server's own flags (`server.command`, a Slurm `worker_command` too, or
    an image's `server.args`): a flag given twice takes its last value, as vLLM reads it."""
    env: dict[str, str] = Field(default_factory=dict)
    """Set over `server.env` (`${VAR}` expanded as there)."""

    @model_validator(mode="after")
    def _something(self) -> FastConfig:
        if not self.args and not self.env:
            raise ValueError("give args or env: a fast setup that adds nothing is the full one")
        return self


class ProbeConfig(_Strict):
    """How each candidate is judged."""

    repeats: Annotated[int, Field(ge=1, le=10)] | Literal["auto"] = "auto"
    """`auto`: the check suite runs once per probe, and a verdict that contradicts a
    neighbour's (good after bad) is probed again, on a new server (its engine cache an empty
    folder of its own), before it is used; a build whose probes disagree is flaky (unsure).
    N: the suite runs N times on one server, runs that disagree make the verdict `unsure`,
    and no probe is repeated."""

    @field_validator("repeats", mode="before")
    @classmethod
    def _auto_or_count(cls, value: Any) -> Any:
        if isinstance(value, str) and value != "auto":
            raise ValueError("a number of runs (1 to 10) or auto")
        return value

    early_stop: bool = True
    """Run the checks cheapest first and stop a probe's suite at its first failed check (the
    verdict is bad whatever the rest say; result.json names those not run). The run's good
    and bad ends, the build a golden is recorded from, a probe whose verdict ends the search
    either way (it is the answer's evidence), `repeats: N` (N > 1) and `regress: crash`
    always run every check."""
    engine_cache: EngineCacheConfig | bool = True
    """Compile and JIT caches kept per node and slot (EngineCacheConfig): true (the default)
    under the user's cache, a mapping to name the folder, false: each probe starts cold."""

    fast: FastConfig | None = None
    """Search in a cheaper setup, confirm the answer at full fidelity (None: full setup only)."""
    batch_invariant: bool = False
    """Start every server with VLLM_BATCH_INVARIANT=1 (vLLM 0.11.1 and later, vllm/envs.py):
    a request's logprobs then do not depend on what it is batched with, so fewer verdicts
    lie. Slower, and on NVIDIA GPUs of compute capability 9.0 and up only. Each probe's
    fingerprint records it (`batch_invariant`); a build that does not know the variable says
    so in its startup log (`kernels.unknown_env`). Part of the config digest."""

    @property
    def cache(self) -> EngineCacheConfig | None:
        """`engine_cache` as its settings; None when it is off."""
        cache = self.engine_cache
        if cache is True:
            return EngineCacheConfig()
        if cache is False or not cache.enabled:
            return None
        return cache

    @property
    def server_env(self) -> dict[str, str]:
        """What these settings add to every server's environment, whatever its launcher."""
        return {BATCH_INVARIANT_VAR: "1"} if self.batch_invariant else {}

    @property
    def runs(self) -> int:
        """Runs of the check suite on one server."""
        return 1 if self.repeats == "auto" else self.repeats

    @property
    def reprobe(self) -> bool:
        """Whether a verdict that contradicts a neighbour's is probed again."""
        return self.repeats == "auto"


class SearchConfig(_Strict):
    """How the search weighs verdicts and when it stops (posterior.py)."""

    flake: Annotated[float, Field(ge=0, lt=0.5)] | Literal["auto"] = "auto"
    """How often a verdict lies (a start that glitches, decoding that is not deterministic):
    `auto` (the default), the posterior search with the rates learnt from the run's own
    verdicts (the ends and candidates probed again); a rate (`0.05`), the posterior search
    with that rate both ways; `0`, verdicts are facts (the deterministic bisection, and
    `probe.repeats`' handling of reversals)."""

    @field_validator("flake", mode="before")
    @classmethod
    def _auto_or_rate(cls, value: Any) -> Any:
        if value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("a lie rate (0 to 0.5) or auto")
        if isinstance(value, int | float):
            if not 0 <= value < 0.5:
                raise ValueError(f"a lie rate is at least 0 and below 0.5, not {value}")
            return float(value)
        return value

    confidence: float = Field(default=0.99, gt=0.5, lt=1, allow_inf_nan=False)
    """The posterior the answer needs (not `flake: 0`): below it the run ends ambiguous,
    naming the credible set."""
    max_probes: Annotated[int, Field(ge=2, le=10000)] | Literal["auto"] = "auto"
    """The most probes of the search (not `flake: 0`); `auto`: 4 x log2(candidates) + 8."""

    @field_validator("max_probes", mode="before")
    @classmethod
    def _auto_or_count(cls, value: Any) -> Any:
        if value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("a number of probes or auto")
        if isinstance(value, int) and not isinstance(value, bool) and not 2 <= value <= 10000:
            raise ValueError(f"a number of probes from 2 to 10000, not {value}")
        return value

    batch: Literal["joint", "quantiles"] = "joint"
    """With `parallel` slots: the batch that tells most together, or the posterior's
    quantiles (cheaper to choose). `quantiles` is deprecated (deprecations): still read."""
    culprits: int = Field(default=3, ge=1, le=16)
    """How many culprits a run names (several regressions in the range): where the first
    culprit's revert leaves the bad end bad (on verdicts the search believes), the commits
    after it are bisected with it reverted on each probe, and so on, up to this many; the
    answer is confirmed only as a whole, by the bad end with every one of them reverted.
    `1`: the first culprit only (`confirm: continue` still goes on to a second)."""
    symptom: Literal["any", "same"] = "any"
    """Which bad probes count as bad: `any` (the default), every one; `same`, a candidate
    between the ends only when it fails a check the bad end failed (or crashed as it did): one
    that fails other checks only has another regression, and counts as good (result.json
    says so, and keeps its failures). A suite then stops early only at a failed check the bad
    end failed."""

    priors: bool = True
    """Weigh each candidate before any probe by the files it touches against those the good
    end's server executed (recorded with the golden): one that touches only files the model
    never loads (another model's, another platform's backend), docs or tests starts at a low
    weight, never zero (priors.py). The posterior search only (not `flake: 0`); `false`: every
    candidate alike."""

    @property
    def policy(self) -> Policy:
        """The search's Policy (posterior.EXACT for `flake: 0`)."""
        if self.flake == 0:
            return EXACT
        return Policy(
            flake=None if self.flake == "auto" else self.flake,
            confidence=self.confidence,
            max_probes=None if self.max_probes == "auto" else self.max_probes,
            batch=self.batch,
        )


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


def _default_checks() -> list[CheckBase]:
    """The checks a config without `checks:` runs: every kind registered as a default."""
    made = [k.config.model_validate({"type": k.tag}) for k in CHECKS.kinds() if k.default]
    return cast(list[CheckBase], made)


class StrategyBase(_Strict):
    """What every build strategy's config is: its model (builds/*.py) has `type: Literal[tag]`."""

    type: str


Strategy = Annotated[StrategyBase, Tagged(STRATEGIES)]
"""One item of `build.strategies`: the model of the strategy its `type` names."""


class BuildCacheConfig(_Strict):
    dir: str = "~/.cache/llm-bisect/builds"
    """Where builds are kept and reused across runs."""
    disk_budget_gb: float = Field(default=200.0, gt=0, allow_inf_nan=False)
    """Least recently used builds are removed past this; never the one in use."""


class BuildConfig(_Strict):
    """How a candidate becomes runnable: strategies tried in order, the first that applies."""

    model_config = _DEFERRED

    strategies: list[Strategy] = Field(min_length=1)
    """Tried in order per candidate; a candidate none applies to is skip."""
    cache: BuildCacheConfig = Field(default_factory=BuildCacheConfig)
    """The folder finished builds are kept in, and its disk budget."""


class Config(_Strict):
    """A whole llm-bisect config."""

    model_config = _DEFERRED

    candidates: CandidatesConfig
    """Where the candidates come from: the clone and the two ends."""
    server: ServerConfig
    """How a build's server starts: `launcher` process, docker or slurm."""
    checks: list[CheckConfig] = Field(default_factory=_default_checks, min_length=1)
    """What each probe asks the server; default: canary, expect, logprobs and eval."""
    probe: ProbeConfig = Field(default_factory=ProbeConfig)
    """How each candidate is judged: `repeats`."""
    search: SearchConfig = Field(default_factory=SearchConfig)
    """How verdicts are weighed and when the search stops: `flake`, `confidence`."""
    regress: Literal["semantic", "crash", "any", "start"] = "semantic"
    """What counts as a regression: failed checks (semantic), a crash, 5xx or reset during
    checks (crash), or both (any); `start`: a build whose server never became ready is bad,
    one that did is good (bisects a start failure). A build that never starts is skip under
    every other policy, and one with no artifact or no build under every policy."""
    golden: str | None = None
    """A golden file (relative to the config); default for `run`: recorded from the good end."""
    build: BuildConfig | None = None
    """How candidates become runnable (overlay, command); default: as the launcher starts them."""
    localize: LocalizeConfig = Field(default_factory=LocalizeConfig)
    """`false`: no localisation probes after a run finds its culprit."""
    confirm: bool | Literal["continue"] = True
    """After a run finds its culprit: the bad end with it reverted and the good end with it
    picked, built and probed (at most two probes; none where the run probed that tree
    already). `false`: not. `continue`: when reverting it does not fix the bad end, bisect
    what remains on the reverted line (as `search.culprits` does by default; with
    `search.culprits: 1`, once)."""

    @property
    def culprits(self) -> int:
        """How many culprits the run may name: `search.culprits`, at least two with
        `confirm: continue`, one without confirmation."""
        if self.confirm is False:
            return 1
        return max(self.search.culprits, 2 if self.confirm == "continue" else 1)

    parallel: int = Field(default=1, ge=1, le=64)
    """The most probes in flight at once: k slots split the range into k+1 parts per round
    (local servers for the process launcher, containers on the engine for Docker)."""

    def search_policy(self, find_fix: bool = False) -> Policy:
        """The search's Policy for a run: `search`'s, confirming (posterior.Policy) where a
        confirmation follows and its trials are weighed (a regression, `confirm` on)."""
        policy = self.search.policy
        if policy.exact or find_fix or self.confirm is False:
            return policy
        return replace(policy, confirming=True)

    @model_validator(mode="after")
    def _known_needs_posterior(self) -> Config:
        if self.candidates.known_verdicts is not None and self.search.flake == 0:
            raise ValueError(
                "candidates.known_verdicts: verdicts known from elsewhere are weighed at their "
                "lie rate, which needs the posterior search (search.flake: auto or a rate, not 0)"
            )
        return self

    @model_validator(mode="after")
    def _kinds_fit(self) -> Config:
        """The rules across sections, each its kind's: the launcher's over the whole config,
        each strategy's over the launcher and the strategies before it."""
        launcher = LAUNCHERS[self.server.launcher]
        launcher.validate(self.server, self)
        strategies = self.build.strategies if self.build else []
        for i, strategy in enumerate(strategies):
            rules = StrategyRules(f"build.strategies.{i}", strategies[:i], launcher.runs_images)
            STRATEGIES[strategy.type].validate(strategy, rules)
        return self


def expand_paths(config: Config, environ: Mapping[str, str], repo_given: bool = False) -> Config:
    """The config with `${VAR}` in its paths (candidates.repo and known_verdicts, golden,
    server.cwd) expanded from the caller's environment, as a CI job names its checkout
    (`${GITHUB_WORKSPACE}/vllm`);
    a variable that is not set is a ConfigError naming the key. `repo_given`: `--repo` names
    the clone, so candidates.repo is not read (another CI's variable need not be set)."""
    update: dict[str, Any] = {}
    if not repo_given:
        repo = expand_value(config.candidates.repo, environ, "candidates.repo")
        update["candidates"] = config.candidates.model_copy(update={"repo": repo})
    if config.golden is not None:
        update["golden"] = expand_value(config.golden, environ, "golden")
    if config.candidates.known_verdicts is not None:
        known = expand_value(config.candidates.known_verdicts, environ, "candidates.known_verdicts")
        ends = update.get("candidates", config.candidates)
        update["candidates"] = ends.model_copy(update={"known_verdicts": known})
    server = LAUNCHERS[config.server.launcher].expand_paths(config.server, environ)
    if server is not config.server:
        update["server"] = server
    return config.model_copy(update=update)


def _loc(loc: tuple[int | str, ...]) -> str:
    # pydantic puts the discriminator value into the location; users never wrote it.
    # "constrained-int": the branch of probe.repeats (a count or `auto`)
    tags = {*CHECKS.tags(), *LAUNCHERS.tags(), "constrained-int"}
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
            return f"{loc}.launcher: unknown launcher {tag!r} (known: {LAUNCHERS.known()})"
        if loc.startswith("build."):
            return f"{loc}: unknown build type {tag!r} (known: {STRATEGIES.known()})"
        return f"{loc}: unknown check type {tag!r} (known: {CHECKS.known()})"
    if kind == "union_tag_not_found":
        if loc.startswith("build."):
            return f"{loc}: a build strategy needs a 'type' ({STRATEGIES.known()})"
        return f"{loc}: a check needs a 'type' ({CHECKS.known()})"
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
    nul = nul_at(data)
    if nul is not None:
        raise ConfigError(f"{nul}: holds a NUL byte (no path, argument or variable can)")
    held = placeholder_at(data)
    if held is not None:
        raise ConfigError(f"{held[0]}: fill in {held[1]!r} (a value `llm-bisect init` left to you)")
    server = data.get("server")
    if isinstance(server, dict) and "launcher" not in server:
        data = {**data, "server": {**server, "launcher": "process"}}
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc)) from None


def load_config(
    path: Path,
    server: Mapping[str, Any] | None = None,
    candidates: bool = True,
    warn: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> Config:
    """Read and validate a YAML config file; `server`: a `server:` section to use instead
    of the file's (the `configs` command's GOOD and BAD setups); not `candidates`: a file
    without `candidates:` is read as one with no repository and no ends (NO_CANDIDATES).
    `warn` is given a line for each deprecated option the file sets (deprecations)."""
    data = read_yaml(path, "config")
    if server is not None and isinstance(data, dict):
        data = {**data, "server": dict(server)}
    if not candidates and isinstance(data, dict) and "candidates" not in data:
        data = {**data, "candidates": dict(NO_CANDIDATES)}
    config = parse_config(data)
    for line in deprecations(config):
        warn(f"llm-bisect: warning: {line}")
    return config


def deprecations(config: Config) -> list[str]:
    """A line for each deprecated option a config sets (each still read). Pure."""
    if config.search.batch == "quantiles":
        return ["search.batch: quantiles is deprecated (still read); leave it out for joint"]
    return []


NO_CANDIDATES: Mapping[str, str] = {"repo": "", "good": "", "bad": ""}
"""`candidates:` of a config that has none (`configs` at one build needs no range)."""


def load_server(path: Path, key: str) -> dict[str, Json]:
    """The `server:` section of a YAML file (GOOD.yaml, BAD.yaml of `configs`)."""
    data = read_yaml(path, key)
    if not isinstance(data, dict) or not isinstance(data.get("server"), dict):
        raise ConfigError(f"{key} {path}: no server: section (the config's own keys)")
    unknown = sorted(str(k) for k in data if k != "server")
    if unknown:
        raise ConfigError(f"{key} {path}: unknown key {unknown[0]!r} (only server:)")
    return dict(data["server"])


SERVER_SHAPE = frozenset({"env"})
"""What shapes every server's answers, whatever its launcher (ServerBase's own): its
environment. A launcher adds what it runs (LauncherKind.shape: a command, an image)."""


def server_argv(server: ServerBase | Mapping[str, Any]) -> tuple[str, ...]:
    """The `server:` fields that are argument lists, for this server's launcher
    (LauncherKind.argv)."""
    tag = server.get("launcher", "process") if isinstance(server, Mapping) else server.launcher
    return LAUNCHERS[tag].argv if isinstance(tag, str) and tag in LAUNCHERS else ()


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def check_digest(check: CheckConfig) -> str:
    """A digest of the settings that shape a check's golden section (prompts, cases, budgets,
    request fields, the eval's source and format); thresholds are left out."""
    neutral = CHECKS[check.type].neutral if check.type in CHECKS else frozenset()
    data = check.model_dump(mode="json", exclude_defaults=True, exclude=set(neutral))
    return _digest({**data, "type": check.type})


def server_digest(server: ServerBase) -> str:
    """A digest of how the server is started: its command (image, args, entrypoint) and its
    environment, where variables named like secrets count by name only. Timeouts, hosts and
    scheduling are left out; so is `model`, which a golden records apart."""
    shape = LAUNCHERS[server.launcher].shape if server.launcher in LAUNCHERS else frozenset()
    data = server.model_dump(mode="json", include={*SERVER_SHAPE, *shape}, exclude_defaults=True)
    secret = set(secret_names(server.env))
    if "env" in data:
        data["env"] = {k: None if k in secret else v for k, v in data["env"].items()}
    return _digest(_secrets_masked(data))


def shared_config(data: Any, scrub: Scrub) -> Any:
    """A config's data as it may be shared (report.md embeds it): a variable of an `env:`
    named like a secret by its name (`HF_TOKEN: ${HF_TOKEN}`, the reader's own), every
    other secret masked; still a config that loads, and whose server digest is the same."""
    if isinstance(data, dict):
        return {
            scrub.text(str(k)): _shared_env(v, scrub) if k == "env" and isinstance(v, dict)
            else shared_config(v, scrub)
            for k, v in data.items()
        }  # fmt: skip
    if isinstance(data, list):
        return [shared_config(v, scrub) for v in data]
    return scrub.text(data) if isinstance(data, str) else data


def _shared_env(env: dict[Any, Any], scrub: Scrub) -> dict[Any, Any]:
    named = secret_names({str(k): str(v) for k, v in env.items()})
    return {
        scrub.text(str(k)): shared_config(v, scrub)
        if str(k) not in named or ENV_REF.search(str(v))
        else f"${{{k}}}"
        if ENV_REF.fullmatch(f"${{{k}}}")
        else MASK
        for k, v in env.items()
    }


def _secrets_masked(data: Any) -> Any:
    """Data with the secrets its values show by themselves masked (a login in an address,
    the value of a flag named like a secret): a digest counts them by their place only, so a
    rotated key, or the config a report shares (shared_config), keeps its golden."""
    if isinstance(data, dict):
        return {k: _secrets_masked(v) for k, v in data.items()}
    if isinstance(data, list):
        words = [w for w in data if isinstance(w, str)]
        found = argv_secrets(words) if len(words) == len(data) else []
        return [_secrets_masked(redact(v, found) if isinstance(v, str) else v) for v in data]
    return redact(data, url_credentials(data)) if isinstance(data, str) else data


SERVER_PLACEMENT = frozenset({"ready_timeout", "request_timeout", "collect_env", "slot_gpus"})
"""Server settings of every launcher that say how long, where or what else is collected,
never what the server answers: left out of the digest (a launcher adds its own:
LauncherKind.placement)."""
ENGINE_VARIABLE = re.compile(
    r"^(?:VLLM|NCCL|TORCH|PYTORCH|CUDA|CUBLAS|CUDNN|NVSHMEM|FLASHINFER|TRITON|SGLANG"
    r"|TRANSFORMERS|TOKENIZERS|OMP|MKL)_|^TORCH[A-Z_]*$|^(?:LD_PRELOAD|LD_LIBRARY_PATH|PYTHONPATH)$"
)
"""Inherited variables an engine reads: where the server inherits the caller's environment
(LauncherKind.inherits), their values count in the digest as server.env's do."""
PLACEMENT_VARIABLES = frozenset(
    {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"}
)
"""Which GPUs a slot's server sees: placement (launchers/devices.py), never the verdict."""


def server_environment(
    config: Config, env: Mapping[str, str], environ: Mapping[str, str]
) -> dict[str, str | None]:
    """The environment the server runs with, as the digest counts it: the engine's variables
    the launcher passes on from the caller (when it inherits the caller's environment) and
    server.env, expanded (`env`); a secret's value (named like one, or taken from a variable
    named like one) is None, so a rotated token resumes."""
    inherits = config.server.launcher in LAUNCHERS and LAUNCHERS[config.server.launcher].inherits
    passed = {k: v for k, v in environ.items() if ENGINE_VARIABLE.search(k)} if inherits else {}
    written = config.server.env
    merged: dict[str, str | None] = {**passed, **{k: env.get(k, v) for k, v in written.items()}}
    for name in list(merged):
        raw = written.get(name, "")
        taken = [m.group(1) for m in _ENV_REF.finditer(raw)]
        if name in PLACEMENT_VARIABLES and name not in written:
            del merged[name]
        elif _SECRET_NAME.search(name) or any(_SECRET_NAME.search(t) for t in taken):
            merged[name] = None
    return merged


def verdict_settings(
    config: Config, environment: Mapping[str, str | None] | None = None
) -> dict[str, Json]:
    """Every setting that can change a verdict, by dotted key (`server.env.MODE`,
    `server.command`, `checks.0.prompts`). Left out: what comes after the search (localize,
    confirm, candidates.later), how verdicts are weighed (search: the journal keeps the
    policy each resume ran under), what a probe costs (probe.early_stop, engine_cache, fast),
    how many run at once and where (parallel, docker_hosts, slot_gpus), how long and on
    whose account (SERVER_PLACEMENT, the launcher's placement: a Slurm account, retries,
    pending_timeout), credentials, links. Keys at their defaults are left out too, so a key
    a later llm-bisect adds does not turn a journal into "another config's". `environment`
    (server_environment): the server's environment with values; None: server.env's names."""
    data = config.model_dump(mode="json", exclude_defaults=True)
    for key in ("localize", "confirm", "search", "parallel"):
        data.pop(key, None)
    for key in ("early_stop", "engine_cache", "fast"):
        data.get("probe", {}).pop(key, None)
    data["candidates"].pop("url", None)
    data["candidates"].pop("later", None)
    data["candidates"].pop("known_verdicts", None)  # weighed as the search is: journalled
    launcher = config.server.launcher
    placement = LAUNCHERS[launcher].placement if launcher in LAUNCHERS else frozenset()
    for key in (*SERVER_PLACEMENT, *placement):
        data["server"].pop(key, None)
    if "registry" in data["server"]:
        data["server"]["registry"].pop("password", None)
        data["server"]["registry"].pop("username", None)
    env = data["server"].pop("env", {})
    flat: dict[str, Json] = {}
    _flatten(data, "", flat)
    if environment is None:
        flat["server.env"] = sorted(env)
    else:
        for name, value in environment.items():
            flat[f"server.env.{name}"] = value
    return flat


def _flatten(data: Json, key: str, into: dict[str, Json]) -> None:
    if isinstance(data, dict):  # a section left empty (probe: {} once its costs are out)
        for k, v in data.items():
            _flatten(v, f"{key}.{k}" if key else str(k), into)
    elif isinstance(data, list) and data and all(isinstance(v, dict) for v in data):
        for i, v in enumerate(data):
            _flatten(v, f"{key}.{i}", into)
    else:
        into[key] = data


def setting_digests(
    config: Config, environment: Mapping[str, str | None] | None = None
) -> dict[str, str]:
    """verdict_settings, each value hashed (an env value is never written, only its hash):
    what a journal keeps so that a refused resume names the keys that differ."""
    return {k: _digest(v)[:16] for k, v in verdict_settings(config, environment).items()}


def config_digest(config: Config, environment: Mapping[str, str | None] | None = None) -> str:
    """A stable digest of what decides verdicts (verdict_settings)."""
    return _digest(setting_digests(config, environment))


def differing(before: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    """The settings whose digests differ between two runs (added, removed or changed)."""
    return sorted(k for k in {*before, *now} if before.get(k) != now.get(k))


def rebuild() -> None:
    """A kind registered or left: the unions of the models holding kinds follow (plugins.load
    makes this a listener of the registries: importing this module adds none)."""
    BuildConfig.model_rebuild(force=True)
    Config.model_rebuild(force=True)
