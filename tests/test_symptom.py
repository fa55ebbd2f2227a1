"""symptom.py: which bad probes the search counts as bad (`search.symptom`). Pure."""

from __future__ import annotations

from hypothesis import given, strategies as st

from llm_bisect.model import Candidate, CheckResult, ProbeOutcome, Verdict
from llm_bisect.search import Mode, Plan, plan_step
from llm_bisect.symptom import CRASH, Symptom, count, symptom_of

SEQ = tuple(Candidate(f"{i:040x}", subject=f"c{i}") for i in range(8))
PLAN = Plan(Mode.REGRESSION, SEQ)
CHECKS = ("canary", "expect", "logprobs")


def outcome(
    i: int, failed: tuple[str, ...] = (), *, not_run: tuple[str, ...] = (), crash: bool = False
) -> ProbeOutcome:
    """Commit i's probe: the CHECKS that ran, `failed` among them (bad when any failed)."""
    if crash:
        return ProbeOutcome(SEQ[i].commit, Verdict.BAD, "crashed during checks: boom")
    ran = [c for c in CHECKS if c not in not_run]
    checks = tuple(CheckResult(c, c not in failed, 1.0, f"{c} said") for c in ran)
    verdict = Verdict.BAD if failed else Verdict.GOOD
    return ProbeOutcome(SEQ[i].commit, verdict, f"failed: {', '.join(failed)}", checks, {}, "",
                        not_run=not_run)  # fmt: skip


def test_any_counts_every_probe_as_it_tested() -> None:
    probes = [outcome(0), outcome(7, ("canary",)), outcome(3, ("expect",))]
    counted = count(PLAN, probes, Symptom.ANY)
    assert counted.shown == counted.used == tuple(probes)
    assert counted.reference is None and not counted.held and not counted.other


def test_same_counts_a_middle_bad_with_another_symptom_good_and_says_so() -> None:
    probes = [outcome(0), outcome(7, ("canary",)), outcome(3, ("expect",)), outcome(5, ("canary",))]
    counted = count(PLAN, probes, Symptom.SAME)
    assert counted.reference == ("canary",)
    assert [p.verdict for p in counted.used] == [Verdict.GOOD, Verdict.BAD, Verdict.GOOD,
                                                 Verdict.BAD]  # fmt: skip
    other = counted.used[2]
    assert other.reason.startswith(
        "another symptom: failed expect; the bad end failed canary (counted good: "
        "search.symptom: same) — failed: expect"
    )
    assert other.checks == probes[2].checks  # its failures stay visible
    assert counted.other == (SEQ[3].commit,)
    # the search then goes past the other regression, to the bad end's
    history = {p.commit: p.verdict for p in counted.used}
    assert plan_step(PLAN, history) == SEQ[4]


def test_a_shared_check_is_the_same_symptom_and_the_ends_count_as_they_test() -> None:
    probes = [outcome(0, ("logprobs",)), outcome(7, ("canary", "expect")), outcome(4, ("expect",))]
    counted = count(PLAN, probes, Symptom.SAME)
    assert [p.verdict for p in counted.used] == [Verdict.BAD, Verdict.BAD, Verdict.BAD]
    assert counted.reference == ("canary", "expect") and counted.other == ()


def test_a_bad_middle_waits_for_the_bad_ends_symptom() -> None:
    """k slots: a middle probe may finish before the bad end's; it is held, never judged
    by a rule that cannot be applied yet, and judged once the bad end is in."""
    probes = [outcome(0), outcome(4, ("expect",)), outcome(2)]
    counted = count(PLAN, probes, Symptom.SAME)
    assert counted.held == {SEQ[4].commit} and counted.reference is None
    assert [p.commit for p in counted.used] == [SEQ[0].commit, SEQ[2].commit]
    assert not counted.decisive("expect")  # unknown: a suite runs whole
    later = count(PLAN, [*probes, outcome(7, ("canary",))], Symptom.SAME)
    assert not later.held and later.used[1].verdict is Verdict.GOOD
    assert later.decisive("canary") and not later.decisive("expect")


def test_a_bad_end_that_did_not_test_bad_gives_nothing_to_compare() -> None:
    probes = [outcome(0), outcome(7), outcome(4, ("expect",))]
    counted = count(PLAN, probes, Symptom.SAME)
    assert counted.reference == () and counted.used == tuple(probes)
    assert counted.decisive("expect")


