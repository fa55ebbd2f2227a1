"""Image references and a registry's manifest API over httpx.

Used to tell whether an image exists before anything is pulled or started,
to learn its digest and size (for the prefetch disk budget), and to read the
labels of an image named as an end of the range without pulling it.
"""

from __future__ import annotations

import base64
import hashlib
import platform
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from .errors import LlmBisectError
from .retry import transient

DOCKER_HUB = "registry-1.docker.io"
MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.index.v1+json",
    ]
)
_INDEX_TYPES = (
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
)


class RegistryError(LlmBisectError):
    """The registry could not be asked (network, auth, unexpected answer)."""


@dataclass(frozen=True)
class ImageRef:
    """A parsed image reference: `[registry/]repository[:tag][@digest]`."""

    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def reference(self) -> str:
        """What the manifest API is asked for: the digest when there is one, else the tag."""
        return self.digest or self.tag or "latest"

    def pinned(self, digest: str) -> str:
        """`repository@digest`, as the engine names it (Docker Hub without its host)."""
        host = "" if self.registry == DOCKER_HUB else self.registry + "/"
        repo = self.repository.removeprefix("library/") if not host else self.repository
        return f"{host}{repo}@{digest}"


def parse_image_ref(ref: str) -> ImageRef:
    """Parse an image reference the way the Docker engine does."""
    name, _, digest = ref.partition("@")
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = DOCKER_HUB, name
    tag = None
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        path, tag = path.rsplit(":", 1)
    if registry == DOCKER_HUB and "/" not in path:
        path = "library/" + path
    if not path or not re.fullmatch(r"[a-z0-9]+(?:[._\-/][a-z0-9]+)*", path):
        raise ValueError(f"not an image reference: {ref!r}")
    if digest and not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise ValueError(f"not an image digest: {digest!r}")
    return ImageRef(registry, path, tag if tag or digest else "latest", digest or None)


@dataclass(frozen=True)
class Manifest:
    """What a registry says about one image (this node's platform when it is multi-arch)."""

    digest: str
    """The digest the reference resolves to (the index's digest for multi-arch images)."""
    size: int
    """Compressed bytes of config and layers: what a pull downloads at most."""
    config_digest: str
    repository: str


def _json(r: httpx.Response, registry: str) -> dict[str, Any]:
    try:
        body = r.json()
    except (ValueError, RecursionError) as exc:
        raise RegistryError(f"{registry}: answered with no JSON object") from exc
    if not isinstance(body, dict):
        raise RegistryError(f"{registry}: answered with no JSON object")
    return body


