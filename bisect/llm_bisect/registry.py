"""Image references and a registry's manifest API over httpx.

Used to tell whether an image exists before anything is pulled or started,
to learn its digest and size (for the prefetch disk budget), and to read the
labels of an image named as an end of the range without pulling it. `keep`
(services/keep.py) also lists tags, reads manifests as the bytes their digest is
of, and writes to a mirror: blobs (mounted from another repository of the same
registry, else streamed), then manifests; a push is opened by its own 401 challenge.

What a registry answers is data: a tag or digest goes into a URL only when it is one by the
registry's grammar (and each path segment quoted), a manifest, config or blob is hashed
and checked against its digest before it is used or pushed, and every request has a
total deadline (`_Bounds`: each socket read, write and connect waits at most until it,
so a registry trickling a byte at a time ends too) and each answer a size cap.
"""

from __future__ import annotations

import base64
import hashlib
import json
import platform
import re
import ssl
import threading
import time
import typing
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypedDict, cast
from urllib.parse import quote, urljoin, urlsplit

import httpcore
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


TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
"""A tag, as the distribution spec allows it (anything else is not put into a URL)."""
DIGEST = re.compile(r"sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128}")
"""A digest this client can check bytes against."""
REPOSITORY = re.compile(r"[a-z0-9]+(?:[._\-/][a-z0-9]+)*")
DEADLINE_S = 120.0
"""Seconds one request may take, whole: connect, token, retries, every byte of the answer."""
BLOB_DEADLINE_S = 3600.0
"""Seconds one blob's copy (upstream to mirror, streamed) may take, whole."""
MAX_PAGES = 100
"""Pages of a tags list read at most (a list that always names a next page ends)."""
ANSWER_CAP = 8 << 20
"""Bytes of one answer read at most (a manifest is at most 4 MiB in distribution)."""
TAGS_CAP = 64 << 20
"""Bytes of a whole tags list, all pages, read at most (as a ledger's)."""


class RegistryError(LlmBisectError):
    """The registry could not be asked (network, auth, unexpected answer)."""


def shown(value: str, limit: int = 80) -> str:
    """A value from a registry, quoted for a one-line message (cut when long)."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"


def valid_tag(tag: str) -> bool:
    return TAG.fullmatch(tag) is not None


def _segment(reference: str, *, digest_only: bool = False) -> str:
    """A tag or digest as one URL path segment; RegistryError for anything else (a `..`, a
    `/`, `?` or `#` would name another path)."""
    if DIGEST.fullmatch(reference) or (not digest_only and TAG.fullmatch(reference)):
        return quote(reference, safe=":")
    kind = "digest" if digest_only else "tag or digest"
    raise RegistryError(f"not a {kind}: {shown(reference)}")


def _hash(data: bytes, algorithm: str) -> str:
    return f"{algorithm}:" + hashlib.new(algorithm, data).hexdigest()


class _Bounds:
    """The deadline of the request this thread makes (none outside one): every connect,
    read and write on its sockets waits at most until then."""

    def __init__(self) -> None:
        self._local = threading.local()

    @contextmanager
    def within(self, seconds: float) -> Iterator[None]:
        """Until `seconds` from now, or the deadline already held if that is sooner."""
        before: tuple[float, float] | None = getattr(self._local, "bound", None)
        until = time.monotonic() + seconds
        self._local.bound = before if before and before[0] <= until else (until, seconds)
        try:
            yield
        finally:
            self._local.bound = before

    def expired(self) -> float | None:
        """The seconds of the deadline held, once it has passed; else None."""
        bound: tuple[float, float] | None = getattr(self._local, "bound", None)
        return bound[1] if bound and time.monotonic() >= bound[0] - 0.01 else None

    def clamp(self, timeout: float | None, error: type[Exception]) -> float | None:
        bound: tuple[float, float] | None = getattr(self._local, "bound", None)
        if bound is None:
            return timeout
        left = bound[0] - time.monotonic()
        if left <= 0:
            raise error("the request's deadline passed")
        return left if timeout is None else min(timeout, left)


class _BoundedStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream, bounds: _Bounds) -> None:
        self._stream, self._bounds = stream, bounds

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, self._bounds.clamp(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, self._bounds.clamp(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        wait = self._bounds.clamp(timeout, httpcore.ConnectTimeout)
        return _BoundedStream(
            self._stream.start_tls(ssl_context, server_hostname, wait), self._bounds
        )

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _BoundedBackend(httpcore.NetworkBackend):
    """httpcore's sockets, each wait cut at the deadline of the request that made it."""

    def __init__(self, backend: httpcore.NetworkBackend, bounds: _Bounds) -> None:
        self._backend, self._bounds = backend, bounds

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        wait = self._bounds.clamp(timeout, httpcore.ConnectTimeout)
        stream = self._backend.connect_tcp(host, port, wait, local_address, socket_options)
        return _BoundedStream(stream, self._bounds)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        wait = self._bounds.clamp(timeout, httpcore.ConnectTimeout)
        stream = self._backend.connect_unix_socket(path, wait, socket_options)
        return _BoundedStream(stream, self._bounds)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


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

    @property
    def name(self) -> str:
        """`[registry/]repository` as the engine names it (Docker Hub without its host, its
        official images without `library/`): `myreg:5000/vllm`, `vllm/vllm-openai`."""
        if self.registry != DOCKER_HUB:
            return f"{self.registry}/{self.repository}"
        return self.repository.removeprefix("library/")

    def pinned(self, digest: str) -> str:
        """`repository@digest`, as the engine names it (Docker Hub without its host)."""
        return f"{self.name}@{digest}"


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
    if not path or not REPOSITORY.fullmatch(path):
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


