"""The command line: thin verbs over app.py; errors mapped to exit codes once."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, NoReturn, TypeVar

import typer

from . import __version__, app
from .errors import ConfigError, JournalError, LlmBisectError
from .launchers import Artifact
from .model import Candidate, ProbeOutcome, Verdict
from .runner import read_state, result_of, write_outputs
from .search import Answer, Plan, Status

EXIT_FOUND = 0
EXIT_FAILED = 1
"""An error while running (a journal that cannot resume, a search that contradicts itself)."""
EXIT_USAGE = 2
"""Bad config, unknown ref, bad argument: nothing was started."""
EXIT_AMBIGUOUS = 3
EXIT_NO_REGRESSION = 4
EXIT_INTERRUPTED = 130

CHECK_EXIT = {Verdict.GOOD: 0, Verdict.BAD: 1, Verdict.SKIP: 125, Verdict.UNSURE: 125}
"""`check` exit codes, as `git bisect run` reads them."""
STATUS_EXIT = {
    Status.FOUND: EXIT_FOUND,
    Status.AMBIGUOUS: EXIT_AMBIGUOUS,
    Status.NO_REGRESSION: EXIT_NO_REGRESSION,
    Status.ERROR: EXIT_FAILED,
}

cli = typer.Typer(
    name="llm-bisect",
    help="Find the commit that silently broke an LLM serving engine.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

T = TypeVar("T")


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _fail(message: str, code: int) -> NoReturn:
    _say(f"llm-bisect: error: {message}")
    raise typer.Exit(code)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, so every context manager cleans up."""


def _on_sigterm(signum: int, frame: types.FrameType | None) -> None:
    raise _Terminated()


def guarded(fn: Callable[[], T]) -> T:
    """Run a command body; map the error tree to exit codes in one place."""
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return fn()
    except ConfigError as exc:
        _fail(str(exc), EXIT_USAGE)
    except JournalError as exc:
        _fail(str(exc), EXIT_USAGE)
    except LlmBisectError as exc:
        _fail(str(exc), EXIT_FAILED)
    except KeyboardInterrupt as exc:
        sig = "terminated" if isinstance(exc, _Terminated) else "interrupted"
        _say(f"llm-bisect: {sig}; servers stopped; the journal keeps every finished probe")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


