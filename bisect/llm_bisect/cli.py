"""The command line: thin verbs that parse, call a service (services/) and render (terminal.py);
errors mapped to exit codes once."""

from __future__ import annotations

import errno
import json
import os
import shlex
import signal
import tempfile
import traceback
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
import typer.core

from . import __version__, plugins
from .checks.golden import load as golden_load, schema as golden_schema, warnings as golden_warnings
from .config import Config
from .errors import ConfigError, JournalError, LlmBisectError
from .journal import FILENAME, read_journal
from .kinds import LAUNCHERS
from .launchers import Artifact, price
from .model import Candidate, Verdict
from .outdir import claim, hold, prepare
from .places import doubted
from .registry import BLOB_DEADLINE_S, DEADLINE_S, MAX_PAGES, ImageRef
from .report.documents import ResultDocument, schemas
from .report.gate import power_said
from .report.markdown import banner, duration
from .runner import RunResult, result_of, write_outputs
from .search import Answer, Mode, Plan, Status
from .services.bisection import Terms, check_one, of_config, run_bisect
from .services.configs import Servers, configs_setup, run_configs
from .services.deps import Dependency, run_deps
from .services.gate import GATE_FILE, GateAsk, run_gate
from .services.golden import calibrate, record_golden
from .services.keep import DEFAULT_PATTERN
from .services.localization import LOCALIZATION, localize_refs
from .services.reap import reap_servers
from .services.setup import Reading, Setup, golden_file_of, plan_of, setup
from .services.stages import restore
from .templates import shown
from .terminal import (
    Terminal,
    TerminalProgress,
    printable,
)

EXIT_FOUND = 0
EXIT_FAILED = 1
"""An error while running (a journal that cannot resume, a search that contradicts itself)."""
EXIT_USAGE = 2
"""Bad config, unknown ref, bad argument, a folder in use: nothing was started."""
EXIT_AMBIGUOUS = 3
EXIT_NO_REGRESSION = 4
EXIT_INTERRUPTED = 130

CHECK_EXIT = {Verdict.GOOD: 0, Verdict.BAD: 1, Verdict.SKIP: 125, Verdict.UNSURE: 125}
"""`check` exit codes for verdicts, as `git bisect run` reads them."""
CHECK_EXIT_USAGE = 128
"""`check`: bad input (config, ref, argument, golden); 128 or more makes `git bisect run` stop
instead of blaming the commit it is on."""
CHECK_EXIT_FAILED = 129
"""`check`: an error that is not about the candidate (engine unreachable, a bug)."""
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
    add_completion=True,
    pretty_exceptions_enable=False,
)

_option_type = typer.core.TyperOption.display_type_rich


def _flag_type(option: typer.core.TyperOption, ctx: Any) -> str | None:
    """--help names no type for a flag (typer shows `<bool>`, as if it took a value)."""
    return None if option.is_flag else _option_type(option, ctx)


typer.core.TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign,assignment]

T = TypeVar("T")


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, so every context manager cleans up."""


def _on_sigterm(signum: int, frame: types.FrameType | None) -> None:
    raise _Terminated()


@dataclass(frozen=True)
class ExitCodes:
    """How a command reports errors: `run` and friends, or `check` under `git bisect run`."""

    usage: int = EXIT_USAGE
    failed: int = EXIT_FAILED
    bug: int | None = None
    """Exit code for an unexpected exception (its traceback is printed); None: Python's 1."""


CHECK_CODES = ExitCodes(CHECK_EXIT_USAGE, CHECK_EXIT_FAILED, CHECK_EXIT_FAILED)


WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})
"""Errors of the machine, not of llm-bisect: one line, and the run resumes once they are fixed."""


def guarded(fn: Callable[[Terminal], T], codes: ExitCodes = ExitCodes()) -> T:
    """Run a command body; map the error tree to exit codes in one place."""
    term = Terminal()
    previous = signal.signal(signal.SIGTERM, _on_sigterm)

    def fail(message: str, code: int) -> NoReturn:
        term.error(message)
        raise typer.Exit(code)

    def internal() -> NoReturn:
        """In an `except`: the traceback of a bug (or Python's own exit, without `bug`)."""
        if codes.bug is None:
            raise  # the exception being handled
        term.say("llm-bisect: internal error (a bug in llm-bisect, not a verdict):")
        term.say(traceback.format_exc().rstrip())
        raise typer.Exit(codes.bug) from None

    try:
        return fn(term)
    except (ConfigError, JournalError) as exc:
        fail(str(exc), codes.usage)
    except LlmBisectError as exc:
        fail(str(exc), codes.failed)
    except OSError as exc:
        if exc.errno not in WRITE_ERRNOS:
            internal()
        where = f"'{exc.filename}'" if exc.filename else "an output"
        fail(
            f"cannot write {where}: {exc.strerror}; the journal keeps every finished probe "
            "(free the space and run the same command again)",
            codes.failed,
        )
    except KeyboardInterrupt as exc:
        sig = "terminated" if isinstance(exc, _Terminated) else "interrupted"
        term.say(f"llm-bisect: {sig}; servers stopped; the journal keeps every finished probe")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except Exception:
        internal()
    finally:
        term.close()
        signal.signal(signal.SIGTERM, previous)


class _GitBisectCommand(typer.core.TyperCommand):
    """A command whose usage errors exit 128 (git bisect run stops) instead of click's 2."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: Any = None,
        **extra: Any,
    ) -> Any:  # click's Context; typer vendors click privately
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except Exception as exc:
            if hasattr(exc, "exit_code") and hasattr(exc, "show"):  # click's usage errors
                exc.exit_code = CHECK_EXIT_USAGE
            raise


def _setup(
    term: Terminal,
    config: Path,
    progress: TerminalProgress | None = None,
    repo: Path | None = None,
    eval_config: Path | None = None,
    eval_data: Path | None = None,
) -> Setup:
    """The config's setup; from here on the terminal masks its secrets."""
    report = progress.note if progress else lambda line: term.say(f"    {line}")
    s = setup(
        config,
        os.environ,
        repo=repo,
        report=report,
        reading=Reading(eval_config=eval_config, eval_data=eval_data),
    )
    term.mask(s.scrub)
    return s


