"""result.json: the contract users script against. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..checks.eval import EvalDetails, Power
from ..checks.logprobs import LogprobsDetails
from ..fingerprint import differences
from ..journal import Span
from ..model import Candidate, CheckResult, ProbeOutcome, Regress, Threshold, Verdict
from ..posterior import EXACT, Policy
from ..priors import share
from ..search import Answer, Mode, Plan, Status, bounds, settle
from ..symptom import Counted, Symptom, count
from .documents import (
    Build,
    CandidateDoc,
    CheckDoc,
    Context,
    Disagreed,
    KnownDoc,
    LookDoc,
    PriorDoc,
    ProbeDoc,
    Rates,
    ResultDocument,
    Retest,
    Reversal,
    SearchDoc,
    Sides,
    Step,
    SymptomDoc,
    TrialDoc,
)


def thresholds_of(probes: Sequence[ProbeOutcome]) -> dict[str, dict[str, Threshold]]:
    """The thresholds each golden check judged by (value and where it came from)."""
    found: dict[str, dict[str, Threshold]] = {}
    for p in probes:
        for check in p.checks:
            details = check.details
            if isinstance(details, LogprobsDetails | EvalDetails) and check.name not in found:
                found[check.name] = details.thresholds
    return found


def power_of(probes: Sequence[ProbeOutcome]) -> Power | None:
    """What the eval could detect: n, the golden's accuracy, the smallest detectable drop."""
    for p in probes:
        for check in p.checks:
            if isinstance(check.details, EvalDetails) and check.details.power is not None:
                return check.details.power
    return None


@dataclass(frozen=True)
class Ran:
    """How a search ran, as its result.json says: the rules it judged and counted verdicts
    by, where its good build fails a rule itself, when each probe ran, how it was asked for."""

    regress: Regress = Regress.SEMANTIC
    warnings: Sequence[str] = ()
    """Where the good build fails a rule itself (from its golden)."""
    spans: Sequence[Span] = ()
    """When each probe ran, in order."""
    context: Context | None = None
    """How the run was asked for (documents.Context)."""
    started: float | None = None
    ended: float | None = None
    parallel: int = 1
    policy: Policy = EXACT
    """How the search weighed verdicts (`search:`)."""
    symptom: Symptom = Symptom.ANY
    """Which bad probes it counted bad (`search.symptom`)."""


def build_result(
    plan: Plan, answer: Answer, probes: Sequence[ProbeOutcome], ran: Ran = Ran()
) -> ResultDocument:
    """The result.json document (documents.ResultDocument) of a finished (or stopped)
    search, run as `ran` says (Ran): `probes` are as they tested, the document shows them
    as counted (`ran.symptom`)."""
    regress, warnings, spans, context = ran.regress, ran.warnings, ran.spans, ran.context
    started, ended, parallel, policy, symptom = (
        ran.started, ran.ended, ran.parallel, ran.policy, ran.symptom
    )  # fmt: skip
    counted = count(plan, probes, symptom)
    raw, probes = probes, counted.shown
    by_commit: Mapping[str, Candidate] = {c.commit: c for c in plan.candidates}
    culprit = answer.culprit
    last: dict[str, ProbeOutcome] = {}  # probed again: its latest outcome that tested it
    for p in probes:
        if p.commit not in last or p.verdict in (Verdict.GOOD, Verdict.BAD):
            last[p.commit] = p
    sides = None
    if len(answer.range) >= 2 and answer.range[0] in last and answer.range[-1] in last:
        old, new = last[answer.range[0]], last[answer.range[-1]]
        sides = Sides(
            old=Build.of(old.commit, old.verdict, old.fingerprint),
            new=Build.of(new.commit, new.verdict, new.fingerprint),
            differences=differences(old.fingerprint, new.fingerprint),
        )
    message = answer.message
    end = last.get(plan.good.commit)
    if answer.status is Status.ERROR and end is not None and end.reason:
        message += f" (the good end: {end.reason})"
    return ResultDocument(
        status=answer.status,
        message=message,
        mode=plan.mode,
        regress=regress,
        good=plan.good.commit,
        bad=plan.bad.commit,
        culprit=candidate_doc(culprit, answer) if culprit else None,
        range=list(answer.range),
        fix_range=list(answer.fix_range) if answer.fix_range else None,
        merge_base=plan.sequence[0].commit if plan.anchor else None,
        candidates=len(plan.candidates),
        fingerprints=sides,
        thresholds=thresholds_of(probes),
        eval_power=power_of(probes),
        warnings=list(warnings),
        probes=[
            probe_doc(
                p,
                by_commit[p.commit].subject if p.commit in by_commit else "",
                spans[i] if i < len(spans) else Span(),
            )
            for i, p in enumerate(probes)
        ],
        parallel=parallel,
        rounds=max((s.round or 0 for s in spans), default=0)
        or sum(1 for s in spans if not s.given),
        narrowing=narrowing(plan, probes),
        sequence_length=len(plan.sequence),
        context=context or Context(),
        started_at=started,
        ended_at=ended,
        reversals=[Reversal(new=new, old=old) for new, old in answer.reversals],
        retests=retests(probes),
        notes=[*answer.notes, *other_symptoms(plan, raw, frozenset(counted.other))],
        search=search_doc(answer, probes, policy, plan),
        symptom=symptom_doc(counted) if symptom is Symptom.SAME else None,
    )


