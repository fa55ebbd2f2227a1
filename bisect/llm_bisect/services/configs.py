"""The configs service: at one build, the smallest set of flag and variable differences
that turns a GOOD server setup bad (delta.py), each trial a probe.

    llm-bisect configs CONFIG --build REF --good-server GOOD.yaml --bad-server BAD.yaml
    llm-bisect configs CONFIG --build REF --bad-arg '--moe-backend cutlass' \
        --bad-env VLLM_USE_DEEP_GEMM=1

GOOD is the config's own server unless --good-server names one; BAD is --bad-server's, or
GOOD's with --bad-arg's flags (a flag GOOD sets takes BAD's value) and --bad-env's variables
put in. GOOD.yaml and BAD.yaml each hold a `server:` section (the config's own keys); they
may differ only in the command's flags (`server.command`, or `server.args` for images) and
in `server.env`. The first trial is GOOD itself: its probe records DIR/golden.json, which
every other trial is judged by with the config's checks; the second is BAD. A trial that
cannot be tested (skip, unsure) is never bad, nor is one bad with another symptom than BAD's
(none of the checks it failed is one BAD failed): a different failure, counted unresolved.

A server start can lie (serve the other side's behaviour), so unless `search.flake` is 0
(today's ddmin, trial for trial) the answer is re-tested both ways, each repeat a new start,
until it holds at `search.confidence` (delta.next_trial): GOOD with only the set applied is
bad, with any one of it left out good, and BAD with only the set reverted good (the set
alone explains it) or still bad (another difference also turns GOOD bad). Trials of one
setup that disagree send the search back over every setup ddmin's path consulted.

    DIR/configs.jsonl   the journal: the differences, then one `probe` event per trial
                        (a setup probed again is another event; a run killed at any moment
                        resumes without repeating a finished trial)
    DIR/trials/N/       each trial's server log and collect_env
    DIR/result.json     status, build, every difference, the smallest set, the trials
    DIR/report.md
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import escape as esc
from ..checks.golden import Golden
from ..checks.logprobs import LogprobsDetails
from ..config import config_digest, load_server
from ..delta import (
    DeltaStep,
    Difference,
    GoodIsBad,
    Minimal,
    Need,
    NotBad,
    Outcome,
    apply,
    differences,
    flag_groups,
    lie_rate,
    next_trial,
)
from ..environment import node_environment
from ..errors import BrokenGoodEnd, ConfigError, LocalizeError
from ..fingerprint import differences as fingerprint_differences
from ..journal import Journal, read_events
from ..localize import LocalizationDoc
from ..model import Candidate, ProbeOutcome, Regress, Verdict
from ..outdir import hold
from ..probe import ProbeContext, Progress, probe
from ..redact import Scrub
from ..report import markdown as md
from ..report.documents import Build, Context, ProbeDoc, Sides
from ..report.html import logprob_figure, page, table
from ..report.result import probe_doc
from ..runner import write_atomic
from ..secretnames import argv_secrets, caller_secret_names, secret_flag, secret_names
from ..templates import expand_env, literal
from ..yamlfile import read_yaml
from .localization import localize_builds, write_localization
from .setup import Reading, Setup, run_id_of, setup

JOURNAL = "configs.jsonl"
VERSION = 1


@dataclass(frozen=True)
class Trial:
    """One setup probed: these differences applied to GOOD."""

    subset: tuple[int, ...]
    verdict: Verdict
    reason: str
    failed: tuple[str, ...] = ()
    """The checks it failed."""
    counted: Outcome = Outcome.UNRESOLVED
    """What the search counted it as (`weighed`): its verdict, but a trial bad with another
    symptom than BAD's is unresolved."""
    symptom: tuple[str, ...] = ()
    """BAD's failed checks, when this trial is bad with another symptom (`weighed`)."""

    @property
    def shown(self) -> str:
        """Its reason as output says it: the probe's own (`reason`, kept as journalled), and
        why it is not counted bad when it failed with another symptom than BAD's."""
        if not self.symptom:
            return self.reason
        return (f"another symptom than BAD's: it failed {', '.join(self.failed)}, BAD "
                f"{', '.join(self.symptom)}: not counted as bad ({self.reason})")  # fmt: skip


@dataclass(frozen=True)
class Retest:
    """One setup the answer was re-tested on, and what its trials showed."""

    applied: tuple[int, ...]
    """The differences applied to GOOD."""
    setup: str
    """Which way: `GOOD with only the set applied`, `BAD with only the set reverted`, ..."""
    expect: Outcome | None
    """What the answer needs it to be; None: either (BAD with the set reverted)."""
    trials: tuple[int, ...]
    """Its trials, by number (1, 2, ...)."""
    path: int
    """Its first trials that ddmin's path chose on (0 or 1): no re-test, not counted."""
    belief: float
    """How likely it truly is what `expect` says (None: what most of its trials say)."""


@dataclass(frozen=True)
class Asked:
    """How a configs run was asked for, by absolute paths (its Reproduce lines run from any
    folder)."""

    config: str
    build: str
    """--build as given (a ref, an image)."""
    good_file: str = ""
    """--good-server's file; "": GOOD is the config's own server."""
    repo: str = ""
    """--repo's clone; "": candidates.repo (or none)."""
    out: str = ""
    golden: str = ""
    """GOOD's golden the trials were judged by."""
    environment: Mapping[str, Any] | None = None
    """The node (report.markdown.environment_lines)."""
    own_server: bool = True
    """The config has a `server:` of its own."""
    candidates: bool = True
    """The config has `candidates:` (`check` needs them)."""


