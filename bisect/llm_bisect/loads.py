"""The engine files a server executes, through the path hook of data/loads: the folder it
writes to, the Instrument that puts it on a server, and the record read back after the
checks (the golden keeps it: priors.py weighs candidates by it).

    probe of the good end ─► Instrument: PYTHONPATH += data/loads, LLM_BISECT_LOADS=probe/loads
      server processes (API server, engine core, workers) ─► probe/loads/<pid>.txt
      the server stopped ─► read(probe/loads) ─► golden.loads {commit, files}

The hook's variable is set by the harness, never by the config: it stays out of the
server's digest and changes no output. A launcher whose server cannot write the probe's
folder (a container, a pod: `reaches`) gets no hook, and the golden then holds no record.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: the simulated server writes its record through
    from .launchers import Instrument  # this module, and starts without pydantic (model.py)

VAR = "LLM_BISECT_LOADS"
"""The folder the hook writes to (data/loads/sitecustomize.py reads the same name)."""
HOOK = Path(__file__).resolve().parent / "data" / "loads"
"""The folder holding the hook (put first on the server's PYTHONPATH)."""
FOLDER = "loads"
"""The probe's folder the hook writes to."""
MOST_FILES = 100_000
"""The most files read back (a hostile or runaway server cannot fill the golden)."""


def reaches(launcher: object) -> bool:
    """Whether a launcher's servers write the probe's folder at its own path (the process
    and Slurm launchers say so: `writes_probe_folder`), through the launchers that wrap one
    (`inner`: the engine cache's): a container's or a pod's cannot, and gets no hook."""
    while not hasattr(launcher, "writes_probe_folder") and hasattr(launcher, "inner"):
        launcher = launcher.inner
    return bool(getattr(launcher, "writes_probe_folder", False))


def instrument(probe_dir: Path) -> Instrument:
    """What a server that records its loads gets: the hook first on its path, the folder."""
    from .launchers import Instrument

    return Instrument(env={VAR: str((probe_dir / FOLDER).absolute())}, paths=(HOOK,))


def clear(probe_dir: Path) -> None:
    """Remove what an earlier server of this probe folder reported."""
    shutil.rmtree(probe_dir / FOLDER, ignore_errors=True)


def read(probe_dir: Path) -> list[str] | None:
    """The files the server's processes imported (repository-relative, sorted, once each);
    None where none wrote any (no hook ran: nothing is known)."""
    folder = probe_dir / FOLDER
    if not folder.is_dir():
        return None
    found: set[str] = set()
    for file in sorted(folder.glob("*.txt")):
        for line in file.read_text("utf-8", "replace").splitlines():
            if line and len(found) < MOST_FILES and not line.startswith("/") and ".." not in line:
                found.add(line)
    return sorted(found) if found else None


def write(files: Iterable[str], environ: dict[str, str] | None = None) -> None:
    """Report `files` as loaded through the hook's channel (the simulator's `loads`): where
    the hook's variable is set, they are appended to this process's file."""
    folder = (os.environ if environ is None else environ).get(VAR)
    if not folder:
        return
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{os.getpid()}.txt"), "a", encoding="utf-8") as f:
        f.writelines(f"{name}\n" for name in files)
