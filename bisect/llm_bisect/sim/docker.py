"""The simulator in containers: images built locally from nothing pulled, and a registry.

Images hold only `/engine/sim-engine.json` (what the build is) and labels.
The container runs the simulated server with this machine's Python and the
package source bind-mounted read-only, so no base image is needed: the demo,
the tests and the benchmarks run on any machine with a Docker engine.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import docker
import docker.errors

SRC = Path(__file__).resolve().parents[2]
"""The source root holding llm_bisect, bind-mounted into containers as /src."""
PYTHON = str(Path(sys.base_prefix) / "bin" / "python3")
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"


def engine_client() -> docker.DockerClient:
    """The local Docker engine, or a LaunchError that says why not."""
    from ..errors import LaunchError

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        raise LaunchError(f"docker: cannot reach the engine: {exc}") from exc
    return client


def layer_tar(files: Mapping[str, bytes], executable: frozenset[str] = frozenset()) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o755 if name in executable else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def engine_files(settings: Mapping[str, Any], pad_bytes: int = 0) -> dict[str, bytes]:
    files = {"engine/sim-engine.json": json.dumps(dict(settings)).encode()}
    if pad_bytes:
        files["engine/weights.bin"] = os.urandom(pad_bytes)  # incompressible: a real download
    return files


def import_image(
    client: docker.DockerClient,
    ref: str,
    settings: Mapping[str, Any],
    labels: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    programs: Mapping[str, bytes] | None = None,
) -> str:
    """`docker import` of the engine file (and `programs`, executable files by path) as one
    layer; returns the image id."""
    repo, tag = ref.rsplit(":", 1)
    changes = [f"LABEL {k}={v}" for k, v in (labels or {}).items()]
    changes += [f"ENV {k}={v}" for k, v in (env or {}).items()]
    layer = layer_tar({**engine_files(settings), **(programs or {})}, frozenset(programs or {}))
    out = client.api.import_image_from_data(layer, repository=repo, tag=tag, changes=changes)
    return str(json.loads(out.strip().splitlines()[-1])["status"])


def import_history(
    client: docker.DockerClient,
    repo_dir: Path,
    shas: list[str],
    repository: str,
    missing: frozenset[int] = frozenset(),
) -> list[str]:
    """One image per commit, `repository:<sha>`, from its sim-engine.json; not the `missing`."""
    refs = []
    for i, sha in enumerate(shas):
        if i in missing:
            continue
        shown = subprocess.run(
            ["git", "-C", str(repo_dir), "show", f"{sha}:sim-engine.json"],
            capture_output=True,
            check=True,
            text=True,
        )
        ref = f"{repository}:{sha}"
        import_image(client, ref, json.loads(shown.stdout), labels={"ai.vllm.build.commit": sha})
        refs.append(ref)
    return refs


def sim_server(image: str, **over: Any) -> dict[str, Any]:
    """A docker `server:` section that runs the simulated server from the image's engine file."""
    base = Path(sys.base_prefix)
    server: dict[str, Any] = {
        "launcher": "docker",
        "image": image,
        "entrypoint": [PYTHON, "-m", "llm_bisect.sim"],
        "args": [
            "--engine-file",
            "/engine/sim-engine.json",
            "--commit",
            "{commit}",
            "--port",
            "{port}",
            "--host",
            "0.0.0.0",
        ],
        "port": 8000,
        "env": {"PYTHONPATH": "/src", "PYTHONDONTWRITEBYTECODE": "1"},
        "volumes": [
            "/usr:/usr:ro",
            "/lib:/lib:ro",
            "/lib64:/lib64:ro",
            f"{base}:{base}:ro",
            f"{SRC}:/src:ro",
        ],
        "ready_timeout": 30,
        "stop_timeout": 5,
    }
    server.update(over)
    return server


