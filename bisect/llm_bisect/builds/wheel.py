"""Wheel builds: the commit's own wheel from a per-commit package index, installed by uv.

    index: https://wheels.vllm.ai/{commit}/cpu/      a PEP 503 index per commit
    GET {index}{package}/  ─ 404 ─► does not apply ("no wheel")
             │ its .whl links (the page read up to MAX_PAGE_BYTES)
             ▼
    the wheel made for the target: the best of its tags among the target's (packaging.tags
    of the build's interpreter: Python, ABI, platform); none fits ─► does not apply
             ▼
    uv venv OUT [--system-site-packages]  (+ a .pth onto base_venv's packages)
    uv pip install --python OUT/bin/python --index llm-bisect={index} [--no-deps] "{package} @ URL"

A login in the index's URL (`https://user:token@host/...`) reaches uv through its
per-index variables (UV_INDEX_LLM_BISECT_USERNAME / _PASSWORD), never its command line
(`ps` shows that to everyone); what is written (facts, reasons, logs) names the index as
`https://***@host/...`.

With `base_venv` the build reuses that venv's packages (torch and the rest) through a
.pth file and installs only the package itself: seconds and a little disk per commit,
not a 3 GB copy. uv keeps downloaded wheels in its own cache, so a build made again
downloads nothing. The venv is made where it stays (the cache makes builds in place),
so its console scripts (`{build}/bin/vllm`) run.

For the Docker launcher (`download_only`) the build is the wheel file alone, checked
against the index's sha256; images.py installs it into a base image. Its target is this
node's platform (the image's Python is not known before it runs).
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

import httpx
import packaging
from packaging import tags as packaging_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from pydantic import ConfigDict, field_validator

from ..client import within
from ..config import StrategyBase, check_placeholders
from ..errors import ConfigError, LaunchError
from ..index_page import links
from ..jsonvalue import Json
from ..kinds import STRATEGIES, BuildContext, StrategyKind, StrategyRules
from ..logs import run_logged
from ..model import Candidate
from ..redact import public_url, url_credentials
from ..templates import ENV_REF, IMAGE_PLACEHOLDERS, expand_template, fill
from . import Build, ImageTarget, base_image_fits

INDEX_TIMEOUT_S = 30.0
PAGE_DEADLINE_S = 4 * INDEX_TIMEOUT_S
"""The whole of one index page (a big one, as torch's, on a slow link), past every read."""
MAX_PAGE_BYTES = 32 * 2**20
"""The most of an index page read: a larger page is no wheel (never read whole)."""
TAGS_SCRIPT = (
    "import json, platform, sys; sys.path.insert(0, sys.argv[1]); "
    "from packaging import tags; "
    "print(json.dumps({'tags': [str(t) for t in tags.sys_tags()], "
    "'version': platform.python_version()}))"
)
"""Run by the build's interpreter with this packaging on its path: the tags it accepts."""
UV_INDEX_NAME = "llm-bisect"
"""The commit's index as uv names it; its login is in UV_INDEX_LLM_BISECT_USERNAME/_PASSWORD."""


def _bare(url: str) -> str:
    """`url` without the login in it (the login reaches uv through its environment)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def normalize(name: str) -> str:
    """PEP 503's normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_links(html: str, package: str) -> list[str]:
    """The .whl links of a PEP 503 project page that belong to `package`. Pure."""
    prefix = normalize(package).replace("-", "_")
    found = []
    for link in links(html):
        name = urlsplit(link.href).path.rsplit("/", 1)[-1]
        if name.endswith(".whl") and normalize(name.split("-", 1)[0]).replace("-", "_") == prefix:
            found.append(link.href)
    return found


@dataclass(frozen=True)
class Target:
    """What a wheel must fit: the tags accepted, most specific first."""

    tags: tuple[str, ...]
    """Full tags (`cp312-cp312-manylinux_2_35_x86_64`), or platforms with `platform_only`."""
    what: str
    """How a route names it: `this Python (cp312-...)`, `this node (x86_64)`."""
    platform_only: bool = False
    """Only the platform is known (an image's Python is not): any Python and ABI fit."""
    version: str = ""
    """The interpreter's full version, when known."""


def choose_wheel(links: Sequence[str], target: Target) -> str | None:
    """The link whose wheel fits the target best: the earliest target tag among its tags,
    the last listed among equals; None when none fits. Pure."""
    rank: dict[str, int] = {}
    for i, tag in enumerate(target.tags):
        rank.setdefault(tag, i)
    best, best_rank = None, len(rank)
    for link in links:
        name = unquote(urlsplit(link).path.rsplit("/", 1)[-1])
        try:
            wheel_tags = parse_wheel_filename(name)[3]
        except InvalidWheelFilename:
            continue
        keys = {t.platform if target.platform_only else str(t) for t in wheel_tags}
        ranks = [rank[k] for k in keys if k in rank]
        if ranks and min(ranks) <= best_rank:
            best, best_rank = link, min(ranks)
    return best


def interpreter_target(python: str) -> Target:
    """The tags `python` accepts (packaging.tags run by that interpreter); LaunchError
    when it cannot tell."""
    where = str(Path(packaging.__file__).parent.parent)
    try:
        done = subprocess.run(
            [python, "-I", "-c", TAGS_SCRIPT, where], capture_output=True, text=True, timeout=60
        )
        found = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        raise LaunchError(f"cannot read the wheel tags of '{python}' ({exc})") from None
    if not isinstance(found, dict) or not found.get("tags"):
        why = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise LaunchError(f"cannot read the wheel tags of '{python}' ({why[0]})")
    tags = tuple(str(t) for t in found["tags"])
    return Target(tags, f"this Python ({tags[0]})", version=str(found.get("version", "")))


def node_target() -> Target:
    """This node's platforms (manylinux, linux, any): for a wheel an image will run."""
    platforms = (*packaging_tags.platform_tags(), "any")
    return Target(platforms, f"this node ({platform.machine()})", platform_only=True)


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


@dataclass(frozen=True)
class Venv:
    """Where a wheel strategy installs: a fresh venv of `python` made by `uv`, over
    `base_venv` where given, with the system's site-packages where asked."""

    python: str
    uv: str
    base_venv: Path | None = None
    system_site_packages: bool = False


class WheelStrategy:
    """Install the commit's wheel into a fresh venv with uv."""

    name = "wheel"

    def __init__(
        self,
        *,
        index: str,
        package: str,
        venv: Venv | None,
        env: Mapping[str, str] | None = None,
        secret_names: Sequence[str] = (),
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """`venv`: where the wheel is installed; None: it is only downloaded (for an image
        derived from the base)."""
        self.secret_names = list(secret_names)
        self.index = index
        self.package = package
        self.python = venv.python if venv is not None else ""
        self.uv = venv.uv if venv is not None else ""
        self.base_venv = venv.base_venv if venv is not None else None
        self.system_site_packages = venv is not None and venv.system_site_packages
        self.download_only = download_only = venv is None
        self.cache_name = "wheel-file" if download_only else "wheel"
        self.env = dict(env or os.environ)
        self._http = httpx.Client(timeout=INDEX_TIMEOUT_S, transport=transport)
        self._target: Target | None = None
        self._uv_version: str | None = None

    def target(self) -> Target:
        """What its wheels must fit (worked out once); LaunchError when it cannot be."""
        if self._target is None:
            self._target = node_target() if self.download_only else interpreter_target(self.python)
        return self._target

    def identity(self, candidate: Candidate) -> dict[str, Json]:
        """The index, the package, the target's tags; for a venv also its interpreter, the
        base venv and uv's version."""
        target = self.target()
        found: dict[str, Json] = {
            "index": public_url(self.index),
            "package": self.package,
            "download_only": self.download_only,
            "target": target.tags[0],
        }
        if not self.download_only:
            found |= {
                "python": self.python,
                "version": target.version,
                "base_venv": str(self.base_venv or ""),
                "system_site_packages": self.system_site_packages,
                "uv": self._uv(),
            }
        return found

    def _uv(self) -> str:
        if self._uv_version is None:
            try:
                done = subprocess.run(
                    [self.uv, "--version"], capture_output=True, text=True, timeout=60
                )
                self._uv_version = done.stdout.strip() or f"exit {done.returncode}"
            except (OSError, subprocess.TimeoutExpired) as exc:
                self._uv_version = f"unknown ({type(exc).__name__})"
        return self._uv_version

    def _index(self, candidate: Candidate) -> str:
        url = fill(self.index, {"commit": candidate.commit, "short": candidate.short})
        return url if url.endswith("/") else url + "/"

    def _uv_index(self, candidate: Candidate) -> tuple[list[str], dict[str, str]]:
        """uv's arguments for the commit's index (its URL without the login) and the
        environment that gives uv the login."""
        parts = urlsplit(self._index(candidate))
        bare = _bare(self._index(candidate))
        variable = "UV_INDEX_" + UV_INDEX_NAME.upper().replace("-", "_")
        env = {}
        if parts.username:
            env[f"{variable}_USERNAME"] = unquote(parts.username)
        if parts.password:
            env[f"{variable}_PASSWORD"] = unquote(parts.password)
        return ["--index", f"{UV_INDEX_NAME}={bare}"], env

    def _page(self, page: str) -> tuple[str | None, str]:
        """The index page's text, read up to MAX_PAGE_BYTES; (None, why) when it cannot be."""
        too_large = f"{public_url(page)} is larger than {MAX_PAGE_BYTES >> 20} MiB"
        try:
            with self._http.stream("GET", page, follow_redirects=True) as reply:
                if reply.status_code != 200:
                    return None, f"{public_url(page)} answers {reply.status_code}"
                declared = reply.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > MAX_PAGE_BYTES:
                    return None, too_large
                body = bytearray()
                for chunk in within(reply.iter_bytes(), time.monotonic() + PAGE_DEADLINE_S):
                    body += chunk
                    if len(body) > MAX_PAGE_BYTES:
                        return None, too_large
                encoding = reply.charset_encoding or "utf-8"
        except httpx.HTTPError as exc:
            return None, f"{public_url(page)} cannot be read ({type(exc).__name__})"
        try:
            codecs.lookup(encoding)
        except LookupError:
            encoding = "utf-8"
        return body.decode(encoding, errors="replace"), ""

    def _wheel(self, candidate: Candidate) -> tuple[str | None, str]:
        """(the URL of the wheel for the target, what was found) from the commit's index
        page for the package."""
        page = urljoin(self._index(candidate), normalize(self.package) + "/")
        text, why = self._page(page)
        if text is None:
            return None, why
        links = wheel_links(text, self.package)
        if not links:
            return None, f"{public_url(page)} lists no {self.package} wheel"
        try:
            target = self.target()
        except LaunchError as exc:
            return None, str(exc)
        chosen = choose_wheel(links, target)
        if chosen is None:
            n = f"{len(links)} {self.package} wheel{'s' if len(links) > 1 else ''}"
            return None, f"{public_url(page)} lists {n}, none for {target.what}"
        return urljoin(page, chosen), ""

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

    def make(self, candidate: Candidate, out: Path, log: Path) -> dict[str, Json]:
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
        # exactly the wheel chosen for the target (uv checks the index's sha256 fragment)
        install += [*index, f"{self.package} @ {_bare(url)}"]
        if self.base_venv is not None:
            install.append("--no-deps")  # the base venv has them
        self._run(install, log, "uv pip install", login)
        name = urlsplit(url).path.rsplit("/", 1)[-1]
        digest = urlsplit(url).fragment.removeprefix("sha256=") if "sha256=" in url else ""
        return {"wheel": name, "sha256": digest, "index": public_url(self._index(candidate))}

    def _download(self, candidate: Candidate, url: str, out: Path, log: Path) -> dict[str, Json]:
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


# ---- the `type: wheel` strategy kind ---------------------------------------------------------


class WheelStrategyConfig(StrategyBase):
    """The commit's wheel from a per-commit PEP 503 index, installed by uv into a fresh venv."""

    model_config = ConfigDict(**StrategyBase.model_config, title="WheelStrategy")  # as before

    type: Literal["wheel"]
    """`wheel`: the commit's wheel from a per-commit index."""
    index: str
    """URL template of the commit's index: `{commit}`, `{short}`; `${VAR}` takes VAR from the
    caller (a login: `https://${USER}:${TOKEN}@host/{commit}/`, never written out)."""
    package: str = "vllm"
    """The distribution to install from the index."""
    base_venv: str | None = None
    """A venv whose packages the build reuses (a .pth file); only the package is installed."""
    python: str | None = None
    """The build venv's interpreter; default: base_venv's, else the one llm-bisect runs on.
    With `image`: the image's interpreter (default `python3`)."""
    image: str | None = None
    """Docker launcher: the base image the wheel is installed into (its dependencies are
    reused); each build is an image derived from it."""
    system_site_packages: bool = False
    """Give the build venv the interpreter's own site-packages too."""

    @field_validator("index")
    @classmethod
    def _index_placeholders(cls, index: str) -> str:
        check_placeholders([ENV_REF.sub("", index)], "index", IMAGE_PLACEHOLDERS)
        return index


def wheel_index(cfg: WheelStrategyConfig, environ: Mapping[str, str], i: int) -> str:
    """A wheel strategy's index template with `${VAR}` expanded (a login, often)."""
    return expand_template(cfg.index, environ, f"build.strategies.{i}.index")


def from_config(
    cfg: WheelStrategyConfig, ctx: BuildContext
) -> tuple[WheelStrategy, ImageTarget | None]:
    """Into a fresh venv here, or (`image:`) downloaded for an image derived from the base."""
    index = wheel_index(cfg, ctx.environ, ctx.index)
    if cfg.image is not None:
        strategy = WheelStrategy(
            index=index,
            package=cfg.package,
            venv=None,
            env=ctx.environ,
            secret_names=ctx.secret_names,
        )
        return strategy, ImageTarget(cfg.image, cfg.python or "python3", cfg.package)
    base = ctx.base_dir / Path(cfg.base_venv).expanduser() if cfg.base_venv else None
    if base is not None and not (base / "bin" / "python").exists():
        raise ConfigError(f"{ctx.key}.base_venv: no venv at '{cfg.base_venv}' (no bin/python)")
    interpreter = cfg.python or (str(base / "bin" / "python") if base else sys.executable)
    strategy = WheelStrategy(
        index=index,
        package=cfg.package,
        venv=Venv(interpreter, find_uv(), base, cfg.system_site_packages),
        env=ctx.environ,
        secret_names=ctx.secret_names,
    )
    return strategy, None


def _validate(cfg: WheelStrategyConfig, rules: StrategyRules) -> None:
    base_image_fits(cfg.type, cfg.image, rules.key, rules.images)


def _secrets(cfg: WheelStrategyConfig, environ: Mapping[str, str], i: int) -> list[str]:
    return url_credentials(wheel_index(cfg, environ, i))  # a login in the index's URL


KIND = STRATEGIES.register(
    StrategyKind(
        "wheel", WheelStrategyConfig, make=from_config, validate=_validate, secrets=_secrets
    )
)
