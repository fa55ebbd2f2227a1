#!/usr/bin/env python3
"""What the harness adds to each Docker probe, and how much pull time prefetch hides.

Needs a running Docker engine. Builds a history whose images live in the
simulated registry on 127.0.0.1 (padded and throttled, so a pull takes real
time) and bisects it twice through the Docker launcher: prefetch off, then on.
The simulated server waits `--load` seconds before listening, as a model load.

Per probe (medians, seconds):
  artifact     manifest check before anything is pulled
  pull wait    the probe waited for its image (its own pull, or a prefetch in flight)
  create+start docker create/start until the server process runs
  own start    the server process's own start (until it listens)
  poll lag     listening -> the harness saw it ready
  checks       the check suite
  teardown     fingerprint, stop and remove
  overhead     total - own start - checks - pull wait: what the harness adds

Usage: python scripts/bench_docker.py [--commits 24] [--mb 12] [--mbps 6] [--load 3]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import yaml

from llm_bisect.config import config_digest
from llm_bisect.demo import build_history
from llm_bisect.journal import read_events
from llm_bisect.launchers.docker import DockerLauncher
from llm_bisect.runner import Probing, Record, run
from llm_bisect.services.setup import plan_of, setup
from llm_bisect.sim.docker import SimRegistry, engine_client, sim_server


def _stamp(log: str, event: str) -> float:
    """The epoch time the simulated server printed for an event ("started", "listening")."""
    m = re.search(rf"sim: {event} at ([0-9.]+)", log)
    if m is None:
        raise SystemExit(f"the server log has no '{event}' time")
    return float(m.group(1))


def one_run(
    work: Path, registry: SimRegistry, repo: Path, shas: list[str], prefetch: bool, load: float
) -> tuple[list[dict[str, float]], dict[str, Any]]:
    name = f"bench/{uuid.uuid4().hex[:8]}"
    for i, sha in enumerate(shas):
        fault = "degenerate-content" if i >= len(shas) * 2 // 3 else "none"
        registry.add_image(
            name, sha, {"fault": fault, "startup_delay": load}, pad_bytes=ARGS.mb * 1_000_000
        )
    server = sim_server(f"{registry.host}/{name}:{{commit}}")
    server["prefetch"] = {"enabled": prefetch}
    config = work / f"bench-{prefetch}.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "candidates": {"repo": str(repo), "good": shas[0], "bad": shas[-1]},
                "server": server,
            }
        )
    )
    s = setup(config, {})
    _, plan = plan_of(s, None, None, False)
    out = work / f"out-{prefetch}"
    with s.launcher(uuid.uuid4().hex[:12]) as launcher:
        assert isinstance(launcher, DockerLauncher)
        run(plan, Record(out, config_digest(s.config)), Probing(launcher, s.checks, s.client))
        stats = {
            "waited": dict(launcher.stats.waited),
            "prefetched": dict(launcher.stats.prefetched),
        }
    client = engine_client()
    for image in client.images.list(name=f"{registry.host}/{name}"):
        client.images.remove(str(image.id), force=True)
    rows = []
    start = 0.0
    for e in read_events(out / "journal.jsonl"):
        if e["event"] == "probe-start":
            start = e["time"]
        if e["event"] != "probe" or e["outcome"]["verdict"] == "skip":
            continue
        o, t = e["outcome"], e["outcome"]["timings"]
        log = (out / "probes" / o["commit"][:12] / "server.log").read_text()
        began, listening = _stamp(log, "started") - start, _stamp(log, "listening") - start
        ref = f"{registry.host}/{name}:{o['commit']}"
        wait = stats["waited"].get(ref, 0.0)
        own = listening - began
        rows.append(
            {
                "artifact": t["artifact"],
                "pull wait": wait,
                "create+start": began - t["artifact"] - wait,
                "own start": own,
                "poll lag": t["ready"] - listening,
                "checks": t["checks"],
                "teardown": t["total"] - t["ready"] - t["checks"],
                "total": t["total"],
                "overhead": t["total"] - own - t["checks"] - wait,
            }
        )
    return rows, stats


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="llm-bisect-bench-docker-"))
    repo = work / "engine"
    shas = build_history(repo, {}, n_commits=ARGS.commits)
    registry = SimRegistry(bytes_per_s=ARGS.mbps * 1e6)
    print(
        f"{ARGS.commits + 1} candidates, images {ARGS.mb} MB pulled at {ARGS.mbps} MB/s, "
        f"load {ARGS.load}s"
    )
    results = {}
    with registry.running():
        for prefetch in (False, True):
            results[prefetch] = one_run(work, registry, repo, shas, prefetch, ARGS.load)
    keys = list(results[False][0][0])
    print(f"{'median s/probe':<14}{'prefetch off':>14}{'prefetch on':>14}")
    for key in keys:
        off = statistics.median(r[key] for r in results[False][0])
        on = statistics.median(r[key] for r in results[True][0])
        print(f"{key:<14}{off:14.3f}{on:14.3f}")
    wait_off = sum(r["pull wait"] for r in results[False][0])
    wait_on = sum(r["pull wait"] for r in results[True][0])
    pulls = results[True][1]["prefetched"]
    print(f"pull time waited for, whole run: {wait_off:.1f}s without prefetch, {wait_on:.1f}s with")
    print(
        f"prefetch pulled {len(pulls)} image(s) in {sum(pulls.values()):.1f}s in the background; "
        f"hidden: {wait_off - wait_on:.1f}s ({(wait_off - wait_on) / wait_off:.0%} of pull waits)"
    )
    return 0


parser = argparse.ArgumentParser(
    description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
)
parser.add_argument("--commits", type=int, default=24)
parser.add_argument("--mb", type=int, default=12)
parser.add_argument("--mbps", type=float, default=6.0)
parser.add_argument("--load", type=float, default=3.0)
ARGS = parser.parse_args()

if __name__ == "__main__":
    sys.exit(main())
