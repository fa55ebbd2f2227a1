"""The Slurm launcher: one batch job per probe, on the cluster's own scheduler.

    sbatch --parsable job.sh ─► squeue / scontrol show job (PENDING → RUNNING on a node)
        ─► http://<node>:<port> ready ─► checks ─► scancel (every exit path)

The job script and the per-node script are written into the probe folder (a shared
filesystem, as on every cluster), and Slurm writes the server's output there as
server.log. The config's environment reaches the job through sbatch's own environment
(`--export=ALL`), never through a file: no secret is written. A multi-node probe runs the
per-node script once per node with `srun`; `{head}`, `{node_rank}` and `{nnodes}` become
the head node's name, SLURM_NODEID and SLURM_NNODES there.

A job that never runs (PENDING past `pending_timeout`), or that the cluster ends (NODE_FAIL,
PREEMPTED, TIMEOUT, BOOT_FAIL), is never a verdict: it is resubmitted on another node
(`--exclude`) up to `retries` times, then the probe is skip. A job whose owner (the harness
that submitted it) died is cancelled by the next run on the same folder (`reap`).
"""

from __future__ import annotations

import os
import shlex
import string
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ..builds import Builder
from ..builds.prefetch import BuildPrefetcher
from ..config import SlurmServerConfig, fill
from ..errors import LaunchError, NotReady, ServerExited
from ..model import Candidate
from ..redact import redact
from ..retry import NotYetReady
from . import Artifact, Instrument
from .commands import Prefetching, command_artifact, prepare
from .common import LoggedServer, free_port, owner_alive, owner_label, ready_once

RUNTIME = {"head": "LLM_BISECT_HEAD", "node_rank": "SLURM_NODEID", "nnodes": "SLURM_NNODES"}
"""Placeholders known only on the nodes, and the variable each becomes there."""
RETRY_STATES = frozenset({"NODE_FAIL", "PREEMPTED", "TIMEOUT", "BOOT_FAIL"})
"""The cluster ended the job: never a verdict; another node is tried."""
LIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED"})
POLL_S = 0.5
JOB_PREFIX = "llm-bisect-"
STOP_WAIT_S = 60.0


def _word(template: str, values: Mapping[str, str]) -> str:
    """One argument for bash: literal parts quoted, node-time placeholders as "${VAR}"."""
    parts = []
    for literal, field, _, _ in string.Formatter().parse(template):
        if literal:
            parts.append(shlex.quote(literal))
        if field is None:
            continue
        if field in RUNTIME:
            parts.append(f'"${{{RUNTIME[field]}}}"')
        else:
            parts.append(shlex.quote(values[field]))
    return "".join(parts) or "''"


def node_script(
    command: Sequence[str], worker: Sequence[str] | None, values: Mapping[str, str]
) -> str:
    """What each node of a probe runs: the command on the head (rank 0), `worker` on the
    others. Pure."""
    head = " ".join(_word(a, values) for a in command)
    lines = ["#!/bin/bash", "set -eu"]
    if worker is None:
        return "\n".join([*lines, f"exec {head}", ""])
    rest = " ".join(_word(a, values) for a in worker)
    return "\n".join(
        [
            *lines,
            'if [ "${SLURM_NODEID:-0}" = 0 ]; then',
            f"  exec {head}",
            "else",
            f"  exec {rest}",
            "fi",
            "",
        ]
    )


def literal_pattern(path: str) -> str:
    """A path as sbatch's --output takes it literally: `%j`, `%x`, ... would be expanded
    (--chdir is not). Pure."""
    return path.replace("%", "%%")


