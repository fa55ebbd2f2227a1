"""The search, exhaustively: every culprit position, random skip sets, both modes, and
verdicts that are not monotone (flaky builds, bugs fixed and broken again) against a
brute-force oracle."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from llm_bisect.model import Candidate, Verdict
from llm_bisect.search import (
    Answer,
    Mode,
    Outcome,
    Plan,
    Status,
    contradicted,
    left_of,
    lookahead,
    max_probes,
    next_batch,
    next_step,
    no_longer_needed,
    obsolete,
    plan_batch,
    plan_step,
    settle,
)


def drive(
    n: int,
    oracle: dict[int, Verdict],
    mode: Mode = Mode.REGRESSION,
    prefer: frozenset[int] = frozenset(),
) -> tuple[Outcome, list[int]]:
    verdicts: dict[int, Verdict] = {}
    order: list[int] = []
    while True:
        step = next_step(n, verdicts, mode, prefer)
        if isinstance(step, Outcome):
            return step, order
        assert step not in verdicts, "a candidate was probed twice"
        order.append(step)
        verdicts[step] = oracle[step]


def world(n: int, culprit: int, skips: frozenset[int], mode: Mode) -> dict[int, Verdict]:
    return {
        i: Verdict.SKIP if i in skips else (mode.new_state if i >= culprit else mode.old_state)
        for i in range(n)
    }


@given(st.data())
@settings(max_examples=400)
def test_finds_every_culprit_within_the_probe_bound(data: st.DataObject) -> None:
    n = data.draw(st.integers(2, 200))
    culprit = data.draw(st.integers(1, n - 1))
    mode = data.draw(st.sampled_from(Mode))
    outcome, order = drive(n, world(n, culprit, frozenset(), mode), mode)
    assert outcome.status is Status.FOUND
    assert outcome.culprit == culprit
    assert outcome.range == (culprit - 1, culprit)
    assert len(order) <= math.ceil(math.log2(n)) + 2
    assert len(order) <= max_probes(n)
    assert order[:2] == [0, n - 1], "the ends are verified first"


@given(st.data())
@settings(max_examples=400)
def test_skips_never_give_a_wrong_culprit(data: st.DataObject) -> None:
    n = data.draw(st.integers(3, 200))
    culprit = data.draw(st.integers(1, n - 1))
    skips = frozenset(data.draw(st.sets(st.integers(1, n - 2), max_size=n)))
    skips -= {culprit} if data.draw(st.booleans()) else set()
    mode = data.draw(st.sampled_from(Mode))
    outcome, _order = drive(n, world(n, culprit, skips, mode), mode)
    if outcome.status is Status.FOUND:
        assert outcome.culprit == culprit
        assert culprit not in skips and culprit - 1 not in skips
    else:
        assert outcome.status is Status.AMBIGUOUS
        last_old, *maybe = outcome.range
        assert culprit in maybe
        assert last_old < culprit and last_old not in skips
        assert all(i in skips for i in maybe[:-1]), "only skipped candidates widen the range"
        assert maybe[-1] not in skips
        assert maybe == list(range(last_old + 1, maybe[-1] + 1))


def test_ambiguous_when_a_skip_borders_the_culprit() -> None:
    outcome, _ = drive(10, world(10, 5, frozenset({4}), Mode.REGRESSION))
    assert outcome.status is Status.AMBIGUOUS
    assert outcome.range == (3, 4, 5)


def test_a_skipped_midpoint_is_stepped_around() -> None:
    outcome, order = drive(9, world(9, 7, frozenset({4}), Mode.REGRESSION))
    assert outcome.status is Status.FOUND and outcome.culprit == 7
    assert order[2] == 4 and order[3] in (3, 5)


@pytest.mark.parametrize(
    ("ends", "status", "words"),
    [
        ((Verdict.BAD, Verdict.BAD), Status.ERROR, "good end is already bad"),
        ((Verdict.GOOD, Verdict.GOOD), Status.NO_REGRESSION, "no change"),
        ((Verdict.SKIP, Verdict.BAD), Status.ERROR, "could not be tested"),
        ((Verdict.GOOD, Verdict.UNSURE), Status.ERROR, "bad end could not be tested"),
    ],
)
def test_ends_are_verified(ends: tuple[Verdict, Verdict], status: Status, words: str) -> None:
    outcome, order = drive(20, {0: ends[0], 19: ends[1]})
    assert outcome.status is status
    assert words in outcome.message
    assert len(order) <= 2


def test_find_fix_names_the_first_good_commit() -> None:
    outcome, _ = drive(30, world(30, 12, frozenset(), Mode.FIX), Mode.FIX)
    assert outcome.culprit == 12
    oracle = world(30, 12, frozenset(), Mode.FIX)
    assert oracle[11] is Verdict.BAD and oracle[12] is Verdict.GOOD


def _c(i: int) -> Candidate:
    return Candidate(f"{i:040x}", subject=f"commit {i}")


def test_a_branch_whose_merge_base_is_bad_points_at_the_fix_range() -> None:
    anchor, base = _c(100), _c(0)
    plan = Plan(Mode.REGRESSION, (base, _c(1), _c(2)), anchor=anchor)
    assert plan_step(plan, {}) == anchor
    assert plan_step(plan, {anchor.commit: Verdict.GOOD}) == base
    answer = plan_step(plan, {anchor.commit: Verdict.GOOD, base.commit: Verdict.BAD})
    assert not isinstance(answer, Candidate)
    assert answer.status is Status.NO_REGRESSION
    assert answer.fix_range == (base.commit, anchor.commit)
    assert "predates the branch point" in answer.message
    assert plan.good == anchor and plan.bad == plan.sequence[-1]


def test_a_branch_whose_merge_base_is_good_bisects_the_bad_side() -> None:
    anchor, seq = _c(100), tuple(_c(i) for i in range(8))
    plan = Plan(Mode.REGRESSION, seq, anchor=anchor)
    verdicts = {anchor.commit: Verdict.GOOD}
    culprit = 5
    while True:
        step = plan_step(plan, verdicts)
        if not isinstance(step, Candidate):
            break
        i = int(step.commit, 16)
        verdicts[step.commit] = Verdict.BAD if 0 < i < 100 and i >= culprit else Verdict.GOOD
    assert step.status is Status.FOUND and step.culprit == seq[culprit]
    assert plan.max_probes() == 1 + max_probes(8)


def test_lookahead_names_the_next_probe_for_either_verdict() -> None:
    seq = tuple(_c(i) for i in range(17))
    plan = Plan(Mode.REGRESSION, seq)
    verdicts = {seq[0].commit: Verdict.GOOD, seq[16].commit: Verdict.BAD}
    assert plan_step(plan, verdicts) == seq[8]
    nxt = lookahead(plan, verdicts, seq[8])
    assert nxt[:2] == [seq[4], seq[12]]  # if 8 is bad, then 4; if good, then 12
    assert seq[7] in nxt or seq[9] in nxt  # and if 8 cannot be tested, a neighbour


@given(st.data())
@settings(max_examples=400)
def test_coarse_then_fine_finds_the_same_culprit_probing_ready_ones_first(
    data: st.DataObject,
) -> None:
    n = data.draw(st.integers(3, 200))
    culprit = data.draw(st.integers(1, n - 1))
    ready = frozenset(data.draw(st.sets(st.integers(1, n - 2), max_size=n)))
    skips = frozenset(data.draw(st.sets(st.integers(1, n - 2), max_size=n // 4)))
    mode = data.draw(st.sampled_from(Mode))
    oracle = world(n, culprit, skips, mode)
    coarse, order = drive(n, oracle, mode, ready)
    fine, _ = drive(n, oracle, mode)
    assert (coarse.status, coarse.culprit) == (fine.status, fine.culprit)
    if coarse.status is Status.FOUND:
        assert coarse.culprit == culprit
    else:
        assert culprit in coarse.range[1:]
    # every probe of a candidate not ready came when no ready one was left in the interval
    verdicts: dict[int, Verdict] = {}
    for step in order:
        if step not in ready and step not in (0, n - 1):
            known = sorted(verdicts)
            lo = max(i for i in known if verdicts[i] is mode.old_state and i < step)
            hi = min(i for i in known if verdicts[i] is mode.new_state and i > step)
            assert not [i for i in ready if lo < i < hi and i not in verdicts], (step, ready)
        verdicts[step] = oracle[step]


@given(st.integers(min_value=2, max_value=300), st.data())
def test_what_is_left_shrinks_and_bounds_the_probes_still_run(n: int, data: st.DataObject) -> None:
    """left_of, as progress shows it: the candidates left never grow, end at one when found,
    and the probes it says remain are never fewer than the search then runs."""
    culprit = data.draw(st.integers(min_value=1, max_value=n - 1))
    plan = Plan(Mode.REGRESSION, tuple(Candidate(f"{i:040x}") for i in range(n)))
    verdicts: dict[str, Verdict] = {}
    lefts, estimates = [], []
    while isinstance(step := plan_step(plan, verdicts), Candidate):
        left, remaining = left_of(plan, verdicts)
        lefts.append(left)
        estimates.append(remaining)
        index = int(step.commit, 16)
        verdicts[step.commit] = Verdict.BAD if index >= culprit else Verdict.GOOD
    ran = len(lefts)
    assert lefts == sorted(lefts, reverse=True)
    assert left_of(plan, verdicts) == (1, 0)
    assert all(estimate >= ran - k for k, estimate in enumerate(estimates))


def truth(i: int, culprit: int, skips: frozenset[int]) -> Verdict:
    if i in skips:
        return Verdict.SKIP
    return Verdict.BAD if i >= culprit else Verdict.GOOD


def correct(outcome: Outcome, culprit: int, skips: frozenset[int]) -> bool:
    """A found culprit is the real one; an ambiguous range holds it, and only skips besides."""
    if outcome.status is Status.FOUND:
        return outcome.culprit == culprit
    if outcome.status is Status.AMBIGUOUS:
        inner = outcome.range[1:-1]
        return culprit in outcome.range[1:] and all(i in skips for i in inner)
    return False


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=3, max_value=700),
    st.integers(min_value=1, max_value=8),
    st.data(),
)
def test_batches_find_the_culprit_in_log_k_plus_1_rounds(
    n: int, k: int, data: st.DataObject
) -> None:
    """Rounds of k probes at once (the good end alone first): the right culprit, never a
    probe twice, and at most ceil(log_(k+1) n) + 2 rounds when nothing is skipped."""
    culprit = data.draw(st.integers(min_value=1, max_value=n - 1))
    seq = tuple(Candidate(f"{i:040x}") for i in range(n))
    plan = Plan(Mode.REGRESSION, seq)
    verdicts: dict[str, Verdict] = {}
    rounds = 0
    while isinstance(batch := plan_batch(plan, verdicts, k), list):
        assert 1 <= len(batch) <= k and len({c.commit for c in batch}) == len(batch)
        assert not {c.commit for c in batch} & verdicts.keys()
        rounds += 1
        for c in batch:
            verdicts[c.commit] = truth(int(c.commit, 16), culprit, frozenset())
    assert batch.status is Status.FOUND and batch.culprit == seq[culprit]
    assert rounds <= math.ceil(math.log(n, k + 1)) + 2, (n, k, rounds)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=3, max_value=200),
    st.integers(min_value=1, max_value=8),
    st.data(),
)
def test_slots_that_free_one_by_one_still_find_the_culprit_or_range(
    n: int, k: int, data: st.DataObject
) -> None:
    """Probes end in any order with skips about; a freed slot gets a speculative point at
    once, a probe outside the open interval is cancelled: the answer is still right, and no
    candidate is probed twice."""
    culprit = data.draw(st.integers(min_value=1, max_value=n - 1))
    skips = frozenset(
        data.draw(st.sets(st.integers(min_value=1, max_value=n - 2), max_size=n // 3))
    )
    verdicts: dict[int, Verdict] = {0: Verdict.GOOD}  # the good end went first, alone
    running: set[int] = set()
    started: list[int] = []
    while True:
        batch = next_batch(n, verdicts, k - len(running), running=frozenset(running))
        if isinstance(batch, Outcome):
            break
        assert not set(batch) & (running | verdicts.keys())
        running |= set(batch)
        started += batch
        assert running, "nothing to wait for"
        done = data.draw(st.sampled_from(sorted(running)))
        running.discard(done)
        verdicts[done] = truth(done, culprit, skips)
        running -= obsolete(n, verdicts, frozenset(running), Mode.REGRESSION)
    assert len(started) == len(set(started))
    assert correct(batch, culprit, skips), (batch, culprit, sorted(skips))


def test_with_nothing_running_k_slots_split_the_interval_into_k_plus_1_parts() -> None:
    verdicts = {0: Verdict.GOOD, 16: Verdict.BAD}
    assert next_batch(17, verdicts, 3) == [4, 8, 12]
    assert next_batch(17, verdicts, 1) == [8]
    # one slot frees while 8 runs: the widest gap it leaves gets the next point
    assert next_batch(17, verdicts, 1, running=frozenset({8})) == [4]
    # the bad end is unverified: it goes in the batch, beside interior points
    assert next_batch(17, {0: Verdict.GOOD}, 3) == [16, 5, 11]
    # a ready artifact near the target wins
    assert next_batch(17, verdicts, 1, prefer=frozenset({6})) == [6]
    # 12 is no longer needed once 6 tests bad
    assert obsolete(17, {**verdicts, 6: Verdict.BAD}, frozenset({12, 3}), Mode.REGRESSION) == {12}


# -- verdicts that are not monotone ------------------------------------------------------

G, B, S, U = Verdict.GOOD, Verdict.BAD, Verdict.SKIP, Verdict.UNSURE


def brute_verdict(seen: list[Verdict]) -> Verdict:
    """One candidate's verdict from its probes, by hand: good and bad both is unsure."""
    tested = {v for v in seen if v in (G, B)}
    if len(tested) == 2:
        return U
    return tested.pop() if tested else seen[-1]


