"""The Kubernetes launcher: one batch/v1 Job per probe, through the official client; a
probe on several nodes (`nodes`) is a LeaderWorkerSet where LWS's CRD is installed (asked
of the API's group discovery), else an Indexed Job with a headless Service (`group_manifests`).

    artifact(c)  registry manifest → digest (nothing pulled: the kubelet pulls by digest)
    launch(c)    Job (restartPolicy Never, backoffLimit 0) created (a localisation's: and
                 its ConfigMap, owned by it) ─► its pods, watched: scheduled, pulled, Running
                 ─► port-forward through the API (or the pod IP) ─► ready ─► checks
    logs         the pod's log followed into the probe's server.log, secrets masked
    fingerprint  node, image digest and imageID; packages, collect_env and nvidia-smi
                 through the API's exec in the pod
    __exit__     the Job (or LWS) deleted with foreground propagation (its pods with it),
                 and the Service, always
    reap()       the Jobs, LWSs and Services of killed llm-bisect processes, found by
                 label, deleted

`job_manifest` is pure: the Job a probe creates, written to the probe folder as job.json.
No secret value is ever in it: a secret reaches the pod through `secretKeyRef`
(`server.secret_env`), and a `server.env` entry or a word of the container's command line
that holds a secret (named like one, a login in a URL) is refused. Their values are masked
only where the user lets the launcher read them (`secret_env_read`).

What a cluster does wrong is never a verdict: a pod Unschedulable past `pending_timeout`,
an image that cannot be pulled (ErrImagePull, ImagePullBackOff), a pod evicted or on a
lost node is Unplaced (skip). A probe that must run elsewhere than the verdict it checks (a
re-probe, a confirmation trial, the Evidence stage's probe: launchers.Avoids) keeps off that
verdict's nodes by a required node affinity (`away_from`); where the scheduler says no other
node fits (or it stays pending past `pending_timeout`), it runs on them again, a later start,
and says so. A container that ends before ready (an OOMKill included) is
ServerExited (skip, as every launcher's). The server is reached through the API's
port-forward (`reach: port-forward`, from a laptop too: `Forwarder`), or at its pod's IP
(`reach: pod-ip`: from inside the cluster)."""

from __future__ import annotations

import base64
import functools
import inspect
import json
import re
import shlex
import socket
import threading
import types
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, TypeAlias, TypeVar, cast

from pydantic import Field, field_validator, model_validator
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_any,
    wait_exponential,
)
from tenacity.stop import stop_base

from .. import collectenv, weights
from ..clock import SYSTEM
from ..config import ServerBase, Strict, check_placeholders
from ..errors import ConfigError, LaunchError, ServerExited, Unplaced
from ..fingerprint import Facts, package_probe_source
from ..kinds import (
    LAUNCHERS,
    LauncherContext,
    LauncherKind,
    Preflight,
    PreflightContext,
)
from ..logs import tail
from ..model import Candidate
from ..redact import Masker, url_logins
from ..registry import ImageConfig, ImageRef, RegistryClient, RegistryError, parse_image_ref
from ..secretnames import argv_secret_names, argv_secrets, secret_names
from ..sources.images import env_map, resolve_image_end
from ..templates import IMAGE_PLACEHOLDERS, fill, template_fields
from . import INSTRUMENT_DIR, Artifact, Instrument
from .common import (
    LoggedServer,
    last_json,
    owner_label,
    owner_pid,
    placement_facts,
    reapable,
    wait_ready,
    weights_facts,
)
from .kubernetes_objects import (
    Affinity,
    Container,
    EnvVar,
    KeyToPath,
    LeaderWorkerTemplate,
    Manifest,
    NodeSelectorRequirement,
    ObjectList,
    ObjectMeta,
    OwnerReference,
    Pod,
    PodList,
    PodSpec,
    PodStatus,
    PodTemplate,
    Resources,
    Toleration,
    Volume,
    VolumeMount,
)

MANAGED_BY = "app.kubernetes.io/managed-by"
"""Every Job and pod llm-bisect creates carries `MANAGED_BY: llm-bisect` (how reap finds them)."""
RUN_LABEL = "llm-bisect/run"
COMMIT_LABEL = "llm-bisect/commit"
OWNER_ANNOTATION = "llm-bisect/owner"
"""`host:pid:start` of the llm-bisect process that created the Job (a label value cannot
hold colons): reap() deletes a Job whose owner is gone."""
CONTAINER = "server"
CORE_KINDS = {"Service": "service", "ConfigMap": "config_map"}
"""The core/v1 kinds a probe makes, as the client's method names spell them."""
POLL_S = 0.5
"""How often teardown asks whether a deleted Job is gone."""
WATCH_S = 10
"""How long one watch request of a probe's pods stays open (then it resumes from its last
resourceVersion); a bound on how long a closed watch's thread outlives its probe."""
GONE = 410
"""A watch from a resourceVersion the API no longer keeps: list again, watch from there."""
STOP_WAIT_S = 120.0
"""How long teardown waits for the Job's pods to be gone."""
PULL_FAILED = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
"""A container waiting for these never gets its image: no artifact on this cluster."""
CONFIG_FAILED = frozenset({"CreateContainerConfigError", "CreateContainerError"})
"""The pod's own setup is wrong (a Secret of secret_env missing): never the candidate's."""
PULL_TRANSIENT = ("429", "toomanyrequests", "timeout", "i/o timeout", "TLS handshake")
"""An image pull failing with these is the registry's moment, not a missing image: waited out
until pending_timeout."""
LOST = frozenset({"NodeLost", "Evicted", "Preempting", "Shutdown", "Terminated"})
"""Pod reasons that say the cluster ended it, not the server."""
RETRIED_STATUS = frozenset({429, 500, 502, 503, 504})
"""API answers retried (API_RETRIES times, backing off): the server's moment, not ours."""
API_RETRIES = 5
PACKAGES_S = 60.0
"""At most this long for the package versions inside the pod."""
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
"""The label an Indexed Job's controller puts on each pod: its index (the head's is 0)."""
LWS_GROUP, LWS_VERSION, LWS_PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
"""Labels LWS's controller puts on a group's pods: the set's name, the pod's rank (leader 0)."""
CONFIG_MAP_MAX = 1_000_000
"""An instrument's files must fit one ConfigMap (the API keeps an object under 1 MiB)."""
HEAD_ENV = "LLM_BISECT_HEAD"
"""The variable that holds the head pod's DNS name in an Indexed Job's pods."""
NODE_PLACEHOLDERS = frozenset({"head", "node_rank", "nnodes"})
ARG_PLACEHOLDERS = IMAGE_PLACEHOLDERS | {"port", "image"}
"""What `server.args` may name on every pod (a multi-node pod adds NODE_PLACEHOLDERS)."""
"""On a multi-node probe's pods: the head's address, this pod's rank, the node count."""
RUNTIME: dict[str, dict[str, str]] = {
    "indexed-job": {"head": f"$({HEAD_ENV})", "node_rank": "$(JOB_COMPLETION_INDEX)"},
    "leaderworkerset": {"head": "$(LWS_LEADER_ADDRESS)", "node_rank": "$(LWS_WORKER_INDEX)"},
}
"""What `{head}` and `{node_rank}` become in a pod's command: the kubelet expands `$(VAR)`
from the container's environment (the Job controller sets JOB_COMPLETION_INDEX; LWS's,
LWS_LEADER_ADDRESS and LWS_WORKER_INDEX)."""
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
"""A namespace's name (RFC 1123 label, as the API checks it)."""
_DNS_PART = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN = re.compile(rf"(?=.{{1,253}}$){_DNS_PART}(\.{_DNS_PART})*")
"""A label key's prefix."""
QUALIFIED_NAME = re.compile(r"(?=.{1,63}$)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
"""A label key's name part, a resource's name part."""
LABEL_VALUE = re.compile(r"(?=.{0,63}$)(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
"""A container's variable name, as the API takes it."""
QUANTITY = re.compile(r"\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[mkMGTPE]|[eE][-+]?[0-9]+)?")
"""A resource quantity (`512Gi`, `1.5`, `100m`, `1e9`), not negative: the API's grammar."""
T = TypeVar("T")
E = TypeVar("E", bound=Mapping[str, object])
Group = Literal["job", "indexed-job", "leaderworkerset"]
"""What one probe is on the cluster: a Job (one node), an Indexed Job with a headless
Service, or a LeaderWorkerSet (several nodes)."""


# ---- the config ----------------------------------------------------------------------------


def qualified_name(key: str) -> bool:
    """A label key or resource name as the API takes it: `[PREFIX/]NAME`. Pure."""
    prefix, slash, name = key.rpartition("/")
    return bool(QUALIFIED_NAME.fullmatch(name)) and (
        not slash or bool(DNS_SUBDOMAIN.fullmatch(prefix))
    )


class SecretRef(Strict):
    """A key of a Kubernetes Secret in the Job's namespace."""

    secret: str
    """The Secret's name."""
    key: str
    """The key in it whose value becomes the variable."""


class ModelCache(Strict):
    """Where the model weights are kept between probes (a PVC, else a host path)."""

    mount: str = "/root/.cache/huggingface"
    """Where the server sees it."""
    pvc: str | None = None
    """A PersistentVolumeClaim's name (ReadWriteMany for k>1 slots on several nodes)."""
    host_path: str | None = None
    """A folder on the node, where Pod Security allows hostPath volumes."""

    @model_validator(mode="after")
    def _one(self) -> ModelCache:
        if (self.pvc is None) == (self.host_path is None):
            raise ValueError("give one of pvc or host_path")
        return self


class ResourceClaim(Strict):
    """A DRA resource claim of every pod of the probe (and its server container): e.g. the
    IMEX channel of a ComputeDomain of NVIDIA's DRA driver, which GB200 pods on several
    nodes need to share GPU memory over NVLink."""

    name: str
    """The claim's name in the pod (`imex-channel`)."""
    template: str | None = None
    """A ResourceClaimTemplate (a ComputeDomain's `spec.channel.resourceClaimTemplate.name`):
    each pod gets a claim of its own."""
    claim: str | None = None
    """A ResourceClaim all pods share."""

    @model_validator(mode="after")
    def _one(self) -> ResourceClaim:
        if (self.template is None) == (self.claim is None):
            raise ValueError("give one of template or claim")
        return self


class ApiLimits(Strict):
    """Bounds on the Kubernetes API (`server.api`): an API that never answers, trickles its
    answer or answers without end is a one-line error within them, never a hang."""

    timeout: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    """Seconds one API call may take in all: its retries and its whole answer read. A watch
    request may take WATCH_S (10) more; an exec in a pod (the fingerprint), this more than
    its command's own time."""
    max_bytes: int = Field(default=64 * 2**20, ge=1024)
    """Bytes one answer may hold (a list of pods, Jobs, ConfigMaps; an error's body)."""
    max_line: int = Field(default=4 * 2**20, ge=1024)
    """Bytes one event of a watch may hold (one line: one object, 1.5 MiB at most in etcd)."""


class KubernetesServerConfig(ServerBase):
    """One batch/v1 Job per candidate, through the Kubernetes API."""

    launcher: Literal["kubernetes"]
    """`kubernetes`: one Job per probe on a cluster."""
    image: str
    """Image template, e.g. `vllm/vllm-openai:nightly-{commit}`; the Job names it by digest."""
    args: list[str] = Field(default_factory=list)
    """The container's `args` (`vllm serve` flags); `{commit}`, `{short}`, `{port}`, `{image}`."""
    entrypoint: list[str] | None = None
    """The container's `command`; default: the image's entrypoint."""
    port: int = Field(default=8000, gt=0, lt=65536)
    """The port the server listens on in the pod."""
    namespace: str = "default"
    """The namespace the Jobs are created in."""
    kubeconfig: str | None = None
    """A kubeconfig file; default: in-cluster config, else KUBECONFIG or ~/.kube/config."""
    context: str | None = None
    """The kubeconfig context; default: its current one."""
    gpus: int | None = Field(default=None, ge=1)
    """`nvidia.com/gpu` limit of the server's container."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    """e.g. `{nvidia.com/gpu.product: NVIDIA-B300}`."""
    affinity: dict[str, Any] | None = None
    """A pod `affinity`, as Kubernetes takes it."""
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    """Pod tolerations, as Kubernetes takes them (`{key: nvidia.com/gpu, operator: Exists}`)."""
    image_pull_secrets: list[str] = Field(default_factory=list)
    """Names of docker-registry Secrets the kubelet pulls with."""
    secret_env: dict[str, SecretRef] = Field(default_factory=dict)
    """Variables whose values come from Secrets (`HF_TOKEN: {secret: hf, key: token}`):
    the value is never in the Job, a log or a report."""
    secret_env_read: bool = False
    """Read the values of `secret_env`'s Secrets through the API (the Role then needs `get`
    on those Secrets): a server that echoes one (in a reply, a 500 body, its log) has it
    masked wherever llm-bisect writes. Default: never read, and such an echo cannot be
    masked (the report says so)."""
    shm_size: str | None = "16Gi"
    """/dev/shm as a memory emptyDir of this size; null: the runtime's default."""
    model_cache: ModelCache | None = None
    """The model weights' volume, mounted into every probe's pod."""
    host_paths: list[str] = Field(default_factory=list)
    """`HOST:CONTAINER[:ro]` hostPath volumes, where Pod Security allows them."""
    memory: str | None = None
    """The container's memory limit (`512Gi`)."""
    pending_timeout: float = Field(default=3600.0, gt=0, allow_inf_nan=False)
    """Seconds a pod may stay unscheduled or without its image; the probe is then skip."""
    active_deadline_s: int = Field(default=6 * 3600, ge=1)
    """The Job's activeDeadlineSeconds: the cluster ends it even if nobody deletes it."""
    ttl_after_finished_s: int = Field(default=600, ge=0)
    """The Job's ttlSecondsAfterFinished."""
    stop_timeout: int = Field(default=30, ge=0)
    """The pod's terminationGracePeriodSeconds."""
    nodes: int = Field(default=1, ge=1, le=64)
    """Nodes (pods) per probe (two for DP8 over two 4-GPU GB200 nodes): a LeaderWorkerSet
    where its CRD is installed, else an Indexed Job with a headless Service. `{head}` (the
    head pod's address), `{node_rank}` and `{nnodes}` in `args` and `worker_args`."""
    worker_args: list[str] | None = None
    """The `args` of the pods other than the head in a multi-node probe (`--headless`,
    `--data-parallel-start-rank` ...); default: `args`."""
    resource_claims: list[ResourceClaim] = Field(default_factory=list)
    """DRA resource claims of each pod's server container (a ComputeDomain's IMEX channel:
    `{name: imex-channel, template: gb200-domain-channel}`)."""
    extra_resources: dict[str, str] = Field(default_factory=dict)
    """More limits of the server container, as Kubernetes takes them (RDMA devices:
    `{rdma/ib: "1"}`; the name is the device plugin's)."""
    reach: Literal["port-forward", "pod-ip"] = "port-forward"
    """How the server is reached: `port-forward` through the API (from anywhere the API
    answers, a laptop too), or `pod-ip` (llm-bisect runs in the cluster, or the pod network
    is routed here: no API server in the way of the checks' requests)."""
    api: ApiLimits = Field(default_factory=ApiLimits)
    """Deadlines and sizes of the API's answers (`{timeout: 60, max_bytes: 67108864,
    max_line: 4194304}`)."""

    @field_validator("image")
    @classmethod
    def _image_placeholders(cls, image: str) -> str:
        check_placeholders([image], "server.image", IMAGE_PLACEHOLDERS)
        return image

    @field_validator("args", "worker_args")
    @classmethod
    def _args_placeholders(cls, args: list[str] | None) -> list[str] | None:
        if args is not None:
            check_placeholders(args, "server.args", ARG_PLACEHOLDERS | NODE_PLACEHOLDERS)
        return args

    @model_validator(mode="after")
    def _nodes(self) -> KubernetesServerConfig:
        if self.nodes == 1:
            if self.worker_args is not None:
                raise ValueError("worker_args: only with nodes above 1")
            for arg in self.args:
                if set(template_fields(arg, "server.args")) & NODE_PLACEHOLDERS:
                    raise ValueError(
                        f"args: {arg!r}: {{head}}, {{node_rank}} and {{nnodes}} need nodes above 1"
                    )
        elif not self.entrypoint:
            raise ValueError(
                "entrypoint: a multi-node probe's pods run a shell that picks head or worker "
                "and then the server; give the image's entrypoint (vLLM's: [vllm, serve])"
            )
        return self

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, namespace: str) -> str:
        if not DNS_LABEL.fullmatch(namespace):
            raise ValueError(
                f"{namespace!r} is not a namespace's name (a DNS-1123 label: a-z, 0-9 and "
                "'-', 63 at most)"
            )
        return namespace

    @field_validator("node_selector")
    @classmethod
    def _node_selector(cls, labels: dict[str, str]) -> dict[str, str]:
        for key, value in labels.items():
            if not qualified_name(key):
                raise ValueError(
                    f"{key!r} is not a label key ([PREFIX/]NAME: a DNS subdomain, and 63 "
                    "characters at most of A-Z, a-z, 0-9, '-', '_', '.')"
                )
            if not LABEL_VALUE.fullmatch(value):
                raise ValueError(
                    f"{key}: {value!r} is not a label value (63 characters at most of "
                    "A-Z, a-z, 0-9, '-', '_', '.', alphanumeric at both ends)"
                )
        return labels

    @field_validator("env", "secret_env")
    @classmethod
    def _env_names(cls, env: E) -> E:
        for name in env:
            if not ENV_NAME.fullmatch(name):
                raise ValueError(
                    f"{name!r} is not a variable name Kubernetes takes ([-._a-zA-Z][-._a-zA-Z0-9]*)"
                )
        return env

    @field_validator("memory", "shm_size")
    @classmethod
    def _quantity(cls, value: str | None) -> str | None:
        if value is not None and not QUANTITY.fullmatch(value):
            raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 512Gi, 64Mi)")
        return value

    @field_validator("extra_resources")
    @classmethod
    def _resources(cls, limits: dict[str, str]) -> dict[str, str]:
        for name, value in limits.items():
            if not qualified_name(name):
                raise ValueError(f"{name!r} is not a resource name ([PREFIX/]NAME)")
            if not QUANTITY.fullmatch(value):
                raise ValueError(f"{name}: {value!r} is not a Kubernetes quantity (e.g. 1, 8Gi)")
        return limits

    @field_validator("host_paths")
    @classmethod
    def _host_paths(cls, paths: list[str]) -> list[str]:
        for spec in paths:
            parts = spec.split(":")
            if len(parts) not in (2, 3) or not all(p.startswith("/") for p in parts[:2]):
                raise ValueError(f"not HOST:CONTAINER[:ro] with absolute paths: {spec!r}")
            if len(parts) == 3 and parts[2] not in ("ro", "rw"):
                raise ValueError(f"mode is ro or rw: {spec!r}")
        return paths


