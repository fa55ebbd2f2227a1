"""Registries of kinds: launchers, build strategies, checks and sources, keyed by their tag.

A kind is one module that owns its config model (a pydantic model whose tag field,
`launcher` or `type`, is a Literal of its tag) and how its object is made from it:

    # checks/canary.py
    class CanaryConfig(Asks):
        type: Literal["canary"]
        ...
    def from_config(cfg: CanaryConfig, ctx: CheckContext) -> CanaryCheck: ...
    KIND = CHECKS.register(CheckKind("canary", CanaryConfig, make=from_config))

A built-in kind's module is also named in BUILTIN (its place there is its place in the
schema and in "known: ..."); a kind from another package names its module in an entry
point of the `llm_bisect.kinds` group (plugins.py). A kind declares on its registration the
facts other modules ask of it (LauncherKind.placement, shape, argv, cache_mount, reap;
CheckKind.cost, neutral), and nowhere else: adding one is its module and one line. Required
facts are required arguments (a launcher's argv and shape), and the facts naming fields are
checked when it registers (Registry.register), so a plugin lacking one fails at load, in one
line naming the fact; optional ones have safe defaults (docs/plugins.md).
config.py builds its discriminated unions and its "known" lists from these registries
(`Tagged`), and the services look a kind up by the tag the config carries:

    launcher = LAUNCHERS[config.server.launcher].make(config.server, ctx)

An unknown tag is UnknownKind, never a default. Importing a kind's module registers it,
and nothing else: the built-in kinds (BUILTIN) and those of installed packages (entry
points) are loaded once, explicitly, by plugins.load(), which the CLI, services.setup and
`schema` call first (as pytest loads its default plugins, then the installed ones). This
module has no side effect and imports only errors.py of the package at run time (the seams
it names, type-only, import neither it nor config): every kind module may import it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar, get_args

from pydantic import BaseModel, GetCoreSchemaHandler
from pydantic_core import CoreSchema, core_schema

from .errors import UnknownKind

if TYPE_CHECKING:
    from .builds import Builder, ImageTarget, Strategy as BuildStrategy
    from .checks import Check
    from .launchers import Launcher
    from .model import Candidate
    from .sources import Repository

BUILTIN = (
    "llm_bisect.sources.git",
    "llm_bisect.launchers.process",
    "llm_bisect.launchers.docker",
    "llm_bisect.launchers.slurm",
    "llm_bisect.launchers.kubernetes",
    "llm_bisect.builds.image",
    "llm_bisect.builds.wheel",
    "llm_bisect.builds.overlay",
    "llm_bisect.builds.command",
    "llm_bisect.checks.canary",
    "llm_bisect.checks.expect",
    "llm_bisect.checks.logprobs",
    "llm_bisect.checks.eval",
    "llm_bisect.checks.lm_eval",
    "llm_bisect.checks.vllm_eval",
)
"""The modules whose import registers the built-in kinds, in the order the config schema
lists them (plugins.load imports them)."""


FIELD_FACTS = ("shape", "argv", "flags", "shown_argv", "placement", "neutral")
"""A kind's facts that name fields of its config model: checked when it registers."""


class HasTag(Protocol):
    """What a registry needs of a kind: its tag and its config model."""

    @property
    def tag(self) -> str: ...

    @property
    def config(self) -> type[BaseModel]: ...


K = TypeVar("K", bound=HasTag)


