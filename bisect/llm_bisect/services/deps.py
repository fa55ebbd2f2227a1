"""The deps service: the engine held at one build, the first bad release of a dependency.

    llm-bisect deps CONFIG --build REF --package NAME --good VER --bad VER [--index URL]
                           [--pre] [--yanked]

The releases of NAME after VER-good up to VER-bad (the index's list, less what
versions.sift leaves out unless asked: yanked releases, pre- and dev releases, and those
the engine's interpreter cannot install; the run says how many and why, and result.json
`left_out` lists them) become a small repository of versions, one commit each
(DIR/versions.git); the engine's build at REF is made once by the config's own strategies
(without build.strategies: the server command as it is, on the interpreter it runs; a server
that runs images is refused); each release is then installed over it (builds/dependency.py:
`{commit}` in the server command stays the engine's) and the run bisects that
repository as it does an engine's history: the same journal, resume, report and
result.json, whose culprit is the first bad release (`first_bad_version`). A release that
will not install is skip. A run resumed over another list of releases than it began with
(other flags; before yanked and pre-releases were left out, it took both) stops with one
line naming the flags it began with.

The search weighs verdicts as `run` does (`search.flake: auto`: any verdict may lie, the
answer needs the posterior's confidence). Confirmation does not apply: a release is no
change that reverts onto the bad end or picks onto the good one (`confirm` is off); the
answer rests on the posterior alone, and result.json's notes say so and name, by version,
each release whose verdict disagreed. `candidates.later` and `probe.fast` name or search
the engine's history, not releases: they are left out, and the run says so.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx
from packaging.version import Version

from ..builds import Build, Builder
from ..builds.cache import BuildCache
from ..builds.dependency import DependencyStrategy
from ..builds.wheel import MAX_PAGE_BYTES, find_uv
from ..client import within
from ..config import BuildCacheConfig, Config
from ..errors import ConfigError, LaunchError
from ..journal import FILENAME, read_journal
from ..kinds import LAUNCHERS
from ..outdir import hold
from ..probe import Progress
from ..redact import public_url
from ..report.documents import DepsDoc, LeftOut, ResultDocument
from ..runner import RunResult, write_outputs
from ..search import Status
from ..sources.git import GitSource
from ..sources.versions import (
    Release,
    Sifted,
    between,
    download,
    index_releases,
    installable,
    sift,
    version_at,
    version_history,
)
from .bisection import Terms, run_bisect
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
    left_out: dict[str, list[str]] = field(default_factory=dict)
    """The releases in the range left out, by why (versions.LEFT_OUT)."""


def _flags(pre: bool, yanked: bool) -> str:
    said = " ".join(f for f, on in (("--pre", pre), ("--yanked", yanked)) if on)
    return said or "neither --pre nor --yanked"


@dataclass(frozen=True)
class Dependency:
    """The dependency `deps` bisects: its name as pip spells it, the versions that work and
    that break, the index it comes from (None: $UV_DEFAULT_INDEX, $UV_INDEX_URL, else PyPI),
    and whether pre-releases and yanked releases between them are in (versions.sift)."""

    package: str
    good: str
    bad: str
    index: str | None = None
    pre: bool = False
    yanked: bool = False


def run_deps(
    s: Setup, out_dir: Path, *, build: str, dependency: Dependency, progress: Progress
) -> DepsResult:
    """Bisect the releases of `dependency` between its good and bad versions over the engine
    at `build`."""
    package, good, bad, index = (
        dependency.package,
        dependency.good,
        dependency.bad,
        dependency.index,
    )
    pre, yanked = dependency.pre, dependency.yanked
    if s.builder is None and LAUNCHERS[s.config.server.launcher].runs_images:
        raise ConfigError(
            f"deps: server.launcher {s.config.server.launcher!r} runs images, which a release "
            "installed into a folder of this machine does not reach: use a process or slurm "
            "server (with build.strategies, or the server command as it is)"
        )
    engine_commit = s.resolve(build, "--build")
    url = index or s.environ.get("UV_DEFAULT_INDEX") or s.environ.get("UV_INDEX_URL") or PYPI
    releases = index_releases(url, package, _fetch)
    ranged = between(releases, good, bad)  # both checked: versions the index has
    spelt = {r.version: str(r) for r in releases}  # `--good 1.0.0` is the index's `1.0`
    good, bad = spelt[Version(good)], spelt[Version(bad)]
    before = [r for r in releases if str(r) == good]
    try:
        engine = s.builder.build(engine_commit) if s.builder is not None else as_served(s)
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

        def sifted(pre: bool, yanked: bool) -> Sifted:
            return sift(ranged, before[0].version, pre=pre, yanked=yanked, supported=supported)

        chosen = sifted(pre, yanked)
        if chosen.left_out:
            asks = [f for f, why in (("--yanked", "yanked"), ("--pre", "pre-release"))
                    if why in chosen.left_out]  # fmt: skip
            progress.note(
                f"deps: {sum(len(v) for v in chosen.left_out.values())} release(s) left out: "
                f"{chosen.said()}"
                + (f"; {' and '.join(asks)} take{'s' * (len(asks) == 1)} them in" if asks else "")
            )
        kept = chosen.kept
        with hold(out_dir):
            repo = out_dir / "versions.git"
            over = f"engine: {engine_commit.commit}\nindex: {public_url(url)}"

            def history(these: list[Release]) -> dict[str, str]:
                return version_history(repo, package, [*before, *these], over)

            commits = history(kept)
            _same_releases(out_dir, commits, pre, yanked, lambda p, y: history(sifted(p, y).kept))
            commits = history(kept)  # the branch as this run's releases make it
        progress.note(
            f"deps: {len(kept)} release(s) of {package} after {good} up to {bad}, over "
            f"{engine_commit.short}"
        )
        progress.note(downloads_said(package, [*before, *kept], supported, public_url(url)))
        strategy = DependencyStrategy(
            package=package, engine=lambda: engine, uv=find_uv(), index=index,
            version_of=lambda c: version_at(repo, c.commit),
            environ={**s.environ, **s.env}, commit=engine_commit.commit,
        )  # fmt: skip
        cache = s.builder.cache if s.builder is not None else own_cache(out_dir)
        versions = replace(
            s,
            config=_over_releases(s.config, progress),
            source=GitSource(repo, "deps"),
            builder=Builder([strategy], cache),
        )
        done = run_bisect(
            versions, out_dir, good=commits[good], bad=commits[bad], progress=progress,
            terms=Terms(where=False),
        )  # fmt: skip
    finally:
        engine.release()
    culprit = done.result.culprit
    first_bad = version_at(repo, culprit.commit) if culprit else None
    left_out = [LeftOut.model_validate({"reason": why, "versions": [str(r) for r in gone]})
                for why, gone in chosen.left_out.items()]  # fmt: skip
    notes = [
        *done.result.notes,
        *_deps_notes(done.result, repo, package, progress),
        *_boundary_notes(package, good, kept, chosen.left_out, first_bad, progress),
    ]
    at = [str(r) for r in [*before, *kept]]
    held = DepsDoc(
        package=package, engine=engine_commit.commit, build=build, route=engine.route,
        good=good, bad=bad, index=public_url(index) if index else "", pre=pre, yanked=yanked,
        last_good_version=at[at.index(first_bad) - 1] if first_bad in at[1:] else None,
    )  # fmt: skip
    named = done.result.model_copy(
        update={"first_bad_version": first_bad, "left_out": left_out, "notes": notes,
                "deps": held}
    )  # fmt: skip
    done.result = write_outputs(out_dir, named, versions.scrub)
    return DepsResult(
        done, first_bad, [str(r) for r in kept],
        {why: [str(r) for r in gone] for why, gone in chosen.left_out.items()},
    )  # fmt: skip


def downloads_said(
    package: str, releases: Sequence[Release], supported: frozenset[str] | None, index: str
) -> str:
    """What the run downloads from the index, said before it starts (it never asks: CI has
    no terminal): a file of the package for each release it probes, at most all of them,
    and their size where the index lists it. Pure."""
    files = [download(r, supported) for r in releases]
    known = [size for _, size in files if size is not None]
    if len(known) == len(files):
        size = f"{_bytes(sum(known))} in all"
    elif known:
        size = f"at least {_bytes(sum(known))} (the index lists {len(known)} of their sizes)"
    else:
        size = "sizes not listed by the index"
    shown = ", ".join(name for name, _ in files[:3]) + (", ..." if len(files) > 3 else "")
    return (
        f"deps: downloads from {index} one file of {package} for each release it probes, "
        f"at most {len(files)} ({size}: {shown}), installed alone (--no-deps)"
    )


def _bytes(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB" if n >= 1e6 else f"{n} bytes"


AS_SERVED = "as served"
"""The engine's route without build.strategies: the server command as the config runs it."""


