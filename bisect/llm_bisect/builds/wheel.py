"""Wheel builds: the commit's own wheel from a per-commit package index, installed by uv.

    index: https://wheels.vllm.ai/{commit}/cpu/      a PEP 503 index per commit
    GET {index}{package}/  ─ 404 ─► does not apply ("no wheel")
             │ a .whl link
             ▼
    uv venv OUT [--system-site-packages]  (+ a .pth onto base_venv's packages)
    uv pip install --python OUT/bin/python --index llm-bisect={index} [--no-deps] {package}

A login in the index's URL (`https://user:token@host/...`) reaches uv through its
per-index variables (UV_INDEX_LLM_BISECT_USERNAME / _PASSWORD), never its command line
(`ps` shows that to everyone); what is written (facts, reasons, logs) names the index as
`https://***@host/...`.

With `base_venv` the build reuses that venv's packages (torch and the rest) through a
.pth file and installs only the package itself: seconds and a little disk per commit,
not a 3 GB copy. uv keeps downloaded wheels in its own cache, so a build made again
downloads nothing.

For the Docker launcher (`download_only`) the build is the wheel file alone, checked
against the index's sha256; images.py installs it into a base image.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

import httpx

from ..config import fill
from ..errors import ConfigError, LaunchError
from ..model import Candidate
from ..redact import public_url
from . import Build, run_logged

INDEX_TIMEOUT_S = 30.0
UV_INDEX_NAME = "llm-bisect"
"""The commit's index as uv names it; its login is in UV_INDEX_LLM_BISECT_USERNAME/_PASSWORD."""


