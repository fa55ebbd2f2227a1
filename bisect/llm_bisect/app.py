"""Wiring: config in, seams built, runner called. The CLI's commands call these.

This is where the caller's environment, the clock and real I/O are chosen;
everything below takes them as arguments.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import collectenv
from .builds import Builder, ImageStrategy, ImageTarget, Strategy
from .builds.cache import BuildCache, unusable
from .builds.command import CommandStrategy
from .builds.overlay import OverlayStrategy, installed_package
from .builds.wheel import WheelStrategy, find_uv
from .checks import Check
from .checks.build import build_checks
from .checks.golden import Calibration as GoldenCalibration
from .checks.golden import Golden, GoldenStore, Identity
from .checks.golden import load as golden_load
from .checks.golden import record as golden_record
from .checks.golden import save as golden_save
from .checks.golden import stale as golden_stale
from .checks.golden import thresholds as golden_thresholds
from .checks.golden import warnings as golden_warnings
from .checks.vllm_eval import expand as expand_vllm_evals
from .client import OpenAIClient
from .config import CommandStrategy as CommandStrategyConfig
from .config import (
    Config,
    DockerServerConfig,
    SlurmServerConfig,
    caller_secret_names,
    check_digest,
    config_digest,
    expand_env,
    expand_paths,
    expand_template,
    expand_value,
    fill,
    load_config,
    secret_names,
    server_digest,
)
from .config import ImageStrategy as ImageStrategyConfig
from .config import OverlayStrategy as OverlayStrategyConfig
from .config import WheelStrategy as WheelStrategyConfig
from .environment import gpu_ids, node_environment
from .errors import (
    ConfigError,
    EndpointError,
    JournalError,
    LaunchError,
    LocalizeError,
    RequestRejected,
)
from .fingerprint import differences as fingerprint_differences
from .journal import Span
from .launchers import Instrument, Launcher, Server
from .launchers.devices import EXAMPLE, cuda_visible, slot_devices
from .launchers.process import ProcessLauncher
from .localize import localize as localize_results
from .model import Candidate, CheckResult, ProbeOutcome, Regress, Verdict
from .outdir import hold, prepare
from .probe import ProbeContext, Progress, probe, served_facts, startup_facts
from .redact import Scrub, url_credentials
from .registry import parse_image_ref
from .report.documents import (
    Bisection,
    CandidateDoc,
    Context,
    GateDocument,
    GoldenRef,
    ResultDocument,
    Sides,
)
from .report.gate import (
    DECISION_OF,
    EXIT_OF,
    HEADLINE,
    render_gate_html,
    render_gate_markdown,
    render_junit,
)
from .report.links import web_url
from .report.result import probe_doc
from .runner import (
    RunResult,
    run,
    write_atomic,
    write_outputs,
    write_probe,
)
from .search import Mode, Plan, Status, build_plan
from .sources.git import GitSource
from .sources.images import WHERE, commit_of_image, env_map


@dataclass(frozen=True)
class Setup:
    """A validated config with everything resolved; nothing started yet."""

    config: Config
    base_dir: Path
    source: GitSource
    checks: list[Check]
    env: dict[str, str]
    """The config's server.env, expanded."""
    environ: Mapping[str, str]
    """The caller's environment (a process server inherits it)."""
    secret_names: list[str]
    """Variables whose values a server log must not show: the config's and the caller's."""
    scrub: Scrub = field(default_factory=Scrub)
    """Every secret value (env, registry credentials, `docker login`), masked in all output."""
    logins: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """Registry host → what `docker login` stored for it."""
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    report: Callable[[str], None] = lambda _: None
    builder: Builder | None = None
    """How candidates are built (`build:`); None: the launcher starts them as they are."""
    config_file: str = ""
    """The config's absolute path (for the report's reproduce commands)."""
    repo: str = ""
    """The clone `--repo` named (absolute), for the reproduce commands; "": candidates.repo."""
    devices: list[tuple[str, ...] | None] = field(default_factory=list)
    """Per slot, the GPUs its server alone uses (launchers/devices.py); None: as configured."""

    def client(self, server: Server) -> OpenAIClient:
        return OpenAIClient(
            server.base_url,
            model=self.config.server.model,
            timeout=self.config.server.request_timeout,
            max_reply_bytes=int(self.config.server.max_reply_mb * 2**20),
        )

    @contextmanager
    def launcher(self, run_id: str) -> Iterator[Launcher]:
        """The config's launcher, closed (background pulls ended) on the way out."""
        server = self.config.server
        made: Launcher
        if isinstance(server, DockerServerConfig):
            from .launchers.docker import DockerLauncher
            from .launchers.spread import Spread

            engines: list[DockerLauncher] = []
            try:
                hosts: list[str | None] = [*server.docker_hosts] or [None]
                for engine in hosts:
                    engines.append(
                        DockerLauncher(
                            server,
                            env=self.env,
                            secret_names=self.secret_names,
                            base_dir=self.base_dir,
                            run_id=run_id,
                            engine=engine,
                            builder=self.builder,
                            logins=self.logins,
                            report=self.report,
                            slot_devices=self.devices,
                            clock=self.clock,
                            sleep=self.sleep,
                        )
                    )
            except BaseException:
                for started in engines:
                    started.close()
                raise
            made = engines[0] if len(engines) == 1 else Spread(engines)
        elif isinstance(server, SlurmServerConfig):
            from .launchers.slurm import SlurmLauncher

            made = SlurmLauncher(
                server,
                env=self.env,
                base_env=self.environ,
                secret_names=self.secret_names,
                run_id=run_id,
                cwd=self.base_dir / server.cwd if server.cwd else self.base_dir,
                builder=self.builder,
                report=self.report,
                clock=self.clock,
                sleep=self.sleep,
            )
        else:
            cwd = self.base_dir / server.cwd if server.cwd else self.base_dir
            made = ProcessLauncher(
                server.command,
                env=self.env,
                base_env=self.environ,
                secret_names=self.secret_names,
                cwd=cwd,
                ready_timeout=server.ready_timeout,
                builder=self.builder,
                collect_env=server.collect_env,
                slot_devices=self.devices,
                clock=self.clock,
                sleep=self.sleep,
            )
        try:
            yield made
        finally:
            made.close()

    def golden_path(self) -> Path | None:
        """The golden the config names, relative to the config's folder."""
        return self.base_dir / self.config.golden if self.config.golden else None

    def golden_identity(self) -> Identity:
        """What a golden recorded under this config says it was made with (the model it
        served is added when it is recorded)."""
        config = self.config
        return Identity(
            model=config.server.model,
            server=server_digest(config.server),
            checks={c.type: check_digest(c) for c in config.checks},
            repository=(config.candidates.url or web_url(self.source.remote_url())).rstrip("/"),
        )

    def golden_store(
        self,
        path: Path,
        record_on: str | None = None,
        *,
        of: str | None = None,
        compare: bool = True,
    ) -> GoldenStore:
        """The golden at `path` (GoldenStore) with this config's checks, scrub and identity: a
        golden of another setup (unless not `compare`) or repository is refused here, before
        anything starts."""
        return GoldenStore(
            path,
            self.checks,
            record_on,
            of=of,
            scrub=self.scrub,
            identity=self.golden_identity(),
            compare=compare,
            known=self.knows,
        )

    def knows(self, commit: str) -> bool:
        """Whether a commit is in candidates.repo."""
        try:
            self.source.resolve(commit, "golden")
        except ConfigError:
            return False
        return True

    def resolve(self, ref: str, key: str) -> Candidate:
        """A git ref, or (docker launcher) an image reference whose metadata names a commit."""
        try:
            return self.source.resolve(ref, key)
        except ConfigError:
            if not isinstance(self.config.server, DockerServerConfig):
                raise
        return resolve_image_end(self, ref, key)