# ---- the manifest (pure) -------------------------------------------------------------------


def job_name(candidate: Candidate, token: str) -> str:
    """`llm-bisect-<short>-<token>`: a DNS-1123 label (63 characters at most). Pure."""
    return f"llm-bisect-{candidate.short}-{token}"[:63].lower()


def _labels(run_id: str, candidate: Candidate) -> dict[str, str]:
    return {MANAGED_BY: "llm-bisect", RUN_LABEL: run_id, COMMIT_LABEL: candidate.commit}


def _metadata(
    cfg: KubernetesServerConfig, name: str, labels: Mapping[str, str], owner: str
) -> ObjectMeta:
    return {
        "name": name,
        "namespace": cfg.namespace,
        "labels": dict(labels),
        "annotations": {OWNER_ANNOTATION: owner},
    }


def literal(word: str) -> str:
    """A word of a container's command, args or env value as the kubelet passes it on as
    written: it expands `$(VAR)` there and reads `$$` as `$`. Pure."""
    return word.replace("$", "$$")


@dataclass(frozen=True)
class Shipped:
    """A file of an instrument's folder, shipped to the pod in the probe's ConfigMap."""

    folder: int
    """Which of the instrument's folders (mounted at INSTRUMENT_DIR/folder)."""
    path: str
    """Its path inside the folder."""
    key: str
    """Its key in the ConfigMap."""
    data: bytes


def shipped_files(instrument: Instrument | None) -> list[Shipped]:
    """Every file under the instrument's folders (no __pycache__), in order; a LaunchError
    where they do not fit one ConfigMap."""
    found: list[Shipped] = []
    for i, folder in enumerate(instrument.paths if instrument is not None else ()):
        for file in sorted(folder.rglob("*")):
            rel = file.relative_to(folder)
            if not file.is_file() or "__pycache__" in rel.parts:
                continue
            safe = re.sub(r"[^-._a-zA-Z0-9]", "_", rel.as_posix())[-200:]
            found.append(Shipped(i, rel.as_posix(), f"{i}.{len(found)}.{safe}", file.read_bytes()))
    size = sum(len(f.data) for f in found)
    if size > CONFIG_MAP_MAX:
        raise LaunchError(
            f"kubernetes: the localisation's files are {size} bytes, over one ConfigMap's "
            f"{CONFIG_MAP_MAX}"
        )
    return found


def config_map_manifest(
    cfg: KubernetesServerConfig,
    *,
    name: str,
    candidate: Candidate,
    run_id: str,
    owner: str,
    shipped: Sequence[Shipped],
    owned_by: OwnerReference | None = None,
) -> Manifest:
    """The probe's ConfigMap of its instrument's files (immutable; text as `data`, other
    bytes as `binaryData`), named as its Job; `owned_by` (the Job's or LeaderWorkerSet's
    apiVersion, kind, name, uid): the cluster's garbage collector deletes it with them (a
    Job a SIGKILLed run left, ended by its deadline and TTL, takes its ConfigMap along).
    Pure."""
    data: dict[str, str] = {}
    binary: dict[str, str] = {}
    for f in shipped:
        try:
            data[f.key] = f.data.decode("utf-8")
        except UnicodeDecodeError:
            binary[f.key] = base64.b64encode(f.data).decode("ascii")
    made: Manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(cfg, name, _labels(run_id, candidate), owner),
        "immutable": True,
        "data": data,
    }
    if owned_by is not None:
        made["metadata"]["ownerReferences"] = [owned_by.copy()]
    if binary:
        made["binaryData"] = binary
    return made


@dataclass(frozen=True)
class Workload:
    """What the objects of one probe are made of: their name (the ConfigMap's too), the image
    the kubelet pulls (by digest) and the reference `{image}` names, the candidate, the
    environment (no secret: the caller refused them; secrets come from `secret_env`'s
    Secrets), the run and harness labels, and the instrument with its `shipped` files."""

    name: str
    image: str
    ref: str
    candidate: Candidate
    env: Mapping[str, str]
    run_id: str
    owner: str
    instrument: Instrument | None = None
    shipped: Sequence[Shipped] = ()

    def values(self, port: int) -> dict[str, str]:
        """The placeholders its server's words fill (`{image}`: the reference, not the pin)."""
        c = self.candidate
        return {"commit": c.commit, "short": c.short, "port": str(port), "image": self.ref}

    def extra_args(self) -> list[str]:
        """The instrument's arguments, after the server's own."""
        return list(self.instrument.args) if self.instrument is not None else []


