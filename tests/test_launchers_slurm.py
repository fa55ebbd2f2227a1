"""The Slurm launcher on a real one-node cluster (munged, slurmctld, slurmd; scripts/slurm-up):
real sbatch, squeue, scontrol and scancel, simulated servers in the jobs."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import History, live_processes, probe_order, shell_words, sim_command, wait_until
from llm_bisect import lease
from llm_bisect.config import load_config
from llm_bisect.journal import read_events
from llm_bisect.kinds import LauncherContext
from llm_bisect.launchers import Instrument
from llm_bisect.launchers.slurm import (
    JOB_PREFIX,
    MASK_AWK,
    BatchJob,
    Slurm,
    SlurmLauncher,
    SlurmServerConfig,
    job_script,
    node_script,
)
from llm_bisect.model import Candidate
from llm_bisect.redact import redact
from test_cli import invoke, launched
from test_collectenv import stand_in_smi
from test_runner import start

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).parent.parent
CLI = [sys.executable, "-m", "llm_bisect.cli"]


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


def sbatch_recorder(bin_dir: Path, into: Path) -> str:
    """A PATH (first: `bin_dir`) whose sbatch appends each script it is given to `into`,
    then runs the cluster's own (a record at the process edge: every job still real)."""
    real = shutil.which("sbatch")
    assert real is not None
    bin_dir.mkdir()
    shim = bin_dir / "sbatch"
    shim.write_text(
        "#!/bin/sh\nfor script; do :; done\n"
        f'{{ echo "sbatch $*"; cat "$script"; echo "#--end"; }} >> "{into}"\n'
        f'exec "{real}" "$@"\n'
    )
    shim.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def test_a_re_probe_and_the_trials_keep_off_the_nodes_of_the_verdicts_they_check(
    cluster: None, tmp_path: Path
) -> None:
    """On Slurm a slot is no place (slot k's jobs land on any node): the re-probe of a
    verdict that disagreed and the confirmation's trials are submitted with `--exclude` of
    the nodes of the verdicts they check. On this one-node cluster sbatch refuses them (no
    other node), so each runs on the same node again, a later start, said: no hang, no
    error, the answer found. The third start lies (the simulator's `--lie-at`)."""
    h = History(tmp_path, {9: "degenerate-reasoning"}, 12)
    launches, submitted = tmp_path / "launches", tmp_path / "submitted"
    path = sbatch_recorder(tmp_path / "bin", submitted)
    config = h.config(
        server={
            "launcher": "slurm",
            "command": [*sim_command(h.repo), "--launch-log", str(launches), "--lie-at", "3"],
            "ready_timeout": 120,
            "env": {"PYTHONPATH": os.pathsep.join(sys.path)},
        },
        search={"flake": "auto"},
        localize=False,
    )
    out = tmp_path / "out"
    code, output = invoke("run", str(config), "--out", str(out), env={"PATH": path})
    assert code == 0, output
    result = json.loads((out / "result.json").read_text())
    assert result["culprit"]["commit"] == h.shas[9], output
    [node] = {p["fingerprint"]["node"] for p in result["probes"]}  # the one node
    scripts = submitted.read_text().split("#--end\n")[:-1]

    def folder(script: str) -> str:
        found = re.search(r"--output=(\S+)/server\.log", script)
        assert found is not None, script
        return str(Path(found.group(1)).relative_to(out))

    # a re-probe (probes/<short>-2), a trial (confirm*/), the Evidence stage's (evidence/)
    elsewhere = re.compile(r"^(probes/[0-9a-f]{12}-\d+|confirm[-a-z0-9]*/\w+|evidence/\w+)$")
    folders = list(dict.fromkeys(folder(s) for s in scripts))
    checking = [f for f in folders if elsewhere.match(f)]
    assert {f"probes/{c[:12]}-2" for c in result["search"]["again"]} <= set(checking)
    assert any(f.startswith("confirm") for f in checking), folders
    for where in folders:
        submits = [s for s in scripts if folder(s) == where]
        if where in checking:  # kept off the node, refused (the one node), then on it again
            assert f"#SBATCH --exclude={node}\n" in submits[0], submits[0]
            assert "--exclude" not in submits[1], submits[1]
        else:
            assert all("--exclude" not in s for s in submits), where
    said = f"no node but {node} takes its job (sbatch: Requested node configuration is not "
    assert output.count(said) == len(checking), output
    assert our_jobs() == []


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


