"""The released versions of a package between two, from a package index (PEP 503 / PEP 691).

A dependency bump (flashinfer-python 0.6.15.post1 → 0.6.16.post3) names a range of the
dependency's releases; the first bad one among them is found by bisecting that list, the
engine held still. The list is every version the index has files for, in PEP 440 order,
`good` excluded and `bad` included (`between`), less what `sift` leaves out unless asked:

    yanked            every file of it yanked (PEP 592): pulled by its authors, as pip skips it
    pre-release       a, b, rc and .dev releases, as pip skips them without `--pre`; where an
                      end the user names is one, pre-releases count (pip's rule for a
                      specifier that names one)
    not installable   no sdist, and no wheel the engine's interpreter takes (it would cost
                      a probe only to say skip); never taken in

An end is never left out: the user named it (a yanked end still installs, by its exact pin).

Reading the index is the only I/O, through `Fetch` (one GET, the body); parsing is pure.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

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
from .picks import STAMP

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
    files: tuple[str, ...] = ()
    """The file names the index lists for it (wheels, sdists)."""
    sizes: tuple[int | None, ...] = ()
    """Each file's size in bytes, where the index lists it (PEP 700 JSON), else None."""

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
    sized: dict[str, int] = {}
    text = body.decode("utf-8", "replace")
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
            files = [(f["filename"], bool(f.get("yanked"))) for f in doc.get("files", [])]
            sized = {
                f["filename"]: f["size"]
                for f in doc.get("files", [])
                if type(f.get("size")) is int  # PEP 700; a bool is no size
            }
        except RecursionError:
            raise ConfigError(f"{project}: the index's JSON page is nested too deep") from None
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            why = f"{type(exc).__name__}: {exc}"[:200]
            raise ConfigError(f"{project}: the index's JSON page is malformed ({why})") from None
        wrong = [name for name, _ in files if not isinstance(name, str)]
        if wrong:
            shown = repr(wrong[0])[:40]
            raise ConfigError(f"{project}: the index's JSON page has a filename {shown}")
    else:
        files = [(link.filename, link.yanked) for link in links(text)]
    yanked: dict[Version, bool] = {}
    names: dict[Version, list[str]] = {}
    for filename, is_yanked in files:
        version = _version_of(filename, canonicalize_name(project))
        if version is not None:
            yanked[version] = yanked.get(version, True) and is_yanked
            names.setdefault(version, []).append(filename)
    return [
        Release(v, yanked[v], tuple(names[v]), tuple(sized.get(f) for f in names[v]))
        for v in sorted(yanked)
    ]


def download(release: Release, supported: frozenset[str] | None) -> tuple[str, int | None]:
    """The file an install of the release downloads (a wheel the interpreter with these
    wheel tags takes, else an sdist, else its first) and its size where the index lists it.
    Pure."""
    sizes = release.sizes or (None,) * len(release.files)
    found = list(zip(release.files, sizes, strict=True))
    for name, size in found:
        if name.endswith(".whl"):
            try:
                _, _, _, tags = parse_wheel_filename(name)
            except InvalidWheelFilename:
                continue
            if supported is None or any(str(t) in supported for t in tags):
                return name, size
    sdists = [(n, z) for n, z in found if not n.endswith(".whl")]
    return (sdists or found or [(str(release), None)])[0]


def installable(release: Release, supported: frozenset[str] | None) -> bool:
    """Whether an interpreter with these `supported` wheel tags (`cp311-cp311-manylinux_2_28_
    x86_64`, ...; None: not known) can install the release: an sdist, or a wheel of one of
    them. A release of wheels for other platforms only would cost a probe to say skip. Pure."""
    if supported is None or not release.files:
        return True
    for name in release.files:
        if not name.endswith(".whl"):
            return True  # an sdist: it may build
        try:
            _, _, _, tags = parse_wheel_filename(name)
        except InvalidWheelFilename:
            continue
        if any(str(t) in supported for t in tags):
            return True
    return False


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
    local = old.local is not None or new.local is not None
    return [  # builds of a release for another platform (`+cu124`): only when an end is one
        listed[v] for v in sorted(listed) if old < v <= new and (local or v.local is None)
    ]


LEFT_OUT: Final = ("yanked", "pre-release", "not installable")
"""Why `sift` leaves a release out, in the order it asks."""


@dataclass(frozen=True)
class Sifted:
    """The releases between two ends, and those left out, by why."""

    kept: list[Release]
    """What the search bisects, oldest first, the bad end last."""
    left_out: dict[str, list[Release]]
    """Per reason of LEFT_OUT (only those with a release), oldest first; each release under
    its first reason."""

    def said(self) -> str:
        """`2 yanked (1.0.post1, 1.1.post2), 1 pre-release (1.1rc1)`; "" when none."""
        parts = []
        for why, gone in self.left_out.items():
            shown = ", ".join(str(r) for r in gone[:5]) + (", ..." if len(gone) > 5 else "")
            what = {"pre-release": "pre-release" + ("s" if len(gone) != 1 else ""),
                    "not installable": "with no file the engine's interpreter can install",
                    }.get(why, why)  # fmt: skip
            parts.append(f"{len(gone)} {what} ({shown})")
        return ", ".join(parts)