ConfigArg = Annotated[
    Path, typer.Argument(help="The YAML config.", show_default=False, metavar="CONFIG")
]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Output folder (journal, logs, report).")]
GoodOpt = Annotated[
    str | None,
    typer.Option(
        "--good", help="Override candidates.good (a ref, or a day: 2026-08-09, its nightly)."
    ),
]
BadOpt = Annotated[str | None, typer.Option("--bad", help="Override candidates.bad.")]
FixOpt = Annotated[
    bool,
    typer.Option(
        "--find-fix",
        help="Look for the fix: good names the newer build that works, bad the older broken one.",
    ),
]
RepoOpt = Annotated[
    Path | None,
    typer.Option(
        "--repo",
        help="The engine's git clone, instead of candidates.repo (a CI job's checkout).",
    ),
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print the answer as JSON on stdout (progress on stderr).")
]


def _plan_json(plan: Plan, rows: list[tuple[Candidate, Artifact]]) -> dict[str, Any]:
    """`candidates --json`: the plan and each candidate's artifact or build route."""
    return {
        "mode": plan.mode.value,
        "good": plan.good.to_json(),
        "bad": plan.bad.to_json(),
        "merge_base": plan.sequence[0].commit if plan.anchor is not None else None,
        "max_probes": plan.max_probes(),
        "candidates": [
            {
                **c.to_json(),
                "artifact": {
                    "ref": art.ref,
                    "available": art.available,
                    "local": art.local,
                    "ready": art.ready,
                    "digest": art.digest,
                    "size": art.size,
                    "reason": art.reason,
                },
                "route": art.route or None,
            }
            for c, art in rows
        ],
    }


def artifacts_said(arts: list[Artifact], what: str) -> str:
    """`candidates`' count: those whose artifact is there; one it could not tell of (a
    cluster or registry out of reach: `unknown`) is not counted as there, and is said."""
    present = sum(1 for art in arts if art.available is True)
    unknown = sum(1 for art in arts if art.available is None)
    said = f"{len(arts)} candidates, {present} with {what}"
    return said + (f", {unknown} unknown (could not tell)" if unknown else "")


def _builds(art: Artifact) -> bool:
    """Whether a candidate's artifact is a build of llm-bisect's own (not an image, a
    published wheel or a cached build)."""
    return price(art) == 2


def _artifact_cell(art: Artifact) -> str:
    if art.available is None:
        return "unknown "
    if not art.available:
        return "MISSING "
    if art.local:
        return "local   "
    if not art.size:
        return "to build"  # a build route: nothing to pull, made before its probe
    return f"{art.size / 1e9:5.1f} GB"


def _print_answer(
    term: Terminal, answer: Answer, out_dir: Path, doc: ResultDocument | None = None
) -> None:
    """The answer's last lines, which scripts read (`found: SHA ...`, `report: PATH`); with
    the run's document, the banner to paste into an issue before them."""
    if doc is not None:
        for line in banner(doc, str((out_dir / "report.md").absolute())):
            term.out(line)
        term.out("")
    if answer.culprit is not None:
        c = answer.culprit
        sure = f" (posterior {answer.sure.posterior:.3f})" if answer.sure is not None else ""
        term.out(f"{answer.status.value}: {c.commit} {printable(c.subject)}{sure}")
    else:
        term.out(f"{answer.status.value}: {printable(answer.message)}")
        if answer.status is Status.AMBIGUOUS:
            for commit in answer.range[1:]:
                term.out(f"  could be {commit}")
    term.out(f"report: {out_dir / 'report.md'}")


@cli.command("run")
def run_cmd(
    config: ConfigArg,
    out: OutOpt = Path("llm-bisect-out"),
    good: GoodOpt = None,
    bad: BadOpt = None,
    find_fix: FixOpt = False,
    repo: RepoOpt = None,
) -> None:
    """Bisect the config's range to the first bad commit (resumes from --out's journal).

    Example: llm-bisect run kimi.yaml --out kimi-bisect
    """

    def body(term: Terminal) -> int:
        claim(out, "run")
        progress = TerminalProgress(term)
        s = _setup(term, config, progress, repo)
        _estimated(progress, s)
        done = run_bisect(
            s, out, good=good, bad=bad, progress=progress, terms=Terms(find_fix=find_fix)
        )
        for doubt in doubted(done.result.probes):  # a bad GPU or node: said where it is seen
            term.say(f"warning: {doubt.line}")
        _print_answer(term, done.answer, out, done.result)
        return STATUS_EXIT[done.answer.status]

    raise typer.Exit(guarded(body))


def _estimated(progress: TerminalProgress, s: Setup) -> None:
    """N in the progress line's `[i/~N]` is the run's expected starts, as `candidates` and the
    report give them (services/bisection.of_config)."""
    progress.estimate = lambda plan: of_config(
        s.config, len(plan.sequence) - 1, plan.mode is Mode.FIX
    )


