"""The verdict policy."""

from __future__ import annotations

from llm_bisect.model import CheckResult, Verdict
from llm_bisect.redact import redact
from llm_bisect.verdict import combine_repeats, judge


def test_any_failing_check_makes_it_bad_and_names_it() -> None:
    ok = CheckResult("canary", True, 1.0, "fine")
    bad = CheckResult("expect", False, 0.0, "'2+2' → What is2 +")
    assert judge([ok])[0] is Verdict.GOOD
    verdict, reason = judge([ok, bad])
    assert verdict is Verdict.BAD
    assert reason == "failed: expect — '2+2' → What is2 +"


def test_repeats_agree_or_are_unsure() -> None:
    assert combine_repeats([(Verdict.BAD, "x"), (Verdict.BAD, "y")]) == (Verdict.BAD, "x")
    verdict, reason = combine_repeats(
        [(Verdict.BAD, "x"), (Verdict.GOOD, "y"), (Verdict.GOOD, "z")]
    )
    assert verdict is Verdict.UNSURE and "1 of 3 bad" in reason


def test_redact_masks_secrets_but_not_short_values() -> None:
    assert redact("token=hf_abcdef and hf_abc", ["hf_abcdef", "ab"]) == "token=*** and hf_abc"