def job_script(
    cfg: SlurmServerConfig,
    *,
    name: str,
    log: Path,
    node_script_path: Path,
    comment: str,
    cwd: Path,
    values: Mapping[str, str],
    exclude: Sequence[str] = (),
) -> str:
    """The sbatch script of one probe (`values` fill the container image). Pure."""
    opts = [
        f"--job-name={name}",
        f"--chdir={cwd}",
        f"--output={literal_pattern(str(log))}",
        "--open-mode=append",
        f"--nodes={cfg.nodes}",
        "--ntasks-per-node=1",
        f"--comment={comment}",
    ]
    for flag, value in (
        ("--partition", cfg.partition),
        ("--gpus-per-node", cfg.gpus_per_node),
        ("--gres", cfg.gres),
        ("--time", cfg.time),
        ("--account", cfg.account),
    ):
        if value is not None:
            opts.append(f"{flag}={value}")
    if cfg.exclusive:
        opts.append("--exclusive")
    if exclude:
        opts.append(f"--exclude={','.join(exclude)}")
    opts += cfg.sbatch_args
    srun = ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    if cfg.container_image:
        srun.append(f"--container-image={fill(cfg.container_image, values)}")
        if cfg.container_mounts:
            srun.append(f"--container-mounts={','.join(cfg.container_mounts)}")
    return "\n".join(
        [
            "#!/bin/bash",
            *(f"#SBATCH {shlex.quote(o)}" for o in opts),
            "set -eu",
            'LLM_BISECT_HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            "export LLM_BISECT_HEAD",
            f"exec {shlex.join(srun)} bash {shlex.quote(str(node_script_path))}",
            "",
        ]
    )


@dataclass(frozen=True)
class JobState:
    """What Slurm says of a job now."""

    state: str
    """PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, NODE_FAIL, ...; GONE when Slurm no
    longer knows the job."""
    nodes: str = ""
    """Its node list as Slurm writes it (`gpu[01-02]`)."""
    reason: str = ""
    exit_code: str = ""


def parse_scontrol(text: str) -> JobState:
    """`scontrol show job -o ID` as a JobState. Pure."""
    fields = dict(
        item.split("=", 1) for item in text.split() if "=" in item and not item.startswith("=")
    )
    nodes = fields.get("NodeList", "")
    return JobState(
        fields.get("JobState", "GONE"),
        "" if nodes == "(null)" else nodes,
        fields.get("Reason", ""),
        fields.get("ExitCode", ""),
    )


class Slurm:
    """The Slurm commands, run with the config's environment; a failed command is a
    LaunchError naming it."""

    def __init__(self, env: Mapping[str, str], timeout: float = 60.0) -> None:
        self.env = dict(env)
        self.timeout = timeout

    def run(self, argv: list[str], env: Mapping[str, str] | None = None) -> str:
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                env=dict(env or self.env),
                timeout=self.timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise LaunchError(f"slurm: {argv[0]}: {exc}") from exc
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            raise LaunchError(f"slurm: {argv[0]} failed: {said[-1] if said else done.returncode}")
        return done.stdout

    def submit(self, script: Path, env: Mapping[str, str]) -> str:
        out = self.run(["sbatch", "--parsable", str(script)], env)
        return out.strip().split(";")[0]

    def state(self, job: str) -> JobState:
        try:
            out = self.run(["scontrol", "show", "job", "-o", job])
        except LaunchError as exc:
            if "Invalid job id" in str(exc):
                return JobState("GONE")
            raise
        return parse_scontrol(out)

    def hostnames(self, nodelist: str) -> list[str]:
        return self.run(["scontrol", "show", "hostnames", nodelist]).split()

    def cancel(self, job: str) -> None:
        with suppress(LaunchError):
            self.run(["scancel", job])

    def jobs(self) -> list[tuple[str, str, str]]:
        """(id, name, comment) of every job in the queue."""
        out = self.run(["squeue", "-h", "-o", "%i|%j|%k"])
        rows = [line.split("|", 2) for line in out.splitlines() if line.count("|") >= 2]
        return [(r[0], r[1], r[2]) for r in rows]