@cli.command("check", cls=_GitBisectCommand)
def check_cmd(
    config: ConfigArg,
    candidate: Annotated[str, typer.Option("--candidate", help="The ref to probe.")],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Folder that keeps the server log (default: none is kept)."
        ),
    ] = None,
    golden: Annotated[
        Path | None,
        typer.Option("--golden", help="The golden to compare with (default: the config's)."),
    ] = None,
    repo: RepoOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Probe one candidate, as a `git bisect run` script.

    Exit 0 good, 1 bad, 125 skip or unsure (git skips the commit); 128 bad input
    and 129 any other error, 130 interrupted: git bisect run stops rather than
    blame the commit for them.

    Example: git bisect run llm-bisect check kimi.yaml --candidate HEAD --golden golden.json
    """

    def body(term: Terminal) -> int:
        progress = TerminalProgress(term)
        s = _setup(term, config, progress, repo)
        with _work_dir(out, "llm-bisect-check-") as out_dir:
            cand, outcome = check_one(s, candidate, out_dir, progress, golden)
            if as_json:  # what probe.json holds, on stdout
                term.out(json.dumps(s.scrub.doc(outcome.to_json()), indent=2))
                return CHECK_EXIT[outcome.verdict]
            term.out(f"{outcome.verdict.value}: {cand.commit} {printable(outcome.reason)}")
            for result in outcome.checks:
                verdict = "pass" if result.passed else "FAIL"
                term.out(f"  {result.name}: {verdict} — {printable(result.evidence)[:160]}")
            t = outcome.timings
            if "checks" in t:
                term.out(f"ready in {t['ready']:.1f}s, checks took {t['checks']:.1f}s")
            if out is not None:
                term.out(f"probe: {out_dir / 'probe.json'}")
                term.out(f"server log: {out_dir / 'probes' / cand.short / 'server.log'}")
            elif outcome.log_tail:
                tail = "\n".join(map(printable, outcome.log_tail.split("\n")))
                term.out(f"server log (last lines; --out DIR keeps it whole):\n{tail}")
        return CHECK_EXIT[outcome.verdict]

    raise typer.Exit(guarded(body, CHECK_CODES))


@contextmanager
def _work_dir(given: Path | None, prefix: str) -> Iterator[Path]:
    """The folder the user gave, else a temporary one removed afterwards."""
    if given is not None:
        yield given
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield Path(tmp)


GoldenOut = Annotated[
    str | None,  # a str: a Path would drop the trailing / that names a folder
    typer.Option(
        "--output",
        "-o",
        help="The golden file (default: the config's golden, else ./golden.json); a folder "
        "(one that exists, or ending in /) gets golden.json in it, as -o is a folder for "
        "run, check and gate.",
    ),
]
ProbeDir = Annotated[
    Path | None, typer.Option("--out", help="Folder that keeps server logs (default: none kept).")
]


def _golden_file(term: Terminal, output: str | None) -> Path | None:
    """`-o` as golden and calibrate take it: a file, or a folder to hold golden.json."""
    if output is None:
        return None
    if not (Path(output).is_dir() or output.endswith(("/", os.sep))):
        return Path(output)
    path = Path(output) / "golden.json"
    term.say(f"-o {output} is a folder: the golden goes to {path}")
    return path


@cli.command("golden")
def golden_cmd(
    config: ConfigArg,
    candidate: Annotated[str, typer.Option("--candidate", help="The good build.")],
    output: GoldenOut = None,
    out: ProbeDir = None,
    repo: RepoOpt = None,
) -> None:
    """Record the golden from one (good) build: token ids, logprobs, texts, eval answers.

    Example: llm-bisect golden kimi.yaml --candidate v0.26.1 -o golden.json
    """

    def body(term: Terminal) -> int:
        progress = TerminalProgress(term)
        s = _setup(term, config, progress, repo=repo)
        path = golden_file_of(s, _golden_file(term, output))
        with _work_dir(out, "llm-bisect-golden-") as work:
            data = record_golden(s, candidate, path, work, progress)
        term.out(f"golden of {data.commit}: {path}")
        for warning in golden_warnings(data):
            term.say(f"warning: {printable(warning)}")
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
    repo: RepoOpt = None,
) -> None:
    """Check the good build against itself; its spread becomes the default thresholds.

    Example: llm-bisect calibrate kimi.yaml --candidate v0.26.1 --runs 3 --restarts 1
    """

    def body(term: Terminal) -> int:
        progress = TerminalProgress(term)
        s = _setup(term, config, progress, repo=repo)
        path = golden_file_of(s, _golden_file(term, output))
        with _work_dir(out, "llm-bisect-calibrate-") as work:
            found = calibrate(s, candidate, path, work, runs, restarts, progress)
        term.out(f"calibrated over {found.runs} runs, {1 + restarts} server start(s): {path}")
        term.out(
            f"good-vs-good: {found.flagged} of {found.runs} runs flagged (by the thresholds then)"
        )
        for check, values in found.thresholds.items():
            for key, limit in values.items():
                bound = ">=" if key.startswith("min_") else "<="
                term.out(f"  {check}.{key} {bound} {limit.value:.4g}  ({limit.source})")
        return 0

    raise typer.Exit(guarded(body))


@cli.command("gate", cls=_GitBisectCommand)
def gate_cmd(
    config: ConfigArg,
    candidate: Annotated[
        str, typer.Option("--candidate", help="The release candidate: a ref or an image.")
    ],
    golden: Annotated[
        Path | None,
        typer.Option(
            "--golden",
            help="The last good build's golden (default: the config's, else ./golden.json).",
        ),
    ] = None,
    record: Annotated[
        bool,
        typer.Option(
            "--record",
            help="Record the golden from the last good build (--good, default candidates.good) "
            "first, unless it already holds that build's.",
        ),
    ] = False,
    good: Annotated[
        str | None, typer.Option("--good", help="The last good build, for --record.")
    ] = None,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Folder for gate.json, the reports, server logs.")
    ] = Path("llm-bisect-gate"),
    bisect_on_block: Annotated[
        bool,
        typer.Option(
            "--bisect-on-block",
            help="On block, bisect from the golden's build to the candidate (into OUT/bisect), "
            "starting with the two verdicts the gate holds.",
        ),
    ] = False,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Also write a JUnit XML here, for CI.")
    ] = None,
    eval_config: Annotated[
        Path | None,
        typer.Option(
            "--eval-config",
            help="A vLLM eval config (tests/evals/gsm8k/configs/*.yaml, "
            ".buildkite/lm-eval-harness/configs/*.yaml, tests/evals/gpt_oss/configs/*.yaml) "
            "judged as one more check: its thresholds a floor beside the golden's build, its "
            "server_args added to the server command. It replaces the config's default check "
            "of its kind (a gsm8k file: the bundled eval).",
        ),
    ] = None,
    eval_data: Annotated[
        Path | None,
        typer.Option(
            "--eval-data",
            help="For a gsm8k --eval-config: vLLM's GSM8K copy, a folder holding test.jsonl and "
            "train.jsonl (default: openai/gsm8k from this node's `datasets` cache).",
        ),
    ] = None,
    repo: RepoOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Is this release candidate as good as the last good build? The same checks and
    thresholds as a probe, against the last good build's golden.

    Exit 0 allow, 1 block (also a candidate that never becomes ready, twice, where the last
    good build does on the same launcher), 125 inconclusive (could not be tested); 128 bad
    input, 129 any other error, 130 interrupted.

    Example: llm-bisect gate kimi.yaml --candidate v0.28.0rc1 --golden golden.json --junit junit.xml
    """

    def body(term: Terminal) -> int:
        claim(out, "gate")
        progress = TerminalProgress(term)
        if eval_data is not None and eval_config is None:
            raise ConfigError("--eval-data: goes with --eval-config, and none is given")
        s = _setup(term, config, progress, repo, eval_config, eval_data)
        if junit is not None:
            prepare(junit.parent, "--junit")
        prepare(out)
        asked = GateAsk(golden, record, good, bisect_on_block, junit, eval_config, eval_data)
        doc = run_gate(s, candidate, out, progress, asked)
        if as_json:
            term.out((out / GATE_FILE).read_text().rstrip())
            return doc.exit_code
        term.out(f"{doc.decision}: {doc.candidate.commit} {printable(doc.probe.reason)}")
        for trial in doc.trials:  # started again: the candidate, then the golden's build
            said = printable(trial.probe.reason)
            term.out(f"  then {trial.role} {trial.probe.commit[:12]}: {said}")
        if doc.reason is not None:
            term.out(f"  {doc.reason}: {printable(doc.message)}")
        for result in doc.probe.checks:
            verdict = "pass" if result.passed else "FAIL"
            term.out(f"  {result.name}: {verdict} — {printable(result.evidence)[:160]}")
        for name, line in power_said(doc):  # what the eval could see; on allow, could miss
            term.out(f"  {name}: {printable(line)}")
        b = doc.bisection
        if b is not None and b.status is not None:
            found = b.culprit.commit if b.culprit is not None else printable(b.message)
            term.out(f"bisection: {b.status.value}: {found} ({b.probes} more probes)")
            term.out(f"bisection report: {Path(b.out) / 'report.md'}")
        term.out(f"gate: {out / GATE_FILE}, report: {out / 'report.md'}")
        return doc.exit_code

    raise typer.Exit(guarded(body, CHECK_CODES))


