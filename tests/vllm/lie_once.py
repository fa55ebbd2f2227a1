"""A server start that lies once, for the real-vLLM bed: run as the server command's head,

    {python} lie_once.py STATE REPO LIAR OTHER {commit} -m vllm.entrypoints.openai.api_server ...

the first start of LIAR serves OTHER's code: what a flaky start shows, the other side's
behaviour from a build that is not the other side. OTHER's build is made here from LIAR's
overlay build (first on PYTHONPATH), as an overlay is: LIAR's files hard-linked into
STATE.build/, each package file that differs between LIAR and OTHER in REPO written over
(a new file, never the linked one) or removed. OTHER need not have been built by the run:
the start serves a build no probe of the run serves (its checks are that build's). STATE
records that it lied, so it lies once; every other start runs as given. Standard library
and git only: it runs under the build's interpreter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

PACKAGE = "vllm"


def _git(repo: str, *args: str) -> bytes:
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True).stdout


def other_build(build: Path, repo: str, liar: str, other: str, into: Path) -> None:
    """OTHER's package in `into`: LIAR's `build` linked, the files that differ rewritten."""
    shutil.copytree(build, into, symlinks=True, copy_function=os.link)
    names = _git(repo, "diff", "--no-renames", "--name-status", "-z", liar, other, "--", PACKAGE)
    fields = names.decode().split("\0")
    for status, path in zip(fields[0::2], fields[1::2], strict=False):
        target = into / path
        if status == "D":
            target.unlink(missing_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        fresh = target.with_name(target.name + ".lie")
        fresh.write_bytes(_git(repo, "show", f"{other}:{path}"))
        os.replace(fresh, target)  # a new inode: the linked file (the venv's) stays as it was


def lied_path(path: str, repo: str, liar: str, other: str, into: Path) -> str | None:
    """PYTHONPATH with LIAR's overlay build swapped for OTHER's, or None where there is none."""
    first, sep, rest = path.partition(os.pathsep)
    build = Path(first)
    if not any(f.name.startswith(f"{liar}-overlay-") for f in (build, *build.parents)):
        return None
    other_build(build, repo, liar, other, into)
    return str(into) + sep + rest


def main(argv: list[str]) -> None:
    state, repo, liar, other, commit, *rest = argv
    if commit == liar and not os.path.exists(state):
        into = Path(state + ".build")
        swapped = lied_path(os.environ.get("PYTHONPATH", ""), repo, liar, other, into)
        if swapped is not None:
            os.environ["PYTHONPATH"] = swapped
            Path(state).write_text(f"{commit} served {other}'s build\n")
    os.execv(sys.executable, [sys.executable, *rest])


if __name__ == "__main__":
    main(sys.argv[1:])
