"""The eval check against a recorded golden, with an endpoint that answers from a script:
its stated power is the power of the decision it makes."""

from __future__ import annotations

import random
from typing import Any

from llm_bisect.checks.dataset import Problems, load
from llm_bisect.checks.eval import EvalCheck, EvalDetails
from llm_bisect.checks.golden import Calibration, EvalNoise, EvalSection, Golden, Sections
from llm_bisect.checks.gsm8k import instruct_prompt, load_problems
from llm_bisect.client import ChatReply

PROBLEMS = load_problems()
N = len(PROBLEMS)
GOLDEN_WRONG = frozenset(range(0, N, 13))
"""The problems the good build answers wrong (5 of 64: 92% right)."""
ASKED = {instruct_prompt(p.question): i for i, p in enumerate(PROBLEMS)}


def golden() -> Golden:
    answers = [
        str(int(p.answer) + 1) if i in GOLDEN_WRONG else p.answer for i, p in enumerate(PROBLEMS)
    ]
    right = N - len(GOLDEN_WRONG)
    section = EvalSection(
        n=N,
        correct=right,
        accuracy=right / N,
        wilson95=(0.0, 1.0),
        invalid_share=0.0,
        null_share=0.0,
        answers=answers,
        budgets=[256] * N,
    )
    return Golden(version=2, commit="a" * 40, checks=Sections(eval=section))


class Flipping:
    """A build that loses each of the golden's right answers with probability `lose`, and
    gets each of its wrong ones right with probability `gain`; seeded per trial. Or, given
    `flipped`, exactly those problems answered the other way."""

    def __init__(
        self, seed: int, lose: float, gain: float, flipped: frozenset[int] = frozenset()
    ) -> None:
        self.seed, self.lose, self.gain, self.flipped = seed, lose, gain, flipped

    def chat(self, prompt: str, *, max_tokens: int, **extra: Any) -> ChatReply:
        i = ASKED[prompt]
        draw = random.Random(self.seed * 1000 + i).random()
        if i not in GOLDEN_WRONG:
            right = draw >= self.lose and i not in self.flipped
        else:
            right = draw < self.gain or i in self.flipped
        answer = int(PROBLEMS[i].answer) + (0 if right else 1)
        return ChatReply(f"The answer is {answer}.", None, "stop")


def failure_rate(check: EvalCheck, trials: int, lose: float, gain: float) -> float:
    failed = sum(not check.run(Flipping(t, lose, gain), golden()).passed for t in range(trials))
    return failed / trials


def test_the_stated_detectable_drop_is_detected_with_the_stated_power() -> None:
    """The check states the smallest drop it detects with power 0.8; a build that loses that
    much is caught about that often, and a build that only flips answers by chance (batch
    nondeterminism: as many gained as lost) is called bad about alpha of the time at most."""
    check = EvalCheck(Problems(PROBLEMS, []), concurrency=1)
    right, wrong = N - len(GOLDEN_WRONG), len(GOLDEN_WRONG)
    # three of the golden's right answers lost and three of its wrong ones gained: no drop
    flipped = frozenset([1, 2, 3, *sorted(GOLDEN_WRONG)[:3]])
    same = check.run(Flipping(0, 0.0, 0.0, flipped), golden())
    assert same.passed, same.evidence
    assert isinstance(same.details, EvalDetails) and same.details.power is not None
    power = same.details.power
    drop, stated, alpha = power.detectable_drop, power.power, power.alpha
    assert 0 < drop < 0.25 and stated == 0.8 and alpha == 0.05
    chance = 3 / N  # each way
    seen = failure_rate(check, 400, lose=(chance + drop) * N / right, gain=chance * N / wrong)
    assert seen >= stated - 0.05, f"stated power {stated} at a drop of {drop:.3f}, seen {seen}"
    seen = failure_rate(check, 400, lose=chance * N / right, gain=chance * N / wrong)
    assert seen <= alpha + 0.02, f"false alarms {seen} at alpha {alpha}"
    assert power.flips == 2 * chance and "McNemar" in power.test