def _challenge(header: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', header))


_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def node_architecture() -> str:
    """This node's architecture as image indexes name it (GB200 nodes are arm64)."""
    machine = platform.machine().lower()
    return _ARCH.get(machine, machine)


class RegistryClient:
    """The distribution API of any registry; Docker Hub's anonymous tokens included."""

    def __init__(
        self,
        *,
        username: str | None = None,
        password: str | None = None,
        logins: Mapping[str, tuple[str, str]] | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
        architecture: str | None = None,
    ) -> None:
        """`username`/`password` (the config's) serve every registry; else `logins`, the
        credentials `docker login` stored, by registry host."""
        self.architecture = architecture or node_architecture()
        self._auth = (username, password) if username and password else None
        self._logins = dict(logins or {})
        self._http = httpx.Client(transport=transport, timeout=timeout, follow_redirects=True)
        self._authorizations: dict[tuple[str, str], str] = {}
        """(registry, repository) → the Authorization header that opened it."""

    def _credentials(self, registry: str) -> tuple[str, str] | None:
        return self._auth or self._logins.get(registry)

    def close(self) -> None:
        self._http.close()

    @staticmethod
    def _base(ref: ImageRef) -> str:
        host = ref.registry.split(":")[0]
        local = host in ("localhost", "::1") or host.startswith("127.")
        return f"{'http' if local else 'https'}://{ref.registry}/v2/{ref.repository}"

    def _get(self, ref: ImageRef, path: str, accept: str | None = None) -> httpx.Response:
        headers = {"Accept": accept} if accept else {}
        key = (ref.registry, ref.repository)
        for attempt in transient():
            with attempt:
                try:
                    if key in self._authorizations:
                        headers["Authorization"] = self._authorizations[key]
                    response = self._http.get(self._base(ref) + path, headers=headers)
                    if response.status_code == 401 and key not in self._authorizations:
                        challenge = response.headers.get("WWW-Authenticate", "")
                        self._authorizations[key] = self._authorization(challenge, ref.registry)
                        headers["Authorization"] = self._authorizations[key]
                        response = self._http.get(self._base(ref) + path, headers=headers)
                except httpx.TransportError:
                    raise
                except httpx.HTTPError as exc:
                    raise RegistryError(f"{ref.registry}: {exc}") from exc
        return response

    def _authorization(self, header: str, registry: str) -> str:
        """The Authorization header a 401's challenge asks for: a bearer token, or basic auth."""
        credentials = self._credentials(registry)
        login_hint = f"`docker login {registry}` or set server.registry.username/password"
        if header.lower().startswith("basic"):
            if credentials is None:
                raise RegistryError(f"{registry}: asks for a login; {login_hint}")
            user, password = credentials
            return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        if not header.lower().startswith("bearer"):
            raise RegistryError("registry asks for credentials it does not say how to send")
        c = _challenge(header)
        params: dict[str, str] = {k: c[k] for k in ("service", "scope") if k in c}
        try:
            r = self._http.get(c["realm"], params=params, auth=credentials)
            if r.status_code == 401:
                who = "the login it was given" if credentials else "an anonymous request"
                raise RegistryError(f"{registry}: the token service refused {who}; {login_hint}")
            r.raise_for_status()
            body = r.json()
        except (KeyError, ValueError, RecursionError, httpx.HTTPError) as exc:
            raise RegistryError(f"registry token request failed: {exc}") from exc
        token = body.get("token") or body.get("access_token")
        if not isinstance(token, str):
            raise RegistryError("registry token response holds no token")
        return f"Bearer {token}"

    def manifest(self, ref: ImageRef) -> Manifest | None:
        """The image's manifest; None when the registry says it does not exist."""
        try:
            r = self._get(ref, f"/manifests/{ref.reference}", MANIFEST_TYPES)
        except httpx.TransportError as exc:
            raise RegistryError(f"{ref.registry}: {type(exc).__name__}: {exc}") from exc
        if r.status_code in (404, 401, 403):
            # Docker Hub answers 401 for a repository that does not exist.
            return None
        if r.status_code != 200:
            raise RegistryError(f"{ref.registry}: manifest answered HTTP {r.status_code}")
        digest = r.headers.get("Docker-Content-Digest") or (
            "sha256:" + hashlib.sha256(r.content).hexdigest()
        )
        body = _json(r, ref.registry)
        if body.get("mediaType") in _INDEX_TYPES or "manifests" in body:
            chosen = next(
                (
                    m
                    for m in body.get("manifests", [])
                    if m.get("platform", {}).get("os") == "linux"
                    and m.get("platform", {}).get("architecture") == self.architecture
                ),
                None,
            )
            if chosen is None:
                arch = self.architecture
                raise RegistryError(f"{ref.repository}: no linux/{arch} image in the index")
            inner = self.manifest(ImageRef(ref.registry, ref.repository, None, chosen["digest"]))
            if inner is None:
                return None
            return Manifest(digest, inner.size, inner.config_digest, ref.repository)
        config = body.get("config", {})
        layers = body.get("layers", [])
        size = int(config.get("size", 0)) + sum(int(layer.get("size", 0)) for layer in layers)
        return Manifest(digest, size, str(config.get("digest", "")), ref.repository)

    def image_config(self, ref: ImageRef, manifest: Manifest) -> dict[str, Any]:
        """The image's config blob (labels, env) without pulling the image."""
        try:
            r = self._get(ref, f"/blobs/{manifest.config_digest}")
        except httpx.TransportError as exc:
            raise RegistryError(f"{ref.registry}: {type(exc).__name__}: {exc}") from exc
        if r.status_code != 200:
            raise RegistryError(f"{ref.registry}: config blob answered HTTP {r.status_code}")
        return _json(r, ref.registry)
