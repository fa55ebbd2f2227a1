"""The Slurm launcher: one batch job per probe, on the cluster's own scheduler.

    sbatch --parsable job.sh ─► squeue / scontrol show job (PENDING → RUNNING on a node)
        ─► http://<node>:<port> ready ─► checks ─► scancel (every exit path)

The job script and the per-node script are written into the probe folder (a shared
filesystem, as on every cluster), and Slurm writes the server's output there as
server.log. The config's environment reaches the job through sbatch's own environment
(`--export=ALL`), never through a file: no secret is written. The job's output reaches
server.log through a filter (awk, on the batch node) that masks the values of the secret
variables, line by line as they come: no token is in clear there while the job runs, nor
after the harness is killed. A multi-node probe runs the
per-node script once per node with `srun`; `{head}`, `{node_rank}` and `{nnodes}` become
the head node's name, SLURM_NODEID and SLURM_NNODES there.

The head node resolves which weights its server loaded (weights.py) once the harness asks:
at the fingerprint, the server ready, the harness writes `weights.ask` into the probe
folder, and the node answers `weights.json` there.

A job that never runs (PENDING past `pending_timeout`), or that the cluster ends (NODE_FAIL,
PREEMPTED, TIMEOUT, BOOT_FAIL), is never a verdict: it is resubmitted on another node
(`--exclude`) up to `retries` times, then the probe is skip. A probe that must run elsewhere
than the verdict it checks (a re-probe, a confirmation trial, the Evidence stage's probe:
launchers.Avoids) is submitted with `--exclude` of that verdict's nodes; where no other
node can take it (sbatch: "Requested node configuration is not available", or pending past
`pending_timeout`), it runs on them again, a later start, and says so. A job whose owner
(the harness that submitted it, named in the job's comment) died is cancelled by the next
llm-bisect command on the same node, whatever its run (`reap`).
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import string
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx
from pydantic import Field, field_validator

from .. import collectenv, enginecache, escape as esc, weights
from ..builds.prefetch import BuildPrefetcher
from ..config import CommandServerBase, check_placeholders
from ..errors import ConfigError, LaunchError, NotReady, ServerExited, Unplaced
from ..fingerprint import Facts
from ..kinds import (
    LAUNCHERS,
    LauncherContext,
    LauncherKind,
    Leftovers,
    Preflight,
    PreflightContext,
)
from ..model import Candidate
from ..redact import redact
from ..retry import NotYetReady
from ..secretnames import argv_secrets
from ..templates import IMAGE_PLACEHOLDERS, fill
from . import Artifact, Instrument
from .commands import Prefetching, command_artifact, prepare
from .common import (
    LoggedServer,
    free_port,
    last_json,
    owner_label,
    owner_pid,
    placement_facts,
    ready_once,
    reapable,
    weights_facts,
)
from .process import PROCESS_PLACEHOLDERS, check_cwd, cwd_of, expand_cwd, needs_build

RUNTIME = {"head": "LLM_BISECT_HEAD", "node_rank": "SLURM_NODEID", "nnodes": "SLURM_NNODES"}
"""Placeholders known only on the nodes, and the variable each becomes there."""
RETRY_STATES = frozenset({"NODE_FAIL", "PREEMPTED", "TIMEOUT", "BOOT_FAIL"})
"""The cluster ended the job: never a verdict; another node is tried."""
LIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED"})
POLL_S = 0.5
SETTLE_S = 120.0
"""How long a job ending (COMPLETING) is waited for to say why it ended."""
JOB_PREFIX = "llm-bisect-"
STOP_WAIT_S = 60.0
MASK_AWK = r"""
BEGIN {
  n = split(names, name, ",")
  for (i = 1; i <= n; i++) if (length(ENVIRON[name[i]]) >= 4) secret[++k] = ENVIRON[name[i]]
}
{
  line = $0; m = 0
  for (i = 1; i <= k; i++) {
    from = 1
    while ((p = index(substr(line, from), secret[i])) > 0) {
      at = from + p - 1; m++; lo[m] = at; hi[m] = at + length(secret[i]); from = at + 1
    }
  }
  for (i = 2; i <= m; i++) {
    a = lo[i]; b = hi[i]
    for (j = i - 1; j >= 1 && lo[j] > a; j--) { lo[j + 1] = lo[j]; hi[j + 1] = hi[j] }
    lo[j + 1] = a; hi[j + 1] = b
  }
  out = ""; at = 1; i = 1
  while (i <= m) {
    a = lo[i]; b = hi[i]; i++
    while (i <= m && lo[i] < b) { if (hi[i] > b) b = hi[i]; i++ }
    out = out substr(line, at, a - at) "***"; at = b
  }
  print out substr(line, at); fflush()
}
"""
"""Masks the values (4+ characters) of the variables named in `names` on each line, as
redact.redact does: overlapping secrets are one ***. POSIX awk, on the batch node."""


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


def _words(argv: Sequence[str], values: Mapping[str, str]) -> str:
    return " ".join(_word(a, values) for a in argv)


def node_env_lines(env: Mapping[str, str] | None) -> list[str]:
    """Shell lines that set each variable to its value with `{node}` (enginecache.NODE) as
    this node's Slurm name, and make that folder. Pure."""
    lines = []
    for name, value in sorted((env or {}).items()):
        parts = [shlex.quote(p) if p else "" for p in value.split(enginecache.NODE)]
        joined = '"${SLURMD_NODENAME:-$(hostname -s)}"'.join(parts)
        lines += [f"export {name}={joined}", f'mkdir -p "${name}"']
    return lines