def pod_spec(
    cfg: KubernetesServerConfig,
    work: Workload,
    *,
    args: Sequence[str] | None = None,
    command: Sequence[str] | None = None,
    extra_env: Sequence[EnvVar] = (),
) -> PodSpec:
    """The pod of a probe (one node's): its server container, volumes, placement. `args`
    and `command` as the kubelet takes them (filled); default: none, the image's. The
    instrument's folders from the ConfigMap of the workload's name (its `shipped` files),
    first on PYTHONPATH before its `env`'s (the caller puts the image's own there). Pure."""
    image, env, instrument = work.image, work.env, work.instrument
    config_map, shipped = work.name, work.shipped
    merged = {**env, **(instrument.env if instrument else {})}
    folders = sorted({f.folder for f in shipped})
    if folders:
        placed = [f"{INSTRUMENT_DIR}/{i}" for i in folders]
        merged["PYTHONPATH"] = ":".join([*placed, merged.get("PYTHONPATH", "")]).rstrip(":")
    variables: list[EnvVar] = [{"name": k, "value": literal(v)} for k, v in sorted(merged.items())]
    variables += [v.copy() for v in extra_env]
    variables += [
        {"name": k, "valueFrom": {"secretKeyRef": {"name": r.secret, "key": r.key}}}
        for k, r in sorted(cfg.secret_env.items())
    ]
    volumes: list[Volume] = []
    mounts: list[VolumeMount] = []
    if cfg.shm_size is not None:
        volumes.append(
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": cfg.shm_size}}
        )
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    if cfg.model_cache is not None:
        cache = cfg.model_cache
        volume: Volume = {"name": "model-cache"}
        if cache.pvc is not None:
            volume["persistentVolumeClaim"] = {"claimName": cache.pvc}
        else:
            volume["hostPath"] = {"path": str(cache.host_path), "type": "DirectoryOrCreate"}
        volumes.append(volume)
        mounts.append({"name": "model-cache", "mountPath": cache.mount})
    for i in folders:
        items: list[KeyToPath] = [{"key": f.key, "path": f.path} for f in shipped if f.folder == i]
        volumes.append(
            {"name": f"instrument-{i}", "configMap": {"name": config_map, "items": items}}
        )
        mounts.append(
            {"name": f"instrument-{i}", "mountPath": f"{INSTRUMENT_DIR}/{i}", "readOnly": True}
        )
    for i, spec in enumerate(cfg.host_paths):
        host, inside, *mode = spec.split(":")
        volumes.append({"name": f"host-{i}", "hostPath": {"path": host, "type": "Directory"}})
        mount: VolumeMount = {"name": f"host-{i}", "mountPath": inside}
        if mode == ["ro"]:
            mount["readOnly"] = True
        mounts.append(mount)
    container: Container = {
        "name": CONTAINER,
        "image": image,
        "args": list(args or []),
        "ports": [{"name": "http", "containerPort": cfg.port, "protocol": "TCP"}],
        "env": variables,
        "volumeMounts": mounts,
        "imagePullPolicy": "IfNotPresent",
    }
    if command:
        container["command"] = list(command)
    limits: dict[str, str] = {}
    if cfg.gpus is not None:
        limits["nvidia.com/gpu"] = str(cfg.gpus)
    if cfg.memory is not None:
        limits["memory"] = cfg.memory
    limits.update(cfg.extra_resources)
    resources: Resources = {}
    if limits:
        resources["limits"] = limits
    if cfg.resource_claims:
        resources["claims"] = [{"name": c.name} for c in cfg.resource_claims]
    if resources:
        container["resources"] = resources
    pod: PodSpec = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": cfg.stop_timeout,
        "enableServiceLinks": False,
        "containers": [container],
        "volumes": volumes,
    }
    if cfg.resource_claims:
        pod["resourceClaims"] = [
            {"name": c.name, "resourceClaimTemplateName": c.template}
            if c.template is not None
            else {"name": c.name, "resourceClaimName": c.claim}
            for c in cfg.resource_claims
        ]
    if cfg.node_selector:
        pod["nodeSelector"] = dict(cfg.node_selector)
    if cfg.affinity is not None:
        pod["affinity"] = cast(Affinity, cfg.affinity)  # as the config wrote it
    if cfg.tolerations:
        pod["tolerations"] = cast(list[Toleration], list(cfg.tolerations))  # as written
    if cfg.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in cfg.image_pull_secrets]
    return pod


def away_from(affinity: Mapping[str, Any] | None, nodes: Sequence[str]) -> Affinity:
    """A pod `affinity` (the config's, or none) that keeps the pod off `nodes` (as pods'
    spec.nodeName name them; an entry may list several, comma-separated): a required node
    affinity on the node's name (`matchFields` metadata.name NotIn), in each of its node
    selector terms (they are ORed: each must keep off them). Pure."""
    names = list(dict.fromkeys(n for entry in nodes for n in entry.split(",") if n))
    made: Affinity = json.loads(json.dumps(dict(affinity or {})))
    node = made.setdefault("nodeAffinity", {})
    required = node.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    off: NodeSelectorRequirement = {"key": "metadata.name", "operator": "NotIn", "values": names}
    required["nodeSelectorTerms"] = [
        {**t, "matchFields": [*(t.get("matchFields") or []), off]} for t in terms
    ]
    return made


NO_OTHER_NODE = re.compile(
    r"0/(\d+) nodes are available: (\d+) node\(s\) didn't match Pod's node affinity"
)
"""The scheduler's word where no node's name or labels fit the pod's node affinity."""


def only_avoided(reason: str) -> bool:
    """Whether a pending pod's reason says no node fits its node affinity (every node is
    kept off, or does not match the config's own selector). Pure."""
    found = NO_OTHER_NODE.search(reason)
    return found is not None and found.group(1) == found.group(2)


def job_manifest(cfg: KubernetesServerConfig, work: Workload) -> Manifest:
    """The batch/v1 Job of one probe on one node (its instrument's `shipped` files from the
    ConfigMap of its name). Pure."""
    name, candidate, run_id, owner = work.name, work.candidate, work.run_id, work.owner
    values = work.values(cfg.port)
    labels = _labels(run_id, candidate)
    extra_args = work.extra_args()
    pod = pod_spec(
        cfg,
        work,
        args=[*(fill(literal(a), values) for a in cfg.args), *map(literal, extra_args)],
        command=[literal(e) for e in cfg.entrypoint] if cfg.entrypoint else None,
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(cfg, name, labels, owner),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": cfg.active_deadline_s,
            "ttlSecondsAfterFinished": cfg.ttl_after_finished_s,
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def _node_words(
    cfg: KubernetesServerConfig,
    group: Group,
    args: Sequence[str],
    values: Mapping[str, str],
    extra: Sequence[str],
) -> list[str]:
    """A node's args, placeholders filled: `{head}` and `{node_rank}` as `$(VAR)` that the
    kubelet expands; a `$` of the user's written `$$` (the kubelet's escape), so that it
    reaches the server as written."""
    filled = {**values, **RUNTIME[group], "nnodes": str(cfg.nodes)}
    return [fill(literal(a), filled) for a in args] + [literal(e) for e in extra]


def node_script(head: Sequence[str], worker: Sequence[str]) -> str:
    """What an Indexed Job's pod runs (`sh -c`): the head's command at index 0, the
    worker's elsewhere; every word quoted for the shell. Pure."""
    return (
        'if [ "$JOB_COMPLETION_INDEX" = 0 ]; then exec '
        + " ".join(shlex.quote(w) for w in head)
        + "; else exec "
        + " ".join(shlex.quote(w) for w in worker)
        + "; fi"
    )


def group_manifests(cfg: KubernetesServerConfig, group: Group, work: Workload) -> list[Manifest]:
    """The objects of one multi-node probe, in the order they are created: a headless
    Service and an Indexed Job (`group: indexed-job`), or a LeaderWorkerSet. Pure.

        Indexed Job  NAME-0 (head: JOB_COMPLETION_INDEX 0)   NAME-1 ... (workers)
                     └── hostname NAME-i, subdomain NAME ── Service NAME (clusterIP: None)
                         {head} = $(LLM_BISECT_HEAD) = NAME-0.NAME.NAMESPACE
        LWS          NAME-0 (leader: leaderTemplate)         NAME-0-1 ... (workerTemplate)
                         {head} = $(LWS_LEADER_ADDRESS), set by LWS's controller"""
    assert cfg.entrypoint and group != "job"
    name, candidate, run_id, owner = work.name, work.candidate, work.run_id, work.owner
    values = work.values(cfg.port)
    labels = _labels(run_id, candidate)
    extra = work.extra_args()
    head = _node_words(cfg, group, cfg.args, values, extra)
    worker_args = cfg.worker_args if cfg.worker_args is not None else cfg.args
    worker = _node_words(cfg, group, worker_args, values, extra)
    entrypoint = [literal(e) for e in cfg.entrypoint]
    meta = _metadata(cfg, name, labels, owner)
    if group == "leaderworkerset":
        templates: list[PodTemplate] = []
        for words in (head, worker):
            pod = pod_spec(cfg, work, command=entrypoint)
            pod["containers"][0]["args"] = words
            del pod["restartPolicy"]  # a StatefulSet's pods: Always (a restart is seen)
            templates.append({"metadata": {"labels": labels}, "spec": pod})
        leader_worker: LeaderWorkerTemplate = {
            "size": cfg.nodes,
            "restartPolicy": "None",
            "leaderTemplate": templates[0],
            "workerTemplate": templates[1],
        }
        return [
            {
                "apiVersion": f"{LWS_GROUP}/{LWS_VERSION}",
                "kind": "LeaderWorkerSet",
                "metadata": meta,
                "spec": {
                    "replicas": 1,
                    "startupPolicy": "LeaderCreated",
                    "leaderWorkerTemplate": leader_worker,
                },
            }
        ]
    address = f"{name}-0.{name}.{cfg.namespace}"
    pod = pod_spec(
        cfg,
        work,
        command=["/bin/sh", "-c", node_script([*entrypoint, *head], [*entrypoint, *worker])],
        extra_env=[{"name": HEAD_ENV, "value": address}],
    )
    pod["subdomain"] = name
    service: Manifest = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {RUN_LABEL: run_id, "batch.kubernetes.io/job-name": name},
            "ports": [{"name": "http", "port": cfg.port, "targetPort": cfg.port}],
        },
    }
    job: Manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "completionMode": "Indexed",
            "completions": cfg.nodes,
            "parallelism": cfg.nodes,
            "backoffLimit": 0,
            "activeDeadlineSeconds": cfg.active_deadline_s,
            "ttlSecondsAfterFinished": cfg.ttl_after_finished_s,
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
    return [service, job]


def pod_trouble(pod: Pod) -> tuple[str, str] | None:
    """Why a pod will not run the server, from its status: ("unplaced" | "exited" |
    "pulling", reason) or None while it may still come up. Pure."""
    status = pod.get("status") or {}
    reason = str(status.get("reason") or "")
    if reason in LOST or (status.get("phase") == "Failed" and not _terminated(status)):
        message = status.get("message") or ""
        return "unplaced", f"pod {reason or 'failed'}{': ' + message if message else ''}"
    for c in status.get("containerStatuses") or []:
        state = c.get("state") or {}
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in CONFIG_FAILED:
            return "unplaced", f"{waiting['reason']}: {waiting.get('message') or ''}".rstrip(": ")
        if waiting.get("reason") in PULL_FAILED:
            message = str(waiting.get("message") or "")
            kind = "pulling" if any(t in message for t in PULL_TRANSIENT) else "no-image"
            return kind, f"{waiting['reason']}: {message}".rstrip(": ")
        done = state.get("terminated")
        if not done and c.get("restartCount"):  # restartPolicy Always (an LWS's pods)
            done = (c.get("lastState") or {}).get("terminated")
        if done:
            why = done.get("reason") or "Error"
            return "exited", f"container {why}, exit code {done.get('exitCode')}"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return "pending", f"{cond.get('reason') or 'unscheduled'}: {cond.get('message', '')}"
    if status.get("phase") in ("Succeeded", "Failed"):
        return "exited", f"pod {status['phase']}"
    return None


