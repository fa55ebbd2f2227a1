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

A verdict can lie (a server start that glitches serves the other side's behaviour), so
`next_trial` weighs each subset by every trial of it (`known`: subset -> its outcomes, one
a trial, in order) at a lie rate (`search.flake`; `auto`: PRIOR_RATE, raised by what the
run's own repeats show) and ends with the answer re-tested both ways:

    ddmin's path   each subset read from its trials: one trial is enough while no subset's
                   trials disagree (flake 0: always, and nothing below happens: `next_step`);
                   an end that would stop the search (GOOD bad, BAD good) always needs more
    the answer S   GOOD + S          bad    } repeated (each a new start), the least sure
                   GOOD + S - {i}    good   } first, until together they hold at
                   BAD  - S          which? } `confidence`; S - {i}: S is 1-minimal;
                                              BAD - S good: S alone explains it ("only")
                   the trial ddmin's path chose on is no re-test (a lie it took would look
                   like evidence for the answer it led to)
    a lie seen     any subset's trials disagree (a re-test that contradicts ddmin's path is
                   one): replay the path needing every subset it consults at `confidence`
                   (the first one below it is repeated); a subset past `cap` trials stays
                   unsure and the answer ambiguous, so the search always ends

A subset's belief is the posterior of its majority under a symmetric lie rate p, with an
even prior: P = 1 / (1 + (p / (1 - p)) ** |bad - good|): only the margin counts. Replay is
pure, so a run killed at any moment resumes from its journal and repeats no finished trial.
"""

from __future__ import annotations

import enum
import math
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

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
class Claim:
    """One setup the answer was re-tested on (`claims`), and how sure it holds."""

    subset: frozenset[int]
    expect: Outcome | None
    """What the answer needs it to be; None: either (BAD with only the set reverted)."""
    belief: float
    """How likely it truly is `expect` (None: what most of its re-tests say)."""
    path: int
    """Its first trials that ddmin's path chose on (0 or 1): not counted as re-tests."""


@dataclass(frozen=True)
class Minimal:
    """The answer: the smallest set found that turns GOOD bad."""

    subset: tuple[int, ...]
    unresolved: int
    """Trials that could not be tested on the way: more than 0 means a smaller set may
    exist (the set is minimal among what could be tested)."""
    only: bool | None = None
    """Whether BAD with only the set reverted tests good at the confidence (the set alone
    explains it); False: still bad (another difference also turns GOOD bad); None: not
    tested (flake 0) or not settled."""
    unsure: int = 0
    """Subsets whose trials stayed below the confidence past the cap: the answer is open."""
    confidence: float | None = None
    """How sure the re-tested answer is (its claims together); None: flake 0."""
    rate: float | None = None
    """The lie rate the trials were weighed at; None: flake 0 (verdicts are facts)."""
    retests: tuple[Claim, ...] = ()
    """The answer's claims, re-tested (none with flake 0)."""


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

    try:
        step = _ddmin(count, test, lambda s, _: test(s))
    except _Missing as missing:
        return Need(missing.subset)
    return replace(step, unresolved=len(unresolved)) if isinstance(step, Minimal) else step


def _ddmin(
    count: int,
    test: Callable[[frozenset[int]], Outcome],
    end: Callable[[frozenset[int], Outcome], Outcome],
) -> DeltaStep:
    """ddmin's path over `test` (a subset's outcome; _Missing for one not known enough);
    `end(subset, expected)` reads an end, which stops the search unless it is as expected."""
    everything = frozenset(range(count))
    if (good := end(frozenset(), Outcome.GOOD)) is not Outcome.GOOD:
        return GoodIsBad(good)
    if (bad := end(everything, Outcome.BAD)) is not Outcome.BAD:
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
    return Minimal(c, 0)


PRIOR_RATE = 0.05
"""`flake: auto`: the lie rate assumed before the run's own repeats show one (a start that
glitches one time in twenty)."""
PRIOR_WEIGHT = 20
"""How many trials PRIOR_RATE counts for: the run's repeats move it as they outnumber it."""
MAX_RATE = 0.3


def _tally(outcomes: Sequence[Outcome]) -> tuple[int, int]:
    """A subset's trials: (bad, good); unresolved ones count neither way."""
    return outcomes.count(Outcome.BAD), outcomes.count(Outcome.GOOD)


def _resolved(outcomes: Sequence[Outcome]) -> int:
    return sum(_tally(outcomes))


def lie_rate(known: Mapping[frozenset[int], Sequence[Outcome]], flake: float | None) -> float:
    """The rate a trial lies at: `flake`, or (None: auto) PRIOR_RATE raised by the lies the
    run's repeats show: a subset's minority verdicts, at least that many of its trials lied."""
    if flake is not None:
        return flake
    lies, repeated = 0, 0
    for outcomes in known.values():
        bad, good = _tally(outcomes)
        if bad + good >= 2:
            lies, repeated = lies + min(bad, good), repeated + bad + good
    seen = (PRIOR_RATE * PRIOR_WEIGHT + lies) / (PRIOR_WEIGHT + repeated)
    return min(max(PRIOR_RATE, seen), MAX_RATE)


