#!/usr/bin/env python3
"""`llm-bisect run` end to end on the simulated server whose starts lie, seed by seed.

Each seeded run: a 40-commit history (demo.build_history) with its first bad commit drawn
at random, the process launcher, the canary and expect checks, confirmation on (the
default), no localisation; every server start serves the other side's behaviour with
probability --lie (the simulator's --lie-rate, seeded per run and start). The search
is what the config says (`--flake`: auto, the default, or 0 for the bisection). Prints
each run (exit code, status, whether the named culprit is the real one, probes) and the
tally: wrong culprits named with exit 0 is the number that matters.

`--model burst`: instead, one burst of 3 consecutive lying starts, beginning at a start
drawn from the seed among the first 10 (the simulator's --lie-at). `--model gpu`: instead,
`parallel: 4`, one GPU per slot, and the GPU of a slot drawn from the seed lies on half its
starts (a bad GPU: the simulator's --lie-gpus).

Usage: python scripts/bench_noise_cli.py [--runs 20] [--lie 0.1] [--flake auto] [--seed 1]
  [--model iid|burst|gpu]
About 30 s a run on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bisect"))

from llm_bisect.demo import build_history

N = 40


def one(work: Path, seed: int, lie: float, flake: str, model: str = "iid") -> dict[str, Any]:
    rng = random.Random(seed)
    culprit = rng.randint(1, N)
    k = 4 if model == "gpu" else 1
    repo = work / "engine"
    shas = build_history(repo, {culprit: "degenerate-reasoning"}, n_commits=N)
    command = [sys.executable, "-m", "llm_bisect.sim", "--repo", str(repo), "--commit",
               "{commit}", "--port", "{port}", "--launch-log", str(work / "launches"),
               "--lie-seed", str(seed)]  # fmt: skip
    if model == "burst":
        first = random.Random(seed * 13 + 5).randint(1, 10)
        command += ["--lie-at", ",".join(str(first + i) for i in range(3))]
    elif model == "gpu":
        command += ["--lie-gpus", f"{random.Random(seed * 13 + 5).randrange(k)}:0.5"]
    else:
        command += ["--lie-rate", str(lie)]
    config = {
        "candidates": {"repo": str(repo), "good": shas[0], "bad": shas[-1]},
        "server": {
            "command": command,
            "ready_timeout": 30,
            **({"slot_gpus": [[str(i)] for i in range(k)]} if k > 1 else {}),
        },
        "parallel": k,
        "checks": [{"type": "canary"}, {"type": "expect"}],
        "search": {"flake": flake if flake == "auto" else float(flake)},
        "localize": {"enabled": False},
    }
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "llm_bisect.cli", "run", str(path), "--out", str(work / "out")],
        capture_output=True,
        text=True,
        check=False,
    )
    result_file = work / "out" / "result.json"
    result = json.loads(result_file.read_text()) if result_file.exists() else {}
    named = (result.get("culprit") or {}).get("commit")
    return {
        "seed": seed,
        "exit": done.returncode,
        "status": result.get("status", "none"),
        "right": named == shas[culprit],
        "named": named is not None,
        "probes": len(result.get("probes", [])),
        "starts": len((work / "launches").read_text().split()),
        "seconds": time.monotonic() - began,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--lie", type=float, default=0.1)
    parser.add_argument("--flake", default="auto")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--model", choices=["iid", "burst", "gpu"], default="iid")
    args = parser.parse_args()
    rows = []
    for seed in range(args.seed, args.seed + args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-noise-cli-") as tmp:
            row = one(Path(tmp), seed, args.lie, args.flake, args.model)
        rows.append(row)
        print(
            f"seed {row['seed']:3d}: exit {row['exit']} {row['status']:13s} "
            f"{'right' if row['right'] else 'WRONG' if row['named'] else 'no culprit'}"
            f"  {row['probes']} probes, {row['starts']} starts, {row['seconds']:.0f} s",
            flush=True,
        )
    wrong0 = sum(1 for r in rows if r["exit"] == 0 and r["named"] and not r["right"])
    right = sum(1 for r in rows if r["right"] and r["exit"] == 0)
    print(
        f"\nflake {args.flake}, {args.model} lie {args.lie}: {len(rows)} runs: {right} right "
        f"(exit 0), "
        f"{wrong0} wrong with exit 0, {len(rows) - right - wrong0} other (ambiguous, no "
        f"answer); mean probes {sum(r['probes'] for r in rows) / len(rows):.1f}, "
        f"starts {sum(r['starts'] for r in rows) / len(rows):.1f}"
    )


if __name__ == "__main__":
    main()
