"""The edge of the priors (priors.py): each candidate's touched paths and which of them exist
at the record's commit, read from the clone; the weighing itself is pure."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path

from ..checks.golden import Loads, load
from ..errors import ConfigError
from ..model import Candidate
from ..priors import Weight, weights
from ..sources import Repository
from ..sources.git import NoRepository


def touched(source: Repository, commits: Sequence[str]) -> dict[str, list[str]]:
    """The paths each commit changes against its first parent (one `git log`)."""
    return {s.commit: [c.path for c in s.changes] for s in source.steps(commits)}


def present(source: Repository, commit: str, paths: Sequence[str], deep: bool = True) -> set[str]:
    """Which of `paths` the tree of `commit` holds (one `git ls-tree`); not `deep`, no paths:
    its top-level entries."""
    if deep and not paths:
        return set()
    done = subprocess.run(
        ["git", "-C", str(source.path), "ls-tree", *(["-r"] if deep else []), "-z",
         "--name-only", commit, "--", *paths],
        capture_output=True,
    )  # fmt: skip
    if done.returncode != 0:
        return set()  # the record's commit not in this clone: every path "absent", full
    return {p.decode("utf-8", "surrogateescape") for p in done.stdout.split(b"\0") if p}


def weigh_candidates(
    source: Repository, candidates: Sequence[Candidate], record: Loads
) -> dict[str, Weight]:
    """Each candidate's prior Weight by the golden's record of its server's loads."""
    if isinstance(source, NoRepository):
        return {}
    paths = touched(source, [c.commit for c in candidates])
    wanted = sorted({p for ps in paths.values() for p in ps})
    roots = present(source, record.commit, [], deep=False)
    return weights(paths, record.files, present(source, record.commit, wanted), roots)


def priors_of(
    source: Repository, candidates: Sequence[Candidate]
) -> Callable[[Loads], Mapping[str, float]]:
    """runner.Priors for these candidates (the search's sequence after the old end)."""

    def weigh(record: Loads) -> dict[str, float]:
        return {c: w.weight for c, w in weigh_candidates(source, candidates, record).items()}

    return weigh


def planned(
    source: Repository, golden: Path | None, candidates: Sequence[Candidate], on: bool
) -> tuple[dict[str, Weight], str]:
    """`candidates`: each candidate's prior Weight from the golden the config names (where it
    holds its server's loads), and a line saying where they come from or why there are none."""
    if not on:
        return {}, "priors: off (search.priors: false, or search.flake: 0)"
    record = None
    if golden is not None and golden.is_file():
        with suppress(ConfigError):
            record = load(golden).loads
    if record is None:
        return {}, (
            "priors: none yet: the run records which engine files the good end's server "
            "executes with the golden, and weighs the candidates by it from then on"
        )
    found = weigh_candidates(source, candidates, record)
    low = sum(1 for w in found.values() if w.low)
    return found, (
        f"priors: {low} of {len(candidates)} candidates weighed low, by the files the server "
        f"executed at {record.commit[:12]} (golden: {golden})"
    )
