"""The bisection service: a range bisected into DIR (`run`), and one candidate probed
(`check`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from pathlib import Path

from ..config import (
    FastConfig,
    argv_secrets,
    config_digest,
    secret_names,
    server_environment,
    setting_digests,
)
from ..model import Candidate, ProbeOutcome, Regress, Verdict
from ..outdir import hold
from ..pins import commit_bumps
from ..posterior import Policy, Trial
from ..probe import ProbeContext, Progress, SilentProgress, probe
from ..redact import redact
from ..report.documents import BumpDoc, Confirmation, FastDoc, ResultDocument, TrialDoc
from ..runner import RunResult, run, write_outputs, write_probe
from ..search import Answer, Status
from ..symptom import Symptom
from .confirm import confirm, continue_after, keep
from .later import next_steps, probe_later, resolve_later
from .localization import localize_after_run
from .setup import Setup, fast_setup, golden_file_of, plan_of, run_context, run_id_of

FAST_DIR = "fast"


def run_bisect(
    s: Setup,
    out_dir: Path,
    *,
    good: str | None = None,
    bad: str | None = None,
    find_fix: bool = False,
    progress: Progress | None = None,
    golden_file: Path | None = None,
    given: Sequence[tuple[ProbeOutcome, str]] = (),
) -> RunResult:
    """Bisect the config's range (or --good/--bad) into `out_dir`. `golden_file`: the golden
    to judge by instead of the config's; `given`: verdicts held already (the gate's, whose
    bisection runs in the full setup only).

    With `probe.fast`, the search runs first in the fast setup, into DIR/fast (its own
    journal, golden and probes); where both ends reproduce there, the full setup probes its
    answer first (the ends, the last good, the first bad), and searches on in full wherever
    it disagrees. The full run in DIR gives the answer; result.json's `fast` says how."""
    if s.config.probe.fast is None or given:
        return _bisect(s, out_dir, good=good, bad=bad, find_fix=find_fix, progress=progress,
                       golden_file=golden_file, given=given)  # fmt: skip
    note = progress.note if progress is not None else (lambda _: None)
    fast_s = fast_setup(s)
    s = replace(s, scrub=s.scrub.with_secrets(fast_s.scrub.secrets))
    shown = fast_shown(s.config.probe.fast, s.secret_names)
    note(f"fast: searching in the fast setup ({shown}) into {out_dir / FAST_DIR}")
    quick = _bisect(fast_s, out_dir / FAST_DIR, good=good, bad=bad, find_fix=find_fix,
                    progress=progress)  # fmt: skip
    answer = quick.answer
    reproduced = answer.status in (Status.FOUND, Status.AMBIGUOUS)
    first = frozenset(answer.range) if reproduced else frozenset()
    if reproduced:
        note(f"fast: {answer.message}; probing its answer in the full setup")
    else:
        note(f"fast: the fast setup does not reproduce the ends ({answer.message}): "
             "searching in the full setup")  # fmt: skip

    def with_fast(result: ResultDocument) -> ResultDocument:
        doc = fast_doc(s.config.probe.fast, s.secret_names, quick.result, result)
        note(doc.line)
        return result.model_copy(update={"fast": doc})

    return _bisect(s, out_dir, good=good, bad=bad, find_fix=find_fix, progress=progress,
                   golden_file=golden_file, first=first, decorate=with_fast)  # fmt: skip


