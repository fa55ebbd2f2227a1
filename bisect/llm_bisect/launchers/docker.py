"""The Docker launcher: one container image per candidate, on a GPU node's engine.

    artifact(c)  engine, then registry manifest  → exists? digest? size?   (nothing pulled)
    launch(c)    pull (by digest) → create → start → stream logs → ready → checks
    __exit__     stop (SIGTERM, then SIGKILL after stop_timeout) and remove, always
    reap()       remove containers a killed earlier run left behind (by run label)
    prefetch(cs) pull the images that could come next, in the background, within a
                 disk budget; no new pull starts while checks run

Library errors (docker.errors) are translated here, at the boundary.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import docker
import docker.auth
import docker.credentials.errors
import docker.errors
import docker.types
from docker.models.containers import Container
from docker.models.images import Image

from ..config import DockerServerConfig, fill
from ..errors import LaunchError, ServerExited
from ..fingerprint import package_probe_source
from ..model import Candidate
from ..registry import DOCKER_HUB, Registry, RegistryError, parse_image_ref
from . import Artifact
from .common import LoggedServer, free_port, wait_ready

RUN_LABEL = "llm-bisect.run"
COMMIT_LABEL = "llm-bisect.commit"
OWNER_LABEL = "llm-bisect.owner"
"""`host:pid:start` of the llm-bisect process that made a container: reap() spares live owners."""


def _start_time(pid: int) -> str | None:
    """When a process started (clock ticks since boot), to tell it from a later one with its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def owner_label(pid: int | None = None) -> str:
    """This process as a container's owner."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_start_time(pid) or ''}"


def owner_alive(label: str) -> bool:
    """Whether the owner a label names still runs; another host's owners are taken as alive."""
    host, _, rest = label.partition(":")
    pid, _, started = rest.partition(":")
    if host != socket.gethostname():
        return True
    if not pid.isdigit():
        return False
    return _start_time(int(pid)) == started and started != ""


def docker_logins(hosts: Sequence[str]) -> dict[str, tuple[str, str]]:
    """What `docker login` stored for these registry hosts (config.json, credential helpers)."""
    try:
        auth = docker.auth.load_config()
    except (docker.errors.DockerException, OSError, ValueError):
        return {}
    found: dict[str, tuple[str, str]] = {}
    for host in dict.fromkeys(hosts):
        try:
            entry = auth.resolve_authconfig(None if host == DOCKER_HUB else host)
        except (docker.errors.DockerException, docker.credentials.errors.StoreError, OSError):
            continue
        if not entry:
            continue
        user = entry.get("Username") or entry.get("username")
        password = entry.get("Password") or entry.get("password")
        if user and password:
            found[host] = (str(user), str(password))
    return found


@dataclass
class PullStats:
    """What the prefetcher did, for the report and the benchmark."""

    prefetched: dict[str, float] = field(default_factory=dict)
    """Image ref → seconds its prefetch pull took."""
    waited: dict[str, float] = field(default_factory=dict)
    """Image ref → seconds a probe waited for a pull (prefetch in flight or its own)."""


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


def container_spec(
    cfg: DockerServerConfig,
    *,
    image: str,
    ref: str | None = None,
    candidate: Candidate,
    port: int,
    host_port: int,
    env: Mapping[str, str],
    run_id: str,
    base_dir: Path,
    owner: str = "",
) -> dict[str, Any]:
    """The keyword arguments of `containers.create` for one probe. Pure.

    `image` is what runs (an image id pins it); `ref` is the reference `{image}` names;
    `owner` is the harness process (`owner_label()`), so reap() can tell live runs.
    """
    values = {
        "commit": candidate.commit,
        "short": candidate.short,
        "port": str(port),
        "image": ref or image,
    }
    spec: dict[str, Any] = {
        "image": image,
        "command": [fill(a, values) for a in cfg.args],
        "environment": dict(env),
        "labels": {RUN_LABEL: run_id, COMMIT_LABEL: candidate.commit, OWNER_LABEL: owner},
        "name": f"llm-bisect-{candidate.short}-{uuid.uuid4().hex[:6]}",
        "detach": True,
        "device_requests": device_requests(cfg.gpus),
        "volumes": volume_binds(cfg.volumes, base_dir),
        "ulimits": ulimit_list(cfg.ulimits),
        "init": cfg.init,
    }
    if cfg.network_mode == "host":
        spec["network_mode"] = "host"
    else:
        if cfg.network_mode:
            spec["network_mode"] = cfg.network_mode
        spec["ports"] = {f"{port}/tcp": ("127.0.0.1", host_port)}
    for key, value in (
        ("entrypoint", cfg.entrypoint),
        ("user", cfg.user),
        ("ipc_mode", cfg.ipc),
        ("shm_size", cfg.shm_size),
    ):
        if value is not None:
            spec[key] = value
    return spec