@dataclass(frozen=True)
class ConfigsResult:
    """What `configs` found."""

    status: str
    """found, ambiguous (a smaller set may exist: trials could not be tested), not-bad
    (BAD tested good), good-is-bad (GOOD tested bad), untestable (an end could not be)."""
    build: Candidate
    differences: list[Difference]
    difference: tuple[int, ...]
    """The smallest set found (indices into `differences`); empty when none was."""
    trials: list[Trial]
    message: str
    localization: LocalizationDoc | None = None
    """GOOD against the smallest bad setup at the build: the first module whose output
    differs, and whether either side had NaN/Inf (`localize: false`: none)."""
    only: bool | None = None
    """BAD with only the set reverted tests good (True: the set alone explains it) or still
    bad (False: another difference also turns GOOD bad); None: not re-tested."""
    retests: tuple[Retest, ...] = ()
    """The setups the answer was re-tested on (none with `search.flake: 0`)."""
    confidence: float | None = None
    """How sure the re-tested answer is; None: not re-tested."""
    rate: float = 0.0
    """The lie rate the trials were weighed at (0: verdicts are facts)."""
    notes: tuple[str, ...] = ()
    """Trials that disagreed with the other trials of their setup (a start that lied)."""
    good_probe: ProbeDoc | None = None
    """GOOD's trial (its latest that tested good): one side of the evidence."""
    bad_probe: ProbeDoc | None = None
    """The smallest bad setup's trial (its latest that tested bad): the other side."""
    asked: Asked | None = None
    """How the run was asked for: what its Reproduce lines say again."""

    @property
    def exit_code(self) -> int:
        return {"found": 0, "not-bad": 4, "good-is-bad": 4}.get(self.status, 3)


def _argv_key(server: Mapping[str, Any]) -> str:
    """The field holding the server's flags: `command` (processes, Slurm) or `args` (images)."""
    return "command" if "command" in server else "args"


def _compare(good: Setup, bad: Setup) -> tuple[str, list[Difference]]:
    """The differences of two setups' flags and variables; ConfigError for anything else."""
    g = good.config.server.model_dump()
    b = bad.config.server.model_dump()
    key = _argv_key(g)
    worker = f"worker_{key}"  # a multi-node probe's other nodes: the head's differences
    for name in sorted({*g, *b} - {key, worker, "env"}):
        if g.get(name) != b.get(name):
            raise ConfigError(
                f"--bad-server: server.{name} differs from GOOD's: only the flags "
                f"(server.{key}) and server.env may differ"
            )
    found = differences(g[key] or [], b[key] or [], g["env"], b["env"])
    every = frozenset(range(len(found)))
    if (g.get(worker) is None) != (b.get(worker) is None) or (
        g.get(worker) is not None
        and flag_groups(b[worker]) != flag_groups(apply(g[worker], {}, found, every)[0])
    ):
        raise ConfigError(
            f"--bad-server: server.{worker} differs from GOOD's other than by the flags "
            f"server.{key} differs by (every node runs the setup the head runs)"
        )
    return key, found


def _digest(build: str, diffs: list[Difference], config: str) -> str:
    """What decides the trials' verdicts: the build, the differences, and the rest of the
    config (checks, thresholds, repeats: another config is another run)."""
    data = [build, [[d.kind, d.name, d.good, d.bad] for d in diffs], config]
    return hashlib.sha256(json.dumps(data).encode()).hexdigest()[:16]


def _trial_setup(
    s: Setup, bad: Setup, key: str, diffs: Sequence[Difference], subset: frozenset[int]
) -> Setup:
    """GOOD with the differences in `subset` made as BAD has them, on every node."""
    given = s.config.server.model_dump()
    argv, env = apply(given[key] or [], given["env"], diffs, subset)
    update: dict[str, Any] = {key: argv, "env": env}
    if given.get(f"worker_{key}") is not None:  # a multi-node probe's other nodes
        update[f"worker_{key}"] = apply(given[f"worker_{key}"], {}, diffs, subset)[0]
    server = s.config.server.model_copy(update=update)
    names = sorted({*s.secret_names, *bad.secret_names, *secret_names(env)})
    return replace(
        s,
        config=s.config.model_copy(update={"server": server}),
        env=expand_env(env, s.environ),
        secret_names=names,
        scrub=s.scrub,
    )


_OUTCOME = {Verdict.GOOD: Outcome.GOOD, Verdict.BAD: Outcome.BAD}


def weighed(trials: list[Trial], count: int) -> list[Trial]:
    """Each trial with what the search counts it as: a bad trial none of whose failed checks
    is one BAD (every difference applied) failed is another failure than BAD's, never its
    evidence: unresolved, and `shown` says so. Pure: weighing weighed trials changes nothing."""
    everything = tuple(range(count))
    symptom = sorted({name for t in trials if t.subset == everything
                      and t.verdict is Verdict.BAD for name in t.failed})  # fmt: skip
    out = []
    for t in trials:
        counted, other = _OUTCOME.get(t.verdict, Outcome.UNRESOLVED), tuple[str, ...]()
        if counted is Outcome.BAD and symptom and t.failed and not set(t.failed) & set(symptom):
            counted, other = Outcome.UNRESOLVED, tuple(symptom)
        out.append(replace(t, counted=counted, symptom=other))
    return out


