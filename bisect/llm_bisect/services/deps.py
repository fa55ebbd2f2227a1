"""The deps service: the engine held at one build, the first bad release of a dependency.

    llm-bisect deps CONFIG --build REF --package NAME --good VER --bad VER [--index URL]

The releases of NAME after VER-good up to VER-bad (the index's list: pre- and post-releases
included) become a small repository of versions, one commit each (DIR/versions.git); the
engine's build at REF is made once by the config's own strategies; each release is then
installed over it (builds/dependency.py) and the run bisects that repository as it does an
engine's history: the same journal, resume, report and result.json, whose culprit is the
first bad release (`first_bad_version`). A release that will not install is skip.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
from packaging.version import Version

from ..builds import Builder
from ..builds.cache import BuildCache
from ..builds.dependency import DependencyStrategy
from ..builds.wheel import MAX_PAGE_BYTES, find_uv
from ..client import within
from ..errors import ConfigError, LaunchError
from ..outdir import hold
from ..probe import Progress
from ..redact import public_url
from ..runner import RunResult, write_outputs
from ..sources.git import GitSource
from ..sources.versions import (
    between,
    index_releases,
    installable,
    version_at,
    version_history,
)
from .bisection import run_bisect
from .setup import Setup

PYPI = "https://pypi.org/simple"
INDEX_TIMEOUT_S = 30.0


TAGS_SCRIPT = (
    "import sys; sys.path.insert(0, sys.argv[1]); from packaging import tags; "
    "print('\\n'.join(str(t) for t in tags.sys_tags()))"
)
"""The wheel tags an interpreter takes, by this installation's own `packaging` (pure Python)."""


def wheel_tags(python: str) -> frozenset[str] | None:
    """The wheel tags the engine's interpreter installs; None where it cannot say (then every
    release is tried)."""
    import subprocess

    import packaging

    where = str(Path(packaging.__file__).resolve().parent.parent)
    try:
        done = subprocess.run([python, "-I", "-c", TAGS_SCRIPT, where], capture_output=True,
                              text=True, timeout=60, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = frozenset(done.stdout.split())
    return found if done.returncode == 0 and found else None


def _fetch(url: str, accept: str) -> bytes:
    """One index page, read up to MAX_PAGE_BYTES; ConfigError naming what failed."""
    shown = public_url(url)
    try:
        with httpx.stream(
            "GET", url, headers={"Accept": accept}, timeout=INDEX_TIMEOUT_S, follow_redirects=True
        ) as reply:
            if reply.status_code != 200:
                raise ConfigError(f"--index: {shown} answered HTTP {reply.status_code}")
            body = b""
            for chunk in within(reply.iter_bytes(), time.monotonic() + 4 * INDEX_TIMEOUT_S):
                body += chunk
                if len(body) > MAX_PAGE_BYTES:
                    raise ConfigError(f"--index: {shown} is larger than {MAX_PAGE_BYTES >> 20} MiB")
            return body
    except httpx.HTTPError as exc:
        raise ConfigError(f"--index: {shown}: {type(exc).__name__}: {exc}") from None


@dataclass(frozen=True)
class DepsResult:
    done: RunResult
    first_bad_version: str | None
    versions: list[str]
    """The releases bisected, oldest first (good excluded)."""


def run_deps(
    s: Setup,
    out_dir: Path,
    *,
    build: str,
    package: str,
    good: str,
    bad: str,
    index: str | None,
    progress: Progress,
) -> DepsResult:
    """Bisect the releases of `package` between `good` and `bad` over the engine at `build`."""
    if s.builder is None:
        raise ConfigError("deps: the engine's build needs build.strategies (the release is "
                          "installed over it)")  # fmt: skip
    engine_commit = s.resolve(build, "--build")
    url = index or PYPI
    releases = index_releases(url, package, _fetch)
    ranged = between(releases, good, bad)  # both checked: versions the index has
    spelt = {r.version: str(r) for r in releases}  # `--good 1.0.0` is the index's `1.0`
    good, bad = spelt[Version(good)], spelt[Version(bad)]
    before = [r for r in releases if str(r) == good]
    try:
        engine = s.builder.build(engine_commit)
    except LaunchError as exc:
        raise ConfigError(
            f"--build: the engine's build at {engine_commit.short} failed: {exc}"
        ) from None
    try:
        supported = wheel_tags(engine.python)
        for end, key in ((before[0], "--good"), (ranged[-1], "--bad")):
            if not installable(end, supported):
                raise ConfigError(
                    f"{key}: {package} {end} has no file the engine's interpreter can install "
                    f"(its wheels are for other platforms: {', '.join(end.files[:2])})"
                )
        kept = [r for r in ranged if installable(r, supported)]
        if len(kept) < len(ranged):  # each would cost a probe only to say skip
            gone = [str(r) for r in ranged if r not in kept]
            progress.note(
                f"deps: {len(gone)} release(s) left out, no file the engine's interpreter "
                f"can install: {', '.join(gone[:5])}{', ...' if len(gone) > 5 else ''}"
            )
        ranged = kept
        with hold(out_dir):
            repo = out_dir / "versions.git"
            over = f"engine: {engine_commit.commit}\nindex: {public_url(url)}"
            commits = version_history(repo, package, [*before, *ranged], over)
        progress.note(
            f"deps: {len(ranged)} release(s) of {package} after {good} up to {bad}, over "
            f"{engine_commit.short}"
        )
        strategy = DependencyStrategy(
            package=package, engine=lambda: engine, uv=find_uv(), index=index,
            version_of=lambda c: version_at(repo, c.commit),
            environ={**s.environ, **s.env},
        )  # fmt: skip
        cache: BuildCache = s.builder.cache
        versions = replace(
            s,
            # the good release records its golden; a revert of a version means nothing
            config=s.config.model_copy(update={"golden": None, "confirm": False}),
            source=GitSource(repo, "deps"),
            builder=Builder([strategy], cache),
        )
        done = run_bisect(
            versions, out_dir, good=commits[good], bad=commits[bad], progress=progress
        )
    finally:
        engine.release()
    culprit = done.result.culprit
    first_bad = version_at(repo, culprit.commit) if culprit else None
    if first_bad is not None:
        named = done.result.model_copy(update={"first_bad_version": first_bad})
        done.result = write_outputs(out_dir, named, versions.scrub)
    return DepsResult(done, first_bad, [str(r) for r in ranged])
