"""Setup: a config loaded and checked, its seams made (source, checks, builder, launcher);
nothing started. Every service takes a Setup.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from .. import collectenv, enginecache, plugins
from ..builds import Builder, ImageTarget, Strategy
from ..builds.cache import BuildCache, unusable
from ..checks import Check
from ..checks.build import build_checks
from ..checks.golden import GoldenStore, Identity, load as golden_load
from ..checks.vllm_eval import expand as expand_vllm_evals
from ..client import OpenAIClient
from ..config import (
    NO_CANDIDATES,
    Config,
    check_digest,
    expand_paths,
    load_config,
    read_known_verdicts,
    server_argv,
    server_digest,
    shared_config,
)
from ..environment import gpu_ids, node_environment
from ..errors import ConfigError, LaunchError
from ..kinds import (
    GIT,
    LAUNCHERS,
    SOURCES,
    STRATEGIES,
    BuildContext,
    DeviceContext,
    EndContext,
    LauncherContext,
    PreflightContext,
    SourceContext,
)
from ..launchers import Launcher, Server
from ..launchers.cached import CachedLauncher
from ..ledger import holds_day, load as ledger_load
from ..model import Candidate, Verdict
from ..outdir import hold
from ..posterior import Known
from ..probe import Facts, Progress, served_facts, startup_facts
from ..redact import Scrub, url_credentials
from ..registry import RegistryClient, RegistryError, parse_image_ref, valid_tag
from ..report.documents import Context
from ..report.links import web_url
from ..search import Mode, Plan, build_plan
from ..secretnames import argv_secret_names, caller_secret_names, secret_names, served_api_key
from ..sources import Repository
from ..sources.git import NoRepository, nightly_day
from ..sources.images import WHERE
from ..templates import expand_env, expand_value, fill
from ..yamlfile import read_yaml
from .keep import image_entry


@dataclass(frozen=True)
class Setup:
    """A validated config with everything resolved; nothing started yet."""

    config: Config
    base_dir: Path
    source: Repository
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
    now: Callable[[], float] = time.time
    """The wall clock (seconds since the epoch), for the times documents record."""
    days: dict[tuple[bool, str], Candidate] = field(default_factory=dict)
    """Each day named as a ref (and whether as a later end) → the nightly it resolved to
    (said once; shared by copies)."""
    engine_cache: enginecache.EngineCache | None = None
    """Where the servers keep the engine's compile caches (`probe.engine_cache`); None: off."""

    def client(self, server: Server) -> OpenAIClient:
        return OpenAIClient(
            server.base_url,
            model=self.config.server.model,
            timeout=self.config.server.request_timeout,
            max_reply_bytes=int(self.config.server.max_reply_mb * 2**20),
            api_key=self.api_key,
        )

    @property
    def api_key(self) -> str | None:
        """The key the server demands (`--api-key`, VLLM_API_KEY), sent with every request."""
        cfg = self.config.server
        fields = server_argv(cfg)
        argvs = [list(getattr(cfg, f) or []) for f in fields if f in type(cfg).model_fields]
        inherits = LAUNCHERS[cfg.launcher].inherits
        return served_api_key(argvs, self.server_env, self.environ if inherits else {})

    @property
    def server_env(self) -> dict[str, str]:
        """Every launcher's servers' environment: server.env (expanded), probe.server_env."""
        return {**self.env, **self.config.probe.server_env}

    @contextmanager
    def launcher(self, run_id: str, cached: bool = True) -> Iterator[Launcher]:
        """The config's launcher, closed (background pulls ended) on the way out; its servers
        keep the engine cache (launchers/cached.py) unless not `cached` (one that only reads
        images' metadata: the launcher kind's own object)."""
        server = self.config.server
        cache = self.engine_cache if cached else None
        if cache is not None:
            server = cache_mounted(server, cache.root)
        ctx = LauncherContext(
            env=self.server_env,
            environ=self.environ,
            secret_names=self.secret_names,
            base_dir=self.base_dir,
            run_id=run_id,
            builder=self.builder,
            logins=self.logins,
            report=self.report,
            slot_devices=self.devices,
            clock=self.clock,
            sleep=self.sleep,
        )
        made = LAUNCHERS[server.launcher].make(server, ctx)
        if cache is not None:
            made = CachedLauncher(made, cache)
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
        """A git ref, a day (YYYY-MM-DD: its nightly, `nightly`), or (docker launcher) an
        image reference whose metadata names a commit."""
        try:
            return self.source.resolve(ref, key)  # a ref or tag of that name wins
        except ConfigError:
            day = nightly_day(ref)
            if day is not None:
                return self.nightly(ref, day, key)
            resolve_end = LAUNCHERS[self.config.server.launcher].resolve_end
            if resolve_end is None:
                raise
        plain = partial(self.launcher, cached=False)  # resolve_end reads its kind's launcher
        return resolve_end(self.config.server, EndContext(plain, self.source), ref, key)

    def nightly(self, ref: str, day: str, key: str) -> Candidate:
        """The nightly of `day`, said in one line (once a run): the nightly `keep`'s ledger
        (`server.ledger`) holds of that day, else the last commit of that day (UTC) on the
        bad end's first-parent history."""
        memo = (key == "candidates.later", ref)  # a later end is on another branch
        if memo in self.days:
            return self.days[memo]
        found = (
            self._registry_nightly(day, key)
            or self._ledger_nightly(day, key)
            or self._branch_nightly(ref, day, key)
        )
        picked, how = found
        self.report(f"{key} {ref}: {picked.short} {how}")
        self.days[memo] = picked
        return picked

    def _registry_nightly(self, day: str, key: str) -> tuple[Candidate, str] | None:
        """Where the Docker launcher's image template names its registry (`host/repo:...`),
        the image of a tag holding the day there (the plainest where several do), run as
        that end. A registry that cannot be read is said, and the next way is tried."""
        server = self.config.server
        template = getattr(server, "image", None)
        if server.launcher != "docker" or not isinstance(template, str) or "/" not in template:
            return None
        try:
            repo = parse_image_ref(fill(template, {"commit": "0" * 40, "short": "0" * 12}))
        except (ValueError, ConfigError):
            return None
        if template.split("/", 1)[0] not in (repo.registry, "docker.io"):
            return None  # no registry named: Docker Hub's by default, whose nightlies have none
        name = f"{repo.registry}/{repo.repository}"
        auth = getattr(server, "registry", None)
        client = RegistryClient(
            username=getattr(auth, "username", None),
            password=getattr(auth, "password", None),
            logins=self.logins,
        )
        try:
            tags = sorted((t for t in client.tags(repo) if holds_day(t, day) and valid_tag(t)),
                          key=lambda t: (len(t), t))  # fmt: skip
            raw = client.raw_manifest(repo, tags[0]) if tags else None
            entry = image_entry(client, repo, tags[0], raw) if raw is not None else None
        except RegistryError as exc:
            self.report(f"{key} {day}: the tags of {name} could not be read ({exc})")
            return None
        finally:
            client.close()
        if entry is None:
            return None
        image = f"{name}:{tags[0]}"
        if entry.commit is None:
            raise ConfigError(f"{key}: {day}'s image {image} names no commit (looked at {WHERE})")
        picked = replace(self.source.resolve(entry.commit, key), artifact=image)
        return picked, f"(the image {image}, {entry.digest})"

    def _ledger_nightly(self, day: str, key: str) -> tuple[Candidate, str] | None:
        where = getattr(self.config.server, "ledger", None)
        if not where:
            return None
        path = self.base_dir / Path(where).expanduser()
        found = ledger_load(path, key="server.ledger").nightly(day)
        if found is None:
            return None
        tag, entry = found
        assert entry.commit is not None
        seen = f"first seen {entry.first_seen[:10]}" if entry.first_seen else "of that day"
        return self.source.resolve(entry.commit, key), f"(the nightly {tag}, {seen}: {path})"

    def _branch_nightly(self, ref: str, day: str, key: str) -> tuple[Candidate, str]:
        """The last commit of `day` on the bad end's first-parent history; on HEAD's where
        the bad end is this day, or for `candidates.later` (newer than the bad end: a later
        nightly of the clone's branch, not of the bad end's)."""
        bad = self.config.candidates.bad
        own = bad == ref or key == "candidates.later"
        tip, on = ("HEAD", "HEAD") if own else (self.resolve(bad, "candidates.bad").commit, bad)
        found = self.source.last_of_day(day, tip)
        if found is None:
            raise ConfigError(
                f"{key}: no such ref {ref!r}, and {on}'s history holds no commit by the end of "
                "that day (UTC)"
            )
        picked, committed = found
        when = (
            f"of {day}"
            if committed == day
            else f"by the end of {day} (of {committed}: none that day)"
        )
        return picked, f"(the last commit {when} (UTC) on {on}'s first-parent history)"