class Registry(Generic[K]):
    """The kinds of one seam, keyed by tag, in registration order."""

    def __init__(self, seam: str, key: str, keyed: bool = True) -> None:
        self.seam = seam
        """What the kinds are, for messages: `launcher`, `build type`, `check type`."""
        self.key = key
        """The config field holding the tag: `launcher` or `type`."""
        self.keyed = keyed
        """Its kinds' config models carry `key: Literal[tag]` (a union's discriminator)."""
        self._kinds: dict[str, K] = {}
        _REGISTRIES.append(self)

    def register(self, kind: K) -> K:
        """Add a kind; the config models then accept its tag. A tag is registered once, and
        its facts are checked now (ValueError, one line naming the fact), never later in a
        command."""
        if kind.tag in self._kinds:
            raise ValueError(f"{self.seam} {kind.tag!r} is registered already")
        self._declared(kind)
        self._kinds[kind.tag] = kind
        self._in_builtin_order()
        _changed()
        return kind

    def _declared(self, kind: K) -> None:
        """The facts a kind must declare make sense: a tag, a config model that carries it
        (`launcher: Literal["mine"]`), and field names (FIELD_FACTS) its model has."""
        name = f"{self.seam} {kind.tag!r}"
        if not isinstance(kind.tag, str) or not kind.tag:
            raise ValueError(f"{self.seam} {kind.tag!r}: the tag must be a non-empty string")
        if not (isinstance(kind.config, type) and issubclass(kind.config, BaseModel)):
            raise ValueError(f"{name}: config must be a pydantic model, not {kind.config!r}")
        fields = kind.config.model_fields
        if self.keyed and get_args(getattr(fields.get(self.key), "annotation", None)) != (
            kind.tag,
        ):
            raise ValueError(
                f"{name}: config {kind.config.__name__} needs the field "
                f"`{self.key}: Literal[{kind.tag!r}]`"
            )
        if not callable(getattr(kind, "make", None)):
            raise ValueError(f"{name}: make must be callable (config, context) -> the object")
        for fact in FIELD_FACTS:
            value = getattr(kind, fact, None)
            named = [value] if isinstance(value, str) else list(value or ())
            unknown = [n for n in named if n not in fields]
            if unknown:
                raise ValueError(
                    f"{name}: {fact} names {unknown[0]!r}, which is no field of "
                    f"{kind.config.__name__}"
                )

    def _in_builtin_order(self) -> None:
        """Built-in kinds in BUILTIN's order (imports may run in another), then the rest."""
        rank = {module: i for i, module in enumerate(BUILTIN)}
        kinds = sorted(self._kinds.values(), key=lambda k: rank.get(k.config.__module__, len(rank)))
        self._kinds = {k.tag: k for k in kinds}

    def unregister(self, tag: str) -> None:
        """Remove a kind (a test's toy, when the test ends)."""
        del self._kinds[tag]
        _changed()

    @contextmanager
    def registered(self, kind: K) -> Iterator[K]:
        """A kind registered for the length of a `with` block."""
        self.register(kind)
        try:
            yield kind
        finally:
            self.unregister(kind.tag)

    def __getitem__(self, tag: str) -> K:
        try:
            return self._kinds[tag]
        except KeyError:
            raise UnknownKind(f"no {self.seam} {tag!r} (known: {self.known()})") from None

    def __contains__(self, tag: object) -> bool:
        return tag in self._kinds

    def kinds(self) -> list[K]:
        """Every kind, in registration order."""
        return list(self._kinds.values())

    def tags(self) -> list[str]:
        return [k.tag for k in self.kinds()]

    def known(self) -> str:
        """The tags, as error messages list them: `process, docker, slurm`."""
        return ", ".join(self.tags())


class Tagged:
    """`Annotated[Base, Tagged(REGISTRY)]`: a discriminated union of the registry's config
    models on its key, built when the model holding the field is (and rebuilt when a kind
    registers)."""

    def __init__(self, registry: Registry[Any]) -> None:
        self.registry = registry

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        choices: dict[Any, CoreSchema] = {
            k.tag: handler.generate_schema(k.config) for k in self.registry.kinds()
        }
        if not choices:  # nothing loaded yet (plugins.load): a union of none accepts nothing
            return core_schema.no_info_plain_validator_function(self._none_loaded)
        return core_schema.tagged_union_schema(choices, discriminator=self.registry.key)

    def _none_loaded(self, value: Any) -> Any:
        raise ValueError(f"no {self.registry.seam} is loaded (plugins.load() was not called)")


_REGISTRIES: list[Registry[Any]] = []
_listeners: list[Callable[[], None]] = []
_held = 0
_missed = False