def _terminated(status: PodStatus) -> bool:
    return any(
        (c.get("state") or {}).get("terminated") for c in status.get("containerStatuses") or []
    )


# ---- the API, retried ----------------------------------------------------------------------


def _retryable(exc: BaseException) -> bool:
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    if isinstance(exc, ApiException):
        return exc.status in RETRIED_STATUS
    return isinstance(exc, HTTPError | ConnectionError)


def _log_api_retry(state: RetryCallState) -> None:
    import logging

    error = state.outcome.exception() if state.outcome else None
    logging.getLogger("llm_bisect.retry").info(
        "kubernetes API: attempt %d failed (%s), retrying", state.attempt_number, error
    )


class _Late(stop_base):
    """Stop retrying once the call's deadline passed."""

    def __init__(self, late: Callable[[], bool]) -> None:
        self.late = late

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.late()


def api_policy(
    sleep: Callable[[float], None], late: Callable[[], bool] = lambda: False
) -> Retrying:
    """The Kubernetes API's answers 429 and 5xx, and a dropped connection: retried
    API_RETRIES times, backing off 0.2 s to 5 s, and never once `late()` (the call's
    deadline passed)."""
    return Retrying(
        stop=stop_any(stop_after_attempt(API_RETRIES), _Late(late)),
        wait=wait_exponential(multiplier=0.2, min=0.2, max=5.0),
        retry=retry_if_exception(_retryable),
        sleep=sleep,
        before_sleep=_log_api_retry,
        reraise=True,
    )


def interrupted(exc: BaseException) -> None:
    """Raise again the Ctrl-C (or SIGTERM, SystemExit) an error stands for: the client's
    websocket calls (exec, port-forward) turn one into ApiException(status=0), which would
    make an interrupt a failed exec and the probe go on to a verdict."""
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, KeyboardInterrupt | SystemExit):
        raise cause


def within(seconds: float, what: str, fn: Callable[[], T]) -> T:
    """fn's answer, fn run in a thread of its own; a LaunchError where it has not ended within
    `seconds` (it is left to end by itself: a socket that never answers holds no caller, and
    a call's own reads stop at its deadline)."""
    done = threading.Event()
    ended: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            ended.append((True, fn()))
        except BaseException as exc:  # handed to the caller, whatever it is
            ended.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=run, name=f"kubernetes: {what}", daemon=True).start()
    if not done.wait(max(0.0, seconds)):
        raise LaunchError(f"kubernetes: {what}: no answer within {seconds:g}s (server.api.timeout)")
    ok, value = ended.pop()  # no cycle through the error's traceback to this frame
    if ok:
        return value  # type: ignore[no-any-return]
    raise value


def _settimeout(response: Any, seconds: float | None) -> None:
    """The socket under an answer waits `seconds` at most for each read (None: without end)."""
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is not None:
        with suppress(OSError):
            sock.settimeout(None if seconds is None else max(seconds, 0.001))


def read_answer(
    response: Any, what: str, deadline: float, clock: Callable[[], float], max_bytes: int
) -> bytearray:
    """An answer's body, read until `deadline` and `max_bytes` at most (a LaunchError past
    either: the connection is closed, never kept half read)."""
    body = bytearray()  # grown in place: the answer is held once, not twice
    try:
        while True:
            left = deadline - clock()
            if left <= 0:
                raise LaunchError(f"kubernetes: {what}: the answer took over its deadline "
                                  "(server.api.timeout)")  # fmt: skip
            _settimeout(response, left)
            chunk = response.read1(65536)
            if not chunk:
                break
            body += chunk
            if len(body) > max_bytes:
                raise LaunchError(
                    f"kubernetes: {what}: the answer is over {max_bytes} bytes "
                    "(server.api.max_bytes)"
                )
    except BaseException:
        body.clear()  # now, not when the error's traceback (which holds it) is collected
        with suppress(Exception):
            response.close()
        raise
    with suppress(Exception):
        response.release_conn()
    return body


Shape: TypeAlias = "dict[str, Shape] | list[Shape]"
"""What `shaped` checks: a dict, an object's keys' shapes; a one-item list, a list's."""

OBJECT_SHAPE: dict[str, Shape] = {"metadata": {"labels": {}, "annotations": {}}}
"""What the launcher reads of any object the API lists: objects where the API has them."""
POD_SHAPE: Shape = {
    **OBJECT_SHAPE,
    "spec": {"containers": [{}]},
    "status": {
        "conditions": [{}],
        "containerStatuses": [
            {"state": {"waiting": {}, "terminated": {}}, "lastState": {"terminated": {}}}
        ],
    },
}
"""What the launcher reads of a pod (pod_trouble, the fingerprint): objects and lists of
objects where the API has them."""


def shaped(value: Any, shape: Shape, what: str, where: str = "") -> None:
    """A LaunchError where `value` is not of `shape` (a dict: an object whose keys named there
    are, when present and not null, of their shape; a one-item list: a list of that item's
    shape). Pure."""
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            name = where or "the answer"
            raise LaunchError(
                f"kubernetes: {what}: {name} is {type(value).__name__}, not an object"
            )
        for key, inner in shape.items():
            if value.get(key) is not None:
                shaped(value[key], inner, what, f"{where}.{key}" if where else key)
    elif isinstance(shape, list):
        if not isinstance(value, list):
            raise LaunchError(f"kubernetes: {what}: {where} is {type(value).__name__}, not a list")
        for i, item in enumerate(value):
            shaped(item, shape[0], what, f"{where}[{i}]")


def decoded(data: bytes | bytearray, what: str, items: Shape | None = None) -> Any:
    """An API answer's JSON object; with `items` (a shape), its `items` a list of them. A
    LaunchError for anything else (HTML from a proxy, a list, objects that are not). Pure.
    The caller names what it is (a Manifest, an ObjectList, a PodList ...)."""
    try:
        found = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        start = data[:40].decode("utf-8", "replace")
        raise LaunchError(
            f"kubernetes: {what}: the answer is not JSON ({exc}; it starts {start!r})"
        ) from None
    shaped(found, {"metadata": {}, **({"items": [items]} if items is not None else {})}, what)
    return found


def answer_lines(
    response: Any, what: str, deadline: float, clock: Callable[[], float], max_line: int
) -> Iterator[bytes]:
    """A streamed answer's lines (a watch's events) as they come, until it ends; a LaunchError
    where a line is over `max_line` bytes, or the stream outlives `deadline`."""
    pending = b""
    while True:
        left = deadline - clock()
        if left <= 0:
            raise LaunchError(
                f"kubernetes: {what}: the stream went on past its deadline (server.api.timeout)"
            )
        chunk = response.read1(65536)
        if not chunk:
            return
        *lines, pending = (pending + chunk).split(b"\n")
        yield from (line for line in lines if line.strip())
        if len(pending) > max_line:
            raise LaunchError(
                f"kubernetes: {what}: a line over {max_line} bytes (server.api.max_line)"
            )


def watch_event(line: bytes, what: str) -> tuple[str, Pod]:
    """A watch line's (type, object) (an ERROR's code raised as the client's ApiException, as
    its own watch does); a LaunchError for a line that is no event. Pure."""
    from kubernetes.client.exceptions import ApiException

    event = decoded(line, what)
    kind, found = event.get("type"), event.get("object")
    if not isinstance(kind, str):
        raise LaunchError(f"kubernetes: {what}: an event without a type")
    if kind == "ERROR":
        shaped(found, {}, what, "the ERROR event's object")
        assert isinstance(found, dict)
        code = found.get("code")
        raise ApiException(
            status=code if isinstance(code, int) else 0,
            reason=f"{found.get('reason')}: {found.get('message')}",
        )
    shaped(found, POD_SHAPE, what, "object")
    assert isinstance(found, dict)
    return kind, cast(Pod, found)


ERROR_BODY_MAX = 65536
"""Bytes of an error answer's body kept (the launcher says its status and reason only)."""


def bounded_rest(configuration: Any, max_bytes: int) -> Any:
    """The client's REST layer with an error answer's body read ERROR_BODY_MAX (or
    `max_bytes`) at most, then its connection closed (the client reads it whole before it
    raises)."""
    max_bytes = min(max_bytes, ERROR_BODY_MAX)
    from kubernetes.client import rest

    class Bounded(rest.RESTClientObject):
        def request(self, *args: Any, **kwargs: Any) -> Any:
            answer = super().request(*args, **kwargs)  # type: ignore[no-untyped-call]
            if not 200 <= answer.status <= 299:
                data = bytearray()
                with suppress(Exception):
                    while len(data) <= max_bytes and (chunk := answer.response.read1(65536)):
                        data += chunk
                answer.data = bytes(data[:max_bytes])
                with suppress(Exception):
                    answer.response.close()
            return answer

    return Bounded(configuration)


class Plain:
    """A group of the client's API (CoreV1Api ...) whose methods skip pydantic's
    validate_call (the launcher passes what they take): a call `within` left to end by itself
    must hold no frame of pydantic-core's (Rust), which a thread cannot unwind when the
    interpreter exits under it (the process aborts)."""

    def __init__(self, group: Any) -> None:
        self.group = group

    def __getattr__(self, name: str) -> Any:
        return types.MethodType(inspect.unwrap(getattr(type(self.group), name)), self.group)


