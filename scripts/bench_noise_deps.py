#!/usr/bin/env python3
"""`llm-bisect deps` end to end on the simulated server whose starts lie, seed by seed.

Each seeded run: a dependency `simdep` with --releases releases after the good one (1.0,
1.1, ...), real wheels on a PEP 503 index on 127.0.0.1, installed by real uv over the
engine's build; its first bad release drawn at random (1.1 up to the bad end). The engine is
the simulator playing the fault the installed simdep names (garbled-math from the first bad
release on); every server start serves the other side's behaviour with probability --lie
(the simulator's --lie-rate, seeded per run and start). The canary and expect checks, the
search as the config says (`--flake`: auto, the default, or 0), no localisation;
confirmation does not apply to releases. Prints each run (exit code, status, whether the
named first bad release is the real one, probes) and the tally: a wrong release named with
exit 0 is the number that matters.

Usage: python scripts/bench_noise_deps.py [--runs 20] [--lie 0.1] [--releases 16]
  [--flake auto] [--seed 1]
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import http.server
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bisect"))

from llm_bisect.demo import build_history

BISECT = Path(__file__).resolve().parent.parent / "bisect"

SERVE = """\
import os, sys
import simdep
os.execv(sys.executable, [sys.executable, "-m", "llm_bisect.sim", "--fault", simdep.FAULT,
                          *sys.argv[1:]])
"""
BUILD = """\
import sys
from pathlib import Path
(Path(sys.argv[1]) / "serve.py").write_text(Path(sys.argv[2]).read_text())
"""


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def wheel(folder: Path, version: str, fault: str) -> str:
    """A real wheel of simdep `version` that names `fault`; its file name."""
    dist = f"simdep-{version}.dist-info"
    files = {
        "simdep/__init__.py": f"FAULT = {fault!r}\n".encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: simdep\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    name = f"simdep-{version}-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(folder / name, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{path},sha256={digest.decode()},{len(data)}")
        z.writestr(f"{dist}/RECORD", "\n".join([*record, f"{dist}/RECORD,,"]) + "\n")
    return name


def one(work: Path, seed: int, lie: float, releases: int, flake: str) -> dict[str, Any]:
    rng = random.Random(seed)
    first_bad = rng.randint(1, releases)
    versions = [f"1.{i}" for i in range(releases + 1)]
    page = work / "index" / "simple" / "simdep"
    page.mkdir(parents=True)
    links = []
    for i, version in enumerate(versions):
        name = wheel(work / "index", version, "garbled-math" if i >= first_bad else "none")
        digest = hashlib.sha256((work / "index" / name).read_bytes()).hexdigest()
        links.append(f'<a href="../../{name}#sha256={digest}">{name}</a>')
    (page / "index.html").write_text(f"<html><body>{''.join(links)}</body></html>")
    handler = functools.partial(Quiet, directory=str(work / "index"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        repo = work / "engine"
        shas = build_history(repo, {}, n_commits=2)
        (work / "serve.py").write_text(SERVE)
        (work / "build.py").write_text(BUILD)
        sim = ["--launch-log", str(work / "launches"), "--lie-rate", str(lie),
               "--lie-seed", str(seed)]  # fmt: skip
        config = {
            "candidates": {"repo": str(repo), "good": shas[0], "bad": shas[-1]},
            "server": {
                "command": [
                    sys.executable,
                    "{build}/serve.py",
                    "--port",
                    "{port}",
                    "--commit",
                    "{commit}",
                    *sim,
                ],
                "ready_timeout": 30,
            },
            "build": {
                "strategies": [
                    {
                        "type": "command",
                        "run": [
                            sys.executable,
                            str(work / "build.py"),
                            "{out}",
                            str(work / "serve.py"),
                        ],
                    }
                ],
                "cache": {"dir": str(work / "cache")},
            },
            "checks": [{"type": "canary"}, {"type": "expect"}],
            "search": {"flake": flake if flake == "auto" else float(flake)},
            "localize": {"enabled": False},
        }
        path = work / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        url = f"http://127.0.0.1:{server.server_address[1]}/simple"
        env = {**os.environ, "PYTHONPATH": str(BISECT), "UV_CACHE_DIR": str(work / "uv-cache")}
        began = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "llm_bisect.cli", "deps", str(path), "--build", shas[-1],
             "--package", "simdep", "--good", versions[0], "--bad", versions[-1],
             "--index", url, "--out", str(work / "out")],
            capture_output=True, text=True, check=False, env=env,
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    result_file = work / "out" / "result.json"
    result = json.loads(result_file.read_text()) if result_file.exists() else {}
    named = result.get("first_bad_version")
    return {
        "seed": seed,
        "exit": done.returncode,
        "status": result.get("status", "none"),
        "truth": versions[first_bad],
        "named": named,
        "right": named == versions[first_bad],
        "probes": len(result.get("probes", [])),
        "starts": len((work / "launches").read_text().split()),
        "posterior": (result.get("search") or {}).get("posterior"),
        "seconds": time.monotonic() - began,
        "tail": done.stdout.strip().splitlines()[-1:] + done.stderr.strip().splitlines()[-1:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--lie", type=float, default=0.1)
    parser.add_argument("--releases", type=int, default=16)
    parser.add_argument("--flake", default="auto")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rows = []
    for seed in range(args.seed, args.seed + args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-noise-deps-") as tmp:
            row = one(Path(tmp), seed, args.lie, args.releases, args.flake)
        rows.append(row)
        said = "right" if row["right"] else "WRONG" if row["named"] else "no answer"
        posterior = f"posterior {row['posterior']:.4f}" if row["posterior"] else ""
        print(
            f"seed {row['seed']:3d}: exit {row['exit']} {row['status']:13s} {said:9s} "
            f"(first bad {row['truth']}, named {row['named']})  {row['probes']} probes, "
            f"{row['starts']} starts, {row['seconds']:.0f} s {posterior}",
            flush=True,
        )
        if row["exit"] not in (0, 3) or row["status"] == "none":
            print(f"    {' | '.join(row['tail'])}", flush=True)
    wrong0 = sum(1 for r in rows if r["exit"] == 0 and r["named"] and not r["right"])
    right = sum(1 for r in rows if r["right"] and r["exit"] == 0)
    print(
        f"\nflake {args.flake}, lie {args.lie}, {args.releases} releases: {len(rows)} runs: "
        f"{right} right (exit 0), {wrong0} wrong with exit 0, {len(rows) - right - wrong0} "
        f"other (ambiguous, no answer); mean probes "
        f"{sum(r['probes'] for r in rows) / len(rows):.1f}, starts "
        f"{sum(r['starts'] for r in rows) / len(rows):.1f}, "
        f"{sum(r['seconds'] for r in rows) / len(rows):.0f} s a run"
    )


if __name__ == "__main__":
    main()