class DockerServer(LoggedServer):
    """One container. Enter pulls, creates and starts it; exit stops and removes it."""

    def __init__(self, launcher: DockerLauncher, candidate: Candidate, probe_dir: Path) -> None:
        self.launcher = launcher
        self.candidate = candidate
        self.log_path = probe_dir / "server.log"
        self.secrets = launcher.secrets
        cfg = launcher.cfg
        self.host_port = free_port()
        self.port = self.host_port if cfg.network_mode == "host" else cfg.port
        self.base_url = f"http://127.0.0.1:{self.host_port}"
        self.container: Container | None = None
        self.image: Image | None = None
        self._log: IO[bytes] | None = None
        self._log_thread: threading.Thread | None = None

    def __enter__(self) -> DockerServer:
        try:
            self.image = self.launcher.ensure_image(self.candidate)
            spec = container_spec(
                self.launcher.cfg,
                image=str(self.image.id),
                ref=self.launcher.image_ref(self.candidate),
                candidate=self.candidate,
                port=self.port,
                host_port=self.host_port,
                env=self.launcher.env,
                run_id=self.launcher.run_id,
                base_dir=self.launcher.base_dir,
                owner=self.launcher.owner,
            )
            self.container = self.launcher.client.containers.create(**spec)
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = self.log_path.open("ab")
            self.container.start()
        except docker.errors.DockerException as exc:
            self.stop()
            raise LaunchError(f"docker: {_docker_message(exc)}", self.log_tail()) from exc
        except BaseException:
            self.stop()
            raise
        self._log_thread = threading.Thread(target=self._follow_logs, daemon=True)
        self._log_thread.start()
        return self

    def _follow_logs(self) -> None:
        container, log = self.container, self._log
        if container is None or log is None:
            return
        secrets = [s.encode() for s in self.launcher.secrets]
        with suppress(docker.errors.DockerException, ValueError, OSError):
            for chunk in container.logs(stream=True, follow=True):
                for secret in secrets:
                    chunk = chunk.replace(secret, b"***")
                log.write(chunk)
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
        self._close_log()

    def check_alive(self, wait: float = 0.0) -> None:
        if self.container is None:
            raise ServerExited("the container is not running", None)
        deadline = time.monotonic() + wait
        while True:
            try:
                self.container.reload()
            except docker.errors.NotFound:
                raise ServerExited("the container is gone", None) from None
            except docker.errors.DockerException as exc:
                raise LaunchError(f"docker: {_docker_message(exc)}") from exc
            state = self.container.attrs.get("State", {})
            if state.get("Status") in ("exited", "dead"):
                code = state.get("ExitCode")
                oom = " (OOM-killed)" if state.get("OOMKilled") else ""
                time.sleep(0.2)  # let the log stream catch the last lines
                raise ServerExited(f"container exited with code {code}{oom}", code, self.log_tail())
            if time.monotonic() >= deadline:
                return
            time.sleep(0.1)

    def wait_ready(self) -> None:
        cfg = self.launcher.cfg
        wait_ready(self, cfg.ready_timeout, clock=self.launcher.clock, sleep=self.launcher.sleep)

    def fingerprint(self) -> dict[str, Any]:
        """Image digest and labels, and the package versions inside the running container."""
        facts: dict[str, Any] = {}
        if self.image is not None:
            attrs = self.image.attrs
            digests = attrs.get("RepoDigests") or []
            facts["image"] = {
                "ref": self.launcher.image_ref(self.candidate),
                "digest": digests[0] if digests else "",
                "id": self.image.id,
                "labels": dict((attrs.get("Config") or {}).get("Labels") or {}),
            }
        if self.container is not None:
            facts["packages"] = self._packages()
        return facts

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