def known_of(trials: list[Trial]) -> dict[frozenset[int], list[Outcome]]:
    """Each setup's trials as the search counts them, in order."""
    known: dict[frozenset[int], list[Outcome]] = {}
    for t in trials:
        known.setdefault(frozenset(t.subset), []).append(t.counted)
    return known


def _decide(
    trials: list[Trial], count: int, flake: float | None, confidence: float
) -> tuple[list[Trial], DeltaStep]:
    """The trials weighed, and the next step of the search over them. Pure."""
    trials = weighed(trials, count)
    return trials, next_trial(count, known_of(trials), flake=flake, confidence=confidence)


def _judges_nothing(golden: Golden | None) -> str:
    """Why a golden just recorded from GOOD judges nothing: it matched none of its expect
    cases (every case then counts for no setup); "" when it does judge. Pure."""
    expect = golden.checks.expect if golden is not None else None
    if expect is None or any(c.matched for c in expect.cases):
        return ""
    return f"it matched none of its {len(expect.cases)} expect case(s)"


REFUSED = "-golden-refused"
"""The end of a trial folder whose start recorded a golden GOOD refused."""


def _unused(path: Path, suffix: str) -> Path:
    """`path` with `suffix`, or -2, -3, ... after it: a name no folder has yet."""
    name, n = path.with_name(path.name + suffix), 1
    while name.exists():
        n += 1
        name = path.with_name(f"{path.name}{suffix}-{n}")
    return name


def _failed(outcome: ProbeOutcome) -> tuple[str, ...]:
    return tuple(c.name for c in outcome.checks if not c.passed)


def _flake(s: Setup) -> float | None:
    flake = s.config.search.flake
    return None if flake == "auto" else float(flake)


@dataclass(frozen=True)
class ConfigsSetup:
    """GOOD and BAD loaded and compared; nothing started."""

    good: Setup
    bad: Setup
    key: str
    """The server field the flags are in: `command` or `args`."""
    differences: list[Difference]
    secret: list[str]
    """Variables whose values output never shows: both setups' and the caller's."""
    scrub: Scrub
    good_file: str = ""
    """--good-server's file (absolute); "": GOOD is the config's own server."""
    repo: str = ""
    """--repo (absolute); "": none given."""
    own_server: bool = True
    """The config has a `server:` of its own (unused where --good-server is given)."""
    candidates: bool = True
    """The config has `candidates:` (`check`, which its Reproduce line runs, needs them)."""
    build: tuple[str, Candidate] | None = None
    """--build as given and the candidate it resolved to, when configs_setup was given it."""


def inline_bad(
    good: Mapping[str, Any], words: Sequence[str], env: Mapping[str, str]
) -> dict[str, Any]:
    """BAD as GOOD's server with `words` (`--moe-backend cutlass`, `--enforce-eager`) and
    `env` put in: a flag GOOD sets takes BAD's value, another is added; each value is
    literal (a brace is written twice in a command: `{port}` is a placeholder). A
    multi-node probe's other nodes (`worker_command`, `worker_args`) get them too: every
    rank runs BAD's setup."""
    key = "command" if good.get("command") else "args"
    bad = {**good, key: _put(good.get(key) or [], words)}
    if good.get(f"worker_{key}"):
        bad[f"worker_{key}"] = _put(good[f"worker_{key}"], words)
    merged = {**dict(good.get("env") or {}), **{k: literal(v) for k, v in env.items()}}
    return {**bad, "env": merged}


def _put(given: Sequence[Any], words: Sequence[str]) -> list[str]:
    """An argument list with `words`' flags put in (see inline_bad)."""
    argv = [str(w) for w in given]
    i = 0
    while i < len(words):
        flag = words[i]
        if not flag.startswith("-"):
            raise ConfigError(f"--bad-arg: {flag!r} is a value with no flag before it")
        values = []
        i += 1
        while i < len(words) and not words[i].startswith("-"):
            values.append(literal(words[i]))
            i += 1
        name = flag.partition("=")[0]
        at = next((j for j, w in enumerate(argv) if w.partition("=")[0] == name), None)
        if at is None:
            argv += [literal(flag), *values]
            continue
        end = at + 1
        while "=" not in argv[at] and end < len(argv) and not argv[end].startswith("-"):
            end += 1  # GOOD's own values of the flag, which BAD's replace
        argv[at:end] = [literal(flag), *values]
    return argv


@dataclass(frozen=True)
class Servers:
    """Where `configs` takes GOOD's and BAD's `server:` sections from: GOOD's is the config's
    own unless `good_file` names one; BAD's is `bad_file`'s, or GOOD's with `bad_args` and
    `bad_env` put in."""

    good_file: Path | None = None
    bad_file: Path | None = None
    bad_args: Sequence[str] = ()
    bad_env: Mapping[str, str] | None = None


