"""Delta debugging over server setups: the smallest set of flag/variable differences found,
from the trials a journal holds, on command lines of the shape the GLM and Kimi cases had."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given, settings, strategies as st

from llm_bisect.delta import (
    MAX_RATE,
    PRIOR_RATE,
    DeltaStep,
    Difference,
    GoodIsBad,
    Minimal,
    Need,
    NotBad,
    Outcome,
    apply,
    belief,
    cap,
    differences,
    lie_rate,
    margin_needed,
    next_step,
    next_trial,
)
from llm_bisect.errors import ConfigError

GOOD = ["vllm", "serve", "RedHatAI/GLM-5.3-MXFP4", "--data-parallel-size", "8",
        "--enable-expert-parallel", "--moe-backend", "marlin", "--max-model-len=32768"]  # fmt: skip
BAD = ["vllm", "serve", "RedHatAI/GLM-5.3-MXFP4", "--data-parallel-size", "8",
       "--enable-expert-parallel", "--moe-backend", "cutlass", "--max-model-len=32768",
       "--compilation-config", '{"cudagraph_mode": "FULL"}', "--enforce-eager"]  # fmt: skip
GOOD_ENV = {"VLLM_USE_DEEP_GEMM": "0", "NCCL_CUMEM_ENABLE": "1", "VLLM_LOGGING": "x"}
BAD_ENV = {"VLLM_USE_DEEP_GEMM": "1", "NCCL_CUMEM_ENABLE": "1", "TORCH_SYMMMEM": "NVSHMEM"}


def run(
    count: int,
    journal: dict[frozenset[int], Outcome] | None = None,
    *,
    bad_if: Callable[[frozenset[int]], Outcome],
) -> tuple[DeltaStep, list[frozenset[int]], dict[frozenset[int], Outcome]]:
    """Drive next_step as a run would: each Need probed (by `bad_if`) and journalled."""
    known: dict[frozenset[int], Outcome] = dict(journal or {})
    trials: list[frozenset[int]] = []
    while isinstance(step := next_step(count, known), Need):
        assert step.subset not in known  # a trial is never repeated
        trials.append(step.subset)
        known[step.subset] = bad_if(step.subset)
    return step, trials, known


def test_the_differences_are_flags_with_their_values_and_variables_by_name() -> None:
    diffs = differences(GOOD, BAD, GOOD_ENV, BAD_ENV)
    assert [d.label for d in diffs] == [
        "--moe-backend cutlass",
        '--compilation-config \'{"cudagraph_mode": "FULL"}\'',
        "--enforce-eager",
        "VLLM_USE_DEEP_GEMM=1",
        "TORCH_SYMMMEM=NVSHMEM",
        "unset VLLM_LOGGING",
    ]
    argv, env = apply(GOOD, GOOD_ENV, diffs, frozenset(range(len(diffs))))
    assert argv == BAD and env == BAD_ENV  # every difference applied is BAD itself
    argv, env = apply(GOOD, GOOD_ENV, diffs, frozenset({0}))
    assert argv == [*GOOD[:6], "--moe-backend", "cutlass", "--max-model-len=32768"]
    assert env == GOOD_ENV
    removed = differences(BAD, GOOD, BAD_ENV, GOOD_ENV)
    assert "without --enforce-eager" in [d.label for d in removed]
    assert apply(BAD, BAD_ENV, removed, frozenset(range(len(removed)))) == (GOOD, GOOD_ENV)


def test_the_one_flag_that_breaks_it_is_found_in_few_trials() -> None:
    diffs = differences(GOOD, BAD, GOOD_ENV, BAD_ENV)
    step, trials, _ = run(len(diffs), bad_if=lambda s: Outcome.BAD if 0 in s else Outcome.GOOD)
    assert isinstance(step, Minimal) and step.unresolved == 0
    assert [diffs[i].label for i in step.subset] == ["--moe-backend cutlass"]
    assert len(trials) <= 2 + 2 * 3  # the ends, then about 2 log2(n)


@pytest.mark.parametrize("seed", range(40))
def test_an_interaction_of_several_differences_is_found_exactly(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 12)
    culprit = frozenset(rng.sample(range(n), rng.randint(1, min(3, n))))
    step, trials, known = run(n, bad_if=lambda s: Outcome.BAD if culprit <= s else Outcome.GOOD)
    assert isinstance(step, Minimal) and set(step.subset) == culprit
    # a kill after any trial: replaying over what the journal held needs only the rest
    for cut in range(len(trials)):
        journal = {t: known[t] for t in trials[:cut]}
        resumed, rest, _ = run(n, journal, bad_if=lambda s: known[s])
        assert resumed == step and rest == trials[cut:]


def test_an_untestable_trial_is_never_bad_and_the_answer_says_a_smaller_set_may_exist() -> None:
    culprit = frozenset({3})

    def judge(s: frozenset[int]) -> Outcome:
        if s and s != frozenset(range(8)) and 3 in s and len(s) <= 2:
            return Outcome.UNRESOLVED  # the small trials around the culprit would not start
        return Outcome.BAD if culprit <= s else Outcome.GOOD

    step, _, _ = run(8, bad_if=judge)
    assert isinstance(step, Minimal) and 3 in step.subset and step.unresolved > 0
    assert len(step.subset) > 1  # what could be tested is not narrowed further than it can be


def test_ends_that_do_not_reproduce_are_said() -> None:
    assert run(3, bad_if=lambda s: Outcome.GOOD)[0] == NotBad(Outcome.GOOD)
    unsure_bad = run(3, bad_if=lambda s: Outcome.UNRESOLVED if s else Outcome.GOOD)
    assert unsure_bad[0] == NotBad(Outcome.UNRESOLVED)
    assert run(3, bad_if=lambda s: Outcome.BAD)[0] == GoodIsBad(Outcome.BAD)
    assert run(3, bad_if=lambda s: Outcome.UNRESOLVED)[0] == GoodIsBad(Outcome.UNRESOLVED)
    assert run(3, bad_if=lambda s: Outcome.BAD)[1] == [frozenset()]  # GOOD first: no more


@pytest.mark.parametrize(
    ("good", "bad", "message"),
    [
        (["vllm", "serve", "a"], ["vllm", "serve", "b"], "only flags and variables may differ"),
        (["serve", "--x=1", "stray"], ["serve"], "'stray' follows '--x=1' and belongs to no flag"),
        (["serve", "--x"], ["serve", "--x"], "GOOD and BAD set the same flags"),
    ],
)
def test_setups_that_cannot_be_compared_are_one_line_errors(
    good: list[str], bad: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        diffs = differences(good, bad, {}, {})
        next_step(len(diffs), {})


def test_a_negative_number_is_a_value_and_a_flag_given_twice_keeps_both_copies() -> None:
    """An append-type flag (`--middleware a.B --middleware c.D`) takes every copy: the BAD
    trial once ran only the last, which is not the setup the user wrote."""
    diffs = differences(["s", "--t", "-1", "--t", "2"], ["s", "--t", "-1"], {}, {})
    assert diffs == [Difference("flag", "--t", ("--t", "-1", "--t", "2"), ("--t", "-1"))]
    assert apply(["s", "--t", "2"], {}, diffs, frozenset({0}))[0] == ["s", "--t", "-1"]
    bad = ["s", "--middleware", "a.B", "--x", "1", "--middleware", "c.D"]
    (diff,) = differences(["s", "--x", "1"], bad, {}, {})
    assert diff.label == "--middleware a.B --middleware c.D"
    argv = apply(["s", "--x", "1"], {}, [diff], frozenset({0}))[0]
    assert argv == ["s", "--x", "1", "--middleware", "a.B", "--middleware", "c.D"]


# --- trials that lie: a server start that glitches serves the other side's behaviour ---


def lying(
    count: int,
    cause: Callable[[frozenset[int]], bool],
    lies: Callable[[int, frozenset[int]], bool],
    *,
    flake: float | None = None,
    journal: dict[frozenset[int], list[Outcome]] | None = None,
) -> tuple[DeltaStep, list[frozenset[int]], dict[frozenset[int], list[Outcome]]]:
    """Drive next_trial as a run would; trial number t (1, 2, ...) of subset s lies when
    lies(t, s)."""
    known = {s: list(o) for s, o in (journal or {}).items()}
    trials: list[frozenset[int]] = []
    while isinstance(step := next_trial(count, known, flake=flake, confidence=0.99), Need):
        trials.append(step.subset)
        truth = cause(step.subset)
        if lies(sum(map(len, known.values())) + 1, step.subset):
            truth = not truth
        known.setdefault(step.subset, []).append(Outcome.BAD if truth else Outcome.GOOD)
        assert len(trials) < 500
    return step, trials, known


def _replaying(outcomes: Iterator[Outcome]) -> Callable[[frozenset[int]], bool]:
    """An oracle that answers what a run saw before, in order (a resumed run's trials)."""
    return lambda _: next(outcomes) is Outcome.BAD


def exact_oracle(culprit: frozenset[int]) -> Callable[[frozenset[int]], Outcome]:
    return lambda s: Outcome.BAD if culprit <= s else Outcome.GOOD


@pytest.mark.parametrize("seed", range(40))
def test_flake_0_is_todays_ddmin_trial_for_trial(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 12)
    culprit = frozenset(rng.sample(range(n), rng.randint(1, min(3, n))))
    today, today_trials, _ = run(n, bad_if=exact_oracle(culprit))
    step, trials, _ = lying(n, lambda s: culprit <= s, lambda *_: False, flake=0)
    assert (step, trials) == (today, today_trials)


def test_the_glm_trials_at_flake_0_are_the_recorded_sequence() -> None:
    """The sequence the configs service test asserts (17 trials), written out."""
    _, trials, _ = lying(6, lambda s: {0, 4} <= s, lambda *_: False, flake=0)
    assert [sorted(t) for t in trials] == [
        [], [0, 1, 2, 3, 4, 5], [0, 1, 2], [3, 4, 5], [0, 1], [2, 3], [4], [5], [2, 3, 4, 5],
        [0, 1, 4, 5], [4, 5], [0, 1, 5], [0, 1, 4], [0], [1], [1, 4], [0, 4],
    ]  # fmt: skip


@pytest.mark.parametrize("lie_at", range(3, 18))
def test_one_lying_trial_on_the_path_no_longer_moves_the_answer(lie_at: int) -> None:
    """Trusting every trial, one lie among ddmin's 17 (6 differences, 2 needed) named a
    wrong set for 13 of these 15 positions; re-tested, the answer is the cause, only it."""
    today, _, _ = lying(6, lambda s: {0, 4} <= s, lambda t, _: t == lie_at, flake=0)
    step, trials, _ = lying(6, lambda s: {0, 4} <= s, lambda t, _: t == lie_at)
    assert isinstance(step, Minimal) and step.subset == (0, 4), (lie_at, today)
    assert step.only is True and step.unresolved == step.unsure == 0
    assert step.confidence is not None and step.confidence >= 0.99
    assert len(trials) < 60
    if lie_at not in (10, 13):
        assert isinstance(today, Minimal) and today.subset != (0, 4)


def test_without_a_lie_the_answer_is_re_tested_both_ways() -> None:
    step, trials, _ = lying(6, lambda s: {0, 4} <= s, lambda *_: False)
    assert isinstance(step, Minimal) and step.subset == (0, 4) and step.only is True
    assert trials[:17] == lying(6, lambda s: {0, 4} <= s, lambda *_: False, flake=0)[1]
    # after ddmin's path: the set, the set less each one, BAD less the set, each repeated
    assert set(trials[17:]) == {frozenset({0, 4}), frozenset({0}), frozenset({4}),
                                frozenset({1, 2, 3, 5})}  # fmt: skip
    assert step.rate == PRIOR_RATE and step.confidence is not None and step.confidence >= 0.99


def test_when_bad_without_the_set_is_still_bad_it_is_not_called_the_only_cause() -> None:
    """Either of two differences alone breaks it: ddmin names one; BAD without it, re-tested,
    is still bad, so the answer is never "only"."""
    step, _, known = lying(6, lambda s: bool({0, 4} & s), lambda *_: False)
    assert isinstance(step, Minimal) and step.subset == (0,) and step.only is False
    assert known[frozenset({1, 2, 3, 4, 5})].count(Outcome.BAD) >= 2


def test_a_setup_whose_trials_keep_disagreeing_ends_ambiguous_after_its_cap() -> None:
    """GOOD with only the set applied reads bad, good, bad, good, ... (every other start of it
    lies): it never holds at the confidence, and the search still ends."""
    seen: list[frozenset[int]] = []

    def lies(_: int, s: frozenset[int]) -> bool:
        seen.append(s)
        return s == {1} and seen.count(s) % 2 == 0

    step, _, known = lying(3, lambda s: {1} <= s, lies)
    assert isinstance(step, Minimal) and 1 in step.subset and step.unsure  # ambiguous
    assert max(map(len, known.values())) <= cap(MAX_RATE, 0.99)


def test_the_auto_rate_rises_with_the_lies_the_repeats_show() -> None:
    good, bad = Outcome.GOOD, Outcome.BAD
    assert lie_rate({frozenset(): [good]}, None) == PRIOR_RATE
    assert lie_rate({frozenset(): [good, good, good]}, None) == PRIOR_RATE
    assert lie_rate({frozenset(): [good, bad]}, None) > PRIOR_RATE
    assert lie_rate({frozenset(): [good, bad]}, 0.2) == 0.2
    assert belief([bad, bad], 0.1, Outcome.BAD) == pytest.approx(1 / (1 + (1 / 9) ** 2))
    assert belief([bad, good, bad], 0.1) == belief([bad], 0.1)  # only the margin counts
    assert margin_needed(0.05, 0.99) == 2 and margin_needed(0.1, 0.99) == 3


@given(
    n=st.integers(1, 8),
    data=st.data(),
    flake=st.sampled_from([None, 0.05, 0.1, 0.2]),
    seed=st.integers(0, 2**32),
    rate=st.floats(0.0, 0.3),
)
@settings(max_examples=150, deadline=None)
def test_a_lying_oracle_gets_the_right_answer_or_an_ambiguous_one(
    n: int, data: st.DataObject, flake: float | None, seed: int, rate: float
) -> None:
    """Trials lie at random (seeded), as many as the margin a sure setup needs allows, less
    one: whatever ddmin's path took, the answer is the cause exactly, only it, or ambiguous;
    replayed from any cut of its journal (a kill at any moment), the run goes on the same."""
    culprit = frozenset(data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=3)))
    rng = random.Random(seed)
    budget = [margin_needed(PRIOR_RATE if flake is None else flake, 0.99) - 1]

    def lies(*_: object) -> bool:
        if budget[0] and rng.random() < rate:
            budget[0] -= 1
            return True
        return False

    step, trials, known = lying(n, lambda s: culprit <= s, lies, flake=flake)
    assert isinstance(step, Minimal)
    if not (step.unresolved or step.unsure):
        assert set(step.subset) == culprit and step.only is True
        assert step.confidence is not None and step.confidence >= 0.99
    order = [known[t][trials[:i].count(t)] for i, t in enumerate(trials)]  # as they came
    for cut in range(0, len(trials), max(1, len(trials) // 5)):
        journal: dict[frozenset[int], list[Outcome]] = {}
        for t, o in zip(trials[:cut], order[:cut], strict=True):
            journal.setdefault(t, []).append(o)
        resumed, rest, _ = lying(n, _replaying(iter(order[cut:])), lambda *_: False,
                                 flake=flake, journal=journal)  # fmt: skip
        assert resumed == step and rest == trials[cut:]


def test_an_old_journal_with_one_trial_a_setup_still_reads() -> None:
    _, _, known = lying(6, lambda s: {0, 4} <= s, lambda *_: False, flake=0)
    old = {s: [o[0]] for s, o in known.items()}  # what a journal before repeats holds
    step = next_trial(6, old, flake=None, confidence=0.99)
    assert step == Need(frozenset({0, 4}))  # it goes on to re-test the answer
