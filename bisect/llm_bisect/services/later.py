"""Where the regression ends (`candidates.later`): once a run found its culprit, each build
newer than the bad end (a later release, a nightly) is probed with the run's checks and
golden.

    good ──── culprit ──── bad end ──── later₁ ──── later₂ ...
                                         still bad?  good again?

A later build good again bounds the fix: the newest such gives the `--find-fix` command that
finds it (report/markdown.py). A later ref whose tree is one the run probed already (its
culprit's revert, a probe of the range) takes that verdict, costing nothing; a build that
cannot be tested is said as such, never good or bad.

The probes are journalled in DIR/later.jsonl, so a run killed here resumes without repeating
one; DIR/later.json keeps the answer for `report DIR`.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

from ..errors import ConfigError
from ..escape import shell
from ..journal import Journal, begin_side, side_probes
from ..model import Candidate, Verdict
from ..probe import ProbeContext, probe
from ..redact import Scrub
from ..report.documents import LaterDoc, ResultDocument
from ..report.markdown import fix_command, later_said, run_again
from ..runner import write_atomic
from ..search import Mode, Status
from ..sources.picks import tree_of
from ..terminal import printable

JOURNAL = "later.jsonl"
STORED = "later.json"
VERSION = 1


def _when(date: str) -> float:
    """An ISO 8601 date with its offset as Unix time (`%aI` keeps each author's zone: the
    strings do not sort); 0 where it does not read."""
    try:
        return datetime.fromisoformat(date).timestamp()
    except ValueError:
        return 0.0


def resolve_later(
    refs: Sequence[str],
    resolve: Callable[[str, str], Candidate],
    bad: Candidate | None = None,
    is_ancestor: Callable[[str, str], bool] | None = None,
) -> list[tuple[str, Candidate]]:
    """Each of `candidates.later` with its commit, oldest first: by ancestry where two are
    related (a later release after an earlier one), by date otherwise; ConfigError before
    anything starts for one that names no commit (`no such ref 'x'`), or (given the `bad`
    end) one that is the bad end or older than it. A release tag on another branch (v0.28.0
    after v0.27.0, on its own branch) is newer, not older."""
    found = [(ref, resolve(ref, "candidates.later")) for ref in refs]
    if bad is None or is_ancestor is None:
        return found
    for ref, c in found:
        if c.commit == bad.commit or is_ancestor(c.commit, bad.commit):
            raise ConfigError(
                f"candidates.later: {ref!r} ({c.short}) is not newer than the bad end "
                f"{bad.short} (it is {'the bad end' if c.commit == bad.commit else 'older'}): "
                "a later build comes after it"
            )

    def older_first(a: tuple[str, Candidate], b: tuple[str, Candidate]) -> int:
        x, y = a[1], b[1]
        if x.commit == y.commit:
            return 0
        if is_ancestor(x.commit, y.commit):
            return -1
        if is_ancestor(y.commit, x.commit):
            return 1
        a_at, b_at = _when(x.date), _when(y.date)
        return (a_at > b_at) - (a_at < b_at)

    return sorted(found, key=functools.cmp_to_key(older_first))


def probe_later(
    repo: Path,
    out_dir: Path,
    result: ResultDocument,
    later: Sequence[tuple[str, Candidate]],
    ctx: ProbeContext,
    note: Callable[[str], None],
    scrub: Scrub,
    is_ancestor: Callable[[str, str], bool],
) -> list[LaterDoc]:
    """result.json's `later` for a run that found its culprit; [] otherwise (or none given).
    Each says whether it has the culprit (`is_ancestor(culprit, build)`)."""
    if not later or result.status is not Status.FOUND or result.mode is not Mode.REGRESSION:
        return []
    culprit = result.culprit.commit if result.culprit else None
    probed: dict[str, tuple[str, Verdict, str]] = {}  # tree -> (commit, verdict, reason)
    confirmed = result.confirmation.probes if result.confirmation else []
    for commit, verdict, reason in [
        *((p.commit, p.verdict.value, p.reason) for p in result.probes),
        *((p.commit, p.verdict, p.reason) for p in confirmed if p.commit and p.verdict),
    ]:
        if commit and verdict in ("good", "bad"):
            probed.setdefault(tree_of(repo, commit), (commit, Verdict(verdict), reason or ""))

    def has(commit: str) -> bool:
        return culprit is None or is_ancestor(culprit, commit)

    digest = hashlib.sha256(f"{result.good}\0{result.bad}".encode()).hexdigest()[:16]
    path = out_dir / JOURNAL
    done = side_probes(path, digest)  # another range's is dropped
    found: list[LaterDoc] = []
    with Journal(path, scrub) as journal:
        begin_side(journal, "later", digest, VERSION)
        for ref, candidate in later:
            commit = candidate.commit
            tree = tree_of(repo, commit)
            same = probed.get(tree) if tree else None
            if same is not None and commit not in done:
                was, verdict, reason = same
                why = reason if was == commit else f"the tree of {was[:12]}, probed: {reason}"
                found.append(LaterDoc(ref=ref, commit=commit, verdict=verdict, reason=why,
                                      contains=has(commit)))  # fmt: skip
                continue
            if commit not in done:
                note(printable(f"later: probing {ref} ({candidate.short})"))
                made = probe(candidate, out_dir / "later" / candidate.short, ctx)
                journal.append("probe", ref=ref, outcome=made.to_json())
                done[commit] = made
            outcome = done[commit]
            if tree and outcome.verdict in (Verdict.GOOD, Verdict.BAD):
                probed.setdefault(tree, (commit, outcome.verdict, outcome.reason))
            found.append(LaterDoc(ref=ref, commit=commit, verdict=outcome.verdict,
                                  reason=outcome.reason, contains=has(commit)))  # fmt: skip
    for x in found:
        note(printable(f"later: {x.ref} ({x.commit[:12]}): {later_said(x)}"))
    stored = {"good": result.good, "bad": result.bad, "later": [x.model_dump() for x in found]}
    write_atomic(out_dir / STORED, json.dumps(scrub.doc(stored), indent=2) + "\n")
    return [LaterDoc.model_validate(x) for x in scrub.doc(stored)["later"]]


def with_later(result: ResultDocument, out_dir: Path) -> ResultDocument:
    """result.json with what DIR/later.json says of its range (`report DIR`)."""
    try:
        stored = json.loads((out_dir / STORED).read_text())
        found = [LaterDoc.model_validate(x) for x in stored["later"]]
        ends = (stored["good"], stored["bad"])
    except (OSError, ValueError, KeyError, TypeError):
        return result
    if ends != (result.good, result.bad) or result.status is not Status.FOUND:
        return result
    return result.model_copy(update={"later": found})


def next_steps(doc: ResultDocument) -> list[str]:
    """The terminal's last lines: how to bisect what remains after a culprit whose revert
    did not fix the bad end, and how to find the fix a later build bounds."""
    lines = []
    again = run_again(doc)
    if again is not None:
        lines.append(
            "confirm: to bisect what remains, set `confirm: continue` in the config and run "
            f"the same command again (it resumes): {shell(again)}"
        )
    fix = fix_command(doc)
    if fix is not None:
        lines.append(f"later: to find the fix: {shell(fix)}")
    return [printable(line) for line in lines]