def _docker_message(exc: docker.errors.DockerException) -> str:
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc).strip()


class DockerLauncher:
    """Containers per candidate through the Docker engine; see the module docstring."""

    def __init__(
        self,
        cfg: DockerServerConfig,
        *,
        env: Mapping[str, str],
        secret_names: Sequence[str],
        base_dir: Path,
        run_id: str,
        client: docker.DockerClient | None = None,
        registry: Registry | None = None,
        logins: Mapping[str, tuple[str, str]] | None = None,
        report: Callable[[str], None] = lambda _: None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.cfg = cfg
        self.env = dict(env)
        self.secrets = [self.env[n] for n in secret_names if n in self.env]
        if cfg.registry.password:
            self.secrets.append(cfg.registry.password)
        self.base_dir = base_dir
        self.run_id = run_id
        self.owner = owner_label()
        try:
            self.client = client or docker.from_env()
            self.client.ping()
        except docker.errors.DockerException as exc:
            raise LaunchError(f"docker: cannot reach the engine: {_docker_message(exc)}") from exc
        self.registry = registry or Registry(
            username=cfg.registry.username, password=cfg.registry.password, logins=logins
        )
        self.report = report
        self.clock = clock
        self.sleep = sleep
        self.stats = PullStats()
        self._artifacts: dict[str, Artifact] = {}
        self._pulls: dict[str, threading.Event] = {}
        self._pull_lock = threading.Lock()
        self._quiet = threading.Event()  # set while checks run: no new prefetch pull starts
        self._prefetch_thread: threading.Thread | None = None
        self._prefetch_queue: list[Candidate] = []
        self._prefetched_bytes = 0
        self._prefetched: set[str] = set()
        self._probed: set[str] = set()
        self._closed = threading.Event()

    # -- artifacts ---------------------------------------------------------------------

    def image_ref(self, candidate: Candidate) -> str:
        """The image a candidate runs: an end's own image, else the template filled in."""
        return candidate.artifact or fill(
            self.cfg.image, {"commit": candidate.commit, "short": candidate.short}
        )

    def artifact(self, candidate: Candidate) -> Artifact:
        """Whether the candidate's image exists, from the engine, then the registry."""
        ref = self.image_ref(candidate)
        try:
            image = self.client.images.get(ref)
        except docker.errors.ImageNotFound:
            image = None
        except docker.errors.DockerException as exc:
            return Artifact(ref, None, reason=f"docker: {_docker_message(exc)}")
        if image is not None:
            digests = image.attrs.get("RepoDigests") or []
            found = Artifact(
                ref,
                True,
                local=True,
                ready=True,
                digest=digests[0].split("@")[-1] if digests else str(image.id),
                size=int(image.attrs.get("Size", 0)),
            )
        elif self.cfg.pull == "never":
            found = Artifact(ref, False, reason=f"no artifact: image {ref} is not in the engine")
        else:
            found = self._remote_artifact(ref)
        self._artifacts[ref] = found
        return found

    def image_metadata(self, ref: str) -> tuple[dict[str, str] | None, list[str]]:
        """(labels, env) of an image from the engine, else the registry; (None, []) if missing."""
        try:
            attrs = self.client.images.get(ref).attrs
            config = attrs.get("Config") or {}
            return dict(config.get("Labels") or {}), list(config.get("Env") or [])
        except docker.errors.ImageNotFound:
            pass
        except docker.errors.DockerException as exc:
            raise LaunchError(f"docker: {_docker_message(exc)}") from exc
        if self.cfg.pull == "never":
            return None, []
        try:
            parsed = parse_image_ref(ref)
        except ValueError:
            return None, []
        try:
            manifest = self.registry.manifest(parsed)
            if manifest is None:
                return None, []
            config = self.registry.image_config(parsed, manifest).get("config") or {}
        except RegistryError as exc:
            raise LaunchError(f"cannot read image {ref!r}: {exc}") from exc
        return dict(config.get("Labels") or {}), list(config.get("Env") or [])

    def _remote_artifact(self, ref: str) -> Artifact:
        try:
            parsed = parse_image_ref(ref)
        except ValueError as exc:
            return Artifact(ref, False, reason=f"no artifact: {exc}")
        try:
            manifest = self.registry.manifest(parsed)
        except RegistryError as exc:
            return Artifact(ref, None, reason=str(exc))
        if manifest is None:
            where = f"in neither the engine nor {parsed.registry}"
            return Artifact(ref, False, reason=f"no artifact: image {ref} is {where}")
        return Artifact(ref, True, digest=manifest.digest, size=manifest.size, ready=True)

    # -- pulls -------------------------------------------------------------------------

    def ensure_image(self, candidate: Candidate) -> Image:
        """The candidate's image in the engine, pulled by digest when the registry named one."""
        ref = self.image_ref(candidate)
        self._probed.add(ref)
        art = self._artifacts.get(ref) or self.artifact(candidate)
        t0 = self.clock()
        with self._pulling(ref) as mine:
            if not mine:  # a prefetch of this image was under way; it is done now
                self.stats.waited[ref] = self.clock() - t0
            if self.cfg.pull == "always" or not self._has(ref):
                if self.cfg.pull == "never":
                    raise LaunchError(f"no artifact: image {ref} is not in the engine")
                self._pull(ref, art, quiet_aware=False)
                self.stats.waited[ref] = self.stats.waited.get(ref, 0.0) + self.clock() - t0
        try:
            return self.client.images.get(ref)
        except docker.errors.DockerException as exc:
            raise LaunchError(f"docker: {_docker_message(exc)}") from exc

    def _has(self, ref: str) -> bool:
        try:
            self.client.images.get(ref)
        except docker.errors.ImageNotFound:
            return False
        return True

    @contextmanager
    def _pulling(self, ref: str) -> Iterator[bool]:
        """Hold the one pull of `ref`; yields False after waiting for someone else's."""
        with self._pull_lock:
            event = self._pulls.get(ref)
            mine = event is None
            if event is None:
                event = self._pulls[ref] = threading.Event()
        if not mine:
            event.wait()
            yield False
            return
        try:
            yield True
        finally:
            with self._pull_lock:
                del self._pulls[ref]
            event.set()

    def _pull(self, ref: str, art: Artifact, *, quiet_aware: bool) -> None:
        parsed = None
        with suppress(ValueError):
            parsed = parse_image_ref(ref)
        source = ref
        if parsed is not None and art.digest.startswith("sha256:") and not art.local:
            source = parsed.pinned(art.digest)  # by digest: the bytes the registry vouched for
        repo, tag = source.split("@", 1) if "@" in source else _split_tag(source)
        layers: dict[str, tuple[int, int]] = {}
        last = 0.0
        try:
            stream = self.client.api.pull(repo, tag=tag or None, stream=True, decode=True)
            for event in stream:
                while quiet_aware and self._quiet.is_set() and not self._closed.is_set():
                    time.sleep(0.1)  # reading nothing holds the pull back while checks run
                if "error" in event:
                    raise LaunchError(f"docker pull {source}: {event['error']}")
                detail = event.get("progressDetail") or {}
                if event.get("id") and detail.get("total"):
                    layers[event["id"]] = (int(detail.get("current", 0)), int(detail["total"]))
                now = self.clock()
                if layers and now - last >= 2.0:
                    done = sum(c for c, _ in layers.values())
                    total = sum(t for _, t in layers.values())
                    prefix = "prefetch" if quiet_aware else "pull"
                    self.report(f"{prefix} {ref}: {done / 1e9:.2f} of {total / 1e9:.2f} GB")
                    last = now
        except docker.errors.DockerException as exc:
            raise LaunchError(f"docker pull {source}: {_docker_message(exc)}") from exc
        if "@" in source:
            # A pull by digest leaves the image untagged; tag it so the template finds it.
            ref_repo, ref_tag = _split_tag(ref)
            with suppress(docker.errors.DockerException):
                self.client.images.get(source).tag(ref_repo, ref_tag or "latest")

    # -- prefetch ----------------------------------------------------------------------

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """While inside, no prefetch pull starts and a running one is held back."""
        self._quiet.set()
        try:
            yield
        finally:
            self._quiet.clear()

    def prefetch(self, candidates: Sequence[Candidate]) -> None:
        """Pull these images in the background (the candidates that could come next)."""
        if not self.cfg.prefetch.enabled:
            return
        with self._pull_lock:
            self._prefetch_queue = list(candidates)
        if self._prefetch_thread is None or not self._prefetch_thread.is_alive():
            self._prefetch_thread = threading.Thread(target=self._prefetch_loop, daemon=True)
            self._prefetch_thread.start()

    def _prefetch_loop(self) -> None:
        budget = self.cfg.prefetch.disk_budget_gb * 1e9
        while not self._closed.is_set():
            with self._pull_lock:
                if not self._prefetch_queue:
                    return
                candidate = self._prefetch_queue.pop(0)
            while self._quiet.is_set() and not self._closed.is_set():
                time.sleep(0.1)
            ref = self.image_ref(candidate)
            try:
                art = self._artifacts.get(ref) or self.artifact(candidate)
                if not art.available or art.local or self._has(ref):
                    continue
                if self._prefetched_bytes + art.size > budget:
                    self.report(f"prefetch {ref}: skipped, over the disk budget")
                    continue
                with self._pulling(ref) as mine:
                    if not mine or self._has(ref):
                        continue
                    t0 = self.clock()
                    self._pull(ref, art, quiet_aware=True)
                    self.stats.prefetched[ref] = self.clock() - t0
                    self._prefetched_bytes += art.size
                    self._prefetched.add(ref)
            except LaunchError as exc:
                self.report(f"prefetch {ref}: {exc}")

    # -- lifecycle ---------------------------------------------------------------------

    def launch(self, candidate: Candidate, probe_dir: Path) -> DockerServer:
        return DockerServer(self, candidate, probe_dir)

    def reap(self) -> int:
        """Remove the containers of this run that a killed harness left behind.

        A container whose owner still runs is spared: it belongs to a live run.
        """
        removed = 0
        try:
            for container in self.client.containers.list(
                all=True, filters={"label": f"{RUN_LABEL}={self.run_id}"}
            ):
                owner = (container.labels or {}).get(OWNER_LABEL, "")
                if owner and owner_alive(owner):
                    continue
                with suppress(docker.errors.NotFound):
                    container.remove(force=True)
                    removed += 1
        except docker.errors.DockerException as exc:
            raise LaunchError(f"docker: {_docker_message(exc)}") from exc
        return removed

    def close(self) -> None:
        """Stop prefetching; remove prefetched images no probe used (the budget is freed)."""
        self._closed.set()
        if self._prefetch_thread is not None:
            self._prefetch_thread.join(timeout=30)
        for ref in self._prefetched - self._probed:
            with suppress(docker.errors.DockerException):
                self.client.images.remove(ref)
        self.registry.close()


def _split_tag(ref: str) -> tuple[str, str]:
    """`repo:tag` → (repo, tag); a registry port is not a tag."""
    head, _, last = ref.rpartition("/")
    if ":" in last:
        name, tag = last.rsplit(":", 1)
        return (f"{head}/{name}" if head else name), tag
    return ref, ""