def normalize(name: str) -> str:
    """PEP 503's normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def wheel_links(html: str, package: str) -> list[str]:
    """The .whl links of a PEP 503 project page that belong to `package`. Pure."""
    parser = _Links()
    parser.feed(html)
    prefix = normalize(package).replace("-", "_")
    found = []
    for href in parser.hrefs:
        name = urlsplit(href).path.rsplit("/", 1)[-1]
        if name.endswith(".whl") and normalize(name.split("-", 1)[0]).replace("-", "_") == prefix:
            found.append(href)
    return found


def find_uv() -> str:
    """The uv executable: on PATH, else the one the `uv` package ships."""
    found = shutil.which("uv")
    if found:
        return found
    try:
        import uv  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        raise ConfigError(
            "build: wheel builds need uv (pip install 'llm-bisect[builds]')"
        ) from None
    path: str = uv.find_uv_bin()
    return path


class WheelStrategy:
    """Install the commit's wheel into a fresh venv with uv."""

    name = "wheel"

    def __init__(
        self,
        *,
        index: str,
        package: str,
        python: str,
        uv: str,
        base_venv: Path | None = None,
        system_site_packages: bool = False,
        download_only: bool = False,
        env: Mapping[str, str] | None = None,
        secret_names: Sequence[str] = (),
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.secret_names = list(secret_names)
        self.index = index
        self.package = package
        self.python = python
        self.uv = uv
        self.base_venv = base_venv
        self.system_site_packages = system_site_packages
        self.download_only = download_only
        self.cache_name = "wheel-file" if download_only else "wheel"
        self.env = dict(env or os.environ)
        self._http = httpx.Client(timeout=INDEX_TIMEOUT_S, transport=transport)

    def _index(self, candidate: Candidate) -> str:
        url = fill(self.index, {"commit": candidate.commit, "short": candidate.short})
        return url if url.endswith("/") else url + "/"

    def _uv_index(self, candidate: Candidate) -> tuple[list[str], dict[str, str]]:
        """uv's arguments for the commit's index (its URL without the login) and the
        environment that gives uv the login."""
        parts = urlsplit(self._index(candidate))
        bare = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        variable = "UV_INDEX_" + UV_INDEX_NAME.upper().replace("-", "_")
        env = {}
        if parts.username:
            env[f"{variable}_USERNAME"] = unquote(parts.username)
        if parts.password:
            env[f"{variable}_PASSWORD"] = unquote(parts.password)
        return ["--index", f"{UV_INDEX_NAME}={bare}"], env

    def _wheel(self, candidate: Candidate) -> tuple[str | None, str]:
        """(the wheel's URL, what was found) from the commit's index page for the package."""
        page = urljoin(self._index(candidate), normalize(self.package) + "/")
        try:
            reply = self._http.get(page, follow_redirects=True)
        except httpx.HTTPError as exc:
            return None, f"{public_url(page)} cannot be read ({type(exc).__name__})"
        if reply.status_code != 200:
            return None, f"{public_url(page)} answers {reply.status_code}"
        links = wheel_links(reply.text, self.package)
        if not links:
            return None, f"{public_url(page)} lists no {self.package} wheel"
        return urljoin(page, links[-1]), ""

    def applies(self, candidate: Candidate) -> tuple[bool, str]:
        url, why = self._wheel(candidate)
        if url is None:
            return False, f"no wheel: {why}"
        return True, urlsplit(url).path.rsplit("/", 1)[-1]

    def _run(
        self, argv: list[str], log: Path, what: str, login: Mapping[str, str] | None = None
    ) -> None:
        """`login`: variables added for this step, their values masked in its log."""
        login = dict(login or {})
        masked = [n for n in login if n.endswith("_PASSWORD")] or list(login)
        run_logged(
            argv,
            log,
            env={**self.env, **login},
            what=f"wheel: {what}",
            redact=[*self.secret_names, *masked],
        )

    def make(self, candidate: Candidate, out: Path, log: Path) -> dict[str, Any]:
        url, why = self._wheel(candidate)
        if url is None:
            raise LaunchError(f"wheel: {why}")
        if self.download_only:
            return self._download(candidate, url, out, log)
        venv = [self.uv, "venv", str(out), "--python", self.python, "--no-python-downloads"]
        if self.system_site_packages:
            venv.append("--system-site-packages")
        self._run(venv, log, "uv venv")
        python = out / "bin" / "python"
        if self.base_venv is not None:
            _link_base(python, self.base_venv)
        install = [self.uv, "pip", "install", "--python", str(python)]
        index, login = self._uv_index(candidate)
        install += [*index, self.package]
        if self.base_venv is not None:
            install.append("--no-deps")  # the base venv has them
        self._run(install, log, "uv pip install", login)
        name = urlsplit(url).path.rsplit("/", 1)[-1]
        digest = urlsplit(url).fragment.removeprefix("sha256=") if "sha256=" in url else ""
        return {"wheel": name, "sha256": digest, "index": public_url(self._index(candidate))}

    def _download(self, candidate: Candidate, url: str, out: Path, log: Path) -> dict[str, Any]:
        """The wheel file into `out`, its sha256 checked against the index's."""
        name = urlsplit(url).path.rsplit("/", 1)[-1]
        want = urlsplit(url).fragment.removeprefix("sha256=") if "sha256=" in url else ""
        digest = hashlib.sha256()
        with log.open("a") as f:
            f.write(f"GET {public_url(url.split('#', 1)[0])}\n")
        try:
            with self._http.stream("GET", url, follow_redirects=True) as reply:
                if reply.status_code != 200:
                    raise LaunchError(f"wheel: {name} answers {reply.status_code}")
                with (out / name).open("wb") as f:
                    for chunk in reply.iter_bytes():
                        digest.update(chunk)
                        f.write(chunk)
        except httpx.HTTPError as exc:
            why = type(exc).__name__
            raise LaunchError(f"wheel: {name} cannot be downloaded ({why})") from None
        if want and digest.hexdigest() != want:
            raise LaunchError(f"wheel: {name} does not match the index's sha256")
        index = public_url(self._index(candidate))
        return {"wheel": name, "sha256": digest.hexdigest(), "index": index}

    def load(self, candidate: Candidate, folder: Path, facts: Mapping[str, Any]) -> Build:
        if self.download_only:
            return Build("wheel", folder, "", {}, dict(facts))
        return Build("wheel", folder, str(folder / "bin" / "python"), {}, dict(facts))


def _site_packages(python: Path) -> Path:
    done = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(done.stdout.strip())


def _link_base(python: Path, base_venv: Path) -> None:
    """The new venv sees the base venv's packages after its own (a .pth file)."""
    base = _site_packages(base_venv / "bin" / "python")
    (_site_packages(python) / "_llm_bisect_base.pth").write_text(str(base) + "\n")