def _split(words: str, flag: str) -> list[str]:
    """A flag's value as the shell splits it (`'--moe-backend cutlass'`)."""
    try:
        return shlex.split(words)
    except ValueError as exc:
        raise ConfigError(f"{flag}: {words!r}: {exc}") from None


@cli.command("configs")
def configs_cmd(
    config: ConfigArg,
    build: Annotated[str, typer.Option("--build", help="The ref both setups run.")],
    good_server: Annotated[
        Path | None,
        typer.Option(
            "--good-server",
            help="YAML with the `server:` that serves right (default: the config's own).",
        ),
    ] = None,
    bad_server: Annotated[
        Path | None,
        typer.Option("--bad-server", help="YAML with the `server:` that serves wrong."),
    ] = None,
    bad_arg: Annotated[
        list[str] | None,
        typer.Option(
            "--bad-arg",
            help="BAD is GOOD with these flags ('--moe-backend cutlass'; again for more).",
        ),
    ] = None,
    bad_env: Annotated[
        list[str] | None,
        typer.Option("--bad-env", help="BAD is GOOD with this variable (NAME=VALUE; again)."),
    ] = None,
    out: OutOpt = Path("llm-bisect-configs"),
    repo: RepoOpt = None,
) -> None:
    """At one build, the smallest set of flag and variable differences that turns GOOD bad.

    Exit 0 found, 4 when BAD is not bad (or GOOD is bad too), 3 when trials that could not
    be tested, or that kept disagreeing, leave it open; resumes from --out's journal.

    GOOD is the config's own server unless --good-server names one; BAD is --bad-server's,
    or GOOD's with --bad-arg and --bad-env put in.

    Example: llm-bisect configs glm.yaml --build v0.30.0 --bad-arg '--moe-backend cutlass'
    """

    def body(term: Terminal) -> int:
        words = [w for arg in bad_arg or [] for w in _split(arg, "--bad-arg")]
        env: dict[str, str] = {}
        for item in bad_env or []:
            name, eq, value = item.partition("=")
            if not eq or not name.isidentifier():
                raise ConfigError(f"--bad-env: {item!r} is not NAME=VALUE")
            env[name] = value
        claim(out, "configs")
        progress = TerminalProgress(term)
        cs = configs_setup(
            config, os.environ, Servers(good_server, bad_server, words, env), repo=repo,
            report=progress.note, build=build,
        )  # fmt: skip
        term.mask(cs.scrub)
        result = run_configs(cs, out, build=build, progress=progress)
        term.out(f"{result.status}: {result.message}")
        term.out(f"report: {out / 'report.md'}")
        return result.exit_code

    raise typer.Exit(guarded(body))