def served_python(command: Sequence[str]) -> str:
    """The interpreter a server command runs (no build.strategies): its first word where that
    is a python, else the one its script's `#!` line names (`vllm serve`), else python3."""
    found = shutil.which(command[0]) if command else None
    if found is None:
        return shutil.which("python3") or "python3"
    if PYTHON.fullmatch(Path(found).name):
        return found
    try:
        with open(found, "rb") as script:
            line = script.readline(512)
    except OSError:
        line = b""
    words = line[2:].decode(errors="replace").split() if line.startswith(b"#!") else []
    if words and Path(words[0]).name == "env" and len(words) > 1:
        words = [shutil.which(words[1]) or words[1]]
    if words and PYTHON.fullmatch(Path(words[0]).name):
        return words[0]
    return shutil.which("python3") or "python3"


PYTHON = re.compile(r"python[\d.]*")


def as_served(s: Setup) -> Build:
    """The engine without build.strategies: the config's server command as it runs (its
    `{commit}` the engine's), each release put first on its PYTHONPATH."""
    command = getattr(s.config.server, "command", None) or []
    python = served_python([str(w) for w in command])
    return Build(route=AS_SERVED, folder=s.base_dir, python=python, facts={"python": python})


def own_cache(out_dir: Path) -> BuildCache:
    """Where the releases are installed without build.strategies (no build cache named):
    DIR/builds."""
    return BuildCache(out_dir / "builds", int(BuildCacheConfig().disk_budget_gb * 1e9))