def _bisect(
    s: Setup,
    out_dir: Path,
    *,
    good: str | None = None,
    bad: str | None = None,
    find_fix: bool = False,
    progress: Progress | None = None,
    golden_file: Path | None = None,
    given: Sequence[tuple[ProbeOutcome, str]] = (),
    first: frozenset[str] = frozenset(),
    decorate: Callable[[ResultDocument], ResultDocument] | None = None,
) -> RunResult:
    """One bisection in one setup; `first`: commits probed first where they lie in the range
    left; `decorate`: what the result gains once the search is over (before confirmation)."""
    config, plan = plan_of(s, good, bad, find_fix)
    later = resolve_later(
        config.candidates.later,
        s.resolve,
        None if find_fix else plan.bad,
        s.source.is_ancestor,
    )
    environment = server_environment(config, s.env, s.environ)
    digest = config_digest(config, environment) + (":fix" if find_fix else "")
    named = golden_file or s.golden_path()  # else one is recorded from the good end into DIR
    golden = s.golden_store(named, of=plan.good.commit) if named else None
    judged_by = (named or out_dir / "golden.json").absolute()
    with hold(out_dir):
        # DIR's own golden: the journal's config digest (checks and server too) guards it
        golden = golden or s.golden_store(out_dir / "golden.json", plan.good.commit, compare=False)
        with s.launcher(run_id_of(out_dir, digest)) as launcher:

            def search(policy: Policy) -> RunResult:
                return run(
                    plan,
                    digest=digest,
                    settings=setting_digests(config, environment),
                    out_dir=out_dir,
                    launcher=launcher,
                    checks=s.checks,
                    client=s.client,
                    repeats=config.probe.runs,
                    reprobe=config.probe.reprobe,
                    policy=policy,
                    progress=progress,
                    golden=golden,
                    scrub=s.scrub,
                    regress=Regress(config.regress),
                    coarse=config.candidates.coarse,
                    context=run_context(s, config).model_copy(
                        update={"golden": str(judged_by), "out": str(out_dir.absolute())}
                    ),
                    given=given,
                    parallel=config.parallel,
                    early_stop=config.probe.early_stop,
                    first=first,
                    symptom=Symptom(config.search.symptom),
                )

            done = search(config.search.policy)
            if decorate is not None:
                done.result = write_outputs(out_dir, decorate(done.result), s.scrub)
            if config.confirm is not False:
                ctx = ProbeContext(launcher, s.checks, s.client, progress or SilentProgress(),
                                   config.probe.runs, golden, Regress(config.regress),
                                   s.clock)  # fmt: skip
                note = progress.note if progress is not None else (lambda _: None)
                policy = config.search.policy
                weighed_before = done.result.search.evidence if done.result.search else []
                if weighed_before:  # resumed after a culprit was not confirmed: its trials
                    # stay weighed (the journal's policy), and the second look goes on
                    found = confirm(s.source.path, out_dir, done.result, ctx, note, s.scrub,
                                    again=True)  # fmt: skip
                else:
                    found = confirm(s.source.path, out_dir, done.result, ctx, note, s.scrub)
                    was = done.answer.culprit
                    if (
                        found is not None
                        and found.status == "not-confirmed"
                        and not policy.exact
                        and was is not None
                    ):
                        # the trials are evidence like any probe: the culprit's posterior
                        # falls, the search goes on where it now points, and confirms what it
                        # then names on new starts (a first trial that lied is not reused)
                        weighed = _weigh(policy, found, was.commit)
                        note(f"confirm: not confirmed; {_weighing(weighed, policy)}")
                        done = search(weighed)
                        if decorate is not None:
                            done.result = write_outputs(out_dir, decorate(done.result), s.scrub)
                        found = confirm(
                            s.source.path, out_dir, done.result, ctx, note, s.scrub, again=True
                        )
                evidence = done.result.search.evidence if done.result.search else []
                if found is not None and found.status == "confirmed" and evidence:
                    why = _second_look(done.result, evidence)
                    note(f"confirm: {why}")
                    found = found.model_copy(update={"reason": f"{found.reason}; {why}"})
                    keep(out_dir, done.result, found, s.scrub)  # as `report DIR` reads it
                if found is not None:
                    confirmed = done.result.model_copy(update={"confirmation": found})
                    answer, confirmed = unconfirmed(done.answer, confirmed)
                    done = RunResult(answer, write_outputs(out_dir, confirmed, s.scrub), out_dir)
            if later:
                say = progress.note if progress is not None else (lambda _: None)
                ctx = ProbeContext(launcher, s.checks, s.client, progress or SilentProgress(),
                                   config.probe.runs, golden, Regress(config.regress),
                                   s.clock)  # fmt: skip
                ends = probe_later(s.source.path, out_dir, done.result, later, ctx, say, s.scrub)
                if ends:
                    ended = done.result.model_copy(update={"later": ends})
                    done.result = write_outputs(out_dir, ended, s.scrub)
        note = progress.note if progress is not None else (lambda _: None)
        known = {c.commit: c for c in (*plan.candidates, plan.good, plan.bad)}
        located = localize_after_run(s, done.result, out_dir, note, known)
        if located is not None:
            note(located.line)
            with_found = done.result.model_copy(update={"localization": located})
            done.result = write_outputs(out_dir, with_found, s.scrub)
        if done.result.status is Status.FOUND and done.result.culprit is not None:
            found_bumps = [
                BumpDoc(name=b.name, old=b.old, new=b.new, files=list(b.files), label=b.label)
                for b in commit_bumps(s.source.path, done.result.culprit.commit)
            ]
            if found_bumps:
                note("the culprit bumps " + ", ".join(b.label for b in found_bumps))
                bumped = done.result.model_copy(update={"bumps": found_bumps})
                done.result = write_outputs(out_dir, bumped, s.scrub)
        confirmation = done.result.confirmation
        reverted = confirmation.probes[0] if confirmation is not None else None
        if config.confirm == "continue" and confirmation and reverted and reverted.verdict == "bad":
            only = s.config.candidates.model_copy(update={"later": []})  # the outer run's
            inner = s.config.model_copy(update={"confirm": True, "candidates": only})
            nested = replace(s, config=inner)

            def bisect(line_good: str, line_bad: str) -> ResultDocument:
                inner = run_bisect(nested, out_dir / "continued", good=line_good, bad=line_bad,
                                   progress=progress)  # fmt: skip
                return inner.result

            sequence = [c.commit for c in plan.sequence]
            went_on = continue_after(s.source.path, done.result, sequence, bisect, note)
            note(f"confirm: {went_on['message']}")
            went = confirmation.model_copy(update={"continued": went_on})
            doc = done.result.model_copy(update={"confirmation": went})
            done.result = write_outputs(out_dir, doc, s.scrub)
        for line in next_steps(done.result):
            note(line)
        return done


