"""What a candidate's own environment says of itself: vLLM's `python -m vllm.collect_env`
(the report vLLM's issue template asks for) and `nvidia-smi`, run where the server runs
(the build's python, inside the container, on the allocated node).

Each launcher leaves the raw outputs in the probe's folder:

    collect_env.txt   what the command printed (stdout and stderr)
    collect_env.rc    its exit code, `timeout`, or `off: <why>`
    gpus.csv          `nvidia-smi --query-gpu=QUERY --format=csv,noheader` (absent: none)

The process launcher runs them beside its server (`LocalCollect`), Slurm's node script
(`node_lines`), Docker and Kubernetes in the running container or pod (`collect_in`).
`collected` reads them back into the fingerprint's `collect_env` facts; `parse` is pure.
A failed or missing collect_env is recorded as `error`, never fails the probe.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from . import guard  # ends collect_env with the harness, even on SIGKILL
from .clock import SYSTEM, Clock
from .environment import QUERY, SMI_TIMEOUT_S, parse_gpus
from .errors import LaunchError
from .files import head_text
from .model import Candidate
from .redact import redact
from .templates import fill

OUTPUT = "collect_env.txt"
CODE = "collect_env.rc"
GPUS = "gpus.csv"
TIMEOUT_S = 300
"""The most seconds collect_env may take (it runs `pip list`, `nvidia-smi topo`, ...)."""
MAX_OUTPUT_BYTES = 4 * 2**20
"""The most of collect_env's output kept (its own is some 10 KB; a chatty one once wrote
50 MB): the rest is dropped, said in the file."""
SMI_ARGV = ("nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader")
READ_BYTES = 2 * 2**20

MODULE = ("-m", "vllm.collect_env")
"""The default: vLLM's own module, run by the candidate's python."""

LIBRARIES = {
    "torch": ("torch",),
    "flashinfer": ("flashinfer-python", "flashinfer_python", "flashinfer"),
    "triton": ("triton",),
    "transformers": ("transformers",),
    "nccl": ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11", "nvidia-nccl"),
}
"""Fingerprint name → the pip names collect_env lists it under, first found wins."""

_FIELDS = {
    "PyTorch version": "torch",
    "CUDA used to build PyTorch": "cuda_build",
    "CUDA runtime version": "cuda_runtime",
    "Nvidia driver version": "driver",
    "vLLM Version": "vllm",
    "GPU models and configuration": "gpu_models",
}
_NOTHING = frozenset({"", "N/A", "Could not collect", "No CUDA", "None"})
_KEY = re.compile(r"[A-Za-z][\w /().-]{0,80}")
_PIP = re.compile(r"\[(?:pip\d?|conda)\] {1,80}([\w.\-]{1,200})(?:==| {1,80})([^\s]{1,200})")
_GPU = re.compile(r"GPU \d{1,4}: ")
LINE_CHARS = 2048
"""The start of each collect_env line read: its own lines are short, and a 2 MiB line of
something else must cost no more than a short one (every pattern here is linear)."""


def _field(line: str) -> tuple[str, str] | None:
    """`Key   : value` (or `Key: value`) as (key, value), split at the first colon. Pure."""
    key, colon, value = line.partition(":")
    key = key.rstrip()
    if not colon or not _KEY.fullmatch(key):
        return None
    return key, value.strip()


def _gpu(line: str) -> str | None:
    """`GPU 0: NVIDIA H200 (UUID: GPU-...)` as its model, or None. Pure."""
    m = _GPU.match(line)
    if m is None:
        return None
    model = line[m.end() :].strip()
    if model.endswith(")") and " (UUID: " in model:
        model = model[: model.rindex(" (UUID: ")].rstrip()
    return model or None


@dataclass(frozen=True)
class CollectEnv:
    """The facts a maintainer asks for, read from one collect_env output."""

    torch: str = ""
    cuda_build: str = ""
    """`CUDA used to build PyTorch`."""
    cuda_runtime: str = ""
    """`CUDA runtime version` (nvcc's, where the image has one)."""
    driver: str = ""
    vllm: str = ""
    gpu_models: tuple[str, ...] = ()
    """One name per GPU, as `nvidia-smi -L` lists them."""
    libraries: Mapping[str, str] = field(default_factory=dict)
    """`Versions of relevant libraries`: pip name → version."""

    def facts(self) -> dict[str, str]:
        """The fingerprint's view: only what was collected, as text."""
        found = {
            "torch": self.torch,
            "cuda_build": self.cuda_build,
            "cuda_runtime": self.cuda_runtime,
            "driver": self.driver,
            "vllm": self.vllm,
        }
        for key, names in LIBRARIES.items():
            if key != "torch" or not found["torch"]:
                found[key] = next((self.libraries[n] for n in names if n in self.libraries), "")
        if self.gpu_models:
            found["gpu_count"] = str(len(self.gpu_models))
            found["gpu_models"] = models_line(self.gpu_models)
        return {k: v for k, v in found.items() if v}


def models_line(names: Sequence[str]) -> str:
    """`["H100", "H100", "A10"]` → `2 x H100, 1 x A10`. Pure."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n} x {name}" for name, n in counts.items())


def parse(text: str) -> CollectEnv:
    """collect_env's output (both its current `Key   : value` layout and the older
    `Key: value` one) as a CollectEnv. Pure."""
    values: dict[str, str] = {}
    libraries: dict[str, str] = {}
    gpus: list[str] = []
    lines = [line[:LINE_CHARS] for line in text.splitlines()]
    for i, line in enumerate(lines):
        pip = _PIP.match(line)
        if pip:
            libraries.setdefault(pip.group(1), pip.group(2))
            continue
        field = _field(line)
        if field is None or field[0] not in _FIELDS:
            continue
        key, value = _FIELDS[field[0]], field[1]
        if key == "gpu_models":
            listed = [value] if value else []
            if not value:  # several GPUs: one line each below
                for more in lines[i + 1 :]:
                    if _gpu(more.strip()) is None:
                        break
                    listed.append(more.strip())
            gpus = [g for g in map(_gpu, listed) if g]
            continue
        if value not in _NOTHING:
            if value.endswith(")") and " (git sha: " in value:
                value = value[: value.rindex(" (git sha: ")].rstrip()
            values.setdefault(key, value)
    return CollectEnv(gpu_models=tuple(gpus), libraries=libraries, **values)


def argv_for(configured: Sequence[str] | None, python: str) -> list[str]:
    """The command that collects: the configured one (empty: none), else `python -m
    vllm.collect_env` with the candidate's python. Pure."""
    if configured is not None:
        return list(configured)
    return [python, *MODULE]


