"""Overlay builds: every file of the package a commit changes, written over a precompiled
install of the package.

    base's site-packages/vllm/ ──hard links (copies across filesystems)──► build/vllm/
    git diff base..commit -- vllm/ ──► each changed file written over (links broken first),
                                       with its mode (a symlink as a symlink); removed deleted
    server: {python} = the base's interpreter, PYTHONPATH = build/

The base is fixed (`venv` or `image`, with `base_commit`) or `nearest`: the nearest
first-parent ancestor that a strategy before this one has a precompiled artifact of (a
wheel, an image, an install of that commit, a build in the cache), as vLLM's own
VLLM_USE_PRECOMPILED takes the wheel of the merge base with main:

    main        A ── B ── C ── D          a wheel each
    release          └── r1 ── r2         none: r1 and r2 are overlays of B's wheel

For the Docker launcher (no venv: `package_dir` None) the build is only a stage,
files/<repo path> plus the removed paths in its facts; images.py writes it over the
package inside the base's image.

An overlay applies only when no compiled source differs between the base and the
candidate (`compiled` globs over the whole path, `!` to leave out, the last match
wins; by default what the `target` builds); else the route names the file that stops it.

Route facts are computed once per range, in linear time: one `git log` gives each
commit's changes against its first parent, folded into the paths where it differs from
its base (`Drift`), so no diff is made per candidate:

    drift(commit) = drift(parent) + changes(commit)     (for each path: the base's entry)

`compiled_changes` and `Drift` are pure; `RouteFacts` reads the repository; `make` writes.
"""

from __future__ import annotations

import errno
import fnmatch
import heapq
import os
import platform
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import ConfigDict, model_validator

from ..config import StrategyBase
from ..errors import ConfigError, LaunchError
from ..jsonvalue import Json
from ..kinds import STRATEGIES, BuildContext, StrategyKind, StrategyRules
from ..model import Candidate
from ..sources import ABSENT, Change, Step
from . import Build, ImageTarget, base_image_fits

NEAREST_LIMIT = 1000
"""First-parent ancestors a `nearest` overlay looks through for a base."""
LINK = "120000"
EXECUTABLE = "100755"
SUBMODULE = "160000"


COMPILED = (
    "CMakeLists.txt",
    "setup.py",
    "pyproject.toml",
    "cmake/*",
    "csrc/*",
    "rust/*",
    "requirements/*",
    "*.cu",
    "*.cuh",
    "*.cpp",
    "*.cc",
    "*.c",
    "*.h",
    "*.hpp",
    "*.cmake",
    "!tests/*",
    "!docs/*",
    "!examples/*",
    "!benchmarks/*",
    "!requirements/test/*",
    "!requirements/dev.txt",
    "!requirements/lint.txt",
    "!requirements/docs.*",
)
"""Paths whose change needs a compiled build (a glob over the whole path; `!` leaves out;
the last match decides): the root's build files, csrc/, cmake/, the Rust frontend, the
requirements, C/C++/CUDA sources anywhere but in tests, docs, examples and benchmarks."""
_OTHER_DEVICES = ("rocm", "xpu", "tpu")
NOT_BUILT_BY: dict[str, tuple[str, ...]] = {
    "any": (),
    "cuda": (
        "!csrc/cpu/*",
        "!csrc/rocm/*",
        "!cmake/cpu_extension.cmake",
        "!requirements/cpu*",
        "!requirements/build/cpu.txt",
        *(f"!requirements/{d}*" for d in _OTHER_DEVICES),
        *(f"!requirements/build/{d}.txt" for d in _OTHER_DEVICES),
    ),
    "rocm": (
        "!csrc/cpu/*",
        "!cmake/cpu_extension.cmake",
        "!requirements/cpu*",
        "!requirements/build/cpu.txt",
        "!requirements/cuda.txt",
        "!requirements/build/cuda.txt",
        "!requirements/xpu*",
        "!requirements/tpu*",
    ),
    "cpu": (
        "!*.cu",
        "!*.cuh",
        "!csrc/rocm/*",
        "!requirements/cuda.txt",
        "!requirements/build/cuda.txt",
        *(f"!requirements/{d}*" for d in _OTHER_DEVICES),
        *(f"!requirements/build/{d}.txt" for d in _OTHER_DEVICES),
    ),
}
"""What a build for each target does not compile: a CUDA build is not changed by
csrc/cpu/, a CPU build not by *.cu."""
Target = Literal["any", "cuda", "rocm", "cpu"]


