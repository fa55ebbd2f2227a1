"""A server start that lies once, for the real-vLLM bed: run as the server command's head,

    {python} lie_once.py STATE LIAR OTHER {commit} -m vllm.entrypoints.openai.api_server ...

the first start of LIAR serves OTHER's code (OTHER's overlay build, found beside LIAR's in
the build cache, first on PYTHONPATH): what a flaky start shows, the other side's behaviour
from a build that is not the other side. STATE records that it lied, so it lies once; every
other start runs as given. Standard library only: it runs under the build's interpreter.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def lied_path(path: str, liar: str, other: str) -> str | None:
    """PYTHONPATH with LIAR's overlay build swapped for OTHER's, or None where there is none."""
    first, sep, rest = path.partition(os.pathsep)
    build = Path(first)
    for folder in (build, *build.parents):
        if folder.name.startswith(f"{liar}-overlay-"):
            found = sorted(folder.parent.glob(f"{other}-overlay-*"))
            if not found:
                return None
            return str(found[0] / build.relative_to(folder)) + sep + rest
    return None


def main(argv: list[str]) -> None:
    state, liar, other, commit, *rest = argv
    if commit == liar and not os.path.exists(state):
        swapped = lied_path(os.environ.get("PYTHONPATH", ""), liar, other)
        if swapped is not None:
            os.environ["PYTHONPATH"] = swapped
            Path(state).write_text(f"{commit} served {other}'s build\n")
    os.execv(sys.executable, [sys.executable, *rest])


if __name__ == "__main__":
    main(sys.argv[1:])