def node_script(
    command: Sequence[str],
    worker: Sequence[str] | None,
    values: Mapping[str, str],
    before_head: Sequence[str] = (),
    node_env: Mapping[str, str] | None = None,
) -> str:
    """What each node of a probe runs: the command on the head (rank 0), `worker` on the
    others; `before_head`: shell lines the head runs first (collect_env); `node_env`:
    variables whose `{node}` each node fills with its own name (the engine cache's folders,
    made there). Pure."""
    head = _words(command, values)
    lines = ["#!/bin/bash", "set -eu", *node_env_lines(node_env)]
    if worker is None:
        return "\n".join([*lines, *before_head, f"exec {head}", ""])
    rest = _words(worker, values)
    return "\n".join(
        [
            *lines,
            'if [ "${SLURM_NODEID:-0}" = 0 ]; then',
            *(f"  {line}" for line in before_head),
            f"  exec {head}",
            "else",
            f"  exec {rest}",
            "fi",
            "",
        ]
    )


WEIGHTS_ASK = "weights.ask"
"""Written by the harness once the server is ready: the node resolves the weights then."""
WEIGHTS_OUT = "weights.json"
WEIGHTS_PROBE = "weights_probe.py"
"""weights.probe_source of what the command line asks, run by the node's python."""


def weights_lines(python: str, into: Path) -> list[str]:
    """Shell lines for the head's script: in the background, once the harness asks (the
    server loaded its weights: an online start may have moved the hub's ref), the weights'
    revision resolved on the node into `into`; the wait ends with the server (the script's
    own pid, which `exec` gives the server). Pure."""
    folder = shlex.quote(str(into))
    ask, out = f"{folder}/{WEIGHTS_ASK}", f"{folder}/{WEIGHTS_OUT}"
    run = f"{shlex.quote(python)} {folder}/{WEIGHTS_PROBE}"
    bounded = f"timeout {weights.TIMEOUT_S:g} {run}"
    return [
        "# which weights the server loaded (the hub cache's snapshot), once the harness asks",
        f"( set +e; while [ ! -e {ask} ] && kill -0 $$ 2>/dev/null; do sleep 1; done; "
        f"if [ -e {ask} ]; then {{ if command -v timeout >/dev/null; then {bounded}; "
        f"else {run}; fi; }} > {out}.part 2>/dev/null && mv {out}.part {out}; fi ) </dev/null &",
    ]


def literal_pattern(path: str) -> str:
    """A path as sbatch's --output takes it literally: `%j`, `%x`, ... would be expanded
    (--chdir is not). Pure."""
    return path.replace("%", "%%")


@dataclass(frozen=True)
class BatchJob:
    """One probe's batch job as sbatch sees it: its name and comment (what `reap` reads),
    its log, the node script each task runs, the folder it runs in."""

    name: str
    comment: str
    log: Path
    node_script_path: Path
    cwd: Path