def configs_setup(
    config_path: Path,
    environ: Mapping[str, str],
    servers: Servers,
    *,
    repo: Path | None = None,
    report: Callable[[str], None] = lambda _: None,
    clock: Callable[[], float] = time.monotonic,
    build: str | None = None,
) -> ConfigsSetup:
    """Load CONFIG with GOOD's and with BAD's server (`servers`), and their differences;
    ConfigError for setups that differ in anything but flags and variables; `build`, when
    given, is resolved here (before anything is said)."""
    good_file, bad_file, bad_args, bad_env = (
        servers.good_file, servers.bad_file, servers.bad_args, servers.bad_env
    )  # fmt: skip
    inline = bool(bad_args) or bool(bad_env)
    if inline == (bad_file is not None):
        raise ConfigError(
            "BAD: give --bad-server FILE, or --bad-arg / --bad-env (GOOD's server with them "
            "put in), not both"
            if inline
            else "BAD: give --bad-server FILE, or --bad-arg '--flag value' / --bad-env NAME=VALUE"
        )
    data = read_yaml(config_path, "CONFIG")
    own = isinstance(data, dict) and isinstance(data.get("server"), dict)
    if good_file is not None:
        good_server = load_server(good_file, "--good-server")
    else:
        if not own:
            raise ConfigError(f"CONFIG {config_path}: no server: section to be GOOD")
        good_server = dict(data["server"])
    if bad_file is not None:
        bad_server = load_server(bad_file, "--bad-server")
    else:
        bad_server = inline_bad(good_server, bad_args, bad_env or {})
    # a config with no `candidates:` serves: `configs` probes one build, named by --build
    s = setup(config_path, environ, repo=repo, clock=clock, report=report,
              reading=Reading(server_section=good_server, candidates=False))  # fmt: skip
    bad = setup(config_path, environ, repo=repo, clock=clock,
                reading=Reading(server_section=bad_server, candidates=False))  # fmt: skip
    key, diffs = _compare(s, bad)
    if not diffs:
        raise ConfigError("--bad-server: GOOD and BAD set the same flags and variables")
    names = sorted({*s.secret_names, *bad.secret_names, *caller_secret_names(environ)})
    flagged = [v for c in (s, bad) for v in argv_secrets(getattr(c.config.server, key) or [])]
    scrub = s.scrub.with_secrets([*bad.scrub.secrets, *flagged])
    s = replace(s, scrub=scrub)  # the golden, the journal and every trial mask them all
    resolved = (build, s.resolve(build, "--build")) if build is not None else None
    if good_file is not None:  # said once the input is known good: bad input is one line
        unused = " (the config's own server: is not used)" if own else ""
        report(f"GOOD: the server of {good_file}{unused}")
    given = str(good_file.absolute()) if good_file is not None else ""
    return ConfigsSetup(s, bad, key, diffs, names, scrub, given,
                        str(repo.absolute()) if repo is not None else "", own,
                        isinstance(data, dict) and "candidates" in data, resolved)  # fmt: skip


