"""The reap service: servers of killed llm-bisect processes removed."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import LaunchError
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
    from the config's launcher, or without one from this node's Docker engine and Slurm
    queue (where there is one). A live process's servers are never touched."""
    if s is not None:
        kind = s.config.server.launcher
        with s.launcher("reap") as launcher:
            return Reaped([f"the {kind} launcher of {s.config_file}"], launcher.reap(), [])
    looked, removed, failed = [], [], []
    import docker
    import docker.errors

    from ..launchers.docker import reap_engine
    from ..launchers.slurm import Slurm, reap_queue

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException:
        pass  # no engine on this node: nothing of ours there
    else:
        looked.append("the Docker engine")
        try:
            removed += reap_engine(client)
        except LaunchError as exc:
            failed.append(str(exc))
    if shutil.which("squeue", path=environ.get("PATH", os.defpath)) is not None:
        looked.append("the Slurm queue")
        try:
            removed += reap_queue(Slurm(environ))
        except LaunchError as exc:
            failed.append(str(exc))
    return Reaped(looked, removed, failed)
