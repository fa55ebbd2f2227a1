"""The `dependency` route: one version of a dependency layered over an engine held still.

A culprit that bumps a pin (flashinfer-python 0.6.15.post1 → 0.6.16.post3) names a range of
the dependency's releases. Each release is a candidate (sources/versions.py lists them and
makes each one a commit of a small repository of versions); this strategy builds a
candidate by installing exactly that version, and nothing else (`--no-deps`), into a folder
of its own, put first on the engine build's PYTHONPATH:

    engine build at REF (any route: wheel, overlay, command)   ← built once, kept leased
      └── OUT/site: uv pip install --target OUT/site --no-deps NAME==VERSION
    server: the engine's interpreter, PYTHONPATH=OUT/site:<the engine's PYTHONPATH>,
            `{commit}` and `{short}` the engine's (Build.commit), not the release's

Python finds the layered version before the engine's own (and `importlib.metadata` reports
it), so the engine's code, its other packages and the server command stay as they were.
Runs with the process and Slurm launchers (a shared filesystem), not inside containers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from ..errors import LaunchError
from ..jsonvalue import Json
from ..logs import run_logged
from ..model import Candidate
from ..redact import public_url
from . import Build

INSTALL_TIMEOUT_S = 1800.0


class DependencyStrategy:
    """Install the candidate's version of one package over the engine's build."""

    name = "dependency"
    cache_name = "dependency"

    def __init__(
        self,
        *,
        package: str,
        engine: Callable[[], Build],
        version_of: Callable[[Candidate], str | None],
        uv: str,
        index: str | None = None,
        environ: Mapping[str, str] | None = None,
        commit: str = "",
    ) -> None:
        self.package = canonicalize_name(package)
        self.engine = engine
        """The engine's build at REF (made once; the same Build each call)."""
        self.version_of = version_of
        self.uv = uv
        self.index = index
        self.environ = dict(os.environ if environ is None else environ)
        self.commit = commit
        """The engine's commit: `{commit}` in the server command (Build.commit)."""

    def applies(self, candidate: Candidate) -> tuple[bool, str]:
        version = self.version_of(candidate)
        if version is None:
            return False, f"{candidate.short} names no version of {self.package}"
        return True, f"{self.package}=={version} over the engine's build"

    def identity(self, candidate: Candidate) -> Mapping[str, Any]:
        engine = self.engine()
        return {
            "package": self.package,
            "version": self.version_of(candidate),
            "index": public_url(self.index) if self.index else "",
            "engine": {"route": engine.route, "folder": str(engine.folder)},
        }

    def make(self, candidate: Candidate, out: Path, log: Path) -> dict[str, Json]:
        version = self.version_of(candidate)
        if version is None:
            raise LaunchError(f"{candidate.short} names no version of {self.package}")
        engine = self.engine()
        site = out / "site"
        argv = [self.uv, "pip", "install", "--python", engine.python, "--target", str(site),
                "--no-deps", f"{self.package}=={version}"]  # fmt: skip
        env = dict(self.environ)
        if self.index:  # through the environment: a login in it never shows in `ps` or logs
            env["UV_INDEX_URL"] = self.index
        run_logged(
            argv, log, env=env, timeout=INSTALL_TIMEOUT_S, redact=["UV_INDEX_URL"],
            what=f"uv pip install {self.package}=={version}",
        )  # fmt: skip
        return {"package": self.package, "version": version, "engine": engine.route}

    def load(self, candidate: Candidate, folder: Path, facts: Mapping[str, Any]) -> Build:
        engine = self.engine()
        site = str(folder / "site")
        below = engine.env.get("PYTHONPATH") or self.environ.get("PYTHONPATH", "")
        env = {**engine.env, "PYTHONPATH": f"{site}{os.pathsep}{below}" if below else site}
        return Build(
            route=self.name, folder=engine.folder, python=engine.python, env=env,
            facts={**facts, "layer": site}, commit=self.commit,
        )  # fmt: skip
