"""The lm_eval check: lm-evaluation-harness tasks run against the probe's endpoint.

lm-eval runs as its own process (its torch stays out of llm-bisect's dependencies), from
the configured interpreter or `lm_eval` on PATH:

    python -m lm_eval --model local-completions | local-chat-completions
        --model_args {"model": <served name>, "base_url": <endpoint>/v1/completions, ...}
        --tasks T ... [--include_path DIR] --log_samples --output_path OUT

and its per-sample file (OUT/<model>/samples_<task>_<date>.jsonl: one line per document
and filter, the metric's value per document) says which documents each build got right.
The golden keeps the good build's per-document results; a candidate is judged paired
against them (stats.py: the same one-sided exact McNemar test, and stated power, as the
`eval` check), per task, with any absolute thresholds (`thresholds`, or a vLLM eval
config's) as a floor beside. lm-eval never reaches the network here: HF_HUB_OFFLINE and
HF_DATASETS_OFFLINE are set, and requests go as text (no tokenizer is loaded).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..clock import SYSTEM
from ..config import CheckBase
from ..errors import ConfigError, EndpointError, HarnessError, LaunchError
from ..files import read_capped
from ..jsonvalue import Json
from ..kinds import CHECKS, CheckContext, CheckKind
from ..logs import run_logged
from ..model import CheckDetails, CheckResult
from .golden import LmEvalSection, SampleRun
from .stats import ALPHA, POWER, TEST, PairedTest, Pairs, p_value, pairs

if TYPE_CHECKING:
    from . import ChatEndpoint
    from .golden import Golden

NAME = "lm_eval"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
"""lm-eval never reaches the Hub: tasks read local files or what the node's cache holds."""
OUTPUT_TAIL = 2000
"""Characters of lm-eval's output kept when it fails."""
LAUNCH = (
    "import lm_eval.evaluator as e\n"
    "if hasattr(e, 'add_env_info'): e.add_env_info = lambda storage: None\n"
    "from lm_eval.__main__ import cli_evaluate\n"
    "cli_evaluate()\n"
)
"""`python -m lm_eval`, less the torch environment report it writes into its results file
(which llm-bisect does not read): that imports torch and runs collect_env, about 14 s a
probe on a busy CPU node."""
LOCAL_ONLY = (
    "import functools, lm_eval.tasks.manager as m\n"
    "m.TaskManager.__init__ = functools.partialmethod(m.TaskManager.__init__, "
    "include_defaults=False)\n"
)
"""Put before LAUNCH when every task asked for is defined in `include_path`: lm-eval then
indexes that folder only, not its thousands of built-in task files (half its start)."""
_DEFINES = re.compile(r"^(?:task|group):\s*['\"]?([^'\"\s#]+)", re.M)
_SAMPLES = re.compile(r"^samples_(?P<task>.+)_\d{4}-\d\d-\d\dT[\d\-.]+\.jsonl$")