def symptom_doc(counted: Counted) -> SymptomDoc:
    """What `search.symptom: same` counted: the bad end's symptom, the probes counted good."""
    return SymptomDoc(
        bad_end=list(counted.reference or ()),
        counted_good=list(counted.other),
        untold=list(counted.untold),
    )


def other_symptoms(
    plan: Plan, probes: Sequence[ProbeOutcome], counted_good: frozenset[str] = frozenset()
) -> list[str]:
    """A note for each build that tested bad with another symptom than the bad end's: none
    of the checks it failed is one the bad end failed (another regression in the range, not
    the one bisected); `counted_good`: those `search.symptom: same` counted good. Regression
    mode only; a crash has no symptom to compare. Pure."""
    if plan.mode is not Mode.REGRESSION:
        return []
    failed: dict[str, tuple[str, ...]] = {}
    for p in probes:
        if p.verdict is Verdict.BAD:
            failed[p.commit] = tuple(c.name for c in p.checks if not c.passed)
    end = failed.get(plan.bad.commit, ())
    if not end:
        return []
    short = {c.commit: c.short for c in (*plan.candidates, plan.good, plan.bad)}
    return [
        f"{short.get(commit, commit[:12])} tested bad with another symptom than the bad end: "
        f"it failed {', '.join(theirs)}, the bad end {', '.join(end)}: another regression may "
        "lie in the range, besides the bad end's"
        + ("; counted good (search.symptom: same)" if commit in counted_good else "")
        for commit, theirs in failed.items()
        if commit != plan.bad.commit and theirs and not set(theirs) & set(end)
    ]


def search_doc(
    answer: Answer, probes: Sequence[ProbeOutcome], policy: Policy, plan: Plan | None = None
) -> SearchDoc | None:
    """How the posterior search weighed verdicts and how sure its answer is (None: flake 0);
    `plan`: its candidates, for what the prior put on the culprit."""
    sure = answer.sure
    if sure is None or policy.exact:
        return None
    said = verdicts_by_commit(probes)
    return SearchDoc(
        flake="auto" if policy.flake is None else policy.flake,
        confidence=policy.confidence,
        max_probes=sure.budget,
        posterior=round(sure.posterior, 6),
        no_change=round(sure.no_change, 6),
        credible=list(sure.credible),
        disagreed=[
            Disagreed(commit=c, verdict=v, verdicts=said.get(c, [v])) for c, v in sure.disagreed
        ],
        again=list(sure.again),
        rates=Rates(
            false_bad=round(sure.rates.false_bad, 6), false_good=round(sure.rates.false_good, 6)
        ),
        probes=sure.probes,
        settle=list(sure.settle),
        evidence=[TrialDoc.model_validate(t.to_json()) for t in policy.evidence],
        looks=[LookDoc(commit=c, confirmed=ok) for c, ok in policy.looks],
        known=[KnownDoc.model_validate(k.to_json()) for k in policy.known],
        prior=prior_doc(policy, plan, answer.culprit) if plan is not None else None,
    )


