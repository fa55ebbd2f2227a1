"""The logprobs check against a recorded golden, with an endpoint that answers from a script."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from helpers import cli_bounded
from llm_bisect.checks.golden import (
    Calibration,
    Golden,
    LogprobsCase,
    LogprobsNoise,
    LogprobsSection,
    Sections,
)
from llm_bisect.checks.logprobs import LogprobsCheck, LogprobsConfig, LogprobsDetails
from llm_bisect.client import SEED, ChatReply
from llm_bisect.model import Step
from llm_bisect.report.documents import ResultDocument

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


def nan_at(kept: int) -> list[Step]:
    """The golden's tokens, the logprobs NaN from position `kept` on."""
    return [
        Step(t, -0.1 if i < kept else float("nan"), {t: -0.1 if i < kept else float("nan")})
        for i, t in enumerate(GOLDEN_TOKENS)
    ]


def test_nan_logprobs_on_the_golden_text_fail_with_the_positions_named() -> None:
    """max(0.0, nan) is 0.0: a NaN once passed as "max |Δ| 0.000"."""
    result = LogprobsCheck([PROMPT]).run(Scripted(nan_at(3)), golden())
    assert not result.passed, result.evidence
    assert "29 logprob(s) NaN or infinite where the golden's are numbers" in result.evidence
    assert "position(s) 3, 4, 5" in result.evidence
    assert isinstance(result.details, LogprobsDetails)
    assert result.details.metrics.non_finite == 29
    assert result.details.cases[0].non_finite == list(range(3, 32))
    text = result.details.model_dump_json()  # every figure written is a number
    json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} written"))


def test_zero_probability_on_both_sides_is_agreement() -> None:
    """-inf (vLLM writes -9999.0) for an alternative the golden also gave probability 0."""
    inf = float("-inf")
    steps = [Step(t, -0.1, {t: -0.1, "7": inf}) for t in GOLDEN_TOKENS]
    g = golden().checks.logprobs
    assert g is not None
    cases = [
        c.model_copy(update={"steps": [(t, -0.1, {t: -0.1, "7": inf}) for t in GOLDEN_TOKENS]})
        for c in g.cases
    ]
    gold = golden().model_copy(
        update={
            "checks": golden().checks.model_copy(
                update={"logprobs": g.model_copy(update={"cases": cases})}
            )
        }
    )
    result = LogprobsCheck([PROMPT]).run(Scripted(steps), gold)
    assert result.passed, result.evidence
    # where the golden's alternative is a number, -inf now is not agreement
    result = LogprobsCheck([PROMPT]).run(Scripted(steps), golden(tops=["7"]))
    assert not result.passed and "NaN or infinite" in result.evidence


def test_a_bisection_onto_nan_logprobs_names_them_and_its_documents_read_back(
    tmp_path: Path, history: Any
) -> None:
    """A NaN once made result.json fail to write (236 validation errors), and so resume and
    `report DIR`."""
    h = history({5: "nan-logprobs"}, n=8)
    out = tmp_path / "out"
    code, said = cli_bounded("run", str(h.config()), "--out", str(out))
    assert code == 0, said
    assert f"found: {h.shas[5]}" in said
    doc = ResultDocument.model_validate_json((out / "result.json").read_bytes())
    culprit = doc.probe_of(h.shas[5])
    assert culprit is not None
    (logprobs,) = [c for c in culprit.checks if c.name == "logprobs"]
    assert "NaN or infinite where the golden's are numbers" in logprobs.evidence
    code, again = cli_bounded("report", str(out))
    assert code == 0 and f"found: {h.shas[5]}" in again, again
    code, resumed = cli_bounded("run", str(h.config()), "--out", str(out))
    assert code == 0 and f"found: {h.shas[5]}" in resumed, resumed


def test_every_request_is_greedy_and_seeded_and_the_logprobs_check_asks_one_at_a_time(
    tmp_path: Path, history: Any
) -> None:
    """What the simulated server received, request by request: chat and completions (the
    teacher-forced prompt_logprobs included) at temperature 0 with the client's seed, and the
    logprobs check's requests each alone in flight (canary, expect and eval send theirs
    concurrently)."""
    h = history({}, n=2)
    log = tmp_path / "requests.jsonl"
    server = {"command": [*h.config_command(), "--request-log", str(log)]}
    checks = [{"type": "canary"}, {"type": "logprobs"}, {"type": "eval", "limit": 8}]
    config = h.config(server=server, checks=checks)
    code, said = cli_bounded("golden", str(config), "--candidate", h.shas[0],
                             "-o", str(tmp_path / "golden.json"))  # fmt: skip
    assert code == 0, said
    config = h.config(server=server, golden=str(tmp_path / "golden.json"), checks=checks)
    code, said = cli_bounded("check", str(config), "--candidate", h.shas[1],
                             "--out", str(tmp_path / "out"))  # fmt: skip
    assert code == 0, said
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    asked = [r for r in seen if r["path"] in ("/v1/chat/completions", "/v1/completions")]
    assert {r["path"] for r in asked} == {"/v1/chat/completions", "/v1/completions"}
    for r in asked:
        assert r["body"]["temperature"] == 0 and r["body"]["seed"] == SEED, r
    logprobs = [r for r in asked if r["body"].get("logprobs") or "prompt_logprobs" in r["body"]]
    assert any("prompt_logprobs" in r["body"] for r in logprobs)  # teacher forcing was asked
    assert len(logprobs) >= 2 * len(LogprobsConfig(type="logprobs").prompts)  # record + run
    assert [r["in_flight"] for r in logprobs] == [1] * len(logprobs)