def registries() -> list[Registry[Any]]:
    """Every registry of kinds (launchers, build types, checks, sources)."""
    return list(_REGISTRIES)


def on_change(listener: Callable[[], None]) -> None:
    """Call `listener` whenever a kind registers or leaves (the config models rebuild their
    unions); while `held()`, once at its end."""
    _listeners.append(listener)


def _changed() -> None:
    global _missed
    if _held:
        _missed = True
        return
    for listener in _listeners:
        listener()


@contextmanager
def held() -> Iterator[None]:
    """Many kinds registered at once (plugins.load): the listeners hear of them once, after,
    and the built-in kinds are put in BUILTIN's order."""
    global _held, _missed
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if not _held:
            for registry in _REGISTRIES:
                registry._in_builtin_order()
            if _missed:
                _missed = False
                _changed()


def _nothing(*_: Any) -> None:
    return None


def _same(cfg: Any, *_: Any) -> Any:
    return cfg


# ---- launchers ---------------------------------------------------------------------------


def _quiet(_: str) -> None:
    """A launcher's report where nobody listens."""


@dataclass(frozen=True)
class LauncherContext:
    """What a launcher is made with besides its config (Setup.launcher), passed whole."""

    base_dir: Path
    """The config's folder."""
    run_id: str
    env: Mapping[str, str] = field(default_factory=dict)
    """The config's server.env, expanded."""
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    """The caller's environment (a process server inherits it; default: this process's)."""
    secret_names: Sequence[str] = ()
    builder: Builder | None = None
    logins: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """Registry host → what `docker login` stored for it."""
    report: Callable[[str], None] = _quiet
    """Where a launcher says what it does (a pull, a wait)."""
    slot_devices: Sequence[Sequence[str] | None] = ()
    """Per slot, the GPUs its server alone uses."""
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


@dataclass(frozen=True)
class PreflightContext:
    """What a launcher's pre-flight (before anything starts) may look at."""

    base_dir: Path
    env: Mapping[str, str]
    """server.env, expanded."""
    environ: Mapping[str, str]
    ends: tuple[str, str]
    """candidates.good and candidates.bad as written (refs, or images)."""


@dataclass(frozen=True)
class Preflight:
    """What a launcher's pre-flight found: its config with secrets expanded, and secrets."""

    server: Any
    secrets: list[str] = field(default_factory=list)
    """Values every output masks."""
    logins: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """Registry host → what `docker login` stored for it."""


@dataclass(frozen=True)
class DeviceContext:
    """What a launcher's slot split looks at: `parallel`, the environments and the GPUs."""

    parallel: int
    env: Mapping[str, str]
    environ: Mapping[str, str]
    gpus: Callable[[], list[str] | None]
    """The node's GPUs, asked only when needed."""


@dataclass(frozen=True)
class EndContext:
    """What a launcher needs to resolve an end that is not a ref (an image)."""

    launcher: Callable[[str], AbstractContextManager[Launcher]]
    """This config's launcher, by run id, closed on the way out."""
    source: Repository


def _no_devices(cfg: Any, ctx: DeviceContext) -> list[tuple[str, ...] | None]:
    return []


