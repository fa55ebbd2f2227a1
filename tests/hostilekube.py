"""A hostile Kubernetes API on 127.0.0.1: a cluster of one running pod whose API answers one
route (or every route) wrongly, as told. No Docker: the pod's IP is 127.0.0.1, where a test
may run the simulated server itself (`reach: pod-ip`).

    route            normal answer
    discover         GET /apis: no groups (no LeaderWorkerSet)
    list jobs        GET .../jobs (services, configmaps: `list services`, `list configmaps`)
    create job       POST .../jobs: the Job, with a uid; its pod Running from then on
    read job         GET .../jobs/NAME: the Job, 404 once deleted
    delete job       DELETE .../jobs/NAME
    list pods        GET .../pods: the Job's pod, Running at 127.0.0.1
    watch pods       GET .../pods?watch=true: headers, then nothing until closed
    log              GET .../pods/NAME/log: one line
    exec             GET .../pods/NAME/exec (websocket): 403 (no exec here)

    fault            what the route answers instead
    silent           nothing: the request is read, the connection held open
    trickle          200 and a Content-Length, then the body a byte every 0.1 s
    html             200 with a proxy's HTML page
    not-objects      200 with `items` that are not objects
    huge             200 with a body of `huge_bytes` (a valid list, streamed)
    no-newline       200 with a stream that never ends a line (`huge_bytes` at most)
    error-huge       500 with a body of `huge_bytes`

`faults` maps a route (or "*", every route) to its fault; `requests` lists what was asked.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

FAULTS = ("silent", "trickle", "html", "not-objects", "huge", "no-newline", "error-huge")
HOLD_S = 120.0
"""The longest a held connection is kept (a silent route, an empty watch)."""


def route_of(method: str, target: str) -> tuple[str, str]:
    """(route, object name) of a request. Pure."""
    url = urlsplit(target)
    parts = url.path.strip("/").split("/")
    query = parse_qs(url.query)
    if url.path.rstrip("/") == "/apis":
        return "discover", ""
    if "pods" in parts:
        at = parts.index("pods")
        rest = parts[at + 1 :]
        if len(rest) >= 2:
            return rest[1], rest[0]  # log, exec
        if query.get("watch") == ["true"]:
            return "watch pods", ""
        return "list pods", ""
    for kind in ("jobs", "services", "configmaps", "leaderworkersets"):
        if kind in parts:
            rest = parts[parts.index(kind) + 1 :]
            if not rest:
                return ("create job" if method == "POST" else f"list {kind}"), ""
            return {"GET": "read job", "DELETE": "delete job"}.get(method, method), rest[0]
    return "other", ""


class HostileApi:
    """See the module docstring."""

    def __init__(self, huge_bytes: int = 4 * 2**20) -> None:
        self.faults: dict[str, str] = {}
        self.huge_bytes = huge_bytes
        self.requests: list[tuple[str, str]] = []
        self.jobs: dict[str, dict[str, Any]] = {}
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                api.handle(self)

            do_POST = do_DELETE = do_GET

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def kubeconfig(self, path: Path) -> Path:
        data = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "hostile", "cluster": {"server": self.url}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "hostile", "context": {"cluster": "hostile", "user": "u"}}],
            "current-context": "hostile",
        }
        path.write_text(yaml.safe_dump(data))
        return path

    @contextmanager
    def running(self) -> Iterator[HostileApi]:
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.stopping.set()
            self._server.shutdown()
            self._server.server_close()
            thread.join(timeout=5)

    def routes(self) -> list[str]:
        with self.lock:
            return [route_of(m, t)[0] for m, t in self.requests]

    # ---- answers -------------------------------------------------------------------------

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        with self.lock:
            self.requests.append((h.command, h.path))
        route, name = route_of(h.command, h.path)
        fault = self.faults.get(route) or self.faults.get("*")
        try:
            if fault is not None:
                getattr(self, "_" + fault.replace("-", "_"))(h, route)
            else:
                self._normal(h, route, name, body)
        except OSError:  # the client gave up (its deadline): nothing more to say
            h.close_connection = True

    def _send(self, h: BaseHTTPRequestHandler, status: int, data: Any, kind: str = "") -> None:
        raw = data if isinstance(data, bytes) else json.dumps(data).encode()
        h.send_response(status)
        h.send_header("Content-Type", kind or "application/json")
        h.send_header("Content-Length", str(len(raw)))
        h.end_headers()
        h.wfile.write(raw)

    def pod(self, job: str) -> dict[str, Any]:
        return {
            "metadata": {"name": f"{job}-x", "labels": {"job-name": job}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "server", "args": []}]},
            "status": {
                "phase": "Running",
                "podIP": "127.0.0.1",
                "containerStatuses": [{"state": {"running": {}}, "imageID": "sha256:aa"}],
            },
        }

    def _normal(self, h: BaseHTTPRequestHandler, route: str, name: str, body: bytes) -> None:
        listed = {"metadata": {"resourceVersion": "1"}, "items": []}
        if route == "discover":
            self._send(h, 200, {"kind": "APIGroupList", "groups": []})
        elif route == "create job":
            job = json.loads(body)
            job["metadata"]["uid"] = str(uuid.uuid4())
            with self.lock:
                self.jobs[job["metadata"]["name"]] = job
            self._send(h, 201, job)
        elif route in ("read job", "delete job"):
            with self.lock:
                job = self.jobs.pop(name, None) if route == "delete job" else self.jobs.get(name)
            if job is None:
                self._send(h, 404, {"kind": "Status", "code": 404, "reason": "NotFound"})
            else:
                self._send(h, 200, job)
        elif route == "list pods":
            with self.lock:
                listed["items"] = [self.pod(n) for n in self.jobs]
            self._send(h, 200, listed)
        elif route.startswith("list "):
            self._send(h, 200, listed)
        elif route == "watch pods":
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            h.wfile.flush()
            self._hold(h)
        elif route == "log":
            self._send(h, 200, b"sim: serving\n", "text/plain")
        else:
            self._send(h, 403, {"kind": "Status", "code": 403, "reason": "Forbidden"})

    def _hold(self, h: BaseHTTPRequestHandler) -> None:
        """Until the client closes, or the server stops (HOLD_S at most)."""
        h.close_connection = True
        sock: socket.socket = h.connection
        deadline = time.monotonic() + HOLD_S
        while not self.stopping.is_set() and time.monotonic() < deadline:
            sock.settimeout(0.1)
            try:
                if sock.recv(1, socket.MSG_PEEK) == b"":
                    return  # closed by the client
            except TimeoutError:
                continue
            except OSError:
                return
            with suppress(OSError):
                sock.recv(65536)

    def _silent(self, h: BaseHTTPRequestHandler, route: str) -> None:
        self._hold(h)

    def _trickle(self, h: BaseHTTPRequestHandler, route: str) -> None:
        h.close_connection = True
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", "1000000")
        h.end_headers()
        h.wfile.flush()
        deadline = time.monotonic() + HOLD_S
        while not self.stopping.wait(0.1) and time.monotonic() < deadline:
            h.wfile.write(b" ")
            h.wfile.flush()

    def _html(self, h: BaseHTTPRequestHandler, route: str) -> None:
        page = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>\n"
        self._send(h, 200, page, "text/html")

    def _not_objects(self, h: BaseHTTPRequestHandler, route: str) -> None:
        self._send(h, 200, {"metadata": {"resourceVersion": "1"}, "items": ["pod", 1, None]})

    def _streamed(self, h: BaseHTTPRequestHandler, status: int, head: bytes, piece: bytes) -> None:
        """`head`, then `piece` again and again, huge_bytes in all, as fast as it is read."""
        h.close_connection = True
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(self.huge_bytes))
        h.end_headers()
        h.wfile.write(head)
        sent = len(head)
        while sent < self.huge_bytes and not self.stopping.is_set():
            chunk = piece[: self.huge_bytes - sent]
            h.wfile.write(chunk)
            sent += len(chunk)

    def _huge(self, h: BaseHTTPRequestHandler, route: str) -> None:
        item = b'{"metadata":{"name":"p","labels":{"a":"' + b"x" * 900 + b'"}}},'
        self._streamed(h, 200, b'{"metadata":{"resourceVersion":"1"},"items":[', item * 64)

    def _error_huge(self, h: BaseHTTPRequestHandler, route: str) -> None:
        self._streamed(h, 500, b'{"kind":"Status","message":"', b"x" * 65536)

    def _no_newline(self, h: BaseHTTPRequestHandler, route: str) -> None:
        head = b'{"type":"ADDED","object":{"metadata":{"name":"'
        self._streamed(h, 200, head, b"x" * 65536)