class TerminalProgress:
    """One line per phase of each probe, on stderr."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.step = 0
        self.total = 0
        self.current = ""

    def note(self, text: str) -> None:
        """A line from a launcher (pull progress)."""
        _say(f"    {text}")

    def planned(self, plan: Plan, finished: int) -> None:
        self.step = finished
        self.total = plan.max_probes()
        resumed = f", {finished} finished probe(s) resumed from the journal" if finished else ""
        _say(
            f"{len(plan.candidates)} candidates, at most ~{self.total} probes "
            f"({plan.mode.value}){resumed}"
        )

    def _count(self, candidate: Candidate) -> None:
        if candidate.commit != self.current:
            self.current = candidate.commit
            self.step += 1

    def phase(self, candidate: Candidate, phase: str, elapsed: float) -> None:
        self._count(candidate)
        _say(
            f"[{self.step}] {candidate.short} {phase:<9} {elapsed:6.1f}s  {candidate.subject[:60]}"
        )

    def finished(self, candidate: Candidate, outcome: ProbeOutcome) -> None:
        self._count(candidate)
        self.current = ""
        total = outcome.timings.get("total", 0.0)
        _say(
            f"[{self.step}] {candidate.short} {outcome.verdict.value.upper():<9} {total:6.1f}s  "
            f"{outcome.reason[:100]}"
        )


ConfigArg = Annotated[Path, typer.Argument(help="The YAML config.", show_default=False)]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Output folder (journal, logs, report).")]
GoodOpt = Annotated[str | None, typer.Option("--good", help="Override candidates.good.")]
BadOpt = Annotated[str | None, typer.Option("--bad", help="Override candidates.bad.")]
FixOpt = Annotated[
    bool,
    typer.Option(
        "--find-fix",
        help="Look for the fix: good names the newer build that works, bad the older broken one.",
    ),
]


def _artifact_cell(art: Artifact) -> str:
    if art.available is None:
        return "unknown "
    if not art.available:
        return "MISSING "
    if art.local:
        return "local   "
    return f"{art.size / 1e9:5.1f} GB"


def _print_answer(answer: Answer, out_dir: Path) -> None:
    if answer.culprit is not None:
        c = answer.culprit
        print(f"{answer.status.value}: {c.commit} {c.subject}")
    else:
        print(f"{answer.status.value}: {answer.message}")
        if answer.status is Status.AMBIGUOUS:
            for commit in answer.range[1:]:
                print(f"  could be {commit}")
    print(f"report: {out_dir / 'report.md'}")


@cli.command("run")
def run_cmd(
    config: ConfigArg,
    out: OutOpt = Path("llm-bisect-out"),
    good: GoodOpt = None,
    bad: BadOpt = None,
    find_fix: FixOpt = False,
) -> None:
    """Bisect the config's range to the first bad commit (resumes from --out's journal)."""

    def body() -> int:
        progress = TerminalProgress()
        s = app.setup(config, os.environ, report=progress.note)
        done = app.run_bisect(s, out, good=good, bad=bad, find_fix=find_fix, progress=progress)
        _print_answer(done.answer, out)
        return STATUS_EXIT[done.answer.status]

    raise typer.Exit(guarded(body))


@cli.command("check")
def check_cmd(
    config: ConfigArg,
    candidate: Annotated[str, typer.Option("--candidate", help="The ref to probe.")],
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Folder for the server log (default: a temp folder)."),
    ] = None,
    golden: Annotated[
        Path | None,
        typer.Option("--golden", help="The golden to compare with (default: the config's)."),
    ] = None,
) -> None:
    """Probe one candidate: exit 0 good, 1 bad, 125 skip (a `git bisect run` script)."""

    def body() -> int:
        progress = TerminalProgress()
        s = app.setup(config, os.environ, report=progress.note)
        out_dir = out or Path(tempfile.mkdtemp(prefix="llm-bisect-check-"))
        cand, outcome = app.check_one(s, candidate, out_dir, progress, golden)
        print(f"{outcome.verdict.value}: {cand.commit} {outcome.reason}")
        for result in outcome.checks:
            print(
                f"  {result.name}: {'pass' if result.passed else 'FAIL'} — {result.evidence[:160]}"
            )
        t = outcome.timings
        if "checks" in t:
            print(f"ready in {t['ready']:.1f}s, checks took {t['checks']:.1f}s")
        print(f"server log: {out_dir / 'probes' / cand.short / 'server.log'}")
        return CHECK_EXIT[outcome.verdict]

    raise typer.Exit(guarded(body))


GoldenOut = Annotated[
    Path | None,
    typer.Option(
        "--output", "-o", help="The golden file (default: the config's golden, else ./golden.json)."
    ),
]
ProbeDir = Annotated[
    Path | None, typer.Option("--out", help="Folder for server logs (default: a temp folder).")
]


def _golden_target(
    config: Path, output: Path | None, out: Path | None
) -> tuple[app.Setup, Path, Path]:
    """The setup, the golden file and the folder for server logs of `golden` / `calibrate`."""
    s = app.setup(config, os.environ)
    work = out or Path(tempfile.mkdtemp(prefix="llm-bisect-"))
    return s, app.golden_file_of(s, output), work


@cli.command("golden")
def golden_cmd(
    config: ConfigArg,
    candidate: Annotated[str, typer.Option("--candidate", help="The good build.")],
    output: GoldenOut = None,
    out: ProbeDir = None,
) -> None:
    """Record the golden from one (good) build: token ids, logprobs, texts, eval answers."""

    def body() -> int:
        s, path, work = _golden_target(config, output, out)
        data = app.record_golden(s, candidate, path, work)
        print(f"golden of {data['commit']}: {path}")
        return 0

    raise typer.Exit(guarded(body))


@cli.command("calibrate")
def calibrate_cmd(
    config: ConfigArg,
    candidate: Annotated[str, typer.Option("--candidate", help="The good build.")],
    runs: Annotated[int, typer.Option("--runs", min=1, help="Check runs per server start.")] = 3,
    restarts: Annotated[int, typer.Option("--restarts", min=0, help="Extra server starts.")] = 1,
    output: GoldenOut = None,
    out: ProbeDir = None,
) -> None:
    """Check the good build against itself; its spread becomes the default thresholds."""

    def body() -> int:
        s, path, work = _golden_target(config, output, out)
        found = app.calibrate(s, candidate, path, work, runs, restarts)
        print(f"calibrated over {found.runs} runs, {1 + restarts} server start(s): {path}")
        print(
            f"good-vs-good: {found.flagged} of {found.runs} runs flagged (by the thresholds then)"
        )
        for check, values in found.thresholds.items():
            if check == "calibration":
                continue
            for key, limit in values.items():
                print(f"  {check}.{key} <= {limit['value']:.4g}  ({limit['from']})")
        return 0

    raise typer.Exit(guarded(body))


@cli.command("candidates")
def candidates_cmd(
    config: ConfigArg, good: GoodOpt = None, bad: BadOpt = None, find_fix: FixOpt = False
) -> None:
    """List the candidates between good and bad and the plan (a dry run: nothing starts)."""

    def body() -> int:
        s = app.setup(config, os.environ)
        _, plan = app.plan_of(s, good, bad, find_fix)
        print(f"mode: {plan.mode.value}")
        print(f"good: {plan.good.commit} {plan.good.subject}")
        print(f"bad:  {plan.bad.commit} {plan.bad.subject}")
        if plan.anchor is not None:
            print(f"merge base: {plan.sequence[0].commit} (verified after the old end)")
        missing = 0
        with s.launcher("candidates") as launcher:
            for i, c in enumerate(plan.candidates):
                art = launcher.artifact(c)
                missing += art.available is False
                print(f"{i:4d}  {c.short}  {c.date[:10]}  {_artifact_cell(art)}  {c.subject}")
        n, most = len(plan.candidates), plan.max_probes()
        print(f"{n} candidates, {n - missing} with an artifact; at most {most} probes if none skip")
        return 0

    raise typer.Exit(guarded(body))


@cli.command("report")
def report_cmd(
    out: Annotated[Path, typer.Argument(help="A run's output folder.", show_default=False)],
) -> None:
    """Write result.json and report.md again from a run's journal."""

    def body() -> int:
        state = read_state(out)
        if state is None:
            raise ConfigError(f"DIR: no journal in '{out}'")
        step, result = result_of(state)
        if result is None or not isinstance(step, Answer):
            raise JournalError(f"{out}: the run has not finished; resume it with `llm-bisect run`")
        write_outputs(out, result)
        _print_answer(step, out)
        return STATUS_EXIT[step.status]

    raise typer.Exit(guarded(body))


