#!/usr/bin/env python3
"""Build the demo's images for a laptop with Docker: one `llm-bisect-demo:<sha>` per commit.

Each image is FROM a Python base (default python:3.12-slim, pulled once) with
the llm_bisect package and that commit's `sim-engine.json`; one commit gets no
image (an untestable candidate). Then:

    llm-bisect run configs/laptop-docker.yaml --out /tmp/laptop-demo

Usage: python scripts/build_demo_images.py [--base python:3.12-slim] [--dir configs/.demo]
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tarfile
from pathlib import Path

import docker
import docker.errors

from llm_bisect.demo import DOCKER_REPOSITORY, MISSING_IMAGE_INDEX, build_demo_history
from llm_bisect.sim.docker import SRC

DOCKERFILE = """FROM {base}
COPY llm_bisect /src/llm_bisect
COPY sim-engine.json /engine/sim-engine.json
ENV PYTHONPATH=/src PYTHONDONTWRITEBYTECODE=1
LABEL ai.vllm.build.commit={sha}
ENTRYPOINT ["python", "-m", "llm_bisect.sim"]
"""


def context(base: str, sha: str, engine_json: bytes) -> io.BytesIO:
    """The build context as a tar: Dockerfile, the package, the commit's engine file."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        files = {
            "Dockerfile": DOCKERFILE.format(base=base, sha=sha).encode(),
            "sim-engine.json": engine_json,
        }
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        tar.add(
            SRC / "llm_bisect",
            arcname="llm_bisect",
            filter=lambda t: None if "__pycache__" in t.name else t,
        )
    buf.seek(0)
    return buf


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", default="python:3.12-slim", help="an image with `python`")
    parser.add_argument("--dir", type=Path, default=Path(__file__).parent.parent / "configs/.demo")
    args = parser.parse_args(argv)
    repo = args.dir / "engine"
    if repo.exists():
        print(f"{repo} exists; remove it to build anew", file=sys.stderr)
        return 2
    shas = build_demo_history(repo)
    try:
        client = docker.from_env()
        for i, sha in enumerate(shas):
            if i == MISSING_IMAGE_INDEX:
                continue
            engine = subprocess.run(
                ["git", "-C", str(repo), "show", f"{sha}:sim-engine.json"],
                capture_output=True,
                check=True,
            ).stdout
            client.images.build(
                fileobj=context(args.base, sha, engine),
                custom_context=True,
                tag=f"{DOCKER_REPOSITORY}:{sha}",
                rm=True,
            )
            print(f"built {DOCKER_REPOSITORY}:{sha[:12]} ({i + 1}/{len(shas)})", flush=True)
    except docker.errors.DockerException as exc:
        print(f"docker: {exc}", file=sys.stderr)
        return 1
    print(f"history in {repo}; now: llm-bisect run configs/laptop-docker.yaml --out /tmp/demo")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