class Descriptor(TypedDict, total=False):
    """An OCI descriptor: a manifest of an index, a config or a layer of a manifest."""

    mediaType: str
    digest: str
    size: int
    platform: dict[str, str]
    annotations: dict[str, str]


class OciManifest(TypedDict, total=False):
    """An image manifest (config, layers) or an index (manifests), as the registry stores it."""

    schemaVersion: int
    mediaType: str
    config: Descriptor
    layers: list[Descriptor]
    manifests: list[Descriptor]


class ContainerConfig(TypedDict, total=False):
    Labels: dict[str, str] | None
    Env: list[str] | None


class ImageConfig(TypedDict, total=False):
    """An image's config blob: what the launchers read of it (labels, env)."""

    config: ContainerConfig
    architecture: str
    os: str


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
        deadline: float = DEADLINE_S,
        blob_deadline: float = BLOB_DEADLINE_S,
        architecture: str | None = None,
    ) -> None:
        """`username`/`password` (the config's) serve every registry; else `logins`, the
        credentials `docker login` stored, by registry host. `timeout`: seconds without a
        byte; `deadline`: seconds a request takes at most, whole; `blob_deadline`: the same
        for one blob's copy."""
        self.architecture = architecture or node_architecture()
        self._auth = (username, password) if username and password else None
        self._logins = dict(logins or {})
        self.deadline, self.blob_deadline = deadline, blob_deadline
        self._bounds = _Bounds()
        self._http = httpx.Client(transport=transport, timeout=timeout, follow_redirects=True)
        # Every transport's sockets (proxies' from the environment too) wait at most until
        # the deadline of the request they serve: httpx has no total timeout of its own.
        for sent_by in [self._http._transport, *self._http._mounts.values()]:
            pool = getattr(sent_by, "_pool", None)
            if pool is not None and hasattr(pool, "_network_backend"):
                pool._network_backend = _BoundedBackend(pool._network_backend, self._bounds)
        self._authorizations: dict[tuple[str, str], str] = {}
        """(registry, repository) → the Authorization header that opened it."""

    def _credentials(self, registry: str) -> tuple[str, str] | None:
        return self._auth or self._logins.get(registry)

    def close(self) -> None:
        self._http.close()

    @staticmethod
    def _origin(ref: ImageRef) -> str:
        host = ref.registry.split(":")[0]
        local = host in ("localhost", "::1") or host.startswith("127.")
        return f"{'http' if local else 'https'}://{ref.registry}"

    @classmethod
    def _base(cls, ref: ImageRef) -> str:
        if not REPOSITORY.fullmatch(ref.repository):
            raise RegistryError(f"{ref.registry}: not a repository name {shown(ref.repository)}")
        path = "/".join(quote(part, safe="") for part in ref.repository.split("/"))
        return f"{cls._origin(ref)}/v2/{path}"

    def _get(self, ref: ImageRef, path: str, accept: str | None = None) -> httpx.Response:
        return self._send("GET", ref, path, headers={"Accept": accept} if accept else {})

    def _send(
        self,
        method: str,
        ref: ImageRef,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        content: bytes | None = None,
        push: bool = False,
        cap: int = ANSWER_CAP,
    ) -> httpx.Response:
        """One request to the repository's API, opened by the 401 challenge it answers (a
        pull token, or a push token for `push`); `path` is under `/v2/<repository>`, or a
        full URL (an upload's Location). Whole within `deadline`, retries and token
        included; an answer over `cap` bytes is a RegistryError."""
        sent = dict(headers or {})
        key = (ref.registry, ref.repository + (" push" if push else ""))
        url = path if path.startswith("http") else self._base(ref) + path
        with self._bounds.within(self.deadline):
            for attempt in transient():
                with attempt:
                    try:
                        if key in self._authorizations:
                            sent["Authorization"] = self._authorizations[key]
                        response = self._fetch(method, url, sent, params, content, cap, ref)
                        if response.status_code == 401 and response.headers.get("WWW-Authenticate"):
                            # None yet, or the one held expired (Docker Hub's last 300 s)
                            challenge = response.headers["WWW-Authenticate"]
                            self._authorizations[key] = self._authorization(challenge, ref.registry)
                            sent["Authorization"] = self._authorizations[key]
                            response = self._fetch(method, url, sent, params, content, cap, ref)
                    except httpx.TransportError as exc:
                        self._past_deadline(ref, exc)
                        raise
                    except httpx.HTTPError as exc:
                        raise RegistryError(f"{ref.registry}: {exc}") from exc
        return response

    def _past_deadline(self, ref: ImageRef, exc: Exception) -> None:
        """A RegistryError when the request's deadline is what ended it (no retry then)."""
        seconds = self._bounds.expired()
        if seconds is not None:
            raise RegistryError(
                f"{ref.registry}: no whole answer within {seconds:g} s (the request's deadline)"
            ) from exc

    def _fetch(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        params: Mapping[str, str] | None,
        content: bytes | None,
        cap: int,
        ref: ImageRef,
        auth: tuple[str, str] | None = None,
    ) -> httpx.Response:
        """One request, its answer read whole (decoded) up to `cap` bytes."""
        request = self._http.build_request(
            method, url, headers=headers, params=params, content=content
        )
        got = self._http.send(request, stream=True, auth=auth)
        body = bytearray()
        try:
            for chunk in got.iter_bytes():
                body += chunk
                if len(body) > cap:
                    raise RegistryError(
                        f"{ref.registry}: answered more than {cap} bytes to {method} "
                        f"{shown(urlsplit(url).path)}"
                    )
        finally:
            got.close()
        kept = [(k, v) for k, v in got.headers.multi_items() if k.lower() != "content-encoding"]
        return httpx.Response(got.status_code, headers=kept, content=bytes(body), request=request)

    def _asked(
        self,
        method: str,
        ref: ImageRef,
        path: str,
        **kw: Any,
    ) -> httpx.Response:
        """`_send`, with a network failure said as a RegistryError."""
        try:
            return self._send(method, ref, path, **kw)
        except httpx.TransportError as exc:
            raise RegistryError(f"{ref.registry}: {type(exc).__name__}: {exc}") from exc

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
            where = ImageRef(registry, "token", None, None)
            r = self._fetch("GET", c["realm"], {}, params, None, ANSWER_CAP, where, credentials)
            if r.status_code == 401:
                who = "the login it was given" if credentials else "an anonymous request"
                raise RegistryError(f"{registry}: the token service refused {who}; {login_hint}")
            r.raise_for_status()
            body = r.json()
        except (KeyError, ValueError, RecursionError, httpx.HTTPError) as exc:
            self._past_deadline(ImageRef(registry, "", None, None), exc)
            raise RegistryError(f"registry token request failed: {exc}") from exc
        token = body.get("token") or body.get("access_token")
        if not isinstance(token, str):
            raise RegistryError("registry token response holds no token")
        return f"Bearer {token}"

    def manifest(self, ref: ImageRef) -> Manifest | None:
        """The image's manifest; None when the registry says it does not exist."""
        try:
            r = self._get(ref, f"/manifests/{_segment(ref.reference)}", MANIFEST_TYPES)
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

    def image_config(self, ref: ImageRef, manifest: Manifest) -> ImageConfig:
        """The image's config blob (labels, env) without pulling the image."""
        digest = manifest.config_digest
        try:
            r = self._get(ref, f"/blobs/{_segment(digest, digest_only=True)}")
        except httpx.TransportError as exc:
            raise RegistryError(f"{ref.registry}: {type(exc).__name__}: {exc}") from exc
        if r.status_code != 200:
            raise RegistryError(f"{ref.registry}: config blob answered HTTP {r.status_code}")
        got = _hash(r.content, digest.split(":")[0])
        if got != digest:
            raise RegistryError(f"{ref.registry}: config blob {digest} came back as {got}")
        return cast(ImageConfig, _json(r, ref.registry))

    # -- what `keep` reads and writes: tags, manifests as bytes, blobs ----------------------

    def tags(self, ref: ImageRef, page: int = 1000, *, max_pages: int = MAX_PAGES) -> list[str]:
        """Every tag of the repository, following the API's pages (`Link: <…>; rel="next"`)
        on the same host: `max_pages` of them at most, TAGS_CAP bytes in all."""
        found: list[str] = []
        path: str = f"/tags/list?n={page}"
        pages = read = 0
        name = f"{ref.registry}/{ref.repository}"
        while path:
            if pages == max_pages:
                raise RegistryError(
                    f"{name}: the tags list names a next page after {max_pages} pages (--max-pages)"
                )
            pages += 1
            r = self._asked("GET", ref, path, cap=min(ANSWER_CAP, TAGS_CAP - read))
            read += len(r.content)
            if r.status_code in (401, 403, 404):
                raise RegistryError(
                    f"{name}: no such repository, or no access to its tags (HTTP {r.status_code})"
                )
            if r.status_code != 200:
                raise RegistryError(f"{ref.registry}: tags list answered HTTP {r.status_code}")
            names = _json(r, ref.registry).get("tags") or []
            found += [str(t) for t in names if isinstance(t, str)]
            link = re.match(r'\s*<([^>]+)>\s*;\s*rel="?next"?', r.headers.get("Link", ""))
            nxt = link.group(1) if link else ""
            # Registries give the next page as a path from the host ("/v2/…").
            path = urljoin(self._base(ref) + "/", nxt) if nxt else ""
            if path and not path.startswith(self._origin(ref) + "/"):
                # our authorization goes with the request: never to another host
                raise RegistryError(f"{name}: the tags list's next page is elsewhere: {shown(nxt)}")
        return found

    def raw_manifest(self, ref: ImageRef, reference: str) -> RawManifest | None:
        """The manifest or index exactly as stored (its bytes are its digest); None if absent."""
        r = self._asked(
            "GET", ref, f"/manifests/{_segment(reference)}", headers={"Accept": MANIFEST_TYPES}
        )
        if r.status_code in (404, 401, 403):
            return None
        if r.status_code != 200:
            raise RegistryError(f"{ref.registry}: manifest answered HTTP {r.status_code}")
        # the digest asked for, else the one the registry says: the bytes must be of it
        said = reference if DIGEST.fullmatch(reference) else r.headers.get("Docker-Content-Digest")
        digest = _hash(r.content, "sha256")
        if said is not None and (
            not DIGEST.fullmatch(said) or _hash(r.content, said.split(":")[0]) != said
        ):
            raise RegistryError(f"{ref.registry}: manifest {shown(said)} came back as {digest}")
        body = _json(r, ref.registry)
        media = str(body.get("mediaType") or r.headers.get("Content-Type", "").split(";")[0])
        if int(body.get("schemaVersion", 0) or 0) != 2:
            raise RegistryError(f"{ref.repository}:{reference}: not a schema 2 manifest or index")
        return RawManifest(digest, media, r.content)

    def manifest_digest(self, ref: ImageRef, reference: str, *, push: bool = False) -> str | None:
        """The digest a tag or digest names in the repository (a HEAD: nothing downloaded);
        None when it names nothing. `push`: asked with the push authorization."""
        r = self._asked(
            "HEAD",
            ref,
            f"/manifests/{_segment(reference)}",
            headers={"Accept": MANIFEST_TYPES},
            push=push,
        )
        if r.status_code != 200:
            return None
        return r.headers.get("Docker-Content-Digest") or (
            reference if reference.startswith("sha256:") else None
        )

    def has_blob(self, ref: ImageRef, digest: str, *, push: bool = False) -> bool:
        path = f"/blobs/{_segment(digest, digest_only=True)}"
        return self._asked("HEAD", ref, path, push=push).status_code == 200

    def put_manifest(self, ref: ImageRef, reference: str, manifest: RawManifest) -> None:
        """Store the manifest's bytes under `reference` (its digest or a tag)."""
        r = self._asked(
            "PUT",
            ref,
            f"/manifests/{_segment(reference)}",
            headers={"Content-Type": manifest.media_type},
            content=manifest.body,
            push=True,
        )
        if r.status_code not in (200, 201):
            raise RegistryError(
                f"{ref.registry}/{ref.repository}: refused manifest {manifest.digest} "
                f"(HTTP {r.status_code}: {_errors(r)})"
            )
        stored = r.headers.get("Docker-Content-Digest")
        if stored and stored != manifest.digest:
            raise RegistryError(f"{ref.registry}: stored {manifest.digest} as {stored}")

    def mount_blob(self, ref: ImageRef, digest: str, source: ImageRef) -> bool:
        """Ask the registry to link a blob it holds for `source` into `ref`'s repository (no
        bytes move); False when it will not (another host, or it declined)."""
        if source.registry != ref.registry:
            return False
        r = self._asked(
            "POST",
            ref,
            "/blobs/uploads/",
            params={"mount": _segment(digest, digest_only=True), "from": source.repository},
            push=True,
        )
        if r.status_code == 201:
            return True
        if r.status_code == 202 and r.headers.get("Location"):
            # Declined, and an upload was opened instead: close it, nothing is left behind.
            self._asked("DELETE", ref, self._location(ref, r.headers["Location"]), push=True)
        return False

    def copy_blob(self, source: ImageRef, ref: ImageRef, digest: str, size: int) -> None:
        """Stream one blob from `source` into `ref`'s repository (a monolithic upload the
        registry checks against `digest`): never held whole in memory or on disk. Its bytes
        are hashed on the way, and the last of them held back until they match `digest` and
        `size`: a mirror never receives a blob whose bytes are not the digest's. Whole
        within `blob_deadline`."""
        segment = _segment(digest, digest_only=True)
        with self._bounds.within(self.blob_deadline):
            try:
                self._stream_blob(source, ref, digest, segment, size)
            except httpx.HTTPError as exc:
                self._past_deadline(source, exc)
                raise RegistryError(f"copy of blob {digest}: {type(exc).__name__}: {exc}") from exc

    def _stream_blob(
        self, source: ImageRef, ref: ImageRef, digest: str, segment: str, size: int
    ) -> None:
        if not self.has_blob(source, digest):  # opens the source's authorization too
            raise RegistryError(f"{source.registry}/{source.repository}: no blob {digest}")
        r = self._asked("POST", ref, "/blobs/uploads/", push=True)
        location = r.headers.get("Location")
        if r.status_code != 202 or not location:
            raise RegistryError(
                f"{ref.registry}: refused to start an upload (HTTP {r.status_code}: {_errors(r)})"
            )
        upload = self._location(ref, location)
        pull = self._authorizations.get((source.registry, source.repository))
        push = self._authorizations.get((ref.registry, ref.repository + " push"))
        with self._http.stream(
            "GET",
            self._base(source) + f"/blobs/{segment}",
            headers={"Authorization": pull} if pull else {},
        ) as got:
            if got.status_code != 200:
                raise RegistryError(
                    f"{source.registry}: blob {digest} answered HTTP {got.status_code}"
                )
            headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
            if push:
                headers["Authorization"] = push
            # a body cut short (the check below raised) is never committed by the mirror
            put = self._http.put(
                upload + ("&" if "?" in upload else "?") + "digest=" + quote(digest),
                headers=headers,
                content=_checked(got.iter_bytes(1 << 20), digest, size, source.registry),
            )
        if put.status_code not in (201, 204):
            raise RegistryError(
                f"{ref.registry}: refused blob {digest} (HTTP {put.status_code}: {_errors(put)})"
            )

    def _location(self, ref: ImageRef, location: str) -> str:
        """An upload's Location, made absolute (registries may answer a path)."""
        return urljoin(self._base(ref) + "/", location)


