"""The Docker launcher: one container image per candidate, on a GPU node's engine.

    artifact(c)  engine, then registry manifest  → exists? digest? size?   (nothing pulled)
    launch(c)    pull (by digest) → create → start → stream logs → ready → checks
    __exit__     stop (SIGTERM, then SIGKILL after stop_timeout) and remove, always
    reap()       remove the containers killed llm-bisect processes left behind (any run or
                 command: by owner label, `host:pid:start`, checked against live processes)
    prefetch(cs) make ready the images that could come next, in the background, within a
                 disk budget (builds/prefetch.py); nothing new starts while checks run

    docker_engine.py   one engine: images, containers, reaping (docker.errors end there)
    docker_images.py   what an image is: lookup, labels, pulls (by digest), prefetch pulls
    docker.py          the launcher: which image a candidate runs, its container, its server

With `build:` a candidate's route is image (the template, as above), or wheel or
overlay: an image derived from a base image (builds/images.py), made before the
probe or by prefetch, reused while the base is the same. Each engine routes by its own
images (Builder.on_engine): a `docker_hosts` engine without an image does not borrow
another's answer.

Each slot gets its own host port (a port another process took before the container
started: the container starts again on another) and, given `slot_devices`, its own GPUs.
"""

from __future__ import annotations

import json
import math
import shutil
import threading
import uuid
from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Literal, TypedDict

import docker
import docker.errors
import docker.types
from docker.models.containers import Container
from docker.models.images import Image
from pydantic import Field, field_validator

from .. import collectenv, escape as esc, weights
from ..builds import ImageTarget, Route
from ..builds.images import BUILD_LABEL, ImageDeriver, derived_ref, recorded
from ..builds.prefetch import Prefetcher
from ..config import ServerBase, SlotGpus, Strict, check_placeholders
from ..errors import ConfigError, LaunchError, PortTaken, ServerExited
from ..fingerprint import Facts, package_probe_source
from ..jsonvalue import Json
from ..kinds import (
    LAUNCHERS,
    DeviceContext,
    LauncherContext,
    LauncherKind,
    Leftovers,
    Preflight,
    PreflightContext,
)
from ..ledger import load as ledger_load
from ..model import Candidate
from ..redact import Masker
from ..registry import RegistryClient, parse_image_ref
from ..secretnames import argv_secrets
from ..sources.images import resolve_image_end
from ..templates import IMAGE_PLACEHOLDERS, expand_value, fill
from . import INSTRUMENT_DIR, Artifact, Instrument, Launcher
from .common import (
    LoggedServer,
    PortBook,
    last_json,
    owner_label,
    placement_facts,
    stranger_on,
    wait_ready,
    weights_facts,
)
from .devices import EXAMPLE, slot_devices
from .docker_engine import (
    COMMIT_LABEL,
    OWNER_LABEL,
    RUN_LABEL,
    Engine,
    docker_message,
    reap_engine as reap_engine,  # `llm-bisect reap` (app.py)
)
from .docker_images import (
    Images,
    docker_logins as docker_logins,  # app.py
)


def ulimit_list(ulimits: Mapping[str, Any]) -> list[docker.types.Ulimit]:
    out = []
    for name, value in ulimits.items():
        soft, hard = (value, value) if isinstance(value, int) else (value.soft, value.hard)
        out.append(docker.types.Ulimit(name=name, soft=soft, hard=hard))
    return out