def belief(outcomes: Sequence[Outcome], rate: float, expect: Outcome | None = None) -> float:
    """How likely the subset truly is `expect` (None: what most of its trials say), from its
    trials at the lie rate, an even prior: 1 / (1 + (rate / (1 - rate)) ** margin)."""
    bad, good = _tally(outcomes)
    if expect is None:
        margin = abs(bad - good)
    else:
        margin = bad - good if expect is Outcome.BAD else good - bad
    if rate <= 0:
        return 1.0 if margin > 0 else 0.0 if margin < 0 else 0.5
    return 1 / (1 + (rate / (1 - rate)) ** margin)


def margin_needed(rate: float, level: float) -> int:
    """How many more trials one way than the other make a subset's majority sure at `level`."""
    if rate <= 0:
        return 1
    return max(1, math.ceil(math.log(level / (1 - level)) / math.log((1 - rate) / rate) - 1e-9))


def cap(rate: float, level: float) -> int:
    """The most trials of one subset: past it, a subset still below `level` is unresolved."""
    return 2 * margin_needed(rate, level) + 5


def claims(count: int, subset: Sequence[int]) -> dict[frozenset[int], Outcome | None]:
    """What the answer S says, re-tested both ways: GOOD + S is bad, GOOD + S - {i} is good
    for each i (S is 1-minimal), and BAD - S (everything but S applied) is good (S alone
    explains it) or bad (another difference also turns GOOD bad): None, either way."""
    s = frozenset(subset)
    said: dict[frozenset[int], Outcome | None] = {s: Outcome.BAD}
    for i in sorted(s):
        said[s - {i}] = Outcome.GOOD
    said.setdefault(frozenset(range(count)) - s, None)
    return said


def next_trial(
    count: int,
    known: Mapping[frozenset[int], Sequence[Outcome]],
    *,
    flake: float | None,
    confidence: float,
) -> DeltaStep:
    """The next trial over `count` differences, or the answer, when a trial may lie.

    `known` holds every trial of each subset, in order. `flake` 0: `next_step` over each
    subset's trial, today's ddmin trial for trial; None: auto (`lie_rate`). Otherwise ddmin's
    path reads a subset from one trial until some subset's trials disagree (a lie seen: a
    verification that contradicts the path is one), then from enough trials to hold at
    `confidence`; an end that would stop the search always needs that. The answer is then
    re-tested (`claims`), the least sure claim repeated until together they hold at
    `confidence`. A subset whose trials are all unresolved is not repeated (it could not be
    tested, as with flake 0); one past `cap` is `unsure`: the answer is ambiguous.
    """
    if flake == 0:
        return next_step(count, {s: o[-1] for s, o in known.items() if o})
    if count < 1:
        raise ConfigError("configs: GOOD and BAD set the same flags and variables")
    rate = lie_rate(known, flake)
    strict = any(min(_tally(o)) > 0 for o in known.values())
    unresolved: set[frozenset[int]] = set()
    unsure: set[frozenset[int]] = set()

    consulted: set[frozenset[int]] = set()

    def read(subset: frozenset[int], sure: bool) -> Outcome:
        consulted.add(subset)
        outcomes = known.get(subset, ())
        if not outcomes:
            raise _Missing(subset)
        bad, good = _tally(outcomes)
        if not bad and not good:
            unresolved.add(subset)
            return Outcome.UNRESOLVED
        majority = Outcome.BAD if bad > good else Outcome.GOOD
        if bad != good and (not sure or abs(bad - good) >= margin_needed(rate, confidence)):
            return majority
        if len(outcomes) >= cap(rate, confidence):
            unsure.add(subset)
            return Outcome.UNRESOLVED
        raise _Missing(subset)

    def end(subset: frozenset[int], expected: Outcome) -> Outcome:
        outcome = read(subset, strict)
        return outcome if outcome is expected else read(subset, True)

    try:
        step = _ddmin(count, lambda s: read(s, strict), end)
        if not isinstance(step, Minimal):
            return step
        said = claims(count, step.subset)
        level = confidence ** (1 / len(said))
        # a subset ddmin's path consulted: its first trial chose the path, so it is no
        # re-test (a lie the path took looks like evidence for the answer it led to)
        fresh = {s: known.get(s, ())[1 if s in consulted else 0 :] for s in said}
        beliefs = {s: belief(fresh[s], rate, e) for s, e in said.items()}
        joint = math.prod(beliefs.values())
        if joint < confidence:
            open_ = [
                (b, n, s)
                for n, (s, b) in enumerate(beliefs.items())
                if len(fresh[s]) < cap(rate, level) and (not known.get(s) or _resolved(known[s]))
            ]
            if open_:
                raise _Missing(min(open_)[2])
            for s, b in beliefs.items():
                if b < level:
                    (unsure if _resolved(known[s]) else unresolved).add(s)
        rest = frozenset(range(count)) - frozenset(step.subset)
        rest_bad, rest_good = _tally(fresh[rest])
        settled = joint >= confidence or belief(fresh[rest], rate) >= level
        only = rest_good > rest_bad if settled and rest_good != rest_bad else None
        retests = tuple(Claim(s, e, beliefs[s], int(s in consulted and bool(known.get(s))))
                        for s, e in said.items())  # fmt: skip
        return Minimal(step.subset, len(unresolved), only, len(unsure), joint, rate, retests)
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
