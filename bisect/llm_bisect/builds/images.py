"""Images derived from builds, for the Docker launcher.

    route image          the server.image template, looked up in the engine and registry
    route wheel/overlay  Builder.build: a stage (the wheel file, or the changed files)
          │
          ▼              a container of the base image (no network, the server's volumes)
    data/stage/inimage.py  run by the image's own Python: the stage written over the package
          │
          ▼              committed with the base image's config, labelled with the commit,
    llm-bisect-build:<commit>-<route>   the route, the base image's id and the build's facts

A derived image is reused while its base image is the same (the base id label); it
counts against the disk budget of the build cache it was made for (a label), and the
least recently used ones (last tagged) are removed past it, never the one a probe is
about to run. A build container a killed run left behind carries the run's
labels, so the next run's reap() removes it.
"""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import IO, Any

import docker
import docker.errors
import requests
from docker.models.images import Image

from ..errors import LaunchError
from ..jsonvalue import Json
from ..logs import tail
from ..model import Candidate
from . import Build, ImageTarget

REPOSITORY = "llm-bisect-build"
"""Where derived images are tagged: `llm-bisect-build:<commit>-<route>`."""
ROUTE_LABEL = "llm-bisect.route"
BASE_LABEL = "llm-bisect.base"
"""The id of the base image a derived image was made from."""
CACHE_LABEL = "llm-bisect.cache"
"""The build cache (its folder) whose disk budget the derived image counts against."""
KEY_LABEL = "llm-bisect.key"
"""The build's cache key (builds/cache.py): what made it, config and platform included."""
BUILD_LABEL = "llm-bisect.build"
"""The build's facts (JSON): wheel and sha256, or overlay base commit and files."""
STAGE = "/llm-bisect-stage"
SCRIPT = Path(__file__).parent.parent / "data" / "stage" / "inimage.py"


def recorded(facts: Mapping[str, Any]) -> dict[str, Json]:
    """The build facts a derived image's label and result.json keep (not the removed
    paths the stage needed, nor whether the stage came from the cache)."""
    return {k: v for k, v in facts.items() if k not in ("removed_paths", "cached")}


def derived_ref(candidate: Candidate, route: str) -> str:
    return f"{REPOSITORY}:{candidate.commit}-{route}"