def job_script(
    cfg: SlurmServerConfig,
    job: BatchJob,
    *,
    values: Mapping[str, str],
    exclude: Sequence[str] = (),
    masked: Sequence[str] = (),
    mounts: Sequence[Path] = (),
) -> str:
    """The sbatch script of one probe (`values` fill the container image); the values of
    the `masked` variables never reach the log; in a container, `mounts` (the probe folder
    with node.sh, the instrument's folders) are at the same paths as on the host. Pure."""
    name, log, node_script_path, comment, cwd = (
        job.name, job.log, job.node_script_path, job.comment, job.cwd
    )  # fmt: skip
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
        ours = [f"{p}:{p}" for p in dict.fromkeys(str(m) for m in mounts)]
        if cfg.container_mounts or ours:
            srun.append(f"--container-mounts={','.join([*cfg.container_mounts, *ours])}")
    return "\n".join(
        [
            "#!/bin/bash",
            *(f"#SBATCH {shlex.quote(o)}" for o in opts),
            "set -eu",
            'LLM_BISECT_HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
            "export LLM_BISECT_HEAD",
            "set -o pipefail  # the job ends with the server's exit code, not the filter's",
            "# scancel: srun passes the signal on; this shell and the filter wait for the",
            "# server's last lines, so nothing reaches the log unmasked or is lost",
            "trap : TERM INT",
            "AWK=awk  # mawk reads a pipe in blocks unless interactive: lines would wait",
            'if command -v mawk >/dev/null; then AWK="mawk -W interactive"; fi',
            f"{shlex.join(srun)} bash {shlex.quote(str(node_script_path))} 2>&1 |",
            f"  (trap '' TERM INT; LC_ALL=C $AWK -v names={shlex.quote(','.join(masked))} "
            f"{shlex.quote(MASK_AWK.strip())})",
            "",
        ]
    )


