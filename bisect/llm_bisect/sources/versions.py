"""The released versions of a package between two, from a package index (PEP 503 / PEP 691).

A dependency bump (flashinfer-python 0.6.15.post1 → 0.6.16.post3) names a range of the
dependency's releases; the first bad one among them is found by bisecting that list, the
engine held still. The list is every version the index has files for, pre-releases and
post-releases included, in PEP 440 order, `good` excluded and `bad` included.

Reading the index is the only I/O, through `Fetch` (one GET, the body); parsing is pure.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from ..errors import ConfigError
from ..index_page import links

Fetch = Callable[[str, str], bytes]
"""GET a URL with an Accept header; the body (raises ConfigError naming what failed)."""

_ACCEPT = (
    "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, "
    "text/html;q=0.1"
)


@dataclass(frozen=True)
class Release:
    """One version the index has files for."""

    version: Version
    yanked: bool = False
    """Every file of it is yanked (still installable by an exact pin)."""

    def __str__(self) -> str:
        return str(self.version)


def _version_of(filename: str, project: str) -> Version | None:
    """The version a wheel's or sdist's file name carries, if it is this project's."""
    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
        else:
            name, version = parse_sdist_filename(filename)
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None
    return version if canonicalize_name(name) == project else None


def parse_index(body: bytes, project: str) -> list[Release]:
    """The releases a project page lists (PEP 691 JSON or PEP 503 HTML), oldest first."""
    files: list[tuple[str, bool]]
    text = body.decode("utf-8", "replace")
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
            files = [(f["filename"], bool(f.get("yanked"))) for f in doc.get("files", [])]
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ConfigError(f"{project}: the index's JSON page is malformed: {exc}") from exc
    else:
        files = [(link.filename, link.yanked) for link in links(text)]
    yanked: dict[Version, bool] = {}
    for filename, is_yanked in files:
        version = _version_of(filename, canonicalize_name(project))
        if version is not None:
            yanked[version] = yanked.get(version, True) and is_yanked
    return [Release(v, yanked[v]) for v in sorted(yanked)]


def between(releases: Iterable[Release], good: str, bad: str) -> list[Release]:
    """The releases after `good` up to and including `bad` (PEP 440 order), `bad` last.

    Both ends must be versions the index has: the search needs each end to test as said.
    """
    listed = {r.version: r for r in releases}
    ends = []
    for key, given in (("--good", good), ("--bad", bad)):
        try:
            version = Version(given)
        except InvalidVersion:
            raise ConfigError(f"{key}: {given!r} is not a version") from None
        if version not in listed:
            near = ", ".join(str(v) for v in sorted(listed)[-5:]) or "none"
            raise ConfigError(f"{key}: the index has no {given} (latest: {near})")
        ends.append(version)
    old, new = ends
    if not old < new:
        raise ConfigError(f"--good {good} is not older than --bad {bad}")
    return [listed[v] for v in sorted(listed) if old < v <= new]


def index_releases(index: str, project: str, fetch: Fetch) -> list[Release]:
    """The releases of `project` on the index at `index` (a simple API root)."""
    url = f"{index.rstrip('/')}/{canonicalize_name(project)}/"
    return parse_index(fetch(url, _ACCEPT), project)