def stage_tar(build: Build, package: str, into: IO[bytes]) -> None:
    """The stage a container of the base image receives: manifest and files, written to
    `into` (a file: a wheel is hundreds of MB, never held in memory)."""
    manifest: dict[str, Json] = {"kind": build.route, "package": package}
    with tarfile.open(fileobj=into, mode="w") as tar:
        if build.route == "overlay":
            manifest["removed"] = list(build.facts.get("removed_paths", []))
            files = build.folder / "files"
            if files.is_dir():
                tar.add(files, arcname=STAGE.lstrip("/") + "/files")
        else:
            wheel = manifest["wheel"] = str(build.facts["wheel"])
            tar.add(build.folder / wheel, arcname=f"{STAGE.lstrip('/')}/{wheel}")
        data = json.dumps(manifest).encode()
        info = tarfile.TarInfo(f"{STAGE.lstrip('/')}/manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    into.seek(0)


def derived_config(
    base: Mapping[str, Any], labels: Mapping[str, str], python: str
) -> dict[str, Json]:
    """The derived image's config: the base image's, with our labels. Pure.

    A base with neither entrypoint nor command gets `CMD [python]`: the engine would
    otherwise keep the build container's own command.
    """
    conf = dict(base)
    conf["Labels"] = {**(base.get("Labels") or {}), **labels}
    # The engine fills what the config leaves out from the build container's: an empty
    # entrypoint (not null) keeps it out; the build container has no command to leak.
    conf["Entrypoint"] = base.get("Entrypoint") or []
    if not conf["Entrypoint"] and not conf.get("Cmd"):
        conf["Cmd"] = [python]
    return conf


class ImageDeriver:
    """Makes and finds derived images on one engine."""

    def __init__(
        self,
        client: docker.DockerClient,
        *,
        volumes: Sequence[str],
        labels: Mapping[str, str],
        cache: str,
        timeout: float = 1800.0,
    ) -> None:
        self.client = client
        self.volumes = list(volumes)
        """The server's bind mounts: the build container sees what the server will."""
        self.labels = dict(labels)
        """The run's labels on each build container (reap() finds a killed run's)."""
        self.cache = cache
        """The build cache's folder: sweep() weighs only the images made for it."""
        self.timeout = timeout

    def find(self, ref: str, base_id: str, key: str | None = None) -> Image | None:
        """The derived image, when it was made from this base (and build `key`)."""
        try:
            image = self.client.images.get(ref)
        except docker.errors.ImageNotFound:
            return None
        labels = (image.attrs.get("Config") or {}).get("Labels") or {}
        if key is not None and labels.get(KEY_LABEL) != key:
            return None  # made under another config
        return image if labels.get(BASE_LABEL) == base_id else None

    def touch(self, image: Image, ref: str) -> None:
        """Mark it used now (its last tag time orders eviction)."""
        repo, tag = ref.split(":", 1)
        with suppress(docker.errors.DockerException):
            image.tag(repo, tag)

    def derive(
        self,
        candidate: Candidate,
        build: Build,
        target: ImageTarget,
        base: Image,
        log: Path,
        key: str = "",
    ) -> Image:
        """Apply the build to the base image and commit the result; LaunchError if it fails."""
        ref = derived_ref(candidate, build.route)
        labels = {
            "llm-bisect.commit": candidate.commit,
            ROUTE_LABEL: build.route,
            BASE_LABEL: str(base.id),
            KEY_LABEL: key,
            CACHE_LABEL: self.cache,
            BUILD_LABEL: json.dumps(recorded(build.facts), sort_keys=True),
        }
        source = SCRIPT.read_text()
        with log.open("a") as f:
            f.write(f"$ derive {ref} from {target.base} ({base.id}) with {target.python}\n")
        container = None
        try:
            container = self.client.containers.create(
                str(base.id),
                entrypoint=[target.python, "-c", source, STAGE],
                volumes=self.volumes,
                labels=self.labels,
                network_disabled=True,
                detach=True,
            )
            with tempfile.TemporaryFile() as stage:
                stage_tar(build, target.package, stage)
                container.put_archive("/", stage)
            container.start()
            try:
                code = int(container.wait(timeout=self.timeout).get("StatusCode", -1))
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                raise LaunchError(f"image build of {ref} ran past {self.timeout:g}s") from None
            output = container.logs().decode(errors="replace")
            with log.open("a") as f:
                f.write(output)
            if code != 0:
                raise LaunchError(f"image build from {target.base} exited with {code}", tail(log))
            conf = derived_config(base.attrs.get("Config") or {}, labels, target.python)
            repo, tag = ref.split(":", 1)
            with suppress(docker.errors.DockerException):
                self.client.images.remove(ref)  # made from another base: not left dangling
            self.client.api.commit(str(container.id), repository=repo, tag=tag, conf=conf)
            return self.client.images.get(ref)
        except docker.errors.DockerException as exc:
            message = str(getattr(exc, "explanation", None) or exc).strip()
            raise LaunchError(f"image build of {ref}: {message}", tail(log)) from exc
        finally:
            if container is not None:
                with suppress(docker.errors.DockerException):
                    container.remove(force=True)

    def sweep(self, budget_bytes: int, keep: str = "") -> list[str]:
        """Remove least recently used derived images of this cache past the budget; the
        refs removed."""
        found = []
        for image in self.client.images.list(filters={"label": f"{CACHE_LABEL}={self.cache}"}):
            labels = (image.attrs.get("Config") or {}).get("Labels") or {}
            size = int(image.attrs.get("Size", 0))
            with suppress(docker.errors.DockerException):
                size -= int(self.client.images.get(labels.get(BASE_LABEL, "")).attrs["Size"])
            used = _sortable((image.attrs.get("Metadata") or {}).get("LastTagTime", ""))
            found.append((used, max(size, 0), image))
        found.sort(key=lambda f: f[0])
        total = sum(size for _, size, _ in found)
        removed = []
        for _, size, image in found:
            if total <= budget_bytes:
                break
            if keep in image.tags:
                continue
            with suppress(docker.errors.DockerException):
                self.client.images.remove(str(image.id))  # refused while a container uses it
                removed += image.tags
                total -= size
        return removed


def _sortable(when: object) -> str:
    """An engine timestamp (`2026-12-01T13:05:07.123456789Z`) that sorts as text."""
    text = str(when or "").rstrip("Z")
    head, _, frac = text.partition(".")
    return f"{head}.{frac[:9]:0<9}"