def resolve_image_end(s: Setup, ref: str, key: str) -> Candidate:
    """The candidate an image names: its commit from labels, env, tag or version."""
    from .launchers.docker import DockerLauncher
    from .launchers.spread import Spread

    assert isinstance(s.config.server, DockerServerConfig)
    with s.launcher("resolve") as made:
        launcher = made.launchers[0] if isinstance(made, Spread) else made
        assert isinstance(launcher, DockerLauncher)
        try:
            labels, env = launcher.image_metadata(ref)
        except LaunchError as exc:
            raise ConfigError(f"{key}: no such ref {ref!r}, and no image found: {exc}") from None
    if labels is None:
        raise ConfigError(f"{key}: no such ref or image {ref!r}")
    try:
        tag = parse_image_ref(ref).tag
    except ValueError:
        tag = None
    found = commit_of_image(tag, labels, env_map(env))
    if found is None:
        raise ConfigError(f"{key}: image {ref!r} names no commit (looked at {WHERE})")
    commit, where = found
    try:
        candidate = s.source.resolve(commit, key)
    except ConfigError:
        raise ConfigError(
            f"{key}: image {ref!r} is commit {commit} ({where}), not in candidates.repo"
        ) from None
    return replace(candidate, artifact=ref)


def setup(
    config_path: Path,
    environ: Mapping[str, str],
    *,
    repo: Path | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    report: Callable[[str], None] = lambda _: None,
    eval_config: Path | None = None,
) -> Setup:
    """Load and validate a config and open its repository (`repo`, else candidates.repo);
    nothing is started. `eval_config`: a vLLM eval config file judged as one more check."""
    config = expand_paths(load_config(config_path), environ, repo_given=repo is not None)
    base_dir = config_path.resolve().parent
    config = expand_vllm_evals(config, base_dir, eval_config)
    repo_dir = repo.absolute() if repo is not None else base_dir / config.candidates.repo
    source = GitSource(repo_dir, "--repo" if repo is not None else "candidates.repo")
    env = expand_env(config.server.env, environ)
    server = config.server
    names = sorted({*secret_names(server.env), *caller_secret_names(environ)})
    secrets = [{**environ, **env}[n] for n in names]
    for value in {*env.values(), *environ.values()}:  # a login in a URL under any name
        secrets += url_credentials(value)
    for i, strategy in enumerate(config.build.strategies if config.build else []):
        if isinstance(strategy, WheelStrategyConfig):  # a login in the index's URL
            secrets += url_credentials(wheel_index(strategy, environ, i))
    logins: dict[str, tuple[str, str]] = {}
    if isinstance(server, DockerServerConfig):
        if server.registry.password:
            password = expand_value(server.registry.password, environ, "server.registry.password")
            registry = server.registry.model_copy(update={"password": password})
            server = server.model_copy(update={"registry": registry})
            config = config.model_copy(update={"server": server})
            secrets.append(password)
        from .launchers.docker import docker_logins

        logins = docker_logins(_registry_hosts(config))
        secrets += [password for _, password in logins.values()]
    else:
        cwd = base_dir / server.cwd if server.cwd else base_dir
        if server.cwd and not cwd.is_dir():
            raise ConfigError(f"server.cwd: not a folder '{server.cwd}'")
        if isinstance(server, SlurmServerConfig):  # the command runs on the cluster's nodes
            for tool in ("sbatch", "squeue", "scontrol", "scancel"):
                if shutil.which(tool, path={**environ, **env}.get("PATH", os.defpath)) is None:
                    raise ConfigError(f"server.launcher: slurm, and '{tool}' is not on PATH")
        else:
            _check_executable(server.command[0], cwd, {**environ, **env})
    devices = slot_devices_of(config, env, environ)
    if config.golden and (base_dir / config.golden).exists():
        golden_load(base_dir / config.golden)  # its shape, before anything starts
    made = Setup(
        config,
        base_dir,
        source,
        build_checks(config.checks, base_dir),
        env,
        environ,
        names,
        Scrub().with_secrets(secrets),
        logins,
        clock,
        sleep,
        report,
    )
    builder = _builder(
        config,
        base_dir,
        source,
        {**environ, **env},
        names,
        lambda ref, key: made.resolve(ref, key).commit,
    )
    return replace(
        made,
        builder=builder,
        config_file=str(config_path.absolute()),
        repo=str(repo_dir) if repo is not None else "",
        devices=devices,
    )