def sift(
    ranged: Sequence[Release],
    good: Version,
    *,
    pre: bool,
    yanked: bool,
    supported: frozenset[str] | None = None,
) -> Sifted:
    """`ranged` (between's list, the bad end last) less the yanked releases (unless
    `yanked`), the pre- and dev releases (unless `pre`, or an end is one) and those the
    interpreter with the wheel tags `supported` cannot install (each would cost a probe
    only to say skip). The ends stay whatever they are. Pure."""
    ends = {good, ranged[-1].version} if ranged else {good}
    pre = pre or any(v.is_prerelease for v in ends)
    kept: list[Release] = []
    left_out: dict[str, list[Release]] = {}
    for release in ranged:
        why = None
        if release.version in ends:
            pass
        elif release.yanked and not yanked:
            why = "yanked"
        elif release.version.is_prerelease and not pre:
            why = "pre-release"
        elif not installable(release, supported):
            why = "not installable"
        if why is None:
            kept.append(release)
        else:
            left_out.setdefault(why, []).append(release)
    return Sifted(kept, {why: left_out[why] for why in LEFT_OUT if why in left_out})


def index_releases(index: str, project: str, fetch: Fetch) -> list[Release]:
    """The releases of `project` on the index at `index` (a simple API root)."""
    url = f"{index.rstrip('/')}/{canonicalize_name(project)}/"
    return parse_index(fetch(url, _ACCEPT), project)


VERSION_FILE = "VERSION"


def _git(repo: Path, *args: str, input: bytes | None = None) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], input=input, capture_output=True,
        env={**os.environ, **STAMP},
    )  # fmt: skip
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip()
        raise ConfigError(f"the versions repository {repo}: git {args[0]} failed: {why}")
    return done.stdout.decode().strip()


def version_history(
    repo: Path, project: str, releases: Sequence[Release], over: str = ""
) -> dict[str, str]:
    """A repository whose history is the releases, oldest first, one commit each (its
    subject `NAME VERSION`, its VERSION file `NAME==VERSION` then `over`: what the releases
    are installed over, so that another engine build or index makes other commits) on branch
    `main`; each version's commit. The same releases make the same commits (a resumed run
    finds them)."""
    name = canonicalize_name(project)
    if not (repo / "HEAD").exists():
        repo.mkdir(parents=True, exist_ok=True)
        _git(repo, "init", "-q", "--bare", "-b", "main")
    if not releases:
        return {}
    # one `git fast-import` for the whole history: three git calls per release cost some
    # 24 minutes for an index of 100k links. Its commits are byte for byte the ones
    # hash-object, mktree and commit-tree made (STAMP's names and dates), so a resumed run
    # finds its probes.
    who = f"{STAMP['GIT_COMMITTER_NAME']} <{STAMP['GIT_COMMITTER_EMAIL']}> 0 +0000"
    stream = bytearray(b"reset refs/heads/main\n")
    for i, release in enumerate(releases):
        text = (f"{name}=={release}\n" + (f"{over.rstrip()}\n" if over else "")).encode()
        subject = f"{name} {release}" + (" (yanked)" if release.yanked else "")
        message = f"{subject}\n".encode()
        stream += b"blob\nmark :%d\ndata %d\n%s\n" % (2 * i + 1, len(text), text)
        stream += b"commit refs/heads/main\nmark :%d\n" % (2 * i + 2)
        stream += f"author {who}\ncommitter {who}\n".encode()
        stream += b"data %d\n%s" % (len(message), message)
        stream += f"M 100644 :{2 * i + 1} {VERSION_FILE}\n\n".encode()
    marks = repo / "llm-bisect-marks"
    try:
        _git(repo, "fast-import", "--quiet", "--force", f"--export-marks={marks}",
             input=bytes(stream))  # fmt: skip
        by_mark = dict(line.split(" ", 1) for line in marks.read_text().splitlines())
    finally:
        marks.unlink(missing_ok=True)
    return {str(r): by_mark[f":{2 * i + 2}"].strip() for i, r in enumerate(releases)}


def version_at(repo: Path, commit: str) -> str | None:
    """The version a commit of a versions repository stands for; None for any other."""
    done = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "blob", f"{commit}:{VERSION_FILE}"],
        capture_output=True,
    )
    first = done.stdout.decode(errors="replace").partition("\n")[0].strip()
    return first.partition("==")[2] or None if done.returncode == 0 else None
