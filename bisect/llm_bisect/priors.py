"""Priors from what the model runs: a candidate's weight before any probe, from the files it
touches against the engine files the good end's server executed (the golden's `loads`,
recorded by the path hook of data/loads). Pure: the paths come in, a weight and why go out;
git is read at the edge (services/priors.py).

    touches ...                                             weight
    only package files never loaded (another model's file,  LOW   `low: touches only
      another platform's backend), docs, tests                     vllm/.../glm5.py, never loaded`
    a loaded file, compiled code (csrc/, CMakeLists.txt,     1     `full: touches ..., loaded`
      setup.py), a dependency pin (requirements/,
      pyproject.toml, docker/), a file absent at the
      record's commit, anything the record cannot judge

Never zero: a wrong prior costs starts, never a wrong answer (the posterior search still
needs its verdicts to reach the confidence).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

LOW = 0.2
"""The weight of a candidate that touches only what the model never runs. With the Kimi
shape (12 commits, 9 of them such) the three others start with 62 % of the prior instead of
25 %: about a bit, a start saved, where the prior is right; where it is wrong the culprit's
side starts with half its uniform share, a bit lost, at most a start more. Lower would save
little more where right and cost more where wrong (log2(1 / LOW) bits at worst)."""

COMPILED = ("csrc/", "cmake/", "CMakeLists.txt", "setup.py", "setup.cfg")
"""Paths of compiled code and its build: what a server runs but imports no module for."""
PINS = ("requirements/", "requirements", "pyproject.toml", "docker/", "Dockerfile", "uv.lock")
"""Dependency pins: another torch or kernel library changes every path."""
DOCS = ("docs/", "doc/")
DOC_SUFFIXES = (".md", ".rst")
TESTS = ("tests/", "test/")


@dataclass(frozen=True)
class Weight:
    """A candidate's prior weight and why, for a person."""

    weight: float
    why: str

    @property
    def low(self) -> bool:
        return self.weight < 1.0


FULL_UNJUDGED = Weight(1.0, "full: touches nothing the record can judge")


def module_of(path: str) -> str:
    """The module a Python file holds, by its path: `a/b/c.py` and `a/b/c/__init__.py` are
    both `a.b.c` (the record names files as the import system found them)."""
    stem = path.removesuffix(".py")
    return stem.removesuffix("/__init__").replace("/", ".")


def _starts(path: str, prefixes: Iterable[str]) -> bool:
    name = path.rsplit("/", 1)[-1]
    return any(path.startswith(p) or (not p.endswith("/") and name.startswith(p)) for p in prefixes)


def _kind(path: str, loaded: frozenset[str], packages: frozenset[str], present: bool) -> str:
    """What one touched path is: loaded, compiled, pin, absent, unjudged (each full), or
    unloaded, docs, tests (each low)."""
    if _starts(path, COMPILED):
        return "compiled code"
    if _starts(path, PINS) or path.endswith(".lock"):
        return "a dependency pin"
    top = path.split("/", 1)[0]
    if top in packages and path.endswith(".py"):
        if not present:
            return "absent at the record's commit"
        return "loaded" if module_of(path) in loaded else "never loaded"
    if _starts(path, DOCS) or path.endswith(DOC_SUFFIXES):
        return "docs"
    if _starts(path, TESTS):
        return "tests"
    return "not judged by the record"


LOW_KINDS = ("never loaded", "docs", "tests")
FULL_ORDER = (
    "loaded",
    "compiled code",
    "a dependency pin",
    "absent at the record's commit",
    "not judged by the record",
)


def engine(loaded_files: Collection[str], roots: Collection[str]) -> frozenset[str]:
    """The packages of the repository the server loaded files of: the top-level folders
    (`roots`, at the record's commit) that are a loaded file's first component. Empty: the
    record is of another code base (the simulator's own modules), and judges nothing."""
    tops = frozenset(f.split("/", 1)[0] for f in loaded_files if "/" in f)
    return tops & frozenset(roots)


def weigh(
    touched: Sequence[str],
    loaded_files: Collection[str],
    present: Collection[str],
    roots: Collection[str],
) -> Weight:
    """The prior weight of a commit touching `touched` (repository paths), given the files the
    good end's server loaded (`loaded_files`, repository-relative), which of `touched` exist
    at the commit the record was taken at (`present`) and that commit's top-level entries
    (`roots`)."""
    packages = engine(loaded_files, roots)
    if not touched or not packages:
        return FULL_UNJUDGED
    loaded = frozenset(module_of(f) for f in loaded_files if f.endswith(".py"))
    there = frozenset(present)
    kinds = {p: _kind(p, loaded, packages, p in there) for p in touched}
    for kind in FULL_ORDER:
        hit = sorted(p for p, k in kinds.items() if k == kind)
        if hit:
            more = f" and {len(hit) - 1} more" if len(hit) > 1 else ""
            return Weight(1.0, f"full: touches {hit[0]}{more}, {kind}")
    unloaded = sorted(p for p, k in kinds.items() if k == "never loaded")
    other = [k for k in ("docs", "tests") if k in kinds.values()]
    if unloaded:
        shown = ", ".join(unloaded[:3]) + (
            f" and {len(unloaded) - 3} more" if len(unloaded) > 3 else ""
        )
        tail = f" (and {' and '.join(other)})" if other else ""
        return Weight(LOW, f"low: touches only {shown}, never loaded{tail}")
    return Weight(LOW, f"low: touches only {' and '.join(other)}")


def weights(
    touched: Mapping[str, Sequence[str]],
    loaded_files: Collection[str],
    present: Collection[str],
    roots: Collection[str],
) -> dict[str, Weight]:
    """Each commit's Weight (`touched`: commit -> its paths)."""
    return {c: weigh(paths, loaded_files, present, roots) for c, paths in touched.items()}


def share(prior: Mapping[str, float], sequence: Sequence[str], commit: str) -> tuple[float, float]:
    """The prior mass on `commit` among the candidates after the old end (`sequence`, the
    old end first), with these weights and uniform: (with the prior, uniform)."""
    inner = sequence[1:]
    if commit not in inner:
        return 0.0, 0.0
    total = sum(prior.get(c, 1.0) for c in inner)
    return prior.get(commit, 1.0) / total, 1.0 / len(inner)