def run_configs(
    cs: ConfigsSetup, out_dir: Path, *, build: str, progress: Progress
) -> ConfigsResult:
    """Find the smallest difference between GOOD and BAD that makes `build` bad."""
    s, bad, key, diffs, names, scrub = (cs.good, cs.bad, cs.key, cs.differences, cs.secret,
                                        cs.scrub)  # fmt: skip
    candidate = cs.build[1] if cs.build and cs.build[0] == build else s.resolve(build, "--build")
    digest = _digest(candidate.commit, diffs, config_digest(s.config))
    trials: list[Trial] = []
    outcomes: list[ProbeOutcome] = []  # each trial's probe, in order
    flake, confidence = _flake(s), s.config.search.confidence
    with hold(out_dir):
        # refused once in total, a resume included: the refused start's folder says so
        regolden = any((out_dir / "trials").glob(f"*{REFUSED}*"))
        golden = s.golden_store(out_dir / "golden.json", candidate.commit, compare=False)
        if regolden and flake != 0 and (broken := _judges_nothing(golden.data)):
            raise BrokenGoodEnd(f"GOOD's golden, recorded again, still judges nothing: {broken}")
        with Journal(out_dir / JOURNAL, scrub) as journal:
            for event in read_events(out_dir / JOURNAL):
                if event["event"] == "run" and event.get("digest") != digest:
                    raise ConfigError(
                        f"--out {out_dir}: holds a configs run of another build or setups"
                    )
                if event["event"] == "probe":
                    done = ProbeOutcome.from_json(event["outcome"])
                    subset = tuple(int(i) for i in event["subset"])
                    trials.append(Trial(subset, done.verdict, done.reason, _failed(done)))
                    outcomes.append(done)
            if not journal.reading.events:
                journal.append(
                    "run",
                    version=VERSION,
                    digest=digest,
                    kind="configs",
                    build=candidate.to_json(),
                    differences=[_shown(d, names).label for d in diffs],
                    plan={"mode": "regression", "anchor": None, "sequence": []},
                )
            for d in diffs:
                progress.note(f"difference: {_shown(d, names).label}")
            trials, step = _decide(trials, len(diffs), flake, confidence)
            while isinstance(step, Need):
                subset = tuple(sorted(step.subset))
                trial = _trial_setup(s, bad, key, diffs, step.subset)
                shown = ", ".join(_shown(diffs[i], names).label for i in subset) or "none (GOOD)"
                again = sum(1 for t in trials if t.subset == subset)
                shown += f" (again: its trial {again + 1})" if again else ""
                progress.note(f"trial {len(trials) + 1}: {shown}")
                trial_dir = out_dir / "trials" / str(len(trials) + 1)
                try:
                    with trial.launcher(run_id_of(out_dir, digest)) as launcher:
                        for line in launcher.reap():
                            progress.note(line)
                        ctx = ProbeContext(launcher, s.checks, trial.client, progress,
                                           s.config.probe.runs, golden, Regress(s.config.regress),
                                           s.clock)  # fmt: skip
                        outcome = probe(candidate, trial_dir, ctx)
                    broken = _judges_nothing(golden.data) if golden.recorded else ""
                except BrokenGoodEnd as exc:
                    if flake == 0 or regolden:
                        raise
                    broken = str(exc)
                if broken and flake != 0 and regolden:
                    # recorded twice, judging nothing twice: GOOD's own answers, not a lie
                    raise BrokenGoodEnd(f"GOOD's golden, recorded again, still judges nothing: "
                                        f"{broken}")  # fmt: skip
                if broken and flake != 0:
                    # a start that lied while GOOD's golden was recorded would make it judge
                    # nothing (every setup good against it): GOOD is recorded once more
                    regolden = True
                    progress.note(f"GOOD's golden: {broken}; a start that lied? recording it again")
                    (out_dir / "golden.json").unlink(missing_ok=True)
                    if trial_dir.exists():
                        trial_dir.rename(_unused(trial_dir, REFUSED))
                    golden = s.golden_store(out_dir / "golden.json", candidate.commit,
                                            compare=False)  # fmt: skip
                    continue  # not journalled: the search asks for GOOD again
                journal.append("probe", subset=list(subset), outcome=outcome.to_json(),
                               commit=candidate.commit)  # fmt: skip
                trials.append(Trial(subset, outcome.verdict, outcome.reason, _failed(outcome)))
                outcomes.append(outcome)
                trials, step = _decide(trials, len(diffs), flake, confidence)
                progress.note(f"trial {len(trials)}: {outcome.verdict.value} {trials[-1].shown}")
        result = _result(candidate, diffs, trials, step, names, flake=flake,
                         confidence=confidence)  # fmt: skip
        for note in result.notes:
            progress.note(note)
        if isinstance(step, Minimal) and s.config.localize.enabled:
            smallest = _trial_setup(s, bad, key, diffs, frozenset(step.subset))
            try:
                located = localize_builds(s, candidate, candidate, out_dir, note=progress.note,
                                          bad_setup=smallest)  # fmt: skip
            except LocalizeError as exc:
                located = LocalizationDoc(good=candidate.commit, bad=candidate.commit,
                                          error=str(exc), line=f"not localised: {exc}")  # fmt: skip
            located = write_localization(out_dir, located, scrub)
            progress.note(located.line)
            result = replace(result, localization=located)
        asked = Asked(s.config_file, build, cs.good_file, cs.repo, str(out_dir.absolute()),
                      str((out_dir / "golden.json").absolute()), node_environment(),
                      cs.own_server, cs.candidates)  # fmt: skip
        good_probe, bad_probe = _decisive(result, outcomes, scrub)
        result = replace(result, good_probe=good_probe, bad_probe=bad_probe, asked=asked)
        doc = scrub.doc(_document(result, names))
        write_atomic(out_dir / "result.json", json.dumps(doc, indent=2) + "\n")
        write_atomic(out_dir / "report.md", scrub.text(_markdown(result, names)))
        write_atomic(out_dir / "report.html", scrub.text(_html(result, names)))
    return result


def _decisive(
    r: ConfigsResult, outcomes: list[ProbeOutcome], scrub: Scrub
) -> tuple[ProbeDoc | None, ProbeDoc | None]:
    """GOOD's latest trial that tested good and the smallest bad setup's latest that tested
    bad, as result.json holds a probe (secrets masked; a command by its variables)."""

    def latest(subset: tuple[int, ...], verdict: Verdict) -> ProbeDoc | None:
        for t, o in zip(reversed(r.trials), reversed(outcomes), strict=True):
            if t.subset == subset and o.verdict is verdict:
                doc = probe_doc(o, r.build.subject)
                return ProbeDoc.model_validate(scrub.doc(doc.model_dump(mode="json")))
        return None

    bad = latest(tuple(sorted(r.difference)), Verdict.BAD) if r.difference else None
    return latest((), Verdict.GOOD), bad


