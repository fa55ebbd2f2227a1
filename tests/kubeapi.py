"""A stand-in Kubernetes API server on 127.0.0.1 whose pods are real Docker containers.

No kube-apiserver can run on these machines, so the Kubernetes launcher is tested against
this: the part of the API it calls, over HTTP, through the official client.

    GET                   /apis (the groups served: batch, and LWS's where installed)
    POST/GET/LIST/DELETE  /apis/batch/v1/namespaces/NS/jobs[/NAME]
    POST/GET/LIST/DELETE  /api/v1/namespaces/NS/services[/NAME]
    POST/GET/LIST/DELETE  /api/v1/namespaces/NS/configmaps[/NAME]
    POST/GET/LIST/DELETE  /apis/leaderworkerset.x-k8s.io/v1/namespaces/NS/leaderworkersets[/NAME]
                          (only with `lws_installed`)
    GET/LIST/DELETE       /api/v1/namespaces/NS/pods[/NAME]
    GET                   /api/v1/namespaces/NS/secrets/NAME (`secrets`, base64 as the API has them)
    WATCH                 /api/v1/namespaces/NS/pods?watch=true&resourceVersion=RV
    GET                   /api/v1/namespaces/NS/pods/NAME/log[?follow=true]
    GET (websocket)       /api/v1/namespaces/NS/pods/NAME/exec?command=...

Every request body is validated against the OpenAPI schema of KUBERNETES_VERSION
(kubernetes-validate, strict: an unknown field is refused), object names and label values
against the API's own rules (DNS-1123, 63 characters). Kept from the real API:
resourceVersions on every write; a Job's defaults (completions, parallelism, selector, the
pod template's labels `job-name` and `controller-uid`); a Job deleted without a
propagationPolicy orphans its pods (batch/v1's default), which keep running; Foreground
deletes the pods first; a ConfigMap whose ownerReferences name a deleted Job or
LeaderWorkerSet goes with it (the garbage collector) unless orphaned. A "kubelet" thread
per pod schedules it on the one node (its labels, its name and GPU count against the pod's
nodeSelector, required node affinity and GPUs: Unschedulable when they do not fit), pulls
its image through the Docker engine (ErrImagePull, then ImagePullBackOff), resolves
`secretKeyRef`s from the stand-in's Secrets, runs the container (hostPath volumes as binds,
the /dev/shm memory emptyDir as the container's shm, a configMap volume as its keys' files
bound read-only; a missing ConfigMap keeps the pod ContainerCreating), a memory limit, and
reports Running with the container's IP on Docker's bridge as the pod IP, then
Succeeded/Failed with the exit code (OOMKilled where the engine says so).
`faults` answers the next matching requests with an HTTP error.

Several nodes: an Indexed Job makes one pod per index (hostname JOB-I, the index as a
label, an annotation and JOB_COMPLETION_INDEX); a LeaderWorkerSet (validated against LWS's
own CRD, tests/data/lws) makes what LWS's controller makes: a headless Service of its name,
a leader pod NAME-0 and workers NAME-0-I with the LWS_* variables, restartPolicy Always
(an ended container is CrashLoopBackOff, restartCount 1). Every pod runs on one Docker
network; a pod with a hostname and a subdomain is found there by its DNS names where a
headless Service of that name selects it when its container starts. The kubelet expands
`$(VAR)` in command and args. A LeaderWorkerSet deleted without a propagationPolicy is
collected in the background (a custom resource's default); a Job, orphaned.

`exec` answers over a websocket (v4.channel.k8s.io), as the client's stream() asks.

A watch of pods streams ADDED, MODIFIED and DELETED events after its resourceVersion (none
given: the pods there are now, ADDED, then what follows), one JSON object a line, until
its timeoutSeconds; `expire()` plays an etcd compaction: a watch from a resourceVersion
before it is answered with an ERROR event, 410 Expired (as the API does), and the open
watches end too (as an API server restart ends them: the client resumes from its last
resourceVersion, which is gone).

Not modelled (docs/kubernetes.md lists it for admins): watches of other kinds, the
scheduler beyond one node's labels, name and GPU count, taints, Pod Security, RBAC, TTL
cleanup, activeDeadlineSeconds, PVCs beyond a named Docker volume.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import json
import re
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import docker
import docker.errors
import jsonschema
import kubernetes_validate
import yaml

KUBERNETES_VERSION = "1.33.0"
"""The Kubernetes version whose OpenAPI schema every body is checked against."""
STANDIN_LABEL = "llm-bisect-test/kubeapi"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
LWS = "leaderworkerset.sigs.k8s.io"
LWS_GROUP = "leaderworkerset.x-k8s.io"
LWS_CRD = (
    Path(__file__).parent / "data" / "lws" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml.gz"
)
"""LWS's own CRD (kubernetes-sigs/lws, a copy: tests/data/lws/README.md)."""
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Refused(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


def validate(body: Any, kind: str) -> None:
    """The body as the API server decodes it: its schema (strict), names and labels."""
    if not isinstance(body, dict):
        raise Refused(400, "BadRequest", "the body is no JSON object")
    try:
        kubernetes_validate.validate(body, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        raise Refused(422, "Invalid", f"{kind} is invalid: {exc}") from None
    meta = body.get("metadata") or {}
    name = meta.get("name", "")
    if len(name) > 63 or not DNS_LABEL.fullmatch(name):
        raise Refused(422, "Invalid", f"metadata.name: Invalid value: {name!r}")
    template = ((body.get("spec") or {}).get("template") or {}).get("metadata") or {}
    for labels in (meta.get("labels") or {}, template.get("labels") or {}):
        for key, value in labels.items():
            if len(value) > 63 or not LABEL_VALUE.fullmatch(value):
                raise Refused(422, "Invalid", f"metadata.labels: Invalid value: {value!r}")
            if len(key.rsplit("/", 1)[-1]) > 63:
                raise Refused(422, "Invalid", f"metadata.labels: Invalid key: {key!r}")


def strict(schema: Any) -> Any:
    """A CRD's structural schema as the API server's strict field validation applies it:
    an object with `properties` takes no other field (unless it preserves unknown ones)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


@functools.cache
def lws_schema() -> dict[str, Any]:
    """The strict openAPIV3Schema of LeaderWorkerSet v1, from LWS's CRD."""
    crd = yaml.safe_load(gzip.decompress(LWS_CRD.read_bytes()))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return dict(strict(version["schema"]["openAPIV3Schema"]))


def validate_lws(body: Any) -> None:
    """A LeaderWorkerSet as the API server with LWS's CRD decodes it: its schema (strict)."""
    if not isinstance(body, dict):
        raise Refused(400, "BadRequest", "the body is no JSON object")
    try:
        jsonschema.validate(body, lws_schema())
    except jsonschema.ValidationError as exc:
        raise Refused(422, "Invalid", f"LeaderWorkerSet is invalid: {exc.message}") from None
    name = (body.get("metadata") or {}).get("name", "")
    if len(name) > 63 or not DNS_LABEL.fullmatch(name):
        raise Refused(422, "Invalid", f"metadata.name: Invalid value: {name!r}")


_EXPAND = re.compile(r"\$(\$|\(([A-Za-z_][A-Za-z0-9_]*)\))")


def expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's expansion of a command or arg: `$(VAR)` from the container's
    environment (kept as written when VAR is not set), `$$` an escaped `$`."""

    def sub(m: re.Match[str]) -> str:
        if m.group(1) == "$":
            return "$"
        return env.get(m.group(2), m.group(0))

    return _EXPAND.sub(sub, text)


def selected(obj: Mapping[str, Any], selector: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


@dataclass
class Fault:
    """Answer the next `times` requests of `method` whose path holds `path` (and whose query
    holds `query`: `watch=` for a watch) with `status`."""

    method: str
    path: str
    status: int
    times: int = 1
    query: str = ""


@dataclass
class StandIn:
    """The API server, its one node and its kubelet; see the module docstring."""

    client: docker.DockerClient
    node: str = "standin-node-1"
    node_labels: dict[str, str] = field(
        default_factory=lambda: {"kubernetes.io/hostname": "standin-node-1"}
    )
    gpus: int = 8
    """The node's nvidia.com/gpu capacity (the containers get no device: CPU servers)."""
    secrets: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    """Every request: method, path with query, JSON body."""
    jobs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    services: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    config_maps: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    lws_installed: bool = False
    """Whether LeaderWorkerSet's CRD (and its controller) is installed."""
    leaderworkersets: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    expire_once_running: bool = False
    on_exec: Callable[[], bool] | None = None
    """Called as each exec request arrives, before it is answered (a test's Ctrl-C while the
    client waits for the websocket): False, the connection is closed unanswered."""
    """An etcd compaction as each pod turns Running (once a pod watch was opened): `expire`."""

    def __post_init__(self) -> None:
        self.id = uuid.uuid4().hex[:8]
        self.lock = threading.RLock()
        self.rv = 1000
        self.containers: dict[tuple[str, str], Any] = {}
        self.forwards = 0
        """How many port-forward streams were opened."""
        self.pod_events: list[tuple[int, str, dict[str, Any]]] = []
        """Every change of a pod: (resourceVersion, ADDED/MODIFIED/DELETED, the pod then)."""
        self.changed = threading.Condition(self.lock)
        self.oldest = 0
        """A watch from a resourceVersion before this one is Gone (410)."""
        self.epoch = 0
        """Bumped by expire(): the watches open then end."""
        self.watches: list[str] = []
        """The resourceVersion each pod watch started from ('' for none)."""
        self.expired = 0
        """How many watches were answered 410 Expired."""
        self.closed = False
        self.mounted: list[Path] = []
        """The folders made for configMap volumes (removed as the stand-in stops)."""
        self.execs: list[list[str]] = []
        """The command of every exec, in order."""
        self.started_env: list[dict[str, str]] = []
        """The environment each pod's container was started with (secrets resolved)."""
        self.network = f"standin-{self.id}"
        """The Docker network of every pod: a pod of a headless Service is found there by
        its DNS name (hostname.subdomain[.namespace[.svc[.cluster.local]]])."""
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    # -- the client's view -------------------------------------------------------------

    def kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        """A kubeconfig whose current context is this server."""
        data = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "standin-token"}}],
            "contexts": [
                {
                    "name": "standin",
                    "context": {"cluster": "standin", "user": "tester", "namespace": namespace},
                }
            ],
            "current-context": "standin",
        }
        path.write_text(yaml.safe_dump(data))
        return path

    @contextmanager
    def running(self) -> Iterator[StandIn]:
        self.client.networks.create(self.network, driver="bridge", labels={STANDIN_LABEL: self.id})
        thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05})
        thread.start()
        try:
            yield self
        finally:
            with self.changed:
                self.closed = True
                self.changed.notify_all()
            self._server.shutdown()
            self._server.server_close()
            thread.join()
            for c in self.client.containers.list(
                all=True, filters={"label": f"{STANDIN_LABEL}={self.id}"}, ignore_removed=True
            ):
                with suppress(docker.errors.DockerException):
                    c.remove(force=True)
            with suppress(docker.errors.DockerException):
                self.client.networks.get(self.network).remove()
            for folder in self.mounted:
                shutil.rmtree(folder, ignore_errors=True)

    def running_containers(self) -> list[Any]:
        """The stand-in's containers still running (pods' servers); one removed while they
        are listed is not (docker lists, then inspects each: a 404 in between)."""
        found = self.client.containers.list(
            filters={"label": f"{STANDIN_LABEL}={self.id}"}, ignore_removed=True
        )
        return list(found)

    # -- the store ---------------------------------------------------------------------

    def _bump(self, obj: dict[str, Any], event: str = "") -> None:
        """A new resourceVersion for a write; a pod's, an event for its watches (`event`,
        else ADDED or MODIFIED as the store has it)."""
        with self.changed:
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            if obj.get("kind") == "Pod":
                key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
                event = event or ("MODIFIED" if key in self.pods else "ADDED")
                self.pod_events.append((self.rv, event, json.loads(json.dumps(obj))))
                self.changed.notify_all()

    def matching(
        self, store: dict[tuple[str, str], dict[str, Any]], ns: str, selector: str
    ) -> list[dict[str, Any]]:
        """Copies of the namespace's objects the label selector picks (the lock held)."""
        return [
            json.loads(json.dumps(o))
            for (n, _), o in store.items()
            if n == ns and selected(o, selector)
        ]

    def expire(self) -> None:
        """An etcd compaction: every resourceVersion until now is gone, open watches end."""
        with self.changed:
            self.rv += 1
            self.oldest = self.rv
            self.epoch += 1
            self.changed.notify_all()

    def _create_job(self, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        validate(body, "Job")
        name = body["metadata"]["name"]
        with self.lock:
            if (ns, name) in self.jobs:
                raise Refused(409, "AlreadyExists", f'jobs.batch "{name}" already exists')
            uid = str(uuid.uuid4())
            job = json.loads(json.dumps(body))
            meta = job["metadata"]
            meta.update(namespace=ns, uid=uid, creationTimestamp=now(), generation=1)
            spec = job["spec"]
            spec.setdefault("completions", 1)
            spec.setdefault("parallelism", 1)
            spec.setdefault("completionMode", "NonIndexed")
            spec.setdefault("suspend", False)
            spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
            own = {"batch.kubernetes.io/controller-uid": uid, "controller-uid": uid}
            spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
            tmeta = spec["template"].setdefault("metadata", {})
            tmeta["labels"] = {
                **(tmeta.get("labels") or {}),
                **own,
                "batch.kubernetes.io/job-name": name,
                "job-name": name,
            }
            pspec = spec["template"]["spec"]
            pspec.setdefault("dnsPolicy", "ClusterFirst")
            pspec.setdefault("schedulerName", "default-scheduler")
            pspec.setdefault("terminationGracePeriodSeconds", 30)
            for c in pspec["containers"]:
                c.setdefault("terminationMessagePath", "/dev/termination-log")
                c.setdefault("terminationMessagePolicy", "File")
                c.setdefault("resources", {})
            indexed = spec["completionMode"] == "Indexed"
            count = int(spec["parallelism"]) if indexed else 1
            job["status"] = {"active": count, "startTime": now()}
            self._bump(job)
            self.jobs[(ns, name)] = job
            owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid}
            made = []
            for index in range(count):
                pspec = json.loads(json.dumps(spec["template"]["spec"]))
                labels = dict(tmeta["labels"])
                annotations: dict[str, str] = {}
                pod_name = f"{name}-{uuid.uuid4().hex[:5]}"
                if indexed:  # what the Job controller adds to each pod of an Indexed Job
                    pod_name = f"{name}-{index}-{uuid.uuid4().hex[:5]}"
                    labels[INDEX_LABEL] = annotations[INDEX_LABEL] = str(index)
                    pspec["hostname"] = f"{name}-{index}"
                    for c in pspec["containers"]:
                        path = f"metadata.annotations['{INDEX_LABEL}']"
                        c.setdefault("env", []).append(
                            {
                                "name": "JOB_COMPLETION_INDEX",
                                "valueFrom": {"fieldRef": {"fieldPath": path}},
                            }
                        )
                made.append(self._add_pod(ns, pod_name, labels, annotations, pspec, owner))
        for pod_name in made:
            threading.Thread(target=self._kubelet, args=(ns, pod_name), daemon=True).start()
        return job

    def _add_pod(
        self,
        ns: str,
        name: str,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        spec: dict[str, Any],
        owner: Mapping[str, str],
    ) -> str:
        """A Pending pod owned by `owner` (a controller's); its kubelet is started by the
        caller once the lock is released."""
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": str(uuid.uuid4()),
                "labels": dict(labels),
                "annotations": dict(annotations),
                "creationTimestamp": now(),
                "ownerReferences": [{**owner, "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": spec,
            "status": {"phase": "Pending", "qosClass": "BestEffort"},
        }
        self._bump(pod)
        self.pods[(ns, name)] = pod
        return name

    def _oom_event(self, container: str) -> bool:
        """Whether the engine reported an `oom` event for the container, up to now: as the
        kubelet reads the cgroup's oom_kill count. The engine sets State.OOMKilled from that
        event asynchronously, so a container inspected as it exits may not show it yet; the
        event itself (sent before `die`) is there once the container has exited."""
        until = int(time.time()) + 1
        events = self.client.events(since=0, until=until, decode=True,
                                    filters={"container": container, "event": "oom"})  # fmt: skip
        return any(True for _ in events)

    def _set_status(self, key: tuple[str, str], **status: Any) -> dict[str, Any] | None:
        with self.lock:
            pod = self.pods.get(key)
            if pod is None:
                return None
            pod["status"].update(status)
            self._bump(pod)
            return pod

    def _job_of(self, pod: Mapping[str, Any]) -> dict[str, Any] | None:
        owners = pod["metadata"].get("ownerReferences") or [{}]
        if owners[0].get("kind") != "Job":
            return None
        return self.jobs.get((pod["metadata"]["namespace"], owners[0].get("name", "")))

    def _create_config_map(self, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        validate(body, "ConfigMap")
        name = body["metadata"]["name"]
        size = sum(len(v.encode()) for v in (body.get("data") or {}).values()) + sum(
            len(base64.b64decode(v)) for v in (body.get("binaryData") or {}).values()
        )
        with self.lock:
            if (ns, name) in self.config_maps:
                raise Refused(409, "AlreadyExists", f'configmaps "{name}" already exists')
            if size > 1_048_576:
                raise Refused(
                    422, "Invalid", f"ConfigMap {name}: too long: must have at most 1048576 bytes"
                )
            made = json.loads(json.dumps(body))
            made["metadata"].update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=now())
            self._bump(made)
            self.config_maps[(ns, name)] = made
            return made

    def _config_map_files(self, ns: str, volume: Mapping[str, Any]) -> Path | None:
        """A folder holding a configMap volume's files (its `items`, else every key); None
        while the ConfigMap does not exist (the kubelet cannot mount it)."""
        ref = volume["configMap"]
        with self.lock:
            made = self.config_maps.get((ns, ref["name"]))
        if made is None:
            return None
        files = {k: v.encode() for k, v in (made.get("data") or {}).items()}
        files |= {k: base64.b64decode(v) for k, v in (made.get("binaryData") or {}).items()}
        items = ref.get("items") or [{"key": k, "path": k} for k in files]
        folder = Path(tempfile.mkdtemp(prefix="standin-configmap-"))
        self.mounted.append(folder)
        for item in items:
            target = folder / item["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(files[item["key"]])
            target.chmod(0o644)
        folder.chmod(0o755)
        return folder

    def _create_service(
        self, ns: str, body: dict[str, Any], owner: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        validate(body, "Service")
        name = body["metadata"]["name"]
        with self.lock:
            if (ns, name) in self.services:
                raise Refused(409, "AlreadyExists", f'services "{name}" already exists')
            svc = json.loads(json.dumps(body))
            meta = svc["metadata"]
            meta.update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=now())
            if owner is not None:
                meta["ownerReferences"] = [{**owner, "controller": True}]
            spec = svc["spec"]
            spec.setdefault("type", "ClusterIP")
            spec.setdefault("sessionAffinity", "None")
            if spec.get("clusterIP") != "None":
                spec["clusterIP"] = f"10.96.{self.rv % 250}.{len(self.services) + 10}"
            spec["clusterIPs"] = [spec["clusterIP"]]
            svc["status"] = {"loadBalancer": {}}
            self._bump(svc)
            self.services[(ns, name)] = svc
            return svc

    def _dns_names(self, ns: str, pod: Mapping[str, Any]) -> list[str]:
        """A pod's DNS names: hostname.subdomain... where a headless Service named
        `subdomain` in its namespace selects it (as cluster DNS publishes them)."""
        spec = pod["spec"]
        host, sub = spec.get("hostname"), spec.get("subdomain")
        if not host or not sub:
            return []
        with self.lock:
            svc = self.services.get((ns, sub))
        if svc is None or svc["spec"].get("clusterIP") != "None":
            return []
        labels = pod["metadata"].get("labels") or {}
        wanted = svc["spec"].get("selector") or {}
        if not wanted or any(labels.get(k) != v for k, v in wanted.items()):
            return []
        name = f"{host}.{sub}"
        return [name, f"{name}.{ns}", f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local"]

    def _create_lws(self, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        """A LeaderWorkerSet, and what LWS's controller makes of it: a headless Service
        named after it and, per group, a leader pod NAME-0 and workers NAME-0-I, with the
        labels, annotations and LWS_* variables the controller sets."""
        validate_lws(body)
        name = body["metadata"]["name"]
        with self.lock:
            if (ns, name) in self.leaderworkersets:
                raise Refused(
                    409, "AlreadyExists", f'leaderworkersets.{LWS_GROUP} "{name}" already exists'
                )
            uid = str(uuid.uuid4())
            lws = json.loads(json.dumps(body))
            lws["metadata"].update(namespace=ns, uid=uid, creationTimestamp=now(), generation=1)
            spec = lws["spec"]
            spec.setdefault("replicas", 1)
            spec.setdefault("startupPolicy", "LeaderCreated")
            tpl = spec["leaderWorkerTemplate"]
            tpl.setdefault("size", 1)
            tpl.setdefault("restartPolicy", "RecreateGroupOnPodRestart")
            lws["status"] = {"replicas": spec["replicas"]}
            self._bump(lws)
            self.leaderworkersets[(ns, name)] = lws
            owner = {"apiVersion": f"{LWS_GROUP}/v1", "kind": "LeaderWorkerSet", "name": name}
            owner["uid"] = uid
        self._create_service(
            ns,
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name, "labels": {f"{LWS}/name": name}},
                "spec": {
                    "clusterIP": "None",
                    "publishNotReadyAddresses": True,
                    "selector": {f"{LWS}/name": name},
                },
            },
            owner,
        )
        made = []
        with self.lock:
            size = int(tpl["size"])
            for group in range(int(spec["replicas"])):
                for index in range(size):
                    key = "leaderTemplate" if index == 0 and "leaderTemplate" in tpl else None
                    template = tpl[key or "workerTemplate"]
                    pod_name = f"{name}-{group}" if index == 0 else f"{name}-{group}-{index}"
                    labels = {
                        **((template.get("metadata") or {}).get("labels") or {}),
                        f"{LWS}/name": name,
                        f"{LWS}/group-index": str(group),
                        f"{LWS}/worker-index": str(index),
                    }
                    pspec = json.loads(json.dumps(template["spec"]))
                    pspec.setdefault("restartPolicy", "Always")
                    pspec["hostname"], pspec["subdomain"] = pod_name, name
                    added = [
                        {"name": "LWS_LEADER_ADDRESS", "value": f"{name}-{group}.{name}.{ns}"},
                        {"name": "LWS_GROUP_SIZE", "value": str(size)},
                        {"name": "LWS_WORKER_INDEX", "value": str(index)},
                    ]
                    for c in pspec["containers"]:
                        mine = [
                            e
                            for e in c.get("env") or []
                            if e["name"] not in {a["name"] for a in added}
                        ]
                        c["env"] = [*added, *mine]
                    annotations = {f"{LWS}/size": str(size)}
                    made.append(self._add_pod(ns, pod_name, labels, annotations, pspec, owner))
        for pod_name in made:
            threading.Thread(target=self._kubelet, args=(ns, pod_name), daemon=True).start()
        return lws

    def _delete_owned(
        self,
        ns: str,
        store: dict[tuple[str, str], dict[str, Any]],
        name: str,
        what: str,
        policy: str,
    ) -> dict[str, Any]:
        """Delete an owner (a Job, a LeaderWorkerSet) by `policy`: Orphan leaves what it
        owns running; Background deletes them after it; Foreground before it, the owner
        showing a deletionTimestamp until they are gone."""
        with self.lock:
            obj = store.get((ns, name))
            if obj is None:
                raise Refused(404, "NotFound", f'{what} "{name}" not found')
            uid = obj["metadata"]["uid"]

            def owned(items: dict[tuple[str, str], dict[str, Any]]) -> list[tuple[str, str]]:
                return [
                    k
                    for k, o in items.items()
                    if (o["metadata"].get("ownerReferences") or [{}])[0].get("uid") == uid
                ]

            pods, services = owned(self.pods), owned(self.services)
            maps = owned(self.config_maps)
        if policy == "Orphan":
            with self.lock:
                for k in pods:
                    self.pods[k]["metadata"].pop("ownerReferences", None)
                for k in services:
                    self.services[k]["metadata"].pop("ownerReferences", None)
                for k in maps:
                    self.config_maps[k]["metadata"].pop("ownerReferences", None)
                del store[(ns, name)]
            return obj

        def end(k: tuple[str, str]) -> None:
            with self.lock:
                spec = (self.pods.get(k) or {}).get("spec") or {}
            grace = float(spec.get("terminationGracePeriodSeconds", 30))
            self.delete_pod(*k, grace=min(grace, 5))

        def collect() -> None:  # the pods end together, as their kubelets stop them
            ending = [threading.Thread(target=end, args=(k,)) for k in pods]
            for thread in ending:
                thread.start()
            for thread in ending:
                thread.join()
            with self.lock:
                for k in services:
                    self.services.pop(k, None)
                for k in maps:  # the garbage collector: dependents go with their owner
                    self.config_maps.pop(k, None)
                store.pop((ns, name), None)

        if policy == "Foreground":
            obj["metadata"]["deletionTimestamp"] = now()
            obj["metadata"]["finalizers"] = ["foregroundDeletion"]
            self._bump(obj)
        else:
            with self.lock:
                store.pop((ns, name), None)
        threading.Thread(target=collect, daemon=True).start()
        return obj

    # -- the kubelet -------------------------------------------------------------------

    def _fits(self, spec: Mapping[str, Any]) -> str | None:
        wanted = spec.get("nodeSelector") or {}
        if any(self.node_labels.get(k) != v for k, v in wanted.items()) or not self._affine(spec):
            return "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
        used = 0
        with self.lock:
            for other in self.pods.values():
                if (
                    other["spec"] is not spec
                    and other["spec"].get("nodeName") == self.node
                    and other["status"].get("phase") in ("Pending", "Running")
                ):
                    used += _gpus(other["spec"])
        if _gpus(spec) > self.gpus - used:
            return "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
        return None

    def _affine(self, spec: Mapping[str, Any]) -> bool:
        """Whether the node fits the pod's required node affinity: one of its terms (ORed)
        whose every expression (on the node's labels) and field (metadata.name) holds."""
        node = (spec.get("affinity") or {}).get("nodeAffinity") or {}
        required = node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
        terms = required.get("nodeSelectorTerms") or []
        have = {"labels": self.node_labels, "fields": {"metadata.name": self.node}}

        def holds(rule: Mapping[str, Any], on: Mapping[str, str]) -> bool:
            key, op, values = rule["key"], rule["operator"], rule.get("values") or []
            return {
                "In": on.get(key) in values,
                "NotIn": on.get(key) not in values,
                "Exists": key in on,
                "DoesNotExist": key not in on,
            }.get(op, True)

        return not terms or any(
            all(holds(r, have["labels"]) for r in t.get("matchExpressions") or [])
            and all(holds(r, have["fields"]) for r in t.get("matchFields") or [])
            for t in terms
        )

    def _waiting(self, key: tuple[str, str], reason: str, message: str = "") -> None:
        state: dict[str, Any] = {"waiting": {"reason": reason}}
        if message:
            state["waiting"]["message"] = message
        pod = self.pods.get(key)
        if pod is None:
            return
        c = pod["spec"]["containers"][0]
        self._set_status(
            key,
            containerStatuses=[
                {
                    "name": c["name"],
                    "image": c["image"],
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "state": state,
                }
            ],
        )

    def _kubelet(self, ns: str, name: str) -> None:
        key = (ns, name)
        pod = self.pods.get(key)
        if pod is None:
            return
        spec = pod["spec"]
        while True:
            why = self._fits(spec)
            if why is None:
                break
            self._set_status(
                key,
                conditions=[
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": why,
                        "lastTransitionTime": now(),
                    }
                ],
            )
            time.sleep(0.2)
            if key not in self.pods:
                return
        with self.lock:
            if key not in self.pods:
                return
            spec["nodeName"] = self.node
        scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()}
        self._set_status(key, conditions=[scheduled], hostIP="127.0.0.1")
        c = spec["containers"][0]
        self._waiting(key, "ContainerCreating")
        try:
            image = self._image(c["image"])
        except docker.errors.DockerException as exc:
            self._waiting(key, "ErrImagePull", _said(exc))
            time.sleep(0.3)
            self._waiting(key, "ImagePullBackOff", f'Back-off pulling image "{c["image"]}"')
            return
        try:
            env = self._env(ns, c, pod)
        except KeyError as exc:
            self._waiting(key, "CreateContainerConfigError", f"secret {exc} not found")
            return
        maps: dict[str, Path] = {}
        for v in spec.get("volumes") or []:
            if "configMap" not in v:
                continue
            while (found := self._config_map_files(ns, v)) is None:  # FailedMount, retried
                self._waiting(
                    key, "ContainerCreating", f'configmap "{v["configMap"]["name"]}" not found'
                )
                time.sleep(0.2)
                if key not in self.pods:
                    return
            maps[v["name"]] = found
        run = self._create(key, spec, c, image, env, maps)
        if run is None:
            return
        run.reload()
        ip = run.attrs["NetworkSettings"]["Networks"][self.network]["IPAddress"]
        digests = image.attrs.get("RepoDigests") or []
        repo = c["image"].split("@")[0].rsplit(":", 1)[0] if "@" not in c["image"] else ""
        image_id = (
            c["image"]
            if "@" in c["image"]
            else next((d for d in digests if d.startswith(repo + "@")), str(image.id))
        )
        started = now()
        self._set_status(
            key,
            phase="Running",
            podIP=ip,
            podIPs=[{"ip": ip}],
            startTime=started,
            containerStatuses=[
                {
                    "name": c["name"],
                    "image": c["image"],
                    "imageID": image_id,
                    "containerID": f"docker://{run.id}",
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": started}},
                }
            ],
        )
        if self.expire_once_running:  # once a watch is open: it ends, and its version is gone
            with self.changed:
                self.changed.wait_for(lambda: bool(self.watches) or self.closed, timeout=600)
            self.expire()
        with suppress(docker.errors.DockerException):
            run.wait()
        with suppress(docker.errors.DockerException):
            run.reload()
            state = run.attrs["State"]
            code = int(state.get("ExitCode", 0))
            killed = bool(state.get("OOMKilled")) or (code == 137 and self._oom_event(run.id))
            reason = "OOMKilled" if killed else ("Completed" if code == 0 else "Error")
            if spec.get("restartPolicy") == "Always":  # a StatefulSet's pod (LWS): restarted,
                ended = {"exitCode": code, "reason": reason, "finishedAt": now()}  # backing off
                self._set_status(
                    key,
                    containerStatuses=[
                        {
                            "name": c["name"],
                            "image": c["image"],
                            "imageID": image_id,
                            "ready": False,
                            "restartCount": 1,
                            "started": False,
                            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                            "lastState": {"terminated": {**ended, "startedAt": started}},
                        }
                    ],
                )
                return
            self._set_status(
                key,
                phase="Succeeded" if code == 0 else "Failed",
                containerStatuses=[
                    {
                        "name": c["name"],
                        "image": c["image"],
                        "imageID": image_id,
                        "containerID": f"docker://{run.id}",
                        "ready": False,
                        "restartCount": 0,
                        "started": False,
                        "state": {
                            "terminated": {
                                "exitCode": code,
                                "reason": reason,
                                "startedAt": started,
                                "finishedAt": now(),
                            }
                        },
                    }
                ],
            )
            with self.lock:
                pod = self.pods.get(key)
                job = self._job_of(pod) if pod is not None else None
                if job is not None:
                    kind = "Complete" if code == 0 else "Failed"
                    job["status"] = {
                        "conditions": [
                            {"type": kind, "status": "True", "lastTransitionTime": now()}
                        ],
                        ("succeeded" if code == 0 else "failed"): 1,
                    }
                    self._bump(job)

    def _image(self, ref: str) -> Any:
        try:
            return self.client.images.get(ref)
        except docker.errors.ImageNotFound:
            return self.client.images.pull(ref)

    def _env(self, ns: str, c: Mapping[str, Any], pod: Mapping[str, Any]) -> dict[str, str]:
        env: dict[str, str] = {}
        for var in c.get("env") or []:
            if "value" in var:
                env[var["name"]] = expand(var["value"], env)
            elif "fieldRef" in var["valueFrom"]:
                path = var["valueFrom"]["fieldRef"]["fieldPath"]
                m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
                assert m is not None, f"fieldRef {path}: not modelled"
                env[var["name"]] = (pod["metadata"].get(m.group(1)) or {})[m.group(2)]
            else:
                ref = var["valueFrom"]["secretKeyRef"]
                env[var["name"]] = self.secrets[(ns, ref["name"])][ref["key"]]
        return env

    def _create(
        self,
        key: tuple[str, str],
        spec: Mapping[str, Any],
        c: Mapping[str, Any],
        image: Any,
        env: Mapping[str, str],
        maps: Mapping[str, Path],
    ) -> Any:
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        binds: list[str] = []
        shm = None
        for m in c.get("volumeMounts") or []:
            v = volumes[m["name"]]
            mode = "ro" if m.get("readOnly") else "rw"
            if "hostPath" in v:
                binds.append(f"{v['hostPath']['path']}:{m['mountPath']}:{mode}")
            elif "configMap" in v:
                binds.append(f"{maps[m['name']]}:{m['mountPath']}:ro")
            elif "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"]["claimName"]
                binds.append(f"standin-pvc-{claim}:{m['mountPath']}:{mode}")
            elif "emptyDir" in v and m["mountPath"] == "/dev/shm":
                shm = v["emptyDir"].get("sizeLimit", "64Mi").replace("i", "").lower()
        limits = (c.get("resources") or {}).get("limits") or {}
        kwargs: dict[str, Any] = {}
        if "memory" in limits:
            kwargs["mem_limit"] = limits["memory"].replace("i", "").lower()
            kwargs["memswap_limit"] = kwargs["mem_limit"]
        if shm:
            kwargs["shm_size"] = shm
        if c.get("command"):
            kwargs["entrypoint"] = [expand(a, env) for a in c["command"]]
        pod = self.pods.get(key)
        aliases = self._dns_names(key[0], pod) if pod is not None else []
        if spec.get("hostname"):
            kwargs["hostname"] = spec["hostname"]
        endpoint = self.client.api.create_endpoint_config(aliases=aliases or None)
        with self.lock:
            if key not in self.pods:
                return None
            run = self.client.containers.create(
                image.id,
                command=[expand(a, env) for a in c.get("args") or []] or None,
                network=self.network,
                networking_config={self.network: endpoint},
                environment=dict(env),
                volumes=binds,
                labels={STANDIN_LABEL: self.id, "pod": key[1]},
                name=f"k8s-{key[1]}-{self.id}",
                detach=True,
                **kwargs,
            )
            self.containers[key] = run
            self.started_env.append(dict(env))
            run.start()
        return run

    def delete_pod(self, ns: str, name: str, grace: float = 0) -> bool:
        with self.changed:
            pod = self.pods.pop((ns, name), None)
            run = self.containers.pop((ns, name), None)
            if pod is not None:
                self._bump(pod, "DELETED")
        if run is not None:
            with suppress(docker.errors.DockerException):
                run.stop(timeout=int(grace))
            with suppress(docker.errors.DockerException):
                run.remove(force=True)
        return pod is not None

    def _delete_job(self, ns: str, name: str, policy: str | None) -> dict[str, Any]:
        # batch/v1 Job's default through the API: Orphan
        return self._delete_owned(ns, self.jobs, name, "jobs.batch", policy or "Orphan")

    def secret(self, ns: str, name: str) -> dict[str, Any]:
        """A Secret as the API answers `get`: its values base64 under `data`."""
        if (ns, name) not in self.secrets:
            raise Refused(404, "NotFound", f'secrets "{name}" not found')
        data = {
            k: base64.b64encode(v.encode()).decode() for k, v in self.secrets[(ns, name)].items()
        }
        meta = {"name": name, "namespace": ns}
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": meta,
            "type": "Opaque",
            "data": data,
        }

    def discovery(self) -> dict[str, Any]:
        """GET /apis: the API groups served (LWS's where its CRD is installed)."""
        served = [("batch", "v1")] + ([(LWS_GROUP, "v1")] if self.lws_installed else [])
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": name,
                    "versions": [{"groupVersion": f"{name}/{v}", "version": v}],
                    "preferredVersion": {"groupVersion": f"{name}/{v}", "version": v},
                }
                for name, v in served
            ],
        }

    def evict(self) -> None:
        """The kubelet evicts every running pod (node pressure): killed, Failed (Evicted)."""
        with self.lock:
            keys = list(self.containers)
        for key in keys:
            self._set_status(
                key,
                phase="Failed",
                reason="Evicted",
                message="The node was low on resource: memory.",
            )
            with suppress(docker.errors.DockerException):
                self.containers[key].kill()

    def delete_pods(self) -> None:
        """Someone deletes every pod (`kubectl delete pod`): gone from the API (a DELETED
        event), their containers stopped; no controller makes them again."""
        with self.lock:
            keys = list(self.pods)
        for ns, name in keys:
            self.delete_pod(ns, name, grace=1)

    def lose_node(self) -> None:
        """The node stops answering: its pods are killed, marked Failed (NodeLost)."""
        with self.lock:
            keys = [k for k, p in self.pods.items() if p["spec"].get("nodeName") == self.node]
        for key in keys:
            run = self.containers.get(key)
            self._set_status(key, phase="Failed", reason="NodeLost", message="node lost")
            if run is not None:
                with suppress(docker.errors.DockerException):
                    run.kill()

    # -- HTTP --------------------------------------------------------------------------

    def _fault(self, method: str, path: str, query: str) -> int | None:
        with self.lock:
            for f in self.faults:
                if f.method == method and f.path in path and f.query in query and f.times > 0:
                    f.times -= 1
                    return f.status
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _status(self, status: int, reason: str, message: str) -> None:
                self._send(
                    status,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Failure",
                        "message": message,
                        "reason": reason,
                        "code": status,
                    },
                )

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                return json.loads(raw) if raw else None

            def _route(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                body = self._body()
                api.requests.append((self.command, self.path, body))
                status = api._fault(self.command, url.path, url.query)
                if status is not None:
                    self._status(status, "Injected", f"injected fault {status}")
                    return
                parts = url.path.strip("/").split("/")
                try:
                    self._dispatch(parts, query, body)
                except Refused as exc:
                    self._status(exc.status, exc.reason, exc.message)

            def _dispatch(self, parts: list[str], query: dict[str, str], body: Any) -> None:
                m = self.command
                if parts == ["apis"] and m == "GET":
                    self._send(200, api.discovery())
                    return
                if parts[:3] == ["apis", LWS_GROUP, "v1"] and parts[3:4] == ["namespaces"]:
                    if not api.lws_installed or parts[5:6] != ["leaderworkersets"]:
                        raise Refused(404, "NotFound", f"the server could not find {self.path}")
                    ns, rest = parts[4], parts[6:]
                    what = f"leaderworkersets.{LWS_GROUP}"
                    if m == "POST" and not rest:
                        self._send(201, api._create_lws(ns, body))
                    elif m == "GET" and not rest:
                        self._list("LeaderWorkerSetList", api.leaderworkersets, ns, query)
                    elif m == "GET":
                        self._send(200, self._get(api.leaderworkersets, ns, rest[0], what))
                    elif m == "DELETE":
                        policy = query.get("propagationPolicy") or (body or {}).get(
                            "propagationPolicy"
                        )  # a custom resource's default: Background
                        deleted = api._delete_owned(
                            ns, api.leaderworkersets, rest[0], what, policy or "Background"
                        )
                        self._send(200, deleted)
                    else:
                        raise Refused(405, "MethodNotAllowed", m)
                    return
                if parts[:3] == ["apis", "batch", "v1"] and parts[3:4] == ["namespaces"]:
                    ns, rest = parts[4], parts[6:]
                    if parts[5] != "jobs":
                        raise Refused(404, "NotFound", "no such resource")
                    if m == "POST" and not rest:
                        self._send(201, api._create_job(ns, body))
                    elif m == "GET" and not rest:
                        self._list("JobList", api.jobs, ns, query)
                    elif m == "GET":
                        self._send(200, self._get(api.jobs, ns, rest[0], "jobs.batch"))
                    elif m == "DELETE":
                        policy = query.get("propagationPolicy") or (body or {}).get(
                            "propagationPolicy"
                        )
                        self._send(200, api._delete_job(ns, rest[0], policy))
                    else:
                        raise Refused(405, "MethodNotAllowed", m)
                elif parts[:2] == ["api", "v1"] and parts[2:3] == ["namespaces"]:
                    ns, rest = parts[3], parts[5:]
                    simple = {
                        "configmaps": ("ConfigMapList", api.config_maps, api._create_config_map),
                        "services": ("ServiceList", api.services, api._create_service),
                    }
                    if parts[4] in simple:
                        self._simple(parts[4], *simple[parts[4]], ns, rest, query, body)
                        return
                    if parts[4] == "secrets" and m == "GET" and len(rest) == 1:
                        self._send(200, api.secret(ns, rest[0]))
                        return
                    if parts[4] != "pods":
                        raise Refused(404, "NotFound", "no such resource")
                    if m == "GET" and not rest:
                        if query.get("watch", "").lower() in ("true", "1"):
                            self._watch(ns, query)
                            return
                        self._list("PodList", api.pods, ns, query)
                    elif m == "GET" and rest[1:] == ["portforward"]:
                        self._portforward(ns, rest[0])
                    elif m == "GET" and rest[1:] == ["exec"]:
                        self._exec(ns, rest[0])
                    elif m == "GET" and rest[1:] == ["log"]:
                        self._log(ns, rest[0], query.get("follow") == "true")
                    elif m == "GET":
                        self._send(200, self._get(api.pods, ns, rest[0], "pods"))
                    elif m == "DELETE":
                        pod = self._get(api.pods, ns, rest[0], "pods")
                        api.delete_pod(ns, rest[0])
                        self._send(200, pod)
                    else:
                        raise Refused(405, "MethodNotAllowed", m)
                else:
                    raise Refused(404, "NotFound", f"the server could not find {self.path}")

            def _simple(
                self,
                what: str,
                kind: str,
                store: dict[tuple[str, str], dict[str, Any]],
                create: Any,
                ns: str,
                rest: list[str],
                query: dict[str, str],
                body: Any,
            ) -> None:
                """Create, list, get and delete of a kind no controller acts on."""
                m = self.command
                if m == "POST" and not rest:
                    self._send(201, create(ns, body))
                elif m == "GET" and not rest:
                    self._list(kind, store, ns, query)
                elif m == "GET":
                    self._send(200, self._get(store, ns, rest[0], what))
                elif m == "DELETE":
                    made = self._get(store, ns, rest[0], what)
                    with api.lock:
                        store.pop((ns, rest[0]), None)
                    self._send(200, made)
                else:
                    raise Refused(405, "MethodNotAllowed", m)

            def _get(self, store: Any, ns: str, name: str, what: str) -> Any:
                with api.lock:
                    obj = store.get((ns, name))
                    if obj is None:
                        raise Refused(404, "NotFound", f'{what} "{name}" not found')
                    return json.loads(json.dumps(obj))

            def _list(self, kind: str, store: Any, ns: str, query: dict[str, str]) -> None:
                with api.lock:
                    items = api.matching(store, ns, query.get("labelSelector", ""))
                    rv = str(api.rv)
                version = {"JobList": "batch/v1", "LeaderWorkerSetList": f"{LWS_GROUP}/v1"}.get(
                    kind, "v1"
                )
                self._send(
                    200,
                    {
                        "kind": kind,
                        "apiVersion": version,
                        "metadata": {"resourceVersion": rv},
                        "items": items,
                    },
                )

            def _chunked(self, content_type: str) -> None:
                """A 200 whose body comes in chunks (`_chunk`), ended by `0\\r\\n\\r\\n`."""
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _watch(self, ns: str, query: dict[str, str]) -> None:
                """Pod events after the query's resourceVersion, a JSON object a line
                (chunked), until timeoutSeconds, expire() or the server's end."""
                selector = query.get("labelSelector", "")
                since = query.get("resourceVersion", "")
                deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
                with api.changed:
                    api.watches.append(since)
                    api.changed.notify_all()
                    epoch = api.epoch
                    if since and since != "0" and int(since) < api.oldest:
                        api.expired += 1
                        said = f"too old resource version: {since} ({api.oldest})"
                        gone = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                "status": "Failure", "reason": "Expired", "code": 410,
                                "message": said}  # fmt: skip
                        first = [{"type": "ERROR", "object": gone}]
                        cursor = None
                    elif since and since != "0":
                        first, cursor = [], int(since)
                    else:
                        first = [
                            {"type": "ADDED", "object": o}
                            for o in api.matching(api.pods, ns, selector)
                        ]
                        cursor = api.rv
                self._chunked("application/json")

                def send(events: list[dict[str, Any]]) -> None:
                    for event in events:
                        self._chunk(json.dumps(event).encode() + b"\n")

                try:
                    send(first)
                    while cursor is not None:
                        with api.changed:
                            api.changed.wait_for(
                                lambda c=cursor: api.rv > c or api.epoch != epoch or api.closed,
                                timeout=max(0.0, min(0.5, deadline - time.monotonic())),
                            )
                            if api.epoch != epoch or api.closed:
                                break
                            events = [
                                {"type": kind, "object": obj}
                                for rv, kind, obj in api.pod_events
                                if rv > cursor
                                and obj["metadata"]["namespace"] == ns
                                and selected(obj, selector)
                            ]
                            cursor = api.rv
                        send(events)
                        if time.monotonic() >= deadline:
                            break
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    pass
                self.close_connection = True

            def _upgrade(self, protocol: str) -> None:
                if self.headers.get("Upgrade", "").lower() != "websocket":
                    raise Refused(400, "BadRequest", "needs a websocket upgrade")
                offered = self.headers.get("Sec-WebSocket-Protocol", "")
                if protocol not in offered:
                    raise Refused(400, "BadRequest", f"no {protocol} in {offered!r}")
                key = self.headers["Sec-WebSocket-Key"]
                accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
                self.send_response(101, "Switching Protocols")
                self.send_header("Upgrade", "websocket")
                self.send_header("Connection", "Upgrade")
                self.send_header("Sec-WebSocket-Accept", accept)
                self.send_header("Sec-WebSocket-Protocol", protocol)
                self.end_headers()
                self.wfile.flush()
                self.close_connection = True

            def _portforward(self, ns: str, name: str) -> None:
                """Port-forward over a websocket (v4.channel.k8s.io): per port a data
                channel and an error channel, each opened with the port number."""
                pod = self._get(api.pods, ns, name, "pods")
                ip = (pod.get("status") or {}).get("podIP")
                ports = parse_qs(urlsplit(self.path).query).get("ports", [""])[0].split(",")
                if not ip or len(ports) != 1 or not ports[0].isdigit():
                    raise Refused(400, "BadRequest", "one port of a running pod")
                port = int(ports[0])
                self._upgrade("v4.channel.k8s.io")  # the kubelet's port-forward protocol
                api.forwards += 1
                lock = threading.Lock()

                def send(data: bytes, opcode: int = 0x2) -> None:
                    with lock, suppress(OSError):
                        self.wfile.write(ws_frame(data, opcode))
                        self.wfile.flush()

                number = port.to_bytes(2, "little")
                send(b"\x00" + number)
                send(b"\x01" + number)
                try:
                    upstream = socket.create_connection((ip, port), timeout=10)
                except OSError as exc:
                    send(b"\x01" + str(exc).encode())
                    send(b"", 0x8)
                    return
                upstream.settimeout(None)

                def down() -> None:
                    with suppress(OSError):
                        while chunk := upstream.recv(65536):
                            send(b"\x00" + chunk)
                    send(b"", 0x8)

                pump = threading.Thread(target=down, daemon=True)
                pump.start()
                with suppress(OSError, ValueError):
                    while (frame := ws_read(self.rfile)) is not None:
                        opcode, data = frame
                        if opcode == 0x8:
                            break
                        if opcode in (0x1, 0x2) and data[:1] == b"\x00" and len(data) > 1:
                            upstream.sendall(data[1:])
                with suppress(OSError):
                    upstream.shutdown(socket.SHUT_RDWR)
                upstream.close()
                pump.join(timeout=5)

            def _exec(self, ns: str, name: str) -> None:
                """`exec` over a websocket (v4.channel.k8s.io): the command's stdout on
                channel 1, stderr on 2, its Status on 3, then close."""
                if self.headers.get("Upgrade", "").lower() != "websocket":
                    raise Refused(400, "BadRequest", "exec needs a websocket upgrade")
                if api.on_exec is not None and not api.on_exec():
                    self.close_connection = True
                    return
                self._get(api.pods, ns, name, "pods")
                run = api.containers.get((ns, name))
                if run is None:
                    raise Refused(400, "BadRequest", f'pod "{name}" has no running container')
                offered = self.headers.get("Sec-WebSocket-Protocol", "")
                if "v4.channel.k8s.io" not in offered:
                    raise Refused(400, "BadRequest", f"no channel protocol in {offered!r}")
                command = parse_qs(urlsplit(self.path).query).get("command", [])
                key = self.headers["Sec-WebSocket-Key"]
                accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
                self.send_response(101, "Switching Protocols")
                self.send_header("Upgrade", "websocket")
                self.send_header("Connection", "Upgrade")
                self.send_header("Sec-WebSocket-Accept", accept)
                self.send_header("Sec-WebSocket-Protocol", "v4.channel.k8s.io")
                self.end_headers()
                self.close_connection = True
                api.execs.append(list(command))
                try:
                    code, (out, err) = run.exec_run(command, demux=True)
                except docker.errors.DockerException as exc:
                    code, out, err = 126, b"", str(exc).encode()
                for channel, data in ((1, out), (2, err)):
                    if data:
                        self.wfile.write(ws_frame(bytes([channel]) + data))
                if code == 0:
                    status: dict[str, Any] = {"metadata": {}, "status": "Success"}
                else:
                    status = {
                        "metadata": {},
                        "status": "Failure",
                        "reason": "NonZeroExitCode",
                        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
                    }
                self.wfile.write(ws_frame(b"\x03" + json.dumps(status).encode()))
                self.wfile.write(ws_frame(b"", opcode=0x8))
                self.wfile.flush()

            def _log(self, ns: str, name: str, follow: bool) -> None:
                self._get(api.pods, ns, name, "pods")
                run = api.containers.get((ns, name))
                if run is None:
                    raise Refused(
                        400, "BadRequest", f'container "server" in pod "{name}" is waiting to start'
                    )
                self._chunked("text/plain")
                try:
                    for chunk in run.logs(stream=True, follow=follow):
                        self._chunk(chunk)
                except (docker.errors.DockerException, OSError):
                    pass
                with suppress(OSError):
                    self.wfile.write(b"0\r\n\r\n")

            def do_GET(self) -> None:
                self._route()

            def do_POST(self) -> None:
                self._route()

            def do_DELETE(self) -> None:
                self._route()

        return Handler


WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def ws_read(stream: Any) -> tuple[int, bytes] | None:
    """One frame a client sent (masked), reassembled from its fragments; None at the end."""
    payload, first = b"", None
    while True:
        head = stream.read(2)
        if len(head) < 2:
            return None
        fin, opcode = head[0] & 0x80, head[0] & 0x0F
        n = head[1] & 0x7F
        if n == 126:
            n = int.from_bytes(stream.read(2), "big")
        elif n == 127:
            n = int.from_bytes(stream.read(8), "big")
        mask = stream.read(4) if head[1] & 0x80 else b"\0\0\0\0"
        data = stream.read(n)
        payload += bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        first = opcode if first is None else first
        if fin:
            return first, payload


def ws_frame(data: bytes, opcode: int = 0x2) -> bytes:
    """One final, unmasked websocket frame (a server's)."""
    n = len(data)
    if n < 126:
        head = bytes([0x80 | opcode, n])
    elif n < 2**16:
        head = bytes([0x80 | opcode, 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 127]) + n.to_bytes(8, "big")
    return head + data


def _gpus(spec: Mapping[str, Any]) -> int:
    total = 0
    for c in spec.get("containers") or []:
        limits = (c.get("resources") or {}).get("limits") or {}
        total += int(limits.get("nvidia.com/gpu", 0))
    return total


def _said(exc: docker.errors.DockerException) -> str:
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc)
