"""vLLM's own eval config files as checks: `checks: [{type: vllm-eval, path: FILE}]`.

Three formats, told apart by their keys, each read as vLLM's runner reads it:

    tests/evals/gsm8k/configs/*.yaml         accuracy_threshold, num_questions, num_fewshot
        (tests/evals/gsm8k/test_gsm8k_correctness.py: vLLM's few-shot GSM8K over
        completions, max_tokens 256; passes at accuracy >= threshold - tolerance (0.08))
        → the `eval` check, format `vllm`, with that floor, asked as the runner asks
        (`/v1/completions` of the raw prompt, or chat with `use_chat_completions`; its stop
        strings; `gen_prefix` after each "Answer:"), on GSM8K itself: the first
        num_questions of its test split, the first num_fewshot of its train split as the
        worked examples (tests/evals/gsm8k/gsm8k_eval.py: `_build_gsm8k_prompts`), from
        vLLM's copy (a folder with test.jsonl and train.jsonl: `data:`, gate's
        `--eval-data`) or openai/gsm8k in the node's `datasets` cache. Without either, or
        with fewer questions there than the file asks, it is one line saying so: never
        another data set, never fewer questions.
    .buildkite/lm-eval-harness/configs/*.yaml  tasks: [{name, metrics: [{name, value}]}]
        (.buildkite/lm-eval-harness/test_lm_eval_correctness.py: passes at
        measured >= value * (1 - rtol), rtol 0.08) → the `lm_eval` check, with those floors
    tests/evals/gpt_oss/configs/*.yaml       metric_threshold, reasoning_effort
        (tests/evals/gpt_oss/test_gpqa_correctness.py: gpt_oss.evals GPQA, passes at
        metric >= threshold - 0.05) → the `lm_eval` check on lm-eval's GPQA diamond
        (the same questions, lm-eval's prompt), with that floor

Beside the floor, the golden-relative judgement of the check stands. A file given to
`gate --eval-config` replaces the config's default check of its kind (the bundled eval);
one the config names itself is an error naming both. The file's
`server_args` (and the lm-eval file's server keys: max_model_len, kv_cache_dtype, ...) are
added to `server.command` (docker: `server.args`), a gsm8k file's `env` to `server.env` (a
name the config sets to another value is an error); `startup_max_wait_seconds` becomes
`server.ready_timeout` unless the config sets one. A bad file is one line naming it.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import yaml
from pydantic import ConfigDict, Field, ValidationError

from ..config import CheckBase
from ..errors import ConfigError
from ..files import read_capped
from ..jsonvalue import Json
from ..kinds import CHECKS, CheckContext, CheckKind
from ..templates import literal
from ..yamlfile import expanded_size
from .dataset import load as load_problems
from .eval import EvalConfig

if TYPE_CHECKING:
    from ..config import Config

GSM8K_TOLERANCE = 0.08
"""tests/evals/gsm8k/test_gsm8k_correctness.py: `eval_config.get("tolerance", 0.08)`."""
LM_EVAL_RTOL = 0.08
""".buildkite/lm-eval-harness/test_lm_eval_correctness.py: DEFAULT_RTOL."""
GPT_OSS_TOLERANCE = 0.05
"""tests/evals/gpt_oss/test_gpqa_correctness.py: TOL."""
GSM8K_STOP = ["Question", "Assistant:", "<|separator|>"]
"""tests/evals/gsm8k/gsm8k_eval.py: the stop strings of every request (`get_answer`)."""
GSM8K_DATASET = "openai/gsm8k"
"""Where a gsm8k file's questions come from without `data`: the node's `datasets` cache."""
GSM8K_HOW = (
    "give vLLM's copy (a folder holding GSM8K's test.jsonl and train.jsonl, as "
    "tests/evals/gsm8k/gsm8k_eval.py downloads them) as the entry's `data:` or gate's "
    "--eval-data DIR, or load openai/gsm8k into this node's `datasets` cache"
)
GPQA_TASK = "gpqa_diamond_cot_zeroshot"
GPQA_METRIC = "exact_match,flexible-extract"
MAX_FILE_BYTES = 2**20
_SERVER_FLAGS = {
    "max_model_len": "--max-model-len",
    "kv_cache_dtype": "--kv-cache-dtype",
    "moe_backend": "--moe-backend",
}
_SERVER_SWITCHES = {"enforce_eager": "--enforce-eager", "trust_remote_code": "--trust-remote-code"}


class VllmEvalConfig(CheckBase):
    """One of vLLM's eval config files, read into a check (gsm8k, lm-eval-harness, gpt_oss)."""

    model_config = ConfigDict(strict=True)

    type: Literal["vllm-eval"]
    """`vllm-eval`: a vLLM eval config (tests/evals/... or .buildkite/lm-eval-harness/...)."""
    path: str
    """The file, relative to the config."""
    python: str | None = None
    """For lm-eval-harness and gpt_oss files: the interpreter that has lm_eval."""
    include_path: str | None = None
    """For lm-eval-harness files: a folder of task YAMLs (relative to the config)."""
    data: str | None = None
    """For gsm8k files: GSM8K as vLLM's runner reads it, a folder holding its `test.jsonl` and
    `train.jsonl` (relative to the config), or a dataset `datasets` reads; default:
    `openai/gsm8k` from the node's `datasets` cache."""
    num_concurrent: int = Field(default=8, ge=1, le=256)
    """Requests in flight at once."""