def compiled_patterns(target: str) -> list[str]:
    """The compiled-sources rule of a target (`any`: everything any target builds)."""
    return [*COMPILED, *NOT_BUILT_BY[target]]


class History(Protocol):
    """What an overlay reads of the repository (sources/git.py)."""

    def steps(self, commits: Sequence[str]) -> Iterator[Step]: ...

    def lineage(self, commit: str) -> Iterator[Step]: ...

    def differences(self, old: str, new: str) -> list[Change]: ...

    def blobs(self, ids: Sequence[str]) -> dict[str, bytes | None]: ...


class Earlier(Protocol):
    """What a `nearest` overlay needs of the strategies before it (the Builder's view)."""

    def artifact(self, commit: str) -> str | None:
        """The name of the first strategy before the overlay with a precompiled artifact of
        this commit; None when none has one."""
        ...

    def build(self, commit: str) -> Build:
        """That artifact's build (made now or found in the cache); LaunchError if it fails."""
        ...

    def names(self) -> list[str]:
        """The strategies before the overlay."""
        ...


def compiled_changes(paths: Sequence[str], patterns: Sequence[str]) -> list[str]:
    """The paths an overlay cannot carry, in their order. Pure.

    A pattern is a glob over the whole path from the repository's root (`*` crosses `/`:
    `*.cu` is any .cu, `setup.py` is the root's only); `!pattern` leaves paths out again;
    the last pattern that matches decides."""
    return [p for p in paths if _matches(p, patterns)]


def _matches(path: str, patterns: Sequence[str]) -> bool:
    found = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        if fnmatch.fnmatchcase(path, pattern[1:] if negated else pattern):
            found = not negated
    return found


@dataclass(frozen=True)
class Rule:
    """Which paths an overlay writes and which stop it."""

    package: str
    """The package's folder in the repository (and its installed name)."""
    compiled: tuple[str, ...]

    def mine(self, path: str) -> bool:
        return path.startswith(self.package + "/")

    def blocks(self, path: str) -> bool:
        return _matches(path, self.compiled)


@dataclass(frozen=True)
class Facts:
    """What a candidate's route says: the differences from its base, counted."""

    base: str
    """The base commit (40 hex)."""
    files: int
    """Files of the package that differ: to write or to remove."""
    python: int
    """Of them, Python files."""
    compiled: int
    """Compiled sources that differ (any: no overlay)."""
    first: str = ""
    """The first of them, in git's order."""
    via: str = ""
    """`nearest`: the strategy whose artifact the base is."""

    def detail(self) -> str:
        base = self.base[:12]
        if self.compiled:
            more = f" and {self.compiled - 1} more" if self.compiled > 1 else ""
            nearest = f"; nearest: {self.via}" if self.via else ""
            return f"{self.first}{more} changed since {base} (compiled sources{nearest})"
        other = self.files - self.python
        others = f" and {other} other files" if other else ""
        nearest = f" (nearest: {self.via})" if self.via else ""
        return f"{self.python} Python files{others} over {base}{nearest}"


class Drift:
    """The paths where a commit differs from a base, each with the base's entry; moved one
    commit on by that commit's changes against its parent. Pure."""

    def __init__(self, base: str, rule: Rule, kinds: dict[str, tuple[bool, bool, bool]]) -> None:
        self.base = base
        self.rule = rule
        self.differ: dict[str, str] = {}
        """Path → its `<mode> <blob>` in the base (ABSENT where the base lacks it)."""
        self.files = self.python = 0
        self._compiled: set[str] = set()
        self._heap: list[str] = []
        self._kinds = kinds
        """Path → (in the package, Python, compiled), shared by every drift of a rule."""

    def move(self, changes: Sequence[Change]) -> None:
        """To the next commit, given its changes against the one before."""
        for change in changes:
            was = change.path in self.differ
            at_base = self.differ.get(change.path, change.old)
            now = change.new != at_base
            if now:
                self.differ[change.path] = at_base
            elif was:
                del self.differ[change.path]
            if now != was:
                self._count(change.path, 1 if now else -1)

    def _count(self, path: str, by: int) -> None:
        kind = self._kinds.get(path)
        if kind is None:
            kind = self._kinds[path] = (
                self.rule.mine(path),
                path.endswith(".py"),
                self.rule.blocks(path),
            )
        mine, python, compiled = kind
        if mine:
            self.files += by
            self.python += by if python else 0
        if compiled:
            if by > 0:
                self._compiled.add(path)
                heapq.heappush(self._heap, path)
            else:
                self._compiled.discard(path)

    def facts(self, via: str = "") -> Facts:
        while self._heap and self._heap[0] not in self._compiled:
            heapq.heappop(self._heap)
        first = self._heap[0] if self._heap else ""
        return Facts(self.base, self.files, self.python, len(self._compiled), first, via)


