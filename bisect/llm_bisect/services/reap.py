"""The reap service: servers of killed llm-bisect processes removed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..kinds import LAUNCHERS
from .setup import Setup


@dataclass(frozen=True)
class Reaped:
    """What `reap` did."""

    looked: list[str]
    """Where it looked: the Docker engine, the Slurm queue, a config's launcher."""
    removed: list[str]
    """One line per server removed: what it was and whose."""
    failed: list[str]
    """Places it could not look at, and why."""


def reap_servers(s: Setup | None, environ: Mapping[str, str]) -> Reaped:
    """The `reap` command: remove the servers of killed llm-bisect processes (owner gone)
    from the config's launcher, or without one wherever each launcher finds its own on this
    node (the Docker engine, the Slurm queue, where there is one). A live process's servers
    are never touched."""
    if s is not None:
        kind = s.config.server.launcher
        with s.launcher("reap") as launcher:
            return Reaped([f"the {kind} launcher of {s.config_file}"], launcher.reap(), [])
    looked, removed, failed = [], [], []
    for launcher_kind in LAUNCHERS.kinds():  # each finds its own leftovers (LauncherKind.reap)
        reap = launcher_kind.reap
        found = reap(environ) if reap is not None else None
        if found is not None:
            looked.append(found.looked)
            removed += found.removed
            failed += found.failed
    return Reaped(looked, removed, failed)