@cli.command("deps")
def deps_cmd(
    config: ConfigArg,
    build: Annotated[str, typer.Option("--build", help="The engine's ref, held still.")],
    package: Annotated[str, typer.Option("--package", help="The dependency, as pip names it.")],
    good: Annotated[str, typer.Option("--good", help="Its version that works.")],
    bad: Annotated[str, typer.Option("--bad", help="Its version that breaks.")],
    index: Annotated[
        str | None,
        typer.Option(
            "--index",
            help="A PEP 503 simple index (default: $UV_DEFAULT_INDEX or $UV_INDEX_URL, as uv "
            "reads them, else PyPI).",
        ),
    ] = None,
    pre: Annotated[
        bool,
        typer.Option(
            "--pre",
            help="Bisect pre-releases and dev releases too (a, b, rc, .dev; as pip's --pre). "
            "Without it they are left out, unless --good or --bad is one.",
        ),
    ] = False,
    yanked: Annotated[
        bool,
        typer.Option(
            "--yanked",
            help="Bisect yanked releases too (PEP 592). Without it they are left out; an end "
            "that is yanked stays.",
        ),
    ] = False,
    out: OutOpt = Path("llm-bisect-deps"),
    repo: RepoOpt = None,
) -> None:
    """The first bad release of a dependency, the engine held at one build (resumes from
    --out's journal; exit codes as `run`). Yanked releases and pre-releases between the
    ends are left out unless asked (--yanked, --pre); the run says how many.

    Example: llm-bisect deps k.yaml --build v0.27.0 --package flashinfer --good 0.5.2 --bad 0.5.3
    """

    def body(term: Terminal) -> int:
        claim(out, "deps")
        progress = TerminalProgress(term)
        s = _setup(term, config, progress, repo)
        found = run_deps(
            s, out, build=build, dependency=Dependency(package, good, bad, index, pre, yanked),
            progress=progress,
        )  # fmt: skip
        held = found.done.result.deps
        if found.first_bad_version is not None and held is not None:
            last = f" (last good {held.last_good_version})" if held.last_good_version else ""
            term.out(printable(
                f"{found.done.answer.status.value}: {package} {found.first_bad_version}{last}, "
                f"the first bad release over the engine at {held.engine[:12]}"
            ))  # fmt: skip
            term.out(f"report: {out / 'report.md'}")
        else:
            _print_answer(term, found.done.answer, out)
        if found.first_bad_version is not None:
            term.out(f"first bad version: {package} {found.first_bad_version}")
        return STATUS_EXIT[found.done.answer.status]

    raise typer.Exit(guarded(body))


@cli.command("candidates")
def candidates_cmd(
    config: ConfigArg,
    good: GoodOpt = None,
    bad: BadOpt = None,
    find_fix: FixOpt = False,
    repo: RepoOpt = None,
    as_json: JsonOpt = False,
    start_minutes: Annotated[
        float | None,
        typer.Option(
            "--start-minutes",
            min=0.0,
            help="Minutes one probe takes (start, load, checks): the run's time is estimated.",
        ),
    ] = None,
) -> None:
    """List the candidates between good and bad and the plan (a dry run: nothing starts),
    and what the run will cost in server starts (and time, with --start-minutes).

    Example: llm-bisect candidates kimi.yaml --start-minutes 25
    """
    from .pins import range_bumps
    from .services.priors import planned

    def body(term: Terminal) -> int:
        s = _setup(term, config, repo=repo)
        _, plan = plan_of(s, good, bad, find_fix)
        cost = of_config(s.config, len(plan.sequence) - 1, find_fix)
        bumped = range_bumps(s.source.path, [c.commit for c in plan.candidates])
        on = s.config.search.priors and not s.config.search.policy.exact
        prior, prior_line = planned(s.source, s.golden_path(), plan.sequence[1:], on)
        if as_json:
            with s.launcher("candidates") as launcher:
                rows = [(c, launcher.artifact(c)) for c in plan.candidates]
            doc = _plan_json(plan, rows)
            for row in doc["candidates"]:
                row["bumps"] = [b.label for b in bumped.get(row["commit"], [])]
                if row["commit"] in prior:
                    row["prior"] = {"weight": prior[row["commit"]].weight,
                                    "why": prior[row["commit"]].why}  # fmt: skip
            doc["expected"] = cost.to_json(start_minutes)
            doc["builds"] = [c.commit for c, art in rows if _builds(art)]
            term.out(json.dumps(doc, indent=2))
            return 0
        term.out(f"mode: {plan.mode.value}")
        term.out(f"good: {plan.good.commit} {printable(plan.good.subject)}")
        term.out(f"bad:  {plan.bad.commit} {printable(plan.bad.subject)}")
        if plan.anchor is not None:
            term.out(f"merge base: {plan.sequence[0].commit} (verified after the old end)")
        server = s.config.server
        argv = LAUNCHERS[server.launcher].shown(server)
        words = server.launcher if argv is None else printable(shlex.join(shown(a) for a in argv))
        term.out(f"server: {words} (ready within {server.ready_timeout:g}s)")
        worker, nodes = LAUNCHERS[server.launcher].shown_worker, getattr(server, "nodes", 1)
        if worker is not None and nodes > 1:  # the other nodes' line, {head} the head's address
            other = getattr(server, worker) or argv or []
            others = printable(shlex.join(shown(a) for a in other))
            which = "the other node" if nodes == 2 else f"the other {nodes - 1} nodes"
            term.out(f"worker: {others} ({which} of each probe)")
        arts: list[tuple[Candidate, Artifact]] = []
        with s.launcher("candidates") as launcher:
            for i, c in enumerate(plan.candidates):
                art = launcher.artifact(c)
                arts.append((c, art))
                route = f"  [{printable(art.route)}]" if art.route else ""
                if c.commit in bumped:
                    labels = ", ".join(b.label for b in bumped[c.commit])
                    route += f"  [bumps {printable(labels)}]"
                if c.commit in prior:
                    route += (
                        f"  [prior {prior[c.commit].weight:g}, {printable(prior[c.commit].why)}]"
                    )
                term.out(
                    f"{i:4d}  {c.short}  {c.date[:10]}  {_artifact_cell(art)}  "
                    f"{printable(c.subject)}{route}"
                )
        what = "a build route" if s.builder is not None else "an artifact"
        term.out(artifacts_said([art for _, art in arts], what))
        term.out(cost.line(start_minutes))
        builds = [c for c, art in arts if _builds(art)]
        if builds:
            term.out(
                f"builds: {len(builds)} to make from source, where the search reaches them: "
                + printable(", ".join(c.short for c in builds))
            )
        term.out(prior_line)
        if bumped:
            term.out(
                f"{len(bumped)} candidate(s) bump a dependency pin (marked): where one is the "
                "culprit, `llm-bisect deps` bisects that dependency's releases"
            )
        return 0

    raise typer.Exit(guarded(body))