class RouteFacts:
    """Each commit's Facts against its base, from the range `survey` names: one `git log`
    read as far as the commits asked for, each commit's facts computed once.

    Fixed base: a commit carries its first parent's drift on by one step (reached from the
    commit computed before by steps: a side branch and its merge too); the first of a
    range, or a commit apart from it, is one diff. `nearest`: the base is found by walking first
    parents back (the artifact checks are the Builder's, each made once), and every commit
    between the base and the candidate gets its facts on the way forward."""

    def __init__(
        self,
        history: History,
        rule: Rule,
        *,
        base: str | None = None,
        artifact: Callable[[str], str | None] | None = None,
        limit: int = NEAREST_LIMIT,
    ) -> None:
        self.history = history
        self.rule = rule
        self.base = base
        self.artifact = artifact
        self.limit = limit
        self._facts: dict[str, Facts | str] = {}
        """Commit → its facts, or why it has no base."""
        self._steps: dict[str, Step] = {}
        self._surveyed: set[str] = set()
        self._pending: Iterator[Step] | None = None
        self._lineage: tuple[str, Iterator[Step]] | None = None
        self._last: tuple[str, Drift, str] | None = None
        """The commit whose drift was computed last, its drift and the base's `via`."""
        self._depth: dict[str, int] = {}
        self._root: dict[str, str] = {}
        """Fixed base: a computed commit's first-parent distance from, and name of, the one
        whose drift came from a diff (commits under one root reach each other by steps)."""
        self._kinds: dict[str, tuple[bool, bool, bool]] = {}
        self._lock = threading.RLock()

    def survey(self, commits: Sequence[str]) -> None:
        """The range routes will be asked for, in topological order (oldest first)."""
        with self._lock:
            self._surveyed = set(commits)
            self._pending = self.history.steps(commits)

    def facts(self, commit: str) -> Facts | str:
        """The commit's facts, or why no base applies."""
        with self._lock:
            found = self._facts.get(commit)
            if found is None:
                found = self._fixed(commit) if self.base is not None else self._nearest(commit)
            return found

    # -- a fixed base ---------------------------------------------------------------------

    def _fixed(self, commit: str) -> Facts | str:
        assert self.base is not None
        step = self._steps.get(commit) or (
            self._read_survey(commit) if commit in self._surveyed else None
        )
        drift = self._reach(step.parent) if step is not None and step.parent else None
        if step is not None and drift is not None:
            drift.move(step.changes)
            self._depth[commit] = self._depth[step.parent or ""] + 1
            self._root[commit] = self._root[step.parent or ""]
        else:  # the first of a range, or a commit apart: one diff
            drift = self._drift(self.base)
            drift.move(self.history.differences(self.base, commit))
            self._depth[commit], self._root[commit] = 0, commit
        self._last = (commit, drift, "")
        found = self._facts[commit] = drift.facts()
        return found

    def _reach(self, commit: str) -> Drift | None:
        """The drift of the commit computed last, moved along first parents to `commit`
        (steps undone up to their common ancestor, then done down); None when `commit`
        lies in no tree of commits computed from the same diff.

            last ─ x ─ y           undo y, x; do a, b
              └─ a ─ b  commit
        """
        if self._last is None or commit not in self._depth:
            return None
        at, drift, _ = self._last
        if self._root.get(at) != self._root[commit]:
            return None
        down: list[str] = []
        there = commit
        while at != there:
            if self._depth[at] >= self._depth[there]:
                step = self._steps[at]
                drift.move([Change(c.path, c.new, c.old) for c in step.changes])
                at = step.parent or ""
            else:
                down.append(there)
                there = self._steps[there].parent or ""
        for name in reversed(down):
            drift.move(self._steps[name].changes)
        return drift

    # -- the nearest base ----------------------------------------------------------------

    def _nearest(self, commit: str) -> Facts | str:
        assert self.artifact is not None
        chain: list[Step] = []
        at = commit
        while True:
            step = self._step(at)
            if step is None:
                return self._none(chain, f"{at[:12]} cannot be read from the repository")
            chain.append(step)
            if step.parent is None:
                return self._none(chain, "no first-parent ancestor has a precompiled artifact")
            via = self.artifact(step.parent) or ""
            if via:
                drift = self._drift(step.parent)
                break
            last = self._last
            if last is not None and step.parent == last[0] and last[2]:
                drift, via = last[1], last[2]  # the commit before has the same base: go on
                break
            if len(chain) >= self.limit:
                return self._none(
                    chain, f"none of the {self.limit} nearest first-parent ancestors has one"
                )
            at = step.parent
        for step in reversed(chain):
            drift.move(step.changes)
            self._facts[step.commit] = drift.facts(via)
        self._last = (commit, drift, via)
        found = self._facts[commit]
        return found

    def _none(self, chain: list[Step], why: str) -> str:
        for step in chain:
            self._facts[step.commit] = why
        return why

    # -- reading steps -------------------------------------------------------------------

    def _drift(self, base: str) -> Drift:
        return Drift(base, self.rule, self._kinds)

    def _read_survey(self, commit: str) -> Step | None:
        """The surveyed range's log, read up to this commit."""
        while self._pending is not None and commit not in self._steps:
            step = next(self._pending, None)
            if step is None:
                self._pending = None
                break
            self._steps[step.commit] = step
        return self._steps.get(commit)

    def _step(self, commit: str) -> Step | None:
        """A commit's step: from the surveyed range, else from a first-parent walk."""
        found = self._steps.get(commit)
        if found is None and commit in self._surveyed:
            found = self._read_survey(commit)
        if found is None:
            if self._lineage is None or self._lineage[0] != commit:
                self._lineage = (commit, self.history.lineage(commit))
            found = next(self._lineage[1], None)
            if found is None or found.commit != commit:
                self._lineage = None
                return None
            self._steps[commit] = found
            if found.parent is not None:
                self._lineage = (found.parent, self._lineage[1])
        return found