def _weigh(policy: Policy, found: Confirmation, culprit: str) -> Policy:
    """The search policy with a confirmation's trials as evidence: each trial that ran a
    probe of its own (a reused tree's verdict is one of the run's probes already). Where
    there is none, ten times the evidence instead (a verdict on the way may have lied)."""
    trials = tuple(
        Trial(culprit, t.kind, Verdict(t.verdict))
        for t in found.probes
        if t.verdict is not None and t.reused is None
    )
    if not trials:
        return replace(policy, confidence=1 - (1 - policy.confidence) / 10)
    return replace(policy, evidence=(*policy.evidence, *trials))


def _weighing(weighed: Policy, policy: Policy) -> str:
    """What the search does after a culprit was not confirmed, for a person."""
    if weighed.evidence == policy.evidence:
        return (
            f"probing on until the posterior reaches {weighed.confidence:g} "
            "(a verdict on the way may have lied)"
        )
    said = ", ".join(
        f"{t.kind} {t.verdict.value}" for t in weighed.evidence[len(policy.evidence) :]
    )
    return (
        f"its trials ({said}) are weighed as evidence and the search goes on where the "
        "posterior now points"
    )


def _second_look(result: ResultDocument, evidence: Sequence[TrialDoc]) -> str:
    """Why a culprit not confirmed at first is confirmed now: a verdict on the way lied (the
    search moved to another culprit), or a first trial did (the culprit held and its trials
    on new starts agree). `evidence`: the first look's trials, weighed."""
    first = evidence[-1].commit
    trials = ", ".join(f"{t.kind} {t.verdict}" for t in evidence if t.commit == first)
    culprit = result.culprit.commit if result.culprit is not None else None
    if culprit != first:
        shown = "; ".join(
            f"{d.commit[:12]} was probed again: {', '.join(v.value for v in d.verdicts)}"
            for d in ({d.commit: d for d in result.search.disagreed}.values()
                      if result.search else ())
        )  # fmt: skip
        return (
            f"{first[:12]} was named first and not confirmed ({trials}): a verdict on the way "
            f"was probably wrong ({shown or 'its neighbours were probed again'})"
        )
    return (
        f"not confirmed at first ({trials}); its own verdicts held when probed again and the "
        "trials on new starts confirm it: a first trial was probably wrong"
    )