class LmEvalConfig(CheckBase):
    """lm-evaluation-harness tasks against the endpoint, judged paired against the golden."""

    model_config = ConfigDict(strict=True)

    type: Literal["lm_eval"]
    """`lm_eval`: lm-evaluation-harness tasks, per document against the golden's."""
    tasks: list[str] = Field(min_length=1)
    """Task (or group) names lm-eval knows, or of task YAMLs in `include_path`."""
    include_path: str | None = None
    """A folder of task YAMLs (relative to the config); lm-eval runs in it, so a task's
    `data_files` may be relative to it."""
    api: Literal["completions", "chat-completions"] = "completions"
    """`local-completions` (/v1/completions) or `local-chat-completions`
    (/v1/chat/completions, with the chat template applied)."""
    python: str | None = None
    """The interpreter that has lm_eval installed (`pip install llm-bisect[lm-eval]`);
    default: `lm_eval` on PATH."""
    limit: int | None = Field(default=None, gt=0)
    """The first this-many documents per task; default: all."""
    num_fewshot: int | None = Field(default=None, ge=0)
    """Few-shot examples per document; default: the task's."""
    gen_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Generation arguments (`max_gen_toks`, `until`, `temperature`, ...), over the task's."""
    chat_template_kwargs: dict[str, Any] | None = None
    """Sent with each request, e.g. {"enable_thinking": false} for a thinking model."""
    apply_chat_template: bool | None = None
    """Default: with `chat-completions`."""
    fewshot_as_multiturn: bool = False
    """Few-shot examples as turns of the chat (with the chat template)."""
    num_concurrent: int = Field(default=8, ge=1, le=256)
    """Requests lm-eval keeps in flight."""
    metric: str | None = None
    """The per-document metric judged paired, as `name,filter` (`exact_match,strict-match`);
    a document counts right where it is 1. Default: each task's first metric and filter."""
    thresholds: dict[str, dict[str, float]] = Field(default_factory=dict)
    """Absolute floors beside the golden: task → metric (`exact_match,strict-match`) → the
    least value that passes."""
    tolerance: float | None = Field(default=None, ge=0, le=1)
    """Drop allowed beyond chance (which the paired test judges); default 0."""
    timeout: float = Field(default=3600.0, gt=0)
    """Seconds lm-eval may run per probe."""
    source: str | None = None
    """The vLLM eval config these settings were read from (`vllm-eval`), for the report."""

    @field_validator("tasks")
    @classmethod
    def _names(cls, tasks: list[str]) -> list[str]:
        for task in tasks:
            if not task or task.startswith("-") or "," in task:
                raise ValueError(f"not a task name: {task!r}")
        return tasks


class TaskJudgement(BaseModel):
    """One task of a candidate against the golden's: the check's details, per task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str
    metric: str
    value: float
    golden_value: float | None = None
    floor: dict[str, float] = Field(default_factory=dict)
    """The absolute thresholds on this task's metrics."""
    values: dict[str, float] = Field(default_factory=dict)
    n: int = 0
    lost: int = 0
    gained: int = 0
    p_value: float = 1.0
    detectable_drop: float = 1.0
    """The smallest drop the paired test detects with `power` on these documents."""
    passed: bool = True
    failures: list[str] = Field(default_factory=list)


class LmEvalDetails(CheckDetails):
    """What the lm_eval check found: per task, and how it was asked."""

    model_config = ConfigDict(extra="ignore")
    check: ClassVar[str] = "lm_eval"

    tasks: list[TaskJudgement]
    command: list[str]
    seconds: float
    alpha: float = ALPHA
    power: float = POWER
    test: str = TEST
    source: str | None = None


