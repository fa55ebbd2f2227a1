"""What an image is, on one Docker engine and the registries its names point to.

    lookup(ref)    the engine, then the registry's manifest → exists? digest? size?
                   (nothing pulled)
    metadata(ref)  its labels and environment (the commit an image names)
    ensure(ref)    the image in the engine: pulled when missing, by the digest the
                   registry vouched for
    prefetch(ref)  the same ahead of time, within a disk budget, held back while checks
                   run; close() removes what was prefetched and never run

One `Images` per engine: what one engine holds says nothing of another's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

import docker
import docker.auth
import docker.credentials.errors
import docker.errors
from docker.models.images import Image

from ..errors import LaunchError
from ..registry import DOCKER_HUB, RegistryClient, RegistryError, parse_image_ref
from . import Artifact
from .docker_engine import Engine

PROGRESS_S = 2.0
"""Seconds between two progress lines of one pull."""


def docker_logins(hosts: Sequence[str]) -> dict[str, tuple[str, str]]:
    """What `docker login` stored for these registry hosts (config.json, credential helpers)."""
    try:
        auth = docker.auth.load_config()
    except (docker.errors.DockerException, OSError, ValueError):
        return {}
    found: dict[str, tuple[str, str]] = {}
    for host in dict.fromkeys(hosts):
        try:
            entry = auth.resolve_authconfig(None if host == DOCKER_HUB else host)
        except (docker.errors.DockerException, docker.credentials.errors.StoreError, OSError):
            continue
        if not entry:
            continue
        user = entry.get("Username") or entry.get("username")
        password = entry.get("Password") or entry.get("password")
        if user and password:
            found[host] = (str(user), str(password))
    return found


@dataclass
class PullStats:
    """What the prefetcher did, for the report and the benchmark."""

    prefetched: dict[str, float] = field(default_factory=dict)
    """Image ref → seconds its prefetch (a pull, or a derived image made) took."""
    waited: dict[str, float] = field(default_factory=dict)
    """Image ref → seconds a probe waited for a pull (prefetch in flight or its own)."""


class Images:
    """The images of one engine (see the module docstring)."""

    def __init__(
        self,
        engine: Engine,
        registry: RegistryClient,
        *,
        pull: str = "missing",
        report: Callable[[str], None] = lambda _: None,
        clock: Callable[[], float],
    ) -> None:
        self.engine = engine
        self.registry = registry
        self.pull = pull
        """`server.pull`: always, missing or never."""
        self.report = report
        self.clock = clock
        self.stats = PullStats()
        self._artifacts: dict[str, Artifact] = {}
        self._making: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._prefetched: set[str] = set()
        self._prefetched_bytes = 0
        self._probed: set[str] = set()

    # -- what an image is ----------------------------------------------------------------

    def lookup(self, ref: str) -> Artifact:
        """Whether an image exists, from the engine, then the registry (nothing pulled)."""
        try:
            image = self.engine.image(ref)
        except LaunchError as exc:
            return Artifact(ref, None, reason=str(exc))
        if image is not None:
            digests = image.attrs.get("RepoDigests") or []
            found = Artifact(
                ref,
                True,
                local=True,
                ready=True,
                digest=digests[0].split("@")[-1] if digests else str(image.id),
                size=int(image.attrs.get("Size", 0)),
            )
        elif self.pull == "never":
            found = Artifact(ref, False, reason=f"no artifact: image {ref} is not in the engine")
        else:
            found = self._remote(ref)
        self._artifacts[ref] = found
        return found

    def known(self, ref: str) -> Artifact:
        """What the last lookup of `ref` found (one now if none was made)."""
        return self._artifacts.get(ref) or self.lookup(ref)

    def _remote(self, ref: str) -> Artifact:
        try:
            parsed = parse_image_ref(ref)
        except ValueError as exc:
            return Artifact(ref, False, reason=f"no artifact: {exc}")
        try:
            manifest = self.registry.manifest(parsed)
        except RegistryError as exc:
            return Artifact(ref, None, reason=str(exc))
        if manifest is None:
            where = f"in neither the engine nor {parsed.registry}"
            return Artifact(ref, False, reason=f"no artifact: image {ref} is {where}")
        return Artifact(ref, True, digest=manifest.digest, size=manifest.size, ready=True)

    def metadata(self, ref: str) -> tuple[dict[str, str] | None, list[str]]:
        """(labels, env) of an image from the engine, else the registry; (None, []) if missing."""
        image = self.engine.image(ref)
        if image is not None:
            config = image.attrs.get("Config") or {}
            return dict(config.get("Labels") or {}), list(config.get("Env") or [])
        if self.pull == "never":
            return None, []
        try:
            parsed = parse_image_ref(ref)
        except ValueError:
            return None, []
        try:
            manifest = self.registry.manifest(parsed)
            if manifest is None:
                return None, []
            config = self.registry.image_config(parsed, manifest).get("config") or {}
        except RegistryError as exc:
            raise LaunchError(f"cannot read image {ref!r}: {exc}") from exc
        return dict(config.get("Labels") or {}), list(config.get("Env") or [])

    # -- pulls ---------------------------------------------------------------------------

    def ensure(self, ref: str) -> Image:
        """The image in the engine, pulled when missing (as `pull` says)."""
        self._probed.add(ref)
        art = self.known(ref)
        t0 = self.clock()
        with self.making(ref) as mine:
            if not mine:  # a prefetch of this image was under way; it is done now
                self.stats.waited[ref] = self.clock() - t0
            if self.pull == "always" or not self.engine.has(ref):
                if self.pull == "never":
                    raise LaunchError(f"no artifact: image {ref} is not in the engine")
                self._pull(ref, art)
                self.stats.waited[ref] = self.stats.waited.get(ref, 0.0) + self.clock() - t0
        return self.engine.get(ref)

    def prefetch(self, ref: str, budget_bytes: float, hold: Callable[[], bool]) -> bool:
        """Pull the image ahead, unless it is here, cannot be pulled, or would pass the disk
        budget of what was prefetched; `hold` between its layers' events. Whether it pulled."""
        art = self.known(ref)
        if not art.available or art.local or self.engine.has(ref):
            return False
        if self._prefetched_bytes + art.size > budget_bytes:
            self.report(f"prefetch {ref}: skipped, over the disk budget")
            return False
        with self.making(ref) as mine:
            if not mine or self.engine.has(ref):
                return False
            t0 = self.clock()
            self._pull(ref, art, hold)
            self.stats.prefetched[ref] = self.clock() - t0
            self._prefetched_bytes += art.size
            self._prefetched.add(ref)
        return True

    @contextmanager
    def making(self, ref: str) -> Iterator[bool]:
        """Hold the one making of `ref` (a pull, a derived image); yields False after
        waiting for someone else's."""
        with self._lock:
            event = self._making.get(ref)
            mine = event is None
            if event is None:
                event = self._making[ref] = threading.Event()
        if not mine:
            event.wait()
            yield False
            return
        try:
            yield True
        finally:
            with self._lock:
                del self._making[ref]
            event.set()

    def _pull(self, ref: str, art: Artifact, hold: Callable[[], bool] | None = None) -> None:
        """Pull `ref` (by digest when the registry vouched for one); `hold` (a prefetch)
        between events: reading nothing holds the pull back while checks run."""
        parsed = None
        with suppress(ValueError):
            parsed = parse_image_ref(ref)
        source = ref
        if parsed is not None and art.digest.startswith("sha256:") and not art.local:
            source = parsed.pinned(art.digest)  # by digest: the bytes the registry vouched for
        layers: dict[str, tuple[int, int]] = {}
        last = 0.0
        prefix = "prefetch" if hold is not None else "pull"
        for event in self.engine.pull(source):
            if hold is not None:
                hold()
            if "error" in event:
                raise LaunchError(f"docker pull {source}: {event['error']}")
            detail = event.get("progressDetail") or {}
            if event.get("id") and detail.get("total"):
                layers[event["id"]] = (int(detail.get("current", 0)), int(detail["total"]))
            now = self.clock()
            if layers and now - last >= PROGRESS_S:
                done = sum(c for c, _ in layers.values())
                total = sum(t for _, t in layers.values())
                self.report(f"{prefix} {ref}: {done / 1e9:.2f} of {total / 1e9:.2f} GB")
                last = now
        if "@" in source:
            # A pull by digest leaves the image untagged; tag it so the template finds it.
            self.engine.tag(source, ref)

    def close(self) -> None:
        """Remove the prefetched images no probe used (the budget is freed)."""
        for ref in self._prefetched - self._probed:
            self.engine.remove_image(ref)
        self.registry.close()