def brute_steps(final: dict[int, Verdict], mode: Mode) -> set[tuple[int, int]]:
    """Every observed old→new step (a, b): a in the old state, b in the new, and every
    candidate between them tested and untestable. O(n^2), no cleverness."""
    return {
        (a, b)
        for a in final
        for b in final
        if a < b
        and final[a] is mode.old_state
        and final[b] is mode.new_state
        and all(final.get(i) in (S, U) for i in range(a + 1, b))
    }


def brute_monotone(final: dict[int, Verdict], mode: Mode) -> bool:
    return not any(
        final[i] is mode.new_state and final[j] is mode.old_state
        for i in final
        for j in final
        if i < j
    )


def scripts(n: int) -> st.SearchStrategy[dict[int, list[Verdict]]]:
    """What each candidate's probes say, probe after probe (the last one repeats): any mix of
    good, bad, skip and unsure, so flaky builds and bugs fixed and broken again are in."""
    script = st.lists(st.sampled_from([G, B, S, U]), min_size=1, max_size=3)
    return st.fixed_dictionaries({i: script for i in range(n)})


@settings(max_examples=600, deadline=None)
@given(
    st.integers(min_value=2, max_value=40),
    st.integers(min_value=1, max_value=5),
    st.sampled_from(Mode),
    st.booleans(),
    st.data(),
)
def test_any_verdicts_end_in_an_observed_step_never_a_stall(
    n: int, k: int, mode: Mode, reprobe: bool, data: st.DataObject
) -> None:
    """Random histories, monotone or not, flaky or not; k slots whose probes end in any
    order, several at once; probes no longer needed are cancelled and still hold their slot
    until they end. The search never stalls, and its answer is a real old→new step of what
    was observed (the last one: the step the new end still has), or an explicit
    no-regression / error; it says when the verdicts were not monotone."""
    world = data.draw(scripts(n))
    if data.draw(st.booleans()):  # often, ends that verify
        world[0], world[n - 1] = [mode.old_state], [mode.new_state]
    plan = Plan(mode, tuple(_c(i) for i in range(n)))
    history: dict[str, list[Verdict]] = {}
    running: dict[str, bool] = {}  # commit → cancelled

    def seen() -> Mapping[str, Any]:
        """Every probe's verdict with re-probes; else one verdict a commit, as callers had."""
        return history if reprobe else {c: v[-1] for c, v in history.items()}

    for _ in range(20 * n + 50):
        for commit in no_longer_needed(plan, seen(), frozenset(running), reprobe=reprobe):
            running[commit] = True
        busy = frozenset(running)  # a cancelled probe holds its slot and commit until it ends
        step = plan_batch(plan, seen(), k - len(running), frozenset(), busy, reprobe=reprobe)
        if isinstance(step, Answer) and not running:
            break
        if isinstance(step, list):
            assert not {c.commit for c in step} & running.keys()
            for c in step:
                running[c.commit] = False
            if step:  # what progress and prefetch read of the same verdicts never fails
                assert left_of(plan, seen(), reprobe=reprobe)[0] >= 0
                lookahead(plan, seen(), step[0], reprobe=reprobe)
        assert running, f"the search stalled: nothing runs, no answer ({history})"
        ending = data.draw(st.sets(st.sampled_from(sorted(running)), min_size=1))
        for commit in ending:
            if not running.pop(commit):
                probes = history.setdefault(commit, [])
                script = world[int(commit, 16)]
                probes.append(script[min(len(probes), len(script) - 1)])
    else:
        raise AssertionError("the search did not end")
    answer = step
    assert plan_step(plan, seen(), reprobe=reprobe) == answer, "one answer, asked either way"
    final = {int(c, 16): brute_verdict(probes) for c, probes in history.items()}
    assert all(len(probes) <= (2 if reprobe else 1) for probes in history.values())
    old_end, new_end = final.get(0), final.get(n - 1)
    if old_end is not mode.old_state:
        assert answer.status is Status.ERROR and f"the {mode.old_state.value} end" in answer.message
        return
    if new_end in (S, U):
        assert answer.status is Status.ERROR and "could not be tested" in answer.message
        return
    if new_end is mode.old_state:
        assert answer.status is Status.NO_REGRESSION
        return
    index = [int(c, 16) for c in answer.range]
    lo, hi = index[0], index[-1]
    assert (lo, hi) in brute_steps(final, mode), (answer, final)
    assert index == list(range(lo, hi + 1))
    assert lo == max(i for i, v in final.items() if v is mode.old_state)
    if answer.status is Status.FOUND:
        assert hi == lo + 1 and answer.culprit == plan.sequence[hi]
    else:
        assert answer.status is Status.AMBIGUOUS and hi > lo + 1 and answer.culprit is None
    assert brute_monotone(final, mode) == ("not monotone" not in answer.message), answer.message
    assert bool(answer.reversals) != brute_monotone(final, mode)
    assert set(answer.flaky) == {c for c, probes in history.items() if {G, B} <= set(probes)}
    if reprobe:  # both sides of every reversal were probed again before they were used
        for before, after in answer.reversals:
            assert len(history[before]) == 2 and len(history[after]) == 2


