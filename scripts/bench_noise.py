#!/usr/bin/env python3
"""How often each search names a wrong culprit when verdicts lie, and what it costs.

Random histories: n uniform in [10, 500], the first bad candidate uniform in [1, n-1], a
fixed seed. A lie serves exactly the other side's verdict: nothing but repetition exposes
it. Lies are iid at a rate per probe, or `sticky` (one candidate next to the culprit, on
either side, always lies; every other verdict is true). Three searches on the same
histories:

  today    the deterministic bisection (`search.flake: 0`, `probe.repeats: auto`: a
           reversal is probed again)
  plain    a plain probabilistic bisection: the rate known, the ends known, the posterior
           median probed (k slots: its k+1-quantiles each round), stop at posterior 0.99
           (Horstein; it checks the harness, and it is the peer of issue 47's rounds)
  auto     the posterior search as shipped (`search.flake: auto`: the rate unknown to it),
           with its confirmation as shipped (`confirm: true`): the search stops where the
           culprit's revert and pick, if they agree, carry it to 0.99; the trials are weighed
           and the search goes on if they do not; a culprit named after that is confirmed
           again on new starts, and one not confirmed then is no answer (services/stages.py)
  known    the same told the rate (`search.flake: 0.1`; `sticky`: 0.05, as plain;
           lie 0: flake 0, today's search): what not knowing the rate costs `auto`

`two`: two regressions in the range (the second after the first, up to the bad end), starts
lying at 0.05 (`two0.1`: 0.1, `two0`: never). A culprit whose revert leaves the bad end bad
is followed as the Several stage does (confirm.goes_on: the line after it, with it
reverted, bisected again, up to `search.culprits`); right means both named and confirmed
together (the bad end good with both reverted); a run that says found with only one, or a
wrong one, is wrong.

A confirmation trial is a start like any probe and is counted as one (`trials`: their mean).
It lies at the row's rate (iid); a sticky liar is a commit, and a trial builds another tree.
`today` and `plain` run no confirmation (today's tool runs it after its search: two starts).

Each row: wrong culprits named found (%), right (%), no answer (%), mean probes and, with
k slots, mean rounds, each with a 95 % interval (Wilson for rates, normal for means).

The ends are counted honestly. The real tool starts both ends whatever the search (the
golden is recorded on the good end, the bad end is checked), so `probes` counts every
start: `plain`, which takes the ends as known and never probes them, is charged those two
starts too. `beyond the ends` leaves out each end's first start (for every search): the
cost of the search itself, `plain`'s own count. `ends again`: the mean starts
of an end beyond its first (an end whose verdict is doubted; `plain` never doubts one).

  prior    `auto` weighed by a prior (`search.priors`, `--priors`): 75 % of the candidates
           weighed low (priors.LOW), the culprit among the others on 80 % of the histories
           (right), among the low ones on the rest (wrong); with `--priors` each search's
           row is split into those two

Usage: python scripts/bench_noise.py [--histories 2000] [--seed 20261204] [--lies 0,0.05,...]
  [--searches today,plain,auto,known,prior] [--slots 1,4] [--jobs 2] [--priors]
About 20 minutes on 2 cores at 2,000 histories per row.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import numpy as np

# LLM_BISECT_SRC: another checkout's bisect/ (the code before a change, on the same seeds)
sys.path.insert(
    0, os.environ.get("LLM_BISECT_SRC") or str(Path(__file__).resolve().parent.parent / "bisect")
)

from llm_bisect.model import Candidate, Verdict
from llm_bisect.posterior import MAX_LOOKS, Policy, Trial, next_look
from llm_bisect.search import Answer, Mode, Plan, plan_batch

try:  # the shipped placement of probes and a confirmation's trials (search.py)
    from llm_bisect.search import pick_slot
except ImportError:  # older code: the runner's
    from llm_bisect.runner import pick_slot  # type: ignore[attr-defined]
try:
    from llm_bisect.posterior import Start

    try:
        from llm_bisect.search import trial_slots
    except ImportError:  # older code: the Confirm stage's
        from llm_bisect.services.confirm import trial_slots  # type: ignore[attr-defined]
except ImportError:  # older code: every trial on slot 0, one after the other
    Start = None  # type: ignore[assignment,misc]
    trial_slots = None  # type: ignore[assignment]
try:  # the Confirm stage's loop and its looks, as shipped (services/confirm.py)
    from llm_bisect.services.confirm import (
        Trial as ConfirmTrial,
        confirmation,
        looked,
        placed,
        trials_at_once,
    )
except ImportError:  # older code: _old_looks
    looked = None  # type: ignore[assignment]
try:  # a look's revert twice at once on three slots or more
    from llm_bisect.posterior import reverts_at_once
except ImportError:  # older code: once a look
    reverts_at_once = None  # type: ignore[assignment]
try:  # several culprits as the Several stage decides them (services/confirm.py)
    from llm_bisect.config import SearchConfig
    from llm_bisect.services.confirm import _held, goes_on

    CULPRITS = SearchConfig().culprits
except (ImportError, AttributeError):  # older code: one culprit a run
    goes_on = _held = None  # type: ignore[assignment]
    CULPRITS = 1


@dataclass(frozen=True)
class World:
    n: int
    culprit: int
    lie: float | str
    seed: int
    low: tuple[int, ...] | None = None
    """The candidates a prior weighs low (`--kimi`); None: drawn (prior_of)."""

    def liar(self) -> int:
        """The candidate that always lies (`sticky`): next to the culprit."""
        rng = random.Random(self.seed * 7 + 1)
        return self.culprit - 1 if rng.random() < 0.5 and self.culprit > 1 else self.culprit

    def rate(self) -> float:
        """The lie rate a search that is told one assumes (`known`, `plain`)."""
        if isinstance(self.lie, str) and self.lie.startswith("two") and self.lie != "two":
            return float(self.lie[3:])
        return float(self.lie) if isinstance(self.lie, float) else 0.05

    def regressions(self) -> tuple[int, ...]:
        """The first bad commit of each regression in the range: the culprit, and for `two`
        a second one after it (drawn from the seed, up to the bad end)."""
        if not str(self.lie).startswith("two"):
            return (self.culprit,)
        rng = random.Random(self.seed * 17 + 3)
        return (self.culprit, rng.randint(self.culprit + 1, self.n))


BURST = 3
"""A burst: consecutive starts on one slot that lie together."""
BURSTS_P = 0.08 / (BURST - 2 * 0.08)
"""`bursts`: the chance a start on a slot out of a burst begins one (8 % of starts lie)."""
BAD_GPU = 0.5
"""`node`: how often a start on the bad slot lies."""


class Liar:
    """Which starts lie under the row's model, start by start. Models: a rate (iid, each
    start); `sticky` (one candidate next to the culprit always lies); `burst` (3 consecutive
    starts on one slot lie, once, beginning among that slot's first 10 starts); `burst40`
    (the same, beginning anywhere in the first 40 starts of the run); `bursts` (bursts of 3
    as a process on every slot: 8 % of starts lie); `node` (one slot of k lies on half its
    starts: the history's number picks it, so every position takes its turn); `int0.5`
    (intermittent: a bad build reads good on that share of its starts, a good one never
    lies); `two` (two regressions, World.regressions; starts lie at 0.05, `two0.1` at 0.1,
    `two0` never)."""

    def __init__(self, world: World, k: int, rng: random.Random) -> None:
        self.world, self.k, self.rng = world, k, rng
        self.starts: dict[int, int] = {}
        """Starts on each slot so far."""
        self.clock = 0
        """Starts in the run so far (the order of every start: slot evidence's time)."""
        self.left: dict[int, int] = {}
        """`bursts`: starts left in each slot's burst."""
        lie, here = world.lie, random.Random(world.seed * 13 + 5)
        self.burst: tuple[int, int] | None = None
        """`burst`, `burst40`: (slot, the slot's start number the burst begins at)."""
        if lie == "burst":
            self.burst = (here.randrange(k), here.randint(1, 10))
        elif lie == "burst40":
            self.burst = (here.randrange(k), here.randint(1, max(1, 40 // k)))
        self.bad_slot = world.seed % k

    def start(self, i: int | None, truly_bad: bool, slot: int) -> Verdict:
        """The verdict of one start on `slot`: of candidate i (None: a confirmation trial),
        truly bad or good."""
        self.clock += 1
        number = self.starts[slot] = self.starts.get(slot, 0) + 1
        lie, rng = self.world.lie, self.rng
        if isinstance(lie, float):
            lies = rng.random() < lie
        elif lie == "sticky":
            lies = i is not None and i == self.world.liar()
        elif lie in ("burst", "burst40"):
            assert self.burst is not None
            where, first = self.burst
            lies = slot == where and first <= number < first + BURST
        elif lie == "bursts":
            if not self.left.get(slot) and rng.random() < BURSTS_P:
                self.left[slot] = BURST
            lies = bool(self.left.get(slot))
            if lies:
                self.left[slot] -= 1
        elif lie == "node":
            lies = slot == self.bad_slot and rng.random() < BAD_GPU
        elif str(lie).startswith("two"):  # two regressions; starts lie iid at the rate
            lies = rng.random() < self.world.rate()
        elif str(lie).startswith("int"):
            lies = truly_bad and rng.random() < float(str(lie)[3:])
        else:
            raise ValueError(f"no lie model {lie!r}")
        return Verdict.BAD if truly_bad != lies else Verdict.GOOD

    def verdict(self, i: int, slot: int = 0) -> Verdict:
        return self.start(i, i >= self.world.culprit, slot)


@dataclass(frozen=True)
class Run:
    status: str
    right: bool
    probes: int
    """Every start, each end's first included."""
    rounds: int
    ends: int = 2
    """The ends started (each end's first start; a search that stops at an end makes one)."""
    ends_again: int = 0
    """Starts of the ends beyond their first."""
    trials: int = 0
    """Confirmation trials started (in `probes`)."""


PRIOR_RIGHT = 0.8
"""`--priors`: the share of histories whose prior is right (the culprit among the candidates
weighed full); in the others it is wrong (the culprit among those weighed low)."""
PRIOR_LOW = 0.75
"""`--priors`: the share of candidates weighed low (the Kimi case: 9 of 12)."""


def prior_of(world: World) -> tuple[bool, tuple[tuple[str, float], ...]]:
    """A history's prior (`--priors`): whether it is right, and the candidates it weighs low
    (priors.LOW), by commit: a random PRIOR_LOW of candidates 1..n, the culprit left out of
    them where the prior is right, put among them where it is wrong."""
    from llm_bisect.priors import LOW

    if world.low is not None:
        return world.culprit not in world.low, tuple((f"{i:040x}", LOW) for i in world.low)
    rng = random.Random(world.seed * 31 + 7)
    right = rng.random() < PRIOR_RIGHT
    others = [i for i in range(1, world.n + 1) if i != world.culprit]
    low = set(rng.sample(others, round(PRIOR_LOW * world.n) - (0 if right else 1)))
    if not right:
        low.add(world.culprit)
    return right, tuple((f"{i:040x}", LOW) for i in sorted(low))


def searched(world: World, search: str, k: int) -> Run:
    rng = random.Random(world.seed)
    liar = Liar(world, k, rng)
    if search == "plain":
        return _plain(world, liar, k)
    policy = {"today": Policy(flake=0.0), "known": Policy(flake=world.rate())}.get(search, Policy())
    if search == "prior":  # `auto` weighed by the history's prior (`--priors`)
        policy = replace(policy, prior=prior_of(world)[1])
    if not policy.exact:
        policy = replace(policy, confirming=True)  # Config.search_policy: confirm is on
    count = {"probes": 0, "rounds": 0, "trials": 0}
    starts: dict[int, int] = {}
    first = _bisection(world, liar, k, policy, Line(tuple(range(world.n + 1))), count, starts)
    status, named = first.status, [first.culprit] if first.culprit is not None else []
    left, done = CULPRITS - 1, first
    while left > 0 and done.went_on():
        # the Several stage (confirm.goes_on): the culprit's revert left the bad end bad on
        # verdicts the search believes; bisect the line after it with it reverted
        assert done.culprit is not None
        after = done.line.after(done.culprit)
        if len(after.commits) < 2:
            break  # the culprit is the bad end: nothing after it to bisect
        done = _bisection(world, liar, k, policy, after, count, starts)
        if done.culprit is None:
            break  # no culprit after it: cannot confirm them together
        named.append(done.culprit)
        left -= 1
        together = done.revert  # the bad end with every culprit named reverted
        if together is Verdict.GOOD and first.held:  # confirm.as_a_whole
            status = "found"
            break
    ends = [starts[i] for i in (0, world.n) if i in starts]
    want = sorted(world.regressions())
    right = status == "found" and (sorted(named) == want if len(want) > 1 else named == want)
    trials = count["trials"]
    return Run(status, right, count["probes"] + trials, count["rounds"], len(ends),
               sum(ends) - len(ends), trials)  # fmt: skip


@dataclass(frozen=True)
class Line:
    """What one bisection searches: its candidates as commits of the history (`commits[j]`,
    candidate j) and the culprits reverted on each (several culprits: the line after a
    culprit, with it reverted). A candidate is truly bad where a regression not reverted is
    at or before it."""

    commits: tuple[int, ...]
    reverted: frozenset[int] = frozenset()

    def bad(self, world: World, commit: int, also: frozenset[int] = frozenset()) -> bool:
        gone = self.reverted | also
        return any(r <= commit and r not in gone for r in world.regressions())

    def after(self, commit: int) -> Line:
        """The line after culprit `commit`, each candidate with it reverted (the first: the
        culprit with itself reverted, the good end there)."""
        return Line(self.commits[self.commits.index(commit) :], self.reverted | {commit})


@dataclass(frozen=True)
class Bisected:
    """One bisection's end: its status as the run says it, the culprit (a commit of the
    history), whether the Several stage goes on after it, its last look's revert verdict."""

    status: str
    culprit: int | None
    line: Line
    going_on: bool = False
    revert: Verdict | None = None
    held: bool = True

    def went_on(self) -> bool:
        return self.going_on


def _bisection(
    world: World,
    liar: Liar,
    k: int,
    policy: Policy,
    line: Line,
    count: dict[str, int],
    starts: dict[int, int],
) -> Bisected:
    """The runner's search and the Confirm stage's looks, as shipped, over `line`."""
    seq = tuple(Candidate(f"{j:040x}") for j in range(len(line.commits)))
    plan = Plan(Mode.REGRESSION, seq)
    seen: dict[str, list[Verdict]] = {}
    where: dict[str, list[object]] = {}  # commit -> the Start of each of its probes
    slots: dict[int, list[int]] = {}  # candidate -> the slot of each of its probes
    order: list[tuple[int, int]] = []  # (candidate, slot) of every probe, oldest first
    placed_ = Start is not None and not policy.exact

    def search_on(policy: Policy) -> Answer:
        """The runner's rounds (plan_batch, re-probes placed first, pick_slot) to an answer."""
        while True:
            step = plan_batch(plan, seen, k, reprobe=True, policy=policy,
                              **({"starts": where} if placed_ else {}))  # type: ignore[arg-type]  # fmt: skip
            if isinstance(step, Answer):
                return step
            count["rounds"] += 1
            taken: set[int] = set()
            raw = {c.commit: len(seen.get(c.commit, ())) for c in step}
            for probed in sorted(step, key=lambda c: not raw[c.commit]):  # re-probes first
                i = int(probed.commit, 16)
                slot = pick_slot(k, taken, slots.get(i, []))  # the runner's placement
                taken.add(slot)
                commit = line.commits[i]
                seen.setdefault(probed.commit, []).append(
                    liar.start(commit, line.bad(world, commit), slot)
                )
                if placed_:
                    where.setdefault(probed.commit, []).append(Start(slot, float(liar.clock)))
                slots.setdefault(i, []).append(slot)
                order.append((i, slot))
                count["probes"] += 1
                if commit in (0, world.n) and not line.reverted:  # the run's own ends
                    starts[commit] = starts.get(commit, 0) + 1
            if count["probes"] > 10 * world.n:
                raise SystemExit(f"stalled on {world}")

    step = search_on(policy)
    status = step.status.value
    found = None
    if not policy.exact and looked is not None:
        step, found, policy = looked(step, policy, lambda a: a, _look(world, liar, k, order, count,
                                     line), search_on, lambda _: None)  # fmt: skip
        status = step.status.value
        if found is not None and found.status == "not-confirmed":
            status = "ambiguous"  # confirm.unconfirmed: never found unconfirmed
    elif not policy.exact:  # older code: its confirmation loop as it shipped then
        step, status = _old_looks(world, liar, k, policy, step, search_on, slots, count)
    culprit = None if step.culprit is None else line.commits[int(step.culprit.commit, 16)]
    if found is None or culprit is None:
        return Bisected(status, culprit, line)
    revert = next((t.verdict for t in found.probes if t.kind == "revert"), None)
    # the run's result as the Several stage reads it (confirm.goes_on, confirm._held)
    searched_ = SimpleNamespace(evidence=policy.evidence)
    result = cast(Any, SimpleNamespace(confirmation=found, culprit=step.culprit, search=searched_))
    going = goes_on is not None and goes_on(result)
    held = _held is None or _held(result)
    return Bisected(status, culprit, line, going, None if revert is None else Verdict(revert),
                    held)  # fmt: skip


def _look(
    world: World,
    liar: Liar,
    k: int,
    order: Sequence[tuple[int, int]],
    count: dict[str, int],
    line: Line | None = None,
) -> Callable[[Answer, Policy, int], Any]:
    """The Confirm stage's `look` on the simulated history: the shipped placement
    (confirm.placed), the shipped order of the trials (confirm.trials_at_once: at once on two
    slots, else the pick after a good revert) and the shipped judgement (confirm.confirmation).
    A revert of the culprit (the line's bad end without it) is truly good only where no
    other regression is left; its pick (the line's good end with it) truly bad only where it
    is a regression (or the good end was bad already). A look weighed already (`at` before
    the last) is given back as it was."""
    said: dict[int, Any] = {}
    line = line or Line(tuple(range(world.n + 1)))

    def look(answer: Answer, policy: Policy, at: int) -> Any:
        if at in said:
            return said[at]
        assert answer.culprit is not None
        culprit = answer.culprit.commit
        c = int(culprit, 16)
        commit = line.commits[c]
        checked = [s for i, s in order if i in (c - 1, c)]
        where = placed(k, checked, policy.evidence, culprit)
        at_once = trials_at_once(where)
        lone = frozenset({commit})
        reverted_bad = line.bad(world, world.n, also=lone)
        picked_bad = line.bad(world, line.commits[0]) or (
            commit in world.regressions() and commit not in line.reverted
        )

        def trial(kind: str, truly_bad: bool, slot: int) -> Any:
            v = liar.start(None, truly_bad, slot)
            count["trials"] += 1
            return ConfirmTrial(kind, "end", f"{kind}-{c}", v, "", slot=slot,
                                began=float(liar.clock))  # fmt: skip

        before = count["rounds"]
        revert = trial("revert", reverted_bad, where[0])
        again = None  # the revert's second start beside it (posterior.reverts_at_once)
        if (
            at_once
            and reverts_at_once is not None
            and reverts_at_once(k - len(set(checked)), policy.exact) > 1
        ):
            again = trial("revert", reverted_bad, where[1])
        pick = None
        if at_once or revert.verdict is Verdict.GOOD:
            pick = trial("pick", picked_bad, where[2 if again else 1] if at_once else where[0])
        count["rounds"] = before + (1 if at_once or pick is None else 2)
        said[at] = confirmation(revert, pick, "end", at_once, *((None, again) if again else ()))
        return said[at]

    return look


def _old_looks(
    world: World,
    liar: Liar,
    k: int,
    policy: Policy,
    step: Answer,
    search_on: Callable[[Policy], Answer],
    slots: dict[int, list[int]],
    count: dict[str, int],
) -> tuple[Answer, str]:
    """Code from before the Confirm stage's loop was shared (LLM_BISECT_SRC): that loop as it
    shipped then, every trial on slot 0 where it had no trial_slots."""
    while step.status.value == "found" and step.culprit is not None:
        _, go_on = next_look(policy.looks, step.culprit.commit)
        if not go_on:
            break
        c = int(step.culprit.commit, 16)
        right = c == world.culprit
        looked_ = [getattr(t, "slot", None) for t in policy.evidence
                   if t.commit == step.culprit.commit]  # fmt: skip
        busy = [*slots.get(c - 1, ()), *slots.get(c, ()), *(x for x in looked_ if x is not None)]
        where = trial_slots(k, list(busy)) if trial_slots is not None else (0,)
        said = [("revert", liar.start(None, not right, where[0]), where[0], float(liar.clock))]
        if len(where) > 1 or said[0][1] is Verdict.GOOD:
            at = where[1] if len(where) > 1 else where[0]
            said.append(("pick", liar.start(None, right, at), at, float(liar.clock)))
        ok = said[0][1] is Verdict.GOOD and len(said) > 1 and said[1][1] is Verdict.BAD
        count["trials"] += len(said)
        count["rounds"] += 1 if len(where) > 1 or len(said) == 1 else 2
        placed_ = Start is not None
        evidence = tuple(Trial(step.culprit.commit, kind, v, *((slot, t) if placed_ else ()))
                         for kind, v, slot, t in said)  # fmt: skip
        policy = replace(policy, evidence=(*policy.evidence, *evidence),
                         looks=(*policy.looks, (step.culprit.commit, ok)),
                         confirming=len(policy.looks) + 1 < MAX_LOOKS)  # fmt: skip
        step = search_on(policy)
    status = step.status.value
    if status == "found" and step.culprit is not None:
        last, _ = next_look(policy.looks, step.culprit.commit)
        if last is not None and not policy.looks[last][1]:
            status = "ambiguous"
    return step, status


def _plain(world: World, liar: Liar, k: int = 1) -> Run:
    """Horstein's bisection given k slots: the rate known, the ends known (not probed), the
    posterior over candidates 1..n-1 uniform at first; each round probes the posterior's
    k+1-quantiles at once (k = 1: the median), one slot each; stop at 0.99. Charged the
    starts of the ends the real tool makes (it uses neither verdict) as the real tool makes
    them: the good end alone in a round of its own (the golden is recorded from it), the bad
    end then on one of the k slots beside the first round's probes (k = 1: a round of its
    own)."""
    n = world.n + 1
    rate = world.rate()
    post = np.full(n - 1, 1.0 / (n - 1))  # post[j]: candidate j + 1 is the first bad
    probes = rounds = 0
    if k > 1:  # the good end on slot 0 (its verdict unused; k = 1 as the bench always did)
        liar.start(0, False, 0)
    while post.max() < 0.99 and probes < 200:
        cdf = np.cumsum(post)  # cdf[j]: P(c <= j + 1), the chance candidate j + 1 is bad
        width = k - 1 if rounds == 0 and k > 1 else k  # the bad end takes a slot
        picks: list[int] = []
        for m in range(1, width + 1):  # the quantiles (never the last: known bad)
            i = int(np.argmin(np.abs(cdf[:-1] - m / (width + 1)))) + 1
            if i not in picks:
                picks.append(i)
        if rounds == 0 and k > 1:
            liar.start(world.n, True, k - 1)
        for slot, i in enumerate(picks):
            says_bad = liar.verdict(i, slot) is Verdict.BAD
            truly_bad = np.arange(1, n) <= i  # c <= i: candidate i is bad
            post = post * np.where(truly_bad == says_bad, 1 - rate, rate)
            post /= post.sum()
        probes += len(picks)
        rounds += 1
    found = int(post.argmax()) + 1
    status = "found" if post.max() >= 0.99 else "ambiguous"
    return Run(status, found == world.culprit, probes + 2, rounds + (2 if k == 1 else 1))


KIMI_N = 13
"""`--kimi`: the Kimi report's range, 12 release-branch commits between the good nightly and
the bad release (index 13, the bad end, a candidate too)."""
KIMI_FULL = (3, 7, 11)
"""`--kimi`: the 3 commits that are not model-specific (weighed full); the other 9 touch only
other models' files (weighed low), and the culprit is each of the 3 in turn."""


def worlds(count: int, seed: int, lie: float | str, kimi: bool = False) -> list[World]:
    if kimi:
        low = tuple(i for i in range(1, KIMI_N) if i not in KIMI_FULL)
        return [World(KIMI_N, KIMI_FULL[h % 3], lie, seed * 100_003 + h, low)
                for h in range(count)]  # fmt: skip
    rng = random.Random(seed)
    found = []
    for h in range(count):
        n = rng.randint(10, 500)
        found.append(World(n, rng.randint(1, n - 1), lie, seed * 100_003 + h))
    return found


def _one(job: tuple[World, str, int]) -> Run:
    return searched(*job)


def wilson(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return 0.0, 0.0
    z, p = 1.96, k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return 100 * max(0.0, mid - half), 100 * min(1.0, mid + half)


def mean(xs: Sequence[int]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / max(1, len(xs) - 1))
    return m, 1.96 * sd / math.sqrt(len(xs))


def row(search: str, lie: float | str, k: int, runs: Sequence[Run]) -> str:
    n = len(runs)
    wrong = sum(1 for r in runs if r.status == "found" and not r.right)
    right = sum(1 for r in runs if r.right)
    none = n - wrong - right
    lo, hi = wilson(wrong, n)
    p, pe = mean([r.probes for r in runs])
    inner = sum(r.probes - r.ends for r in runs) / n  # each end's first start left out
    again = sum(r.ends_again for r in runs) / n
    rd, re = mean([r.rounds for r in runs])
    return (
        f"| {search} | {lie} | {k} | {100 * wrong / n:.1f} [{lo:.1f}, {hi:.1f}] | "
        f"{100 * right / n:.1f} | {100 * none / n:.1f} | {p:.1f} ± {pe:.1f} | {inner:.1f} | "
        f"{again:.2f} | {sum(r.trials for r in runs) / n:.2f} | "
        + (f"{rd:.1f} ± {re:.1f} |" if k > 1 else "- |")
    )


def _lie(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=20261204)
    parser.add_argument("--lies", default="0,0.05,0.1,0.2,sticky")
    parser.add_argument("--searches", default="today,plain,auto")
    parser.add_argument("--slots", default="1,4")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--priors",
        action="store_true",
        help="auto with and without a prior (search.priors) on the same histories: right on "
        f"{PRIOR_RIGHT * 100:.0f}%% of them, wrong (the culprit weighed low) on the rest; "
        "a row each",
    )
    parser.add_argument(
        "--kimi",
        action="store_true",
        help=f"the Kimi shape instead of random histories: {KIMI_N - 1} commits, the culprit one "
        f"of the {len(KIMI_FULL)} not model-specific, the other "
        f"{KIMI_N - 1 - len(KIMI_FULL)} weighed low (`prior`)",
    )
    args = parser.parse_args()
    lies: list[float | str] = [_lie(x) for x in args.lies.split(",")]
    print(f"{args.histories} histories per row, seed {args.seed}, n in [10, 500]")
    bits = [math.ceil(math.log2(w.n)) for w in worlds(args.histories, args.seed, 0.0)]
    print(f"mean ceil(log2 n) {sum(bits) / len(bits):.2f}: bisection's probes beyond the ends")
    print()
    print("| search | lie | slots | wrong, found (%) [95 %] | right (%) | no answer (%) "
          "| probes | beyond the ends | ends again | trials | rounds |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    began = time.monotonic()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for lie in lies:
            for search in args.searches.split(","):
                for k in [int(x) for x in args.slots.split(",")]:
                    if lie == "node" and k == 1:
                        continue  # `node`: one bad slot of several
                    jobs = [
                        (w, search, k) for w in worlds(args.histories, args.seed, lie, args.kimi)
                    ]
                    runs = list(pool.map(_one, jobs, chunksize=16))
                    if not args.priors:
                        print(row(search, lie, k, runs), flush=True)
                        continue
                    rights = [prior_of(w)[0] for w, _, _ in jobs]
                    for label, want in (("prior right", True), ("prior wrong", False)):
                        mine = [r for r, ok in zip(runs, rights, strict=True) if ok is want]
                        if mine:  # (a few histories may hold none of one kind)
                            print(row(f"{search}, {label}", lie, k, mine), flush=True)
    print()
    print(f"{time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    main()
