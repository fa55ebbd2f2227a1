"""Canary metrics on natural and degenerate text (corpora in tests/corpus)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm_bisect.checks.canary import judge_reply
from llm_bisect.checks.metrics import degeneration, measure

CORPUS = Path(__file__).parent / "corpus"


@pytest.mark.parametrize("path", sorted((CORPUS / "normal").glob("*.txt")), ids=lambda p: p.stem)
def test_natural_text_passes(path: Path) -> None:
    assert degeneration(path.read_text()) == []


@pytest.mark.parametrize(
    "path", sorted((CORPUS / "degenerate").glob("*.txt")), ids=lambda p: p.stem
)
def test_degenerate_text_fails(path: Path) -> None:
    assert degeneration(path.read_text()) != []


def test_the_reported_reasoning_channel_is_flagged_with_its_token() -> None:
    text = (CORPUS / "degenerate" / "now.txt").read_text()
    m = measure(text)
    assert m.top_token == "now" and m.max_run >= 8
    assert any("'now'" in r for r in degeneration(text))


def test_null_content_with_the_answer_in_reasoning_is_a_problem() -> None:
    problems = judge_reply(None, "The user asks 2+2. The answer is 4.")
    assert problems == [("reasoning", "content is null, text only in the reasoning channel")]


def test_a_healthy_reply_has_no_problem() -> None:
    assert judge_reply("I'm well, thanks!", "The user greets me.") == []


def test_degenerate_reasoning_is_caught_even_when_content_looks_fine() -> None:
    now = (CORPUS / "degenerate" / "now.txt").read_text()
    problems = judge_reply("I'm fine", now)
    assert [c for c, _ in problems] == ["reasoning"]
