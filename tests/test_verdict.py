"""The verdict policy."""

from __future__ import annotations

import pytest

from llm_bisect.model import CheckResult, Regress, Stage, Verdict
from llm_bisect.redact import redact
from llm_bisect.verdict import combine_repeats, decide, judge, leaning, untested


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


@pytest.mark.parametrize(
    ("regress", "passed", "failed", "crashed"),
    [
        (Regress.SEMANTIC, Verdict.GOOD, Verdict.BAD, Verdict.SKIP),
        (Regress.CRASH, Verdict.GOOD, Verdict.GOOD, Verdict.BAD),
        (Regress.ANY, Verdict.GOOD, Verdict.BAD, Verdict.BAD),
        (Regress.START, Verdict.GOOD, Verdict.GOOD, Verdict.GOOD),
    ],
)
def test_the_regress_policy_decides_what_a_crash_and_a_failed_check_mean(
    regress: Regress, passed: Verdict, failed: Verdict, crashed: Verdict
) -> None:
    assert decide(regress, (Verdict.GOOD, "4 check(s) passed"), None)[0] is passed
    assert decide(regress, (Verdict.BAD, "failed: canary"), None)[0] is failed
    verdict, reason = decide(regress, None, "server exited with code 134")
    assert verdict is crashed and "crashed during checks" in reason
    assert "server exited with code 134" in reason
    # checks that disagree across repeats: unsure, unless checks are not the regression
    unsure = Verdict.GOOD if regress in (Regress.CRASH, Regress.START) else Verdict.UNSURE
    assert decide(regress, (Verdict.UNSURE, "disagree"), None)[0] is unsure


@pytest.mark.parametrize("regress", list(Regress))
@pytest.mark.parametrize("stage", [Stage.ARTIFACT, Stage.LAUNCH, Stage.READY])
def test_a_build_that_never_started_is_bad_only_under_regress_start(
    regress: Regress, stage: Stage
) -> None:
    """No artifact, no build or launch: skip under every policy; a server that never became
    ready: skip, but bad when the user bisects a start failure (`regress: start`)."""
    verdict, reason = untested(regress, stage, "server exited with code 3 before ready")
    bad = regress is Regress.START and stage is Stage.READY
    assert verdict is (Verdict.BAD if bad else Verdict.SKIP)
    assert reason.endswith("server exited with code 3 before ready")
    assert ("regress: start" in reason) == bad


def test_an_unsure_probe_leans_where_most_repeats_went_and_the_posterior_search_weighs_that() -> (
    None
):
    from llm_bisect.model import ProbeOutcome
    from llm_bisect.posterior import Policy
    from llm_bisect.runner import history

    bad, good = (Verdict.BAD, "failed"), (Verdict.GOOD, "passed")
    assert leaning([bad, bad, good]) is Verdict.BAD
    assert leaning([good, bad, good]) is Verdict.GOOD
    assert leaning([good, bad]) is None and leaning([bad, bad]) is None  # a tie; agreement
    sha = "a" * 40
    unsure = ProbeOutcome(sha, Verdict.UNSURE, "checks disagree across repeats: 2 of 3 bad",
                          leaning=Verdict.BAD)  # fmt: skip
    assert ProbeOutcome.from_json(unsure.to_json()) == unsure  # as the journal keeps it
    # verdicts as facts: unsure stays unsure (today's search steps around it); weighed: the
    # one start's repeats together are one observation, what most of them said
    assert history([unsure]) == {sha: [Verdict.UNSURE]}
    assert history([unsure], Policy()) == {sha: [Verdict.BAD]}
    tie = ProbeOutcome(sha, Verdict.UNSURE, "checks disagree across repeats: 1 of 2 bad")
    assert history([tie], Policy()) == {sha: [Verdict.UNSURE]}  # carries nothing