@dataclass(frozen=True)
class Reading:
    """What changes a config as `setup` reads it."""

    server_section: Mapping[str, Any] | None = None
    """A `server:` section used instead of the config's."""
    eval_config: Path | None = None
    """A vLLM eval config file judged as one more check (on `eval_data`)."""
    eval_data: Path | None = None
    candidates: bool = True
    """False: the config may have no `candidates:` (`configs` probes one build)."""


def setup(
    config_path: Path,
    environ: Mapping[str, str],
    *,
    repo: Path | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    report: Callable[[str], None] = lambda _: None,
    now: Callable[[], float] = time.time,
    reading: Reading = Reading(),
) -> Setup:
    """Load and validate a config and open its repository (`repo`, else candidates.repo);
    nothing is started. `reading` (Reading): what changes the config as it is read."""
    server_section, candidates = reading.server_section, reading.candidates
    eval_config, eval_data = reading.eval_config, reading.eval_data
    plugins.load()
    loaded = load_config(config_path, server_section, candidates)
    bare = not candidates and repo is None and loaded.candidates.repo == NO_CANDIDATES["repo"]
    config = expand_paths(loaded, environ, repo_given=repo is not None or bare)
    base_dir = config_path.resolve().parent
    config = expand_vllm_evals(config, base_dir, eval_config, eval_data)
    repo_dir = repo.absolute() if repo is not None else base_dir / config.candidates.repo
    opened = SourceContext(repo_dir, "--repo" if repo is not None else "candidates.repo")
    source = (
        NoRepository("the config has no candidates.repo (add `candidates: {repo: ./vllm}`, or "
                     "give --repo)")
        if bare
        else SOURCES[GIT].make(config.candidates, opened)
    )  # fmt: skip
    for i, strategy in enumerate(config.build.strategies if bare and config.build else []):
        if STRATEGIES[strategy.type].repository:
            raise ConfigError(
                f"build.strategies.{i}: `{strategy.type}` builds from the repository, and "
                "the config has no candidates.repo (add `candidates: {repo: ./vllm}`, or give "
                "--repo)"
            )
    env = expand_env(config.server.env, environ)
    cache = with_engine_cache(config, env, base_dir, environ)
    server = config.server
    names = sorted({*secret_names(server.env), *caller_secret_names(environ)})
    secrets = [{**environ, **env}[n] for n in names]
    for value in {*env.values(), *environ.values()}:  # a login in a URL under any name
        secrets += url_credentials(value)
    variables = {v: n for n, v in zip(names, secrets[: len(names)], strict=True)}  # "$NAME"
    for argv_key in server_argv(server):  # `--api-key X`
        named = argv_secret_names(getattr(server, argv_key, None) or [])  # and URL logins
        secrets += list(named)
        variables = {**named, **variables}
    fast = config.probe.fast
    if fast is not None:  # the fast setup's own, for every line this run prints
        fast_env = expand_env(fast.env, environ)
        secrets += [fast_env[n] for n in secret_names(fast.env) if n in fast_env]
        secrets += [c for v in fast_env.values() for c in url_credentials(v)]
        named = argv_secret_names(fast.args)
        secrets += list(named)
        variables = {**named, **variables}
    for i, strategy in enumerate(config.build.strategies if config.build else []):
        secrets += STRATEGIES[strategy.type].secrets(strategy, environ, i)
    ends = (config.candidates.good, config.candidates.bad)
    checked = LAUNCHERS[server.launcher].preflight(
        server, PreflightContext(base_dir, env, environ, ends)
    )
    if checked.server is not server:
        config = config.model_copy(update={"server": checked.server})
    secrets += checked.secrets
    logins = dict(checked.logins)
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
        Scrub().with_secrets(secrets, variables),
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
        now=now,
        engine_cache=cache,
    )