def python_of(command: Sequence[str], build_python: str = "") -> str:
    """The candidate's python: the build's, else the server command's own interpreter
    (`/venv/bin/python3 -m vllm.entrypoints...`), else `python3`. Pure."""
    if build_python:
        return build_python
    if command and re.fullmatch(r"python[\d.]*", Path(command[0]).name):
        return command[0]
    return "python3"


def _why(code: str, output: str) -> str:
    """Why a collect_env gave nothing: its exit and its last line."""
    if code.startswith("off"):
        return code
    if code == "timeout":
        return f"timed out after {TIMEOUT_S}s"
    last = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "")
    if "No module named" in last:
        return f"not available in this build ({last[:200]})"
    return f"exit {code or '?'}" + (f": {last[:200]}" if last else "")


def clear(probe_dir: Path) -> None:
    """Remove what an earlier attempt in this probe folder left (a re-probe, `check --out`
    given again): its facts are never read as this attempt's."""
    for name in (OUTPUT, CODE, GPUS):
        (probe_dir / name).unlink(missing_ok=True)


def collected(probe_dir: Path) -> dict[str, str]:
    """The `collect_env` facts of a probe from the files its launcher left (empty when it
    left none): what collect_env said, the GPUs nvidia-smi listed there, or why not."""
    out, code_file, smi = probe_dir / OUTPUT, probe_dir / CODE, probe_dir / GPUS
    if not code_file.exists() and not out.exists() and not smi.exists():
        return {}
    output, code = head_text(out, READ_BYTES), head_text(code_file, READ_BYTES).strip()
    facts = parse(output).facts()
    if code != "0" and not facts:
        facts["error"] = _why(code, output)
    gpus = parse_gpus(head_text(smi, READ_BYTES))
    if gpus:  # nvidia-smi in the candidate's environment: the GPUs it really got
        facts["gpu_count"] = str(len(gpus))
        facts["gpu_models"] = models_line([f"{g['name']} ({g['memory.total']})" for g in gpus])
        facts["driver"] = gpus[0]["driver_version"] or facts.get("driver", "")
    return facts