def test_a_good_after_a_bad_ends_in_the_last_step_and_says_so() -> None:
    # Two slots finished together: 3 bad, 5 good. The old search bisected 0..3 while
    # the batch read 5..6 and had nothing left: it stalled.
    verdicts = {0: G, 3: B, 5: G, 6: B, 8: B}
    outcome = next_batch(9, verdicts, 2)
    assert isinstance(outcome, Outcome)
    assert (outcome.status, outcome.culprit, outcome.reversals) == (Status.FOUND, 6, ((3, 5),))
    assert next_step(9, verdicts) == outcome
    plan = Plan(Mode.REGRESSION, tuple(_c(i) for i in range(9)))
    answer = plan_step(plan, {_c(i).commit: v for i, v in verdicts.items()})
    assert isinstance(answer, Answer) and answer.culprit == _c(6)
    assert f"good at {_c(5).short} after bad at {_c(3).short}" in answer.message
    assert answer.reversals == ((_c(3).commit, _c(5).commit),)
    assert "were not probed again" in answer.notes[0]


def test_both_sides_of_a_reversal_are_probed_again_before_either_is_used() -> None:
    plan = Plan(Mode.REGRESSION, tuple(_c(i) for i in range(17)))
    seen: dict[str, list[Verdict]] = {_c(0).commit: [G], _c(16).commit: [B]}
    seen |= {_c(4).commit: [B], _c(12).commit: [G]}  # bad at 4, good at 12: one is wrong
    settled = settle({int(c, 16): v for c, v in seen.items()}, Mode.REGRESSION, reprobe=True)
    assert settled.again == {4, 12} and settled.verdicts == {0: G, 16: B}
    batch = plan_batch(plan, seen, 3, reprobe=True)
    assert isinstance(batch, list) and batch[:2] == [_c(4), _c(12)]
    assert plan_step(plan, seen, reprobe=True) == _c(4)
    # 4 tests good this time: flaky, so unsure; 12 good again: it stands
    seen[_c(4).commit].append(G)
    seen[_c(12).commit].append(G)
    assert plan_step(plan, seen, reprobe=True) == _c(14)  # on after the last good
    for i in (13, 14, 15):
        seen[_c(i).commit] = [B]
    answer = plan_step(plan, seen, reprobe=True)
    assert isinstance(answer, Answer)
    assert answer.status is Status.FOUND and answer.culprit == _c(13)
    assert answer.flaky == (_c(4).commit,) and answer.reversals == ()
    assert any(f"Flaky: {_c(4).short} tested both good and bad" in n for n in answer.notes)


