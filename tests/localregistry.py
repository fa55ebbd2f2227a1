"""Real registries on loopback: Debian's `docker-registry` (distribution 2.8), and images
put into them through the plain HTTP API (no llm-bisect code: what the tests check is
not what fills them)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from helpers import wait_until
from llm_bisect.sim.docker import engine_files, layer_tar

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
START_S = 30.0
"""Seconds a registry has to say it listens (it takes milliseconds)."""


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class LocalRegistry:
    host: str
    """`127.0.0.1:PORT`."""
    log: Path

    def url(self, repo: str, path: str) -> str:
        return f"http://{self.host}/v2/{repo}{path}"

    def put_blob(self, repo: str, data: bytes) -> str:
        digest = digest_of(data)
        started = httpx.post(self.url(repo, "/blobs/uploads/"))
        assert started.status_code == 202, started.text
        location = str(httpx.URL(f"http://{self.host}").join(started.headers["Location"]))
        joined = location + ("&" if "?" in location else "?") + f"digest={digest}"
        done = httpx.put(joined, content=data)  # `params=` would drop the upload's _state
        assert done.status_code == 201, done.text
        return digest

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        r = httpx.put(
            self.url(repo, f"/manifests/{reference}"),
            content=body,
            headers={"Content-Type": media_type},
        )
        assert r.status_code == 201, r.text
        return digest_of(body)

    def image(
        self,
        repo: str,
        settings: Mapping[str, Any],
        *,
        labels: Mapping[str, str] | None = None,
        architecture: str = "amd64",
        pad_bytes: int = 0,
        tag: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> tuple[str, int]:
        """A one-layer OCI image (the simulator's engine file) by digest, and by `tag` when
        given: (digest, size)."""
        layer = layer_tar(engine_files(settings, pad_bytes))
        layer_gz = gzip.compress(layer, compresslevel=1, mtime=0)  # platforms share it
        config = json.dumps(
            {
                "architecture": architecture,
                "os": "linux",
                "config": {
                    "Labels": dict(labels or {}),
                    **({"Env": [f"{k}={v}" for k, v in env.items()]} if env else {}),
                },
                "rootfs": {"type": "layers", "diff_ids": [digest_of(layer)]},
            }
        ).encode()
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {
                    "mediaType": OCI_CONFIG,
                    "size": len(config),
                    "digest": self.put_blob(repo, config),
                },
                "layers": [
                    {
                        "mediaType": OCI_LAYER,
                        "size": len(layer_gz),
                        "digest": self.put_blob(repo, layer_gz),
                    }
                ],
            }
        ).encode()
        if tag is not None:
            self.put_manifest(repo, tag, manifest, OCI_MANIFEST)
        return self.put_manifest(repo, digest_of(manifest), manifest, OCI_MANIFEST), len(manifest)

    def multi_arch(
        self,
        repo: str,
        tag: str,
        settings: Mapping[str, Any],
        labels: Mapping[str, str] | None = None,
        pads: Mapping[str, int] | None = None,
    ) -> str:
        """An index of two platforms (linux/amd64, linux/arm64) under `tag`: its digest.
        `pads`: architecture → bytes of incompressible weights in its layer."""
        children = []
        for arch in ("amd64", "arm64"):
            pad = (pads or {}).get(arch, 0)
            digest, size = self.image(
                repo, settings, labels=labels, architecture=arch, pad_bytes=pad
            )
            children.append(
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": digest,
                    "size": size,
                    "platform": {"os": "linux", "architecture": arch},
                }
            )
        index = json.dumps(
            {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": children}
        ).encode()
        return self.put_manifest(repo, tag, index, OCI_INDEX)

    def manifest(self, repo: str, reference: str) -> httpx.Response:
        accept = ", ".join([OCI_INDEX, OCI_MANIFEST])
        return httpx.get(self.url(repo, f"/manifests/{reference}"), headers={"Accept": accept})

    def has_blob(self, repo: str, digest: str) -> bool:
        return httpx.head(self.url(repo, f"/blobs/{digest}")).status_code == 200

    def served(self, repo: str) -> list[str]:
        """`METHOD uri` of each request the registry has answered for `repo`, in order: up to
        a marker request sent now, whose log line is waited for."""
        mark = uuid.uuid4().hex
        httpx.get(self.url(repo, f"/tags/list?mark={mark}"))
        assert wait_until(lambda: mark in self.log.read_text()), "the registry logged no mark"
        found = []
        for line in self.log.read_text().splitlines():
            method = re.search(r"http\.request\.method=(\w+)", line)
            uri = re.search(r'http\.request\.uri="?([^" ]+)', line)  # quoted when it has "="
            if "response completed" in line and method and uri and f"/v2/{repo}/" in uri[1]:
                found.append(f"{method[1]} {uri[1]}")
        return found

    def drop_blobs(self, repo: str, tag: str) -> None:
        """The tag's config and layers deleted, its manifest kept: a pull of it fails."""
        found = self.manifest(repo, tag).json()
        for blob in [found["config"], *found["layers"]]:
            r = httpx.delete(self.url(repo, f"/blobs/{blob['digest']}"))
            assert r.status_code == 202, r.text

    def drop(self, repo: str, tag: str) -> None:
        """Retention: the tag's manifest deleted (every tag naming it goes with it)."""
        digest = self.manifest(repo, tag).headers["Docker-Content-Digest"]
        r = httpx.delete(self.url(repo, f"/manifests/{digest}"))
        assert r.status_code == 202, r.text


@contextmanager
def serving(folder: Path) -> Iterator[LocalRegistry]:
    """One `docker-registry serve` on a port of its choosing, with its own storage; ready
    when its log says where it listens; stopped on exit."""
    binary = shutil.which("docker-registry")
    assert binary is not None
    folder.mkdir(parents=True)
    config = folder / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log: {level: info, formatter: text}\n"
        f"storage: {{filesystem: {{rootdirectory: {folder / 'data'}}}, "
        "delete: {enabled: true}}\n"
        "http: {addr: '127.0.0.1:0'}\n"
    )
    log = folder / "registry.log"
    proc = subprocess.Popen(
        [binary, "serve", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OTEL_TRACES_EXPORTER": "none"},
    )
    assert proc.stderr is not None
    listening = threading.Event()
    where: list[str] = []

    def drain() -> None:
        assert proc.stderr is not None
        with log.open("a") as out:
            for line in proc.stderr:
                out.write(line)
                out.flush()
                if "listening on " in line and not where:
                    where.append(line.split("listening on ", 1)[1].split('"')[0].strip())
                    listening.set()
        listening.set()  # it exited: the wait ends and says so

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        assert listening.wait(START_S) and where, (
            f"docker-registry did not start: {log.read_text()}"
        )
        yield LocalRegistry(where[0], log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(timeout=5)