def _golden_warnings(path: Path) -> list[str]:
    """What the golden a run recorded into DIR says of the good build; none if unreadable."""
    if not path.is_file():
        return []
    try:
        return golden_warnings(golden_load(path))
    except ConfigError:
        return []


@cli.command("report")
def report_cmd(
    out: Annotated[Path, typer.Argument(help="A run's output folder.", show_default=False)],
) -> None:
    """Write result.json and report.md again from a run's journal.

    Example: llm-bisect report kimi-bisect
    """

    def body(term: Terminal) -> int:
        if not (out / FILENAME).is_file():
            raise ConfigError(f"DIR: no journal in '{out}'")
        with hold(out, "DIR"):
            reading = read_journal(out / FILENAME)
            if reading.dropped:
                term.say(f"    journal: left out its {reading.dropped}")
            if reading.state is None:
                raise ConfigError(f"DIR: the journal in '{out}' holds no run")
            own = out / "golden.json"  # else the one the run names (a folder moved: its own)
            named = Path(str(reading.state.context.get("golden") or own))
            judged_by = own if own.exists() else named
            step, result = result_of(reading.state, _golden_warnings(own), judged_by)
            if result is None or not isinstance(step, Answer):
                raise JournalError(
                    f"{out}: the run has not finished; resume it with `llm-bisect run`"
                )
            restored = restore(RunResult(step, result, out))  # each stage's part, as the run
            step = restored.answer  # ended it
            written = write_outputs(out, _with_deps(restored.result, out / "result.json"))
        _print_answer(term, step, out, written)
        return STATUS_EXIT[step.status]

    raise typer.Exit(guarded(body))


def _with_deps(result: ResultDocument, written: Path) -> ResultDocument:
    """A `deps` run's releases (its first bad, those left out, the engine held, its notes) as
    the result.json written before held them: `report DIR` keeps them."""
    try:
        before = ResultDocument.model_validate_json(written.read_bytes())
    except (OSError, ValueError):
        return result
    same = before.culprit and result.culprit and before.culprit.commit == result.culprit.commit
    if not same or before.deps is None:
        return result
    notes = [*result.notes, *(n for n in before.notes if n not in result.notes)]
    kept = {"deps": before.deps, "first_bad_version": before.first_bad_version,
            "left_out": before.left_out, "notes": notes}  # fmt: skip
    return result.model_copy(update=kept)


@cli.command("localize")
def localize_cmd(
    config: ConfigArg,
    good: Annotated[str, typer.Option("--good", help="The last good build (a ref or image).")],
    bad: Annotated[str, typer.Option("--bad", help="The first bad build (a ref or image).")],
    prompt: Annotated[
        str | None, typer.Option("--prompt", help="The text both builds run (default: config's).")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Folder for localization.json and the server logs."),
    ] = None,
    repo: RepoOpt = None,
) -> None:
    """Where in the model two builds first differ: each runs the same tokens with
    llm-bisect's worker extension (vLLM; eager mode for these two probes).

    Exit 0 when both ran (a divergence found or not), 1 when a build could not run.

    Example: llm-bisect localize kimi.yaml --good 5f1c2d3 --bad 8ab2e4f --out where
    """

    def body(term: Terminal) -> int:
        progress = TerminalProgress(term)
        s = _setup(term, config, progress, repo)
        with _work_dir(out, "llm-bisect-localize-") as out_dir:
            doc = localize_refs(s, good, bad, out_dir, prompt=prompt, note=progress.note)
            term.out(doc.line)
            if doc.why:
                term.out(f"  ({doc.why})")
            seconds = ", ".join(
                [f"{k} {v:.0f}s" for k, v in doc.seconds.items()]
                + [f"{k} captured before" for k in doc.reused]
            )
            term.out(
                f"  {doc.tokens} tokens; probes: {seconds}; "
                f"collected {doc.collected_bytes / 1e6:.1f} MB"
            )
            if out is not None:
                term.out(f"localization: {out_dir / LOCALIZATION}")
        return 0

    raise typer.Exit(guarded(body))