def held_check(tmp_path: Path, token: str) -> tuple[History, subprocess.Popen[bytes], Path, Path]:
    """A `check` whose job logs HF_TOKEN, then holds its server; (history, the check, its
    server.log, the hold file)."""
    hold = tmp_path / "hold"
    hold.touch()
    h = History(tmp_path, {}, 2, settings={"print_env": ["HF_TOKEN"], "hold_file": str(hold)})
    config = h.config(
        server={
            "launcher": "slurm",
            "command": sim_command(h.repo),
            "ready_timeout": 120,
            "env": {"PYTHONPATH": os.pathsep.join(sys.path), "HF_TOKEN": "${TEST_SLURM_TOKEN}"},
        },
        checks=[{"type": "canary"}],
        localize=False,
    )
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [*CLI, "check", str(config), "--candidate", h.shas[1], "--out", str(out)],
        env={**os.environ, "TEST_SLURM_TOKEN": token, "LLM_BISECT_LEASE_S": "2"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return h, proc, out / "probes" / h.shas[1][:12] / "server.log", hold


def cancel_jobs_of(short: str) -> None:
    for job, _, name in our_jobs():
        if name == f"{JOB_PREFIX}{short}":
            subprocess.run(["scancel", job], check=False)


def test_a_token_is_masked_in_server_log_while_the_job_runs_and_after_a_kill(
    cluster: None, tmp_path: Path
) -> None:
    token = "hf_slurmLiveSecret42"
    h, proc, log, hold = held_check(tmp_path, token)
    try:
        assert wait_until(lambda: log.exists() and "sim: held until" in log.read_text(), 120)
        text = log.read_text()
        assert "sim: HF_TOKEN=***" in text and token not in text, text
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert token not in log.read_text()
    finally:
        proc.kill()
        cancel_jobs_of(h.shas[1][:12])
        hold.unlink()


def test_reap_cancels_a_killed_checks_job_and_spares_a_live_ones(
    cluster: None, tmp_path: Path
) -> None:
    checks = {}
    for role in ("dead", "live"):
        (tmp_path / role).mkdir()
        checks[role] = held_check(tmp_path / role, f"hf_{role}OwnerToken1")
    try:
        for _, _, log, _ in checks.values():
            assert wait_until(lambda log=log: log.exists() and "held until" in log.read_text(), 120)
        jobs = {name: job for job, _, name in our_jobs()}
        dead, live = (f"{JOB_PREFIX}{checks[r][0].shas[1][:12]}" for r in ("dead", "live"))
        proc = checks["dead"][1]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # reap goes by the owner's lease, never by its PID alone: it lapses once not renewed
        # (the newest of its PID's: a dead process of an earlier run may have had that PID)
        held = max(lease.folder().glob(f"*-{proc.pid}-*.lease"), key=lambda p: p.stat().st_mtime)
        assert wait_until(lambda: float(held.read_text().split()[0]) < time.time(), 30)
        code, output = invoke("reap")
        assert code == 0, output
        said = f"slurm: cancelled job {jobs[dead]} ({dead}; its llm-bisect process {proc.pid} is"
        assert said in output and "the Slurm queue" in output, output
        assert wait_until(lambda: dead not in {name for _, _, name in our_jobs()}, 60)
        assert (jobs[live], "RUNNING", live) in our_jobs() and checks["live"][1].poll() is None
    finally:
        for h, proc, _, hold in checks.values():
            proc.kill()
            cancel_jobs_of(h.shas[1][:12])
            hold.unlink()


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
        BatchJob(
            name="llm-bisect-x",
            comment="llm-bisect run=r owner=o",
            log=tmp_path / "server.log",
            node_script_path=tmp_path / "node.sh",
            cwd=tmp_path,
        ),
        values=values,
    )
    assert "#SBATCH --nodes=2" in script and "#SBATCH --gpus-per-node=4" in script
    assert "#SBATCH --exclusive" in script
    srun = next(line for line in script.splitlines() if line.startswith("srun"))
    assert srun.split()[:3] == ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    assert f"--container-image=vllm/vllm-openai:nightly-{'c' * 40}" in srun
    assert "--container-mounts=/lustre/hf-cache:/root/.cache/huggingface" in srun
    assert srun.endswith(f"bash {tmp_path / 'node.sh'} 2>&1 |")  # into the masking filter
    run = subprocess.run(
        ["bash", "-n"], input=script + node, text=True, capture_output=True, check=False
    )
    assert run.returncode == 0, run.stderr  # both are valid bash