class Api:
    """The calls the launcher makes, through the official client, as JSON objects; every
    call retried by `api_policy`, and bounded by `limits` (its deadline, retries included;
    its answer's size); a failure that stays, or a bound reached, is a LaunchError."""

    def __init__(
        self,
        namespace: str,
        kubeconfig: str | None,
        context: str | None,
        sleep: Callable[[float], None] = SYSTEM.sleep,
        limits: ApiLimits | None = None,
        clock: Callable[[], float] = SYSTEM.monotonic,
    ) -> None:
        from kubernetes import client, config

        self.namespace = namespace
        self.sleep = sleep
        self.limits = limits or ApiLimits()
        self.clock = clock
        try:
            if kubeconfig is None and context is None:
                try:
                    config.load_incluster_config()  # type: ignore[no-untyped-call]
                    api = client.ApiClient()
                except config.ConfigException:
                    api = config.new_client_from_config()  # type: ignore[no-untyped-call]
            else:
                api = config.new_client_from_config(  # type: ignore[no-untyped-call]
                    config_file=kubeconfig, context=context
                )
        except (config.ConfigException, OSError, ValueError) as exc:
            raise ConfigError(f"server.kubeconfig: {exc}") from None
        api.rest_client = bounded_rest(api.configuration, self.limits.max_bytes)
        self.client = api
        self.batch = Plain(client.BatchV1Api(api))
        self.core = Plain(client.CoreV1Api(api))
        self.custom = Plain(client.CustomObjectsApi(api))
        self._lws: bool | None = None
        self._lock = threading.Lock()
        self._watches: dict[int, Any] = {}
        """The open watch of each PodWatch (by its stop event), for stop_watches."""

    def _call(
        self,
        what: str,
        fn: Callable[[tuple[float, float]], Any],
        absent: frozenset[int] = frozenset(),
        *,
        read: bool = True,
    ) -> Any:
        """fn's answer's body (`read`: bounded by limits.max_bytes; else the answer, its body
        unread), given fn(the client's `_request_timeout`) all within limits.timeout, its
        retries included; None where the API answered a status in `absent` (404: gone)."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        limits, clock = self.limits, self.clock
        deadline = clock() + limits.timeout
        policy = api_policy(self.sleep, lambda: clock() >= deadline)

        def attempts() -> Any:
            for attempt in policy:
                with attempt:
                    left = max(deadline - clock(), 0.001)
                    answer = fn((min(10.0, left), left))
                    if not read:
                        return answer
                    return read_answer(answer, what, deadline, clock, limits.max_bytes)
            raise AssertionError("unreachable")

        try:
            return within(limits.timeout, what, attempts)
        except ApiException as exc:
            if exc.status in absent:
                return None
            raise LaunchError(f"kubernetes: {what}: HTTP {exc.status} {exc.reason}") from None
        except (HTTPError, OSError) as exc:
            if clock() >= deadline - 0.05:
                raise LaunchError(
                    f"kubernetes: {what}: no answer within {limits.timeout:g}s (server.api.timeout)"
                ) from None
            raise LaunchError(f"kubernetes: {what}: {type(exc).__name__}: {exc}") from None

    def _json(
        self, what: str, fn: Callable[[tuple[float, float]], Any], items: Shape | None = None
    ) -> Any:
        """fn's answer as a JSON object (with `items`: a list of objects of that shape); the
        caller names what it is."""
        return decoded(self._call(what, fn), what, items)

    def create_job(self, manifest: Manifest) -> None:
        """Create the Job; a 409 means a retried create had landed: the Job is ours."""
        from kubernetes import client

        body = client.V1Job.from_dict(dict(manifest))
        assert body is not None
        self._call(
            f"create job {manifest['metadata']['name']}",
            lambda t: self.batch.create_namespaced_job(
                self.namespace, body, _preload_content=False, _request_timeout=t
            ),
            absent=frozenset({409}),
        )

    def listed_pods(self, selector: str) -> tuple[list[Pod], str]:
        """The pods the selector picks and the list's resourceVersion (a watch starts there)."""
        found: PodList = self._json(
            f"list pods {selector}",
            lambda t: self.core.list_namespaced_pod(
                self.namespace, label_selector=selector, _preload_content=False, _request_timeout=t
            ),
            POD_SHAPE,
        )
        version = str((found.get("metadata") or {}).get("resourceVersion") or "")
        return list(found.get("items") or []), version

    def watch_pods(
        self, selector: str, version: str, stop: threading.Event
    ) -> Iterator[tuple[str, Pod]]:
        """(event type, pod) as the API reports them after `version`, until `stop` is set
        (each request open WATCH_S, resumed from the last event); the client's ApiException
        as it comes (410 where `version` is too old, compacted; an ERROR event's code) and its
        connection errors (the caller lists again). A LaunchError where a request outlives
        WATCH_S + limits.timeout, or a line is over limits.max_line or not an event."""
        limits, clock = self.limits, self.clock
        what = "watch pods"
        while not stop.is_set():
            deadline = clock() + WATCH_S + limits.timeout
            response: Any = within(
                limits.timeout,
                what,
                functools.partial(
                    self.core.list_namespaced_pod,
                    self.namespace,
                    label_selector=selector,
                    resource_version=version,
                    watch=True,
                    timeout_seconds=WATCH_S,
                    allow_watch_bookmarks=True,
                    _preload_content=False,
                    # a connection that died silently (a laptop asleep, a VPN gone) is a
                    # read timeout, not a watch that never ends: listed again
                    _request_timeout=(10.0, WATCH_S + 30.0),
                ),
            )
            with self._lock:
                self._watches[id(stop)] = response
            try:
                for line in answer_lines(response, what, deadline, clock, limits.max_line):
                    kind, pod = watch_event(line, what)
                    version = str((pod.get("metadata") or {}).get("resourceVersion") or version)
                    if kind != "BOOKMARK":
                        yield kind, pod
                    if stop.is_set():
                        break
            finally:
                with self._lock:
                    self._watches.pop(id(stop), None)
                with suppress(Exception):
                    response.close()

    def stop_watches(self, stop: threading.Event) -> None:
        """End the watch `stop` belongs to now (its stream's socket shut), not at its next
        event."""
        with self._lock:
            response = self._watches.get(id(stop))
        if response is not None:
            with suppress(Exception):
                response.shutdown()

    def jobs(self, selector: str) -> list[Manifest]:
        found: ObjectList = self._json(
            f"list jobs {selector}",
            lambda t: self.batch.list_namespaced_job(
                self.namespace, label_selector=selector, _preload_content=False, _request_timeout=t
            ),
            OBJECT_SHAPE,
        )
        return list(found.get("items") or [])

    def delete_job(self, name: str) -> bool:
        """Delete a Job and, first, its pods (foreground); False when it was gone already."""
        done = self._call(
            f"delete job {name}",
            lambda t: self.batch.delete_namespaced_job(
                name,
                self.namespace,
                propagation_policy="Foreground",
                _preload_content=False,
                _request_timeout=t,
            ),
            absent=frozenset({404}),
        )
        return done is not None

    def has_lws(self) -> bool:
        """Whether the cluster serves LeaderWorkerSets (LWS's CRD installed): the API's
        group discovery, asked once."""
        if self._lws is None:
            from kubernetes import client

            found = self._json(
                "discover API groups",
                lambda t: Plain(client.ApisApi(self.client)).get_api_versions(
                    _preload_content=False, _request_timeout=t
                ),
            )
            shaped(found, {"groups": [{"versions": [{}]}]}, "discover API groups")
            groups = found.get("groups") or []
            self._lws = any(
                g.get("name") == LWS_GROUP
                and any(v.get("version") == LWS_VERSION for v in g.get("versions") or [])
                for g in groups
            )
        return self._lws

    def _create_core(self, manifest: Manifest) -> None:
        """Create a Service or ConfigMap; a 409 means a retried create had landed."""
        from kubernetes import client

        kind = str(manifest["kind"])
        body = getattr(client, f"V1{kind}").from_dict(dict(manifest))
        create = getattr(self.core, f"create_namespaced_{CORE_KINDS[kind]}")
        self._call(
            f"create {kind.lower()} {manifest['metadata']['name']}",
            lambda t: create(self.namespace, body, _preload_content=False, _request_timeout=t),
            absent=frozenset({409}),
        )

    def listed(self, kind: str, selector: str) -> list[Manifest]:
        """The Services or ConfigMaps the selector picks."""
        found = getattr(self.core, f"list_namespaced_{CORE_KINDS[kind]}")
        made: ObjectList = self._json(
            f"list {kind.lower()}s {selector}",
            lambda t: found(
                self.namespace, label_selector=selector, _preload_content=False, _request_timeout=t
            ),
            OBJECT_SHAPE,
        )
        return list(made.get("items") or [])

    def _delete_core(self, kind: str, name: str) -> bool:
        delete = getattr(self.core, f"delete_namespaced_{CORE_KINDS[kind]}")
        done = self._call(
            f"delete {kind.lower()} {name}",
            lambda t: delete(name, self.namespace, _preload_content=False, _request_timeout=t),
            absent=frozenset({404}),
        )
        return done is not None

    def create_lws(self, manifest: Manifest) -> None:
        self._call(
            f"create leaderworkerset {manifest['metadata']['name']}",
            lambda t: self.custom.create_namespaced_custom_object(
                LWS_GROUP,
                LWS_VERSION,
                self.namespace,
                LWS_PLURAL,
                dict(manifest),
                _preload_content=False,
                _request_timeout=t,
            ),
            absent=frozenset({409}),
        )

    def lws(self, selector: str) -> list[Manifest]:
        """The LeaderWorkerSets the selector picks (none where LWS is not installed)."""
        if not self.has_lws():
            return []
        found: ObjectList = self._json(
            f"list leaderworkersets {selector}",
            lambda t: self.custom.list_namespaced_custom_object(
                LWS_GROUP,
                LWS_VERSION,
                self.namespace,
                LWS_PLURAL,
                label_selector=selector,
                _preload_content=False,
                _request_timeout=t,
            ),
            OBJECT_SHAPE,
        )
        return list(found.get("items") or [])

    def delete_lws(self, name: str) -> bool:
        """Delete a LeaderWorkerSet and, first, its pods (foreground)."""
        done = self._call(
            f"delete leaderworkerset {name}",
            lambda t: self.custom.delete_namespaced_custom_object(
                LWS_GROUP,
                LWS_VERSION,
                self.namespace,
                LWS_PLURAL,
                name,
                propagation_policy="Foreground",
                _preload_content=False,
                _request_timeout=t,
            ),
            absent=frozenset({404}),
        )
        return done is not None

    def read(self, kind: str, name: str) -> Manifest | None:
        """The Job or LeaderWorkerSet as the API has it; None once it is gone (a foreground
        delete ends with it, after its pods)."""

        def get(timeout: tuple[float, float]) -> Any:
            if kind == "LeaderWorkerSet":
                return self.custom.get_namespaced_custom_object(
                    LWS_GROUP, LWS_VERSION, self.namespace, LWS_PLURAL, name,
                    _preload_content=False, _request_timeout=timeout,
                )  # fmt: skip
            return self.batch.read_namespaced_job(
                name, self.namespace, _preload_content=False, _request_timeout=timeout
            )

        what = f"read {kind.lower()} {name}"
        found = self._call(what, get, absent=frozenset({404}))
        return None if found is None else decoded(found, what)

    def uid(self, kind: str, name: str) -> str:
        """The uid of the Job or LeaderWorkerSet just created (what an ownerReference names)."""
        found = self.read(kind, name) or {}
        return str((found.get("metadata") or {}).get("uid") or "")

    def create(self, manifest: Manifest) -> None:
        """Create a Job, Service, ConfigMap or LeaderWorkerSet."""
        if manifest["kind"] in CORE_KINDS:
            self._create_core(manifest)
        elif manifest["kind"] == "Job":
            self.create_job(manifest)
        else:
            self.create_lws(manifest)

    def delete(self, kind: str, name: str) -> bool:
        """Delete a Job, Service, ConfigMap or LeaderWorkerSet (its pods first); False: gone
        already."""
        if kind in CORE_KINDS:
            return self._delete_core(kind, name)
        return self.delete_job(name) if kind == "Job" else self.delete_lws(name)

    def gone(self, kind: str, name: str) -> bool:
        """Whether a deleted Job or LeaderWorkerSet is gone (what else it deletes at once)."""
        return kind not in ("Job", "LeaderWorkerSet") or self.read(kind, name) is None

    def secret_value(self, name: str, key: str) -> str | None:
        """A key of a Secret in the namespace, decoded (`get` on it); None where the Secret
        or the key is absent."""
        what = f"read secret {name}"
        found = self._call(
            what,
            lambda t: self.core.read_namespaced_secret(
                name, self.namespace, _preload_content=False, _request_timeout=t
            ),
            absent=frozenset({404}),
        )
        data = (decoded(found, what).get("data") or {}) if found is not None else {}
        value = data.get(key)
        if not isinstance(value, str):
            return None
        try:
            return base64.b64decode(value, validate=True).decode("utf-8", "replace")
        except ValueError:
            return None

    def follow_log(self, pod: str) -> Iterator[bytes]:
        """The pod's log as it comes, until the container ends or the stream is closed."""
        response = self._call(
            f"log of {pod}",
            lambda t: self.core.read_namespaced_pod_log(
                pod,
                self.namespace,
                container=CONTAINER,
                follow=True,
                _preload_content=False,
                _request_timeout=t,
            ),
            read=False,
        )
        _settimeout(response, None)  # a server quiet for an hour is still followed
        try:
            yield from response.stream(4096, decode_content=False)
        finally:
            response.release_conn()

    def _own_core(self) -> tuple[Any, Callable[[], None]]:
        """A CoreV1Api on an ApiClient of its own, and how to close it: the client's
        stream() and portforward() swap their ApiClient's call_api while they run, so a
        shared one would send another thread's calls (a delete) down a websocket."""
        from kubernetes import client

        own = client.ApiClient(self.client.configuration)

        def done() -> None:
            with suppress(Exception):
                own.close()  # type: ignore[no-untyped-call]

        return Plain(client.CoreV1Api(own)), done

    def exec(self, pod: str, argv: Sequence[str], timeout: float) -> tuple[int | None, bytes]:
        """Run argv in the pod's server container (the API's exec, over a websocket): its
        exit code (None: it did not end within `timeout`) and its stdout."""
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import stream

        core, done = self._own_core()
        try:
            ws = within(  # the websocket's handshake: an API may never answer it
                self.limits.timeout,
                f"exec in {pod}",
                lambda: stream(
                    core.connect_get_namespaced_pod_exec,
                    pod,
                    self.namespace,
                    command=list(argv),
                    container=CONTAINER,
                    stderr=True,
                    stdin=False,
                    stdout=True,
                    tty=False,
                    binary=True,
                    _preload_content=False,
                ),
            )
        except ApiException as exc:
            interrupted(exc)
            raise LaunchError(f"kubernetes: exec in {pod}: {exc.reason}") from None
        finally:
            done()
        try:
            ws.run_forever(timeout=timeout)
            out = ws.read_stdout()
            code = ws.returncode
        finally:
            ws.close()
        data = out if isinstance(out, bytes) else str(out or "").encode()
        return (code if isinstance(code, int) else None), data

    def forward(self, pod: str, port: int) -> Any:
        """A socket to the pod's `port` through the API (port-forward over a websocket)."""
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import portforward

        core, done = self._own_core()
        try:
            pf = portforward(
                core.connect_get_namespaced_pod_portforward,
                pod,
                self.namespace,
                ports=str(port),
            )
        except ApiException as exc:
            interrupted(exc)
            raise LaunchError(f"kubernetes: port-forward to {pod}: {exc.reason}") from None
        finally:
            done()
        return pf.socket(port)

    def close(self) -> None:
        with suppress(Exception):
            self.client.close()  # type: ignore[no-untyped-call]


