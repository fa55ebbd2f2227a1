"""The bisection service: a range bisected into DIR (`run`), and one candidate probed
(`check`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from ..checks.golden import GoldenStore, load as golden_load
from ..config import config_digest, server_environment, setting_digests
from ..model import Candidate, ProbeOutcome, Regress
from ..outdir import hold
from ..posterior import Policy
from ..probe import ProbeContext, Progress, probe
from ..report.documents import ResultDocument
from ..runner import RunResult, run, write_probe
from ..search import Status
from ..symptom import Symptom
from .confirm import CONTINUED, second_look as _second_look, unconfirmed as unconfirmed
from .later import next_steps, resolve_later
from .priors import priors_of
from .setup import Setup, fast_setup, golden_file_of, known_of, plan_of, run_context, run_id_of
from .stages import STAGES, StageRun, before_confirm, fast_shown, with_launcher

__all__ = ["FAST_DIR", "_second_look", "check_one", "run_bisect", "unconfirmed"]

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
    where: bool = True,
) -> RunResult:
    """Bisect the config's range (or --good/--bad) into `out_dir`. `where`: say which
    releases hold the culprit (not for `deps`, whose commits are made-up releases);
    `golden_file`: the golden to judge by instead of the config's; `given`: verdicts held
    already (the gate's, whose bisection runs in the full setup only).

    With `probe.fast`, the search runs first in the fast setup, into DIR/fast (its own
    journal, golden and probes); where both ends reproduce there, the full setup probes its
    answer first (the ends, the last good, the first bad), and searches on in full wherever
    it disagrees. The full run in DIR gives the answer; result.json's `fast` says how.

    With `find_fix`, a golden the config names that was recorded from another build than
    this good end (the regression's good end, as a rule) is not this run's: one is recorded
    from this good end into DIR instead, and said (fix_golden)."""
    if find_fix and golden_file is None:
        s = fix_golden(s, good, progress.note if progress is not None else (lambda _: None))
    if s.config.probe.fast is None or given:
        return _bisect(s, out_dir, good=good, bad=bad, find_fix=find_fix, progress=progress,
                       golden_file=golden_file, given=given, where=where)  # fmt: skip
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

    return _bisect(s, out_dir, good=good, bad=bad, find_fix=find_fix, progress=progress,
                   golden_file=golden_file, first=first, quick=quick.result,
                   where=where)  # fmt: skip


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
    quick: ResultDocument | None = None,
    where: bool = True,
) -> RunResult:
    """One bisection in one setup, then the post-run stages (services/stages.py); `first`:
    commits probed first where they lie in the range left; `quick`: the fast setup's result
    (`probe.fast`)."""
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
    note = progress.note if progress is not None else (lambda _: None)
    known = known_of(s, plan, note)

    def bisect(line_good: str, line_bad: str, culprits: int) -> ResultDocument:
        """Several culprits: what remains, on the reverted line, into DIR/continued, naming
        at most `culprits` (it goes on itself where that is more than one)."""
        # the outer run's later refs; its known verdicts are of other trees than this line's
        only = s.config.candidates.model_copy(update={"later": [], "known_verdicts": None})
        named = s.config.search.model_copy(update={"culprits": culprits})
        # its good end is the culprit reverted, not the config golden's: its own golden
        inner = s.config.model_copy(update={"confirm": True, "candidates": only, "golden": None,
                                            "search": named})  # fmt: skip
        done = run_bisect(replace(s, config=inner), out_dir / CONTINUED, good=line_good,
                          bad=line_bad, progress=progress)  # fmt: skip
        return done.result

    with hold(out_dir):
        # DIR's own golden: the journal's config digest (checks and server too) guards it
        golden = golden or s.golden_store(out_dir / "golden.json", plan.good.commit, compare=False)
        stage_run = StageRun(s, out_dir, plan, note, golden, progress, quick=quick, later=later,
                             bisect=bisect, where=where)  # fmt: skip
        with s.launcher(run_id_of(out_dir, digest)) as launcher:

            def search(policy: Policy) -> RunResult:
                done = run(
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
                    priors=priors_of(s.source, plan.sequence[1:]) if config.search.priors else None,
                )
                for stage in before_confirm():
                    done = stage.apply(stage_run, done)
                return done

            stage_run.launcher, stage_run.search = launcher, search
            policy = calibrated(config.search_policy(find_fix), golden)
            done = search(replace(policy, known=known) if known else policy)
            held = with_launcher()
            for stage in held[len(before_confirm()) :]:
                done = stage.apply(stage_run, done)
        stage_run.launcher = None
        for stage in STAGES[len(held) :]:
            done = stage.apply(stage_run, done)
        for line in next_steps(done.result):
            note(line)
        return done


def calibrated(policy: Policy, golden: GoldenStore | None) -> Policy:
    """The search's policy with what `calibrate` saw of the good build's restarts, where the
    golden was calibrated and the rate is learnt (`flake: auto`)."""
    found = golden.data.calibration if golden is not None and golden.data is not None else None
    if found is None or policy.flake is not None or not found.restarts:
        return policy
    return replace(policy, calibrated=(found.flagged_restarts, found.restarts))


def fix_golden(s: Setup, good: str | None, note: Callable[[str], None]) -> Setup:
    """The setup a `--find-fix` run judges by: the config's golden where it was recorded from
    this run's good end (the build that works again), else none named (the run records one
    from its good end into DIR, as without `golden`), said in one line."""
    path = s.golden_path()
    if path is None or not path.is_file():
        return s
    end = s.resolve(good or s.config.candidates.good, "--good")
    recorded = golden_load(path).commit
    if recorded == end.commit:
        return s
    note(
        f"golden: {path} was recorded from {recorded[:12]}, not from this run's good end "
        f"{end.short} (the build that works again): recording one from {end.short} into --out"
    )
    return replace(s, config=s.config.model_copy(update={"golden": None}))


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