@cli.command("reap")
def reap_cmd(
    config: Annotated[
        Path | None,
        typer.Argument(
            help="Look where this config's launcher runs servers (its docker_hosts too).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Remove the servers killed llm-bisect processes left behind: containers and Slurm
    jobs whose owner process is gone (after a SIGKILL, an OOM kill, a lost session).

    Without CONFIG: this node's Docker engine and Slurm queue. Servers of a live
    llm-bisect process (another run on this node) are never touched. Every command that
    starts servers does this first for its own launcher. Exit 0, or 1 when a place could
    not be looked at.

    Example: llm-bisect reap kimi.yaml
    """

    def body(term: Terminal) -> int:
        s = _setup(term, config) if config is not None else None
        done = reap_servers(s, os.environ)
        for line in done.removed:
            term.out(printable(line))
        for line in done.failed:
            term.say(f"llm-bisect: {printable(line)}")
        where = " and ".join(done.looked) or "nowhere (no Docker engine, no Slurm here)"
        if done.removed:
            term.out(f"reaped {len(done.removed)} server(s) in {where}")
        else:
            term.out(f"nothing to reap in {where}")
        return 1 if done.failed else 0

    raise typer.Exit(guarded(body))


@cli.command("keep")
def keep_cmd(
    source: Annotated[
        str,
        typer.Argument(
            help="The repository whose tags to keep: REGISTRY/REPO (Docker Hub without a host).",
            show_default=False,
        ),
    ],
    pattern: Annotated[
        str,
        typer.Option("--pattern", help="Keep the tags this regular expression matches whole."),
    ] = DEFAULT_PATTERN,
    mirror: Annotated[
        str | None,
        typer.Option(
            "--mirror",
            help="Copy each image here (REGISTRY/REPO), byte for byte, by digest and tag.",
        ),
    ] = None,
    ledger: Annotated[
        Path | None,
        typer.Option(
            "--ledger",
            help="The ledger file (default: ~/.local/share/llm-bisect/ledgers/REGISTRY/REPO.json,"
            " under $XDG_DATA_HOME when set).",
        ),
    ] = None,
    deadline: Annotated[
        float,
        typer.Option(
            "--deadline",
            help="Seconds one request to a registry may take, whole (retries, every byte).",
        ),
    ] = DEADLINE_S,
    blob_deadline: Annotated[
        float,
        typer.Option("--blob-deadline", help="Seconds one layer's copy may take, whole."),
    ] = BLOB_DEADLINE_S,
    max_pages: Annotated[
        int,
        typer.Option("--max-pages", help="Pages of the tags list read at most."),
    ] = MAX_PAGES,
) -> None:
    """Record a registry's nightly tags (digest and commit) in a ledger, and copy their images
    to a mirror before the registry's retention drops them; a run whose config names the
    ledger (server.ledger) pulls from the mirror. Run it daily; a second run copies nothing
    already there. Credentials: what `docker login` stored, for each registry. A tag outside
    the registry's grammar is refused, and what is copied is checked against its digest.
    Exit 0; 1 when a tag could not be kept (refused, unreadable, a limit passed); 2 bad input.

    Example: llm-bisect keep vllm/vllm-openai --mirror ghcr.io/me/vllm-openai
    """
    import re
    from datetime import datetime, timezone

    from .launchers.docker_images import docker_logins
    from .ledger import default_path
    from .registry import RegistryClient, parse_image_ref
    from .services.keep import keep

    def body(term: Terminal) -> int:
        upstream = _repository(source, "SOURCE")
        copy_to = _repository(mirror, "--mirror") if mirror else None
        if copy_to is not None and copy_to == upstream:
            raise ConfigError(f"--mirror: {mirror!r} is the repository the tags come from")
        try:
            matcher = re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"--pattern: not a regular expression {pattern!r}: {exc}") from None
        for key, value in (("--deadline", deadline), ("--blob-deadline", blob_deadline)):
            if not 0 < value < float("inf"):
                raise ConfigError(f"{key}: give a number of seconds above 0, not {value:g}")
        if max_pages < 1:
            raise ConfigError(f"--max-pages: give 1 or more, not {max_pages}")
        name = f"{upstream.registry}/{upstream.repository}"
        path = ledger or default_path(name)
        hosts = [upstream.registry] + ([copy_to.registry] if copy_to else [])
        registry = RegistryClient(
            logins=docker_logins(hosts), deadline=deadline, blob_deadline=blob_deadline
        )
        try:
            done = keep(
                registry,
                upstream,
                pattern=matcher,
                ledger_path=path,
                mirror=copy_to,
                now=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"),
                report=lambda line: term.say(printable(line)),
                max_pages=max_pages,
            )
        finally:
            registry.close()
        term.out(f"ledger: {path}")
        term.out(
            f"{len(done.matched)} tag(s) of {name} match {printable(pattern)}: "
            f"{len(done.new)} new, {len(done.gone)} dropped upstream since the last look"
        )
        if copy_to is not None:
            c = done.copied
            term.out(
                f"mirror {copy_to.registry}/{copy_to.repository}: {len(done.mirrored)} image(s) "
                f"copied, {len(done.already)} already there; {c.blobs} blob(s) streamed "
                f"({c.bytes / 1e9:.2f} GB), {c.mounted} mounted, {c.present} already there, "
                f"{c.manifests} manifest(s) written"
            )
        for line in done.failed:
            term.say(f"llm-bisect: {printable(line)}")
        return EXIT_FAILED if done.failed else EXIT_FOUND

    def _repository(value: str, key: str) -> ImageRef:
        try:
            ref = parse_image_ref(value)
        except ValueError:
            raise ConfigError(f"{key}: not a REGISTRY/REPO {value!r}") from None
        if ref.digest or value.rsplit("/", 1)[-1].count(":"):
            raise ConfigError(f"{key}: name a repository without a tag or digest, not {value!r}")
        return ImageRef(ref.registry, ref.repository, None, None)

    raise typer.Exit(guarded(body))


@cli.command("schema")
def schema_cmd(
    golden: Annotated[
        bool, typer.Option("--golden", help="The schema of a golden file instead.")
    ] = False,
    result: Annotated[
        bool, typer.Option("--result", help="The schema of result.json instead.")
    ] = False,
    gate: Annotated[bool, typer.Option("--gate", help="The schema of gate.json instead.")] = False,
) -> None:
    """Print the JSON Schema of a config (or of a golden, result.json, gate.json).

    Example: llm-bisect schema > config.schema.json
    """
    if golden + result + gate > 1:
        typer.echo("llm-bisect: error: --golden, --result and --gate: give one", err=True)
        raise typer.Exit(EXIT_USAGE)
    if golden:
        doc = golden_schema()
    elif result or gate:
        doc = schemas()["result" if result else "gate"]
    else:
        doc = Config.model_json_schema()
    print(json.dumps(doc, indent=2))


@cli.command("init")
def init_cmd(
    good: Annotated[
        str, typer.Option("--good", help="What worked: an image, a commit or a vLLM wheel.")
    ],
    bad: Annotated[str, typer.Option("--bad", help="What does not (the same kind as --good).")],
    serve: Annotated[
        list[str] | None,
        typer.Argument(help="After --: the command that serves the model (vllm serve MODEL ...)."),
    ] = None,
    repo: Annotated[
        str, typer.Option("--repo", help="The engine's clone, relative to the config.")
    ] = "vllm",
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The config to write (never overwritten).")
    ] = Path("llm-bisect.yaml"),
    launcher: Annotated[
        str | None,
        typer.Option(
            "--launcher",
            help="docker, process, slurm or kubernetes (default: docker for two images, "
            "process for commits or wheels).",
        ),
    ] = None,
    nodes: Annotated[
        int,
        typer.Option(
            "--nodes",
            min=1,
            help="Nodes a probe spans (slurm, kubernetes: 2 for "
            "vLLM's data-parallel ranks over two nodes).",
        ),
    ] = 1,
    gpus_per_node: Annotated[
        int | None,
        typer.Option(
            "--gpus-per-node",
            min=0,
            help="GPUs of each node of a probe (default: from vLLM's parallel sizes; 0: none).",
        ),
    ] = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", help="Kubernetes: the namespace of the probes.")
    ] = None,
    pull_secret: Annotated[
        str | None,
        typer.Option("--image-pull-secret", help="Kubernetes: a private registry's pull Secret."),
    ] = None,
) -> None:
    """Write a commented config from two builds and the serve command, and say what next.

    Example: llm-bisect init --good vllm/vllm-openai:nightly-2026-08-09
    --bad vllm/vllm-openai:v0.27.0 -- vllm serve RedHatAI/Kimi-K3-NVFP4
    --tensor-parallel-size 8
    """
    import yaml

    from . import starter
    from .config import parse_config

    def body(term: Terminal) -> int:
        served = starter.parse_serve(serve or [])
        place = starter.Place(launcher, nodes, gpus_per_node, namespace, pull_secret)
        start = starter.Start(good, bad, served, repo, place)
        text, what = starter.render(start)
        parse_config(starter.stand_ins(yaml.safe_load(text)))  # what it writes validates
        if output.exists():
            raise ConfigError(f"{output} exists: pick another --output (init never overwrites)")
        prepare(output.parent, "--output")
        output.write_text(text)
        term.say(f"wrote {output} ({what}); {starter.first_steps(text, start)}; then:")
        for line in starter.next_commands(str(output)):
            term.say(f"  {line}")
        return 0

    raise typer.Exit(guarded(body))


@cli.command("demo")
def demo_cmd(
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Output folder; the demo's repository and config go in it too."
        ),
    ] = None,
    docker: Annotated[
        bool,
        typer.Option("--docker", help="One container image per commit, through the local engine."),
    ] = False,
) -> None:
    """Bisect a made-up 40-commit history on the built-in simulated server.

    Example: llm-bisect demo --out demo-run
    """
    from . import demo

    def body(term: Terminal) -> int:
        if docker:
            demo.require_engine()
        # absolute: the config, the repository and every command the report prints name
        # these folders, and a user pastes those commands from wherever they stand
        base = out.absolute() if out else None
        work = (
            (prepare(base) / "demo") if base else Path(tempfile.mkdtemp(prefix="llm-bisect-demo-"))
        )
        repo_dir = work / "engine"
        shas = demo.build_demo_history(repo_dir)
        images = demo.build_demo_images(repo_dir, shas) if docker else []
        config = demo.write_config(work, repo_dir, docker=docker)
        out_dir = base or work / "out"
        how = f", {len(images)} images" if docker else ""
        term.say(f"demo: a {demo.N_COMMITS}-commit history in {repo_dir}{how}; config {config}")
        progress = TerminalProgress(term)
        kept: list[str] = []
        try:
            s = _setup(term, config, progress)
            _estimated(progress, s)
            done = run_bisect(s, out_dir, progress=progress)
            kept = demo.images_of(images, done.answer.range)
        finally:
            if images:  # all but those the report's commands run
                demo.remove_images([x for x in images if x not in kept])
        _print_answer(term, done.answer, out_dir, done.result)
        probes = len(done.result.probes)
        started, ended = done.result.started_at, done.result.ended_at
        wall = ended - started if started is not None and ended is not None else None
        term.say(f"demo: {probes} probes in {duration(wall)}")  # the figure report.md gives
        if kept:
            term.say(
                f"demo: kept the {len(kept)} images the report's commands run; remove them "
                f"with: {demo.remove_line(kept)}"
            )
        found = done.answer.culprit
        if found is None or found.commit != shas[demo.CULPRIT_INDEX]:
            term.say("demo: the bisection did not land on the planted culprit")
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
    try:
        plugins.load()  # the built-in kinds, then installed packages' (entry points)
    except LlmBisectError as exc:
        typer.echo(f"llm-bisect: error: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