def unconfirmed(answer: Answer, result: ResultDocument) -> tuple[Answer, ResultDocument]:
    """A culprit its confirmation does not bear out under the posterior search, after its
    trials were weighed and the search went on: ambiguous, never `found` with exit 0 — as a
    run ends it and as `report DIR` rebuilds it. Unchanged where the culprit is confirmed or
    verdicts are facts (flake 0: today's `found`). The search named the same culprit again
    (`held`: its verdicts held): its revert stays bad (the evidence supports two steps), or
    its pick does not break the good end (it breaks only with what came between). Pure."""
    found, culprit, search = result.confirmation, result.culprit, result.search
    if found is None or found.status != "not-confirmed" or culprit is None or search is None:
        return answer, result
    held = not search.evidence or any(t.commit == culprit.commit for t in search.evidence)
    p = f" (posterior {search.posterior:.4f})"
    stays_bad = any(t.kind == "revert" and t.verdict == "bad" for t in found.probes)
    if not held:
        why = f"the search probed on and named another culprit{p}, which is not confirmed either"
    elif stays_bad:
        why = (
            f"another regression lies after it: the culprit's own verdicts held when probed "
            f"again{p}, so the evidence supports more than one step (`confirm: continue` "
            "bisects what remains)"
        )
    else:
        why = (
            f"the culprit's own verdicts held when probed again{p}: it is the first bad build, "
            "but not the whole cause (it breaks only together with what came before it)"
        )
    message = f"not confirmed: {found.reason}; {why}"
    update = {"status": Status.AMBIGUOUS, "message": message}
    return replace(answer, status=Status.AMBIGUOUS, message=message), result.model_copy(
        update=update
    )


def check_one(
    s: Setup,
    ref: str,
    out_dir: Path,
    progress: Progress,
    golden_file: Path | None = None,
    whole: bool = False,
) -> tuple[Candidate, ProbeOutcome]:
    """Probe one candidate (the `check` command); `whole`: every check runs (a gate's
    candidate becomes the bad end of the bisection it starts), else `probe.early_stop`."""
    golden = s.golden_store(golden_file_of(s, golden_file))
    candidate = s.resolve(ref, "--candidate")
    with hold(out_dir), s.launcher(run_id_of(out_dir, "check")) as launcher:
        for line in launcher.reap():
            progress.note(line)
        ctx = ProbeContext(
            launcher,
            s.checks,
            s.client,
            progress,
            s.config.probe.runs,
            golden,
            Regress(s.config.regress),
            early_stop=s.config.probe.early_stop and not whole,
        )
        outcome = probe(candidate, out_dir / "probes" / candidate.short, ctx)
        write_probe(out_dir, outcome, s.scrub)
    progress.finished(candidate, outcome)
    return candidate, outcome


def fast_shown(fast: FastConfig | None, secret: Collection[str]) -> str:
    """The fast setup as output shows it: its flags and variables, a secret's value masked."""
    assert fast is not None
    hidden = set(argv_secrets(fast.args))
    words = [redact(a, hidden) for a in fast.args]
    named = {*secret, *secret_names(fast.env)}  # the fast setup's own secrets too
    words += [f"{k}={'***' if k in named else redact(v, hidden)}" for k, v in fast.env.items()]
    return " ".join(words)


def fast_doc(
    fast: FastConfig | None, secret: Collection[str], quick: ResultDocument, full: ResultDocument
) -> FastDoc:
    """What the fast search found and whether the full run agrees. Pure."""
    assert fast is not None
    shown = fast_shown(fast, secret)
    reproduced = quick.status in (Status.FOUND, Status.AMBIGUOUS)
    n, m = len(quick.probes), len(full.probes)
    env = {k: "***" if k in {*secret, *secret_names(fast.env)} else v for k, v in fast.env.items()}
    doc = FastDoc(args=list(fast.args), env=env, status=quick.status, message=quick.message,
                  reproduced=reproduced, range=list(quick.range), probes=n, agreed=None,
                  line="")  # fmt: skip
    if not reproduced:
        line = (f"fast setup ({shown}): {quick.message}; the search ran in the full setup "
                f"({m} probes)")  # fmt: skip
        return doc.model_copy(update={"line": line})
    last = len(quick.range) - 1
    found_fast = quick.culprit.commit[:12] if quick.culprit else f"{last} candidates"
    said = f"fast setup ({shown}): {n} probes found {found_fast}"
    if (
        full.status is Status.FOUND
        and quick.culprit is not None
        and full.culprit is not None
        and full.culprit.commit == quick.culprit.commit
    ):
        line = f"{said}; the full setup agrees ({m} probes in full)"
        return doc.model_copy(update={"agreed": True, "line": line})
    differs = []
    for commit in quick.range:
        in_full, in_fast = full.probe_of(commit), quick.probe_of(commit)
        if in_full is not None and in_fast is not None and in_full.verdict != in_fast.verdict:
            differs.append(f"{commit[:12]} is {in_full.verdict.value} in full")
    why = "; ".join(differs) or full.message
    found = full.culprit.commit[:12] if full.culprit else full.status.value
    line = f"{said}; the full setup disagrees ({why}) and searched on in full: {found} ({m} probes)"
    return doc.model_copy(update={"agreed": False, "line": line})