def _result(
    build: Candidate,
    diffs: list[Difference],
    trials: list[Trial],
    step: DeltaStep,
    secret: Collection[str],
    *,
    flake: float | None = 0.0,
    confidence: float = 0.99,
) -> ConfigsResult:
    known = known_of(trials)
    rate = 0.0 if flake == 0 else lie_rate(known, flake)
    everything = frozenset(range(len(diffs)))
    notes = tuple(_disagreeing(trials, diffs, secret))

    def said(status: str, message: str, found: tuple[int, ...] = ()) -> ConfigsResult:
        r = ConfigsResult(status, build, diffs, found, trials, message, rate=rate, notes=notes)
        if isinstance(step, Minimal) and flake != 0:
            r = replace(r, only=step.only, confidence=step.confidence,
                        retests=_retests(trials, diffs, step, secret))  # fmt: skip
        return r

    if isinstance(step, Minimal):
        labels = ", ".join(_shown(diffs[i], secret).label for i in step.subset)
        if step.unresolved:
            untested = f"{step.unresolved} trial(s) could not be tested: a smaller set may exist"
            return said("ambiguous", f"turns GOOD bad: {labels} ({untested})", step.subset)
        if step.unsure:
            below = (f"{step.unsure} setup(s) stayed below the confidence {confidence} after "
                     "their most trials: lying or flaky starts")  # fmt: skip
            return said("ambiguous", f"turns GOOD bad: {labels}? ({below})", step.subset)
        message = f"turns GOOD bad: {labels}"
        if step.confidence is not None:
            sure = f"{step.confidence:.3f} sure at a lie rate of {rate:.2f}"
            message += {
                True: f"; only these: BAD with only these reverted tests good ({sure})",
                False: f"; not only these: BAD with only these reverted is still bad, another "
                f"difference also turns GOOD bad ({sure})",
                None: f" ({sure}; BAD with only these reverted is not settled)",
            }[step.only]
        return said("found", message, step.subset)
    if isinstance(step, NotBad):
        if step.outcome is Outcome.GOOD:
            return said("not-bad", "BAD tests good at this build")
        return said("untestable", "BAD could not be tested" + _kept(known, everything))
    assert isinstance(step, GoodIsBad)
    if step.outcome is Outcome.BAD:
        return said(
            "good-is-bad", "GOOD tests bad at this build: the differences do not explain it"
        )
    return said("untestable", "GOOD could not be tested" + _kept(known, frozenset()))


def _kept(known: Mapping[frozenset[int], list[Outcome]], end: frozenset[int]) -> str:
    """Why an end that did start is untestable: its trials kept disagreeing."""
    outcomes = known.get(end, [])
    bad, good = outcomes.count(Outcome.BAD), outcomes.count(Outcome.GOOD)
    if not (bad and good):
        return ""
    return f": its {len(outcomes)} trials kept disagreeing ({bad} bad, {good} good)"


def _labels(subset: Collection[int], diffs: list[Difference], secret: Collection[str]) -> str:
    return ", ".join(_shown(diffs[i], secret).label for i in sorted(subset)) or "none (GOOD)"


def _retests(
    trials: list[Trial], diffs: list[Difference], step: Minimal, secret: Collection[str]
) -> tuple[Retest, ...]:
    """The setups the answer was re-tested on, with their trials. Pure."""
    answer = frozenset(step.subset)
    out = []
    for claim in step.retests:
        if claim.subset == answer:
            setup = "GOOD with only the set applied"
        elif claim.subset == frozenset(range(len(diffs))) - answer:
            setup = "BAD with only the set reverted"
        else:
            (left,) = answer - claim.subset
            setup = f"GOOD with the set but {_shown(diffs[left], secret).label}"
        numbers = tuple(n for n, t in enumerate(trials, 1) if frozenset(t.subset) == claim.subset)
        out.append(Retest(tuple(sorted(claim.subset)), setup, claim.expect, numbers, claim.path,
                          claim.belief))  # fmt: skip
    return tuple(out)


def _disagreeing(
    trials: list[Trial], diffs: list[Difference], secret: Collection[str]
) -> list[str]:
    """A note for each trial whose verdict is its setup's minority (a start that lied, most
    likely). Pure."""
    notes = []
    for subset, outcomes in known_of(trials).items():
        bad, good = outcomes.count(Outcome.BAD), outcomes.count(Outcome.GOOD)
        if not bad or not good:
            continue
        numbers = [n for n, t in enumerate(trials, 1) if frozenset(t.subset) == subset]
        for n in numbers:
            mine = trials[n - 1].counted
            if mine is Outcome.UNRESOLVED:
                continue
            others = good if mine is Outcome.BAD else bad
            same = bad if mine is Outcome.BAD else good
            if same > others:
                continue
            other = "good" if mine is Outcome.BAD else "bad"
            notes.append(
                f"trial {n} ({_labels(subset, diffs, secret)}) read {mine.value} where "
                f"{others} other trial(s) of that setup read {other}"
                + (": a start that lied" if others > same else ": a tie, neither counted sure")
            )
    return sorted(notes, key=lambda s: int(s.split()[1]))


def _shown(d: Difference, secret: Collection[str]) -> Difference:
    """The difference as output shows it: a variable secret by its name, or a flag named
    like a secret, shows no value."""
    if d.kind == "env" and d.name in secret:
        return Difference(d.kind, d.name, None if d.good is None else ("***",),
                          None if d.bad is None else ("***",))  # fmt: skip
    if d.kind == "flag" and secret_flag(d.name):

        def masked(words: tuple[str, ...] | None) -> tuple[str, ...] | None:
            if words is None:
                return None
            head, eq, _ = words[0].partition("=")
            return (f"{head}=***",) if eq else (head, *["***"] * (len(words) > 1))

        return Difference(d.kind, d.name, masked(d.good), masked(d.bad))
    return d