def node_lines(run: str | None, into: Path) -> list[str]:
    """Shell lines for a node script: nvidia-smi then collect_env in the background, their
    outputs into `into` (the server starts meanwhile; the exit code is written last);
    `run` is the command as shell words, None: off. Pure."""
    folder = shlex.quote(str(into))
    smi = " ".join(SMI_ARGV)  # bounded: a wedged GPU hangs nvidia-smi, and collect_env after it
    smi = f"if command -v timeout >/dev/null; then timeout {SMI_TIMEOUT_S:g} {smi}; else {smi}; fi"
    gpus = (
        f"if command -v nvidia-smi >/dev/null && {smi} > {folder}/{GPUS}.part 2>/dev/null; "
        f"then mv {folder}/{GPUS}.part {folder}/{GPUS}; else rm -f {folder}/{GPUS}.part; fi"
    )
    if run is None:
        code = f"echo 'off: server.collect_env is empty' > {folder}/{CODE}"
    else:
        code = (  # the exit code from inside the pipe, the output cut by head
            f"{{ if command -v timeout >/dev/null; then timeout {TIMEOUT_S} {run}; else {run}; "
            f"fi 2>&1; echo $? > {folder}/{CODE}.part; }} | head -c {MAX_OUTPUT_BYTES} "
            f"> {folder}/{OUTPUT}; code=$(cat {folder}/{CODE}.part 2>/dev/null); "
            f'rm -f {folder}/{CODE}.part; if [ "$code" = 124 ]; then code=timeout; fi; '
            f'echo "$code" > {folder}/{CODE}'
        )
    return [
        "# what this node and build are (nvidia-smi, vLLM's collect_env), beside the server",
        f"( set +e; {gpus}; {code} ) </dev/null &",
    ]


Exec = Callable[[Sequence[str], float], tuple[int | None, bytes]]
"""Runs argv where a server runs (its container, its pod) for at most that many seconds:
its exit code (None: it timed out) and output; a LaunchError where it cannot."""


def collect_in(
    run: Exec,
    into: Path,
    configured: Sequence[str] | None,
    candidate: Candidate,
    secrets: Sequence[str],
) -> None:
    """collect_env and nvidia-smi where `run` runs them (the running container or pod: its
    GPUs, its environment), their outputs into `into`, secrets masked; never raises."""
    if configured == []:
        (into / CODE).write_text("off: server.collect_env is empty\n")
        return
    c = candidate
    values = {"commit": c.commit, "short": c.short, "python": "python3", "build": ""}
    argv = [fill(a, values) for a in argv_for(configured, "python3")]
    try:
        code, out = run(argv, TIMEOUT_S)
    except LaunchError as exc:
        (into / CODE).write_text(f"off: {exc}\n")
        return
    (into / OUTPUT).write_text(redact(out.decode("utf-8", "replace"), secrets))
    (into / CODE).write_text("timeout\n" if code is None else f"{code}\n")
    with suppress(LaunchError):
        code, out = run(SMI_ARGV, SMI_TIMEOUT_S)
        if code == 0:
            (into / GPUS).write_bytes(out)


class LocalCollect:
    """collect_env and nvidia-smi for a local server, with its environment, beside it:
    `start` when the server starts, `finish` (bounded) before it stops, `stop` always."""

    def __init__(
        self,
        argv: Sequence[str] | None,
        *,
        env: Mapping[str, str],
        cwd: Path,
        into: Path,
        secret_names: Sequence[str] = (),
        timeout: float = TIMEOUT_S,
        clock: Clock = SYSTEM,
    ) -> None:
        self.argv = None if argv is None else list(argv)
        self.clock = clock
        self.env = dict(env)
        self.cwd = cwd
        self.into = into
        self.secret_names = list(secret_names)
        self.timeout = timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._started = 0.0
        self._done = False

    def start(self) -> None:
        self.into.mkdir(parents=True, exist_ok=True)
        for name in (CODE, GPUS):  # a probe folder used before (a resumed run) is written anew
            (self.into / name).unlink(missing_ok=True)
        if self.argv is None:
            (self.into / CODE).write_text("off: server.collect_env is empty\n")
            return
        try:
            with (self.into / OUTPUT).open("wb") as out:
                redact = ["--redact", ",".join(self.secret_names)]
                cap = ["--cap", str(MAX_OUTPUT_BYTES)]
                self._proc = subprocess.Popen(
                    [sys.executable, "-I", guard.__file__, "1", *cap, *redact, "--", *self.argv],
                    stdin=subprocess.PIPE,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=self.cwd,
                    env=self.env,
                    start_new_session=True,
                )
        except OSError as exc:
            (self.into / CODE).write_text(f"off: cannot start it: {exc.strerror}\n")
            return
        self._started = self.clock.monotonic()

    def finish(self) -> None:
        """Wait for collect_env (up to its timeout from its start), then list the GPUs."""
        if self._done:
            return
        self._done = True
        proc = self._proc
        if proc is not None:
            left = max(0.0, self._started + self.timeout - self.clock.monotonic())
            try:
                code = str(proc.wait(timeout=left))
            except subprocess.TimeoutExpired:
                code = "timeout"
            self.stop()
            (self.into / CODE).write_text(f"{code}\n")
        smi = shutil.which("nvidia-smi", path=self.env.get("PATH"))
        if smi is None:
            return
        try:
            done = subprocess.run(
                [smi, *SMI_ARGV[1:]],
                capture_output=True,
                env=self.env,
                timeout=SMI_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return
        if done.returncode == 0:
            (self.into / GPUS).write_bytes(done.stdout)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()
