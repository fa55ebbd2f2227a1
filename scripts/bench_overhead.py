#!/usr/bin/env python3
"""Measure what the harness adds to each probe, on the simulated server.

Runs a real bisection (process launcher, guard, journal with fsync, checks)
over a made-up history and splits each probe's wall time into:

  server start   probe-start (journal) → the sim prints "listening" (its own clock)
  ready seen     harness-observed launch → ready (server start + poll latency)
  checks         the check suite
  overhead       probe wall - ready seen - checks (launch, teardown, verdict, journal)
  gap            probe end → next probe-start (search step, journal fsync)

Usage: python scripts/bench_overhead.py [--commits 64] [--runs 3]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from llm_bisect.demo import build_history, write_config
from llm_bisect.journal import read_events
from llm_bisect.services.bisection import run_bisect
from llm_bisect.services.setup import setup


def one_run(work: Path, commits: int) -> list[dict[str, float]]:
    repo = work / "engine"
    build_history(repo, {commits * 2 // 3: "degenerate-reasoning"}, n_commits=commits)
    config = write_config(work, repo)
    text = config.read_text().replace("nightly-2026-08-09", f"HEAD~{commits}")
    config.write_text(text.replace("v0.27.0", "HEAD"))
    out = work / "out"
    run_bisect(setup(config, {"PATH": "/usr/bin:/bin"}), out)
    events = read_events(out / "journal.jsonl")
    rows: list[dict[str, float]] = []
    start: float | None = None
    last_end: float | None = None
    for e in events:
        if e["event"] == "probe-start":
            start = e["time"]
            gap = start - last_end if last_end is not None else float("nan")
        elif e["event"] == "probe" and start is not None:
            o = e["outcome"]
            t = o["timings"]
            log = (out / "probes" / o["commit"][:12] / "server.log").read_text()
            m = re.search(r"sim: listening at ([0-9.]+)", log)
            rows.append(
                {
                    "wall": e["time"] - start,
                    "server_start": float(m.group(1)) - start if m else float("nan"),
                    "ready": t.get("ready", float("nan")),
                    "checks": t.get("checks", float("nan")),
                    "overhead": (e["time"] - start) - t.get("ready", 0) - t.get("checks", 0),
                    "gap": gap,
                }
            )
            last_end = e["time"]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--commits", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows: list[dict[str, float]] = []
    t0 = time.monotonic()
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="llm-bisect-bench-") as tmp:
            rows += one_run(Path(tmp), args.commits)
    wall = time.monotonic() - t0
    print(f"{args.runs} run(s) of {args.commits + 1} candidates, {len(rows)} probes, {wall:.1f}s")
    print(f"{'seconds per probe':<22}{'median':>9}{'mean':>9}{'max':>9}")
    for r in rows:
        r["ready_poll_latency"] = r["ready"] - r["server_start"]
    for key in ("wall", "server_start", "ready", "checks", "overhead", "gap", "ready_poll_latency"):
        values = [r[key] for r in rows if r[key] == r[key]]  # NaN != NaN
        if values:
            med, mean = statistics.median(values), statistics.mean(values)
            print(f"{key:<22}{med:9.3f}{mean:9.3f}{max(values):9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
