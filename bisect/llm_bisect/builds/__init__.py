"""Builds: how a candidate becomes runnable, apart from where it runs (the launcher).

    candidate ─► Builder.route ─► first strategy that applies (or why none does)
                      │                       shown by `candidates` before anything runs
                      ▼
               Builder.build ─► cache/<commit>-<route>-<identity>/  (made once, in place,
                      │         reused by every config that would make the same; leased
                      ▼         while in use, LRU-evicted past the budget: cache.py)
               Build: the folder, its interpreter (`{python}`), env, facts for result.json,
                      the lease the server holds until it stops

Strategies: wheel.py (uv, a per-commit index), overlay.py (the commit's files over a
precompiled install: fixed, or the nearest ancestor's build by an earlier strategy),
command.py (yours), image.py (the launcher's image template: its kind; its strategy,
ImageStrategy, is here); cache.py keeps what they made,
prefetch.py makes the next ones in the background; images.py turns a wheel or
overlay build into an image derived from a base image (Docker launcher). A strategy says whether it
applies without building anything (`applies`), what makes its build (`identity`: the
cache key), then makes the build (`make`).
A build that fails, however it fails, is a LaunchError: the probe is `skip`, never bad.
This package registers no kind and imports neither kinds nor config: it is the seam
kinds.py names (Builder, Strategy, ImageTarget).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigError, LaunchError
from ..jsonvalue import Json
from ..logs import tail
from ..model import Candidate
from .cache import BuildCache, as_json


class Held(Protocol):
    """What holds a build in use (a cache Lease, or several)."""

    def release(self) -> None: ...


@dataclass(frozen=True)
class Leases:
    """Several builds held as one: an overlay on `nearest` runs from its base's build too."""

    held: tuple[Held, ...]

    def release(self) -> None:
        for lease in self.held:
            lease.release()


@dataclass(frozen=True)
class Build:
    """A runnable candidate."""

    route: str
    """The strategy that made it: wheel, overlay, command."""
    folder: Path
    """`{build}` in server.command."""
    python: str
    """`{python}` in server.command: the build's interpreter."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Added to the server's environment (an overlay's PYTHONPATH)."""
    facts: Mapping[str, Any] = field(default_factory=dict)
    """What result.json records of it (base commit, files written, seconds)."""
    lease: Held | None = field(default=None, compare=False, repr=False)
    """Holds it in use (never evicted) until released: whoever runs from it releases it."""
    commit: str = ""
    """The engine's commit that `{commit}` and `{short}` name in the server command where it
    is not the candidate's (a dependency's release layered over an engine held at one
    commit); "": the candidate's."""

    def release(self) -> None:
        """Done with it: the cache may evict it."""
        if self.lease is not None:
            self.lease.release()


@dataclass(frozen=True)
class ImageTarget:
    """What a wheel or overlay build is applied to with the Docker launcher (images.py)."""

    base: str
    """The base image: a reference in the engine or a registry; "" for an overlay on
    `nearest` (its base's image)."""
    python: str = "python3"
    """The base image's interpreter (on its PATH, or a path)."""
    package: str = "vllm"


@dataclass(frozen=True)
class Route:
    """How a candidate would be built, or why it cannot be."""

    strategy: str | None
    """The strategy that applies; None when none does."""
    detail: str
    """What it will do, or (no strategy) why each one does not apply."""
    index: int = -1
    """The strategy's place in the config (two overlays share a name)."""
    base: str | None = None
    """The commit an overlay on `base: nearest` starts from (part of its build's key)."""

    def __str__(self) -> str:
        return f"{self.strategy}: {self.detail}" if self.strategy else f"no build: {self.detail}"


class Strategy(Protocol):
    """One way to build a candidate."""

    name: str
    """The route it gives: image, wheel, overlay, command."""
    cache_name: str
    """Its builds' name in the cache (`<commit>-<cache_name>`): a stage for an image
    differs from a build run in place."""

    def applies(self, candidate: Candidate) -> tuple[bool, str]:
        """Whether it can build this candidate, and what it will do or why not. Cheap."""
        ...

    def identity(self, candidate: Candidate) -> Mapping[str, Any]:
        """All that makes its build of this candidate besides the commit (JSON values): its
        config, its base, the platform, tool versions. The cache key: a build is reused
        only where the identity is the same."""
        ...

    def make(self, candidate: Candidate, out: Path, log: Path) -> dict[str, Json]:
        """Build into `out` (a fresh folder); its facts. LaunchError when the build fails."""
        ...

    def load(self, candidate: Candidate, folder: Path, facts: Mapping[str, Any]) -> Build:
        """The Build held by a finished folder."""
        ...


@runtime_checkable
class Surveyed(Protocol):
    """A strategy that reads what it needs of a whole range at once (overlay route facts)."""

    def survey(self, commits: Sequence[str]) -> None: ...


@runtime_checkable
class Precompiled(Protocol):
    """A strategy that says itself which commits it holds a precompiled artifact of."""

    def precompiled(self, candidate: Candidate) -> bool: ...