def _document(r: ConfigsResult, secret: Collection[str]) -> dict[str, Any]:
    def shown(d: Difference) -> dict[str, Any]:
        d = _shown(d, secret)
        return {"kind": d.kind, "name": d.name, "good": d.good, "bad": d.bad, "label": d.label}

    return {
        "kind": "configs",
        "status": r.status,
        "message": r.message,
        "build": r.build.to_json(),
        "differences": [shown(d) for d in r.differences],
        "difference": [shown(r.differences[i]) for i in r.difference],
        "localization": r.localization.model_dump(mode="json") if r.localization else None,
        "only": r.only,
        "lie_rate": r.rate,
        "confidence": r.confidence,
        "retests": [
            {
                "setup": x.setup,
                "applied": [shown(r.differences[i])["label"] for i in x.applied],
                "expect": None if x.expect is None else x.expect.value,
                "trials": list(x.trials),
                "verdicts": [r.trials[n - 1].counted.value for n in x.trials],
                "path_trials": x.path,
                "belief": x.belief,
            }
            for x in r.retests
        ],
        "notes": list(r.notes),
        "build_ref": r.asked.build if r.asked else None,
        "good_server": (r.asked.good_file or None) if r.asked else None,
        "decisive": [p.model_dump(mode="json") for p in (r.good_probe, r.bad_probe) if p],
        "trials": [
            {
                "applied": [shown(r.differences[i])["label"] for i in t.subset],
                "verdict": t.verdict.value,
                "counted": t.counted.value,
                "reason": t.shown,
            }
            for t in r.trials
        ],
    }


GOOD_LABEL, BAD_LABEL = "GOOD", "smallest bad setup"
"""What the report calls the two setups its evidence compares."""


def _sides(r: ConfigsResult) -> Sides | None:
    """GOOD's and the smallest bad setup's builds, side by side."""
    good, bad = r.good_probe, r.bad_probe
    if good is None or bad is None:
        return None
    return Sides(old=Build.of(good.commit, good.verdict, good.fingerprint),
                 new=Build.of(bad.commit, bad.verdict, bad.fingerprint),
                 differences=fingerprint_differences(good.fingerprint,
                                                     bad.fingerprint))  # fmt: skip


def _good_said(r: ConfigsResult) -> str:
    """Where GOOD's server came from; the config's own `server:` said unused where it was."""
    if r.asked is None or not r.asked.good_file:
        return "GOOD is the config's own `server:`"
    said = f"GOOD is the server of {esc.code(r.asked.good_file)} (--good-server)"
    return said + (": **the config's own `server:` is not used**" if r.asked.own_server else "")


def _nonfinite(r: ConfigsResult) -> list[str]:
    """NaN or Inf on either side: the logprob positions each setup's logprobs check found,
    and the tensors the localisation counted."""
    rows = []
    for label, p in ((GOOD_LABEL, r.good_probe), (BAD_LABEL, r.bad_probe)):
        lp = next((c.details for c in p.checks if isinstance(c.details, LogprobsDetails)),
                  None) if p else None  # fmt: skip
        if lp is not None:
            rows.append(f"- {label}: {lp.metrics.non_finite or 0:,} logprob position(s) NaN "
                        "or Inf")  # fmt: skip
        elif p is not None:
            rows.append(f"- {label}: not counted (no logprobs check ran)")
    found = r.localization
    if found is not None and not found.error:
        rows += [f"- {line}" for line in md.nonfinite_lines(found, GOOD_LABEL, BAD_LABEL) if line]
    return ["## NaN / Inf", "", *rows, ""] if rows else []


def _bad_words(r: ConfigsResult, secret: Collection[str]) -> list[str] | None:
    """The smallest set as --bad-arg / --bad-env words (a secret variable by its name, the
    reader's own); None where one cannot be said so (a flag or variable BAD removes, a
    flag named like a secret)."""
    words: list[str] = []
    for i in r.difference:
        d = r.differences[i]
        if d.bad is None or (d.kind == "flag" and secret_flag(d.name)):
            return None
        if d.kind == "env":
            value = f'"${d.name}"' if d.name in secret else esc.shell([" ".join(d.bad)])
            words += ["--bad-env", esc.shell([f"{d.name}="]) + value]
        else:
            words += ["--bad-arg", esc.shell([esc.shell(d.bad)])]
    return words


def _reproduce(r: ConfigsResult, secret: Collection[str]) -> list[str]:
    """Lines that run as printed from any folder: GOOD checked against its golden (where it
    is the config's own server: `check` runs the config's), and `configs` again with the
    smallest set as BAD, which finds that set (a fresh --out)."""
    a = r.asked
    if a is None or r.status != "found":
        return []
    repo = ["--repo", a.repo] if a.repo else []
    lines = []
    if not a.good_file and a.candidates:
        check = ["llm-bisect", "check", a.config, "--candidate", a.build, "--golden", a.golden,
                 *repo]  # fmt: skip
        lines.append(f"{esc.shell(check)}   # expect good (GOOD): exit 0")
    words = _bad_words(r, secret)
    if words is not None:
        good = ["--good-server", a.good_file] if a.good_file else []
        head = esc.shell(["llm-bisect", "configs", a.config, "--build", a.build, *good])
        tail = esc.shell(["--out", f"{a.out}-smallest", *repo])
        said = "found, the smallest bad setup turns GOOD bad"
        lines.append(f"{head} {' '.join(words)} {tail}   # expect {said}: exit 0")
    if not lines:
        return []
    return ["## Reproduce", "", *esc.fence("\n".join(lines), "bash"), ""]