def test_the_jobs_log_filter_masks_as_redact_does(tmp_path: Path) -> None:
    secrets = {"HF_TOKEN": "hf_abcd1234", "AB_KEY": "bcdefg", "OTHER_KEY": "abcd", "SHORT": "1"}
    lines = [
        "token hf_abcd1234 twice hf_abcd1234",
        "xabcdefg: two secrets overlap",
        "version 0.1.0: a value under 4 characters is never masked",
        "no secret here, and no newline at the end",
    ]
    text = "\n".join(lines)
    for awk in (["awk"], ["mawk", "-W", "interactive"]):
        done = subprocess.run(
            [*awk, "-v", f"names={','.join(secrets)}", MASK_AWK],
            input=text,
            env={**os.environ, **secrets, "LC_ALL": "C"},
            capture_output=True,
            text=True,
            check=True,
        )
        assert done.stdout == redact(text, list(secrets.values())) + "\n", done.stdout


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


def test_the_reproduce_line_of_a_job_is_whole_and_runs_nothing(tmp_path: Path) -> None:
    """The command report.md shows for a Slurm probe: `sbatch` of its job script, which `sh`
    runs as it reads (a folder named like a command stays a folder), then what each node runs,
    whole (an argument holding a newline is not cut there) and never run by a paste."""
    bin_dir = tmp_path / "bin"  # Slurm's commands at the process edge: no job runs
    bin_dir.mkdir()
    for name, said in (("sbatch", "4242"), ("scontrol", "JobId=4242 JobState=CANCELLED")):
        (bin_dir / name).write_text(f"#!/bin/sh\necho '{said}'\n")
    (bin_dir / "scancel").write_text("#!/bin/sh\nexit 0\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    command = [
        "python3",
        "-c",
        "print(1)\ntouch pwned-nl",
        "$(touch pwned-sub)",
        "--last",
        "{port}",
    ]
    worker = ["python3", "`touch pwned-tick`", "--worker;touch pwned-semi"]
    cfg = SlurmServerConfig(launcher="slurm", command=command, worker_command=worker, nodes=2)
    env = {"NCCL_MNNVL_ENABLE": "1", "HF_TOKEN": "hf_slurmSecret1", "X": "$(touch pwned-e)"}
    launcher = SlurmLauncher(cfg, LauncherContext(
        tmp_path, "r", env=env, secret_names=["HF_TOKEN"],
        environ={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
    ))  # fmt: skip
    probe_dir = tmp_path / "probes $(touch pwned-dir)" / "p;touch pwned-p"
    with launcher.launch(Candidate("c" * 40), probe_dir) as server:
        line = str(server.fingerprint()["command"])
    cwd = tmp_path / "sh"
    cwd.mkdir()
    # the job takes the caller's environment: the values it ran with go before `sbatch`, a
    # secret's by name only
    token = "HF_TOKEN=" + os.environ.get("HF_TOKEN", "")
    assert shell_words(line, cwd) == [
        token, "NCCL_MNNVL_ENABLE=1", "X=$(touch pwned-e)",
        "sbatch", str((probe_dir / "job.sh").resolve()),
    ]  # fmt: skip
    assert "hf_slurmSecret1" not in line
    assert list(cwd.iterdir()) == [], "the pasted line ran commands"
    for arg in ("touch pwned-nl'", "'$(touch pwned-sub)' --last", "'--worker;touch pwned-semi'"):
        assert arg in line, arg  # every argument, whole


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


def test_collect_env_and_the_gpus_come_from_the_allocated_node(
    cluster: None, tmp_path: Path
) -> None:
    """The job runs collect_env and nvidia-smi on its node (a stand-in first on the node's
    PATH, which this submit host's own PATH lacks) beside the server: the report shows the
    culprit's torch bump and the node's GPUs; each probe records its node, and the job's
    server got `probe.batch_invariant`'s variable. The head node resolves the weights'
    revision its server loaded (the culprit's start fetched a new snapshot) once it is
    ready, in the job's environment (HF_HUB_CACHE)."""
    h = History(
        tmp_path,
        {2: "degenerate-content"},
        2,
        changes={2: {"packages": {"torch": "2.14.0"}, "snapshot": "2" * 40}},
        settings={"print_env": ["VLLM_BATCH_INVARIANT"], "snapshot": "1" * 40},
    )
    smi = stand_in_smi(tmp_path / "node-bin")
    collect = [sys.executable, "-m", "llm_bisect.sim.collect_env", "--repo", str(h.repo)]
    # a collect_env that prints a secret of the job's environment (as `env` would)
    collect = ["sh", "-c", '"$@"; echo "HF_TOKEN=$HF_TOKEN"', "collect", *collect]
    config = h.config(
        server={
            "launcher": "slurm",
            "command": [*sim_command(h.repo), "--model", "org/m"],
            "ready_timeout": 120,
            "collect_env": [*collect, "--commit", "{commit}"],
            "env": {
                "HF_HUB_CACHE": str(tmp_path / "hub"),
                "PYTHONPATH": os.pathsep.join(sys.path),
                "PATH": f"{smi}{os.pathsep}{os.environ['PATH']}",
                "HF_TOKEN": "hf_nodeSecret7788",
            },
        },
        checks=[{"type": "canary"}, {"type": "expect"}],
        localize=False,
        probe={"batch_invariant": True},
    )
    out = tmp_path / "out"
    code, output = invoke("run", str(config), "--out", str(out))
    assert code == 0, output
    result = json.loads((out / "result.json").read_text())
    for p in result["probes"]:
        facts = p["fingerprint"]
        assert facts["node"] == facts["slurm"]["nodes"] and facts["batch_invariant"] is True
        log = (out / "probes" / p["commit"][:12] / "server.log").read_text()
        assert "sim: VLLM_BATCH_INVARIANT=1" in log
        # the engine cache (on by default): the folder of the job's own node, made there
        cache = facts["engine_cache"]
        assert cache["folder"].endswith(f"/engine-cache/{facts['node']}/slot-0"), cache
        assert cache["state"] in ("cold", "hit", "warm") and "Compiling a graph" in log
    old, new = (result["fingerprints"][side]["collect_env"] for side in ("old", "new"))
    assert old["torch"] == "2.13.0+cu130" and new["torch"] == "2.14.0", new
    assert new["gpu_models"] == "2 x NVIDIA H100 80GB HBM3 (81559 MiB)" and new["gpu_count"] == "2"
    old, new = (result["fingerprints"][side]["weights"] for side in ("old", "new"))
    assert (old["revision"], new["revision"]) == ("1" * 40, "2" * 40), (old, new)
    assert new == {"model": "org/m", "revision": "2" * 40, "origin": "hub cache: refs/main"}
    node = (out / "probes" / h.shas[2][:12] / "node.sh").read_text()
    # the config's collect_env, not vLLM's (the cache's VLLM_CACHE_ROOT names "vllm" too)
    assert "vllm.collect_env" not in node and "llm_bisect.sim.collect_env" in node
    assert '"${SLURMD_NODENAME:-$(hostname -s)}"' in node  # each node fills in its name
    report = (out / "report.md").read_text()
    assert "| **torch** | `2.13.0+cu130` | `2.14.0` |" in report, report
    for probe in (out / "probes").iterdir():  # the node wrote it to disk: masked there too
        said = (probe / "collect_env.txt").read_text()
        assert "HF_TOKEN=***" in said and "hf_nodeSecret7788" not in said, said


def test_pyxis_mounts_the_probe_folder_and_the_worker_extension(tmp_path: Path) -> None:
    """Under pyxis the container sees node.sh (in the probe folder, where collect_env's
    outputs go too) and the localisation's worker extension, at their host paths."""
    cfg = SlurmServerConfig(
        launcher="slurm",
        command=["vllm", "serve", "m", "--port", "{port}"],
        container_image="vllm/vllm-openai:nightly-{commit}",
        container_mounts=["/lustre/hf:/root/.cache/huggingface"],
    )

    class Queue(Slurm):  # sbatch and scontrol answer as a cluster would, at the process edge
        def run(self, argv: list[str], env: Any = None) -> str:
            return "42\n" if argv[0] == "sbatch" else "JobId=42 JobState=CANCELLED\n"

    launcher = SlurmLauncher(cfg, LauncherContext(tmp_path, "r"))
    launcher.slurm = Queue({})
    extension = tmp_path / "instrument"
    probe_dir = tmp_path / "probes" / ("a" * 12)
    with launcher.launch(Candidate("a" * 40), probe_dir, Instrument(paths=(extension,))):
        pass
    srun = next(
        line for line in (probe_dir / "job.sh").read_text().splitlines() if line.startswith("srun")
    )
    mounts = next(w for w in srun.split() if w.startswith("--container-mounts="))
    here = probe_dir.resolve()
    assert mounts.split("=", 1)[1].split(",") == [
        "/lustre/hf:/root/.cache/huggingface",
        f"{here}:{here}",
        f"{extension}:{extension}",
    ]
    assert srun.endswith(f"bash {here / 'node.sh'} 2>&1 |")
    node = (probe_dir / "node.sh").read_text()
    run = "python3 -m vllm.collect_env"  # on the node, inside the container, bounded
    assert f"timeout 300 {run}; else {run}; fi 2>&1; echo $? > {here}/collect_env.rc.part" in node
    assert f"| head -c {4 * 2**20} > {here}/collect_env.txt" in node  # its output capped


def test_a_job_that_is_ending_is_said_by_why_it_ended(tmp_path: Path) -> None:
    """Right after `scancel`, scontrol says COMPLETING (longer on a loaded controller), then
    CANCELLED: the probe's reason must say CANCELLED, never the passing COMPLETING. Slurm's
    scontrol is stood in for on PATH (a process edge): COMPLETING twice, then CANCELLED."""
    calls = tmp_path / "calls"
    scontrol = tmp_path / "bin" / "scontrol"
    scontrol.parent.mkdir()
    scontrol.write_text(
        "#!/bin/sh\n"
        f'echo x >> "{calls}"\n'
        f'n=$(wc -l < "{calls}")\n'
        'if [ "$n" -le 2 ]; then s=COMPLETING; else s=CANCELLED; fi\n'
        'echo "JobId=7 JobName=llm-bisect-x JobState=$s Reason=None NodeList=vm ExitCode=0:15"\n'
    )
    scontrol.chmod(0o755)
    slurm = Slurm({"PATH": f"{scontrol.parent}:{os.environ['PATH']}"})
    first = slurm.state("7")
    assert first.state == "COMPLETING"
    slept: list[float] = []
    now = iter(range(1000))
    found = slurm.settled("7", first, lambda: float(next(now)), slept.append)
    assert found.state == "CANCELLED" and len(slept) == 2, (found, slept)
    # a job that stays COMPLETING is said as it is once the wait is up, never a hang
    calls.write_text("")
    far = iter([0.0, 10_000.0])
    assert slurm.settled("7", first, lambda: next(far), slept.append).state == "COMPLETING"


def test_init_for_slurm_writes_a_config_whose_printed_commands_find_the_culprit(
    cluster: None, tmp_path: Path
) -> None:
    """`init --launcher slurm` as a user runs it: the lines it prints, pasted in its folder,
    bisect through real sbatch (the job takes the shell's environment: HF_TOKEN never in
    the file); issue 49 item 6."""
    from helpers import cli_on_path
    from test_starter import llm_bisect

    h = History(tmp_path, {2: "degenerate-reasoning"}, 4)
    env = {**cli_on_path(tmp_path / "bin"), "HF_TOKEN": "hf_slurmInitToken77"}
    work = tmp_path / "work"
    work.mkdir()
    code, _, err = llm_bisect(
        "init", "--launcher", "slurm", "--good", h.shas[0], "--bad", h.shas[-1],
        "--repo", str(h.repo), "--", "HF_TOKEN=hf_slurmInitToken77", *h.config_command(),
        cwd=work, env=env,
    )  # fmt: skip
    assert code == 0, err
    text = (work / "llm-bisect.yaml").read_text()
    assert "hf_slurmInitToken77" not in text and "launcher: slurm" in text
    assert "gpus_per_node:" not in text.replace("# gpus_per_node", "")  # unknown: left to fill
    printed = [line.strip() for line in err.splitlines() if line.startswith("  llm-bisect ")]
    for line in printed:
        code, out, err = llm_bisect(*shell_words(line, work)[1:], cwd=work, env=env)
        assert code == 0, out + err
    result = json.loads((work / "bisect-run" / "result.json").read_text())
    assert result["culprit"]["commit"] == h.shas[2], result["status"]
    assert all("sbatch " in p["fingerprint"]["command"] for p in result["probes"])
    assert our_jobs() == []


def test_candidates_shows_a_two_node_probes_worker_command_too(
    cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GLM config: the head serves, the other node runs headless from rank 4; both
    lines are what the nodes run (issue 49 item 6)."""
    h = History(tmp_path, {}, 1)
    monkeypatch.setenv("HF_TOKEN", "hf_candidatesToken1")
    config = ROOT / "configs" / "glm-5.3-mxfp4-dp8-ep8-gb200-slurm.yaml"
    ends = ["--repo", str(h.repo), "--good", h.shas[0], "--bad", h.shas[1]]
    code, output = invoke("candidates", str(config), *ends)
    assert code == 0, output
    lines = output.splitlines()
    (head,) = [line for line in lines if line.startswith("server: vllm serve ")]
    (worker,) = [line for line in lines if line.startswith("worker: vllm serve ")]
    assert "--headless" not in head and "--port '{port}'" in head
    assert worker.endswith("--headless --data-parallel-start-rank 4 (the other node of each probe)")
    assert "--data-parallel-address '{head}'" in worker