def test_a_crash_is_its_own_symptom_and_a_middle_crash_cannot_tell() -> None:
    crashed_end = count(PLAN, [outcome(0), outcome(7, crash=True), outcome(3, crash=True),
                               outcome(5, ("canary",))], Symptom.SAME)  # fmt: skip
    assert crashed_end.reference == (CRASH,)
    assert [p.verdict for p in crashed_end.used[2:]] == [Verdict.BAD, Verdict.GOOD]
    assert crashed_end.used[3].reason.startswith("another symptom: failed canary; the bad end "
                                                 "crashed")  # fmt: skip
    # a middle that crashed lost its checks' results: it cannot say it lacks the canary's
    crashed_middle = count(PLAN, [outcome(7, ("canary",)), outcome(3, crash=True)], Symptom.SAME)
    assert crashed_middle.used[1].verdict is Verdict.SKIP
    assert "cannot tell whether it failed canary" in crashed_middle.used[1].reason
    assert symptom_of(outcome(3, crash=True)) == (CRASH,) and symptom_of(outcome(3)) == ()


def test_a_probe_that_stopped_before_the_bad_ends_checks_is_probed_again_once() -> None:
    """A run under `any` stopped a suite at its first failure (`probe.early_stop`); resumed
    under `same`, that probe cannot tell whether the build has the bad end's symptom."""
    stopped = outcome(3, ("canary",), not_run=("expect", "logprobs"))
    probes = [outcome(0), outcome(7, ("expect",)), stopped]
    counted = count(PLAN, probes, Symptom.SAME)
    assert counted.untold == (SEQ[3].commit,)
    assert [p.commit for p in counted.used] == [SEQ[0].commit, SEQ[7].commit]  # probed again
    assert counted.shown[2].verdict is Verdict.SKIP
    assert "stopped early (probe.early_stop) before expect" in counted.shown[2].reason
    assert plan_step(PLAN, {p.commit: p.verdict for p in counted.used}) == SEQ[3]
    # its second probe ran the bad end's checks: it tells
    whole = outcome(3, ("canary",))
    told = count(PLAN, [*probes, whole], Symptom.SAME)
    assert told.used[-1].verdict is Verdict.GOOD and told.other == (SEQ[3].commit,)
    # a second probe that still cannot tell is untestable, never probed a third time
    again = count(PLAN, [*probes, stopped], Symptom.SAME)
    assert again.used[-1].verdict is Verdict.SKIP and again.untold == (SEQ[3].commit,)
    # a stop that left out only checks outside the bad end's symptom tells
    beside = count(PLAN, [outcome(7, ("canary",)), outcome(3, ("expect",), not_run=("logprobs",))],
                   Symptom.SAME)  # fmt: skip
    assert beside.used[1].verdict is Verdict.GOOD and not beside.untold


def test_find_fix_mode_reads_the_bad_end_at_the_old_end() -> None:
    plan = Plan(Mode.FIX, SEQ)
    probes = [outcome(7), outcome(0, ("canary",)), outcome(3, ("expect",))]
    counted = count(plan, probes, Symptom.SAME)
    assert counted.reference == ("canary",)
    assert counted.used[2].verdict is Verdict.GOOD  # no longer the bug tracked: fixed there


FAILS = st.lists(st.sampled_from(CHECKS), unique=True, max_size=3).map(tuple)


@given(st.lists(st.tuples(st.integers(0, 7), FAILS), max_size=12))
def test_same_only_ever_turns_a_bad_middle_good_or_untold(
    raw: list[tuple[int, tuple[str, ...]]],
) -> None:
    probes = [outcome(i, failed) for i, failed in raw]
    counted = count(PLAN, probes, Symptom.SAME)
    assert len(counted.shown) == len(probes)
    for before, after in zip(probes, counted.shown, strict=True):
        if after.verdict is not before.verdict:
            assert before.verdict is Verdict.BAD and after.verdict is Verdict.GOOD
            assert before.commit not in (PLAN.good.commit, PLAN.bad.commit)
    ends = [p for p in probes if p.commit == PLAN.bad.commit]
    if not ends:
        assert not counted.other  # nothing is judged before the bad end's symptom is known