def reproduce_line(
    job: Path,
    command: Sequence[str],
    worker: Sequence[str] | None,
    values: Mapping[str, str],
    env: Mapping[str, str] | None = None,
    secret: Sequence[str] = (),
) -> str:
    """What report.md shows for a probe: the `sbatch` of its job script (what a person runs
    again) after the environment llm-bisect gave it (`NAME=value`, a `secret` by name only:
    the job takes the caller's environment), then what the nodes run as shell comments,
    every line of them commented, so an argument that holds a newline is shown whole and a
    paste never runs it. Pure."""
    sbatch = esc.env_shell(env or {}, ["sbatch", str(job)], secret)
    lines = [sbatch, esc.comment(f"runs: {_words(command, values)}")]
    if worker is not None:
        lines.append(esc.comment(f"the other nodes run: {_words(worker, values)}"))
    return "\n".join(lines)


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

    def settled(
        self, job: str, first: JobState, clock: Callable[[], float], sleep: Callable[[float], None]
    ) -> JobState:
        """The job's state once Slurm has settled it: COMPLETING (its processes are being
        ended) says nothing of why it ended, and becomes CANCELLED, FAILED, TIMEOUT, ... a
        moment later; longer on a loaded controller. At most SETTLE_S."""
        found, deadline = first, clock() + SETTLE_S
        while found.state == "COMPLETING" and clock() < deadline:
            sleep(POLL_S)
            found = self.state(job)
        return found

    def hostnames(self, nodelist: str) -> list[str]:
        return self.run(["scontrol", "show", "hostnames", nodelist]).split()

    def cancel(self, job: str) -> None:
        with suppress(LaunchError):
            self.run(["scancel", job])

    def jobs(self) -> list[tuple[str, str, str]]:
        """(id, name, comment) of every job of this user in the queue."""
        user = pwd.getpwuid(os.getuid()).pw_name
        out = self.run(["squeue", "-h", "-u", user, "-o", "%i|%j|%k"])
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
        avoid: Sequence[str] = (),
    ) -> None:
        self.launcher = launcher
        self.cfg = launcher.cfg
        self.candidate = candidate
        self.probe_dir = probe_dir
        self.avoid = list(dict.fromkeys(avoid))
        """The nodes it keeps off (`--exclude`: launchers.Avoids); [] once none other took it."""
        self.asked = list(self.avoid)
        """The nodes it was asked to keep off."""
        self.log_path = probe_dir / "server.log"
        self.env = dict(env)
        self.values = dict(values)
        self.instrument = instrument
        self.secrets = [self.env[n] for n in launcher.secret_names if n in self.env]
        self.secrets += argv_secrets([*self.cfg.command, *(self.cfg.worker_command or [])])
        self.port = int(values["port"])
        self.base_url = ""
        self.job: str | None = None
        self.excluded: list[str] = []
        self.tries = 0
        self.facts: Facts = {}
        self.reproduce = ""
        nodes = {k: "{" + k + "}" for k in RUNTIME}
        self.wanted = weights.asked([fill(a, {**nodes, **values}) for a in self.cfg.command])
        """Which weights the command line names (weights.asked)."""

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
        python = collectenv.python_of(self.cfg.command, self.values.get("python", ""))
        collect = collectenv.argv_for(self.cfg.collect_env, python)
        values = {**self.values, "python": python}
        here = self.probe_dir.resolve()
        for name in (collectenv.CODE, collectenv.OUTPUT, collectenv.GPUS, WEIGHTS_ASK, WEIGHTS_OUT):
            (here / name).unlink(missing_ok=True)  # a resubmitted job writes them anew
        lines = collectenv.node_lines(_words(collect, values) if collect else None, here)
        if self.wanted.get("model"):
            (here / WEIGHTS_PROBE).write_text(weights.probe_source(self.wanted))
            lines += weights_lines(python, here)
        on_node = {k: v for k, v in self.env.items()
                   if k in enginecache.CACHES and enginecache.NODE in v}  # fmt: skip
        node.write_text(node_script(command, worker, self.values, lines, on_node))
        script = self.probe_dir / "job.sh"
        launcher = self.launcher
        shown = {
            k: v
            for k, v in self.env.items()
            if k in launcher.config_env or launcher.base_env.get(k) != v
        }
        self.reproduce = reproduce_line(
            script.resolve(), command, worker, self.values, shown, launcher.secret_names
        )
        script.write_text(
            job_script(
                self.cfg,
                BatchJob(
                    name=f"{JOB_PREFIX}{self.candidate.short}",
                    comment=f"llm-bisect run={self.launcher.run_id} owner={self.launcher.owner}",
                    log=self.log_path.resolve(),
                    node_script_path=node.resolve(),
                    cwd=self.launcher.cwd.resolve(),
                ),
                values=self.values,
                exclude=[*self.avoid, *(n for n in self.excluded if n not in self.avoid)],
                masked=[n for n in self.launcher.secret_names if n in self.env],
                mounts=[here, *(self.instrument.paths if self.instrument is not None else ())],
            )
        )
        try:
            job = self.launcher.slurm.submit(script, self.env)
        except LaunchError as exc:
            if not self.avoid or NO_OTHER_NODE not in str(exc):
                raise
            self._same_node(f"sbatch: {NO_OTHER_NODE}")
            self._submit()
            return
        self.tries += 1
        self.job = job
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
                if job.state == "COMPLETING":  # ending: why is said once Slurm has settled it
                    job = launcher.slurm.settled(self.job, job, clock, launcher.sleep)
                if job.state == "PENDING" and clock() - submitted > self.cfg.pending_timeout:
                    self.stop()
                    if self.avoid:  # only the nodes it keeps off would take it
                        self._same_node(f"pending for {self.cfg.pending_timeout:g}s")
                        self._submit()
                        submitted, started = clock(), None
                        continue
                    raise Unplaced(
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
                    raise Unplaced(
                        f"slurm job {self.job} {job.state} after {self.tries} tries",
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
                                **({"avoid": self.asked, "avoided": bool(self.avoid)}
                                   if self.asked else {}),
                            }
                        }  # fmt: skip
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

    def _same_node(self, why: str) -> None:
        """No node but those it keeps off takes its job: it runs there again, a later start
        (never a hang, never an error), said."""
        self.launcher.note(
            f"{self.candidate.short}: no node but {', '.join(self.avoid)} takes its job ({why}): "
            "on the same node again, a later start, not elsewhere"
        )
        self.avoid = []

    def check_alive(self, wait: float = 0.0) -> None:
        if self.job is None:
            raise ServerExited("the slurm job was not submitted", None)
        deadline = self.launcher.clock() + wait
        while True:
            job = self.launcher.slurm.state(self.job)
            if job.state == "COMPLETING":
                job = self.launcher.slurm.settled(
                    self.job, job, self.launcher.clock, self.launcher.sleep
                )
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
        clock, sleep = self.launcher.clock, self.launcher.sleep
        deadline = clock() + STOP_WAIT_S
        while clock() < deadline:  # until Slurm has ended the job's processes
            with suppress(LaunchError):
                if slurm.state(job).state not in (*LIVE_STATES, "COMPLETING"):
                    break
            sleep(POLL_S)
        self._scrub_log()

    def _scrub_log(self) -> None:
        """Slurm wrote the server's output and collect_env's straight to disk: mask their
        secrets there too."""
        if not self.secrets:
            return
        for path in (self.log_path, self.probe_dir / collectenv.OUTPUT):
            with suppress(OSError):
                text = path.read_text(errors="replace")
                clean = redact(text, self.secrets)
                if clean != text:
                    path.write_text(clean)

    def fingerprint(self) -> Facts:
        """What the build is; collect_env on the node has finished (or its time is up):
        its facts are read from the probe folder, where the node wrote them."""
        self._wait_collect()
        nodes = str(
            self.facts.get("slurm", {}).get("nodes", "")
        )  # the allocation's, as Slurm writes them
        return {
            **self.launcher.build_facts.get(self.candidate.commit, {}),
            **self.facts,
            "command": self.reproduce or esc.shell(["sbatch", str(self.probe_dir / "job.sh")]),
            **self._weights(),
            **placement_facts(nodes, self.env),
        }

    def _weights(self) -> Facts:
        """The weights the head node says its server loaded: asked for now (the server is
        ready), awaited while the job lives, at most the resolver's own time limit."""
        if not self.wanted.get("model") or self.job is None:
            return {}
        here = self.probe_dir.resolve()
        (here / WEIGHTS_ASK).touch()
        answer = here / WEIGHTS_OUT
        deadline = self.launcher.clock() + weights.TIMEOUT_S + 2 * POLL_S + 1
        while not answer.exists() and self.launcher.clock() < deadline and self.job is not None:
            try:  # a controller that does not answer now loses the facts, never the verdict
                if self.launcher.slurm.state(self.job).state not in LIVE_STATES:
                    break
            except LaunchError:
                break
            self.launcher.sleep(POLL_S)
        with suppress(OSError):
            return weights_facts(last_json(answer.read_bytes()))
        return {}

    def _wait_collect(self) -> None:
        """Until the node wrote collect_env's exit code (an event: a file on the shared
        filesystem), while the job lives, at most collect_env's own timeout."""
        code = self.probe_dir / collectenv.CODE
        deadline = self.launcher.clock() + collectenv.TIMEOUT_S
        while not code.exists() and self.launcher.clock() < deadline and self.job is not None:
            try:  # a controller that does not answer now loses the facts, never the verdict
                if self.launcher.slurm.state(self.job).state not in LIVE_STATES:
                    return
            except LaunchError:
                return
            self.launcher.sleep(POLL_S)