def installed_package(python: str, package: str) -> Path:
    """Where `package` is installed for this interpreter (its folder)."""
    code = (
        "import importlib.util, os, sys; s = importlib.util.find_spec(sys.argv[1]); "
        "print(os.path.dirname(s.origin) if s and s.origin else '')"
    )
    try:
        done = subprocess.run(
            [python, "-I", "-c", code, package], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"build: cannot run '{python}' ({exc})") from None
    where = done.stdout.strip()
    if done.returncode != 0 or not where:
        raise ConfigError(f"build: '{python}' has no package '{package}' installed")
    return Path(where)


def link_or_copy(source: str, dest: str) -> None:
    """A hard link (the file's disk is shared), a copy where links cannot be made (another
    filesystem, a link limit, a filesystem without them)."""
    try:
        os.link(source, dest)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EMLINK, errno.EPERM, errno.ENOTSUP):
            raise
        shutil.copy2(source, dest)


def _remove(dest: Path) -> None:
    if dest.is_dir() and not dest.is_symlink():
        shutil.rmtree(dest)
    elif dest.is_symlink() or dest.exists():
        dest.unlink()  # a hard link: never written through
    cache = dest.parent / "__pycache__"
    if dest.suffix == ".py" and cache.is_dir():
        for stale in cache.glob(f"{dest.stem}.*.pyc"):
            stale.unlink()


def _inside(out: Path, path: str) -> Path:
    """`out / path`, when no folder on the way is a link (a linked folder of the installed
    package: writing there would write into the install itself)."""
    dest = out / path
    for folder in dest.relative_to(out).parents:
        if folder != Path(".") and (out / folder).is_symlink():
            raise LaunchError(f"overlay: {path} lies under the link {folder} of the package")
    return dest


