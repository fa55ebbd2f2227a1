"""Dependency bumps a commit makes, read from its diff.

A culprit that changes a pin names a range of a dependency, not a line of the engine
(vLLM's "Bump Flashinfer version to 0.6.16.post3" changed requirements/cuda.txt, the
Dockerfile's `ARG FLASHINFER_VERSION` and docker/versions.json together). Read here:

- requirement lines (`requirements/*.txt`, `*.in`, `pyproject.toml`, `setup.py`, `setup.cfg`):
  `name==1.2`, `name>=1.2,<2`, quoted or not;
- a Dockerfile's `ARG NAME_VERSION=1.2`, named after the package a `pip install
  pkg==${NAME_VERSION}` line near it installs (else after the argument);
- docker/versions.json's `"NAME_VERSION": {"default": "1.2"}`, named as the ARG is.

Pure: text in, bumps out (`commit_bumps` reads a commit's diff with git).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

_REQUIREMENT_FILES = re.compile(
    r"(^|/)(requirements[^/]*\.(txt|in)|requirements[^/]*/(.*/)?[^/]+\.(txt|in)|"
    r"pyproject\.toml|setup\.py|setup\.cfg)$"
)
_DOCKERFILE = re.compile(r"(^|/)(Dockerfile[^/]*|[^/]*\.Dockerfile|[^/]*\.dockerfile)$")
_QUOTED = re.compile(
    r"""["']([A-Za-z0-9][A-Za-z0-9._\-\[\],]*\s*(?:===?|~=|>=|<=|!=|>|<)[^"']+)["']"""
)
_ARG = re.compile(r"^\s*ARG\s+([A-Za-z_][A-Za-z0-9_]*)\s*=\s*[\"']?([^\"'\s]+)[\"']?\s*$")
_PIP_ARG = re.compile(
    r"([A-Za-z0-9][A-Za-z0-9._\-]*)(?:\[[^\]]*\])?\s*===?\s*\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?"
)
_JSON_KEY = re.compile(r'^\s*"([A-Za-z_][A-Za-z0-9_]*)"\s*:\s*\{')
_JSON_DEFAULT = re.compile(r'^\s*"default"\s*:\s*"([^"]*)"')


@dataclass(frozen=True)
class Bump:
    """One dependency whose pin changed: `flashinfer-python 0.6.15.post1 → 0.6.16.post3`."""

    name: str
    """The package (canonical: lower case, `-`), or the build argument's name."""
    old: str
    """The old pin as written (`==0.6.15.post1`, `>=2.9`); empty where there was none."""
    new: str
    files: tuple[str, ...] = field(default=())
    """Where the diff changes it."""

    @property
    def old_version(self) -> str | None:
        """The version of an exact old pin (`==X`, an ARG's value), else None."""
        return _exact(self.old)

    @property
    def new_version(self) -> str | None:
        return _exact(self.new)

    @property
    def label(self) -> str:
        old = self.old_version or self.old or "(none)"
        new = self.new_version or self.new or "(none)"
        return f"{self.name} {old} → {new}"


def _exact(spec: str) -> str | None:
    for prefix in ("===", "=="):
        if spec.startswith(prefix) and "," not in spec and "*" not in spec:
            return spec[len(prefix) :].strip()
    return None


@dataclass
class _File:
    path: str
    removed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    context: list[str] = field(default_factory=list)
    before: list[str] = field(default_factory=list)
    """The old side's lines as the hunks show them, in order (context and removed)."""
    after: list[str] = field(default_factory=list)


def _files(diff: str) -> Iterator[_File]:
    """The files of a unified diff (`git show`/`git diff` output), each with its -, + and
    context lines."""
    current: _File | None = None
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            if current is not None:
                yield current
            current = None
        elif line.startswith("+++ "):
            path = line[4:].strip()
            current = _File(path[2:] if path.startswith("b/") else path)
        elif current is None:  # the header's `--- a/...`, `index ...`
            continue
        elif line.startswith("-"):
            current.removed.append(line[1:])
            current.before.append(line[1:])
        elif line.startswith("+"):
            current.added.append(line[1:])
            current.after.append(line[1:])
        elif line.startswith(" "):
            current.context.append(line[1:])
            current.before.append(line[1:])
            current.after.append(line[1:])
    if current is not None:
        yield current


def _requirements(lines: list[str]) -> dict[str, str]:
    """Package → its specifier, from requirement lines or quoted requirement strings."""
    found: dict[str, str] = {}
    for line in lines:
        text = line.split(" #", 1)[0].strip()
        candidates = _QUOTED.findall(text) or ([text] if text and text[0].isalnum() else [])
        for candidate in candidates:
            try:
                req = Requirement(candidate.strip().rstrip(","))
            except InvalidRequirement:
                continue
            found[canonicalize_name(req.name)] = str(req.specifier)
    return found