def test_a_running_re_probe_is_never_cancelled_and_the_answer_waits_for_it() -> None:
    verdicts = {0: G, 9: B, 10: B}
    assert obsolete(11, verdicts, frozenset({3}), Mode.REGRESSION, again=frozenset({3})) == set()
    assert next_batch(11, verdicts, 2, running=frozenset({3}), again=frozenset({3})) == [5, 7]
    done = {0: G, 8: G, 9: B, 10: B}
    assert next_batch(11, done, 2, running=frozenset({3}), again=frozenset({3})) == []


def test_an_untestable_merge_base_is_stepped_over_as_git_bisect_does() -> None:
    anchor, seq = _c(100), tuple(_c(i) for i in range(8))
    plan = Plan(Mode.REGRESSION, seq, anchor=anchor)
    verdicts = {anchor.commit: G, seq[0].commit: S}
    assert plan_step(plan, verdicts) == seq[7], "the run goes on after the merge base"
    for culprit, good_after in ((5, True), (1, False)):
        seen = dict(verdicts)
        while isinstance(step := plan_step(plan, seen), Candidate):
            seen[step.commit] = B if int(step.commit, 16) >= culprit else G
        if good_after:  # a commit after the merge base tested good: the base cost nothing
            assert step.status is Status.FOUND and step.culprit == seq[5]
            assert "could not be tested (skip)" in step.notes[0]
            assert "That cost nothing here" in step.notes[0]
        else:  # nothing after it tested good: it may be the change predates the branch point
            assert step.status is Status.AMBIGUOUS and step.culprit is None
            assert step.range == (anchor.commit, seq[0].commit, seq[1].commit)
            assert "predates the branch point" in step.message
            assert "That cost the answer" in step.notes[0] and "--find-fix" in step.notes[0]


def test_the_verdicts_a_cold_reprobe_is_for_contradict_a_neighbour_or_each_other() -> None:
    """A re-probe of these starts on an empty engine cache; one that only sharpens the
    posterior (verdicts in order) keeps its slot's."""
    c = [_c(i) for i in range(6)]
    plan = Plan(Mode.REGRESSION, tuple(c))
    G, B = Verdict.GOOD, Verdict.BAD
    assert contradicted(plan, {c[0].commit: G, c[2].commit: G, c[5].commit: B}) == frozenset()
    # bad at 2, good at 3 after it: both doubted; the skip at 4 says nothing
    seen = {c[0].commit: G, c[2].commit: B, c[3].commit: G, c[4].commit: Verdict.SKIP}
    assert contradicted(plan, seen) == {c[2].commit, c[3].commit}
    # a build seen good and bad is doubted on its own
    assert contradicted(plan, {c[0].commit: G, c[1].commit: [G, B], c[5].commit: B}) == {
        c[1].commit
    }
