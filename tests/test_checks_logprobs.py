"""The logprobs check against a recorded golden, with an endpoint that answers from a script."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llm_bisect.checks.golden import (
    Calibration,
    Golden,
    LogprobsCase,
    LogprobsNoise,
    LogprobsSection,
    Sections,
)
from llm_bisect.checks.logprobs import LogprobsCheck, LogprobsDetails
from llm_bisect.client import ChatReply
from llm_bisect.model import Step

PROMPT = "hello how are you"
GOLDEN_TOKENS = [str(100 + i) for i in range(32)]


def step(token: str, top: Sequence[str] = ()) -> Step:
    return Step(token, -0.1, {token: -0.1, **{t: -0.5 for t in top}})


class Scripted:
    """Answers every prompt with the same greedy steps."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps

    def chat(self, prompt: str, *, max_tokens: int, **extra: Any) -> ChatReply:
        return ChatReply(
            content="".join(s.token for s in self.steps) or None,
            reasoning=None,
            finish_reason="stop" if len(self.steps) < max_tokens else "length",
            steps=tuple(self.steps),
        )


def golden(noise: LogprobsNoise | None = None, tops: Sequence[str] = ()) -> Golden:
    case = LogprobsCase(
        prompt=PROMPT,
        content="".join(GOLDEN_TOKENS),
        steps=[(t, -0.1, {t: -0.1, **{x: -0.5 for x in tops}}) for t in GOLDEN_TOKENS],
        token_ids=[],
        prompt_token_ids=[],
        teacher=[],
    )
    section = LogprobsSection(top_k=5, max_tokens=32, cases=[case])
    calibration = Calibration(runs=3, restarts=1, logprobs=noise) if noise else None
    return Golden(
        version=2, commit="a" * 40, checks=Sections(logprobs=section), calibration=calibration
    )


def test_the_golden_itself_passes() -> None:
    result = LogprobsCheck([PROMPT]).run(Scripted([step(t) for t in GOLDEN_TOKENS]), golden())
    assert result.passed, result.evidence
    assert isinstance(result.details, LogprobsDetails)
    assert result.details.metrics.agreement == 1.0


def test_a_build_that_stops_early_diverges_where_it_stopped() -> None:
    """0 of the golden's 32 tokens, or the first 8 and then nothing: not close to the golden."""
    for kept in (0, 8):
        check = LogprobsCheck([PROMPT])
        result = check.run(Scripted([step(t) for t in GOLDEN_TOKENS[:kept]]), golden())
        assert not result.passed, (kept, result.evidence)
        assert isinstance(result.details, LogprobsDetails)
        (case,) = result.details.cases
        assert case.first_divergence == kept and case.close is False
        assert f"tokens part at position {kept}: this output ends there" in result.evidence


def test_agreement_below_the_calibrated_floor_fails_even_when_the_swap_is_close() -> None:
    """A plausible first token, then the golden's text is gone: vLLM's rule forgives the swap.
    Where calibration saw the good build keep to its own text, the agreement floor does not;
    where it saw the good build swap as early, or there is no calibration (one close swap is
    kernel noise wherever it falls; teacher forcing judges what follows), it passes."""
    swapped = [step("999", top=[GOLDEN_TOKENS[0]]), *[step(str(500 + i)) for i in range(31)]]
    steady = LogprobsNoise(
        max_abs_delta=0.01, teacher_mean_abs_delta=0.01, not_close=0, min_agreement=1.0
    )
    result = LogprobsCheck([PROMPT]).run(Scripted(swapped), golden(steady, tops=["999"]))
    assert isinstance(result.details, LogprobsDetails)
    assert result.details.cases[0].close is True  # vLLM's rule alone would pass it
    assert not result.passed and "agreement 0.00 <" in result.evidence, result.evidence
    limit = result.details.thresholds["min_agreement"]
    assert limit.source.startswith("calibration") and 0 < limit.value < 1
    noisy = LogprobsNoise(
        max_abs_delta=0.01, teacher_mean_abs_delta=0.01, not_close=0, min_agreement=0.0
    )
    for calibration in (noisy, None):
        result = LogprobsCheck([PROMPT]).run(Scripted(swapped), golden(calibration, tops=["999"]))
        assert result.passed, result.evidence
        assert isinstance(result.details, LogprobsDetails)
        assert result.details.thresholds["min_agreement"].value == 0.0