def _has_lm_eval(python: str) -> bool:
    probe = subprocess.run(
        [python, "-c", "import importlib.util as u, sys; sys.exit(u.find_spec('lm_eval') is None)"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    return probe.returncode == 0


def _interpreter(script: str) -> str | None:
    """The Python a console script (`lm_eval` on PATH) runs with, from its `#!` line."""
    try:
        with open(script, "rb") as f:
            head = f.readline(4096).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not head.startswith("#!") or " " in head[2:].strip():
        return None
    python = head[2:].strip()
    return python if Path(python).is_file() and "python" in Path(python).name else None


def lm_eval_argv(python: str | None, base: Path | None = None) -> list[str]:
    """How lm-eval is started: by `python` (as `python -m lm_eval`, see LAUNCH), else by
    `lm_eval` on PATH (through its interpreter when its `#!` line names one); ConfigError
    when neither is there (said before anything starts)."""
    if python is not None:
        found = shutil.which(python) or (str(base / python) if base else None)
        if not found or not Path(found).is_file():
            raise ConfigError(f"python: no interpreter '{python}'")
        if not _has_lm_eval(found):
            raise ConfigError(
                f"python: '{python}' has no lm_eval (pip install 'lm-eval[api]' into it)"
            )
        return [found, "-c", LAUNCH]
    script = shutil.which("lm_eval") or shutil.which("lm-eval")
    if script is None:
        raise ConfigError(
            "python: not given, and no lm_eval on PATH (pip install 'llm-bisect[lm-eval]', or "
            "name the interpreter that has it)"
        )
    interpreter = _interpreter(script)
    return [interpreter, "-c", LAUNCH] if interpreter else [script]


MAX_TASK_BYTES = 4 * 2**20
"""The most bytes read of one task YAML (a task's file is a few KB)."""
MAX_INCLUDE_ENTRIES = 20_000
"""Files and folders `include_path` may hold: a folder of task YAMLs, not `/` (whose walk
would read /proc without end)."""


def local_tasks(folder: Path) -> set[str]:
    """The task and group names the YAML files under `folder` define (read as text: lm-eval's
    YAML has its own tags); ConfigError past MAX_INCLUDE_ENTRIES entries."""
    found: set[str] = set()
    seen = 0
    for root, dirs, files in os.walk(folder):
        seen += len(dirs) + len(files)
        if seen > MAX_INCLUDE_ENTRIES:
            raise ConfigError(
                f"include_path: '{folder}' holds more than {MAX_INCLUDE_ENTRIES:,} files and "
                "folders: name the folder of the task YAMLs"
            )
        for name in files:
            if not name.endswith((".yaml", ".yml")):
                continue
            try:  # a regular file only: a FIFO named .yaml must not block the walk
                text = read_capped(Path(root) / name, MAX_TASK_BYTES)
            except OSError:
                continue
            found.update(_DEFINES.findall(text.decode("utf-8", "replace")))
    return found


def command(
    cfg: LmEvalConfig,
    lm_eval: Sequence[str],
    base_url: str,
    model: str,
    out: Path,
    include_path: Path | None,
) -> list[str]:
    """The lm-eval command line for one endpoint. Pure."""
    chat = cfg.api == "chat-completions"
    path = "/v1/chat/completions" if chat else "/v1/completions"
    model_args = {
        "model": model,
        "base_url": base_url.rstrip("/") + path,
        "num_concurrent": cfg.num_concurrent,
        "tokenized_requests": False,
        "tokenizer_backend": None,
        "max_retries": 1,
    }
    argv = [
        *lm_eval,
        "--model",
        "local-chat-completions" if chat else "local-completions",
        "--model_args",
        json.dumps(model_args),
        "--tasks",
        ",".join(cfg.tasks),
        "--log_samples",
        "--output_path",
        str(out),
        "--seed",
        "0",
    ]
    if include_path is not None:
        argv += ["--include_path", str(include_path)]
    if cfg.limit is not None:
        argv += ["--limit", str(cfg.limit)]
    if cfg.num_fewshot is not None:
        argv += ["--num_fewshot", str(cfg.num_fewshot)]
    gen = dict(cfg.gen_kwargs)
    if cfg.chat_template_kwargs is not None:
        gen["chat_template_kwargs"] = cfg.chat_template_kwargs
    if gen:
        argv += ["--gen_kwargs", json.dumps(gen)]
    if cfg.apply_chat_template if cfg.apply_chat_template is not None else chat:
        argv.append("--apply_chat_template")
    if cfg.fewshot_as_multiturn:
        argv.append("--fewshot_as_multiturn")
    return argv


def _split(metric: str) -> tuple[str, str]:
    name, _, kind = metric.partition(",")
    return name, kind or "none"


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise HarnessError(f"lm-eval wrote {what} that is not JSON") from None


def _aggregates(results: Any, task: str) -> tuple[dict[str, float], list[str]]:
    """A task's aggregate metrics (`name,filter`), and those lm-eval reported as no number
    (NaN, infinite): none of those passes a floor."""
    row = results.get(task) if isinstance(results, dict) else None
    numbers, not_numbers = {}, []
    for k, v in (row if isinstance(row, dict) else {}).items():
        if not isinstance(v, int | float) or isinstance(v, bool) or "," not in k:
            continue
        if "_stderr" in k:
            continue
        try:
            number = float(v)
        except OverflowError:  # an integer of hundreds of digits: no metric
            number = math.inf
        if math.isfinite(number):
            numbers[k] = number
        else:
            not_numbers.append(k)
    return numbers, not_numbers


def _metrics_of(line: dict[str, Any]) -> list[str]:
    """The metric names of one sample: `metrics` (lm-eval 0.4.3 and later), else (older
    versions) its numeric keys that are no document field."""
    named = line.get("metrics")
    if isinstance(named, list) and all(isinstance(m, str) for m in named):
        return list(named)
    skip = {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter"}
    return [
        k
        for k, v in line.items()
        if k not in skip and isinstance(v, int | float) and not isinstance(v, bool)
    ]


def _sample(line: Any, where: str) -> dict[str, Any]:
    if not isinstance(line, dict):
        raise HarnessError(f"lm-eval wrote {where}: a sample that is not a JSON object")
    doc_id = line.get("doc_id")
    if isinstance(doc_id, bool) or not isinstance(doc_id, int):
        raise HarnessError(f"lm-eval wrote {where}: a sample whose doc_id is {doc_id!r:.40}")
    return line


def read_samples(
    out: Path, tasks_wanted: Sequence[str], metric: str | None
) -> dict[str, SampleRun]:
    """Per task, the per-document results lm-eval wrote under `out`. Pure but for reading.

    A task group's subtasks each have their own file and are judged each. Output that is
    not what lm-eval writes (a version this does not read) is a HarnessError naming it."""
    results: dict[str, Json] = {}
    for found in sorted(out.rglob("results_*.json")):
        doc = _json(found.read_text(encoding="utf-8", errors="replace"), f"'{found.name}'")
        got = doc.get("results", {}) if isinstance(doc, dict) else None
        if not isinstance(got, dict):
            raise HarnessError(f"lm-eval wrote '{found.name}' whose 'results' is not a mapping")
        results.update(got)
    runs: dict[str, SampleRun] = {}
    for found in sorted(out.rglob("samples_*.jsonl")):
        m = _SAMPLES.match(found.name)
        if m is None:
            continue
        task = m.group("task")
        where = f"'{found.name}'"
        text = found.read_text(encoding="utf-8", errors="replace")
        lines = [_sample(_json(x, where), where) for x in text.splitlines() if x.strip()]
        if not lines:
            continue
        aggregate, not_numbers = _aggregates(results, task)
        named = _metrics_of(lines[0])
        if metric is None and not aggregate and not named:
            raise HarnessError(f"lm-eval wrote {where}: samples that name no metric")
        # default: the first metric lm-eval reports for the task (its first filter's)
        first = f"{named[0] if named else ''},{lines[0].get('filter', 'none')}"
        chosen = metric or next(iter(aggregate), first)
        name, kind = _split(chosen)
        by_doc = {  # a document given twice counts once (its last line)
            x["doc_id"]: x[name] for x in lines if x.get("filter", "none") == kind and name in x
        }
        picked = sorted(by_doc.items(), key=lambda kv: kv[0])
        if not picked:
            raise HarnessError(
                f"lm-eval wrote {where}: task {task!r} has no per-document {chosen!r} (its "
                f"samples hold {named} under filter {lines[0].get('filter')!r})"[:400]
            )
        correct = [
            isinstance(v, int | float) and not isinstance(v, bool) and v >= 1 for _, v in picked
        ]
        runs[task] = SampleRun(
            metric=chosen,
            value=aggregate.get(chosen, sum(correct) / len(correct)),
            values=aggregate,
            not_numbers=not_numbers,
            doc_ids=[d for d, _ in picked],
            correct=correct,
        )
    if not runs:
        raise EndpointError(f"lm-eval wrote no per-document results for {', '.join(tasks_wanted)}")
    return runs


def paired_with(got: SampleRun, gold: SampleRun) -> Pairs:
    """A task's documents paired with the golden's, by document id. Pure."""
    theirs = dict(zip(gold.doc_ids, gold.correct, strict=True))
    both = [(theirs[d], c) for d, c in zip(got.doc_ids, got.correct, strict=True) if d in theirs]
    return pairs([g for g, _ in both], [c for _, c in both])


def holm(p_values: Sequence[float], alpha: float = ALPHA) -> list[float]:
    """The level each of m tests is judged at, Holm's step-down: the k-th smallest p-value
    at alpha / (m - k + 1) while every smaller one was rejected, 0 after the first that was
    not (none after it fails). The chance that any of m builds-without-a-drop tests fails
    stays at most alpha, whatever their dependence. Pure."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    levels = [0.0] * len(p_values)
    for k, i in enumerate(order):
        level = alpha / (len(p_values) - k)
        if p_values[i] > level:
            break
        levels[i] = level
    return levels


def judge_tasks(
    runs: Mapping[str, SampleRun],
    gold: Mapping[str, SampleRun] | None,
    floors: Mapping[str, Mapping[str, float]],
    test: PairedTest,
) -> list[TaskJudgement]:
    """Every task, the paired tests corrected for their number (Holm): a group of 57
    subtasks fails no more often than one task when nothing dropped. Pure."""
    golden = gold or {}
    p = {
        t: p_value(c.lost, c.gained)
        for t, got in runs.items()
        if t in golden
        for c in [paired_with(got, golden[t])]
    }
    levels = dict(zip(p, holm(list(p.values()), test.alpha), strict=True))
    return [
        judge_task(
            task,
            got,
            golden.get(task),
            floors.get(task, {}),
            replace(test, alpha=levels.get(task, test.alpha)),
            tests=len(p),
        )
        for task, got in runs.items()
    ]


def judge_task(
    task: str,
    got: SampleRun,
    gold: SampleRun | None,
    floor: Mapping[str, float],
    test: PairedTest,
    flips: float = 0.0,
    tests: int = 1,
) -> TaskJudgement:
    """One task: paired against the golden's documents (when there is a golden), and each
    absolute floor; `tests`: how many tasks' paired tests the level is corrected for. Pure."""
    failures = []
    compared = Pairs(0, 0, 0, 0)
    if gold is not None:
        compared = paired_with(got, gold)
        if test.alpha > 0 and test.fails(compared):
            holm_said = f", Holm over {tests} tasks" if tests > 1 else ""
            line = (
                f"{task}: {got.metric} {compared.accuracy:.0%} vs golden "
                f"{compared.golden_accuracy:.0%} on the {compared.n} documents compared "
                f"({compared.lost} lost, {compared.gained} gained: p = "
                f"{p_value(compared.lost, compared.gained):.2g} <= {test.alpha:.2g}, "
                f"{TEST}{holm_said})"
            )
            failures.append(line)
    for metric, least in floor.items():
        value = got.values.get(metric, got.value if metric == got.metric else None)
        if metric in got.not_numbers:
            failures.append(f"{task}: lm-eval reported {metric} as no number (NaN or infinite)")
        elif value is None:
            failures.append(f"{task}: lm-eval reported no {metric!r} (has {sorted(got.values)})")
        elif value < least:
            failures.append(f"{task}: {metric} {value:.3f} below the threshold {least:.3f}")
    return TaskJudgement(
        task=task,
        metric=got.metric,
        value=got.value,
        golden_value=gold.value if gold else None,
        floor=dict(floor),
        values=got.values,
        n=compared.n,
        lost=compared.lost,
        gained=compared.gained,
        p_value=p_value(compared.lost, compared.gained),
        detectable_drop=replace(test, alpha=ALPHA / tests).detectable_drop(
            compared.n, compared.right, max(flips, compared.flips), POWER
        ),  # at the level every task is judged at, at least (Bonferroni's)
        passed=not failures,
        failures=failures,
    )


class LmEvalCheck:
    """Bad when a task's per-document results fall below the golden's beyond chance, or a
    metric below its absolute threshold."""

    name = NAME

    def __init__(
        self,
        cfg: LmEvalConfig,
        lm_eval: Sequence[str],
        include_path: Path | None = None,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = SYSTEM.monotonic,
    ) -> None:
        self.clock = clock
        self.cfg = cfg
        self.lm_eval = list(lm_eval)
        self.include_path = include_path
        local = include_path is not None and set(cfg.tasks) <= local_tasks(include_path)
        if local and self.lm_eval[1:] == ["-c", LAUNCH]:
            self.lm_eval[2] = LOCAL_ONLY + LAUNCH
        self.environ = dict(os.environ if environ is None else environ)
        self.needs_golden = not cfg.thresholds
        """With thresholds, a golden is not needed: they judge alone (absolute rules)."""

    def _run(self, endpoint: ChatEndpoint) -> tuple[dict[str, SampleRun], list[str], float]:
        base_url, model = getattr(endpoint, "base_url", None), getattr(endpoint, "model", None)
        if not isinstance(base_url, str) or not isinstance(model, str):
            raise EndpointError("lm_eval: the endpoint names no base URL and model for lm-eval")
        with tempfile.TemporaryDirectory(prefix="llm-bisect-lm-eval-") as tmp:
            out = Path(tmp) / "out"
            argv = command(self.cfg, self.lm_eval, base_url, model, out, self.include_path)
            env = {**self.environ, **OFFLINE_ENV, "OPENAI_API_KEY": "EMPTY"}
            started = self.clock()
            log = Path(tmp) / "lm-eval.log"
            try:  # under the guard: a killed run leaves no lm-eval behind
                run_logged(argv, log, env=env, cwd=self.include_path or Path(tmp),
                           timeout=self.cfg.timeout, what="lm-eval")  # fmt: skip
            except LaunchError as exc:
                tail = log.read_text(errors="replace")[-OUTPUT_TAIL:] if log.exists() else ""
                raise EndpointError(f"{exc}: {tail.strip()}") from None
            seconds = self.clock() - started
            return read_samples(out, self.cfg.tasks, self.cfg.metric), argv, seconds

    def record(self, endpoint: ChatEndpoint) -> LmEvalSection:
        runs, _, seconds = self._run(endpoint)
        return LmEvalSection(tasks=runs, seconds=seconds)

    def _test(self) -> PairedTest:
        return PairedTest(ALPHA, self.cfg.tolerance or 0.0)

    def thresholds(self, golden: Golden | None) -> dict[str, Any]:
        found: dict[str, Any] = {}
        if golden is not None and golden.checks.lm_eval is not None:
            found["accuracy_drop"] = {
                "value": self.cfg.tolerance or 0.0,
                "from": "config"
                if self.cfg.tolerance is not None
                else "none: the paired test decides",
            }
            found["alpha"] = {"value": ALPHA, "from": TEST}
        origin = self.cfg.source or "config"
        for task, metrics in self.cfg.thresholds.items():
            for metric, least in metrics.items():
                found[f"min_{task}:{metric}"] = {"value": least, "from": origin}
        return found

    def noise(self, results: Sequence[CheckResult]) -> None:
        return None

    def run(self, endpoint: ChatEndpoint, golden: Golden | None) -> CheckResult:
        gold = golden.checks.lm_eval if golden is not None else None
        if gold is None and self.needs_golden:
            raise ValueError("the lm_eval check needs a golden")
        runs, argv, seconds = self._run(endpoint)
        test = self._test()
        judged = judge_tasks(runs, gold.tasks if gold else None, self.cfg.thresholds, test)
        for task in self.cfg.thresholds:
            if task not in runs:
                judged.append(
                    TaskJudgement(
                        task=task, metric="", value=0.0, passed=False,
                        failures=[f"{task}: lm-eval gave no results for it"],
                    )
                )  # fmt: skip
        failed = [f for j in judged for f in j.failures]
        summary = "; ".join(
            f"{j.task} {j.metric} {j.value:.3f}"
            + (f" (golden {j.golden_value:.3f})" if j.golden_value is not None else "")
            for j in judged
        )
        details = LmEvalDetails(tasks=judged, command=argv, seconds=seconds, source=self.cfg.source)
        return CheckResult(
            name=self.name,
            passed=not failed,
            score=sum(j.value for j in judged) / len(judged),
            evidence="; ".join(failed) if failed else summary,
            details=details,
        )


def build(cfg: LmEvalConfig, base_dir: Path, key: str) -> LmEvalCheck:
    """The check a config entry asks for; its interpreter and task folder checked first."""
    include = None
    if cfg.include_path is not None:
        include = (base_dir / cfg.include_path).resolve()
        if not include.is_dir():
            raise ConfigError(f"{key}.include_path: not a folder '{cfg.include_path}'")
    try:
        return LmEvalCheck(cfg, lm_eval_argv(cfg.python, base_dir), include)
    except ConfigError as exc:
        raise ConfigError(f"{key}.{exc}") from None


def from_config(cfg: LmEvalConfig, ctx: CheckContext) -> LmEvalCheck:
    return build(cfg, ctx.base_dir, ctx.key)


KIND = CHECKS.register(
    CheckKind(
        "lm_eval",
        LmEvalConfig,
        make=from_config,
        neutral=frozenset(
            {"num_concurrent", "python", "source", "thresholds", "timeout", "tolerance"}
        ),
    )
)