class SlurmServer(LoggedServer):
    """One probe's job. Enter submits it; exit cancels it and waits until it is gone."""

    def __init__(
        self,
        launcher: SlurmLauncher,
        candidate: Candidate,
        probe_dir: Path,
        env: Mapping[str, str],
        values: Mapping[str, str],
        instrument: Instrument | None,
    ) -> None:
        self.launcher = launcher
        self.cfg = launcher.cfg
        self.candidate = candidate
        self.probe_dir = probe_dir
        self.log_path = probe_dir / "server.log"
        self.env = dict(env)
        self.values = dict(values)
        self.instrument = instrument
        self.secrets = [self.env[n] for n in launcher.secret_names if n in self.env]
        self.port = int(values["port"])
        self.base_url = ""
        self.job: str | None = None
        self.excluded: list[str] = []
        self.tries = 0
        self.facts: dict[str, Any] = {}

    def __enter__(self) -> SlurmServer:
        self._submit()
        return self

    def _submit(self) -> None:
        self.probe_dir.mkdir(parents=True, exist_ok=True)
        extra = list(self.instrument.args) if self.instrument is not None else []
        command = [*self.cfg.command, *extra]
        worker = [*self.cfg.worker_command, *extra] if self.cfg.worker_command else None
        if worker is None and self.cfg.nodes > 1:
            worker = command
        node = self.probe_dir / "node.sh"
        node.write_text(node_script(command, worker, self.values))
        script = self.probe_dir / "job.sh"
        script.write_text(
            job_script(
                self.cfg,
                name=f"{JOB_PREFIX}{self.candidate.short}",
                log=self.log_path.resolve(),
                node_script_path=node.resolve(),
                comment=f"llm-bisect run={self.launcher.run_id} owner={self.launcher.owner}",
                cwd=self.launcher.cwd.resolve(),
                values=self.values,
                exclude=self.excluded,
            )
        )
        self.tries += 1
        self.job = self.launcher.slurm.submit(script, self.env)
        self.base_url = ""
        self.launcher.note(f"{self.candidate.short}: slurm job {self.job} submitted")

    def wait_ready(self) -> None:
        launcher, clock = self.launcher, self.launcher.clock
        submitted = clock()
        started: float | None = None
        with httpx.Client(timeout=2.0) as http:
            while True:
                if self.job is None:  # stopped from another thread (a cancelled probe)
                    raise ServerExited("the slurm job was cancelled before ready", None)
                job = launcher.slurm.state(self.job)
                if job.state == "PENDING" and clock() - submitted > self.cfg.pending_timeout:
                    self.stop()
                    raise NotReady(
                        f"slurm job pending for {self.cfg.pending_timeout:g}s ({job.reason})",
                        "",
                    )
                if job.state in RETRY_STATES:
                    if self.tries <= self.cfg.retries:
                        nodes = launcher.slurm.hostnames(job.nodes) if job.nodes else []
                        self.excluded += [n for n in nodes if n not in self.excluded]
                        launcher.note(
                            f"{self.candidate.short}: slurm job {self.job} {job.state}; "
                            f"again, not on {', '.join(self.excluded) or 'the same node'}"
                        )
                        self._submit()
                        submitted, started = clock(), None
                        continue
                    raise ServerExited(
                        f"slurm job {self.job} {job.state} after {self.tries} tries",
                        None,
                        self.log_tail(),
                    )
                if job.state not in LIVE_STATES:
                    code = job.exit_code.split(":")[0]
                    raise ServerExited(
                        f"slurm job {self.job} {job.state} ({job.reason}, exit {job.exit_code}) "
                        "before ready",
                        int(code) if code.isdigit() else None,
                        self.log_tail(),
                    )
                if job.state == "RUNNING":
                    if started is None:
                        started = clock()
                        head = launcher.slurm.hostnames(job.nodes)[0]
                        host = fill(self.cfg.host, {"node": head})
                        self.base_url = f"http://{host}:{self.port}"
                        self.facts = {
                            "slurm": {
                                "job": self.job,
                                "nodes": job.nodes,
                                "tries": self.tries,
                                "queued_s": round(started - submitted, 2),
                            }
                        }
                    try:
                        ready_once(http_for(http, self.base_url))
                        self.facts["slurm"]["start_s"] = round(clock() - started, 2)
                        return
                    except NotYetReady as exc:
                        if clock() - started > self.cfg.ready_timeout:
                            raise NotReady(
                                f"not ready after {clock() - started:.0f}s on {job.nodes} "
                                f"(ready_timeout {self.cfg.ready_timeout:g}s): {exc}",
                                self.log_tail(),
                            ) from None
                launcher.sleep(POLL_S)

    def check_alive(self, wait: float = 0.0) -> None:
        if self.job is None:
            raise ServerExited("the slurm job was not submitted", None)
        deadline = self.launcher.clock() + wait
        while True:
            job = self.launcher.slurm.state(self.job)
            if job.state not in LIVE_STATES:
                raise ServerExited(
                    f"slurm job {self.job} {job.state} ({job.reason}, exit {job.exit_code})",
                    None,
                    self.log_tail(),
                )
            if self.launcher.clock() >= deadline:
                return
            self.launcher.sleep(POLL_S)

    def stop(self) -> None:
        job, self.job = self.job, None
        if job is None:
            return
        slurm = self.launcher.slurm
        slurm.cancel(job)
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline:  # until Slurm has ended the job's processes
            with suppress(LaunchError):
                if slurm.state(job).state not in (*LIVE_STATES, "COMPLETING"):
                    break
            time.sleep(POLL_S)
        self._scrub_log()

    def _scrub_log(self) -> None:
        """Slurm wrote the server's output straight to disk: mask its secrets there too."""
        if not self.secrets or not self.log_path.exists():
            return
        with suppress(OSError):
            text = self.log_path.read_text(errors="replace")
            clean = redact(text, self.secrets)
            if clean != text:
                self.log_path.write_text(clean)

    def fingerprint(self) -> dict[str, Any]:
        node = self.probe_dir / "node.sh"
        lines = node.read_text().splitlines() if node.exists() else []
        execs = [line.strip().removeprefix("exec ") for line in lines if "exec " in line]
        return {
            **self.launcher.build_facts.get(self.candidate.commit, {}),
            **self.facts,
            "command": f"sbatch {self.probe_dir / 'job.sh'}  # runs: " + " ; ".join(execs),
        }


