"""What the launchers that run a command share (process, slurm): the candidate's artifact
or build route, and its build made before the server starts, with the environment the
build and an instrument add."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from ..builds import Build, Builder
from ..builds.prefetch import BuildPrefetcher
from ..fingerprint import Facts
from ..model import Candidate
from . import Artifact, Instrument


class Prefetching:
    """Prefetch, quiet and close for a launcher whose builds a BuildPrefetcher makes ahead
    (`prefetcher` is None without a builder)."""

    prefetcher: BuildPrefetcher | None

    def prefetch(self, candidates: list[Candidate]) -> None:
        if self.prefetcher is not None:
            self.prefetcher.want(candidates)

    def quiet(self) -> AbstractContextManager[None]:
        return self.prefetcher.quiet() if self.prefetcher is not None else nullcontext()

    def close(self) -> None:
        if self.prefetcher is not None:
            self.prefetcher.close()


def command_artifact(builder: Builder | None, candidate: Candidate, ref: str) -> Artifact:
    """A command needs no artifact; with a builder, the candidate needs a build route."""
    if builder is None:
        return Artifact(ref=ref, available=True, local=True, ready=True)
    route = builder.route(candidate)
    ok = route.strategy is not None
    return Artifact(
        ref=ref,
        available=ok,
        local=True,
        reason="" if ok else str(route),
        route=str(route),
        ready=route.strategy == "wheel" or builder.cached(candidate, route),
    )


@dataclass(frozen=True)
class Prepared:
    """What a command server starts with besides its template."""

    values: dict[str, str]
    """Placeholders the build fills: `{python}`, `{build}`."""
    env: dict[str, str]
    facts: Facts = field(default_factory=Facts)
    """`build`: what result.json records of the build."""
    build: Build | None = None
    """The build, leased: the server releases it when it stops (never evicted under it)."""


def prepare(
    builder: Builder | None,
    candidate: Candidate,
    probe_dir: Path,
    env: Mapping[str, str],
    instrument: Instrument | None,
) -> Prepared:
    """Build the candidate (a failed build is a LaunchError: the probe is skip; the probe
    keeps the build's log either way), then the environment: the build's, its PYTHONPATH
    before the caller's, the instrument's folders first of all."""
    values: dict[str, str] = {}
    out = dict(env)
    facts: Facts = {}
    build: Build | None = None
    if builder is not None:
        try:
            build = builder.build(candidate)
        finally:
            log = builder.log_of(candidate)
            if log.exists():  # made now or before
                probe_dir.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(log, probe_dir / "build.log")
        values = {"python": build.python, "build": str(build.folder)}
        if build.commit:  # the engine held under a dependency's release
            values |= {"commit": build.commit, "short": build.commit[:12]}
        out |= build.env
        if "PYTHONPATH" in build.env and env.get("PYTHONPATH"):
            out["PYTHONPATH"] = os.pathsep.join([build.env["PYTHONPATH"], env["PYTHONPATH"]])
        facts = {"build": dict(build.facts)}
    if instrument is not None:
        out |= instrument.env
        paths = [str(p) for p in instrument.paths]
        if paths:  # none (the engine cache's folders alone): the caller's PYTHONPATH stands
            joined = os.pathsep.join([*paths, out.get("PYTHONPATH", "")])
            out["PYTHONPATH"] = joined.rstrip(os.pathsep)
    return Prepared(values, out, facts, build)