@dataclass(frozen=True)
class LauncherKind:
    """A launcher: `server.launcher: <tag>`."""

    tag: str
    config: type[BaseModel]
    """Its `server:` model, a config.ServerBase with `launcher: Literal[tag]`."""
    make: Callable[[Any, LauncherContext], Launcher]
    runs_images: bool = False
    """Its builds are images (image builds and `image:` bases fit it; a venv does not)."""
    validate: Callable[[Any, Any], None] = _nothing
    """Rules over the whole config (a config.Config) that are this launcher's; ValueError."""
    preflight: Callable[[Any, PreflightContext], Preflight] = lambda cfg, _: Preflight(cfg)
    """Checks before anything starts (tools on PATH, a folder); ConfigError."""
    devices: Callable[[Any, DeviceContext], list[tuple[str, ...] | None]] = _no_devices
    """Per slot, the GPUs its server alone uses; []: as configured."""
    expand_paths: Callable[[Any, Mapping[str, str]], Any] = _same
    """Its config with `${VAR}` expanded in its paths."""
    resolve_end: Callable[[Any, EndContext, str, str], Candidate] | None = None
    """An end that is not a ref (an image that names its commit); None: refs only."""
    placement: frozenset[str] = frozenset()
    """Its `server:` fields that say where, how long or on whose account, never what the
    server answers (a Slurm account, retries): left out of the config digest, so changing
    one resumes. Fields that choose the hardware (partition, GPU type) are not placement."""
    inherits: bool = False
    """Its server inherits the caller's environment: the engine's variables in it
    (config.ENGINE_VARIABLE) count in the digest as server.env does."""
    shape: frozenset[str] = field(kw_only=True)
    """Required: its `server:` fields that shape what the server answers (a command, an
    image), beyond server.env (config.SERVER_SHAPE): the golden's identity, so a golden
    recorded with another value is refused."""
    argv: tuple[str, ...] = field(kw_only=True)
    """Required: its `server:` fields that are argument lists (`command`, an image's `args`),
    () for none: flags named like secrets in them are masked, and the key `--api-key` names
    is sent with every request."""
    flags: tuple[str, ...] | None = None
    """The argument lists that end in the server's own flags: `probe.fast.args` go after
    them; None: every list of `argv`."""
    cache_mount: Callable[[Any, Path], Any] | None = None
    """Its `server:` config with the engine cache's folder (absolute) mounted where its server
    runs; None: a launcher that runs images gets it in `volumes` where it has them, another
    shares this machine's files."""
    cache_place: Literal["here", "node", "configured"] = "here"
    """Where its servers find the engine cache's folder (enginecache.Place): `here` (this
    machine's files), `node` (the node's: `{node}` in the variables is filled there), or
    `configured` (no default folder: only a `probe.engine_cache.dir` the config names)."""
    caveats: Callable[[Any], list[str]] = lambda cfg: []
    """What a run's report must say of its `server:` config, a sentence each: what this setup
    cannot promise (kubernetes: echoes of secret_env values it never reads, unmasked)."""
    reap: Callable[[Mapping[str, str]], Leftovers | None] | None = None
    """`reap` without a config: this node's servers of killed runs removed (the caller's
    environment in); None where it finds nowhere to look (no engine, no queue)."""
    shown_argv: str | None = None
    """The `server:` field `candidates` prints as the server's command line; None: the first
    of `argv` (none where `argv` is empty)."""
    shown_worker: str | None = None
    """The `server:` field `candidates` prints as the command line of a multi-node probe's
    other nodes (`worker_command`; unset: the head's); None: a probe is one node."""

    def shown(self, server: Any) -> list[str] | None:
        """The server's command line as `candidates` prints it (shown_argv); None: none."""
        name = self.shown_argv if self.shown_argv is not None else next(iter(self.argv), None)
        return None if name is None else list(getattr(server, name) or [])

    def fast_argv(self) -> tuple[str, ...]:
        """The argument lists `probe.fast.args` go after (`flags`, else `argv`)."""
        return self.argv if self.flags is None else self.flags


@dataclass(frozen=True)
class Leftovers:
    """What a launcher's `reap` did on this node."""

    looked: str
    """Where it looked: `the Docker engine`, `the Slurm queue`."""
    removed: list[str] = field(default_factory=list)
    """One line per server removed."""
    failed: list[str] = field(default_factory=list)
    """Why it could not look, or remove one."""


LAUNCHERS: Registry[LauncherKind] = Registry("launcher", "launcher")


# ---- build strategies --------------------------------------------------------------------


@dataclass(frozen=True)
class StrategyRules:
    """What a strategy's config rules look at beyond its own keys."""

    key: str
    """`build.strategies.<i>`, for messages."""
    before: Sequence[Any]
    """The strategies before it (their configs)."""
    images: bool
    """The launcher's builds are images (docker)."""