def slot_devices_of(
    config: Config,
    env: Mapping[str, str],
    environ: Mapping[str, str],
    gpus: Callable[[], list[str] | None] = gpu_ids,
) -> list[tuple[str, ...] | None]:
    """Per slot, the GPUs it alone uses (launchers/devices.py); ConfigError where `parallel`
    would put several servers on the same GPUs. `gpus`: the node's, asked only when needed."""
    server, k = config.server, config.parallel
    if isinstance(server, SlurmServerConfig):
        return []  # each probe is its own allocation
    if isinstance(server, DockerServerConfig):
        hosts = max(1, len(server.docker_hosts))
        shared = server.gpus == "all" or isinstance(server.gpus, int)
        if server.slot_gpus is None and shared and k > hosts:
            raise ConfigError(
                f"parallel: {k} puts {math.ceil(k / hosts)} containers on one Docker engine, "
                f"and server.gpus: {server.gpus} gives each of them the same GPUs: give each "
                f"slot its own in server.slot_gpus ({EXAMPLE})"
            )
        pool = list(server.gpus) if isinstance(server.gpus, list) else None
        return slot_devices(k, server.slot_gpus, pool, hosts=hosts, where="server.gpus")
    pool, where = cuda_visible(env.get("CUDA_VISIBLE_DEVICES")), "server.env.CUDA_VISIBLE_DEVICES"
    if pool is None:
        pool, where = cuda_visible(environ.get("CUDA_VISIBLE_DEVICES")), "CUDA_VISIBLE_DEVICES"
    if pool is None and k > 1 and server.slot_gpus is None:
        pool, where = gpus(), "the GPUs nvidia-smi lists"
    return slot_devices(k, server.slot_gpus, pool, where=where)


def wheel_index(cfg: WheelStrategyConfig, environ: Mapping[str, str], i: int) -> str:
    """A wheel strategy's index template with `${VAR}` expanded (a login, often)."""
    return expand_template(cfg.index, environ, f"build.strategies.{i}.index")


