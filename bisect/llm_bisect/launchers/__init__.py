"""Launchers: start a server for a candidate, yield an endpoint, always tear it down."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

from ..model import Candidate


@dataclass(frozen=True)
class Artifact:
    """Whether what a candidate needs exists, checked before anything is pulled or started."""

    ref: str
    """What runs the candidate: an image reference, or the command."""
    available: bool | None
    """True: it exists; False: it does not (the probe is `skip`); None: could not tell."""
    local: bool = False
    """True when it is already on this node (an image in the engine, a command)."""
    digest: str = ""
    """`sha256:...` of the manifest (registry) or the image id (engine)."""
    size: int = 0
    """Bytes a pull downloads at most (registry) or the image's size (engine)."""
    reason: str = ""
    """Why it is not available, for the probe's `skip` reason."""
    route: str = ""
    """How it will be built (a build strategy), or why it cannot be; empty without `build:`."""
    ready: bool = False
    """Runnable without a build of our own: an image, a published wheel, a cached build
    (`candidates.coarse` probes these first)."""


def price(art: Artifact) -> int:
    """What making a candidate runnable costs, in steps the search breaks near-ties by
    (search.plan_batch `costs`): 0 on this node already (an image in the engine, a command,
    a cached build), 1 to download (an image from a registry, a published wheel, or not
    known), 2 to build from source."""
    if art.route and not art.ready:
        return 2
    if art.route.startswith("wheel:") or art.available is None:
        return 1
    if art.local:
        return 0
    # ready, not on the node: a build in the cache (not yet an image), else an image to pull
    return 0 if art.route and not art.route.startswith("image:") else 1


INSTRUMENT_DIR = "/opt/llm-bisect/instrument"
"""Where a container or pod finds an instrument's folders (folder i at INSTRUMENT_DIR/i)."""


@dataclass(frozen=True)
class Instrument:
    """What a probe adds to a server beyond its config (the localisation probes)."""

    args: tuple[str, ...] = ()
    """Appended to the server's arguments."""
    env: Mapping[str, str] = field(default_factory=dict)
    paths: tuple[Path, ...] = ()
    """Folders put first on the server's PYTHONPATH (bind-mounted into a container)."""


class Server(Protocol):
    """A running server for one candidate. Leaving the context stops it, whatever happened."""

    base_url: str
    """Where the OpenAI API answers, e.g. `http://127.0.0.1:8123`."""

    def __enter__(self) -> Server: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def wait_ready(self) -> None:
        """Block until /health and /v1/models answer; raise ServerExited or NotReady."""
        ...

    def check_alive(self, wait: float = 0.0) -> None:
        """Raise ServerExited when the server has ended (waiting up to `wait` s for it to)."""
        ...

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the server's output, secrets removed."""
        ...

    def fingerprint(self) -> Mapping[str, Any]:
        """What the launcher knows of the build (image digest, labels, packages): the keys
        of fingerprint.Fingerprint (a built-in's: fingerprint.Facts)."""
        ...

    def stop(self) -> None:
        """Stop the server now (safe from another thread, and more than once)."""
        ...


class Launcher(Protocol):
    """Makes a Server for a candidate; its output goes to `probe_dir`."""

    def artifact(self, candidate: Candidate) -> Artifact:
        """Whether the candidate can be started at all, without starting it."""
        ...

    def launch(
        self,
        candidate: Candidate,
        probe_dir: Path,
        instrument: Instrument | None = None,
        slot: int = 0,
    ) -> Server:
        """A server for the candidate, not started until entered; `slot` says where it runs
        when the launcher has several places (Docker hosts), 0 .. parallel-1."""
        ...

    def prefetch(self, candidates: list[Candidate]) -> None:
        """Prepare candidates that may come next, in the background (may do nothing)."""
        ...

    def quiet(self) -> AbstractContextManager[None]:
        """Inside, background work must not slow the running probe's checks."""
        ...

    def reap(self) -> list[str]:
        """Remove the servers killed llm-bisect processes left behind (any run or command:
        those whose owner process is gone; never a live one's); one line per server, saying
        what was removed."""
        ...

    def close(self) -> None:
        """End background work."""
        ...


@runtime_checkable
class StartsCold(Protocol):
    """A launcher whose servers keep the engine's compile caches (launchers/cached.py)."""

    def start_cold(self, candidate: Candidate) -> None:
        """Its next server of `candidate` starts on an empty cache folder of its own: a
        re-probe's verdict owes nothing to what an earlier start compiled."""
        ...


@runtime_checkable
class Avoids(Protocol):
    """A launcher whose cluster picks the node (Slurm, Kubernetes): there a slot is no place
    (slot k's jobs land on any node), so a probe that must run elsewhere than the verdict it
    checks names the nodes to keep off (a re-probe, a confirmation trial, the Evidence
    stage's probe; places.py)."""

    def avoid(self, candidate: Candidate, nodes: Sequence[str]) -> None:
        """Its next server of `candidate` runs on none of `nodes` (as the probes' fingerprints
        name them) where the cluster has another node for it; where it has none (a one-node
        cluster), on the same node again, a later start, and said so."""
        ...
