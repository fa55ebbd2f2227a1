"""Delta debugging (ddmin) over the differences between a good and a bad server setup.

At one build, a GOOD setup serves right and a BAD one does not; they differ in command-line
flags and environment variables. A trial applies a subset of the differences to GOOD and
probes the result. `next_step` finds the smallest subset that still turns GOOD bad
(Zeller & Hildebrandt's ddmin: 1-minimal, removing any one difference makes it good).

Pure: the outcome of each trial comes from `known` (what the journal holds); the first trial
the algorithm needs that `known` lacks is returned as the next to run. A run killed at any
moment resumes by replaying the algorithm over its journal and repeats no trial. A trial
that could not be tested is `UNRESOLVED`: never evidence of badness; the answer then says
that a smaller set may exist.

    differences  d0 d1 d2 d3 d4 d5        GOOD = {}        BAD = {d0..d5}
    split in n=2 [d0 d1 d2] [d3 d4 d5]   a part that is bad alone: keep it, n = 2
                                          a complement that is bad: keep it, n = n - 1
                                          neither: split finer, n = 2n (until singletons)
"""

from __future__ import annotations

import enum
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .errors import ConfigError


class Outcome(str, enum.Enum):
    """What a trial showed."""

    GOOD = "good"
    BAD = "bad"
    UNRESOLVED = "unresolved"
    """Could not be tested (skip, unsure): never evidence either way."""


@dataclass(frozen=True)
class Difference:
    """One thing GOOD and BAD set differently: a flag (with its values) or a variable."""

    kind: str
    """`flag` or `env`."""
    name: str
    """The flag (`--moe-backend`) or the variable's name."""
    good: tuple[str, ...] | None
    """How GOOD sets it: the flag's words as written (`--x=1`, or `--x 1`, or `--x`), the
    variable's value as one item; None where GOOD does not set it."""
    bad: tuple[str, ...] | None

    @property
    def label(self) -> str:
        """How the report names it: `--moe-backend marlin`, `VLLM_USE_DEEP_GEMM=1`,
        `without --enforce-eager` (a removal)."""
        if self.kind == "env":
            return f"unset {self.name}" if self.bad is None else f"{self.name}={self.bad[0]}"
        if self.bad is None:
            return f"without {self.name}"
        return shlex.join(self.bad)


@dataclass(frozen=True)
class Need:
    """The next trial to run: these differences applied to GOOD."""

    subset: frozenset[int]


@dataclass(frozen=True)
class Minimal:
    """The answer: the smallest set found that turns GOOD bad."""

    subset: tuple[int, ...]
    unresolved: int
    """Trials that could not be tested on the way: more than 0 means a smaller set may
    exist (the set is minimal among what could be tested)."""


@dataclass(frozen=True)
class NotBad:
    """BAD (all differences) tested good, or could not be tested: nothing to find."""

    outcome: Outcome


@dataclass(frozen=True)
class GoodIsBad:
    """GOOD (no difference) tested bad, or could not be tested: the differences do not
    explain it."""

    outcome: Outcome


DeltaStep = Need | Minimal | NotBad | GoodIsBad


class _Missing(Exception):
    def __init__(self, subset: frozenset[int]) -> None:
        self.subset = subset


def _split(c: Sequence[int], n: int) -> list[tuple[int, ...]]:
    """`c` in n parts of near-equal size, in order."""
    size, extra = divmod(len(c), n)
    parts, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        parts.append(tuple(c[start:end]))
        start = end
    return [p for p in parts if p]