def _builder(
    config: Config,
    base_dir: Path,
    source: GitSource,
    environ: Mapping[str, str],
    secret_names: list[str],
    resolve: Callable[[str, str], str],
) -> Builder | None:
    """The config's build strategies over its cache; every path and ref checked now
    (`resolve`: a ref, or an image that names its commit, to a commit)."""
    if config.build is None:
        return None  # the launcher starts candidates as they are (docker: the image template)
    strategies: list[Strategy] = []
    targets: dict[int, ImageTarget] = {}
    for i, cfg in enumerate(config.build.strategies):
        key = f"build.strategies.{i}"
        if isinstance(cfg, ImageStrategyConfig):
            strategies.append(ImageStrategy())
        elif isinstance(cfg, OverlayStrategyConfig) and cfg.base == "nearest":
            docker = isinstance(config.server, DockerServerConfig)
            strategies.append(
                OverlayStrategy(
                    source,
                    python="",
                    package_dir=None,
                    package=cfg.package,
                    base_commit=None,
                    compiled=cfg.patterns(),
                    stage=docker,
                )
            )
            if docker:  # the base image is the base's own (images.py)
                targets[i] = ImageTarget("", cfg.python or "python3", cfg.package)
        elif isinstance(cfg, OverlayStrategyConfig) and cfg.image is not None:
            strategies.append(
                OverlayStrategy(
                    source,
                    python="",
                    package_dir=None,
                    package=cfg.package,
                    base_commit=resolve(cfg.base_commit or cfg.image, f"{key}.base_commit"),
                    compiled=cfg.patterns(),
                    stage=True,
                )
            )
            target = ImageTarget(cfg.image, cfg.python or "python3", cfg.package)
            targets[i] = target
        elif isinstance(cfg, WheelStrategyConfig) and cfg.image is not None:
            strategies.append(
                WheelStrategy(
                    index=wheel_index(cfg, environ, i),
                    package=cfg.package,
                    python="",
                    uv="",
                    download_only=True,
                    env=environ,
                    secret_names=secret_names,
                )
            )
            target = ImageTarget(cfg.image, cfg.python or "python3", cfg.package)
            targets[i] = target
        elif isinstance(cfg, OverlayStrategyConfig):
            assert cfg.venv is not None
            venv = base_dir / Path(cfg.venv).expanduser()
            python = venv / "bin" / "python"
            if not python.exists():
                raise ConfigError(f"{key}.venv: no venv at '{cfg.venv}' (no bin/python)")
            strategies.append(
                OverlayStrategy(
                    source,
                    python=str(python),
                    package_dir=installed_package(str(python), cfg.package),
                    package=cfg.package,
                    base_commit=resolve(cfg.base_commit or "", f"{key}.base_commit"),
                    compiled=cfg.patterns(),
                )
            )
        elif isinstance(cfg, WheelStrategyConfig):
            base = base_dir / Path(cfg.base_venv).expanduser() if cfg.base_venv else None
            if base is not None and not (base / "bin" / "python").exists():
                raise ConfigError(f"{key}.base_venv: no venv at '{cfg.base_venv}' (no bin/python)")
            interpreter = cfg.python or (str(base / "bin" / "python") if base else sys.executable)
            strategies.append(
                WheelStrategy(
                    index=wheel_index(cfg, environ, i),
                    package=cfg.package,
                    python=interpreter,
                    uv=find_uv(),
                    base_venv=base,
                    system_site_packages=cfg.system_site_packages,
                    env=environ,
                    secret_names=secret_names,
                )
            )
        elif isinstance(cfg, CommandStrategyConfig):
            strategies.append(
                CommandStrategy(
                    cfg.run,
                    cwd=base_dir,
                    timeout=cfg.timeout,
                    env=environ,
                    secret_names=secret_names,
                )
            )
    root = base_dir / Path(config.build.cache.dir).expanduser()
    problem = unusable(root)
    if problem is not None:
        raise ConfigError(f"build.cache.dir: {problem}")
    budget = int(config.build.cache.disk_budget_gb * 1e9)
    return Builder(strategies, BuildCache(root, budget), targets)


def _registry_hosts(config: Config) -> list[str]:
    """The registries a docker config's images come from: the template's, and image ends'."""
    assert isinstance(config.server, DockerServerConfig)
    filled = fill(config.server.image, {"commit": "0" * 40, "short": "0" * 12})
    hosts = []
    for ref in (filled, config.candidates.good, config.candidates.bad):
        with suppress(ValueError):
            hosts.append(parse_image_ref(ref).registry)
    return hosts


def _check_executable(program: str, cwd: Path, env: Mapping[str, str]) -> None:
    """server.command's program exists and can run (before anything starts)."""
    if "{" in program:
        return  # a placeholder: known per candidate only
    if os.sep in program:
        path = cwd / Path(program).expanduser()
        if not path.is_file() or not os.access(path, os.X_OK):
            raise ConfigError(f"server.command.0: no executable file '{program}'")
    elif shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        raise ConfigError(f"server.command.0: '{program}' is not on PATH")


def with_ends(config: Config, good: str | None, bad: str | None) -> Config:
    """The config with --good / --bad applied."""
    if good is None and bad is None:
        return config
    ends = config.candidates.model_copy(
        update={k: v for k, v in (("good", good), ("bad", bad)) if v is not None}
    )
    return config.model_copy(update={"candidates": ends})


def plan_of(s: Setup, good: str | None, bad: str | None, find_fix: bool) -> tuple[Config, Plan]:
    config = with_ends(s.config, good, bad)
    mode = Mode.FIX if find_fix else Mode.REGRESSION
    plan = build_plan(
        s.source, config.candidates.good, config.candidates.bad, mode, resolve=s.resolve
    )
    if s.builder is not None:  # route facts for the whole range, read as routes are asked for
        s.builder.survey(plan.candidates)
    return config, plan


def run_id_of(out_dir: Path, digest: str) -> str:
    """Stable for one output folder and config, so a resumed run finds its orphans."""
    return hashlib.sha256(f"{out_dir.resolve()}\0{digest}".encode()).hexdigest()[:12]


def run_context(s: Setup, config: Config) -> dict[str, Any]:
    """How a run was asked for and where it runs (documents.Context), for its report."""
    return {
        "good_ref": config.candidates.good,
        "bad_ref": config.candidates.bad,
        "config": s.config_file,
        "repo": s.repo,
        "repo_url": (config.candidates.url or web_url(s.source.remote_url())).rstrip("/"),
        "environment": node_environment(),
    }


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
                context={**run_context(s, config), "golden": str(judged_by)},
                given=given,
                parallel=config.parallel,
            )
        note = progress.note if progress is not None else (lambda _: None)
        known = {c.commit: c for c in (*plan.candidates, plan.good, plan.bad)}
        found = localize_after_run(s, done.result, out_dir, note, known)
        if found is not None:
            note(found["line"])
            done.result = write_outputs(out_dir, {**done.result, "localization": found}, s.scrub)
        return done