def prior_doc(policy: Policy, plan: Plan, culprit: Candidate | None) -> PriorDoc | None:
    """The prior's weights and the mass it put on the culprit against a uniform prior."""
    if not policy.prior:
        return None
    weights = dict(policy.prior)
    sequence = [c.commit for c in plan.sequence]
    mass, uniform = share(weights, sequence, culprit.commit) if culprit else (None, None)
    return PriorDoc(
        low=weights,
        candidates=len(sequence) - 1,
        culprit=None if mass is None else round(mass, 6),
        uniform=None if uniform is None else round(uniform, 6),
    )


def candidate_doc(candidate: Candidate, answer: Answer | None = None) -> CandidateDoc:
    """A commit as result.json and gate.json hold it; with the answer that names it, its
    posterior (the posterior search)."""
    sure = answer.sure if answer is not None else None
    return CandidateDoc(
        commit=candidate.commit,
        subject=candidate.subject,
        author=candidate.author,
        date=candidate.date,
        artifact=candidate.artifact,
        posterior=round(sure.posterior, 6) if sure is not None else None,
    )


def check_doc(result: CheckResult) -> CheckDoc:
    """One check's result as result.json and gate.json hold it."""
    return CheckDoc(
        name=result.name,
        passed=result.passed,
        score=result.score,
        evidence=result.evidence,
        details=result.details,
    )


def verdicts_by_commit(probes: Sequence[ProbeOutcome]) -> dict[str, list[Verdict]]:
    """Commit → the verdict of each of its probes, in order."""
    seen: dict[str, list[Verdict]] = {}
    for p in probes:
        seen.setdefault(p.commit, []).append(p.verdict)
    return seen


def retests(probes: Sequence[ProbeOutcome]) -> list[Retest]:
    """Every commit probed more than once, with each probe's verdict (flaky: good and bad)."""
    seen = verdicts_by_commit(probes)
    return [
        Retest(commit=c, verdicts=vs, flaky={Verdict.GOOD, Verdict.BAD} <= set(vs))
        for c, vs in seen.items()
        if len(vs) > 1
    ]


def narrowing(plan: Plan, probes: Sequence[ProbeOutcome]) -> list[Step]:
    """The range after each probe (search.bounds, over every probe so far: search.settle),
    for the report's narrowing plot."""
    index = {c.commit: i for i, c in enumerate(plan.sequence)}
    n = len(plan.sequence)
    seen: dict[int, list[Verdict]] = {}
    steps = []
    for k, p in enumerate(probes, 1):
        i = index.get(p.commit)
        if i is None:
            continue
        seen.setdefault(i, []).append(p.verdict)
        lo, hi = bounds(n, settle(seen, plan.mode).verdicts, plan.mode)
        steps.append(Step(probe=k, commit=p.commit, index=i, verdict=p.verdict, lo=lo, hi=hi))
    return steps


def probe_doc(outcome: ProbeOutcome, subject: str = "", span: Span | None = None) -> ProbeDoc:
    """One probe as result.json and gate.json hold it."""
    span = span or Span()
    return ProbeDoc(
        commit=outcome.commit,
        verdict=outcome.verdict,
        reason=outcome.reason,
        checks=[check_doc(c) for c in outcome.checks],
        timings=outcome.timings,
        log_tail=outcome.log_tail,
        fingerprint=outcome.fingerprint,
        startup=outcome.startup,
        not_run=list(outcome.not_run),
        failed_at=outcome.failed_at,
        subject=subject,
        started_at=span.started,
        ended_at=span.ended,
        given=span.given,
        slot=span.slot,
        round=span.round,
    )


def outcome_of(doc: ProbeDoc) -> ProbeOutcome:
    """What a probe in result.json or gate.json found, as the runner holds it (probe_doc's
    inverse, but for when and where it ran)."""
    return ProbeOutcome(
        commit=doc.commit,
        verdict=doc.verdict,
        reason=doc.reason,
        checks=tuple(
            CheckResult(c.name, c.passed, c.score, c.evidence, c.details) for c in doc.checks
        ),
        timings=dict(doc.timings),
        log_tail=doc.log_tail,
        fingerprint=doc.fingerprint,
        startup=doc.startup,
        not_run=tuple(doc.not_run),
        failed_at=doc.failed_at,
    )