@runtime_checkable
class Based(Protocol):
    """A strategy whose builds start from an earlier strategy's (an overlay on `nearest`)."""

    def attach(self, earlier: Any) -> None: ...

    def base_of(self, candidate: Candidate) -> str | None: ...

    def detached(self) -> Strategy:
        """The same strategy, attached to nothing and knowing nothing of routes yet (the
        Builder of another engine attaches it: see Builder.on_engine)."""
        ...


ImageLookup = Callable[[Candidate], tuple[bool | None, str]]
"""One Docker engine's answer: (does the candidate's image exist?, the image or why not)."""


class ImageStrategy:
    """The `image` route: the launcher's image template, as it has always been."""

    name = "image"
    cache_name = "image"

    def __init__(self, lookup: ImageLookup | None = None) -> None:
        self._lookup = lookup
        """One engine's (Builder.on_engine): (exists?, the image or why not) without pulling;
        None: no engine, no image route."""

    def identity(self, candidate: Candidate) -> Mapping[str, Any]:
        return {}  # never cached: the launcher pulls it

    def applies(self, candidate: Candidate) -> tuple[bool, str]:
        if self._lookup is None:
            return False, "images run with launcher: docker"
        found, detail = self._lookup(candidate)
        if found is None:  # a pull would fail as the lookup did: let the next route try
            return False, f"could not tell whether it exists: {detail}"
        return found, detail

    def make(self, candidate: Candidate, out: Path, log: Path) -> dict[str, Json]:
        raise LaunchError("image: pulled by the Docker launcher, not built")

    def load(self, candidate: Candidate, folder: Path, facts: Mapping[str, Any]) -> Build:
        raise LaunchError("image: pulled by the Docker launcher, not built")


class Builder:
    """The strategies of a config, in order, over one cache.

    Safe to call from the prefetch thread, the probes of several slots and other runs
    sharing the cache at once: a build is made once (the key's lock), and another caller
    waits for it.
    """

    def __init__(
        self,
        strategies: Sequence[Strategy],
        cache: BuildCache,
        targets: Mapping[int, ImageTarget] | None = None,
    ) -> None:
        self.strategies = list(strategies)
        self.cache = cache
        self.targets = dict(targets or {})
        """Strategy (its place) → the base image its builds are applied to (Docker launcher
        only; an overlay on `nearest` has none of its own: its base's image)."""
        self._logs: dict[str, Path] = {}
        self._applies: dict[tuple[int, str], tuple[bool, str]] = {}
        """(strategy, commit) → what its `applies` said: an index or registry is asked once."""
        self._surveyed: tuple[Candidate, ...] = ()
        for i, strategy in enumerate(self.strategies):
            if isinstance(strategy, Based):
                strategy.attach(Earlier(self, i))

    def on_engine(self, images: ImageLookup) -> Builder:
        """The builder as one Docker engine sees it: its `image` routes ask that engine
        (`images`), and so do the routes that follow from them (an overlay's base is the
        nearest commit with an image there); the cache and the other strategies are shared.
        Each engine gets its own: what one engine holds says nothing of another's."""
        strategies = [
            ImageStrategy(images)
            if isinstance(s, ImageStrategy)
            else s.detached()
            if isinstance(s, Based)
            else s
            for s in self.strategies
        ]
        engine = Builder(strategies, self.cache, self.targets)
        if self._surveyed:
            engine.survey(self._surveyed)
        return engine

    def survey(self, candidates: Sequence[Candidate]) -> None:
        """The range routes will be asked for (oldest first): strategies that can read what
        they need of it at once do so as routes are asked for."""
        self._surveyed = tuple(candidates)
        commits = [c.commit for c in candidates]
        for strategy in self.strategies:
            if isinstance(strategy, Surveyed):
                strategy.survey(commits)

    def applies(self, index: int, candidate: Candidate) -> tuple[bool, str]:
        """What strategy `index` says of the candidate, asked once per commit."""
        key = (index, candidate.commit)
        found = self._applies.get(key)
        if found is None:
            found = self._applies[key] = self.strategies[index].applies(candidate)
        return found

    def route(self, candidate: Candidate) -> Route:
        why = []
        for i, strategy in enumerate(self.strategies):
            ok, detail = self.applies(i, candidate)
            if ok:
                base = strategy.base_of(candidate) if isinstance(strategy, Based) else None
                return Route(strategy.name, detail, i, base)
            why.append(f"{strategy.name}: {detail}")
        return Route(None, "; ".join(why))

    def artifact(self, candidate: Candidate, before: int) -> int | None:
        """The first strategy before `before` with a precompiled artifact of the candidate
        (an image or wheel that exists, an install of that very commit, a build of it in
        the cache but an overlay's); None when none has one."""
        for i, strategy in enumerate(self.strategies[:before]):
            if isinstance(strategy, Precompiled):
                found = strategy.precompiled(candidate)
            else:  # a build in the cache, or a published image or wheel
                route = Route(strategy.name, "", i)
                found = (
                    strategy.name != "image" and self.cache.has(*self.key(candidate, route))
                ) or (strategy.name in ("image", "wheel") and self.applies(i, candidate)[0])
            if found:
                return i
        return None

    def base_of(self, candidate: Candidate, route: Route | None = None) -> tuple[Candidate, int]:
        """The base an overlay on `nearest` starts from, and the strategy whose artifact it
        is; LaunchError when the route has none (or lost its artifact since)."""
        route = route or self.route(candidate)
        if route.base is None:
            raise LaunchError(f"{route.strategy}: no base for {candidate.short}")
        base = Candidate(route.base)
        index = self.artifact(base, route.index)
        if index is None:
            raise LaunchError(f"{route.strategy}: the base {base.short} has no artifact any more")
        return base, index

    def key(self, candidate: Candidate, route: Route) -> tuple[str, dict[str, Json]]:
        """The cache key of the candidate's build by the route's strategy, and its identity
        (a `nearest` overlay's base is part of it: another base is another build)."""
        strategy = self.strategies[route.index]
        identity = as_json({"strategy": strategy.cache_name, **strategy.identity(candidate)})
        text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        return f"{candidate.commit}-{strategy.cache_name}-{digest}", identity

    def log_of(self, candidate: Candidate) -> Path:
        """Where the build of this candidate logs (kept beside the cache)."""
        if candidate.commit in self._logs:
            return self._logs[candidate.commit]
        route = self.route(candidate)
        if route.strategy is None:
            return self.cache.root / "logs" / f"{candidate.commit}.log"
        return self.cache.log(self.key(candidate, route)[0])

    def cached(self, candidate: Candidate, route: Route | None = None) -> bool:
        """Whether the candidate's build is in the cache (`route`: already worked out)."""
        route = route or self.route(candidate)
        return route.strategy is not None and self.cache.has(*self.key(candidate, route))

    def build(self, candidate: Candidate) -> Build:
        """The candidate's build, from the cache or made now, leased: release it when done
        with it. LaunchError when it cannot be made; ConfigError when the cache cannot
        be written."""
        route = self.route(candidate)
        if route.strategy is None:
            raise LaunchError(str(route))
        return self.build_by(route, candidate)

    def build_by(self, route: Route, candidate: Candidate) -> Build:
        """The candidate's build by this route's strategy, leased (see `build`)."""
        strategy = self.strategies[route.index]
        key, identity = self.key(candidate, route)
        log = self._logs[candidate.commit] = self.cache.log(key)

        def make(folder: Path) -> Mapping[str, Any]:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text("")
            return _made(strategy, candidate, folder, log)

        try:
            lease, made = self.cache.obtain(key, identity, make)
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise ConfigError(f"build.cache.dir: cannot use '{self.cache.root}' ({why})") from exc
        try:
            build = strategy.load(candidate, lease.folder, lease.facts)
        except BaseException:
            lease.release()
            raise
        facts = {**build.facts, "route": build.route, "cached": not made}
        held = lease if build.lease is None else Leases((lease, build.lease))
        return replace(build, facts=facts, lease=held)


