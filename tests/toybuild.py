"""The toy engine of the build tests: a git history, a precompiled install, a wheel index.

`toyengine` is installed in a real venv (its "compiled part" a file the server refuses
to start without); the history changes its Python, adds a compiled source, breaks the
build once and plants a fault. Each build serves the simulator with the fault its own
`toyengine/settings.py` names. `index` serves one real wheel per commit (some commits
none) as a PEP 503 index on 127.0.0.1. conftest.py registers both fixtures.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import subprocess
import threading
import venv
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

SERVE = """\
import os, sys
from pathlib import Path
from toyengine import settings
here = Path(settings.__file__).parent
if not (here / "_native.bin").exists():
    sys.exit("toyengine: compiled part missing")
print("toyengine: serving from", here, "fault", settings.FAULT, flush=True)
os.execv(sys.executable, [sys.executable, "-m", "llm_bisect.sim", "--fault", settings.FAULT,
                          *sys.argv[1:]])
"""
BUILD = """\
import shutil, subprocess, sys, venv
from pathlib import Path
repo, commit, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
listed = subprocess.run(["git", "-C", repo, "ls-tree", "-r", "--name-only", commit],
                        capture_output=True, text=True, check=True).stdout.split()
if "BROKEN_BUILD" in listed:
    sys.exit("build: the build is broken at this commit")
venv.create(out, system_site_packages=True)
site = Path(subprocess.run([str(out / "bin" / "python"), "-c",
    "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
    capture_output=True, text=True, check=True).stdout.strip())
archive = subprocess.run(["git", "-C", repo, "archive", commit, "toyengine"],
                         capture_output=True, check=True).stdout
subprocess.run(["tar", "-x", "-C", str(site)], input=archive, check=True)
(site / "toyengine" / "_native.bin").write_bytes(b"compiled from source")
print("build: made", out)
"""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@x", *args],
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


def commit(repo: Path, message: str, files: dict[str, str | None]) -> str:
    for path, text in files.items():
        target = repo / path
        if text is None:
            target.unlink()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("toy")
    repo = root / "engine"
    repo.mkdir()
    git(repo, "init", "-q")
    base = {
        "toyengine/__init__.py": "",
        "toyengine/settings.py": 'FAULT = "none"\n',
        "toyengine/serve.py": SERVE,
    }
    shas = {"base": commit(repo, "base", base)}
    shas["doc"] = commit(repo, "[Doc] readme", {"README.md": "toy\n"})
    shas["refactor"] = commit(
        repo, "[Refactor] settings", {"toyengine/settings.py": '# the fault\nFAULT = "none"\n'}
    )
    shas["fault"] = commit(
        repo, "[Perf] the fault", {"toyengine/settings.py": 'FAULT = "degenerate-content"\n'}
    )
    shas["kernel"] = commit(repo, "[Kernel] a CUDA kernel", {"csrc/kernel.cu": "// kernel\n"})
    shas["broken"] = commit(repo, "[CI] breaks the build", {"BROKEN_BUILD": "x"})
    shas["fixed"] = commit(repo, "[CI] fixes the build", {"BROKEN_BUILD": None})
    env_dir, site = install(root / "venv", base)
    (root / "build.py").write_text(BUILD)
    return {"root": root, "repo": repo, "shas": shas, "venv": env_dir, "site": site}


def install(env_dir: Path, files: dict[str, str]) -> tuple[Path, Path]:
    """The precompiled install: a real venv holding these files of the package and its
    native part; (the venv, its site-packages)."""
    venv.create(env_dir, system_site_packages=True)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    for path, text in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    (site / "toyengine" / "_native.bin").write_bytes(b"\0" * 4096)
    return env_dir, site


def make_wheel(folder: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A real wheel (zip, METADATA, WHEEL, RECORD with hashes) of these files."""
    dist = f"{name}-{version}.dist-info"
    meta = {
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(wheel, "w") as z:
        for path, data in {**files, **meta}.items():
            z.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{path},sha256={digest.decode()},{len(data)}")
        z.writestr(f"{dist}/RECORD", "\n".join([*record, f"{dist}/RECORD,,"]) + "\n")
    return wheel


@pytest.fixture(scope="module")
def index(toy: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A PEP 503 index per commit on 127.0.0.1: one real wheel per commit, some commits none."""
    repo, shas = toy["repo"], toy["shas"]
    without = {shas["doc"], shas["broken"]}
    pages, blobs = wheel_pages(repo, set(shas.values()) - without, toy["root"] / "wheels")
    for sha in (shas["base"], shas["fault"], shas["fixed"]):
        pages[f"/sparse/{sha}/toyengine/"] = pages[f"/{sha}/toyengine/"]  # kept few wheels
    with serve(pages, blobs) as (url, served):
        yield {"url": url, "without": without, "served": served}


def wheel_pages(
    repo: Path, commits: set[str], files: Path
) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """One real toyengine wheel per commit (its package files and a compiled part): the
    index pages `/{commit}/toyengine/` and the wheels by name."""
    files.mkdir(exist_ok=True)
    pages: dict[str, bytes] = {}
    blobs: dict[str, bytes] = {}
    for sha in commits:
        listed = git(repo, "ls-tree", "-r", "--name-only", sha, "toyengine").split()
        content = {p: git(repo, "show", f"{sha}:{p}").encode() + b"\n" for p in listed}
        content["toyengine/_native.bin"] = b"compiled in CI"
        wheel = make_wheel(files, "toyengine", f"0.1.0+g{sha[:12]}", content)
        blobs[wheel.name] = wheel.read_bytes()
        digest = hashlib.sha256(blobs[wheel.name]).hexdigest()
        pages[f"/{sha}/toyengine/"] = (
            f'<html><body><a href="/files/{wheel.name}#sha256={digest}">{wheel.name}</a>'
            "</body></html>"
        ).encode()
    return pages, blobs


@contextlib.contextmanager
def serve(pages: dict[str, bytes], blobs: dict[str, bytes]) -> Iterator[tuple[str, list[str]]]:
    """These pages and `/files/<wheel>` on 127.0.0.1 (404 for anything else): its URL and
    the paths asked for."""
    served: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            served.append(self.path)

        def do_HEAD(self) -> None:
            self.do_GET(head=True)

        def do_GET(self, head: bool = False) -> None:
            body = pages.get(self.path) or blobs.get(self.path.removeprefix("/files/"))
            if body is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            kind = "text/html" if self.path in pages else "application/octet-stream"
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", served
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
