"""The Slurm launcher on a real one-node cluster (munged, slurmctld, slurmd; scripts/slurm-up):
real sbatch, squeue, scontrol and scancel, simulated servers in the jobs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import History, live_processes, probe_order, sim_command, wait_until
from llm_bisect.config import SlurmServerConfig, load_config
from llm_bisect.journal import read_events
from llm_bisect.launchers.slurm import JOB_PREFIX, job_script, node_script
from test_cli import invoke, launched
from test_runner import start

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).parent.parent


def our_jobs() -> list[tuple[str, str, str]]:
    """(id, state, name) of every llm-bisect job in the queue."""
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i|%T|%j"], capture_output=True, text=True, check=True
    ).stdout
    rows = [tuple(line.split("|")) for line in out.splitlines()]
    return [(r[0], r[1], r[2]) for r in rows if r[2].startswith(JOB_PREFIX)]


@pytest.fixture(scope="module")
def cluster() -> None:
    """The cluster answers; skip without one, but fail under CI, which starts one."""
    try:
        up = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
        ok = up.returncode == 0 and any(s in up.stdout for s in ("idle", "mix", "alloc"))
    except OSError:
        ok = False
    if not ok:
        if os.environ.get("CI"):
            pytest.fail("CI must start a Slurm cluster (scripts/slurm-up)")
        pytest.skip("no Slurm cluster answers here (scripts/slurm-up starts one)")


def slurm_history(
    tmp_path: Path, k: int, hold_at: int | None = None, checks: Any = None, **server: Any
) -> tuple[History, Path, Path, Path]:
    hold = tmp_path / "hold"
    changes = {hold_at: {"hold_file": str(hold)}, hold_at + 1: {"hold_file": ""}} if hold_at else {}
    hold.touch()
    h = History(tmp_path, {9: "degenerate-reasoning"}, 16, changes=changes)
    launches = tmp_path / "launches"
    config = h.config(
        server={
            "launcher": "slurm",
            "command": [*sim_command(h.repo), "--launch-log", str(launches)],
            "ready_timeout": 120,
            "env": {"PYTHONPATH": os.pathsep.join(sys.path)},
            **server,
        },
        parallel=k,
        localize=False,
        **({"checks": checks} if checks else {}),
    )
    return h, config, launches, hold


def test_two_slots_are_two_jobs_at_once_in_fewer_rounds(cluster: None, tmp_path: Path) -> None:
    h, config, launches, hold = slurm_history(tmp_path, k=2, hold_at=16)
    out = tmp_path / "out"
    proc = start(config, out)
    try:
        # the bad end's server is held in its job; the middle's job starts beside it
        assert wait_until(lambda: {h.shas[16], h.shas[8]} <= set(launched(launches)), 180)
        running = [j for j in our_jobs() if j[1] == "RUNNING"]
        assert len(running) >= 2, running  # two jobs at once, through real sbatch
        hold.unlink()
        assert proc.wait(timeout=300) == 0
    finally:
        proc.kill()
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == h.shas[9]
    assert result["rounds"] < len(probe_order(16, culprit=9))
    probe = result["probes"][-1]
    assert probe["fingerprint"]["slurm"]["nodes"] and "sbatch " in probe["fingerprint"]["command"]
    log = out / "probes" / h.shas[16][:12] / "server.log"
    assert f"sim: serving {h.shas[16][:12]}" in log.read_text()  # the job's output, read back
    assert our_jobs() == []
    assert live_processes(str(h.repo)) == []


def test_sigkill_then_resume_leaves_no_job(cluster: None, tmp_path: Path) -> None:
    h, config, launches, hold = slurm_history(tmp_path, k=2, hold_at=16)
    out = tmp_path / "out"
    proc = start(config, out)
    try:
        assert wait_until(lambda: h.shas[16] in launched(launches), 180)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
    orphans = our_jobs()
    assert orphans, "a killed harness leaves its jobs in the queue"
    finished = [e["outcome"]["commit"] for e in read_events(out / "journal.jsonl")
                if e["event"] == "probe"]  # fmt: skip
    hold.unlink()
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    assert json.loads((out / "result.json").read_text())["culprit"]["commit"] == h.shas[9]
    counts = Counter(launched(launches))
    assert all(counts[c] == 1 for c in finished), "a finished probe ran again"
    assert our_jobs() == []  # the orphans were cancelled on resume, the rest on the way out
    assert wait_until(lambda: live_processes(str(h.repo)) == [], 30)


def test_a_job_pending_past_its_limit_is_skip_and_cancelled(cluster: None, tmp_path: Path) -> None:
    h, config, _, _ = slurm_history(
        tmp_path,
        k=1,
        checks=[{"type": "canary"}],
        pending_timeout=1,
        sbatch_args=["--begin=now+1hour"],
    )
    code, output = invoke("check", str(config), "--candidate", h.shas[3])
    assert code == 125, output
    assert "skip:" in output and "pending for 1s (BeginTime)" in output
    assert our_jobs() == []


def test_the_gb200_config_writes_two_node_job_scripts(tmp_path: Path) -> None:
    """configs/glm-5.3-mxfp4-dp8-ep8-gb200-slurm.yaml: one probe is two 4-GPU nodes; the
    head serves DP8 over both, the second runs headless from data-parallel rank 4."""
    config = load_config(ROOT / "configs" / "glm-5.3-mxfp4-dp8-ep8-gb200-slurm.yaml")
    server = config.server
    assert isinstance(server, SlurmServerConfig)
    assert server.nodes == 2 and server.gpus_per_node == 4 and config.parallel >= 1
    values = {"commit": "c" * 40, "short": "c" * 12, "port": "8000"}
    node = node_script(server.command, server.worker_command, values)
    head, worker = (line.strip() for line in node.splitlines() if "exec " in line)
    for expected in (
        "--data-parallel-size 8",
        "--data-parallel-size-local 4",
        '--data-parallel-address "${LLM_BISECT_HEAD}"',
        "--data-parallel-rpc-port 13345",
        "--enable-expert-parallel",
        "--port 8000",
    ):
        assert expected in head and (expected in worker or "--port" in expected), expected
    assert "--headless" in worker and "--data-parallel-start-rank 4" in worker
    assert "--headless" not in head
    script = job_script(
        server,
        name="llm-bisect-x",
        log=tmp_path / "server.log",
        node_script_path=tmp_path / "node.sh",
        comment="llm-bisect run=r owner=o",
        cwd=tmp_path,
        values=values,
    )
    assert "#SBATCH --nodes=2" in script and "#SBATCH --gpus-per-node=4" in script
    assert "#SBATCH --exclusive" in script
    srun = next(line for line in script.splitlines() if line.startswith("exec srun"))
    assert srun.split()[:4] == ["exec", "srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    assert f"--container-image=vllm/vllm-openai:nightly-{'c' * 40}" in srun
    assert "--container-mounts=/lustre/hf-cache:/root/.cache/huggingface" in srun
    assert srun.endswith(f"bash {tmp_path / 'node.sh'}")
    run = subprocess.run(
        ["bash", "-n"], input=script + node, text=True, capture_output=True, check=False
    )
    assert run.returncode == 0, run.stderr  # both are valid bash


def test_slurm_without_sbatch_is_one_line_and_starts_nothing(tmp_path: Path) -> None:
    h = History(tmp_path, {}, 4)
    config = h.config(server={"launcher": "slurm", "command": ["python", "-m", "x"]})
    code, output = invoke("check", str(config), "--candidate", h.shas[1], env={"PATH": "/nowhere"})
    assert code == 128
    assert (
        output.strip() == "llm-bisect: error: server.launcher: slurm, and 'sbatch' is not on PATH"
    )
    data = yaml.safe_load(config.read_text())
    data["server"]["command"] = ["python", "{head}", "{gpu}"]
    config.write_text(yaml.safe_dump(data))
    code, output = invoke("check", str(config), "--candidate", h.shas[1])
    assert code == 128 and "unknown placeholder '{gpu}'" in output


def test_a_job_the_cluster_ends_before_ready_is_skip_never_bad(
    cluster: None, tmp_path: Path
) -> None:
    """An operator (or the cluster) cancels the job while its server starts: skip, exit 125."""
    h, config, launches, hold = slurm_history(tmp_path, k=1, hold_at=3, checks=[{"type": "canary"}])
    proc = subprocess.Popen(
        [sys.executable, "-m", "llm_bisect.cli", "check", str(config), "--candidate", h.shas[3]],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert wait_until(lambda: h.shas[3] in launched(launches), 120)
        (job,) = [j for j in our_jobs() if j[1] == "RUNNING"]
        subprocess.run(["scancel", job[0]], check=True)
        output, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 125, output
    assert f"skip: {h.shas[3]}" in output and f"slurm job {job[0]} CANCELLED" in output
    assert our_jobs() == []
    hold.unlink()


@pytest.mark.parametrize(
    ("host", "message"),
    [
        ("{nodex}", "server.host: unknown placeholder '{nodex}' (known: {node})"),
        ("{node", "server.host: malformed template '{node'"),
        ("{commit}", "server.host: unknown placeholder '{commit}' (known: {node})"),
    ],
)
def test_a_host_template_that_cannot_be_filled_is_one_line_before_any_job(
    tmp_path: Path, host: str, message: str
) -> None:
    """It used to be a traceback once the first job ran, after it was submitted."""
    h = History(tmp_path, {}, 4)
    config = h.config(server={"launcher": "slurm", "command": ["python", "-m", "x"], "host": host})
    code, output = invoke("check", str(config), "--candidate", h.shas[1])
    assert code == 128, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"llm-bisect: error: {message}"), output


def test_an_out_folder_with_percent_signs_reaches_the_job(cluster: None, tmp_path: Path) -> None:
    """sbatch expands `%j`, `%x`, ... in --output: a folder named so used to send the job's
    output to another path (or none), and every Slurm probe was skip."""
    h, config, _, _ = slurm_history(tmp_path, k=1, checks=[{"type": "canary"}])
    out = tmp_path / "run-%j-%x-100%"
    code, output = invoke("check", str(config), "--candidate", h.shas[3], "--out", str(out))
    assert code == 0, output
    log = out / "probes" / h.shas[3][:12] / "server.log"
    assert f"sim: serving {h.shas[3][:12]}" in log.read_text()
    assert our_jobs() == []