class PodWatch:
    """A probe's pods as the API says they are now: listed once, then kept by a watch from
    the list's resourceVersion in a thread (a 410 Gone, or the watch failing: listed again,
    watched from there, backing off when it keeps failing; a Role without `watch` on pods:
    listed every POLL_S instead). A list that keeps failing, after the API's retries, is
    raised by `pods`. `wait(seen)` returns once the pods changed after the `pods()` that
    gave `seen`, or when the time is up."""

    def __init__(self, api: Api, selector: str) -> None:
        self.api = api
        self.selector = selector
        self.changed = threading.Condition()
        self.stop = threading.Event()
        self.polling = False
        """The API refused the watch (401/403): the pods are listed every POLL_S."""
        self._pods: dict[str, Pod] = {}
        self._gone: set[str] = set()
        self._seen = 0
        self._error: Unplaced | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PodWatch:
        version = self._list()  # the first list's LaunchError is the caller's
        self._thread = threading.Thread(target=self._follow, args=(version,), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.api.stop_watches(self.stop)
        with self.changed:
            self.changed.notify_all()

    def _list(self) -> str:
        items, version = self.api.listed_pods(self.selector)
        with self.changed:
            listed = {str((p.get("metadata") or {}).get("name", "")): p for p in items}
            self._gone |= set(self._pods) - set(listed)  # deleted while the watch was down
            self._pods = listed
            self._seen += 1
            self.changed.notify_all()
        return version

    def _follow(self, version: str) -> None:
        try:
            self._watch(version)
        except Exception as exc:  # whatever ends the thread is said by pods(), never lost:
            # the API's failing, not the server's (never a crash under `regress: crash`)
            said = str(exc) if isinstance(exc, LaunchError) else f"kubernetes: {exc}"
            self._fail(Unplaced(said))

    def _watch(self, version: str) -> None:
        from kubernetes.client.exceptions import ApiException

        failures = 0
        while not self.stop.is_set():
            if self.polling:
                if self.stop.wait(POLL_S):
                    return
                self._list()
                continue
            try:
                for kind, pod in self.api.watch_pods(self.selector, version, self.stop):
                    name = str((pod.get("metadata") or {}).get("name", ""))
                    with self.changed:
                        if kind == "DELETED":
                            self._pods.pop(name, None)
                            self._gone.add(name)
                        elif kind in ("ADDED", "MODIFIED"):
                            self._pods[name] = pod
                        self._seen += 1
                        self.changed.notify_all()
                    failures = 0
                return
            except LaunchError:
                raise  # a bound of server.api reached: said, never listed again
            except ApiException as exc:
                if exc.status in (401, 403):
                    self.polling = True
                    _log_api_retry_of(
                        "watch pods", f"HTTP {exc.status} (the Role lacks `watch` on pods)"
                    )
                    continue
                if exc.status != GONE and exc.status not in RETRIED_STATUS:
                    raise LaunchError(
                        f"kubernetes: watch pods: HTTP {exc.status} {exc.reason}"
                    ) from None
                failures += 1  # a first 410 lists again at once; more in a row back off
            except Exception as exc:  # a dropped watch: the list below says if the API is gone
                if self.stop.is_set():
                    return
                _log_api_retry_of("watch pods", exc)
                failures += 2
            if failures > 1 and self.stop.wait(min(5.0, 0.2 * 2 ** (failures - 2))):
                return  # backing off as the API's retries do
            version = self._list()

    def _fail(self, exc: Unplaced) -> None:
        with self.changed:
            self._error = exc
            self.changed.notify_all()

    def pods(self) -> tuple[list[Pod], int]:
        """The pods now, and a token for `wait`: the changes seen so far."""
        with self.changed:
            if self._error is not None:
                raise self._error
            return list(self._pods.values()), self._seen

    def gone(self) -> bool:
        """Whether a pod it saw was deleted (the watch's DELETED, or missing from a list)."""
        with self.changed:
            return bool(self._gone)

    def wait(self, seen: int, timeout: float) -> None:
        """Until the pods changed after the `pods()` that gave `seen` (or the watch failed,
        or stopped), at most `timeout` seconds."""
        with self.changed:
            self.changed.wait_for(
                lambda: self._seen != seen or self._error is not None or self.stop.is_set(),
                timeout=max(0.0, timeout),
            )


def _log_api_retry_of(what: str, exc: object) -> None:
    import logging

    logging.getLogger("llm_bisect.retry").info("kubernetes API: %s: %s, listing again", what, exc)


class Forwarder:
    """A port on 127.0.0.1 that reaches a pod's port through the API, as `kubectl
    port-forward` does: each connection accepted here is one port-forward stream."""

    def __init__(self, api: Api, pod: str, port: int) -> None:
        self.api, self.pod, self.port = api, pod, port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.local_port: int = self._listener.getsockname()[1]
        self._open: list[Any] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(conn,), daemon=True).start()

    def _relay(self, conn: socket.socket) -> None:
        try:
            remote = within(
                self.api.limits.timeout,
                f"port-forward to {self.pod}",
                lambda: self.api.forward(self.pod, self.port),
            )
        except LaunchError:
            conn.close()
            return
        with self._lock:
            if self._closed:
                conn.close()
                remote.close()
                return
            self._open += [conn, remote]

        def pump(src: Any, dst: Any) -> None:
            with suppress(OSError):
                while chunk := src.recv(65536):
                    dst.sendall(chunk)
            with suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

        up = threading.Thread(target=pump, args=(conn, remote), daemon=True)
        up.start()
        pump(remote, conn)
        up.join(timeout=5)
        for end in (conn, remote):
            with suppress(OSError):
                end.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            ends, self._open = self._open, []
        with suppress(OSError):
            self._listener.close()
        for end in ends:
            with suppress(OSError):
                end.close()


# ---- the server ----------------------------------------------------------------------------