def fast_section(
    server: Mapping[str, Any], args: list[str], env: Mapping[str, str]
) -> dict[str, Any]:
    """A config's raw `server:` section with the fast setup's flags after its own and its
    variables over its own. Pure."""
    section = dict(server)
    tag = section.get("launcher", "process")
    keys = LAUNCHERS[tag].fast_argv() if isinstance(tag, str) and tag in LAUNCHERS else ()
    for key in keys:
        argv = section.get(key)
        if isinstance(argv, list):
            section[key] = [*argv, *args]
    if args and not any(isinstance(section.get(k), list) for k in keys):
        section["args"] = list(args)  # an image's server with no flags of its own
    section["env"] = {**dict(section.get("env") or {}), **env}
    return section


def fast_setup(s: Setup) -> Setup:
    """The config's fast setup (`probe.fast`): its flags and variables over the server's,
    nothing after the search (confirmation, localisation and `candidates.later` are the full
    setup's), and a golden of its own (recorded from the good end in the fast setup)."""
    fast = s.config.probe.fast
    assert fast is not None
    data = read_yaml(Path(s.config_file), "config")
    section = fast_section(data["server"], fast.args, fast.env)
    made = setup(Path(s.config_file), s.environ, repo=Path(s.repo) if s.repo else None,
                 clock=s.clock, sleep=s.sleep, now=s.now,
                 reading=Reading(server_section=section))  # fmt: skip
    config = made.config.model_copy(
        update={
            "golden": None,
            "confirm": False,
            "candidates": made.config.candidates.model_copy(update={"later": []}),
            "localize": made.config.localize.model_copy(update={"enabled": False}),
            "probe": made.config.probe.model_copy(update={"fast": None}),
        }
    )
    return replace(made, config=config, report=s.report)