def device_requests(gpus: str | int | list[str] | None) -> list[docker.types.DeviceRequest]:
    """`--gpus all` / `--gpus 8` / `--gpus '"device=0,1"'` as the engine's device requests."""
    if gpus is None:
        return []
    if gpus == "all":
        return [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if isinstance(gpus, int):
        return [docker.types.DeviceRequest(count=gpus, capabilities=[["gpu"]])]
    return [docker.types.DeviceRequest(device_ids=list(gpus), capabilities=[["gpu"]])]


def volume_binds(volumes: Sequence[str], base_dir: Path) -> list[str]:
    """`HOST:CONTAINER[:MODE]` with relative host paths made absolute; named volumes kept."""
    binds = []
    for spec in volumes:
        host, sep, rest = spec.partition(":")
        if host.startswith((".", "~")) or "/" in host:
            host = str((base_dir / Path(host).expanduser()).resolve())
        binds.append(f"{host}{sep}{rest}")
    return binds


class ContainerSpec(TypedDict, total=False):
    """The keyword arguments of docker-py's `containers.create` a probe passes."""

    image: str
    command: list[str]
    environment: dict[str, str]
    labels: dict[str, str]
    name: str
    detach: bool
    device_requests: list[docker.types.DeviceRequest]
    volumes: list[str]
    ulimits: list[docker.types.Ulimit]
    init: bool
    network_mode: str
    ports: dict[str, tuple[str, int]]
    entrypoint: list[str]
    user: str
    ipc_mode: str
    shm_size: str


@dataclass(frozen=True)
class Containers:
    """What every container of one launcher shares: its run's id (a label), the config's
    folder (relative volumes), server.env, the harness process (`owner_label()`, so reap()
    can tell live runs) and the address its ports bind to."""

    run_id: str
    base_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    owner: str = ""
    bind: str = "127.0.0.1"


def container_spec(
    cfg: DockerServerConfig,
    shared: Containers,
    *,
    image: str,
    ref: str | None = None,
    candidate: Candidate,
    port: int,
    host_port: int,
    devices: Sequence[str] | None = None,
) -> ContainerSpec:
    """The keyword arguments of `containers.create` for one probe. Pure.

    `image` is what runs (an image id pins it); `ref` is the reference `{image}` names;
    `devices`: the slot's own GPUs, instead of `gpus`.
    """
    env, run_id, base_dir, owner, bind = (
        shared.env, shared.run_id, shared.base_dir, shared.owner, shared.bind
    )  # fmt: skip
    values = {
        "commit": candidate.commit,
        "short": candidate.short,
        "port": str(port),
        "image": ref or image,
    }
    spec: ContainerSpec = {
        "image": image,
        "command": [fill(a, values) for a in cfg.args],
        "environment": dict(env),
        "labels": {RUN_LABEL: run_id, COMMIT_LABEL: candidate.commit, OWNER_LABEL: owner},
        "name": f"llm-bisect-{candidate.short}-{uuid.uuid4().hex[:6]}",
        "detach": True,
        "device_requests": device_requests(list(devices) if devices else cfg.gpus),
        "volumes": volume_binds(cfg.volumes, base_dir),
        "ulimits": ulimit_list(cfg.ulimits),
        "init": cfg.init,
    }
    if cfg.network_mode == "host":
        spec["network_mode"] = "host"
    else:
        if cfg.network_mode:
            spec["network_mode"] = cfg.network_mode
        spec["ports"] = {f"{port}/tcp": (bind, host_port)}
    if cfg.entrypoint is not None:
        spec["entrypoint"] = cfg.entrypoint
    if cfg.user is not None:
        spec["user"] = cfg.user
    if cfg.ipc is not None:
        spec["ipc_mode"] = cfg.ipc
    if cfg.shm_size is not None:
        spec["shm_size"] = cfg.shm_size
    return spec


class DockerServer(LoggedServer):
    """One container. Enter pulls, creates and starts it; exit stops and removes it."""

    def __init__(
        self,
        launcher: DockerLauncher,
        candidate: Candidate,
        probe_dir: Path,
        instrument: Instrument | None = None,
        slot: int = 0,
    ) -> None:
        self.launcher = launcher
        self.candidate = candidate
        self.instrument = instrument
        self.log_path = probe_dir / "server.log"
        self.secrets = launcher.secrets
        self.devices = launcher.slot_devices[slot] if slot < len(launcher.slot_devices) else None
        """The slot's own GPUs (None: `gpus` as configured)."""
        self._ports: PortBook | None = launcher.ports
        self._use_port(launcher.ports.take())
        self.container: Container | None = None
        self.image: Image | None = None
        self.command = ""
        """The `docker run` line a person types to start the same container."""
        self._log: IO[bytes] | None = None
        self._log_thread: threading.Thread | None = None

    def __enter__(self) -> DockerServer:
        try:
            try:
                self.image = self.launcher.ensure_image(self.candidate)
            finally:
                self.launcher.keep_build_log(self.candidate, self.log_path.parent)
            spec = self.spec(self.image)
            if self.instrument is not None:
                instrument_spec(spec, self.instrument, self.image)
            self.command = run_line(
                spec, self.launcher.image_ref(self.candidate), self.launcher.secret_names
            )
            self.container = self.launcher.engine.create(spec)
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = self.log_path.open("ab")
            self._start()
        except docker.errors.DockerException as exc:
            self.stop()
            raise LaunchError(f"docker: {docker_message(exc)}", self.log_tail()) from exc
        except BaseException:
            self.stop()
            raise
        self._log_thread = threading.Thread(target=self._follow_logs, daemon=True)
        self._log_thread.start()
        return self

    def _use_port(self, host_port: int) -> None:
        self.host_port = host_port
        self.port = (
            host_port if self.launcher.cfg.network_mode == "host" else self.launcher.cfg.port
        )
        self.base_url = f"http://{self.launcher.engine.address}:{host_port}"

    def spec(self, image: Image) -> ContainerSpec:
        """The `containers.create` arguments of this server (its slot's port and devices)."""
        launcher = self.launcher
        return container_spec(
            launcher.cfg,
            Containers(
                launcher.run_id, launcher.base_dir, launcher.env, launcher.owner,
                launcher.engine.bind,
            ),
            image=str(image.id),
            ref=launcher.image_ref(self.candidate),
            candidate=self.candidate,
            port=self.port,
            host_port=self.host_port,
            devices=self.devices,
        )  # fmt: skip

    def _start(self) -> None:
        """Start the container; when another process took its host port first (a lost race:
        a port is free when picked, not when published), create it again on another."""
        for moves in range(PORT_MOVES + 1):
            assert self.container is not None and self.image is not None
            try:
                self.container.start()
                return
            except docker.errors.APIError as exc:
                said = docker_message(exc)
                if moves == PORT_MOVES or not any(m in said for m in _PORT_IN_USE):
                    raise
            old = self.host_port
            with suppress(docker.errors.NotFound):
                self.container.remove(force=True)
            self.container = None
            assert self._ports is not None
            self._use_port(self._ports.take())
            self._ports.give_back(old)
            if self._log is not None:
                self._log.write(
                    f"llm-bisect: host port {old} was taken ({said}); starting the container "
                    f"again on port {self.host_port}\n".encode()
                )
                self._log.flush()
            spec = self.spec(self.image)
            if self.instrument is not None:
                instrument_spec(spec, self.instrument, self.image)
            self.command = run_line(
                spec, self.launcher.image_ref(self.candidate), self.launcher.secret_names
            )
            self.container = self.launcher.engine.create(spec)

    def _follow_logs(self) -> None:
        container, log = self.container, self._log
        if container is None or log is None:
            return
        masker = Masker(self.launcher.secrets)  # the engine cuts long lines into pieces
        with suppress(docker.errors.DockerException, ValueError, OSError):
            for chunk in container.logs(stream=True, follow=True):
                log.write(masker.feed(chunk))
                log.flush()
        with suppress(ValueError, OSError):
            log.write(masker.flush())
            log.flush()

    def stop(self) -> None:
        container, self.container = self.container, None
        if container is not None:
            with suppress(docker.errors.DockerException):
                container.stop(timeout=int(self.launcher.cfg.stop_timeout))
            with suppress(docker.errors.NotFound):
                try:
                    container.remove(force=True)
                except docker.errors.APIError as exc:
                    if "already in progress" not in str(exc):
                        raise LaunchError(f"docker: cannot remove container: {exc}") from exc
        if self._log_thread is not None:
            self._log_thread.join(timeout=5)
            self._log_thread = None
        if self._ports is not None:
            self._ports.give_back(self.host_port)
            self._ports = None
        self._close_log()

    def check_alive(self, wait: float = 0.0) -> None:
        if self.container is None:
            raise ServerExited("the container is not running", None)
        clock, sleep = self.launcher.clock, self.launcher.sleep
        deadline = clock() + wait
        while True:
            try:
                self.container.reload()
            except docker.errors.NotFound:
                raise ServerExited("the container is gone", None) from None
            except docker.errors.DockerException as exc:
                raise LaunchError(f"docker: {docker_message(exc)}") from exc
            state = self.container.attrs.get("State", {})
            if state.get("Status") in ("exited", "dead"):
                code = state.get("ExitCode")
                oom = " (OOM-killed)" if state.get("OOMKilled") else ""
                sleep(0.2)  # let the log stream catch the last lines
                raise ServerExited(f"container exited with code {code}{oom}", code, self.log_tail())
            if clock() >= deadline:
                return
            sleep(0.1)

    def wait_ready(self) -> None:
        cfg = self.launcher.cfg
        wait_ready(
            self,
            cfg.ready_timeout,
            clock=self.launcher.clock,
            sleep=self.launcher.sleep,
            verify=self._verify_port,
        )

    def _verify_port(self) -> None:
        """On the host's network, what answers on the port must be this container's server
        (else the probe is untestable, never another server's verdict); a published port is
        the engine's own, and another engine's host cannot be looked at from here."""
        if self.launcher.cfg.network_mode != "host" or self.launcher.engine.address != "127.0.0.1":
            return
        assert self.container is not None
        try:
            top = self.container.top()
            column = top["Titles"].index("PID")
            pids = frozenset(int(row[column]) for row in top["Processes"] or [])
        except (docker.errors.DockerException, KeyError, ValueError, IndexError, TypeError):
            return
        who = stranger_on(self.host_port, pids=pids)
        if who is not None:
            raise PortTaken(f"port {self.host_port} is served by {who}, not this container")

    def fingerprint(self) -> Facts:
        """Image digest and labels, and the package versions and the weights' revision inside
        the running container."""
        facts: Facts = {}
        if self.image is not None:
            attrs = self.image.attrs
            digests = attrs.get("RepoDigests") or []
            facts["image"] = {
                "ref": self.launcher.image_ref(self.candidate),
                "digest": digests[0] if digests else "",
                "id": self.image.id,
                "labels": dict((attrs.get("Config") or {}).get("Labels") or {}),
            }
        build = self.launcher.build_facts.get(self.candidate.commit)
        if build is not None:
            facts["build"] = dict(build)
        if self.container is not None:
            facts["packages"] = self._packages()
            facts.update(self._weights())
            collectenv.collect_in(
                self._exec,
                self.log_path.parent,
                self.launcher.cfg.collect_env,
                self.candidate,
                self.secrets,
            )
        if self.command:
            facts["command"] = self.command
        if self.devices is not None:
            facts["devices"] = list(self.devices)
        return {**facts, **placement_facts(self.launcher.engine.node, self.launcher.env)}

    def _packages(self) -> dict[str, str]:
        assert self.container is not None
        for python in ("python3", "python"):
            try:
                code, out = self.container.exec_run([python, "-c", package_probe_source()])
            except docker.errors.DockerException:
                return {}
            if code == 0 and isinstance(out, bytes):
                with suppress(ValueError):
                    found: dict[str, str] = json.loads(out.decode().strip().splitlines()[-1])
                    return found
        return {}

    def _weights(self) -> Facts:
        """The weights the container's command line names, resolved inside it (its hub
        cache, its environment); nothing where it cannot tell."""
        assert self.container is not None
        attrs = self.container.attrs
        argv = [str(attrs.get("Path") or ""), *(str(a) for a in attrs.get("Args") or [])]
        wanted = weights.asked(argv)
        if not wanted.get("model"):
            return {}
        for python in dict.fromkeys([collectenv.python_of(argv), "python3", "python"]):
            try:
                code, out = self.container.exec_run(
                    [*_bounded(weights.TIMEOUT_S), python, "-c", weights.probe_source(wanted)]
                )
            except docker.errors.DockerException:
                return {}
            if code == 0 and isinstance(out, bytes):
                return weights_facts(last_json(out))
        return {}

    def _exec(self, argv: Sequence[str], timeout: float) -> tuple[int | None, bytes]:
        """argv in the running container, for at most `timeout` seconds (collectenv.Exec)."""
        assert self.container is not None
        try:
            code, out = self.container.exec_run([*_bounded(timeout), *argv])
        except docker.errors.DockerException as exc:
            raise LaunchError(f"docker exec: {docker_message(exc)}") from None
        return None if code == 124 else code, out if isinstance(out, bytes) else b""


def _bounded(seconds: float) -> tuple[str, ...]:
    """Runs its arguments in a container for at most `seconds` where the image has
    `timeout` (the arguments are never read by the shell)."""
    run = f'if command -v timeout >/dev/null; then exec timeout {seconds:g} "$@"; fi; exec "$@"'
    return ("sh", "-c", run, "sh")


PORT_MOVES = 3
"""How many times a container whose host port was taken starts again on another one."""
_PORT_IN_USE = ("port is already allocated", "address already in use")


def run_line(spec: ContainerSpec, ref: str, secret: Collection[str]) -> str:
    """The `docker run` a person types to start what a container spec starts. Pure.

    Environment variables with their values (`-e NAME=value`), but a `secret`'s by name only
    (`-e NAME` takes the caller's value), so no secret is in the line; `ref` is the image as a
    person names it."""
    args = ["docker", "run", "--rm"]
    if spec.get("init"):
        args.append("--init")
    for req in spec.get("device_requests") or []:
        ids = req.get("DeviceIDs") or []
        count = req.get("Count")
        gpus = f'"device={",".join(ids)}"' if ids else ("all" if count == -1 else str(count))
        args += ["--gpus", gpus]
    for flag, value in (
        ("--ipc", spec.get("ipc_mode")),
        ("--shm-size", spec.get("shm_size")),
        ("--user", spec.get("user")),
    ):
        if value is not None:
            args += [flag, str(value)]
    if spec.get("network_mode"):
        args += ["--network", str(spec["network_mode"])]
    for inside, (host_ip, host_port) in (spec.get("ports") or {}).items():
        args += ["-p", f"{host_ip}:{host_port}:{inside.split('/')[0]}"]
    for bind in spec.get("volumes") or []:
        args += ["-v", bind]
    for limit in spec.get("ulimits") or []:
        args += ["--ulimit", f"{limit['Name']}={limit['Soft']}:{limit['Hard']}"]
    environment = spec.get("environment") or {}
    for name in sorted(environment):
        args += ["-e", name if name in secret else f"{name}={environment[name]}"]
    entrypoint = spec.get("entrypoint")
    if isinstance(entrypoint, str):
        entrypoint = [entrypoint]
    if entrypoint:
        args += ["--entrypoint", entrypoint[0]]
    return esc.shell([*args, ref, *(entrypoint or [])[1:], *spec.get("command", [])])


def instrument_spec(spec: ContainerSpec, instrument: Instrument, image: Image | None) -> None:
    """A container spec with the instrument's arguments, environment and Python paths (each
    folder bind-mounted read-only, first on PYTHONPATH before the image's own)."""
    spec["command"] = [*spec["command"], *instrument.args]
    env = {**spec["environment"], **instrument.env}
    mounts = [f"{INSTRUMENT_DIR}/{i}" for i in range(len(instrument.paths))]
    spec["volumes"] = [
        *spec["volumes"],
        *(f"{p}:{m}:ro" for p, m in zip(instrument.paths, mounts, strict=True)),
    ]
    image_env = (
        dict(
            e.split("=", 1)
            for e in ((image.attrs.get("Config") or {}).get("Env") or [])
            if "=" in e
        )
        if image is not None
        else {}
    )
    if mounts:  # none (the engine cache's folders alone): the image's PYTHONPATH stands
        before = env.get("PYTHONPATH") or image_env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = ":".join([*mounts, before]).rstrip(":")
    spec["environment"] = env


class DockerLauncher:
    """Containers per candidate through one Docker engine; see the module docstring."""

    def __init__(
        self,
        cfg: DockerServerConfig,
        ctx: LauncherContext,
        *,
        engine: str | None = None,
        client: docker.DockerClient | None = None,
        registry: RegistryClient | None = None,
        ports: PortBook | None = None,
    ) -> None:
        """`engine`: a Docker host (one of server.docker_hosts; None: the environment's),
        or `client`, one connected already."""
        self.cfg = cfg
        self.slot_devices = [None if d is None else tuple(d) for d in ctx.slot_devices]
        """Per slot (0 .. parallel-1), the GPUs its container alone uses."""
        self.ports = ports or PortBook()
        self.env = dict(ctx.env)
        self.secret_names = list(ctx.secret_names)
        self.secrets = [self.env[n] for n in ctx.secret_names if n in self.env]
        self.secrets += argv_secrets([*cfg.args, *(cfg.entrypoint or [])])  # a URL login
        if cfg.registry.password:
            self.secrets.append(cfg.registry.password)
        self.base_dir = base_dir = ctx.base_dir
        self.run_id = run_id = ctx.run_id
        self.owner = owner_label()
        self.engine = Engine.connect(engine, client)
        self.report = report = ctx.report
        self.clock = clock = ctx.clock
        self.sleep = ctx.sleep
        builder, logins = ctx.builder, ctx.logins
        self.images = Images(
            self.engine,
            registry
            or RegistryClient(
                username=cfg.registry.username, password=cfg.registry.password, logins=logins
            ),
            pull=cfg.pull,
            report=report,
            clock=clock,
        )
        self.stats = self.images.stats
        self.builder = builder.on_engine(self._template_lookup) if builder is not None else None
        """The config's builder as this engine sees it (its own image routes)."""
        self.deriver = ImageDeriver(
            self.engine.client,
            volumes=volume_binds(cfg.volumes, base_dir),
            labels={RUN_LABEL: run_id, OWNER_LABEL: self.owner},
            cache=str(builder.cache.root) if builder is not None else "",
        )
        self.build_facts: dict[str, dict[str, Json]] = {}
        """Commit → what result.json records of its derived image's build."""
        self._routes: dict[str, Route] = {}
        self.prefetcher = Prefetcher(self._fetch_ahead)
        self.ledger = (
            ledger_load(base_dir / Path(cfg.ledger).expanduser(), key="server.ledger")
            if cfg.ledger
            else None
        )
        """What `keep` recorded: commits whose images a mirror holds."""

    # -- artifacts ---------------------------------------------------------------------

    def template_ref(self, candidate: Candidate) -> str:
        """An end's own image, else the mirror's copy the ledger names (by digest), else the
        image template filled in."""
        if candidate.artifact:
            return candidate.artifact
        kept = self.ledger.find(candidate.commit) if self.ledger is not None else None
        if kept is not None:
            return f"{kept[1].mirror}@{kept[1].digest}"
        return fill(self.cfg.image, {"commit": candidate.commit, "short": candidate.short})

    def kept_ref(self, ref: str) -> str | None:
        """The mirror's copy (by digest) of an image the ledger recorded under this tag."""
        if self.ledger is None:
            return None
        try:
            parsed = parse_image_ref(ref)
        except ValueError:
            return None
        entry = self.ledger.entries.get(parsed.tag or "")
        if f"{parsed.registry}/{parsed.repository}" != self.ledger.source or entry is None:
            return None
        if not entry.mirror or parsed.digest not in (None, entry.digest):
            return None
        return f"{entry.mirror}@{entry.digest}"

    def image_ref(self, candidate: Candidate) -> str:
        """The image a candidate runs: derived from its build, or `template_ref`."""
        route = self._routes.get(candidate.commit)
        if candidate.artifact or route is None or route.strategy in (None, "image"):
            return self.template_ref(candidate)
        return derived_ref(candidate, route.strategy)

    def route(self, candidate: Candidate) -> Route | None:
        """How the candidate becomes an image (None without `build:`); an end's own image
        is always its route."""
        if self.builder is None or candidate.artifact:
            return None
        found = self._routes[candidate.commit] = self.builder.route(candidate)
        return found

    def _template_lookup(self, candidate: Candidate) -> tuple[bool | None, str]:
        art = self.images.lookup(self.template_ref(candidate))
        return art.available, art.ref if art.available is not False else art.reason

    def artifact(self, candidate: Candidate) -> Artifact:
        """Whether the candidate's image exists (engine, then registry) or can be built."""
        route = self.route(candidate)
        if route is None:
            return self.images.lookup(self.template_ref(candidate))
        if route.strategy == "image":
            found = self.images.lookup(self.template_ref(candidate))
            return replace(found, route=str(route))
        if route.strategy is None:
            ref = self.template_ref(candidate)
            return Artifact(ref, False, reason=f"no build: {route.detail}", route=str(route))
        ref = derived_ref(candidate, route.strategy)
        made = self.engine.has(ref)
        assert self.builder is not None
        return Artifact(
            ref,
            True,
            local=made,
            route=str(route),
            ready=made or route.strategy == "wheel" or self.builder.cached(candidate, route),
        )

    def image_metadata(self, ref: str) -> tuple[dict[str, str] | None, list[str]]:
        """(labels, env) of an image from the engine, else the registry; (None, []) if missing."""
        return self.images.metadata(ref)

    # -- images to run -----------------------------------------------------------------

    def ensure_image(self, candidate: Candidate) -> Image:
        """The candidate's image in the engine: pulled (by digest when the registry named
        one), or derived from its build."""
        route = self._routes.get(candidate.commit) if not candidate.artifact else None
        route = route or self.route(candidate)
        if route is None or route.strategy == "image":
            return self.images.ensure(self.template_ref(candidate))
        if route.strategy is None:
            raise LaunchError(f"no build: {route.detail}")
        return self._derived(candidate, route)

    def _derived(self, candidate: Candidate, route: Route) -> Image:
        """The image derived from the candidate's build: found, or built now."""
        assert self.builder is not None and route.strategy is not None
        target = self.builder.targets[route.index]
        ref = derived_ref(candidate, route.strategy)
        key = self.builder.key(candidate, route)[0]
        with self.images.making(ref):
            base_ref, base = self._base_image(candidate, route, target)
            image = self.deriver.find(ref, str(base.id), key)
            cached = image is not None
            if image is None:
                build = self.builder.build(candidate)
                try:
                    log = self.builder.log_of(candidate)
                    image = self.deriver.derive(
                        candidate, build, replace(target, base=base_ref), base, log, key
                    )
                finally:
                    build.release()  # the image holds what it needs of the stage
                facts = recorded(build.facts)
            else:
                self.deriver.touch(image, ref)
                labels = (image.attrs.get("Config") or {}).get("Labels") or {}
                facts = {**_json_object(labels.get(BUILD_LABEL, "{}")), "route": route.strategy}
            self.build_facts[candidate.commit] = {
                **facts,
                "image": ref,
                "image_id": str(image.id),
                "base_image": base_ref,
                "base_id": str(base.id),
                "cached": cached,
            }
            for gone in self.deriver.sweep(self.builder.cache.budget_bytes, keep=ref):
                self.report(f"build cache: removed {gone} (over the disk budget)")
        return image

    def _base_image(
        self, candidate: Candidate, route: Route, target: ImageTarget
    ) -> tuple[str, Image]:
        """The image a build is applied to: the strategy's, or (an overlay on `nearest`) the
        base commit's own: its published image, or the image derived from its build."""
        assert self.builder is not None
        if target.base:
            return target.base, self.images.ensure(target.base)
        base, index = self.builder.base_of(candidate, route)
        strategy = self.builder.strategies[index]
        own = self.builder.targets.get(index)
        if strategy.name == "image":
            return self.template_ref(base), self.images.ensure(self.template_ref(base))
        if strategy.name == "overlay" and own is not None and own.base:  # its base commit's
            return own.base, self.images.ensure(own.base)
        found = self.builder.route(base)
        if found.index != index:
            raise LaunchError(f"overlay: the base {base.short} is built by {found.strategy} now")
        return derived_ref(base, strategy.name), self._derived(base, found)

    def keep_build_log(self, candidate: Candidate, probe_dir: Path) -> None:
        """The probe keeps its build's log, made now or before."""
        if self.builder is None:
            return
        log = self.builder.log_of(candidate)
        if log.exists():
            probe_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(log, probe_dir / "build.log")

    # -- prefetch ----------------------------------------------------------------------

    def prefetch(self, candidates: Sequence[Candidate]) -> None:
        """Make ready in the background the images of the candidates that could come next:
        pulled, or derived from their builds (builds/prefetch.py)."""
        if self.cfg.prefetch.enabled:
            self.prefetcher.want(candidates)

    def quiet(self) -> AbstractContextManager[None]:
        """While inside, no prefetch starts and a running pull is held back."""
        return self.prefetcher.quiet()

    def _fetch_ahead(self, candidate: Candidate) -> bool:
        ref = self.template_ref(candidate)
        try:
            route = self.route(candidate)
            if route is not None and route.strategy not in (None, "image"):
                ref = derived_ref(candidate, route.strategy)
                if self.engine.has(ref):
                    return False
                t0 = self.clock()
                self._derived(candidate, route)
                self.stats.prefetched[ref] = self.clock() - t0
                return True
            if route is not None and route.strategy is None:
                return False
            budget = self.cfg.prefetch.disk_budget_gb * 1e9
            return self.images.prefetch(ref, budget, self.prefetcher.hold)
        except LaunchError as exc:
            self.report(f"prefetch {ref}: {exc}")
            return False

    # -- lifecycle ---------------------------------------------------------------------

    def launch(
        self,
        candidate: Candidate,
        probe_dir: Path,
        instrument: Instrument | None = None,
        slot: int = 0,
    ) -> DockerServer:
        return DockerServer(self, candidate, probe_dir, instrument, slot)

    def reap(self) -> list[str]:
        """Remove the containers killed llm-bisect processes left behind (Engine.reap)."""
        return self.engine.reap(self.run_id)

    def close(self) -> None:
        """Stop prefetching; remove prefetched images no probe used (the budget is freed)."""
        self.prefetcher.close(wait=CLOSE_WAIT_S)
        self.images.close()


CLOSE_WAIT_S = 30.0
"""Seconds close() waits for a prefetch in flight before removing what it prefetched."""


def _json_object(text: str) -> dict[str, Json]:
    """A label's JSON object; {} when it holds something else."""
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# ---- the `launcher: docker` kind: its config and how it is made ----------------------------


class UlimitConfig(Strict):
    soft: int
    """The soft limit."""
    hard: int
    """The hard limit."""


class PrefetchConfig(Strict):
    """Pulling the images that could be probed next while one probe runs."""

    enabled: bool = True
    """Pull the images of the candidates that could be probed next."""
    disk_budget_gb: float = Field(default=100.0, ge=0, allow_inf_nan=False)
    """Prefetched images may take at most this much disk at a time."""


class RegistryConfig(Strict):
    """Credentials for the registry's manifest API (Docker Hub works anonymously)."""

    username: str | None = None
    """The registry login; `${VAR}` takes VAR from the caller."""
    password: str | None = None
    """`${VAR}` takes VAR from the caller; never written out."""


DOCKER_ARG_PLACEHOLDERS = IMAGE_PLACEHOLDERS | {"port", "image"}
"""What `server.args` may name."""


class DockerServerConfig(ServerBase, SlotGpus):
    """One container image per candidate, through the Docker engine."""

    launcher: Literal["docker"]
    """`docker`: one container per probe, on a Docker engine."""
    image: str
    """Image template, e.g. `vllm/vllm-openai:nightly-{commit}` (`{commit}`, `{short}`)."""
    docker_hosts: list[str] = Field(default_factory=list)
    """Engines to run probes on, a slot each in turn (`unix:///var/run/docker.sock`,
    `ssh://gpu-node-2`, `tcp://10.0.0.5:2376`); default: DOCKER_HOST, else the local one."""
    args: list[str] = Field(default_factory=list)
    """Arguments after the entrypoint (`vllm serve` flags); `{commit}`, `{short}`, `{port}`,
    `{image}` (the image reference the candidate runs)."""
    port: int = Field(default=8000, gt=0, lt=65536)
    """The port the server listens on inside the container."""
    gpus: Literal["all"] | int | list[str] | None = None
    """`all`, a count, or device ids: becomes the container's device requests."""
    ipc: str | None = None
    """IPC mode, usually `host` for vLLM's shared memory."""
    shm_size: str | None = None
    """Size of /dev/shm, e.g. `16g`."""
    volumes: list[str] = Field(default_factory=list)
    """`HOST:CONTAINER[:ro]`; relative host paths are relative to the config file."""
    entrypoint: list[str] | None = None
    """Replaces the image's entrypoint; default: the image's."""
    user: str | None = None
    """The user the container runs as (`uid[:gid]`); default: the image's."""
    ulimits: dict[str, int | UlimitConfig] = Field(default_factory=dict)
    """e.g. `{memlock: -1, stack: 67108864}`."""
    network_mode: str | None = None
    """`host` publishes nothing: the server then listens on `{port}`, a free port on the node."""
    pull: Literal["missing", "always", "never"] = "missing"
    """When to pull an image: only when not in the engine, always, or never."""
    stop_timeout: float = Field(default=30.0, ge=0, allow_inf_nan=False)
    """Seconds between SIGTERM and SIGKILL when a container is stopped."""
    init: bool = True
    """Run an init as PID 1 (Docker's `--init`), so a server that ignores SIGTERM as PID 1
    still stops when the container is stopped."""
    prefetch: PrefetchConfig = Field(default_factory=PrefetchConfig)
    """Pulling the next probes' images while one runs."""
    registry: RegistryConfig = Field(default_factory=RegistryConfig)
    """Credentials for the registry's manifest API (tags, digests)."""
    ledger: str | None = None
    """A ledger `llm-bisect keep --mirror` wrote (relative to the config file): a candidate
    whose commit it holds runs the mirror's copy, by digest, even after the registry
    dropped the tag."""

    @field_validator("image")
    @classmethod
    def _image_placeholders(cls, image: str) -> str:
        check_placeholders([image], "server.image", IMAGE_PLACEHOLDERS)
        return image

    @field_validator("args")
    @classmethod
    def _args_placeholders(cls, args: list[str]) -> list[str]:
        check_placeholders(args, "server.args", DOCKER_ARG_PLACEHOLDERS)
        return args


def from_config(cfg: DockerServerConfig, ctx: LauncherContext) -> Launcher:
    """One DockerLauncher per engine (docker_hosts), spread over when there are several."""
    from .spread import Spread

    engines: list[DockerLauncher] = []
    try:
        hosts: list[str | None] = [*cfg.docker_hosts] or [None]
        for engine in hosts:
            engines.append(DockerLauncher(cfg, ctx, engine=engine))
    except BaseException:
        for started in engines:
            started.close()
        raise
    return engines[0] if len(engines) == 1 else Spread(engines)


def _validate(cfg: DockerServerConfig, config: Any) -> None:
    if config.localize.save_tensors:
        raise ValueError("localize.save_tensors: the process launcher's only")


def registry_hosts(cfg: DockerServerConfig, ends: Sequence[str]) -> list[str]:
    """The registries a docker config's images come from: the template's, and image ends'."""
    filled = fill(cfg.image, {"commit": "0" * 40, "short": "0" * 12})
    hosts = []
    for ref in (filled, *ends):
        with suppress(ValueError):
            hosts.append(parse_image_ref(ref).registry)
    return hosts


def _preflight(cfg: DockerServerConfig, ctx: PreflightContext) -> Preflight:
    """The registry password expanded, and the engine's stored logins read."""
    secrets: list[str] = []
    if cfg.registry.password:
        password = expand_value(cfg.registry.password, ctx.environ, "server.registry.password")
        registry = cfg.registry.model_copy(update={"password": password})
        cfg = cfg.model_copy(update={"registry": registry})
        secrets.append(password)
    hosts = registry_hosts(cfg, ctx.ends)
    if cfg.ledger:  # the mirror's images are pulled with its own login (a private ghcr.io)
        kept = ledger_load(ctx.base_dir / Path(cfg.ledger).expanduser(), key="server.ledger")
        hosts += sorted({e.mirror.split("/", 1)[0] for e in kept.entries.values() if e.mirror})
    logins = docker_logins(hosts)
    secrets += [password for _, password in logins.values()]
    return Preflight(cfg, secrets, logins)


def _devices(cfg: DockerServerConfig, ctx: DeviceContext) -> list[tuple[str, ...] | None]:
    k = ctx.parallel
    hosts = max(1, len(cfg.docker_hosts))
    shared = cfg.gpus == "all" or isinstance(cfg.gpus, int)
    if cfg.slot_gpus is None and shared and k > hosts:
        raise ConfigError(
            f"parallel: {k} puts {math.ceil(k / hosts)} containers on one Docker engine, "
            f"and server.gpus: {cfg.gpus} gives each of them the same GPUs: give each "
            f"slot its own in server.slot_gpus ({EXAMPLE})"
        )
    pool = list(cfg.gpus) if isinstance(cfg.gpus, list) else None
    return slot_devices(k, cfg.slot_gpus, pool, hosts=hosts, where="server.gpus")


def reap_node(environ: Mapping[str, str]) -> Leftovers | None:
    """`reap` without a config: this node's Docker engine's containers of killed runs (None
    where no engine answers)."""
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException:
        return None  # no engine on this node: nothing of ours there
    try:
        return Leftovers("the Docker engine", reap_engine(client))
    except LaunchError as exc:
        return Leftovers("the Docker engine", [], [str(exc)])


KIND = LAUNCHERS.register(
    LauncherKind(
        "docker",
        DockerServerConfig,
        make=from_config,
        runs_images=True,
        validate=_validate,
        preflight=_preflight,
        devices=_devices,
        resolve_end=resolve_image_end,
        reap=reap_node,
        placement=frozenset({"docker_hosts", "pull", "stop_timeout", "prefetch", "port"}),
        shape=frozenset({"image", "args", "entrypoint"}),
        argv=("args", "entrypoint"),
        flags=("args",),
    )
)
