"""Token/logprob comparison and GSM8K scoring, pure."""

from __future__ import annotations

import pytest

from llm_bisect.checks.compare import diverge, teacher_deltas
from llm_bisect.checks.eval import score_answers
from llm_bisect.checks.gsm8k import Problem, extract, load_problems, wilson
from llm_bisect.model import Step


def steps(
    tokens: str, lp: float = -0.1, top: dict[str, dict[str, float]] | None = None
) -> list[Step]:
    return [Step(t, lp, (top or {}).get(t, {t: lp})) for t in tokens.split()]


def test_identical_outputs_agree_everywhere() -> None:
    d = diverge(steps("a b c"), steps("a b c", lp=-0.12))
    assert d.first is None and d.close and d.agreement == 1.0
    assert d.max_abs_delta == pytest.approx(0.02)


def test_a_swap_inside_each_others_top_k_is_close() -> None:
    golden = [Step("a", -0.1, {"a": -0.1}), Step("b", -0.7, {"b": -0.7, "x": -0.8})]
    cand = [Step("a", -0.1, {"a": -0.1}), Step("x", -0.7, {"x": -0.7, "b": -0.75})]
    d = diverge(golden, cand)
    assert d.first == 1 and d.close and d.agreement == 0.5


def test_garbage_that_starts_elsewhere_is_not_close() -> None:
    d = diverge(steps("I am well"), steps("now now now"))
    assert d.first == 0 and not d.close and d.agreement == 0.0


def test_teacher_forcing_scores_every_position() -> None:
    assert teacher_deltas([-0.1, -0.2, -0.3], [None, -0.25, -1.3]) == pytest.approx([0.05, 1.0])


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("so 3 + 4 = 7\n#### 7", "7"),
        ("The answer is 1,234.", "1234"),
        ("The final answer is: $42", "42"),
        ("first 3 then 5 then 8.", "8"),
        ("The answer is 12.0", "12"),
        ("no digits here", None),
        (None, None),
    ],
)
def test_answer_extraction(text: str | None, number: str | None) -> None:
    assert extract(text) == number


def test_the_bundled_set_has_enough_problems_with_integer_answers() -> None:
    problems = load_problems()
    assert len(problems) >= 50
    assert all(p.answer.lstrip("-").isdigit() for p in problems)
    assert len({p.question for p in problems}) == len(problems)


def test_wilson() -> None:
    low, high = wilson(45, 50)
    assert 0.78 < low < 0.8 and 0.95 < high < 0.97
    assert wilson(0, 50)[0] == 0.0


def test_null_content_with_the_answer_in_reasoning_is_counted() -> None:
    problems = [Problem("q1", "4"), Problem("q2", "9")]
    got = score_answers(problems, [(None, "so it is 4"), ("The answer is 9.", None)])
    assert got.accuracy == 0.5 and got.null_share == 0.5 and got.invalid_share == 0.5


def test_an_output_that_ends_early_diverges_where_it_ended() -> None:
    d = diverge(steps("a b c d"), steps("a b"))
    assert d.first == 2 and not d.close and d.agreement == 0.5
    d = diverge(steps("a b c d"), [])
    assert d.first == 0 and not d.close and d.agreement == 0.0
    d = diverge(steps("a b"), steps("a b c"))  # it ran on where the golden ended
    assert d.first == 2 and not d.close