def _argument_packages(lines: list[str]) -> dict[str, str]:
    """Build argument → the package a `pip install pkg==${ARG}` line installs with it."""
    return {arg: canonicalize_name(pkg) for line in lines for pkg, arg in _PIP_ARG.findall(line)}


def _arguments(lines: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in lines:
        if m := _ARG.match(line):
            found[m.group(1)] = m.group(2)
    return found


def _json_defaults(lines: list[str]) -> dict[str, str]:
    """`"NAME": {"default": "x"}` of docker/versions.json, from the lines a hunk shows."""
    found: dict[str, str] = {}
    key: str | None = None
    for line in lines:
        if m := _JSON_KEY.match(line):
            key = m.group(1)
        elif key is not None and (m := _JSON_DEFAULT.match(line)):
            found[key] = m.group(1)
    return found


def bumps(diff: str) -> list[Bump]:
    """Every dependency pin the diff changes, one per package, in the order first seen."""
    by_name: dict[str, Bump] = {}
    argument_names: dict[str, str] = {}
    pending: list[tuple[str, str, str, str]] = []  # (argument, old, new, path)

    def add(name: str, old: str, new: str, path: str) -> None:
        if old == new:
            return
        seen = by_name.get(name)
        if seen is None:
            by_name[name] = Bump(name, old, new, (path,))
        elif path not in seen.files:  # the first file's pair is said; the others are where
            by_name[name] = Bump(name, seen.old, seen.new, (*seen.files, path))

    for f in _files(diff):
        if _REQUIREMENT_FILES.search(f.path):
            old, new = _requirements(f.removed), _requirements(f.added)
            for name in [*new, *(n for n in old if n not in new)]:
                add(name, old.get(name, ""), new.get(name, ""), f.path)
        elif _DOCKERFILE.search(f.path):
            argument_names |= _argument_packages([*f.context, *f.added])
            old, new = _arguments(f.removed), _arguments(f.added)
            for arg in [*new, *(a for a in old if a not in new)]:
                pending.append((arg, old.get(arg, ""), new.get(arg, ""), f.path))
        elif f.path.endswith("versions.json"):
            old_j, new_j = _json_defaults(f.before), _json_defaults(f.after)
            for arg in new_j:
                if arg in old_j:
                    pending.append((arg, old_j[arg], new_j[arg], f.path))
    for arg, old_value, new_value, path in pending:
        name = argument_names.get(arg, arg)
        add(
            name, f"=={old_value}" if old_value else "", f"=={new_value}" if new_value else "", path
        )
    return list(by_name.values())


PIN_FILES = ("*requirements*", "*requirements*/**", "*.in", "pyproject.toml", "setup.py",
             "setup.cfg", "*Dockerfile*", "*.dockerfile", "*versions.json")  # fmt: skip
"""Where pins live (git pathspecs, any folder): the culprit's diff is read for these only."""


def commit_bumps(repo: Path, commit: str) -> list[Bump]:
    """The bumps a commit makes (its diff against its first parent); [] when git cannot say."""
    specs = [f":(glob)**/{p}" for p in PIN_FILES]
    done = subprocess.run(
        ["git", "-C", str(repo), "show", "--format=", "--first-parent", "--no-renames", commit,
         "--", *specs],
        capture_output=True,
    )  # fmt: skip
    if done.returncode != 0:
        return []
    return bumps(done.stdout.decode("utf-8", "replace"))


def range_bumps(repo: Path, commits: list[str]) -> dict[str, list[Bump]]:
    """The bumps of each of `commits` that makes any (the dry run's flags), read with one
    `git log` of their diffs to the pin files (against each one's first parent); {} when
    git cannot say."""
    if not commits:
        return {}
    specs = [f":(glob)**/{p}" for p in PIN_FILES]
    done = subprocess.run(
        ["git", "-C", str(repo), "log", "--no-walk=unsorted", "--stdin", "-p",
         "--diff-merges=first-parent", "--no-renames", "--format=%x00%H", "--", *specs],
        input="\n".join(commits).encode(), capture_output=True,
    )  # fmt: skip
    if done.returncode != 0:
        return {}
    found: dict[str, list[Bump]] = {}
    for chunk in done.stdout.decode("utf-8", "replace").split("\0")[1:]:
        commit, _, diff = chunk.partition("\n")
        said = bumps(diff)
        if said:
            found[commit.strip()] = said
    return found
