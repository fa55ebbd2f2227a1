"""One Docker engine, as llm-bisect talks to it: its images, the containers it creates,
and the containers killed runs left on it.

A small typed wrapper over docker-py's client; the engine's errors (docker.errors) become
LaunchError here. Which image a candidate runs, and whether it exists anywhere, is
docker_images.py's; what runs in a container, docker.py's.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Mapping
from contextlib import suppress
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container
from docker.models.images import Image

from ..errors import LaunchError
from .common import owner_pid, reapable

RUN_LABEL = "llm-bisect.run"
COMMIT_LABEL = "llm-bisect.commit"
OWNER_LABEL = "llm-bisect.owner"
"""`host:pid:start` of the llm-bisect process that made a container: reap() spares live owners."""


def docker_message(exc: docker.errors.DockerException) -> str:
    """What the engine said, without docker-py's wrapping."""
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc).strip()


def engine_address(base_url: str) -> str | None:
    """The host whose published ports a Docker engine's URL reaches; None for this machine's
    own engine (a unix socket, localhost). Pure."""
    if not base_url or base_url.startswith(("unix:", "http+unix:", "npipe:", "http+docker:")):
        return None
    rest = base_url.split("://", 1)[-1].split("/", 1)[0]
    host = rest.rsplit("@", 1)[-1]
    host = host[1:].split("]", 1)[0] if host.startswith("[") else host.split(":", 1)[0]
    return None if host in ("", "localhost", "127.0.0.1", "::1") else host


class Engine:
    """One Docker engine (a `docker_hosts` entry, or DOCKER_HOST)."""

    def __init__(self, client: docker.DockerClient, url: str = "") -> None:
        self.client = client
        self.url = url
        """How it was reached (empty: this machine's default)."""
        where = engine_address(url)
        self.address = where or "127.0.0.1"
        """Where the ports it publishes answer."""
        self.bind = "127.0.0.1" if where is None else "0.0.0.0"
        """The host address it publishes them on (another machine's engine: all of them)."""
        self.node = where or socket.gethostname()
        """The host its containers run on (a probe's `node`)."""

    @classmethod
    def connect(cls, url: str | None = None, client: docker.DockerClient | None = None) -> Engine:
        """The engine at `url` (else DOCKER_HOST, else the local socket), answering now;
        LaunchError when it does not."""
        where = url or os.environ.get("DOCKER_HOST", "")
        try:
            client = client or (docker.DockerClient(base_url=url) if url else docker.from_env())
            client.ping()
        except docker.errors.DockerException as exc:
            at = f" at {where}" if where else ""
            said = docker_message(exc)
            raise LaunchError(f"docker: cannot reach the engine{at}: {said}") from exc
        return cls(client, where)

    # -- images --------------------------------------------------------------------------

    def image(self, ref: str) -> Image | None:
        """The image in the engine; None when it has none by that name."""
        try:
            return self.client.images.get(ref)
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.DockerException as exc:
            raise LaunchError(f"docker: {docker_message(exc)}") from exc

    def has(self, ref: str) -> bool:
        return self.image(ref) is not None

    def get(self, ref: str) -> Image:
        """The image in the engine; LaunchError when it is not there."""
        found = self.image(ref)
        if found is None:
            raise LaunchError(f"docker: no such image: {ref}")
        return found

    def pull(self, source: str) -> Iterator[dict[str, Any]]:
        """The engine's progress events of a pull of `source` (`repo:tag` or `repo@digest`)."""
        repo, tag = source.split("@", 1) if "@" in source else split_tag(source)
        try:
            yield from self.client.api.pull(repo, tag=tag or None, stream=True, decode=True)
        except docker.errors.DockerException as exc:
            raise LaunchError(f"docker pull {source}: {docker_message(exc)}") from exc

    def tag(self, source: str, ref: str) -> None:
        """Name the image `source` also `ref` (quietly: a name is a convenience)."""
        repo, tag = split_tag(ref)
        with suppress(docker.errors.DockerException):
            self.client.images.get(source).tag(repo, tag or "latest")

    def remove_image(self, ref: str) -> None:
        """Remove an image, quietly (one a container still uses stays)."""
        with suppress(docker.errors.DockerException):
            self.client.images.remove(ref)

    # -- containers ----------------------------------------------------------------------

    def create(self, spec: Mapping[str, Any]) -> Container:
        """A container made (not started) from `containers.create` arguments."""
        try:
            return self.client.containers.create(**spec)
        except docker.errors.DockerException as exc:
            raise LaunchError(f"docker: {docker_message(exc)}") from exc

    def reap(self, run_id: str = "") -> list[str]:
        """Remove every container llm-bisect made on this engine whose owner process is gone
        (a `check`, `golden`, `run`... killed by SIGKILL); one line per container.

        A container whose owner may still run is spared: its lease holds, or cannot be read
        (owner_alive: never a PID alone). One with no owner label (an older llm-bisect) is
        removed only when it carries `run_id`.
        """
        removed = []
        try:
            for container in self.client.containers.list(all=True, filters={"label": RUN_LABEL}):
                labels = container.labels or {}
                owner = labels.get(OWNER_LABEL, "")
                mine = bool(run_id) and labels.get(RUN_LABEL) == run_id
                if not reapable(owner, mine):
                    continue
                with suppress(docker.errors.NotFound):
                    container.remove(force=True)
                    commit = labels.get(COMMIT_LABEL, "")
                    what = f"commit {commit[:12]}, " if commit else "a build, "
                    removed.append(
                        f"docker: removed container {container.name} ({what}its llm-bisect "
                        f"process {owner_pid(owner) if owner else '?'} is gone)"
                    )
        except docker.errors.DockerException as exc:
            raise LaunchError(f"docker: {docker_message(exc)}") from exc
        return removed


def reap_engine(client: docker.DockerClient, run_id: str = "") -> list[str]:
    """Engine.reap on a client of its own (`llm-bisect reap` without a config)."""
    return Engine(client).reap(run_id)


def split_tag(ref: str) -> tuple[str, str]:
    """`repo:tag` → (repo, tag); a registry port is not a tag. Pure."""
    head, _, last = ref.rpartition("/")
    if ":" in last:
        name, tag = last.rsplit(":", 1)
        return (f"{head}/{name}" if head else name), tag
    return ref, ""