def _markdown(r: ConfigsResult, secret: Collection[str]) -> str:
    shown = replace(r, differences=[_shown(d, secret) for d in r.differences])
    sides = _sides(shown)
    lines = [
        f"# llm-bisect configs: {esc.text(r.status)}",
        "",
        f"Build {esc.code(r.build.short)}"
        + "".join(f" {esc.text(x)}" for x in (r.build.subject, r.build.artifact) if x)
        + f": {esc.text(r.message)}",
        "",
        f"- {_good_said(r)}",
    ]
    if sides is not None:
        lines += md.glance(sides.old, sides.new, GOOD_LABEL, BAD_LABEL)
    lines.append("")
    r = shown
    if r.difference:
        lines += ["## The smallest difference that turns GOOD bad", ""]
        lines += [f"- {esc.code(r.differences[i].label)}" for i in r.difference]
        lines.append("")
    lines += _reproduce(r, secret)
    if r.bad_probe is not None:  # no Reproduce block shows its server: the curl's block does
        lines += md.without_llm_bisect(r.bad_probe, BAD_LABEL, command_above=False)
    lines += ["## Every difference of BAD from GOOD", "", "| # | BAD sets | GOOD sets |",
              "|---|---|---|"]  # fmt: skip
    for n, d in enumerate(r.differences, 1):
        good = "(unset)" if d.good is None else " ".join(d.good)
        lines.append(f"| {n} | {esc.code(d.label, table=True)} | {esc.code(good, table=True)} |")
    lines.append("")
    if r.localization is not None:
        lines += ["## Where in the model (GOOD against the smallest bad setup)", "",
                  esc.text(r.localization.line), ""]  # fmt: skip
        lines += [] if r.localization.error else md.call_table(r.localization)
    lines += _nonfinite(r)
    if r.good_probe is not None and r.bad_probe is not None:
        lines += md.evidence(r.bad_probe, r.good_probe, BAD_LABEL, GOOD_LABEL)
    if r.asked is not None and r.asked.environment:
        lines += md.environment_lines(Context(environment=dict(r.asked.environment)))
    if sides is not None:
        lines += md.builds_compared(sides, GOOD_LABEL, BAD_LABEL)
    if r.retests:
        sure = "not reached" if r.confidence is None else f"{r.confidence:.4f}"
        lines += ["", "## The answer re-tested both ways", "",
                  f"Each trial a new server start, weighed at a lie rate of {r.rate:.3f}; "
                  f"together the answer is {sure} sure (a trial ddmin's path chose on, "
                  "`(path)`, is no re-test).", "",
                  "| setup | applied to GOOD | needs | trials | verdicts | sure |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for x in r.retests:
            applied = ", ".join(r.differences[i].label for i in x.applied) or "none (GOOD)"
            needs = "either" if x.expect is None else x.expect.value
            path = ["(path) " * (i < x.path) for i in range(len(x.trials))]
            numbers = ", ".join(f"{p}{n}" for p, n in zip(path, x.trials, strict=True))
            verdicts = ", ".join(r.trials[n - 1].counted.value for n in x.trials)
            lines.append(f"| {esc.cell(x.setup)} | {esc.cell(applied)} | {needs} | {numbers} "
                         f"| {verdicts} | {x.belief:.4f} |")  # fmt: skip
    if r.notes:
        lines += ["", "## Trials that disagreed", ""]
        lines += [f"- {esc.text(note)}" for note in r.notes]
    lines += ["", "## Trials", "", "| # | applied to GOOD | verdict | counted | why |",
              "|---|---|---|---|---|"]  # fmt: skip
    for n, t in enumerate(r.trials, 1):
        applied = ", ".join(r.differences[i].label for i in t.subset) or "none (GOOD)"
        lines.append(f"| {n} | {esc.cell(applied)} | {t.verdict.value} | {t.counted.value} "
                     f"| {esc.cell(t.shown)} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _html(r: ConfigsResult, secret: Collection[str]) -> str:
    """report.html as the run's: the smallest bad setup's |Δlogprob| against GOOD's golden,
    and the two setups' trials."""
    labels = ", ".join(_shown(r.differences[i], secret).label for i in r.difference)
    summary = (f'<div class="summary"><b>{esc.html_text(r.status)}</b>: '
               f"{esc.html_text(r.message)}<br>build <code>{r.build.short}</code> "
               f"{esc.html_text(r.build.subject)}<br>smallest bad setup: "
               f"{esc.html_text(labels or 'none')}</div>")  # fmt: skip
    plots = [
        ("logprobs", logprob_figure(r.bad_probe), "no logprobs check on the smallest bad setup")
    ]
    probes = [p for p in (r.good_probe, r.bad_probe) if p is not None]
    return page(f"configs {r.status} {r.build.short}", summary, plots, table(probes))
