"""The bisection service: a range bisected into DIR (`run`), and one candidate probed
(`check`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ..config import config_digest
from ..model import Candidate, ProbeOutcome, Regress
from ..outdir import hold
from ..pins import commit_bumps
from ..probe import ProbeContext, Progress, SilentProgress, probe
from ..report.documents import BumpDoc, ResultDocument
from ..runner import RunResult, run, write_outputs, write_probe
from ..search import Status
from .confirm import confirm, continue_after
from .later import next_steps, probe_later, resolve_later
from .localization import localize_after_run
from .setup import Setup, golden_file_of, plan_of, run_context, run_id_of


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
    to judge by instead of the config's; `given`: verdicts held already (the gate's)."""
    config, plan = plan_of(s, good, bad, find_fix)
    later = resolve_later(config.candidates.later, s.resolve)
    digest = config_digest(config) + (":fix" if find_fix else "")
    named = golden_file or s.golden_path()  # else one is recorded from the good end into DIR
    golden = s.golden_store(named, of=plan.good.commit) if named else None
    judged_by = (named or out_dir / "golden.json").absolute()
    with hold(out_dir):
        # DIR's own golden: the journal's config digest (checks and server too) guards it
        golden = golden or s.golden_store(out_dir / "golden.json", plan.good.commit, compare=False)
        with s.launcher(run_id_of(out_dir, digest)) as launcher:
            done = run(
                plan,
                digest=digest,
                out_dir=out_dir,
                launcher=launcher,
                checks=s.checks,
                client=s.client,
                repeats=config.probe.runs,
                reprobe=config.probe.reprobe,
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
            )
            if config.confirm is not False:
                ctx = ProbeContext(launcher, s.checks, s.client, progress or SilentProgress(),
                                   config.probe.runs, golden, Regress(config.regress),
                                   s.clock)  # fmt: skip
                note = progress.note if progress is not None else (lambda _: None)
                found = confirm(s.source.path, out_dir, done.result, ctx, note, s.scrub)
                if found is not None:
                    confirmed = done.result.model_copy(update={"confirmation": found})
                    done.result = write_outputs(out_dir, confirmed, s.scrub)
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