@cli.command("demo")
def demo_cmd(
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Output folder (default: a temp folder).")
    ] = None,
    docker: Annotated[
        bool,
        typer.Option("--docker", help="One container image per commit, through the local engine."),
    ] = False,
) -> None:
    """Bisect a made-up 40-commit history on the built-in simulated server."""
    from . import demo

    def body() -> int:
        work = Path(tempfile.mkdtemp(prefix="llm-bisect-demo-"))
        repo_dir = work / "engine"
        shas = demo.build_demo_history(repo_dir)
        images = demo.build_demo_images(repo_dir, shas) if docker else []
        config = demo.write_config(work, repo_dir, docker=docker)
        out_dir = out or work / "out"
        how = f", {len(images)} images" if docker else ""
        _say(f"demo: a {demo.N_COMMITS}-commit history in {repo_dir}{how}; config {config}")
        t0 = time.monotonic()
        progress = TerminalProgress()
        try:
            s = app.setup(config, os.environ, report=progress.note)
            done = app.run_bisect(s, out_dir, progress=progress)
        finally:
            demo.remove_images(images)
        _print_answer(done.answer, out_dir)
        probes = len(done.result["probes"])
        _say(f"demo: {probes} probes in {time.monotonic() - t0:.1f}s")
        found = done.answer.culprit
        if found is None or found.commit != shas[demo.CULPRIT_INDEX]:
            _say("demo: the bisection did not land on the planted culprit")
            return EXIT_FAILED
        return EXIT_FOUND

    raise typer.Exit(guarded(body))


def _version(value: bool) -> None:
    if value:
        print(f"llm-bisect {__version__}")
        raise typer.Exit(0)


@cli.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """Find the commit that silently broke an LLM serving engine."""


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
