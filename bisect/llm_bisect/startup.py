"""Where a server's start went: its phases, read from the engine's own log lines. Pure.

    launch ─ imports ─► first log line ─ config ─► engine core up ─ engine ─► loading the model
           ─ weights ─► weights in
           ─ compile ─► graphs compiled ─ kv_cache ─► KV cache sized
           ─ warmup ─► engine initialised (profile, CUDA graphs) ─ api ─► API up ─► ready

Each milestone is a line vLLM logs (the logger calls named in MILESTONES, from
vllm-project/vllm at the versions named); its time is the line's own stamp
(`INFO MM-DD HH:MM:SS`, the server's clock, whole seconds). The log's clock is placed on
the probe's by the last milestone: the API came up just before the probe saw the server
ready (a poll apart), so timezones and clock skew between the node and llm-bisect do not
matter. Phases whose milestone a version does not log merge into the next phase; a log
with no milestone (not vLLM) gives no phases.

What vLLM reports of its own work (`Loading weights took 0.01 seconds`, `torch.compile
took 8.1 s in total`, ...) is kept beside the phases as `reported`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

from pydantic import BaseModel, ConfigDict, Field


@dataclass(frozen=True)
class Milestone:
    """The end of one phase, and the log lines that mark it."""

    phase: str
    """The phase this milestone ends."""
    label: str
    """What the phase is, for a person."""
    pattern: re.Pattern[str]


MILESTONES: tuple[Milestone, ...] = (
    Milestone(
        "config",
        "resolve the config, start the engine",
        # v1/engine/core.py 'Initializing a V1 LLM engine (v%s) with config: %s' (v0.8 .. main);
        # engine/llm_engine.py 'Initializing an LLM engine (v%s) with config' (v0.6)
        re.compile(r"Initializing an? (?:V1 )?LLM engine "),
    ),
    Milestone(
        "engine",
        "start the workers",
        # gpu_model_runner.py / cpu_model_runner.py / worker/model_runner.py, v0.6 .. main
        re.compile(r"Starting to load model "),
    ),
    Milestone(
        "weights",
        "load the weights",
        # default_loader.py 'Loading weights took %.2f seconds' (v0.8 .. main);
        # gpu_model_runner.py 'Model loading took %s GiB memory and %.6f seconds' (v0.8 ..);
        # v0.6 'Loading model weights took %.4f GB'
        re.compile(r"Loading weights took |Model loading took |Loading model weights took "),
    ),
    Milestone(
        "compile",
        "torch.compile (Dynamo, Inductor) or load it from the cache, warm up",
        # compilation/backends.py 'Dynamo bytecode transform time', 'Compiling a graph for
        # compile range %s takes', 'Directly load the compiled graph(s)'; monitor.py
        # 'torch.compile takes %.2f s in total' (v0.6 ..), 'took' (main 2026); AOT compile
        # (torch >= 2.10, decorators.py) 'saved AOT compiled function to %s', 'Directly load
        # AOT compilation from path %s'; cpu_model_runner.py 'Warming up done.'
        re.compile(
            r"torch\.compile take[sn]? |torch\.compile took |Dynamo bytecode transform time"
            r"|Compiling a graph for |Directly load the compiled graph|saved AOT compiled function"
            r"|Directly load AOT compilation|Warming up done"
        ),
    ),
    Milestone(
        "kv_cache",
        "profile memory, size the KV cache",
        # v1/core/kv_cache_utils.py '%s KV cache size: %s tokens' (GPU, CPU, ...);
        # gpu_worker.py 'Available KV cache memory'; v0 '# GPU blocks: %d'
        re.compile(r"\bKV cache size: |Available KV cache memory|# GPU blocks: "),
    ),
    Milestone(
        "warmup",
        "capture CUDA graphs, warm up",
        # gpu_model_runner.py 'Graph capturing finished in %.0f secs'; v1/engine/core.py
        # 'init engine (profile, create kv cache, warmup model) took %.2f seconds'
        re.compile(r"Graph capturing finished in |init engine \(profile, create kv cache"),
    ),
    Milestone(
        "api",
        "start the API server",
        # api_server.py 'Starting vLLM API server on' (v0.8), 'Starting vLLM server on' (main);
        # uvicorn 'Application startup complete.' (no stamp: the line before gives the time)
        re.compile(r"Starting vLLM (?:API )?server on |Application startup complete"),
    ),
)
"""The milestones in the order vLLM reaches them."""

PHASE_LABELS = {"imports": "process start, imports", **{m.phase: m.label for m in MILESTONES}}
"""Every phase, in order, with what it is."""

_S = r"(?P<s>\d+(?:\.\d+)?)"
_REPORTED = (
    ("weights", re.compile(rf"Loading weights took {_S} ?s")),
    ("model_load", re.compile(rf"Model loading took [\d.]{{1,20}} ?GiB(?: memory)? and {_S} s")),
    ("compile", re.compile(rf"torch\.compile t(?:akes|ook) {_S} s in total")),
    ("dynamo", re.compile(rf"Dynamo bytecode transform time: {_S} s")),
    ("graph_capture", re.compile(rf"Graph capturing finished in {_S} secs")),
    (
        "init_engine",
        re.compile(rf"init engine \(profile, create kv cache, warmup model\) took {_S}"),
    ),
    ("memory_profiling", re.compile(rf"Memory profiling takes {_S} seconds")),
)
_HIT = re.compile(r"Directly load the compiled graph|Directly load AOT compilation")
_MISS = re.compile(r"Compiling a graph for |saved AOT compiled function|Compiling model again")
_STAMP = re.compile(
    r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<stamp>\d\d-\d\d \d\d:\d\d:\d\d)\b"
)
_ANSI = re.compile(r"\x1b\[[0-9;?]{0,40}[A-Za-z]")
_YEAR_S = 365 * 86400
LINE_BYTES = 4096
"""The start of each line read (vLLM's own lines are short; logged prompts can be long)."""


class Phase(BaseModel):
    """One phase of a server's start, in seconds since the probe began."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    """imports, config, engine, weights, compile, kv_cache, warmup or api (PHASE_LABELS)."""
    start: float
    end: float
    line: str = ""
    """The log line that ended it (none for the last: the probe saw the server ready)."""


class Startup(BaseModel):
    """Where a probe's wait for its server went, from the server's log."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    phases: list[Phase] = Field(default_factory=list)
    """In order, back to back from launch to ready."""
    reported: dict[str, float] = Field(default_factory=dict)
    """Seconds vLLM says its own steps took: weights, model_load, compile (torch.compile in
    total), dynamo, graph_capture, init_engine, memory_profiling; the largest where ranks
    each say it."""
    compile_cache: str = ""
    """`hit` when vLLM loaded compiled graphs from its cache, `miss` when it compiled them,
    `` when it did neither (eager) or does not say."""


@dataclass(frozen=True)
class Marks:
    """What a log says of a start, on the log's own clock (seconds since its first stamp)."""

    reached: dict[str, tuple[float, str]]
    """phase → (when its milestone was last logged, that line)."""
    reported: dict[str, float]
    compile_cache: str


def _seconds(stamp: str, year: int = 2024) -> float | None:
    # The stamp has no year: a leap year parses 02-29; a start across New Year wraps.
    try:
        moment = datetime.strptime(f"{year}-{stamp}", "%Y-%m-%d %H:%M:%S")
    except ValueError:  # not a date after all: the line is read as unstamped
        return None
    return moment.replace(tzinfo=timezone.utc).timestamp()


def read_marks(lines: Iterable[str]) -> Marks:
    """The milestones a server log reaches, when, and what vLLM reports of its own steps."""
    first: float | None = None
    last = 0.0
    reached: dict[str, tuple[float, str]] = {}
    reported: dict[str, float] = {}
    hit = miss = False
    for raw in lines:
        line = _ANSI.sub("", raw[:LINE_BYTES]).rstrip()
        m = _STAMP.search(line)
        t = _seconds(m.group("stamp")) if m is not None else None
        if m is not None and t is not None:
            if first is None:
                first = t
            if t < first - _YEAR_S / 2:  # past New Year
                t = _seconds(m.group("stamp"), 2025) or t
            last = max(last, t - first)
        elif first is None:
            continue  # nothing stamped yet: the time is unknown
        for milestone in MILESTONES:
            if milestone.pattern.search(line):
                reached[milestone.phase] = (last, line)
        for key, pattern in _REPORTED:
            r = pattern.search(line)
            if r is not None:
                reported[key] = max(reported.get(key, 0.0), float(r.group("s")))
        if _HIT.search(line):
            hit = True
        elif _MISS.search(line):
            miss = True
    return Marks(reached, reported, "miss" if miss else "hit" if hit else "")


def phases(marks: Marks, launch: float, ready: float) -> Startup | None:
    """The start as phases in probe time: launch (the server process began) to ready, the
    log's clock placed on the probe's by its last milestone. None without milestones."""
    if not marks.reached or ready < launch:
        return None
    order = [m.phase for m in MILESTONES if m.phase in marks.reached]
    shift = ready - marks.reached[order[-1]][0]
    out: list[Phase] = []
    start = launch
    first_line = shift  # the log's first stamp, in probe time
    if first_line > launch:
        out.append(Phase(name="imports", start=launch, end=first_line))
        start = first_line
    for phase in order:
        at, line = marks.reached[phase]
        end = min(max(start, at + shift), ready)
        out.append(Phase(name=phase, start=start, end=end, line=line))
        start = end
    if out and start < ready:  # the API came up; the probe saw it a poll later
        last = out[-1]
        out[-1] = last.model_copy(update={"end": ready})
    return Startup(phases=out, reported=marks.reported, compile_cache=marks.compile_cache)