def _made(strategy: Strategy, candidate: Candidate, out: Path, log: Path) -> dict[str, Json]:
    """What the strategy made; any failure (a file system's, a repository's) is the build's:
    a LaunchError with its reason, so the probe is skip and a resumed run says it again."""
    try:
        return strategy.make(candidate, out, log)
    except LaunchError:
        raise
    except (OSError, ValueError, shutil.Error) as exc:
        with log.open("a") as f:
            f.write(f"{strategy.name}: {type(exc).__name__}: {exc}\n")
        raise LaunchError(f"{strategy.name}: the build failed: {exc}", tail(log)) from None


class Earlier:
    """The strategies before one, as an overlay on `nearest` sees them (overlay.Earlier)."""

    def __init__(self, builder: Builder, index: int) -> None:
        self.builder = builder
        self.index = index

    def artifact(self, commit: str) -> str | None:
        found = self.builder.artifact(Candidate(commit), self.index)
        return self.builder.strategies[found].name if found is not None else None

    def build(self, commit: str) -> Build:
        base = Candidate(commit)
        found = self.builder.artifact(base, self.index)
        if found is None:
            raise LaunchError(f"overlay: the base {base.short} has no precompiled artifact")
        route = Route(self.builder.strategies[found].name, "the base of an overlay", found)
        return self.builder.build_by(route, base)

    def names(self) -> list[str]:
        return [s.name for s in self.builder.strategies[: self.index]]


def base_image_fits(cfg_type: str, image: str | None, key: str, images: bool) -> None:
    """A build applied to a base: an image (`image:`) exactly where the launcher runs images
    (`images`); ValueError naming `key` (`build.strategies.<i>`)."""
    if images and image is None:
        raise ValueError(
            f"{key}: with launcher: docker a {cfg_type} build needs image: "
            "(the base image it is applied to)"
        )
    if image is not None and not images:
        raise ValueError(f"{key}: image: is for launcher: docker")