def http_for(http: httpx.Client, base_url: str) -> httpx.Client:
    """The client, pointed at the job's server (the node is known only once it runs)."""
    http.base_url = httpx.URL(base_url)
    return http


class SlurmLauncher(Prefetching):
    """Submits one batch job per candidate (see the module docstring)."""

    writes_probe_folder = True
    """Its servers can write the probe's folder at its path (loads.py: the path hook)."""

    def __init__(self, cfg: SlurmServerConfig, ctx: LauncherContext) -> None:
        self.cfg = cfg
        self.base_env = dict(ctx.environ)
        self.config_env = dict(ctx.env)
        self.env = {**self.base_env, **ctx.env}
        self.secret_names = list(ctx.secret_names)
        self.run_id = ctx.run_id
        self.builder = builder = ctx.builder
        self.prefetcher = BuildPrefetcher(builder) if builder is not None else None
        self.note = ctx.report
        self.clock = ctx.clock
        self.sleep = ctx.sleep
        self.owner = owner_label()
        self.cwd = cwd_of(cfg, ctx.base_dir)
        self.slurm = Slurm(self.env)
        self.build_facts: dict[str, Facts] = {}
        self._avoid: dict[str, tuple[str, ...]] = {}
        self._lock = threading.Lock()

    def avoid(self, candidate: Candidate, nodes: Sequence[str]) -> None:
        with self._lock:
            self._avoid[candidate.commit] = tuple(nodes)

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
        with self._lock:
            avoid = self._avoid.pop(candidate.commit, ())
        server = SlurmServer(
            self, candidate, probe_dir, ready.env, values | ready.values, instrument, avoid
        )
        server.held = ready.build
        return server

    def reap(self) -> list[str]:
        """Cancel the jobs killed llm-bisect processes left in the queue (see reap_queue)."""
        return reap_queue(self.slurm, self.run_id)