def _over_releases(config: Config, progress: Progress) -> Config:
    """The config as it applies to releases: the good release records its golden, a revert
    of a release means nothing (no confirmation), and what names or searches the engine's
    history (`candidates.later`, `probe.fast`) is left out, said."""
    set_ = {"probe.fast": config.probe.fast is not None,
            "candidates.later": bool(config.candidates.later)}  # fmt: skip
    left = [key for key, on in set_.items() if on]
    if left:
        they = ("they apply", "are") if len(left) > 1 else ("it applies", "is")
        progress.note(
            f"deps: {' and '.join(left)} {they[1]} left out: {they[0]} to the engine's history "
            "(`run`), not to releases of a dependency"
        )
    return config.model_copy(
        update={
            "golden": None,
            "confirm": False,
            "candidates": config.candidates.model_copy(update={"later": []}),
            "probe": config.probe.model_copy(update={"fast": None}),
        }
    )


def _same_releases(
    out_dir: Path,
    commits: dict[str, str],
    pre: bool,
    yanked: bool,
    other: Callable[[bool, bool], dict[str, str]],
) -> None:
    """A run resumed from DIR's journal bisects the releases it began with: where the
    journal's are those of other flags (a run begun before yanked releases and
    pre-releases were left out by default: both), a one-line error names them."""
    state = read_journal(out_dir / FILENAME).state
    if state is None:
        return
    began = {c.commit for c in state.plan.sequence}
    if began == set(commits.values()):
        return
    for p, y in ((True, True), (True, False), (False, True), (False, False)):
        if (p, y) != (pre, yanked) and set(other(p, y).values()) == began:
            raise ConfigError(
                f"{out_dir}: holds a run begun with {_flags(p, y)} (one begun before llm-bisect "
                "left yanked releases and pre-releases out took both): resume it with the "
                "same, or pick a new --out"
            )


TAKES_IN = {"yanked": "--yanked", "pre-release": "--pre"}
"""The flag that takes in releases left out for each reason (versions.LEFT_OUT)."""


def _boundary_notes(
    package: str,
    good: str,
    kept: list[Release],
    left_out: dict[str, list[Release]],
    first_bad: str | None,
    progress: Progress,
) -> list[str]:
    """The releases left out between the answer's last good release and its first bad, each
    also said: one of them may be the first bad, and its flag would take it in."""
    if first_bad is None:
        return []
    at = next(n for n, r in enumerate(kept) if str(r) == first_bad)
    last_good = str(kept[at - 1]) if at else good
    low, high = Version(last_good), Version(first_bad)
    notes = [
        f"{package} {r} ({why}) lies between the answer's last good release {last_good} and "
        f"its first bad {first_bad}, left out: the first bad may be it ({flag} takes it in)."
        for why, gone in left_out.items()
        if (flag := TAKES_IN.get(why))
        for r in gone
        if low < r.version < high
    ]
    for line in notes:
        progress.note(f"deps: {line}")
    return notes


def _deps_notes(result: ResultDocument, repo: Path, package: str, progress: Progress) -> list[str]:
    """What deps adds to the answer's notes, each also said: the releases whose verdicts
    disagreed with it (by version: their commits mean nothing to a reader), and why it was
    not confirmed."""
    notes = []
    search = result.search
    for d in search.disagreed if search is not None else []:
        release = version_at(repo, d.commit) or d.commit[:12]
        times = f"{d.verdicts.count(d.verdict)} of {len(d.verdicts)} probes"
        notes.append(
            f"{package} {release} tested {d.verdict.value} in "
            f"{times if len(d.verdicts) > 1 else 'its only probe'} "
            f"({', '.join(v.value for v in d.verdicts)}), against the answer: weighed as a "
            "likely lie."
        )
    if result.status is Status.FOUND:
        held = (
            f"the posterior search alone ({search.posterior:.4f}, confidence "
            f"{search.confidence:g}, every verdict weighed as one that may lie)"
            if search is not None
            else "its verdicts taken as facts (search.flake: 0)"
        )
        notes.append(
            "Confirmation does not apply to releases: a release is no change that reverts "
            f"onto the bad end or picks onto the good one. The answer rests on {held}."
        )
    for line in notes:
        progress.note(f"deps: {line}")
    return notes
