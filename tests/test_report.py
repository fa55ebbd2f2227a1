"""result.json and report.md rendered from values, no server."""

from __future__ import annotations

from llm_bisect.model import Candidate, CheckResult, ProbeOutcome, Verdict
from llm_bisect.report.markdown import render_markdown
from llm_bisect.report.result import build_result
from llm_bisect.search import Answer, Mode, Plan, Status

SEQ = tuple(
    Candidate(f"{i:040x}", subject=f"commit {i} | piped", author="A <a@x>") for i in range(5)
)


def outcome(i: int, verdict: Verdict, evidence: str = "fine") -> ProbeOutcome:
    passed = verdict is Verdict.GOOD
    check = CheckResult("canary", passed, 1.0 if passed else 0.0, evidence)
    return ProbeOutcome(SEQ[i].commit, verdict, "reason", (check,), {"total": 1.25})


def test_found_report_has_culprit_evidence_and_table() -> None:
    plan = Plan(Mode.REGRESSION, SEQ)
    answer = Answer(
        Status.FOUND, SEQ[3], (SEQ[2].commit, SEQ[3].commit), "first bad candidate found"
    )
    probes = [
        outcome(0, Verdict.GOOD),
        outcome(4, Verdict.BAD, "now now now"),
        outcome(2, Verdict.GOOD, "I am well"),
        outcome(3, Verdict.BAD, "now now now"),
    ]
    result = build_result(plan, answer, probes)
    assert result["status"] == "found"
    assert result["culprit"] == SEQ[3].to_json()
    assert result["good"] == SEQ[0].commit and result["bad"] == SEQ[4].commit
    assert [p["verdict"] for p in result["probes"]] == ["good", "bad", "good", "bad"]
    md = render_markdown(result)
    assert f"`{SEQ[3].commit}` commit 3 | piped" in md
    assert f"- **first bad** `{SEQ[3].short}`: now now now" in md
    assert f"- **last good** `{SEQ[2].short}`: I am well" in md
    assert "| 4 | `" in md and "commit 3 \\| piped" in md and "| 1.2 |" in md


def test_ambiguous_lists_every_possible_first_bad() -> None:
    plan = Plan(Mode.REGRESSION, SEQ)
    rng = tuple(c.commit for c in SEQ[1:4])
    md = render_markdown(
        build_result(plan, Answer(Status.AMBIGUOUS, None, rng, "2 untestable"), [])
    )
    assert "## Could be any of" in md
    assert f"- `{SEQ[2].commit}`" in md and f"- `{SEQ[3].commit}`" in md
    assert "## Culprit" not in md


def test_merge_base_bad_names_the_fix_range() -> None:
    anchor = Candidate("f" * 40, subject="nightly")
    plan = Plan(Mode.REGRESSION, SEQ, anchor=anchor)
    answer = Answer(
        Status.NO_REGRESSION, None, (), "predates", fix_range=(SEQ[0].commit, anchor.commit)
    )
    result = build_result(plan, answer, [])
    assert result["merge_base"] == SEQ[0].commit
    assert result["fix_range"] == [SEQ[0].commit, anchor.commit]
    assert "--find-fix" in render_markdown(result)


def test_the_report_says_how_small_a_drop_the_eval_could_see() -> None:
    from llm_bisect.checks.gsm8k import detectable_drop

    assert round(detectable_drop(0.92, 64), 3) == 0.119  # 92% → 87% passes unseen
    assert round(detectable_drop(0.92, 1319), 3) == 0.026
    assert detectable_drop(1.0, 64) > 0 and detectable_drop(0.5, 0) == 1.0
    plan = Plan(Mode.REGRESSION, SEQ)
    answer = Answer(Status.NO_REGRESSION, None, (), "no change")
    for n, warned in ((64, True), (1319, False)):
        power = {"n": n, "golden_accuracy": 0.92, "alpha": 0.05, "power": 0.8}
        power["detectable_drop"] = detectable_drop(0.92, n)
        check = CheckResult("eval", True, 0.92, "fine", {"power": power})
        probe = ProbeOutcome(SEQ[0].commit, Verdict.GOOD, "ok", (check,), {"total": 1.0})
        result = build_result(plan, answer, [probe])
        assert result["eval_power"] == power
        md = render_markdown(result)
        assert f"The eval's {n} problems detect an accuracy drop of" in md
        assert ("⚠" in md and "passes unseen" in md) is warned