def write_entry(dest: Path, mode: str, data: bytes) -> None:
    """One file of a commit at `dest`: its bytes and mode, or a symlink. Anything there
    before is removed first (a hard-linked file is never written through)."""
    _remove(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if mode == LINK:
        os.symlink(os.fsdecode(data), dest)
        return
    dest.write_bytes(data)
    dest.chmod(0o755 if mode == EXECUTABLE else 0o644)


class OverlayStrategy:
    """Link the base's installed package, write the candidate's changed files over it."""

    name = "overlay"

    def __init__(
        self,
        history: History,
        *,
        python: str,
        package_dir: Path | None,
        package: str,
        base_commit: str | None,
        compiled: Sequence[str],
        stage: bool = False,
    ) -> None:
        """`base_commit` None: the nearest (`attach` names the strategies before it);
        `stage`: the build is a stage for an image (Docker launcher)."""
        self._made_with = (history, python, package_dir, package, base_commit, compiled, stage)
        self.history = history
        self.python = python
        self.package_dir = package_dir
        self.package = package
        self.base_commit = base_commit
        self.rule = Rule(package, tuple(compiled))
        self.stage = stage
        self.cache_name = "overlay-stage" if self.stage else "overlay"
        if base_commit is None:
            self.cache_name += "-nearest"
        self.earlier: Earlier | None = None
        self.routes = RouteFacts(history, self.rule, base=base_commit, artifact=self._artifact)

    def attach(self, earlier: Earlier) -> None:
        """The strategies a `nearest` overlay takes its base from."""
        self.earlier = earlier

    def detached(self) -> OverlayStrategy:
        """The same overlay, attached to nothing, its route facts not read yet."""
        history, python, package_dir, package, base_commit, compiled, stage = self._made_with
        return OverlayStrategy(
            history,
            python=python,
            package_dir=package_dir,
            package=package,
            base_commit=base_commit,
            compiled=compiled,
            stage=stage,
        )

    def _artifact(self, commit: str) -> str | None:
        return self.earlier.artifact(commit) if self.earlier is not None else None

    def survey(self, commits: Sequence[str]) -> None:
        self.routes.survey(commits)

    def precompiled(self, candidate: Candidate) -> bool:
        """A fixed base's install is a precompiled artifact of the base commit itself."""
        return candidate.commit == self.base_commit

    def base_of(self, candidate: Candidate) -> str | None:
        """`nearest`: the candidate's base when this overlay applies to it (a fixed base is
        the config's)."""
        if self.base_commit is not None:
            return None
        facts = self.routes.facts(candidate.commit)
        return facts.base if isinstance(facts, Facts) and not facts.compiled else None

    def identity(self, candidate: Candidate) -> dict[str, Json]:
        """What makes its build besides the commit (a cache key, once keys carry one): the
        base commit (a `nearest` one per candidate), the install, the package, the machine."""
        facts = self.routes.facts(candidate.commit)
        base = facts.base if isinstance(facts, Facts) else None
        return {
            "package": self.package,
            "base": "nearest" if self.base_commit is None else "fixed",
            "base_commit": self.base_commit or base,
            "base_route": facts.via if isinstance(facts, Facts) else "",
            "python": self.python,
            "package_dir": str(self.package_dir or ""),
            "stage": self.stage,
            "machine": platform.machine(),
        }

    def applies(self, candidate: Candidate) -> tuple[bool, str]:
        facts = self.routes.facts(candidate.commit)
        if isinstance(facts, str):
            names = ", ".join(self.earlier.names()) if self.earlier is not None else ""
            return False, f"nearest: {facts} ({names})"
        return not facts.compiled, facts.detail()

    def _changes(self, candidate: Candidate) -> tuple[Facts, list[Change]]:
        """The candidate's facts and the package's changes since its base; LaunchError when
        no overlay can build it."""
        facts = self.routes.facts(candidate.commit)
        if isinstance(facts, str):
            raise LaunchError(f"overlay: {facts}")
        if facts.compiled:
            raise LaunchError(f"overlay: {facts.first} changed (compiled sources)")
        changes = self.history.differences(facts.base, candidate.commit)
        mine = [c for c in changes if self.rule.mine(c.path)]
        for change in mine:
            if change.new.split(" ")[0] == SUBMODULE or change.old.split(" ")[0] == SUBMODULE:
                raise LaunchError(f"overlay: {change.path} is a submodule")
        return facts, mine

    def _contents(self, candidate: Candidate, changes: list[Change]) -> dict[str, bytes]:
        """Blob → bytes of every file to write; LaunchError for one the repository lacks."""
        wanted = [c.new.split(" ")[1] for c in changes if c.new != ABSENT]
        found = self.history.blobs(wanted)
        for change in changes:
            blob = change.new.split(" ")[1]
            if change.new != ABSENT and found.get(blob) is None:
                raise LaunchError(
                    f"overlay: cannot read {change.path} at {candidate.short}: "
                    f"its blob {blob[:12]} is not in the repository"
                )
        return {blob: data for blob, data in found.items() if data is not None}

    def make(self, candidate: Candidate, out: Path, log: Path) -> dict[str, Json]:
        facts, changes = self._changes(candidate)
        contents = self._contents(candidate, changes)
        removed = [c.path for c in changes if c.new == ABSENT]
        written = [c for c in changes if c.new != ABSENT]
        base = {"base_commit": facts.base}
        if facts.via:
            base["base_route"] = facts.via
        if self.stage:
            for change in written:
                mode, blob = change.new.split(" ")
                write_entry(out / "files" / change.path, mode, contents[blob])
            log.write_text(
                f"overlay stage of {candidate.commit} over {facts.base}: "
                f"{len(written)} to write, {len(removed)} to remove\n"
            )
            return {**base, "written": len(written), "removed": len(removed),
                    "removed_paths": removed}  # fmt: skip
        base_build = self.earlier.build(facts.base) if self.earlier and self._nearest() else None
        try:  # the base's build is held while its files are linked into this one
            package_dir = self._base_package(facts, base_build)
            shutil.copytree(
                package_dir, out / self.package, symlinks=True, copy_function=link_or_copy
            )
        finally:
            if base_build is not None:
                base_build.release()
        for path in removed:
            _remove(_inside(out, path))
        for change in written:
            mode, blob = change.new.split(" ")
            write_entry(_inside(out, change.path), mode, contents[blob])
        log.write_text(
            f"overlay of {candidate.commit} over {facts.base} ({package_dir}): "
            f"{len(written)} written, {len(removed)} removed\n"
        )
        return {**base, "written": len(written), "removed": len(removed)}

    def _nearest(self) -> bool:
        return self.base_commit is None and self.earlier is not None

    def _base_package(self, facts: Facts, build: Build | None) -> Path:
        """The base's installed package: the venv's, or (nearest) the base's own build's."""
        if build is None:
            assert self.package_dir is not None
            return self.package_dir
        path = build.env.get("PYTHONPATH", "").split(os.pathsep)[0]
        if path and (Path(path) / self.package).is_dir():  # the base is an overlay itself
            return Path(path) / self.package
        try:
            return installed_package(build.python, self.package)
        except ConfigError as exc:
            raise LaunchError(f"overlay: the base {facts.base[:12]}'s build: {exc}") from None

    def load(self, candidate: Candidate, folder: Path, facts: Mapping[str, Any]) -> Build:
        if self.stage:
            return Build("overlay", folder, "", {}, dict(facts))
        if self.base_commit is None:  # runs the base's interpreter: its build is held too
            assert self.earlier is not None
            base = self.earlier.build(str(facts["base_commit"]))
            env = {"PYTHONPATH": str(folder)}
            return Build("overlay", folder, base.python, env, dict(facts), lease=base.lease)
        return Build("overlay", folder, self.python, {"PYTHONPATH": str(folder)}, dict(facts))


# ---- the `type: overlay` strategy kind -------------------------------------------------------


class OverlayStrategyConfig(StrategyBase):
    """The commit's files written over a precompiled install of `package`: in `venv` or
    `image` (with its `base_commit`), or (`base: nearest`) over the build of its nearest
    ancestor that a strategy before this one has a precompiled artifact of."""

    model_config = ConfigDict(**StrategyBase.model_config, title="OverlayStrategy")  # as before

    type: Literal["overlay"]
    """`overlay`: the commit's files over a precompiled install."""
    venv: str | None = None
    """Process launcher: a venv whose site-packages holds the precompiled package (relative
    to the config)."""
    image: str | None = None
    """Docker launcher: the base image holding the precompiled package; each build is an
    image derived from it."""
    base: Literal["nearest"] | None = None
    """`nearest`: no fixed install; the base is the candidate's nearest first-parent
    ancestor with a wheel, an image or a cached build of the strategies before this one (a
    release branch's commits: the wheel of its branch point on main)."""
    python: str | None = None
    """With `image`: the image's interpreter (default `python3`)."""
    package: str = "vllm"
    """The installed package; the repository's folder of the same name maps onto it."""
    base_commit: str | None = None
    """The commit the installed package was built from (a ref); with `image`, default: the
    commit the base image names (label, env, tag or version, as for an image end)."""
    target: Target = "any"
    """What the precompiled install was built for (`cuda`, `rocm`, `cpu`): only the sources
    that target compiles stop an overlay (`any`: every one)."""
    compiled: list[str] | None = None
    """Glob patterns over whole paths (`!` leaves out, the last match decides) of what an
    overlay cannot carry; default: the target's. Taken as written: it replaces the default."""

    @model_validator(mode="after")
    def _one_base(self) -> OverlayStrategyConfig:
        if self.base == "nearest":
            given = [k for k in ("venv", "image", "base_commit") if getattr(self, k) is not None]
            if given:
                raise ValueError(
                    f"overlay: base: nearest takes its base from the strategies before it; "
                    f"leave out {given[0]}"
                )
            return self
        if (self.venv is None) == (self.image is None):
            raise ValueError(
                "overlay takes one of venv (launcher: process) or image (docker), or base: nearest"
            )
        if self.venv is not None and self.base_commit is None:
            raise ValueError("overlay: base_commit is the commit the venv's package was built from")
        if self.python is not None and self.image is None:
            raise ValueError("overlay: python is the image's interpreter; with venv, leave it out")
        return self

    def patterns(self) -> list[str]:
        """The compiled-sources rule in force."""
        return list(self.compiled) if self.compiled is not None else compiled_patterns(self.target)


def from_config(
    cfg: OverlayStrategyConfig, ctx: BuildContext
) -> tuple[OverlayStrategy, ImageTarget | None]:
    """Over the nearest ancestor's build, over a base image, or over a venv here."""
    if cfg.base == "nearest":
        strategy = OverlayStrategy(
            ctx.source,
            python="",
            package_dir=None,
            package=cfg.package,
            base_commit=None,
            compiled=cfg.patterns(),
            stage=ctx.images,
        )
        # in an image, the base image is the base's own (images.py)
        target = ImageTarget("", cfg.python or "python3", cfg.package) if ctx.images else None
        return strategy, target
    if cfg.image is not None:
        strategy = OverlayStrategy(
            ctx.source,
            python="",
            package_dir=None,
            package=cfg.package,
            base_commit=ctx.resolve(cfg.base_commit or cfg.image, f"{ctx.key}.base_commit"),
            compiled=cfg.patterns(),
            stage=True,
        )
        return strategy, ImageTarget(cfg.image, cfg.python or "python3", cfg.package)
    assert cfg.venv is not None
    venv = ctx.base_dir / Path(cfg.venv).expanduser()
    python = venv / "bin" / "python"
    if not python.exists():
        raise ConfigError(f"{ctx.key}.venv: no venv at '{cfg.venv}' (no bin/python)")
    strategy = OverlayStrategy(
        ctx.source,
        python=str(python),
        package_dir=installed_package(str(python), cfg.package),
        package=cfg.package,
        base_commit=ctx.resolve(cfg.base_commit or "", f"{ctx.key}.base_commit"),
        compiled=cfg.patterns(),
    )
    return strategy, None


def _validate(cfg: OverlayStrategyConfig, rules: StrategyRules) -> None:
    if cfg.base != "nearest":
        base_image_fits(cfg.type, cfg.image, rules.key, rules.images)
        return
    kinds_before = {s.type for s in rules.before} - {"overlay"}
    fixed = any(isinstance(s, OverlayStrategyConfig) and s.base is None for s in rules.before)
    if not kinds_before and not fixed:
        raise ValueError(
            f"{rules.key}: base: nearest needs a strategy before it (image, wheel, "
            "command or an overlay with a fixed base) whose builds it starts from"
        )
    if cfg.python is not None and not rules.images:
        raise ValueError(f"{rules.key}: python is the base image's interpreter (docker)")


KIND = STRATEGIES.register(
    StrategyKind(
        "overlay", OverlayStrategyConfig, make=from_config, validate=_validate, repository=True
    )
)