def reap_queue(slurm: Slurm, run_id: str = "") -> list[str]:
    """Cancel this user's llm-bisect jobs whose owner (named in the job's comment) is gone:
    a `check`, `golden`, `run`... killed by SIGKILL (its lease lapsed); one line per job. A
    job whose owner's lease holds or cannot be read is spared (never a PID alone); one of
    no owner is cancelled only when it carries `run_id`."""
    lines = []
    for job, name, comment in slurm.jobs():
        words = comment.split()
        if not name.startswith(JOB_PREFIX) or "llm-bisect" not in words:
            continue
        owner = next((w[6:] for w in words if w.startswith("owner=")), "")
        mine = bool(run_id) and f"run={run_id}" in words
        if not reapable(owner, mine):
            continue
        try:
            slurm.run(["scancel", job])
        except LaunchError as exc:
            lines.append(f"slurm: could not cancel job {job} ({name}): {exc}")
            continue
        lines.append(
            f"slurm: cancelled job {job} ({name}; its llm-bisect process "
            f"{owner_pid(owner) if owner else '?'} is gone)"
        )
    return lines


NO_OTHER_NODE = "Requested node configuration is not available"
"""What sbatch says where `--exclude` leaves no node that can take the job."""

SLURM_PLACEHOLDERS = (PROCESS_PLACEHOLDERS - {"gpus"}) | {"head", "node_rank", "nnodes"}
"""On a Slurm probe's nodes: the head node's host name, this node's rank, the node count."""
HOST_PLACEHOLDERS = frozenset({"node"})
"""`server.host` (Slurm): the head node's Slurm name, known once its job runs."""


class SlurmServerConfig(CommandServerBase):
    """One Slurm job per candidate: `sbatch`, followed with `squeue`/`scontrol`, ended with
    `scancel` on every exit path. The command runs on the allocated node(s)."""

    launcher: Literal["slurm"]
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
    def _placeholders(cls, command: list[str] | None) -> list[str] | None:
        if command is not None:
            check_placeholders(command, "server.command", SLURM_PLACEHOLDERS)
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
            check_placeholders([image], "server.container_image", IMAGE_PLACEHOLDERS)
        return image

    @field_validator("host")
    @classmethod
    def _host(cls, host: str) -> str:
        check_placeholders([host], "server.host", HOST_PLACEHOLDERS)
        return host


def from_config(cfg: SlurmServerConfig, ctx: LauncherContext) -> SlurmLauncher:
    """The Slurm launcher of a `server:` section."""
    return SlurmLauncher(cfg, ctx)


def _preflight(cfg: SlurmServerConfig, ctx: PreflightContext) -> Preflight:
    """The command runs on the cluster's nodes: here, only Slurm's tools must be."""
    check_cwd(cfg, ctx.base_dir)
    for tool in ("sbatch", "squeue", "scontrol", "scancel"):
        if shutil.which(tool, path={**ctx.environ, **ctx.env}.get("PATH", os.defpath)) is None:
            raise ConfigError(f"server.launcher: slurm, and '{tool}' is not on PATH")
    return Preflight(cfg)


def reap_node(environ: Mapping[str, str]) -> Leftovers | None:
    """`reap` without a config: the Slurm queue's jobs of killed runs (None where this node
    has no `squeue`)."""
    if shutil.which("squeue", path=environ.get("PATH", os.defpath)) is None:
        return None
    try:
        return Leftovers("the Slurm queue", reap_queue(Slurm(environ)))
    except LaunchError as exc:
        return Leftovers("the Slurm queue", [], [str(exc)])


def _cache_mount(cfg: SlurmServerConfig, root: Path) -> SlurmServerConfig:
    """In a container (`container_image`), the engine cache's root at the same path."""
    if not cfg.container_image:
        return cfg
    return cfg.model_copy(update={"container_mounts": [*cfg.container_mounts, f"{root}:{root}"]})


KIND = LAUNCHERS.register(
    LauncherKind(
        "slurm",
        SlurmServerConfig,
        make=from_config,
        validate=needs_build,
        preflight=_preflight,
        expand_paths=expand_cwd,
        placement=frozenset({"account", "retries", "pending_timeout", "time", "port", "host"}),
        inherits=True,
        reap=reap_node,
        cache_place="node",
        cache_mount=_cache_mount,
        shown_worker="worker_command",
        shape=frozenset({"command", "worker_command", "container_image"}),
        argv=("command", "worker_command"),
    )
)
