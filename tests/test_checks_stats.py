"""The paired test of the eval, and its stated power checked by simulation (seeded)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from llm_bisect.checks.stats import (
    ALPHA,
    POWER,
    PairedTest,
    Pairs,
    SequentialTest,
    critical,
    p_value,
    pairs,
)


def test_the_exact_one_sided_mcnemar_test() -> None:
    assert p_value(5, 0) == 1 / 32 and p_value(0, 0) == 1.0 and p_value(3, 3) == 0.65625
    # all lost: 4 of 4 is chance 1/16 of the time, 5 of 5 is 1/32 (< 0.05)
    assert critical(4) == 5 and critical(5) == 5 and critical(0) == 1
    for m in range(1, 60):
        b = critical(m)
        assert p_value(b, m - b) <= ALPHA < (p_value(b - 1, m - b + 1) if b else 1.0)
    got = pairs([True, True, True, False], [False, True, True, True])
    assert got == Pairs(n=4, right=3, lost=1, gained=1) and got.drop == 0.0


def test_a_drop_fails_only_beyond_chance_and_beyond_the_tolerance() -> None:
    test = PairedTest()
    assert test.fails(Pairs(64, 59, 5, 0))  # 5 lost, none gained: p = 1/32
    assert not test.fails(Pairs(64, 59, 4, 0))
    assert not test.fails(Pairs(64, 59, 8, 4))  # answers that change both ways are chance
    assert not test.fails(Pairs(0, 0, 0, 0))
    assert not PairedTest(tolerance=0.1).fails(Pairs(64, 59, 6, 0))  # 9% is within 10%


def _fail_rate(
    test: PairedTest, n: int, right: int, drop: float, flips: float, trials: int
) -> float:
    """Draw builds from the model the power is stated under; how often the test fails them."""
    rng = random.Random(f"{n}-{right}-{drop}-{flips}")
    lose = (flips / 2 + drop) * n / right
    gain = flips / 2 * n / (n - right)
    failed = 0
    for _ in range(trials):
        lost = sum(rng.random() < lose for _ in range(right))
        gained = sum(rng.random() < gain for _ in range(n - right))
        failed += test.fails(Pairs(n, right, lost, gained))
    return failed / trials


@pytest.mark.parametrize(
    ("n", "right", "flips", "tolerance"),
    [
        (64, 59, 0.0, 0.0),  # the bundled set, a deterministic build
        (64, 59, 6 / 64, 0.0),  # batch nondeterminism flips 3 answers each way
        (200, 160, 0.05, 0.0),
        (200, 160, 0.05, 0.05),  # a configured tolerance is part of the rule
        (1319, 1213, 0.02, 0.0),  # all of GSM8K's test split
    ],
)
def test_the_stated_detectable_drop_is_detected_with_the_stated_power(
    n: int, right: int, flips: float, tolerance: float
) -> None:
    test = PairedTest(tolerance=tolerance)
    drop = test.detectable_drop(n, right, flips)
    assert 0 < drop < 0.25
    assert test.power(n, right, drop, flips) == pytest.approx(POWER, abs=0.01)
    trials = 600 if n > 1000 else 2000
    seen = _fail_rate(test, n, right, drop, flips, trials)
    assert abs(seen - POWER) < 0.05, f"stated {POWER} at a drop of {drop:.4f}, seen {seen}"
    smaller = _fail_rate(test, n, right, drop / 2, flips, trials)
    assert smaller < POWER - 0.1  # half that drop is not detected as often
    false_alarms = _fail_rate(test, n, right, 0.0, flips, trials)
    assert false_alarms <= ALPHA + 0.015, f"false alarms {false_alarms} at alpha {ALPHA}"
    assert test.power(n, right, 0.0, flips) <= ALPHA


def test_more_problems_and_fewer_flips_detect_smaller_drops() -> None:
    test = PairedTest()
    assert test.detectable_drop(1319, 1213, 0.02) < test.detectable_drop(64, 59, 0.02)
    assert test.detectable_drop(64, 59, 0.0) < test.detectable_drop(64, 59, 0.1)
    assert test.detectable_drop(0, 0) == 1.0 and test.detectable_drop(5, 0) == 1.0


def _sequential(
    test: SequentialTest, n: int, right: int, drop: float, flips: float, trials: int
) -> tuple[float, float]:
    """Builds drawn as `_fail_rate` draws them, answers taken in order: (how often the
    sequential test fails them, the mean share of problems it asked)."""
    rng = random.Random(f"seq-{n}-{right}-{drop}-{flips}")
    lose = (flips / 2 + drop) * n / right
    gain = flips / 2 * n / (n - right)
    golden = [True] * right + [False] * (n - right)
    failed, asked = 0, 0
    for _ in range(trials):
        rng.shuffle(golden)
        got = [(rng.random() >= lose) if g else (rng.random() < gain) for g in golden]
        fails, k = test.decide(golden, got)
        failed += fails
        asked += k
    return failed / trials, asked / trials / n


@pytest.mark.parametrize(
    ("n", "right", "flips"),
    [(64, 59, 6 / 64), (200, 160, 0.05), (1319, 1213, 0.02)],
)
def test_the_sequential_eval_keeps_its_error_rates_and_stops_early_on_a_clear_drop(
    n: int, right: int, flips: float
) -> None:
    test = SequentialTest()
    assert test.final == PairedTest(ALPHA)  # the ends' test: early stop never changes a verdict
    trials = 400 if n > 1000 else 2000
    false_alarms, _ = _sequential(test, n, right, 0.0, flips, trials)
    assert false_alarms <= ALPHA + 0.015, f"false alarms {false_alarms} at alpha {ALPHA}"
    drop = test.final.detectable_drop(n, right, flips)  # the power stated: a lower bound
    seen, _ = _sequential(test, n, right, drop, flips, trials)
    assert seen >= POWER - 0.04, f"stated at least {POWER} at a drop of {drop:.4f}, seen {seen}"
    # a build that lost most of its answers is stopped early: on average after 3/4 at most
    broken, asked = _sequential(test, n, right, 0.8 * right / n, flips, 200)
    assert broken == 1.0 and asked <= 0.76, (broken, asked)
    # answers given in order: stopped once the rest cannot save it, or decided on all
    golden = [True] * right + [False] * (n - right)
    fails, k = test.decide(golden, [False] * n)
    assert fails and k < n
    assert test.decide(golden, golden) == (False, n)


@given(st.integers(8, 120), st.data())
@settings(max_examples=300, deadline=None)
def test_early_stop_never_changes_a_verdict(n: int, data: st.DataObject) -> None:
    # the whole set's verdict, whatever the answers: `probe.early_stop` changes the cost only
    golden = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    got = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    for tolerance in (0.0, 0.05):
        test = SequentialTest(tolerance=tolerance)
        assert test.decide(golden, got)[0] == PairedTest(ALPHA, tolerance).fails(pairs(golden, got))


def test_the_ends_and_the_middle_judge_the_same_answers_alike() -> None:
    # today's example: bad at the run's ends (alpha 0.05), good in the middle (0.047)
    p = Pairs(n=64, right=57, lost=13, gained=5)
    assert PairedTest(ALPHA).fails(p) and SequentialTest().final.fails(p)