class KubernetesServer(LoggedServer):
    """One probe's Job (or, on several nodes, its Indexed Job and Service, or its
    LeaderWorkerSet). Enter creates them; exit deletes them (foreground) and waits until
    their pods are gone."""

    def __init__(
        self,
        launcher: KubernetesLauncher,
        candidate: Candidate,
        probe_dir: Path,
        instrument: Instrument | None,
        avoid: Sequence[str] = (),
    ) -> None:
        self.launcher = launcher
        self.cfg = launcher.cfg
        self.candidate = candidate
        self.probe_dir = probe_dir
        self.instrument = instrument
        self.avoid = list(dict.fromkeys(avoid))
        """The nodes its pods keep off (`away_from`: launchers.Avoids); [] once none other
        took them."""
        self.asked = list(self.avoid)
        """The nodes it was asked to keep off."""
        self.log_path = probe_dir / "server.log"
        self.secrets = launcher.secrets
        self.name = job_name(candidate, uuid.uuid4().hex[:6])
        self.job: str | None = None
        self.group: Group = "job"
        self.made: list[tuple[str, str]] = []
        """(kind, name) of what was created, in order: deleted in reverse."""
        self.pod: Pod = {}
        """The head's pod (the only one on one node)."""
        self.pods: list[Pod] = []
        self.files: list[str] = []
        """The manifests written into the probe folder (`kubectl create -f` them)."""
        self.base_url = ""
        self._log_thread: threading.Thread | None = None
        self._worker_logs: dict[str, threading.Thread] = {}
        self._closing = threading.Event()
        self._forwarder: Forwarder | None = None
        self._watch: PodWatch | None = None
        self._seen = 0

    def __enter__(self) -> KubernetesServer:
        launcher = self.launcher
        ref = launcher.template_ref(self.candidate)
        image = launcher.pinned(self.candidate)
        work = Workload(
            self.name, image, ref, self.candidate, launcher.env, launcher.run_id, launcher.owner,
            self.instrument,
        )  # fmt: skip
        self.probe_dir.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        try:
            shipped = shipped_files(self.instrument)
            work = replace(work, shipped=shipped)
            if shipped and "PYTHONPATH" not in launcher.env:  # the pod's replaces the image's
                before = launcher.image_pythonpath(self.candidate)
                if before:
                    work = replace(work, env={**launcher.env, "PYTHONPATH": before})
            cfg = self.cfg
            if self.avoid:
                cfg = cfg.model_copy(update={"affinity": away_from(cfg.affinity, self.avoid)})
            if self.cfg.nodes > 1:
                self.group = "leaderworkerset" if launcher.api.has_lws() else "indexed-job"
                manifests = group_manifests(cfg, self.group, work)
            else:
                manifests = [job_manifest(cfg, work)]
            self.job = self.name
            for m in manifests:
                self._write(m)
                self.made.append((str(m["kind"]), self.name))
                launcher.api.create(m)
            if shipped:  # after its owner (the pods wait for it, as a kubelet's mount does)
                owner = manifests[-1]
                made = config_map_manifest(
                    self.cfg,
                    name=self.name,
                    candidate=self.candidate,
                    run_id=launcher.run_id,
                    owner=launcher.owner,
                    shipped=shipped,
                    owned_by={
                        "apiVersion": owner["apiVersion"],
                        "kind": owner["kind"],
                        "name": self.name,
                        "uid": launcher.api.uid(owner["kind"], self.name),
                    },
                )
                self._write(made)
                self.made.append(("ConfigMap", self.name))
                launcher.api.create(made)
            self._watch = PodWatch(launcher.api, self._selector()).__enter__()
        except BaseException:
            self.stop()
            raise
        what = {"job": "job", "indexed-job": "indexed job", "leaderworkerset": "leaderworkerset"}
        nodes = f" ({self.cfg.nodes} nodes)" if self.cfg.nodes > 1 else ""
        launcher.report(
            f"{self.candidate.short}: kubernetes {what[self.group]} {self.name} created{nodes}"
        )
        return self

    def _write(self, manifest: Manifest) -> None:
        """Into the probe folder, as `kubectl create -f` takes it."""
        file = {"LeaderWorkerSet": "lws.json", "ConfigMap": "configmap.json"}.get(
            manifest["kind"], f"{str(manifest['kind']).lower()}.json"
        )
        (self.probe_dir / file).write_text(json.dumps(manifest, indent=2) + "\n")
        self.files.append(file)

    def _selector(self) -> str:
        if self.group == "leaderworkerset":
            return f"{LWS_NAME_LABEL}={self.name}"
        return f"job-name={self.name}"

    def _rank(self, pod: Pod) -> int:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        key = LWS_INDEX_LABEL if self.group == "leaderworkerset" else INDEX_LABEL
        try:
            return int(labels.get(key, "0"))
        except ValueError:
            return 0

    def _current_pods(self) -> list[Pod]:
        """The probe's pods, the head's first (as the watch has them)."""
        watching = self._watch  # stop() may clear it from another thread (a Cancel)
        if watching is None:
            return []
        pods, self._seen = watching.pods()
        return sorted(pods, key=self._rank)

    def _wait(self, seconds: float) -> None:
        """Until the probe's pods changed after the last _current_pods, at most `seconds`."""
        watching = self._watch
        if watching is not None:
            watching.wait(self._seen, seconds)

    def _current_pod(self) -> Pod | None:
        pods = self._current_pods()
        return pods[0] if pods and self._rank(pods[0]) == 0 else None

    @staticmethod
    def _pod_name(pod: Pod) -> str:
        return str((pod.get("metadata") or {}).get("name", ""))

    def _which(self, pod: Pod) -> str:
        """How a reason names the pod: nothing for the head, `worker pod NAME: ` else."""
        return "" if self._rank(pod) == 0 else f"worker pod {self._pod_name(pod)}: "

    def _placed(self) -> None:
        """Until every pod of the probe runs, the head's with an IP (then base_url is set
        and the logs followed); Unplaced or ServerExited when one never will."""
        clock = self.launcher.clock
        created = clock()
        while True:
            if self.job is None:
                raise ServerExited("the kubernetes job was deleted before ready", None)
            pods = self._current_pods()
            waited = clock() - created
            watching = self._watch
            if watching is not None and watching.gone():
                # deleted by someone else (before it ran, too): the cluster's doing, and a
                # Job of backoffLimit 0 makes none again
                raise Unplaced("kubernetes: the pod is gone (deleted)", self.log_tail())
            if pods and self._rank(pods[0]) == 0:
                self.pod, self.pods = pods[0], pods
            pending = ""
            for pod in pods:
                trouble = pod_trouble(pod)
                if trouble is None:
                    continue
                kind, reason = trouble
                which = self._which(pod)
                if kind == "exited":
                    raise ServerExited(f"{which}{reason} before ready", None, self._tail_of(pod))
                if kind == "unplaced":
                    raise Unplaced(f"kubernetes: {which}{reason}", self.log_tail())
                if kind == "no-image":
                    raise Unplaced(f"no artifact: {reason}", "")
                pending = pending or f"{which}{reason}"
            if self.avoid and only_avoided(pending):
                self._same_node(pending)
                created = clock()
                continue
            running = [
                p
                for p in pods
                if (p.get("status") or {}).get("phase") == "Running"
                and (p.get("status") or {}).get("podIP")
            ]
            if not pending and len(running) == self.cfg.nodes and self.pod:
                status = self.pod.get("status") or {}
                if self.cfg.reach == "port-forward":
                    self._forwarder = Forwarder(
                        self.launcher.api, self.name_of_pod(), self.cfg.port
                    )
                    self.base_url = f"http://127.0.0.1:{self._forwarder.local_port}"
                else:
                    self.base_url = f"http://{status['podIP']}:{self.cfg.port}"
                self._start_log()
                return
            if waited > self.cfg.pending_timeout:
                if self.avoid:  # only the nodes it keeps off would take it
                    self._same_node(f"pending for {self.cfg.pending_timeout:g}s")
                    created = clock()
                    continue
                if pending:
                    raise Unplaced(
                        f"kubernetes: pod pending for {self.cfg.pending_timeout:g}s ({pending})",
                        "",
                    )
                raise Unplaced(
                    f"kubernetes: {len(running)} of {self.cfg.nodes} pods running after "
                    f"{self.cfg.pending_timeout:g}s"
                    if pods
                    else f"kubernetes: no pod for {self.cfg.pending_timeout:g}s",
                    "",
                )
            self._wait(self.cfg.pending_timeout - waited + 0.05)

    def _same_node(self, why: str) -> None:
        """No node but those it keeps off takes its pods: made again without the affinity,
        to run there again, a later start (never a hang, never an error), said."""
        self.launcher.report(
            f"{self.candidate.short}: no node but {', '.join(self.avoid)} takes its pod ({why}): "
            "on the same node again, a later start, not elsewhere"
        )
        self.stop()
        self.avoid = []
        self.name = job_name(self.candidate, uuid.uuid4().hex[:6])
        self.pod, self.pods, self.files, self._seen = {}, [], [], 0
        self._closing = threading.Event()
        self.__enter__()

    def wait_ready(self) -> None:
        self._placed()
        wait_ready(
            self, self.cfg.ready_timeout, clock=self.launcher.clock, sleep=self.launcher.sleep
        )

    def _start_log(self) -> None:
        """Follow the head's log into server.log, and each worker's into
        server-RANK.log."""
        if self._log_thread is None:
            self._log_thread = threading.Thread(
                target=self._follow_log, args=(self.name_of_pod(), self._log), daemon=True
            )
            self._log_thread.start()
        for pod in self.pods[1:]:
            name = self._pod_name(pod)
            if name and name not in self._worker_logs:
                out = (self.probe_dir / f"server-{self._rank(pod)}.log").open("ab")
                thread = threading.Thread(
                    target=self._follow_log, args=(name, out, True), daemon=True
                )
                self._worker_logs[name] = thread
                thread.start()

    def _join_log(self) -> None:
        for thread in [self._log_thread, *self._worker_logs.values()]:
            if thread is not None:
                thread.join(timeout=10)

    def _follow_log(self, pod: str, log: Any, close: bool = False) -> None:
        if log is None:
            return
        masker = Masker(self.secrets)
        with suppress(LaunchError, OSError, ValueError, Exception):
            for chunk in self.launcher.api.follow_log(pod):
                log.write(masker.feed(chunk))  # what came is kept, closing or not
                log.flush()
                if self._closing.is_set():
                    break
        with suppress(ValueError, OSError):
            log.write(masker.flush())
            log.flush()
        if close:
            with suppress(OSError):
                log.close()

    def _tail_of(self, pod: Pod) -> str:
        """The end of an ended pod's log (its follower joined; a worker's: its file)."""
        name, rank = self._pod_name(pod), self._rank(pod)
        if rank == 0:
            self.pod = pod.copy()
            self._start_log()
            if self._log_thread is not None:
                self._log_thread.join(timeout=10)
            return self.log_tail()
        self._start_log()
        thread = self._worker_logs.get(name)
        if thread is not None:
            thread.join(timeout=10)
        return tail(self.probe_dir / f"server-{rank}.log", 20, self.secrets)

    def name_of_pod(self) -> str:
        return self._pod_name(self.pod)

    def check_alive(self, wait: float = 0.0) -> None:
        if self.job is None:
            raise ServerExited("the kubernetes job is gone", None)
        clock = self.launcher.clock
        deadline = clock() + wait
        while True:
            pods = self._current_pods()
            if len(pods) < self.cfg.nodes or self._rank(pods[0]) != 0:
                # deleted by someone else: the cluster's doing, not the build's
                raise Unplaced("kubernetes: the pod is gone (deleted)", self.log_tail())
            self.pod, self.pods = pods[0], pods
            for pod in pods:
                trouble = pod_trouble(pod)
                which = self._which(pod)
                if trouble is not None and trouble[0] == "unplaced":  # node lost, eviction
                    raise Unplaced(f"kubernetes: {which}{trouble[1]}", self.log_tail())
                if trouble is not None and trouble[0] == "exited":
                    raise ServerExited(f"{which}{trouble[1]}", None, self._tail_of(pod))
            if clock() >= deadline:
                return
            self._wait(deadline - clock())

    def stop(self) -> None:
        """Delete what was made, last first (the Job or LWS foreground: its pods first),
        whatever fails, and wait until the pods' owner is gone."""
        made, self.made = self.made, []
        self.job = None
        watching, self._watch = self._watch, None
        if watching is not None:
            watching.__exit__(None, None, None)
        api, clock, sleep = self.launcher.api, self.launcher.clock, self.launcher.sleep
        for kind, name in reversed(made):
            try:
                api.delete(kind, name)
                deadline = clock() + STOP_WAIT_S
                while clock() < deadline and not api.gone(kind, name):
                    sleep(POLL_S)
            except LaunchError as exc:
                self.launcher.report(f"kubernetes: {exc}; `llm-bisect reap` deletes it later")
        forwarder, self._forwarder = self._forwarder, None
        if forwarder is not None:
            forwarder.close()
        self._closing.set()
        self._join_log()
        self._close_log()

    def fingerprint(self) -> Facts:
        """The image (by digest, and the imageID the kubelet resolved), the node, the Job; the
        package versions and the weights' revision inside the pod."""
        status = self.pod.get("status") or {}
        spec = self.pod.get("spec") or {}
        image_id = next(
            (str(c.get("imageID") or "") for c in status.get("containerStatuses") or []), ""
        )
        packages: dict[str, str] = {}
        loaded: Facts = {}
        if self.name_of_pod():
            packages = self._packages()
            loaded = self._weights(spec)
            collectenv.collect_in(
                self._exec, self.probe_dir, self.cfg.collect_env, self.candidate, self.secrets
            )
        return {
            **({"packages": packages} if packages else {}),
            **loaded,
            "image": {
                "ref": self.launcher.template_ref(self.candidate),
                "digest": self.launcher.pinned(self.candidate),
                "id": image_id,
            },
            "kubernetes": {
                "namespace": self.cfg.namespace,
                "job": self.name,
                "pod": self.name_of_pod(),
                "image_id": image_id,
                **({"avoid": self.asked, "avoided": bool(self.avoid)} if self.asked else {}),
                **(
                    {
                        "kind": self.group,
                        "pods": [self._pod_name(p) for p in self.pods],
                        "nodes": [
                            str((p.get("spec") or {}).get("nodeName") or "") for p in self.pods
                        ],
                    }
                    if self.cfg.nodes > 1
                    else {}
                ),
            },
            "command": shlex.join(
                [
                    "kubectl",
                    "create",
                    *(a for f in self.files for a in ("-f", str(self.probe_dir / f))),
                ]
            ),
            **placement_facts(self._nodes(), self.launcher.env),
        }

    def _nodes(self) -> str:
        """Where its pods ran (their spec.nodeName), the head's first: the fingerprint's
        `node`, a place (places.py) and what a probe elsewhere keeps off (`away_from`)."""
        names = [str((p.get("spec") or {}).get("nodeName") or "") for p in self.pods or [self.pod]]
        return ",".join(dict.fromkeys(n for n in names if n))

    def _exec(self, argv: Sequence[str], timeout: float) -> tuple[int | None, bytes]:
        """api.exec, its websocket's handshake and reads bounded too (server.api.timeout)."""
        api, pod = self.launcher.api, self.name_of_pod()
        return within(
            timeout + api.limits.timeout, f"exec in {pod}", lambda: api.exec(pod, argv, timeout)
        )

    def _packages(self) -> dict[str, str]:
        """The package versions inside the pod (the fingerprint's `packages`)."""
        for python in ("python3", "python"):
            try:
                code, out = self._exec([python, "-c", package_probe_source()], PACKAGES_S)
            except LaunchError:
                return {}
            if code == 0:
                with suppress(ValueError, IndexError):
                    found = json.loads(out.decode().strip().splitlines()[-1])
                    if isinstance(found, dict):
                        return {str(k): str(v) for k, v in found.items()}
        return {}

    def _weights(self, spec: PodSpec) -> Facts:
        """The weights the pod's command line names, resolved inside it (its hub cache, its
        environment); nothing where it cannot tell."""
        container: Container = next(iter(spec.get("containers") or []), Container())
        argv = weights.image_argv(container.get("command"), container.get("args") or [])
        wanted = weights.asked(argv)
        if not wanted.get("model"):
            return {}
        for python in dict.fromkeys([collectenv.python_of(argv), "python3", "python"]):
            try:
                code, out = self._exec([python, "-c", weights.probe_source(wanted)], PACKAGES_S)
            except LaunchError:
                return {}
            if code == 0:
                return weights_facts(last_json(out))
        return {}