@dataclass(frozen=True)
class Read:
    """What a vLLM eval file asks for."""

    kind: Literal["gsm8k", "lm-eval-harness", "gpt_oss"]
    check: dict[str, Json]
    """The check config it becomes (an `eval` or `lm_eval` entry), before validation."""
    server_args: list[str] = field(default_factory=list)
    ready_timeout: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    """The server's environment the file sets (gsm8k files: `env`)."""


def _get(data: dict[str, Json], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise ConfigError(f"{where}: required key '{key}' is missing")
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        names = {int: "an integer", str: "a string", list: "a list", dict: "a mapping"}
        want = names.get(kind, "a number") if isinstance(kind, type) else "a number"
        raise ConfigError(f"{where}: '{key}' must be {want}, got {value!r}")
    return value


def _flag(value: Any, key: str, where: str) -> bool:
    """A YAML boolean, or the strings vLLM's files also write ("true", "false")."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(f"{where}: '{key}' must be true or false, got {value!r}")


def _opt(data: dict[str, Json], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    return _get(data, key, kind, where) if data.get(key) is not None else None


MAX_WAIT_S = 7 * 86400.0
"""The longest startup wait a file may ask for (a week): more is a typo, and `.inf` a hang."""


def _number(
    data: dict[str, Json],
    key: str,
    where: str,
    *,
    default: float | None = None,
    low: float = 0.0,
    high: float = 1.0,
) -> float:
    """A finite number in [low, high]: `data[key]` as vLLM's runner reads it
    (`eval_config.get(key, default)`), or `data[key]` where there is no default. `.nan`,
    `.inf` or a 400-digit integer is one line naming the key."""
    if default is not None and key not in data:
        return default
    value = _get(data, key, (int, float), where)
    number = float(value) if isinstance(value, float) or abs(value) < 10**18 else math.inf
    if not math.isfinite(number) or not low <= number <= high:
        raise ConfigError(
            f"{where}: '{key}' must be a number from {low:g} to {high:g}, got {value!r}"[:300]
        )
    return number


def _arg(text: str) -> Json:
    """One value of lm-eval's `k=v,k=v` strings, typed as lm_eval.utils.handle_arg_string
    types it: true/false, an integer, a float, else the text."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def _gen_kwargs(value: dict[str, Json] | str, where: str) -> dict[str, Json]:
    """`gen_kwargs` as a mapping, or as lm-eval's command line writes it
    (`temperature=0,top_p=1,until=<|END|>`: lm_eval.utils.simple_parse_args_string)."""
    if isinstance(value, dict):
        return value
    pairs = [p for p in value.split(",") if p.strip()]
    if any("=" not in p for p in pairs):
        raise ConfigError(f"{where}: 'gen_kwargs' is not key=value pairs: {value[:80]!r}")
    return {k.strip(): _arg(v.strip()) for k, v in (p.split("=", 1) for p in pairs)}


def _words(line: str, where: str) -> list[str]:
    """Server arguments as vLLM's runner splits them (`shlex.split`), as data: a brace in
    them (JSON: `--speculative-config '{"method": ...}'`) is no placeholder of llm-bisect's."""
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise ConfigError(f"{where}: 'server_args' cannot be split into words ({exc})") from None
    return [literal(w) for w in words]


def read(path: Path, where: str, cfg: VllmEvalConfig) -> Read:
    """A vLLM eval file; ConfigError with one line naming the file and key."""
    try:
        text = read_capped(path, MAX_FILE_BYTES).decode("utf-8")
        data = yaml.safe_load(text)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read '{path}' ({exc.strerror})") from None
    except (UnicodeDecodeError, yaml.YAMLError, RecursionError, ValueError):
        raise ConfigError(f"{where}: '{path}' is not YAML text") from None
    if expanded_size(data) is None:
        raise ConfigError(f"{where}: '{path}' has aliases that expand past reading")
    if data is None:
        raise ConfigError(f"{where}: '{path}' is empty (no keys: commented out?)")
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: '{path}' is not a vLLM eval config (not a mapping)")
    here = f"{where}: '{path.name}'"
    server_args = _opt(data, "server_args", str, here)
    args = _words(server_args, here) if server_args else []
    wait = (
        _number(data, "startup_max_wait_seconds", here, high=MAX_WAIT_S)
        if data.get("startup_max_wait_seconds") is not None
        else None
    )
    if wait is not None and wait <= 0:
        raise ConfigError(f"{here}: 'startup_max_wait_seconds' must be above 0, got {wait:g}")
    if "accuracy_threshold" in data or "num_questions" in data:
        # tests/evals/gsm8k/test_gsm8k_correctness.py: eval_config["accuracy_threshold"],
        # eval_config.get("tolerance", 0.08)
        threshold = _number(data, "accuracy_threshold", here)
        tolerance = _number(data, "tolerance", here, default=GSM8K_TOLERANCE)
        _get(data, "model_name", str, here)
        check: dict[str, Json] = {
            "type": "eval",
            "format": "vllm",
            "dataset": cfg.data or GSM8K_DATASET,
            "limit": _get(data, "num_questions", int, here),
            "shots": _get(data, "num_fewshot", int, here),
            "max_tokens": _opt(data, "max_tokens", int, here) or 256,
            # the runner's budget is the file's and never grows: its floor counts an answer
            # cut there by the last integer it holds
            "max_tokens_cap": _opt(data, "max_tokens", int, here) or 256,
            "concurrency": cfg.num_concurrent,
            "min_accuracy": max(0.0, threshold - tolerance),
            # gsm8k_eval.py: completions of the raw prompt unless use_chat_completions, each
            # with its stop strings, `gen_prefix` after every "Answer:"
            "api": "chat-completions"
            if data.get("use_chat_completions") is not None
            and _flag(data["use_chat_completions"], "use_chat_completions", here)
            else "completions",
            "gen_prefix": _opt(data, "gen_prefix", str, here) or "",
            "extra_body": {"stop": list(GSM8K_STOP)},
        }
        # test_gsm8k_correctness.py: env_dict = dict(eval_config.get("env") or {}), the server's
        env = _opt(data, "env", dict, here) or {}
        for name, value in env.items():
            if not isinstance(name, str) or not isinstance(value, str):
                raise ConfigError(f"{here}: 'env' maps names to strings, got {name!r}: {value!r}")
        return Read("gsm8k", check, args, wait, dict(env))
    if "tasks" in data:
        _get(data, "model_name", str, here)
        tasks = _get(data, "tasks", list, here)
        # .buildkite/lm-eval-harness/test_lm_eval_correctness.py:
        # rtol = eval_config.get("rtol", DEFAULT_RTOL); min_acceptable = value * (1 - rtol)
        rtol = _number(data, "rtol", here, default=LM_EVAL_RTOL)
        floors: dict[str, Json] = {}
        for i, task in enumerate(tasks):
            at = f"{here} tasks.{i}"
            if not isinstance(task, dict):
                raise ConfigError(f"{at}: a task is a mapping with name and metrics")
            name = _get(task, "name", str, at)
            metrics = _get(task, "metrics", list, at)
            floor: dict[str, Json] = {}
            floors[name] = floor
            for j, metric in enumerate(metrics):
                if not isinstance(metric, dict):
                    raise ConfigError(f"{at}.metrics.{j}: a metric is a mapping with name, value")
                value = _number(metric, "value", f"{at}.metrics.{j}", low=-1e9, high=1e9)
                floor[_get(metric, "name", str, f"{at}.metrics.{j}")] = value * (1 - rtol)
        check = {
            "type": "lm_eval",
            "tasks": list(floors),
            "thresholds": floors,
            "num_concurrent": cfg.num_concurrent,
            "source": str(path),
        }
        for key in ("limit", "num_fewshot"):
            value = _opt(data, key, int, here)
            if value is not None:
                check[key] = value
        for key in ("apply_chat_template", "fewshot_as_multiturn"):
            if data.get(key) is not None:
                check[key] = _flag(data[key], key, here)
        if check.get("apply_chat_template"):  # the server applies it: no tokenizer here
            check["api"] = "chat-completions"
        if data.get("gen_kwargs") is not None:
            check["gen_kwargs"] = _gen_kwargs(_get(data, "gen_kwargs", (dict, str), here), here)
        if cfg.python is not None:
            check["python"] = cfg.python
        # llm-bisect's own key in such a file (relative to it): where its local tasks are
        own = _opt(data, "include_path", str, here)
        if cfg.include_path is not None:
            check["include_path"] = cfg.include_path
        elif own is not None:
            check["include_path"] = str((path.parent / own).absolute())
        for key, flag in _SERVER_FLAGS.items():
            if data.get(key) is not None:
                args += [flag, literal(str(data[key]))]
        for key, flag in _SERVER_SWITCHES.items():
            if data.get(key) is not None and _flag(data[key], key, here):
                args.append(flag)
        return Read("lm-eval-harness", check, args, wait)
    if "metric_threshold" in data:
        _get(data, "model_name", str, here)
        # tests/evals/gpt_oss/test_gpqa_correctness.py: eval_config["metric_threshold"], TOL
        threshold = _number(data, "metric_threshold", here)
        effort = _opt(data, "reasoning_effort", str, here)
        check = {
            "type": "lm_eval",
            "tasks": [GPQA_TASK],
            "api": "chat-completions",
            "thresholds": {GPQA_TASK: {GPQA_METRIC: max(0.0, threshold - GPT_OSS_TOLERANCE)}},
            "num_concurrent": cfg.num_concurrent,
            "source": str(path),
        }
        if effort is not None:
            check["gen_kwargs"] = {"reasoning_effort": effort}
        if cfg.python is not None:
            check["python"] = cfg.python
        return Read("gpt_oss", check, args, wait)
    raise ConfigError(
        f"{where}: '{path}' is not a vLLM eval config this llm-bisect reads (no "
        "accuracy_threshold, tasks or metric_threshold: gsm8k, lm-eval-harness or gpt_oss)"
    )


def _data(data: str | None, base_dir: Path) -> str | None:
    """`data` as the check reads it: a local folder absolute (relative to `base_dir`), a
    dataset's name as it is."""
    if data is None:
        return None
    local = base_dir / data
    return str(local.absolute()) if local.exists() else data


def _questions(check: EvalConfig, name: str, where: str) -> None:
    """The questions a gsm8k file asks are there to ask, as many as it says; else one line
    saying what is missing and how to give it (nothing is ever asked instead)."""
    dataset = check.dataset or GSM8K_DATASET
    try:
        found = load_problems(dataset=dataset, shots=check.shots, key=where)
    except ConfigError as exc:
        said = str(exc).removeprefix(f"{where}.dataset: ").split("; offline: ")[0]
        raise ConfigError(
            f"{where}: '{name}' asks {check.limit} GSM8K questions, {check.shots}-shot: "
            f"{said}; {GSM8K_HOW}"
        ) from None
    if check.limit is not None and check.limit > len(found.asked):
        raise ConfigError(
            f"{where}: '{name}' asks {check.limit} GSM8K questions and '{dataset}' holds "
            f"{len(found.asked)} (GSM8K's test split has 1319); {GSM8K_HOW}"
        )


def expand(
    config: Config, base_dir: Path, extra: Path | None = None, data: Path | None = None
) -> Config:
    """The config with each `vllm-eval` entry (and `extra`, a file `gate --eval-config`
    names, on `data`, gate's `--eval-data`) read into the check it asks for, its server
    arguments added to the server's command and its startup wait made the ready timeout
    (unless the config sets one). `extra`'s check replaces the config's default one of its
    kind."""
    entries: list[Any] = list(config.checks)
    if extra is not None:
        given = str(data.absolute()) if data is not None else None
        entries.append(VllmEvalConfig(type="vllm-eval", path=str(extra.absolute()), data=given))
    if not any(isinstance(e, VllmEvalConfig) for e in entries):
        return config
    checks: list[Any] = []
    args: list[str] = []
    env: dict[str, str] = {}
    wait: float | None = None
    for i, entry in enumerate(entries):
        if not isinstance(entry, VllmEvalConfig):
            checks.append(entry)
            continue
        by_gate = extra is not None and i == len(entries) - 1
        where = "--eval-config" if by_gate else f"checks.{i}.path"
        file = base_dir / entry.path
        entry = entry.model_copy(update={"data": _data(entry.data, base_dir)})
        found = read(file, where, entry)
        if entry.data is not None and found.kind != "gsm8k":  # never dropped unsaid
            key = "--eval-data" if by_gate else f"checks.{i}.data"
            raise ConfigError(
                f"{key}: only a gsm8k file reads its questions from it; '{file.name}' is a "
                f"{found.kind} file"
            )
        try:
            made = CHECKS[str(found.check["type"])].config.model_validate(found.check)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"][1:])
            raise ConfigError(f"{where}: '{entry.path}' {loc}: {err['msg']}") from None
        if isinstance(made, EvalConfig):
            _questions(made, file.name, where)
        if by_gate:
            checks = _instead(checks, made, config, file.name)
        checks.append(made)
        args += found.server_args
        for name, value in found.env.items():
            said = {**config.server.env, **env}.get(name)
            if said is not None and said != value:
                raise ConfigError(
                    f"{where}: '{file.name}' sets env {name}={value!r} and the config "
                    f"{said!r}: one server environment; change one of them"[:400]
                )
            env[name] = value
        wait = found.ready_timeout if found.ready_timeout is not None else wait
    names = [c.type for c in checks]
    for name in ("eval", "lm_eval"):
        if names.count(name) > 1:
            raise ConfigError(f"checks: {names.count(name)} '{name}' checks (files included); one")
    server = config.server
    update: dict[str, Json] = {}
    if args:
        key = "command" if "command" in type(server).model_fields else "args"  # images: args
        update[key] = [*getattr(server, key), *args]
    if wait is not None and "ready_timeout" not in server.model_fields_set:
        update["ready_timeout"] = wait
    if env:
        update["env"] = {**server.env, **env}
    return config.model_copy(update={"checks": checks, "server": server.model_copy(update=update)})


def _instead(checks: list[Any], made: Any, config: Config, name: str) -> list[Any]:
    """The checks without the default one of `made`'s kind, which gate's file replaces; one
    the config names itself is an error naming both (which of two was meant is the user's)."""
    same = [i for i, c in enumerate(checks) if c.type == made.type]
    if not same:
        return checks
    if "checks" in config.model_fields_set:
        raise ConfigError(
            f"--eval-config: '{name}' is an '{made.type}' check and so is checks.{same[0]} of "
            "the config: one of each kind; remove that entry or leave out --eval-config"
        )
    return [c for c in checks if c.type != made.type]


def from_config(cfg: VllmEvalConfig, ctx: CheckContext) -> NoReturn:
    """Never made: setup reads each entry into the check its file asks for (`expand`)."""
    raise ConfigError(f"{ctx.key}: a 'vllm-eval' entry is read before checks are made")


KIND = CHECKS.register(
    CheckKind(
        "vllm-eval",
        VllmEvalConfig,
        make=from_config,
        neutral=frozenset({"num_concurrent", "python"}),
    )
)
