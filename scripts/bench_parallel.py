#!/usr/bin/env python3
"""Rounds and wall time with k probes in flight, on simulated histories.

For each history size n and slot count k, a real bisection (process launcher, or Slurm
with --slurm) over a made-up history whose culprit sits two thirds of the way in; each
simulated server takes --delay seconds to start, as a stand-in for a real one's minutes
(a GPU probe is dominated by its start: pull, weights, graph capture). Prints rounds,
probes, wall time and ceil(log_(k+1) n), the rounds a search that splits the range into
k+1 parts per round needs. With --slurm it also prints each probe's Slurm overhead
(submit to RUNNING, RUNNING to ready) and what a SIGKILL of llm-bisect leaves behind.

Usage: python scripts/bench_parallel.py [--sizes 40 200 700] [--slots 1 2 4] [--delay 2]
       python scripts/bench_parallel.py --slurm --sizes 40 --slots 1 2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from llm_bisect.demo import build_history

HERE = Path(__file__).resolve().parent


def config(work: Path, repo: Path, n: int, k: int, delay: float, slurm: bool) -> Path:
    command = [sys.executable, "-m", "llm_bisect.sim", "--repo", str(repo)]
    command += ["--commit", "{commit}", "--port", "{port}", "--startup-delay", str(delay)]
    server: dict[str, Any] = {"command": command, "ready_timeout": 300}
    if slurm:
        server |= {
            "launcher": "slurm",
            "env": {"PYTHONPATH": str(HERE.parent / "bisect")},
        }
    data = {
        "candidates": {"repo": str(repo), "good": f"HEAD~{n}", "bad": "HEAD"},
        "server": server,
        "checks": [{"type": "canary"}, {"type": "expect"}],
        "parallel": k,
        "localize": False,
    }
    path = work / f"config-{k}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run(path: Path, out: Path) -> tuple[dict[str, Any], float]:
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "llm_bisect.cli", "run", str(path), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"run failed ({done.returncode}):\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads((out / "result.json").read_text())
    return result, wall


def jobs() -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i|%j"], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in out.splitlines() if "|llm-bisect-" in line]


def kill_and_resume(path: Path, out: Path) -> None:
    """SIGKILL llm-bisect once two jobs run; count the orphans; time the resume's cleanup."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "llm_bisect.cli", "run", str(path), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while len(jobs()) < 2 and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    orphans = {line.split("|")[0] for line in jobs()}
    t0 = time.monotonic()
    resumed = subprocess.Popen(
        [sys.executable, "-m", "llm_bisect.cli", "run", str(path), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    cleaned: float | None = None
    while resumed.poll() is None:
        if cleaned is None and not orphans & {line.split("|")[0] for line in jobs()}:
            cleaned = time.monotonic() - t0
        time.sleep(0.2)
    within = cleaned if cleaned is not None else float("nan")
    print(
        f"\nSIGKILL of llm-bisect with jobs running: {len(orphans)} job(s) left in the queue; "
        f"the resumed run cancelled them within {within:.1f}s, "
        f"finished in {time.monotonic() - t0:.1f}s (rc {resumed.returncode}) and left "
        f"{len(jobs())} job(s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[40, 200, 700])
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--delay", type=float, default=2.0, help="seconds each server takes")
    parser.add_argument("--slurm", action="store_true", help="through sbatch (scripts/slurm-up)")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONPATH", str(HERE.parent / "bisect"))
    print(f"{'n':>5} {'k':>3} {'rounds':>6} {'bound':>5} {'probes':>6} {'wall s':>7}  slurm")
    with tempfile.TemporaryDirectory(prefix="llm-bisect-bench-") as tmp:
        work = Path(tmp)
        for n in args.sizes:
            repo = work / f"engine-{n}"
            build_history(repo, {n * 2 // 3: "degenerate-reasoning"}, n_commits=n)
            for k in args.slots:
                path = config(work, repo, n, k, args.delay, args.slurm)
                result, wall = run(path, work / f"out-{n}-{k}")
                bound = math.ceil(math.log(n, k + 1))
                ran = [p for p in result["probes"] if not p["given"]]
                slurm = ""
                if args.slurm:
                    queued = [p["fingerprint"]["slurm"]["queued_s"] for p in ran]
                    start = [p["fingerprint"]["slurm"].get("start_s", 0.0) for p in ran]
                    slurm = (
                        f"submit->RUNNING {sum(queued) / len(queued):.2f}s, "
                        f"RUNNING->ready {sum(start) / len(start):.2f}s (mean of {len(ran)})"
                    )
                print(
                    f"{n:>5} {k:>3} {result['rounds']:>6} {bound:>5} {len(ran):>6} "
                    f"{wall:>7.1f}  {slurm}"
                )
        if args.slurm:
            n = args.sizes[0]
            path = config(work, work / f"engine-{n}", n, 2, max(args.delay, 5.0), True)
            kill_and_resume(path, work / "killed")


if __name__ == "__main__":
    main()