def golden_file_of(s: Setup, given: Path | None) -> Path:
    """The golden file a command uses: given, else the config's, else ./golden.json."""
    return given or s.golden_path() or Path("golden.json")


def check_one(
    s: Setup, ref: str, out_dir: Path, progress: Progress, golden_file: Path | None = None
) -> tuple[Candidate, ProbeOutcome]:
    """Probe one candidate (the `check` command)."""
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
        )
        outcome = probe(candidate, out_dir / "probes" / candidate.short, ctx)
        write_probe(out_dir, outcome, s.scrub)
    progress.finished(candidate, outcome)
    return candidate, outcome


@contextmanager
def serving(
    s: Setup,
    candidate: Candidate,
    out_dir: Path,
    run_id: str,
    facts: dict[str, Any] | None = None,
) -> Iterator[OpenAIClient]:
    """One ready server for a candidate (golden, calibrate); untestable is an error here.
    `facts`, when given, is filled with the build's fingerprint once the server stopped."""
    probe_dir = out_dir / "probes" / candidate.short
    with hold(out_dir), s.launcher(run_id) as launcher:
        for line in launcher.reap():
            s.report(line)
        collectenv.clear(probe_dir)
        with launcher.launch(candidate, probe_dir) as server:
            try:
                server.wait_ready()
            except LaunchError as exc:
                tail = f"\n{exc.log_tail}" if exc.log_tail else ""
                raise LaunchError(f"{candidate.short} could not be tested: {exc}{tail}") from None
            with s.client(server) as api:
                yield api
                if facts is not None:
                    facts.update(served_facts(api, server))
    if facts is not None:
        facts.update(startup_facts(probe_dir))


def record_golden(s: Setup, ref: str, path: Path, out_dir: Path) -> Golden:
    """The `golden` command: record every check's reference from one (good) build."""
    candidate = s.resolve(ref, "--candidate")
    prepare(path.parent, "--output")
    facts: dict[str, Any] = {}
    with serving(s, candidate, out_dir, run_id_of(out_dir, "golden"), facts) as api:
        data = golden_record(api, s.checks, candidate.commit, s.golden_identity())
    data = data.model_copy(update={"fingerprint": facts})
    golden_save(path, data, s.scrub)
    return data


@dataclass(frozen=True)
class Reaped:
    """What `reap` did."""

    looked: list[str]
    """Where it looked: the Docker engine, the Slurm queue, a config's launcher."""
    removed: list[str]
    """One line per server removed: what it was and whose."""
    failed: list[str]
    """Places it could not look at, and why."""


def reap_servers(s: Setup | None, environ: Mapping[str, str]) -> Reaped:
    """The `reap` command: remove the servers of killed llm-bisect processes (owner gone)
    from the config's launcher, or without one from this node's Docker engine and Slurm
    queue (where there is one). A live process's servers are never touched."""
    if s is not None:
        kind = s.config.server.launcher
        with s.launcher("reap") as launcher:
            return Reaped([f"the {kind} launcher of {s.config_file}"], launcher.reap(), [])
    looked, removed, failed = [], [], []
    import docker
    import docker.errors

    from .launchers.docker import reap_engine
    from .launchers.slurm import Slurm, reap_queue

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException:
        pass  # no engine on this node: nothing of ours there
    else:
        looked.append("the Docker engine")
        try:
            removed += reap_engine(client)
        except LaunchError as exc:
            failed.append(str(exc))
    if shutil.which("squeue", path=environ.get("PATH", os.defpath)) is not None:
        looked.append("the Slurm queue")
        try:
            removed += reap_queue(Slurm(environ))
        except LaunchError as exc:
            failed.append(str(exc))
    return Reaped(looked, removed, failed)


@dataclass(frozen=True)
class Calibration:
    """What `calibrate` found."""

    thresholds: dict[str, Any]
    """The thresholds now in force, and where each came from."""
    runs: int
    flagged: int
    """Good-vs-good runs in which a golden check failed (by the thresholds in force then)."""


def calibrate(
    s: Setup, ref: str, path: Path, out_dir: Path, runs: int, restarts: int
) -> Calibration:
    """The `calibrate` command: the good build's checks against its own golden, `runs` times per
    server start, over 1 + `restarts` starts; the spread becomes the default thresholds."""
    candidate = s.resolve(ref, "--candidate")
    prepare(path.parent, "--output")
    store = s.golden_store(path, record_on=candidate.commit, of=candidate.commit)
    results: dict[str, list[CheckResult]] = {c.name: [] for c in s.checks}
    flagged = 0
    for start in range(1 + restarts):
        facts: dict[str, Any] = {}
        run_id = run_id_of(out_dir, f"calibrate-{start}")
        with serving(s, candidate, out_dir, run_id, facts) as api:
            golden = store.ensure(api, candidate.commit)
            for _ in range(runs):
                found = [check.run(api, golden) for check in s.checks]
                flagged += not all(r.passed for r in found)
                for check, result in zip(s.checks, found, strict=True):
                    results[check.name].append(result)
        store.keep(candidate.commit, facts)
    assert store.data is not None
    noise = {c.name: n for c in s.checks if (n := c.noise(results[c.name])) is not None}
    calibration = GoldenCalibration.model_validate(
        {"runs": runs * (1 + restarts), "restarts": restarts, **noise}
    )
    store.update(store.data.model_copy(update={"calibration": calibration}))
    return Calibration(golden_thresholds(store.data, s.checks), runs * (1 + restarts), flagged)


