"""The toy engine of the build tests: a git history, a precompiled install, a wheel index.

`toyengine` is installed in a real venv (its "compiled part" a file the server refuses
to start without); the history changes its Python, adds a compiled source, breaks the
build once and plants a fault. Each build serves the simulator with the fault its own
`toyengine/settings.py` names. `index` serves one real wheel per commit (some commits
none) as a PEP 503 index on 127.0.0.1. conftest.py registers both fixtures.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import threading
import venv
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
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
if sys.argv[4:] == ["release"]:  # a flavour of the build that brings the fault out
    (site / "toyengine" / "settings.py").write_text('FAULT = "degenerate-content"\\n')
print("build: made", out)
"""
CLI = """\
import runpy


def main() -> None:
    runpy.run_module("toyengine.serve", run_name="__main__")
"""
"""`toyengine-serve`, the console script the index's wheels install (as `vllm` is)."""


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


def make_wheel(
    folder: Path,
    name: str,
    version: str,
    files: dict[str, bytes],
    *,
    tag: str = "py3-none-any",
    scripts: dict[str, str] | None = None,
) -> Path:
    """A real wheel (zip, METADATA, WHEEL, RECORD with hashes) of these files, for `tag`;
    `scripts`: its console scripts (name -> module:function)."""
    dist = f"{name}-{version}.dist-info"
    meta = {
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        + f"Tag: {tag}\n".encode(),
    }
    if scripts:
        lines = [f"{script} = {target}" for script, target in scripts.items()]
        meta[f"{dist}/entry_points.txt"] = "\n".join(["[console_scripts]", *lines, ""]).encode()
    wheel = folder / f"{name}-{version}-{tag}.whl"
    record = []
    with zipfile.ZipFile(wheel, "w") as z:
        for path, data in {**files, **meta}.items():
            z.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{path},sha256={digest.decode()},{len(data)}")
        z.writestr(f"{dist}/RECORD", "\n".join([*record, f"{dist}/RECORD,,"]) + "\n")
    return wheel


PRIVATE = "/private/"
"""Under this prefix the index answers only with the login below (HTTP basic auth)."""
INDEX_LOGIN = ("ci-bot", "idx-s3cret-99")
LOGIN = "Basic " + base64.b64encode(":".join(INDEX_LOGIN).encode()).decode()


@pytest.fixture(scope="module")
def index(toy: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A PEP 503 index per commit on 127.0.0.1: one real wheel per commit, some commits none;
    the same behind a login under /private/."""
    shas = toy["shas"]
    files = toy["root"] / "wheels"
    files.mkdir()
    without = {shas["doc"], shas["broken"]}
    pages: dict[str, bytes] = {}
    blobs: dict[str, bytes] = {}
    for sha in set(shas.values()) - without:
        content = wheel_content(toy, sha)
        content["toyengine/_cli.py"] = CLI.encode()
        wheel = make_wheel(
            files,
            "toyengine",
            f"0.1.0+g{sha[:12]}",
            content,
            scripts={"toyengine-serve": "toyengine._cli:main"},
        )
        blobs[wheel.name] = wheel.read_bytes()
        pages[f"/{sha}/toyengine/"] = page = _page(wheel.name, blobs[wheel.name])
        if sha in (shas["base"], shas["fault"], shas["fixed"]):
            pages[f"/sparse/{sha}/toyengine/"] = page  # an index that kept few wheels
    with serve_index(pages, blobs) as (url, served):
        yield {"url": url, "without": without, "served": served}


def _page(name: str, wheel: bytes) -> bytes:
    """A PEP 503 page that lists one wheel, with its sha256."""
    digest = hashlib.sha256(wheel).hexdigest()
    return f'<html><body><a href="/files/{name}#sha256={digest}">{name}</a></body></html>'.encode()


def wheel_content(toy: dict[str, Any], sha: str) -> dict[str, bytes]:
    """The files of the toy engine's wheel of one commit (its Python and compiled part)."""
    return _content(toy["repo"], sha)


def _content(repo: Path, sha: str) -> dict[str, bytes]:
    listed = git(repo, "ls-tree", "-r", "--name-only", sha, "toyengine").split()
    content = {p: git(repo, "show", f"{sha}:{p}").encode() + b"\n" for p in listed}
    content["toyengine/_native.bin"] = b"compiled in CI"
    return content


def wheel_pages(
    repo: Path, commits: set[str], files: Path
) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """One real toyengine wheel per commit (its package files and a compiled part): the
    index pages `/{commit}/toyengine/` and the wheels by name (serve them with serve_index)."""
    files.mkdir(exist_ok=True)
    pages: dict[str, bytes] = {}
    blobs: dict[str, bytes] = {}
    for sha in commits:
        wheel = make_wheel(files, "toyengine", f"0.1.0+g{sha[:12]}", _content(repo, sha))
        blobs[wheel.name] = wheel.read_bytes()
        pages[f"/{sha}/toyengine/"] = _page(wheel.name, blobs[wheel.name])
    return pages, blobs


@contextmanager
def serve_index(
    pages: dict[str, bytes], blobs: dict[str, bytes], *, declare_length: bool = True
) -> Iterator[tuple[str, list[str]]]:
    """A PEP 503 index on 127.0.0.1: `pages` by path, `blobs` under /files/; (its URL, the
    paths it served). Without `declare_length` bodies end with the connection (no length)."""
    served: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            served.append(self.path)

        def do_HEAD(self) -> None:
            self.do_GET(head=True)

        def do_GET(self, head: bool = False) -> None:
            path, private = self.path, self.path.startswith(PRIVATE)
            if private:  # the same index behind a login
                if self.headers.get("Authorization") != LOGIN:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="wheels"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                path = path.removeprefix(PRIVATE.rstrip("/"))
            body = pages.get(path) or blobs.get(path.removeprefix("/files/"))
            if body is not None and private and path in pages:
                body = body.replace(b'href="/files/', f'href="{PRIVATE}files/'.encode())
            if body is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            kind = "text/html" if path in pages else "application/octet-stream"
            self.send_header("Content-Type", kind)
            if declare_length:
                self.send_header("Content-Length", str(len(body)))
            else:
                self.close_connection = True
            self.end_headers()
            if not head:
                with suppress(OSError):  # a reader that stopped early
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