# ---- the launcher --------------------------------------------------------------------------


class KubernetesLauncher:
    """Jobs per candidate on one cluster; see the module docstring."""

    def __init__(
        self,
        cfg: KubernetesServerConfig,
        ctx: LauncherContext,
        *,
        api: Api | None = None,
        registry: RegistryClient | None = None,
    ) -> None:
        self.cfg = cfg
        self.env = dict(ctx.env)
        self.secrets = [self.env[n] for n in ctx.secret_names if n in self.env]
        self.secrets += argv_secrets([*cfg.args, *(cfg.entrypoint or [])])
        self.run_id = ctx.run_id
        self.owner = owner_label()
        self.report = ctx.report
        self.clock = clock = ctx.clock
        self.sleep = sleep = ctx.sleep
        self.api = api or Api(cfg.namespace, cfg.kubeconfig, cfg.context, sleep, cfg.api, clock)
        self.registry = registry or RegistryClient(logins=ctx.logins)
        self._digests: dict[str, str] = {}
        self._secrets_read = not cfg.secret_env_read
        self._avoid: dict[str, tuple[str, ...]] = {}
        self._lock = threading.Lock()

    def template_ref(self, candidate: Candidate) -> str:
        return candidate.artifact or fill(
            self.cfg.image, {"commit": candidate.commit, "short": candidate.short}
        )

    def pinned(self, candidate: Candidate) -> str:
        """The image by digest where the registry named one, else as written."""
        ref = self.template_ref(candidate)
        digest = self._digests.get(ref)
        if digest is None:
            return ref
        return parse_image_ref(ref).pinned(digest)

    def image_config(self, ref: ImageRef) -> ImageConfig | None:
        """The image's config blob (labels, env), read from its registry; None where the
        registry has no such image. A RegistryError where it cannot say."""
        manifest = self.registry.manifest(ref)
        return self.registry.image_config(ref, manifest) if manifest else None

    def kept_ref(self, ref: str) -> str | None:
        """None: a cluster pulls an image as it is named (no ledger here)."""
        return None

    def image_metadata(self, ref: str) -> tuple[dict[str, str] | None, list[str]]:
        """(labels, env) of an image, read from its registry (the cluster pulls, this host
        need not); (None, []) where there is no such image; LaunchError where the registry
        cannot say."""
        try:
            parsed = parse_image_ref(ref)
        except ValueError:
            return None, []
        try:
            blob = self.image_config(parsed)
        except RegistryError as exc:
            raise LaunchError(str(exc)) from None
        if blob is None:
            return None, []
        config = blob.get("config") or {}
        return dict(config.get("Labels") or {}), list(config.get("Env") or [])

    def image_pythonpath(self, candidate: Candidate) -> str:
        """The image's own PYTHONPATH (its config's Env); "" where it has none or it cannot
        be read."""
        try:
            _, env = self.image_metadata(self.template_ref(candidate))
        except LaunchError:
            return ""
        return env_map(env).get("PYTHONPATH", "")

    def artifact(self, candidate: Candidate) -> Artifact:
        """Whether the registry has the candidate's image (the cluster pulls it; nothing is
        pulled here); its digest pins the Job's image."""
        ref = self.template_ref(candidate)
        try:
            parsed = parse_image_ref(ref)
        except ValueError as exc:
            return Artifact(ref, False, reason=f"no artifact: {exc}")
        if parsed.digest:
            self._digests[ref] = parsed.digest
            return Artifact(ref, True, digest=parsed.digest)
        try:
            manifest = self.registry.manifest(parsed)
        except RegistryError as exc:
            return Artifact(ref, None, reason=str(exc))
        if manifest is None:
            return Artifact(ref, False, reason=f"no artifact: {ref} is not in its registry")
        self._digests[ref] = manifest.digest
        return Artifact(ref, True, digest=manifest.digest, size=manifest.size)

    def launch(
        self,
        candidate: Candidate,
        probe_dir: Path,
        instrument: Instrument | None = None,
        slot: int = 0,
    ) -> KubernetesServer:
        if self.template_ref(candidate) not in self._digests:
            self.artifact(candidate)
        if not self._secrets_read:  # its log masks what the server echoes of them
            self.secrets += secret_env_values(self.api, self.cfg)
            self._secrets_read = True
        with self._lock:
            avoid = self._avoid.pop(candidate.commit, ())
        return KubernetesServer(self, candidate, probe_dir, instrument, avoid)

    def avoid(self, candidate: Candidate, nodes: Sequence[str]) -> None:
        with self._lock:
            self._avoid[candidate.commit] = tuple(nodes)

    def prefetch(self, candidates: list[Candidate]) -> None:
        """The cluster's kubelets pull; nothing is made ahead here."""

    def quiet(self) -> Any:
        from contextlib import nullcontext

        return nullcontext()

    def reap(self) -> list[str]:
        """Delete the Jobs, LeaderWorkerSets, Services and ConfigMaps killed llm-bisect
        processes left (by label; owner gone)."""
        lines = []
        selector = f"{MANAGED_BY}=llm-bisect"
        for kind, found in (
            ("Job", self.api.jobs),
            ("LeaderWorkerSet", self.api.lws),
            ("Service", functools.partial(self.api.listed, "Service")),
            ("ConfigMap", functools.partial(self.api.listed, "ConfigMap")),
        ):
            try:
                objects = found(selector)
            except LaunchError as exc:  # e.g. a Role without services: the others still
                lines.append(f"kubernetes: could not list {kind.lower()}s: {exc}")
                continue
            for obj in objects:
                meta = obj.get("metadata") or {}
                owner = str((meta.get("annotations") or {}).get(OWNER_ANNOTATION, ""))
                mine = (meta.get("labels") or {}).get(RUN_LABEL) == self.run_id
                if not reapable(owner, mine):
                    continue
                name = str(meta.get("name", ""))
                what = kind.lower()
                try:
                    self.api.delete(kind, name)
                except LaunchError as exc:
                    lines.append(f"kubernetes: could not delete {what} {name}: {exc}")
                    continue
                lines.append(
                    f"kubernetes: deleted {what} {name} (its llm-bisect process "
                    f"{owner_pid(owner) if owner else '?'} is gone)"
                )
        return lines

    def close(self) -> None:
        self.registry.close()
        self.api.close()


def from_config(cfg: KubernetesServerConfig, ctx: LauncherContext) -> KubernetesLauncher:
    return KubernetesLauncher(cfg, ctx)


SECRET_ENV_HINT = "server.secret_env: {{{name}: {{secret: NAME, key: KEY}}}} (a Kubernetes Secret)"
"""Where a secret goes instead (`name`: the variable the server reads it from)."""
UNMASKED = (
    "a value of server.secret_env ({names}) that the server echoes (in a reply, a 500 body, "
    "its log) cannot be masked: llm-bisect never reads it (server.secret_env_read: true reads "
    "it, with `get` on those Secrets in the Role)"
)


def argv_secret_said(words: Sequence[str]) -> str | None:
    """Where a command line holds a secret (config.argv_secret_names: a flag named like one,
    a login in a URL), said without the secret: `the value of '--api-key'`, `word 3`. Pure."""
    for i, word in enumerate(words):
        flag, eq, _ = word.partition("=")
        flag = flag if flag.startswith("--") else ""
        if argv_secret_names(words[i : i + 1]):
            return f"the value of {flag!r}" if flag and eq else f"word {i}"
        if flag and not eq and argv_secret_names(words[i : i + 2]):
            return f"the value of {flag!r}"
    return None


def secret_env_values(api: Api, cfg: KubernetesServerConfig) -> list[str]:
    """The values of secret_env's Secrets, read through the API (`secret_env_read`); a
    LaunchError naming the variable where one cannot be read."""
    found = []
    for name, ref in sorted(cfg.secret_env.items()):
        try:
            value = api.secret_value(ref.secret, ref.key)
        except LaunchError as exc:
            raise LaunchError(
                f"server.secret_env.{name}: {exc} (server.secret_env_read: the Role needs "
                f"`get` on Secret {ref.secret!r})"
            ) from None
        if value is None:
            raise LaunchError(
                f"server.secret_env.{name}: no Secret {ref.secret!r} with a key {ref.key!r} "
                f"in namespace {cfg.namespace!r}"
            )
        found.append(value)
    return found


def _preflight(cfg: KubernetesServerConfig, ctx: PreflightContext) -> Preflight:
    """A secret in server.env (by its name, or a login in a URL) or on the container's
    command line would be written into the Job: refused, naming secret_env. With
    secret_env_read, secret_env's values are read, for every output to mask."""
    for name in secret_names(dict(cfg.env)):
        raise ConfigError(
            f"server.env.{name}: a secret would be written into the Job; give it as "
            + SECRET_ENV_HINT.format(name=name)
        )
    for name, value in sorted({**cfg.env, **ctx.env}.items()):
        if url_logins(value):
            raise ConfigError(
                f"server.env.{name}: a login in a URL would be written into the Job; give "
                "the variable as " + SECRET_ENV_HINT.format(name=name)
            )
    for key in ("entrypoint", "args", "worker_args"):
        said = argv_secret_said(getattr(cfg, key) or [])
        if said is not None:
            raise ConfigError(
                f"server.{key}: {said} is a secret that would be written into the Job; give "
                "it as a variable the server reads, in "
                + SECRET_ENV_HINT.format(name="VAR")
                + (" (vLLM's --api-key: VLLM_API_KEY)" if "api-key" in said else "")
            )
    if not cfg.secret_env_read or not cfg.secret_env:
        return Preflight(cfg)
    api = Api(cfg.namespace, cfg.kubeconfig, cfg.context)
    try:
        return Preflight(cfg, secret_env_values(api, cfg))
    except LaunchError as exc:
        raise ConfigError(str(exc)) from None
    finally:
        api.close()


def caveats(cfg: KubernetesServerConfig) -> list[str]:
    """What a report must say of this setup: echoes of secret_env values unmasked. Pure."""
    if cfg.secret_env and not cfg.secret_env_read:
        return [UNMASKED.format(names=", ".join(sorted(cfg.secret_env)))]
    return []


def _validate(cfg: KubernetesServerConfig, config: Any) -> None:
    if config.localize.save_tensors:
        raise ValueError("localize.save_tensors: the process launcher's only")
    if config.build is not None:
        raise ValueError("build: the kubernetes launcher runs published images only (for now)")


def _cache_mount(cfg: KubernetesServerConfig, root: Path) -> KubernetesServerConfig:
    """The engine cache's folder (`probe.engine_cache.dir`, on every node that runs a probe)
    as a hostPath at the same path."""
    return cfg.model_copy(update={"host_paths": [*cfg.host_paths, f"{root}:{root}"]})


KIND = LAUNCHERS.register(
    LauncherKind(
        "kubernetes",
        KubernetesServerConfig,
        make=from_config,
        runs_images=True,
        validate=_validate,
        preflight=_preflight,
        resolve_end=resolve_image_end,
        caveats=caveats,
        placement=frozenset({"secret_env_read"}),  # what is masked, never what is answered
        cache_place="configured",  # a pod's node has no folder of this machine's home
        cache_mount=_cache_mount,
        shown_worker="worker_args",
        shape=frozenset({"image", "args", "entrypoint"}),
        argv=("args", "entrypoint"),
        flags=("args",),
    )
)