WORKER_DIR = Path(__file__).parent / "data" / "worker"
"""Holds llm_bisect_worker.py, put first on a localisation probe's PYTHONPATH."""
EXTENSION = "llm_bisect_worker.Extension"
LOCALIZATION = "localization.json"


def localize_instrument() -> Instrument:
    """What a localisation probe adds to a vLLM server: eager mode (hooks do not fire in
    compiled graphs), no prefix cache (both runs compute every token), the extension."""
    return Instrument(
        args=(
            "--enforce-eager",
            "--no-enable-prefix-caching",
            "--worker-extension-cls",
            EXTENSION,
        ),
        env={"VLLM_SERVER_DEV_MODE": "1"},
        paths=(WORKER_DIR,),
    )


def _capture(api: OpenAIClient, token_ids: list[int], spec: str) -> tuple[list[Any], int]:
    """One teacher-forced forward over `token_ids` with hooks on every module: what each
    rank recorded, and its size in bytes."""
    try:
        api.rpc("llm_bisect_install", spec)
    except RequestRejected as exc:
        raise LocalizeError(
            f"the server has no /collective_rpc for the worker extension ({exc})"
        ) from None
    api.continuation(token_ids, 1)
    results = api.rpc("llm_bisect_collect")
    if not all(isinstance(r, dict) and "events" in r for r in results):
        raise LocalizeError(f"the worker extension answered {str(results)[:200]}")
    return results, len(json.dumps(results))


CAPTURE = "capture.json"
"""DIR/localize/<short>/capture.json: what a localisation probe recorded, reused by a later
`localize` into the same DIR (one last good build against several bad ones starts once)."""


def _capture_key(s: Setup, candidate: Candidate, prompt: str) -> str:
    """What a capture depends on: the build, the config that decides how it is served and
    checked, the tokens asked for, and the worker extension's own code."""
    cfg = s.config.localize
    worker = hashlib.sha256((WORKER_DIR / "llm_bisect_worker.py").read_bytes()).hexdigest()
    blob = {"commit": candidate.commit, "config": config_digest(s.config), "prompt": prompt,
            "tokens": cfg.tokens, "sample": cfg.sample, "worker": worker}  # fmt: skip
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()


def _stored_capture(
    probe_dir: Path, key: str, token_ids: list[int] | None, *, again: bool, saved: bool
) -> dict[str, Any] | None:
    """A capture this DIR holds of the same build and settings; None when there is none,
    it is of other tokens, lacks the good side's second run, or the tensors asked for."""
    try:
        doc = json.loads((probe_dir / CAPTURE).read_text())
    except (ValueError, OSError):
        return None
    if not isinstance(doc, dict) or doc.get("key") != key or not isinstance(doc.get("runs"), dict):
        return None
    if token_ids is not None and doc.get("token_ids") != token_ids:
        return None
    if (again and "again" not in doc["runs"]) or (saved and not doc.get("saved")):
        return None
    return doc