def containers_of(client: docker.DockerClient, commit_or_run: str, label: str) -> list[Any]:
    return list(client.containers.list(all=True, filters={"label": f"{label}={commit_or_run}"}))


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class SimRegistry:
    """The distribution API's read side, on 127.0.0.1, serving images made in memory.

    Enough for `docker pull` (the engine treats 127.0.0.0/8 as an insecure
    registry) and for the manifest checks. `bytes_per_s` slows blob downloads,
    so a pull takes measurable time; `token` requires Bearer auth.
    """

    def __init__(
        self,
        *,
        bytes_per_s: float | None = None,
        token: str | None = None,
        login: tuple[str, str] | None = None,
    ) -> None:
        """`login`: the user and password the token endpoint asks for (Basic auth); without a
        `token`, every request asks for them directly, as a registry behind htpasswd does."""
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[tuple[str, str], bytes] = {}
        self.bytes_per_s = bytes_per_s
        self.token = token
        self.login = login
        self.requests: list[str] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.host = f"127.0.0.1:{self._server.server_address[1]}"

    def add_image(
        self,
        repository: str,
        tag: str,
        settings: Mapping[str, Any],
        *,
        labels: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        pad_bytes: int = 0,
    ) -> str:
        layer = layer_tar(engine_files(settings, pad_bytes))
        layer_gz = gzip.compress(layer, compresslevel=1)
        config = json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": {
                    "Labels": dict(labels or {}),
                    "Env": [f"{k}={v}" for k, v in (env or {}).items()],
                },
                "rootfs": {"type": "layers", "diff_ids": [_digest(layer)]},
                "history": [{"created_by": "llm-bisect test kit"}],
            }
        ).encode()
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": MANIFEST_V2,
                "config": {
                    "mediaType": "application/vnd.docker.container.image.v1+json",
                    "size": len(config),
                    "digest": _digest(config),
                },
                "layers": [
                    {
                        "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                        "size": len(layer_gz),
                        "digest": _digest(layer_gz),
                    }
                ],
            }
        ).encode()
        self.blobs[_digest(config)] = config
        self.blobs[_digest(layer_gz)] = layer_gz
        digest = _digest(manifest)
        self.manifests[(repository, tag)] = manifest
        self.manifests[(repository, digest)] = manifest
        return digest

    def add_index(self, repository: str, tag: str, platforms: Mapping[str, str]) -> str:
        """A multi-arch index: architecture → digest of a manifest added before."""
        index = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": MANIFEST_LIST,
                "manifests": [
                    {
                        "mediaType": MANIFEST_V2,
                        "digest": digest,
                        "size": len(self.manifests[(repository, digest)]),
                        "platform": {"os": "linux", "architecture": arch},
                    }
                    for arch, digest in platforms.items()
                ],
            }
        ).encode()
        digest = _digest(index)
        self.manifests[(repository, tag)] = index
        self.manifests[(repository, digest)] = index
        return digest

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: bytes, headers: Mapping[str, str] = {}) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                if self.command == "GET":
                    self._write(body)

            def _write(self, body: bytes) -> None:
                if not registry.bytes_per_s:
                    self.wfile.write(body)
                    return
                chunk = 64 * 1024
                for i in range(0, len(body), chunk):
                    self.wfile.write(body[i : i + chunk])
                    time.sleep(chunk / registry.bytes_per_s)

            def _basic_ok(self) -> bool:
                if registry.login is None:
                    return True
                user, password = registry.login
                expected = base64.b64encode(f"{user}:{password}".encode()).decode()
                return self.headers.get("Authorization") == f"Basic {expected}"

            def _authorized(self, name: str) -> bool:
                if registry.token is None:
                    if self._basic_ok():
                        return True
                    self._reply(401, b"{}", {"WWW-Authenticate": 'Basic realm="sim"'})
                    return False
                if self.headers.get("Authorization") == f"Bearer {registry.token}":
                    return True
                realm = f"http://{registry.host}/token"
                challenge = f'Bearer realm="{realm}",service="fake",scope="repository:{name}:pull"'
                self._reply(
                    401, b'{"errors":[{"code":"UNAUTHORIZED"}]}', {"WWW-Authenticate": challenge}
                )
                return False

            def _tags(self, name: str) -> None:
                """The tags list, a page of `n` after `last` with a Link to the next, as
                Docker Hub and ECR answer it."""
                if not self._authorized(name):
                    return
                query = parse_qs(urlsplit(self.path).query)
                tags = sorted(t for (repo, t) in registry.manifests if repo == name)
                tags = [t for t in tags if not t.startswith("sha256:")]
                last = query.get("last", [""])[0]
                tags = [t for t in tags if t > last]
                n = int(query.get("n", ["0"])[0]) or len(tags)
                headers = {"Content-Type": "application/json"}
                if len(tags) > n:
                    headers["Link"] = f'</v2/{name}/tags/list?n={n}&last={tags[n - 1]}>; rel="next"'
                body = json.dumps({"name": name, "tags": tags[:n]}).encode()
                self._reply(200, body, headers)

            def do_HEAD(self) -> None:
                self.do_GET()

            def do_GET(self) -> None:
                registry.requests.append(f"{self.command} {self.path}")
                path = self.path.split("?")[0]
                if path.startswith("/token"):
                    if not self._basic_ok():
                        self._reply(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}')
                        return
                    self._reply(200, json.dumps({"token": registry.token}).encode())
                    return
                if path in ("/v2/", "/v2"):
                    self._reply(200, b"{}", {"Content-Type": "application/json"})
                    return
                if path.endswith("/tags/list"):
                    self._tags(path[len("/v2/") : -len("/tags/list")])
                    return
                for kind in ("/manifests/", "/blobs/"):
                    if kind in path:
                        name, ref = path[len("/v2/") :].split(kind, 1)
                        break
                else:
                    self._reply(404, b"{}")
                    return
                if not self._authorized(name):
                    return
                if kind == "/manifests/":
                    body = registry.manifests.get((name, ref))
                    if body is None:
                        self._reply(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')
                        return
                    kind = MANIFEST_LIST if b'"manifests"' in body else MANIFEST_V2
                    self._reply(
                        200, body, {"Content-Type": kind, "Docker-Content-Digest": _digest(body)}
                    )
                    return
                blob = registry.blobs.get(ref)
                if blob is None:
                    self._reply(404, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}')
                    return
                self._reply(
                    200,
                    blob,
                    {"Content-Type": "application/octet-stream", "Docker-Content-Digest": ref},
                )

        return Handler

    @contextmanager
    def running(self) -> Iterator[SimRegistry]:
        thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05})
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
            thread.join()
