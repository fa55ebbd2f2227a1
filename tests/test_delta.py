"""Delta debugging over server setups: the smallest set of flag/variable differences found,
from the trials a journal holds, on command lines of the shape the GLM and Kimi cases had."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from llm_bisect.delta import (
    DeltaStep,
    Difference,
    GoodIsBad,
    Minimal,
    Need,
    NotBad,
    Outcome,
    apply,
    differences,
    next_step,
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