def with_engine_cache(
    config: Config,
    env: Mapping[str, str],
    base_dir: Path,
    environ: Mapping[str, str] | None = None,
) -> enginecache.EngineCache | None:
    """`probe.engine_cache` resolved: its root (`dir` with `${VAR}` expanded from `environ`,
    relative to the config's folder; else the user's cache, enginecache.default_root); None
    when it is off, or when the launcher finds no folder of its own (Kubernetes) and the
    config names none. The variables server.env (`env`) sets itself win. A `dir` that names
    a file: ConfigError."""
    cache = config.probe.cache
    if cache is None:
        return None
    place = LAUNCHERS[config.server.launcher].cache_place
    if cache.dir is None:
        if place == "configured":
            return None
        root = enginecache.default_root(environ or {})
    else:
        key = "probe.engine_cache.dir"
        written = expand_value(cache.dir, environ or {}, key)
        root = (base_dir / Path(written).expanduser()).absolute()
        if root.exists() and not root.is_dir():
            raise ConfigError(f"{key}: '{written}' is a file, not a folder")
    own = frozenset(n for n in enginecache.CACHES if n in env)
    return enginecache.EngineCache(root, place, own)


def cache_mounted(server: Any, root: Path) -> Any:
    """A `server:` config with the engine cache's root where its servers run: the launcher's
    own way (LauncherKind.cache_mount), else a bind at the same path in `volumes` for a
    launcher that runs images; the same config for one that shares this machine's files.
    Given to the launcher only, never in Setup.config: the cache costs, it changes no
    verdict, so the config digest stays the one without it."""
    kind = LAUNCHERS[server.launcher]
    if kind.cache_mount is not None:
        return kind.cache_mount(server, root)
    if kind.runs_images and "volumes" in type(server).model_fields:
        volumes = [*getattr(server, "volumes"), enginecache.cache_volume(root)]  # noqa: B009
        return server.model_copy(update={"volumes": volumes})
    return server


def slot_devices_of(
    config: Config,
    env: Mapping[str, str],
    environ: Mapping[str, str],
    gpus: Callable[[], list[str] | None] = gpu_ids,
) -> list[tuple[str, ...] | None]:
    """Per slot, the GPUs it alone uses (launchers/devices.py); ConfigError where `parallel`
    would put several servers on the same GPUs. `gpus`: the node's, asked only when needed."""
    server = config.server
    return LAUNCHERS[server.launcher].devices(
        server, DeviceContext(config.parallel, env, environ, gpus)
    )


