#!/usr/bin/env python3
"""`llm-bisect configs` end to end on the simulated server whose starts lie, seed by seed.

Each seeded run: GOOD and BAD server setups that differ in 6 flags and variables (the GLM
case's kind: the MoE backend, --max-num-seqs, --enable-expert-parallel, NCCL_CUMEM_ENABLE,
VLLM_USE_DEEP_GEMM, TORCH_SYMMMEM), of which 1 or 2 drawn at random together garble the
math (the simulator's `fault_when`); the process launcher, the canary and expect checks, no
localisation. Every server start serves the other side's behaviour with probability --lie
(the simulator's --lie-rate, seeded per run and start), and a lying start of a good setup
garbles the math as BAD does (--lie-fault garbled-math: the same symptom, so nothing but
repetition tells it). The search is what the config says (`--flake`: auto, the default, or
0 for today's ddmin). Prints each run (exit code, status, whether the named set is the real
cause, trials, starts) and the tally: a wrong set named with exit 0 is what matters.

Usage: python scripts/bench_noise_configs.py [--runs 20] [--lie 0.1] [--flake auto] [--seed 1]
About 45 s a run on 2 shared cores (auto at --lie 0.1: 31 starts on average). Measured
(seeds 1-20, --lie 0.1): auto 20 right, 0 wrong with exit 0; flake 0 9 right, 7 wrong with
exit 0, 4 "not-bad" (a lying start on an end).
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

GOOD_FLAGS = ["--moe-backend", "marlin", "--max-num-seqs", "8"]
BAD_FLAGS = ["--moe-backend", "cutlass", "--max-num-seqs", "16", "--enable-expert-parallel"]
GOOD_ENV = {"NCCL_CUMEM_ENABLE": "1", "VLLM_USE_DEEP_GEMM": "0"}
BAD_ENV = {"NCCL_CUMEM_ENABLE": "0", "VLLM_USE_DEEP_GEMM": "1", "TORCH_SYMMMEM": "NVSHMEM"}
DIFFERENCES = [  # as configs labels them, in its order (flags first, in BAD's order)
    ("flag", "--moe-backend", "cutlass", "--moe-backend cutlass"),
    ("flag", "--max-num-seqs", "16", "--max-num-seqs 16"),
    ("flag", "--enable-expert-parallel", "", "--enable-expert-parallel"),
    ("env", "NCCL_CUMEM_ENABLE", "0", "NCCL_CUMEM_ENABLE=0"),
    ("env", "VLLM_USE_DEEP_GEMM", "1", "VLLM_USE_DEEP_GEMM=1"),
    ("env", "TORCH_SYMMMEM", "NVSHMEM", "TORCH_SYMMMEM=NVSHMEM"),
]


def one(work: Path, seed: int, lie: float, flake: str) -> dict[str, Any]:
    rng = random.Random(seed)
    cause = sorted(rng.sample(range(len(DIFFERENCES)), rng.randint(1, 2)))
    rule: dict[str, Any] = {"flags": {}, "env": {}, "fault": "garbled-math"}
    for i in cause:
        kind, name, value, _ = DIFFERENCES[i]
        rule["flags" if kind == "flag" else "env"][name] = value
    repo = work / "engine"
    shas = build_history(repo, {}, n_commits=1, settings={"fault_when": [rule]})
    command = [sys.executable, "-m", "llm_bisect.sim", "--repo", str(repo), "--commit",
               "{commit}", "--port", "{port}", "--launch-log", str(work / "launches"),
               "--lie-rate", str(lie), "--lie-seed", str(seed),
               "--lie-fault", "garbled-math"]  # fmt: skip
    config = {
        "candidates": {"repo": str(repo), "good": shas[0], "bad": shas[-1]},
        "server": {"command": command, "ready_timeout": 30},
        "checks": [{"type": "canary"}, {"type": "expect"}],
        "search": {"flake": flake if flake == "auto" else float(flake)},
        "localize": {"enabled": False},
    }
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    for side, flags, env in (("good", GOOD_FLAGS, GOOD_ENV), ("bad", BAD_FLAGS, BAD_ENV)):
        server = {"command": [*command, *flags], "env": env, "ready_timeout": 30}
        (work / f"{side}.yaml").write_text(yaml.safe_dump({"server": server}))
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "llm_bisect.cli", "configs", str(path), "--build", shas[-1],
         "--good-server", str(work / "good.yaml"), "--bad-server", str(work / "bad.yaml"),
         "--out", str(work / "out")],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    result_file = work / "out" / "result.json"
    result = json.loads(result_file.read_text()) if result_file.exists() else {}
    named = [d["label"] for d in result.get("difference", [])]
    return {
        "seed": seed,
        "cause": [DIFFERENCES[i][3] for i in cause],
        "named": named,
        "exit": done.returncode,
        "status": result.get("status", "none"),
        "right": named == [DIFFERENCES[i][3] for i in cause],
        "only": result.get("only"),
        "trials": len(result.get("trials", [])),
        "starts": len((work / "launches").read_text().split()),
        "seconds": time.monotonic() - began,
        "tail": done.stdout.strip().splitlines()[-2:] + done.stderr.strip().splitlines()[-1:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--lie", type=float, default=0.1)
    parser.add_argument("--flake", default="auto")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rows = []
    for seed in range(args.seed, args.seed + args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-noise-configs-") as tmp:
            row = one(Path(tmp), seed, args.lie, args.flake)
        rows.append(row)
        verdict = "right" if row["right"] else "WRONG" if row["named"] else "no set"
        print(
            f"seed {row['seed']:3d}: exit {row['exit']} {row['status']:11s} {verdict:6s} "
            f"named {', '.join(row['named']) or '-'} (cause {', '.join(row['cause'])}; "
            f"only {row['only']})  {row['trials']} trials, {row['starts']} starts, "
            f"{row['seconds']:.0f} s",
            flush=True,
        )
        if row["exit"] not in (0, 3, 4):
            print("   ", " | ".join(row["tail"]), flush=True)
    wrong0 = sum(1 for r in rows if r["exit"] == 0 and not r["right"])
    right = sum(1 for r in rows if r["exit"] == 0 and r["right"])
    ambiguous = sum(1 for r in rows if r["status"] == "ambiguous")
    n = len(rows)
    print(
        f"\nflake {args.flake}, lie {args.lie}: {n} runs: {right} right (exit 0), {wrong0} "
        f"wrong with exit 0, {ambiguous} ambiguous, {n - right - wrong0 - ambiguous} other; "
        f"mean trials {sum(r['trials'] for r in rows) / n:.1f}, "
        f"starts {sum(r['starts'] for r in rows) / n:.1f}"
    )


if __name__ == "__main__":
    main()
