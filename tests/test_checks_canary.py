"""The canary judged against the good build's answer to the same prompt."""

from __future__ import annotations

import pytest

from llm_bisect.checks.canary import judge_reply
from llm_bisect.checks.golden import Answer

PROSE = (
    "The sea is wide and deep, and its waves move with the wind and the moon. Sailors have "
    "read its colours for centuries to tell calm days from storms."
)
NOW = "G now now now now now now now now now now now now now now now now now now now now now"


def golden(content: str | None, reasoning: str | None = None, finish: str = "stop") -> Answer:
    return Answer(
        prompt="p", content=content, reasoning=reasoning, finish_reason=finish, max_tokens=256
    )


@pytest.mark.parametrize(
    ("reply", "baseline", "problem"),
    [
        # content null: evidence only where the good build had content and the answer finished
        ((None, PROSE, "stop"), golden(PROSE), "content is null, text only in the reasoning"),
        ((None, PROSE, "stop"), golden(None, PROSE), None),
        ((None, PROSE, "length"), golden(PROSE), None),
        (("  ", None, "stop"), golden(PROSE), "content is empty"),
        # degeneration: evidence unless the good build's text was as degenerate
        ((PROSE, NOW, "length"), golden(PROSE, PROSE), "reasoning degenerate"),
        ((PROSE, NOW, "length"), golden(PROSE, NOW), None),
        ((PROSE, "now " * 400, "length"), golden(PROSE, NOW + " " + PROSE * 3), "reasoning degen"),
        # without a golden the rules are absolute, and a cut answer is still not evidence
        ((None, PROSE, "stop"), None, "content is null"),
        ((None, PROSE, "length"), None, None),
        ((NOW, PROSE, "stop"), None, "content degenerate"),
    ],
)
def test_a_rule_counts_where_the_good_build_passed_it(
    reply: tuple[str | None, str | None, str], baseline: Answer | None, problem: str | None
) -> None:
    found = [p for _, p in judge_reply(*reply, baseline)]
    if problem is None:
        assert found == []
    else:
        assert found and found[0].startswith(problem), found


def test_a_cut_answer_is_evidence_where_the_good_build_finished_in_half_its_room() -> None:
    finished = Answer(
        prompt="p", content=PROSE, finish_reason="stop", max_tokens=256, completion_tokens=40
    )
    cut = golden(None, PROSE, "length")
    # the good build finished in 40 tokens; this answer was still going at 512 (or at 80)
    for used in (512, 80):
        (problem,) = [p for _, p in judge_reply(PROSE, PROSE, "length", finished, used)]
        assert problem == f"did not finish where the good build did in 40 tokens (cut at {used})"
    assert judge_reply(PROSE, PROSE, "length", finished, 79) == []  # less room than that
    assert judge_reply(PROSE, PROSE, "length", cut, 512) == []  # the good build was cut too
    assert judge_reply(PROSE, PROSE, "stop", finished, 512) == []
    assert judge_reply(PROSE, PROSE, "length", None, 512) == []  # no golden: never evidence
    # a golden without token counts: its budget is what the good build finished in
    (problem,) = [p for _, p in judge_reply(PROSE, None, "length", golden(PROSE), 512)]
    assert "in 256 tokens (cut at 512)" in problem