def _builder(
    config: Config,
    base_dir: Path,
    source: Repository,
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
    images = LAUNCHERS[config.server.launcher].runs_images
    for i, cfg in enumerate(config.build.strategies):
        key = f"build.strategies.{i}"
        ctx = BuildContext(key, i, source, base_dir, environ, secret_names, resolve, images)
        strategy, target = STRATEGIES[cfg.type].make(cfg, ctx)
        strategies.append(strategy)
        if target is not None:
            targets[i] = target
    root = base_dir / Path(config.build.cache.dir).expanduser()
    problem = unusable(root)
    if problem is not None:
        raise ConfigError(f"build.cache.dir: {problem}")
    budget = int(config.build.cache.disk_budget_gb * 1e9)
    return Builder(strategies, BuildCache(root, budget), targets)


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
    ends = replace(s, config=config)  # a day's nightly is on --bad's history
    plan = build_plan(
        s.source, config.candidates.good, config.candidates.bad, mode, resolve=ends.resolve
    )
    if s.builder is not None:  # route facts for the whole range, read as routes are asked for
        s.builder.survey(plan.candidates)
    return config, plan


def known_of(s: Setup, plan: Plan, note: Callable[[str], None]) -> tuple[Known, ...]:
    """The verdicts known from elsewhere that `candidates.known_verdicts` names (relative to
    the config's folder), each commit resolved as the ends are; those of commits outside the
    plan's range are left out, and said. A ref that resolves to nothing is a ConfigError."""
    name = s.config.candidates.known_verdicts
    if name is None:
        return ()
    path = s.base_dir / Path(name).expanduser()
    found: list[Known] = []
    outside = 0
    inside = {c.commit for c in plan.sequence}
    for i, entry in enumerate(read_known_verdicts(path)):
        commit = s.resolve(entry.commit, f"candidates.known_verdicts: {path}: entry {i}").commit
        if commit not in inside:
            outside += 1
            continue
        found.append(Known(commit, Verdict(entry.verdict), entry.source, entry.rate))
    if outside:
        note(f"candidates.known_verdicts: {outside} verdict(s) of commits outside the range "
             "left out")  # fmt: skip
    return tuple(found)


def run_id_of(out_dir: Path, digest: str) -> str:
    """Stable for one output folder and config, so a resumed run finds its orphans."""
    return hashlib.sha256(f"{out_dir.resolve()}\0{digest}".encode()).hexdigest()[:12]


def run_context(s: Setup, config: Config) -> Context:
    """How a run was asked for and where it runs, for its report."""
    return Context(
        good_ref=config.candidates.good,
        bad_ref=config.candidates.bad,
        config=s.config_file,
        repo=s.repo,
        repo_url=(config.candidates.url or web_url(s.source.remote_url())).rstrip("/"),
        environment=node_environment(),
        config_text=config_text(s),
        caveats=LAUNCHERS[config.server.launcher].caveats(config.server),
    )


def config_text(s: Setup) -> str:
    """The config file as a report may show it: its data, secrets masked (shared_config),
    written back as YAML (comments are not kept)."""
    data = read_yaml(Path(s.config_file), "config") if s.config_file else None
    if not data:
        return ""
    shared = shared_config(data, s.scrub)
    return yaml.safe_dump(shared, sort_keys=False, allow_unicode=True, width=100)


def golden_file_of(s: Setup, given: Path | None) -> Path:
    """The golden file a command uses: given, else the config's, else ./golden.json."""
    return given or s.golden_path() or Path("golden.json")


@contextmanager
def serving(
    s: Setup,
    candidate: Candidate,
    out_dir: Path,
    run_id: str,
    facts: Facts | None = None,
    progress: Progress | None = None,
    doing: str = "checking",
) -> Iterator[OpenAIClient]:
    """One ready server for a candidate (golden, calibrate); untestable is an error here.
    `facts`, when given, is filled with the build's fingerprint once the server stopped;
    `progress` shows it starting, then `doing` (as `run` shows a probe)."""
    probe_dir = out_dir / "probes" / candidate.short
    with hold(out_dir), s.launcher(run_id) as launcher:
        for line in launcher.reap():
            s.report(line)
        collectenv.clear(probe_dir)
        started = s.clock()
        if progress is not None:
            progress.phase(candidate, "starting", 0.0)
        with launcher.launch(candidate, probe_dir) as server:
            try:
                server.wait_ready()
            except LaunchError as exc:
                tail = f"\n{exc.log_tail}" if exc.log_tail else ""
                raise LaunchError(f"{candidate.short} could not be tested: {exc}{tail}") from None
            if progress is not None:
                progress.phase(candidate, doing, s.clock() - started)
            with s.client(server) as api:
                yield api
                if facts is not None:
                    facts.add(served_facts(api, server))
    if facts is not None:
        facts.add(startup_facts(probe_dir))