def next_step(count: int, known: Mapping[frozenset[int], Outcome]) -> DeltaStep:
    """The next trial ddmin needs over `count` differences, or its answer.

    GOOD (no difference) is tried first (its probe records the golden the others are
    judged by), then BAD (every difference): both ends must reproduce.
    """
    if count < 1:
        raise ConfigError("configs: GOOD and BAD set the same flags and variables")
    unresolved: set[frozenset[int]] = set()

    def test(subset: frozenset[int]) -> Outcome:
        if subset not in known:
            raise _Missing(subset)
        outcome = known[subset]
        if outcome is Outcome.UNRESOLVED:
            unresolved.add(subset)
        return outcome

    everything = frozenset(range(count))
    try:
        if (good := test(frozenset())) is not Outcome.GOOD:
            return GoodIsBad(good)
        if (bad := test(everything)) is not Outcome.BAD:
            return NotBad(bad)
        c: tuple[int, ...] = tuple(range(count))
        n = 2
        while len(c) >= 2:
            parts = _split(c, n)
            for part in parts:
                if test(frozenset(part)) is Outcome.BAD:
                    c, n = part, 2
                    break
            else:
                for part in parts if n > 2 else ():  # with two parts, each is the other's rest
                    rest = tuple(i for i in c if i not in part)
                    if test(frozenset(rest)) is Outcome.BAD:
                        c, n = rest, max(n - 1, 2)
                        break
                else:
                    if n >= len(c):
                        break
                    n = min(len(c), 2 * n)
        return Minimal(c, len(unresolved))
    except _Missing as missing:
        return Need(missing.subset)


def flag_groups(argv: Sequence[str]) -> tuple[list[str], dict[str, tuple[str, ...]]]:
    """The leading words (program, subcommand, model) and each `--flag` with its words.

    A flag's words are the flag as written (`--x=1` or `--x`) and the words after it up to
    the next word starting with `-` (none: a bare switch); a negative number is a value. A
    flag given twice keeps every copy, in order (`--middleware a.B --middleware c.D`): an
    append-type flag takes them all and any other its last, as vLLM's argparse reads them.
    """
    head: list[str] = []
    flags: dict[str, tuple[str, ...]] = {}
    current: str | None = None
    for word in argv:
        if word.startswith("-") and len(word) > 1 and not _is_number(word):
            name, eq, _ = word.partition("=")
            flags[name] = (*flags.get(name, ()), word)
            current = None if eq else name
        elif current is not None:
            flags[current] = (*flags[current], word)
        elif flags:
            raise ConfigError(
                f"server.command: {word!r} follows {flags[next(reversed(flags))][0]!r} "
                "and belongs to no flag"
            )
        else:
            head.append(word)
    return head, flags


def last_copy(name: str, words: tuple[str, ...]) -> tuple[str, ...]:
    """A flag's last copy of its words (`--x 1 --x 2` → `--x 2`): what a store-type flag
    takes, as argparse reads it. Pure."""
    starts = [i for i, w in enumerate(words) if w == name or w.startswith(f"{name}=")]
    return words[starts[-1] :] if starts else words


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def differences(
    good_argv: Sequence[str],
    bad_argv: Sequence[str],
    good_env: Mapping[str, str],
    bad_env: Mapping[str, str],
) -> list[Difference]:
    """Every flag and variable GOOD and BAD set differently, flags first, in BAD's order."""
    good_head, good_flags = flag_groups(good_argv)
    bad_head, bad_flags = flag_groups(bad_argv)
    if good_head != bad_head:
        raise ConfigError(
            f"server.command: GOOD starts {shlex.join(good_head)!r} and BAD "
            f"{shlex.join(bad_head)!r}: only flags and variables may differ"
        )
    found: list[Difference] = []
    for name in [*bad_flags, *(n for n in good_flags if n not in bad_flags)]:
        if good_flags.get(name) != bad_flags.get(name):
            found.append(Difference("flag", name, good_flags.get(name), bad_flags.get(name)))
    for name in [*bad_env, *(n for n in good_env if n not in bad_env)]:
        if good_env.get(name) != bad_env.get(name):
            g, b = good_env.get(name), bad_env.get(name)
            found.append(
                Difference("env", name, None if g is None else (g,), None if b is None else (b,))
            )
    return found


def apply(
    good_argv: Sequence[str],
    good_env: Mapping[str, str],
    diffs: Sequence[Difference],
    subset: frozenset[int],
) -> tuple[list[str], dict[str, str]]:
    """GOOD's command and environment with the differences in `subset` made as BAD has them."""
    head, flags = flag_groups(good_argv)
    env = dict(good_env)
    for i in sorted(subset):
        d = diffs[i]
        if d.kind == "env":
            if d.bad is None:
                env.pop(d.name, None)
            else:
                env[d.name] = d.bad[0]
        elif d.bad is None:
            flags.pop(d.name, None)
        else:
            flags[d.name] = d.bad
    argv = list(head)
    for words in flags.values():
        argv += words
    return argv, env