@dataclass(frozen=True)
class BuildContext:
    """What a strategy is made with besides its config."""

    key: str
    """`build.strategies.<i>`, for messages."""
    index: int
    source: Repository
    base_dir: Path
    environ: Mapping[str, str]
    """The caller's environment and server.env, expanded."""
    secret_names: list[str]
    resolve: Callable[[str, str], str]
    """A ref (or an image naming its commit) to a commit; ConfigError naming the key."""
    images: bool
    """The launcher's builds are images (docker)."""


@dataclass(frozen=True)
class StrategyKind:
    """A build strategy: `build.strategies: [{type: <tag>}]`."""

    tag: str
    config: type[BaseModel]
    """Its model, a config.StrategyBase with `type: Literal[tag]`."""
    make: Callable[[Any, BuildContext], tuple[BuildStrategy, ImageTarget | None]]
    """The strategy, and where the launcher runs images: the image its builds go into."""
    validate: Callable[[Any, StrategyRules], None] = _nothing
    """Its rules against the launcher and the strategies before it; ValueError."""
    secrets: Callable[[Any, Mapping[str, str], int], list[str]] = lambda *_: []
    """Secret values its config holds (a login in an index URL), to mask everywhere."""
    repository: bool = False
    """Its builds read the candidates' repository (a commit's files): a config without
    `candidates.repo` cannot use it."""


STRATEGIES: Registry[StrategyKind] = Registry("build type", "type")


# ---- checks ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckContext:
    """What a check is made with besides its config."""

    key: str
    """`checks.<i>`, for messages."""
    base_dir: Path
    """The config's folder (files are relative to it)."""


@dataclass(frozen=True)
class CheckKind:
    """A check: `checks: [{type: <tag>}]`."""

    tag: str
    config: type[BaseModel]
    """Its model, a config.CheckBase with `type: Literal[tag]`."""
    make: Callable[[Any, CheckContext], Check]
    default: bool = False
    """Run by a config without `checks:`."""
    cost: int | None = None
    """Where it runs in a probe's suite, cheapest first (`probe.early_stop` stops at the first
    failure): canary 0, expect 1, logprobs 2, eval 3; None: at least an eval's."""
    neutral: frozenset[str] = frozenset()
    """Its settings that judge against a golden, or say how fast or from where, without
    shaping what it records (thresholds, concurrency): changing them keeps the golden."""
    shows: frozenset[str] = frozenset()
    """What the reports draw from its results' details: `divergences` (per-prompt cases with
    the first divergent token and per-position |Δlogprob|), `accuracy` (metrics.accuracy and
    its wilson95 interval)."""


CHECKS: Registry[CheckKind] = Registry("check type", "type")


DEFAULT_COST = 4
"""A check kind that declares no cost runs after the built-in ones (a benchmark harness)."""


def cost_of(name: str) -> int:
    """A check's place in the suite by its kind's declared cost (CheckKind.cost)."""
    kind = CHECKS._kinds.get(name)
    return DEFAULT_COST if kind is None or kind.cost is None else kind.cost


def showing(what: str) -> frozenset[str]:
    """The names of the checks whose details the reports draw as `what` (CheckKind.shows)."""
    return frozenset(k.tag for k in CHECKS.kinds() if what in k.shows)


# ---- candidate sources -------------------------------------------------------------------


@dataclass(frozen=True)
class SourceContext:
    """What a source is opened with besides its config."""

    repo: Path
    """The clone (`--repo`, else candidates.repo against the config's folder)."""
    key: str
    """What named it, for messages: `--repo` or `candidates.repo`."""


@dataclass(frozen=True)
class SourceKind:
    """Where candidates come from: `candidates:` (git today; a `source:` tag arrives with the
    second kind, e.g. package versions for dependency descent)."""

    tag: str
    config: type[BaseModel]
    make: Callable[[Any, SourceContext], Repository]


SOURCES: Registry[SourceKind] = Registry("source", "source", keyed=False)
GIT = "git"
"""The source every config has until `candidates:` names another."""