@dataclass(frozen=True)
class RawManifest:
    """A manifest or index as the registry stores it: the bytes its digest is of."""

    digest: str
    media_type: str
    body: bytes

    @property
    def document(self) -> OciManifest:
        value = json.loads(self.body)
        return cast(OciManifest, value) if isinstance(value, dict) else {}

    @property
    def is_index(self) -> bool:
        return self.media_type in _INDEX_TYPES or "manifests" in self.document

    def children(self) -> list[Descriptor]:
        """An index's manifests (every platform, attestations too), as descriptors."""
        return [m for m in self.document.get("manifests") or [] if isinstance(m, dict)]

    def blobs(self) -> list[Descriptor]:
        """An image manifest's config and layers, as descriptors."""
        doc = self.document
        found = [doc["config"]] if isinstance(doc.get("config"), dict) else []
        return found + [m for m in doc.get("layers") or [] if isinstance(m, dict)]


def _checked(chunks: Iterator[bytes], digest: str, size: int, registry: str) -> Iterator[bytes]:
    """`chunks`, hashed as they pass; the last one is given only once the whole is `size`
    bytes of `digest` (else RegistryError, and the upload it feeds never completes)."""
    hasher = hashlib.new(digest.split(":")[0])
    held, seen = b"", 0
    for chunk in chunks:
        seen += len(chunk)
        if seen > size:
            raise RegistryError(f"{registry}: blob {digest} is over its {size} bytes")
        hasher.update(chunk)
        if held:
            yield held
        held = chunk
    got = f"{digest.split(':')[0]}:{hasher.hexdigest()}"
    if got != digest or seen != size:
        raise RegistryError(f"{registry}: blob {digest} came as {seen} bytes of {got}; not copied")
    yield held


def _errors(r: httpx.Response) -> str:
    """A registry's error codes, for a message (never its whole body)."""
    try:
        body = r.json()
    except (ValueError, RecursionError):
        return "no error body"
    errors = body.get("errors") if isinstance(body, dict) else None
    codes = [str(e.get("code", "?")) for e in errors or [] if isinstance(e, dict)]
    return ", ".join(codes)[:200] or "no error code"
