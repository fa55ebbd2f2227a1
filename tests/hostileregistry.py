"""A hostile registry on 127.0.0.1: the read side of the distribution API answering what a
broken or malicious upstream might (odd tags, a trickle, endless pages, bytes that are not
their digest, huge answers), for `keep`'s tests and scripts/adversarial_registry.py.

Every tag it is asked for names the same small image (a nightly's), so a tag that reaches
another path (`nightly-x/../v0.27.0` resolved to `v0.27.0`) reaches it with that image.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
NIGHTLY_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Hostile:
    """How the registry misbehaves (all off: a well-behaved one-image registry)."""

    tags: list[str] = field(default_factory=lambda: [f"nightly-{NIGHTLY_COMMIT}"])
    """The tags list, whole (one page unless `endless`)."""
    trickle: str = ""
    """'headers' or 'body': every answer sent a byte each `trickle_s`."""
    trickle_s: float = 0.2
    trickle_layer_only: bool = False
    """Only the layer's GET trickles (what `keep` streams to the mirror)."""
    endless: bool = False
    """The tags list always names a next page, of new tags."""
    corrupt: str = ""
    """'layer' or 'config': that blob's bytes are not its digest; 'manifest': the
    manifest's Docker-Content-Digest is not its bytes' digest."""
    huge: int = 0
    """Bytes of the tags list's answer (a list of that many bytes of tags)."""
    gzip_bomb: int = 0
    """Bytes a gzip'd tags list expands to (sent compressed, a thousand times smaller)."""
    next_page: str = ""
    """The tags list's Link to a next page, as given (once)."""
    login: tuple[str, str] | None = None
    """User and password every request must carry (Basic auth), else a 401 challenge."""


class _Quiet(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (reset, closed) is what these tests make happen


class HostileRegistry:
    def __init__(self, hostile: Hostile) -> None:
        self.hostile = hostile
        self.requests: list[str] = []
        self.authorized: list[str] = []
        """The requests that carried an Authorization header."""
        self._stop = threading.Event()
        layer = b"weights of a nightly" * 64
        config = json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": {"Labels": {"vllm.commit": NIGHTLY_COMMIT}},
                "rootfs": {"type": "layers", "diff_ids": [digest_of(layer)]},
            }
        ).encode()
        self.blobs = {digest_of(config): config, digest_of(layer): layer}
        self.layer, self.config = digest_of(layer), digest_of(config)
        self.manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "size": len(config),
                    "digest": digest_of(config),
                },
                "layers": [
                    {
                        "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                        "size": len(layer),
                        "digest": digest_of(layer),
                    }
                ],
            }
        ).encode()
        plain = b'{"tags": ["' + b"a" * hostile.gzip_bomb + b'"]}'
        self.bomb = gzip.compress(plain, compresslevel=9) if hostile.gzip_bomb else b""
        self._server = _Quiet(("127.0.0.1", 0), self._handler())
        self.host = f"127.0.0.1:{self._server.server_address[1]}"

    @contextmanager
    def running(self) -> Iterator[HostileRegistry]:
        thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()  # a trickle in progress ends
            self._server.shutdown()
            self._server.server_close()
            thread.join(timeout=5)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        registry = self
        hostile = self.hostile

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                head = f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n"
                head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
                data = head.encode() + (body if self.command != "HEAD" else b"")
                try:
                    if hostile.trickle and (
                        not hostile.trickle_layer_only
                        or (self.command == "GET" and self.path.endswith(registry.layer))
                    ):
                        headers = hostile.trickle == "headers"
                        start = data.index(b"\r\n") + 2 if headers else len(head)
                        self.wfile.write(data[:start])
                        self.wfile.flush()
                        for i in range(start, len(data)):
                            if registry._stop.wait(hostile.trickle_s):
                                return
                            self.wfile.write(data[i : i + 1])
                            self.wfile.flush()
                    else:
                        self.wfile.write(data)
                except OSError:
                    self.close_connection = True  # the client gave up: so be it

            def do_HEAD(self) -> None:
                self.do_GET()

            def do_GET(self) -> None:
                registry.requests.append(f"{self.command} {self.path}")
                if self.headers.get("Authorization"):
                    registry.authorized.append(f"{self.command} {self.path}")
                if hostile.login is not None:
                    basic = base64.b64encode(":".join(hostile.login).encode()).decode()
                    if self.headers.get("Authorization") != f"Basic {basic}":
                        self._send(401, b"{}", {"WWW-Authenticate": 'Basic realm="hostile"'})
                        return
                url = urlsplit(self.path)
                path = url.path
                if "/tags/list" in path:
                    self._tags(parse_qs(url.query))
                elif "/manifests/" in path:
                    ref = path.split("/manifests/", 1)[1]
                    digest = digest_of(registry.manifest)
                    if ref.startswith("sha256:") and ref != digest:
                        self._send(404, b"{}", {})
                        return
                    said = digest_of(b"another") if hostile.corrupt == "manifest" else digest
                    headers = {"Content-Type": OCI_MANIFEST, "Docker-Content-Digest": said}
                    self._send(200, registry.manifest, headers)
                elif "/blobs/" in path:
                    digest = path.split("/blobs/", 1)[1]
                    blob = registry.blobs.get(digest)
                    if blob is None:
                        self._send(404, b"{}", {})
                        return
                    if (hostile.corrupt, digest) in (
                        ("layer", registry.layer),
                        ("config", registry.config),
                    ):
                        blob = blob.replace(b"a", b"4")  # same size, other bytes
                    self._send(200, blob, {"Content-Type": "application/octet-stream"})
                else:
                    self._send(200, b"{}", {"Content-Type": "application/json"})

            def _tags(self, query: dict[str, list[str]]) -> None:
                headers = {"Content-Type": "application/json"}
                if hostile.gzip_bomb:
                    self._send(200, registry.bomb, {**headers, "Content-Encoding": "gzip"})
                    return
                tags = list(hostile.tags)
                if hostile.huge:
                    one = "nightly-" + "0" * 100
                    tags = [one] * (hostile.huge // (len(one) + 3))
                if hostile.next_page:
                    headers["Link"] = f'<{hostile.next_page}>; rel="next"'
                if hostile.endless:
                    page = int(query.get("last", ["0"])[0] or 0) + 1
                    tags = [f"nightly-{page:040x}"]
                    headers["Link"] = f'</v2/x/tags/list?n=1&last={page}>; rel="next"'
                self._send(200, json.dumps({"name": "x", "tags": tags}).encode(), headers)

        return Handler
