"""The bisection service: a range bisected into DIR (`run`), and one candidate probed
(`check`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

from ..checks.golden import GoldenStore, load as golden_load
from ..config import Config, config_digest, server_environment, setting_digests
from ..cost import Cost, PostRun, estimate
from ..model import Candidate, ProbeOutcome, Regress
from ..outdir import hold
from ..posterior import Policy
from ..probe import ProbeContext, Progress, probe
from ..report.documents import Expected, ResultDocument
from ..runner import RunResult, write_probe
from ..search import Status
from .later import next_steps, resolve_later
from .priors import priors_of
from .setup import Setup, fast_setup, golden_file_of, known_of, plan_of, run_context, run_id_of
from .stages import Search, StageRun, apply, fast_shown

FAST_DIR = "fast"


@dataclass(frozen=True)
class Terms:
    """What a bisection is asked besides its range: which way (`find_fix`: the first good
    after a bad end), the golden it judges by, the verdicts it holds already, whether it
    says which releases hold the culprit."""

    find_fix: bool = False
    golden_file: Path | None = None
    """The golden to judge by instead of the config's."""
    given: Sequence[tuple[ProbeOutcome, str]] = ()
    """Verdicts held already (the gate's, whose bisection runs in the full setup only)."""
    where: bool = True
    """Say which releases hold the culprit (not for `deps`, whose commits are made-up
    releases)."""


def run_bisect(
    s: Setup,
    out_dir: Path,
    *,
    good: str | None = None,
    bad: str | None = None,
    progress: Progress | None = None,
    terms: Terms = Terms(),
) -> RunResult:
    """Bisect the config's range (or --good/--bad) into `out_dir`, on `terms` (Terms).

    With `probe.fast`, the search runs first in the fast setup, into DIR/fast (its own
    journal, golden and probes); where both ends reproduce there, the full setup probes its
    answer first (the ends, the last good, the first bad), and searches on in full wherever
    it disagrees. The full run in DIR gives the answer; result.json's `fast` says how.

    With `find_fix`, a golden the config names that was recorded from another build than
    this good end (the regression's good end, as a rule) is not this run's: one is recorded
    from this good end into DIR instead, and said (fix_golden)."""
    find_fix, golden_file = terms.find_fix, terms.golden_file
    if find_fix and golden_file is None:
        s = fix_golden(s, good, progress.note if progress is not None else (lambda _: None))
    if s.config.probe.fast is None or terms.given:
        return _bisect(s, out_dir, good=good, bad=bad, progress=progress, terms=terms)
    note = progress.note if progress is not None else (lambda _: None)
    fast_s = fast_setup(s)
    s = replace(s, scrub=s.scrub.with_secrets(fast_s.scrub.secrets))
    shown = fast_shown(s.config.probe.fast, s.secret_names)
    note(f"fast: searching in the fast setup ({shown}) into {out_dir / FAST_DIR}")
    quick = _bisect(fast_s, out_dir / FAST_DIR, good=good, bad=bad, progress=progress,
                    terms=Terms(find_fix=find_fix))  # fmt: skip
    answer = quick.answer
    reproduced = answer.status in (Status.FOUND, Status.AMBIGUOUS)
    first = frozenset(answer.range) if reproduced else frozenset()
    if reproduced:
        note(f"fast: {answer.message}; probing its answer in the full setup")
    else:
        note(f"fast: the fast setup does not reproduce the ends ({answer.message}): "
             "searching in the full setup")  # fmt: skip

    return _bisect(s, out_dir, good=good, bad=bad, progress=progress,
                   terms=terms, first=first, quick=quick.result)  # fmt: skip


def _bisect(
    s: Setup,
    out_dir: Path,
    *,
    good: str | None = None,
    bad: str | None = None,
    progress: Progress | None = None,
    terms: Terms = Terms(),
    first: frozenset[str] = frozenset(),
    quick: ResultDocument | None = None,
) -> RunResult:
    """One bisection in one setup: its search (stages.Search), then the post-run stages in
    one loop (stages.apply); `first`: commits probed first where they lie in the range
    left; `quick`: the fast setup's result (`probe.fast`)."""
    find_fix, golden_file, given, where = (
        terms.find_fix,
        terms.golden_file,
        terms.given,
        terms.where,
    )
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
    cost = of_config(config, len(plan.sequence) - 1, find_fix)
    expected = Expected(starts=round(cost.starts, 1), worst=cost.worst, nodes=cost.nodes)
    with hold(out_dir), ExitStack() as held:
        # DIR's own golden: the journal's config digest (checks and server too) guards it
        golden = golden or s.golden_store(out_dir / "golden.json", plan.good.commit, compare=False)
        launcher = held.enter_context(s.launcher(run_id_of(out_dir, digest)))
        context = run_context(s, config).model_copy(
            update={"golden": str(judged_by), "out": str(out_dir.absolute()), "expected": expected}
        )
        search = Search(s, config, plan, out_dir, launcher, golden, digest,
                        setting_digests(config, environment), context, progress, given=given,
                        first=first, priced=s.builder is not None,
                        priors=priors_of(s.source, plan.sequence[1:]) if config.search.priors
                        else None)  # fmt: skip
        stage_run = StageRun(s, out_dir, plan, note, golden, search, progress, launcher,
                             quick=quick, later=later, bisect=run_bisect, where=where)  # fmt: skip
        policy = calibrated(config.search_policy(find_fix), golden)
        done = search.run(replace(policy, known=known) if known else policy)
        done = apply(stage_run, done, held)  # the launcher given back when no stage needs it
        for line in next_steps(done.result):
            note(line)
        return done


def of_config(config: Config, n: int, find_fix: bool = False) -> Cost:
    """What a run of `config` over n candidates after the old end will cost (cost.py): the
    one figure `candidates`, `run`'s progress and the report give."""
    return estimate(
        n,
        config.search_policy(find_fix),
        slots=config.parallel,
        post=PostRun(
            confirm=bool(config.confirm),
            localize=config.localize.enabled,
            decisive=config.probe.early_stop,
            later=0 if find_fix else len(config.candidates.later),
            culprits=1 if find_fix else config.culprits,
        ),
        nodes=getattr(config.server, "nodes", 1),
    )


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