def localize_builds(
    s: Setup,
    good: Candidate,
    bad: Candidate,
    out_dir: Path,
    *,
    prompt: str | None = None,
    note: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Run the last good and the first bad build with the worker extension on the same
    tokens and say where their outputs first differ (localize.py). A build this DIR
    already captured with the same settings is not started again. LocalizeError when a
    build cannot be instrumented."""
    cfg = s.config.localize
    text = prompt or cfg.prompt
    note(
        f"localize: {good.short} (good) and {bad.short} (bad) with the worker extension; "
        "eager mode and no prefix cache for these two probes only"
    )
    token_ids: list[int] = []
    runs: dict[str, list[Any]] = {}
    seconds: dict[str, float] = {}
    reused: list[str] = []
    collected = 0
    with s.launcher(run_id_of(out_dir, "localize")) as launcher:
        for line in launcher.reap():
            note(line)
        for role, candidate in (("good", good), ("bad", bad)):
            t0 = s.clock()
            probe_dir = out_dir / "localize" / candidate.short
            key = _capture_key(s, candidate, text)
            stored = _stored_capture(
                probe_dir, key, token_ids if role == "bad" else None,
                again=role == "good", saved=cfg.save_tensors,
            )  # fmt: skip
            if stored is not None:
                note(f"localize: {candidate.short} ({role}) captured before; not started again")
                token_ids = token_ids or list(stored["token_ids"])
                runs[role] = stored["runs"]["first"]
                if role == "good":
                    runs["again"] = stored["runs"]["again"]
                reused.append(role)
                continue
            save = probe_dir / "tensors" if cfg.save_tensors else None
            spec = json.dumps({"sample": cfg.sample, "save": str(save) if save else None})
            captured: dict[str, list[Any]] = {}
            try:
                with launcher.launch(candidate, probe_dir, localize_instrument()) as server:
                    server.wait_ready()
                    with s.client(server) as api:
                        if not token_ids:
                            token_ids = api.tokenize(text)
                            token_ids += api.continuation(token_ids, cfg.tokens)
                        captured["first"], size = _capture(api, token_ids, spec)
                        collected += size
                        if role == "good":  # the good build against itself: the noise
                            captured["again"], _ = _capture(api, token_ids, spec)
            except (LaunchError, EndpointError) as exc:
                raise LocalizeError(f"{role} build {candidate.short}: {exc}") from None
            seconds[role] = round(s.clock() - t0, 1)
            runs[role] = captured["first"]
            if "again" in captured:
                runs["again"] = captured["again"]
            doc = {"key": key, "commit": candidate.commit, "token_ids": token_ids,
                   "saved": save is not None, "runs": captured}  # fmt: skip
            probe_dir.mkdir(parents=True, exist_ok=True)
            write_atomic(probe_dir / CAPTURE, json.dumps(doc) + "\n")
    found = localize_results(
        runs["good"],
        runs["bad"],
        runs["again"],
        floor=cfg.tolerance,
        tokens=len(token_ids),
        collected_bytes=collected,
    )
    return {
        "good": good.commit,
        "bad": bad.commit,
        "prompt": text,
        "seconds": seconds,
        "reused": reused,
        "forced": list(localize_instrument().args),
        **found.to_json(),
    }


def localize_after_run(
    s: Setup,
    result: dict[str, Any],
    out_dir: Path,
    note: Callable[[str], None],
    known: Mapping[str, Candidate] | None = None,
) -> dict[str, Any] | None:
    """After a run that found its culprit: localise it (unless `localize: false`), into
    DIR/localization.json; a resumed run reads what it wrote. None when there is nothing
    to localise."""
    pair = culprit_pair(result)
    if not s.config.localize.enabled or pair is None:
        return None
    good, bad = pair
    done = stored_localization(out_dir, good, bad)
    if done is not None:
        return done
    try:
        known = known or {}
        doc = localize_builds(
            s,
            known.get(good) or s.source.resolve(good, "localize"),
            known.get(bad) or s.source.resolve(bad, "localize"),
            out_dir,
            note=note,
        )
    except LocalizeError as exc:
        doc = {"good": good, "bad": bad, "error": str(exc), "line": f"not localised: {exc}"}
    write_atomic(out_dir / LOCALIZATION, json.dumps(s.scrub.doc(doc), indent=2) + "\n")
    return doc


def culprit_pair(result: dict[str, Any]) -> tuple[str, str] | None:
    """(good, bad) commits a found result's culprit lies between: the last good and the first
    bad, or with --find-fix the fix and the commit before it. None unless found."""
    span = result.get("range") or []
    if result.get("status") != "found" or len(span) < 2:
        return None
    old, new = span[0], span[-1]
    return (new, old) if result.get("mode") == Mode.FIX.value else (old, new)


def stored_localization(out_dir: Path, good: str, bad: str) -> dict[str, Any] | None:
    """What DIR/localization.json says of these two builds; None when it is of others or
    cannot be read."""
    try:
        doc = json.loads((out_dir / LOCALIZATION).read_text())
    except (ValueError, OSError):
        return None
    if isinstance(doc, dict) and doc.get("good") == good and doc.get("bad") == bad:
        return doc
    return None


def with_localization(result: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """result.json with what DIR/localization.json says of its culprit (`report DIR`)."""
    pair = culprit_pair(result)
    doc = stored_localization(out_dir, *pair) if pair is not None else None
    return result if doc is None else {**result, "localization": doc}


def localize_refs(
    s: Setup,
    good: str,
    bad: str,
    out_dir: Path,
    *,
    prompt: str | None,
    note: Callable[[str], None],
) -> dict[str, Any]:
    """The `localize` command: two refs (or images), localised; DIR/localization.json."""
    good_c, bad_c = s.resolve(good, "--good"), s.resolve(bad, "--bad")
    if (good_c.commit, good_c.artifact) == (bad_c.commit, bad_c.artifact):
        raise ConfigError(
            f"--bad: {bad!r} is the same build as --good ({good_c.short}); "
            "localize compares two builds"
        )
    with hold(out_dir):
        doc = localize_builds(s, good_c, bad_c, out_dir, prompt=prompt, note=note)
        write_atomic(out_dir / LOCALIZATION, json.dumps(s.scrub.doc(doc), indent=2) + "\n")
    return doc


GATE_FILE = "gate.json"
BISECT_DIR = "bisect"
"""Where `gate --bisect-on-block` bisects, inside the gate's folder."""


def compared_builds(golden: Golden, outcome: ProbeOutcome) -> Sides | None:
    """The golden's build and a candidate's, side by side, when both are known."""
    if not golden.fingerprint or not outcome.fingerprint:
        return None
    differ = fingerprint_differences(golden.fingerprint, outcome.fingerprint)
    old = {"commit": golden.commit, **golden.fingerprint}
    new = {"commit": outcome.commit, **outcome.fingerprint}
    return Sides(old=old, new=new, differences=differ)


def _write_gate(out_dir: Path, doc: GateDocument, scrub: Scrub, junit: Path | None) -> None:
    clean = GateDocument.model_validate(scrub.doc(doc.model_dump(mode="json")))
    write_atomic(out_dir / GATE_FILE, json.dumps(clean.model_dump(mode="json"), indent=2) + "\n")
    write_atomic(out_dir / "report.md", render_gate_markdown(clean))
    write_atomic(out_dir / "report.html", render_gate_html(clean))
    if junit is not None:
        write_atomic(junit, render_junit(clean))


def _unfinished_gate(out_dir: Path, digest: str, candidate: str) -> GateDocument | None:
    """DIR/gate.json of a blocked gate whose bisection a kill left unfinished, for the same
    config and candidate: its verdict stands, the probe is not run again."""
    try:
        doc = GateDocument.model_validate_json((out_dir / GATE_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    same = doc.config_digest == digest and doc.candidate.commit == candidate
    if same and doc.decision == "block" and doc.bisection is not None:
        return doc if doc.bisection.status is None else None
    return None


def run_gate(
    s: Setup,
    candidate_ref: str,
    out_dir: Path,
    progress: Progress,
    *,
    golden_file: Path | None = None,
    record: bool = False,
    good: str | None = None,
    bisect_on_block: bool = False,
    junit: Path | None = None,
    eval_config: Path | None = None,
) -> GateDocument:
    """The `gate` command: one release candidate against the last good build's golden
    (recorded first with `record`), allow, block or inconclusive; on block with
    `bisect_on_block`, the bisection from the golden's build to the candidate, which starts
    with those two verdicts instead of probing them again. Writes DIR/gate.json, report.md,
    report.html and `junit`."""
    started = time.time()
    path = golden_file_of(s, golden_file).absolute()  # its reproduce line runs anywhere
    candidate = s.resolve(candidate_ref, "--candidate")
    recorded = False
    if record:
        good_ref = good or s.config.candidates.good
        good_c = s.resolve(good_ref, "--good")
        why = golden_stale(path, good_c.commit, s.golden_identity())
        if why is not None:
            progress.note(f"gate: recording the golden from {good_c.short} into {path} ({why})")
            record_golden(s, good_ref, path, out_dir)
            recorded = True
    if not path.exists():
        raise ConfigError(
            f"--golden: no golden at '{path}'; record the last good build's with "
            "`llm-bisect golden CONFIG --candidate GOOD`, or run the gate with --record"
        )
    golden = s.golden_store(path).data  # of this setup and repository, or refused here
    assert golden is not None
    digest = config_digest(s.config)
    context = {**run_context(s, s.config), "good_ref": golden.commit, "bad_ref": candidate_ref}
    resumed = _unfinished_gate(out_dir, digest, candidate.commit) if bisect_on_block else None
    if resumed is not None:
        progress.note(f"gate: {GATE_FILE} holds this candidate's verdict; the bisection resumes")
        doc = resumed
    else:
        _, outcome = check_one(s, candidate_ref, out_dir, progress, path)
        decision = DECISION_OF[outcome.verdict]
        doc = GateDocument(
            decision=decision,
            exit_code=EXIT_OF[decision],
            message=HEADLINE[decision],
            candidate_ref=candidate_ref,
            candidate=CandidateDoc(**candidate.to_json()),
            golden=GoldenRef(path=str(path), commit=golden.commit, recorded=recorded),
            probe=probe_doc(outcome, candidate.subject, Span(started, time.time())),
            fingerprints=compared_builds(golden, outcome),
            warnings=golden_warnings(golden),
            eval_config=str(eval_config.absolute()) if eval_config else "",
            context=Context(**context),
            config_digest=digest,
            started_at=started,
            ended_at=time.time(),
        )
    if doc.decision == "block" and bisect_on_block:
        where = out_dir / BISECT_DIR
        doc = doc.model_copy(update={"bisection": Bisection(out=str(where), message="under way")})
        _write_gate(out_dir, doc, s.scrub, junit)  # a kill from here on resumes the bisection
        given = [
            (
                ProbeOutcome(
                    golden.commit,
                    Verdict.GOOD,
                    f"the golden's build: {path.name} was recorded from it",
                ),
                "gate: the golden's build",
            ),
            (
                ProbeOutcome.from_json(doc.probe.model_dump(mode="json", include=_OUTCOME)),
                "gate: the candidate's probe",
            ),
        ]
        try:
            done = run_bisect(
                s,
                where,
                good=golden.commit,
                bad=candidate_ref,
                progress=progress,
                golden_file=path,
                given=given,
            )
        except (ConfigError, JournalError) as exc:  # the decision stands; say why no bisection
            progress.note(f"gate: no bisection: {exc}")
            bisection = Bisection(out=str(where), status=Status.ERROR, message=str(exc))
        else:
            result = ResultDocument.model_validate(done.result)
            bisection = Bisection(
                out=str(where),
                status=result.status,
                message=result.message,
                culprit=result.culprit,
                probes=len([p for p in result.probes if not p.given]),
            )
        doc = doc.model_copy(update={"bisection": bisection, "ended_at": time.time()})
    _write_gate(out_dir, doc, s.scrub, junit)
    return doc


_OUTCOME = {"commit", "verdict", "reason", "checks", "timings", "log_tail", "fingerprint"}
"""The fields of a ProbeDoc that a ProbeOutcome holds."""