class Cut:
    """Every answer cut by its budget after `tokens` tokens (the right number in it so far)."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens

    def chat(self, prompt: str, *, max_tokens: int, **extra: Any) -> ChatReply:
        answer = PROBLEMS[ASKED[prompt]].answer
        used = min(self.tokens, max_tokens)
        return ChatReply(
            f"The answer is {answer}. And then", None, "length", completion_tokens=used
        )


def finished_golden(finish: str) -> Golden:
    section = golden().checks.eval
    assert section is not None
    update = {
        "finish_reasons": [finish] * N,
        "completion_tokens": [40 if finish == "stop" else 256] * N,
        "cut_share": 1.0 if finish == "length" else 0.0,
    }
    return golden().model_copy(update={"checks": Sections(eval=section.model_copy(update=update))})


def test_answers_that_never_finish_where_the_good_build_did_are_wrong() -> None:
    check = EvalCheck(Problems(PROBLEMS, []), concurrency=1)
    result = check.run(Cut(10**6), finished_golden("stop"))
    assert not result.passed
    assert f"{N} of them did not finish where the good build did in 40 tokens" in result.evidence
    assert isinstance(result.details, EvalDetails) and result.details.paired is not None
    assert result.details.paired.n == N and result.details.paired.unfinished == N
    # cut with less room than twice the good build's 40 (a full context): not compared, but
    # nothing compared at all, and every answer cut where the golden's were not, never passes
    result = check.run(Cut(60), finished_golden("stop"))
    assert isinstance(result.details, EvalDetails) and result.details.paired is not None
    assert not result.passed and result.details.paired.n == 0
    assert "no answer could be compared with the golden's" in result.evidence
    assert "100% of answers were cut by their budget (golden 0%)" in result.evidence
    # where the good build was cut too, a cut answer is still no evidence
    result = check.run(Cut(10**6), finished_golden("length"))
    assert result.passed, result.evidence


class Counting(Flipping):
    """Flipping, counting the problems it was asked."""

    def __init__(self, seed: int, lose: float, gain: float) -> None:
        super().__init__(seed, lose, gain)
        self.asked = 0

    def chat(self, prompt: str, *, max_tokens: int, **extra: Any) -> ChatReply:
        self.asked += 1
        return super().chat(prompt, max_tokens=max_tokens, **extra)


def test_the_eval_stops_at_a_look_where_the_drop_is_beyond_doubt() -> None:
    """run_early (probe.early_stop, not at a run's ends) asks in four groups: a build that
    lost most answers is failed once the answers left cannot save it, says so, and states
    the power of the whole set's test; a good build is asked everything and passes; the
    false-alarm rate stays within alpha (simulation)."""
    check = EvalCheck(Problems(PROBLEMS, []), concurrency=1)
    broken = Counting(0, lose=0.9, gain=0.0)
    result = check.run_early(broken, golden())
    assert not result.passed and broken.asked < N, broken.asked
    assert f"stopped after {broken.asked} of {N} problems" in result.evidence
    assert "even if every one left were gained" in result.evidence
    details = result.details
    assert isinstance(details, EvalDetails)
    assert details.sequential is not None and details.sequential.stopped
    assert details.paired is not None and details.paired.n == broken.asked
    assert details.power is not None and details.power.alpha == 0.05  # the ends' test
    fine = Counting(0, lose=0.0, gain=0.0)
    result = check.run_early(fine, golden())
    assert result.passed and fine.asked == N
    assert isinstance(result.details, EvalDetails) and result.details.sequential is not None
    assert not result.details.sequential.stopped
    chance = 3 / N
    right, wrong = N - len(GOLDEN_WRONG), len(GOLDEN_WRONG)
    trials = 300
    alarms = sum(
        not check.run_early(Flipping(t, chance * N / right, chance * N / wrong), golden()).passed
        for t in range(trials)
    )
    assert alarms / trials <= 0.05 + 0.02, alarms / trials
    whole = check.run(Counting(0, lose=0.9, gain=0.0), golden()).details
    assert isinstance(whole, EvalDetails) and whole.sequential is None


class NullContent:
    """Every answer right, but in the reasoning channel: content null."""

    def chat(self, prompt: str, *, max_tokens: int, **extra: Any) -> ChatReply:
        return ChatReply(None, f"The answer is {PROBLEMS[ASKED[prompt]].answer}.", "stop")


def test_the_eval_says_what_it_asked_and_counts_replies_as_maintainers_do() -> None:
    """Every figure names the problems it is of (the bundled set is not GSM8K); content-null
    counts read "n of N replies"; the power states the chance flips it assumes, and where
    that figure comes from (none measured: 0 assumed; calibration's; the candidate's gains)."""
    check = EvalCheck(load(), concurrency=1)
    fine = check.run(Flipping(0, 0.0, 0.0), golden())
    named = "bundled arithmetic, 64 problems, not GSM8K"
    assert fine.passed and fine.evidence.startswith(f"{named}: accuracy 92% ["), fine.evidence
    assert isinstance(fine.details, EvalDetails) and fine.details.data == named
    power = fine.details.power
    assert power is not None and power.data == named and power.flips_from == "assumed"
    said = power.said()
    assert said.startswith(f"the eval ({named}) catches an accuracy drop of ")
    assert "flips: 0 assumed: nothing measured how many answers change by chance" in said
    nulls = check.run(NullContent(), golden())
    assert not nulls.passed and nulls.evidence.startswith(f"{named}: ")
    assert "64 of 64 replies have null content with the answer in reasoning" in nulls.evidence
    assert "(golden 0 of 64 replies)" in nulls.evidence
    # with calibration's measure of chance, the power is computed with it and says so
    noise = EvalNoise(accuracy_spread=0.0, accuracies=[0.92], flips=6 / 64)
    calibrated = golden().model_copy(
        update={"calibration": Calibration(runs=3, restarts=0, eval=noise)}
    )
    power = check.run(Flipping(0, 0.0, 0.0), calibrated).details.power  # type: ignore[union-attr]
    assert power is not None and power.flips_from == "calibration"
    assert "flips: 9.4% of answers change by chance, as calibration measured" in power.said()
    flipped = frozenset([1, 2, 3, *sorted(GOLDEN_WRONG)[:4]])  # 4 gained: 12.5% by chance
    gains = check.run(Flipping(0, 0.0, 0.0, flipped), golden()).details
    assert isinstance(gains, EvalDetails) and gains.power is not None
    assert gains.power.flips_from == "gains" and "gained answers show" in gains.power.said()