def http_for(http: httpx.Client, base_url: str) -> httpx.Client:
    """The client, pointed at the job's server (the node is known only once it runs)."""
    http.base_url = httpx.URL(base_url)
    return http


class SlurmLauncher(Prefetching):
    """Submits one batch job per candidate (see the module docstring)."""

    def __init__(
        self,
        cfg: SlurmServerConfig,
        *,
        env: Mapping[str, str],
        secret_names: list[str],
        run_id: str,
        cwd: Path,
        base_env: Mapping[str, str] | None = None,
        builder: Builder | None = None,
        report: Callable[[str], None] = lambda _: None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.cfg = cfg
        self.env = {**(os.environ if base_env is None else base_env), **env}
        self.secret_names = secret_names
        self.run_id = run_id
        self.builder = builder
        self.prefetcher = BuildPrefetcher(builder) if builder is not None else None
        self.note = report
        self.clock = clock
        self.sleep = sleep
        self.owner = owner_label()
        self.cwd = cwd
        self.slurm = Slurm(self.env)
        self.build_facts: dict[str, dict[str, Any]] = {}

    def artifact(self, candidate: Candidate) -> Artifact:
        return command_artifact(self.builder, candidate, f"slurm: {' '.join(self.cfg.command)}")

    def launch(
        self,
        candidate: Candidate,
        probe_dir: Path,
        instrument: Instrument | None = None,
        slot: int = 0,
    ) -> SlurmServer:
        port = self.cfg.port or free_port()
        ready = prepare(self.builder, candidate, probe_dir, self.env, instrument)
        values = {"commit": candidate.commit, "short": candidate.short, "port": str(port)}
        self.build_facts[candidate.commit] = ready.facts
        return SlurmServer(self, candidate, probe_dir, ready.env, values | ready.values, instrument)

    def reap(self) -> int:
        """Cancel this run's jobs that a killed harness left in the queue (a live owner's
        jobs are spared)."""
        cancelled = 0
        for job, name, comment in self.slurm.jobs():
            if not name.startswith(JOB_PREFIX) or f"run={self.run_id}" not in comment.split():
                continue
            owner = next((w[6:] for w in comment.split() if w.startswith("owner=")), "")
            if owner and owner_alive(owner):
                continue
            self.slurm.cancel(job)
            cancelled += 1
        return cancelled
