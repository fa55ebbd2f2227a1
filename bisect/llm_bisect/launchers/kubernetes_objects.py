"""The Kubernetes objects the launcher writes and reads, as typed shapes (TypedDicts over
the JSON the API takes and answers): only the fields launchers/kubernetes.py sets or reads.

Every key is optional (`total=False`): a manifest sets what it needs, and an answer of the
API has what the cluster put there (kubernetes.py's `shaped` checks, at run time, that the
keys it reads are of these kinds where present). Values only: no logic, no I/O."""

from __future__ import annotations

from typing import TypedDict


class OwnerReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str


class ObjectMeta(TypedDict, total=False):
    name: str
    namespace: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    uid: str
    resourceVersion: str


class ListMeta(TypedDict, total=False):
    resourceVersion: str


class SecretKeySelector(TypedDict):
    name: str
    key: str


class EnvSource(TypedDict):
    secretKeyRef: SecretKeySelector


class EnvVar(TypedDict, total=False):
    name: str
    value: str
    valueFrom: EnvSource


class VolumeMount(TypedDict, total=False):
    name: str
    mountPath: str
    readOnly: bool


class KeyToPath(TypedDict):
    key: str
    path: str


class Volume(TypedDict, total=False):
    name: str
    emptyDir: dict[str, str]
    persistentVolumeClaim: dict[str, str]
    hostPath: dict[str, str]
    configMap: ConfigMapSource


class ConfigMapSource(TypedDict):
    name: str
    items: list[KeyToPath]


class ContainerPort(TypedDict):
    name: str
    containerPort: int
    protocol: str


class ResourceClaimRef(TypedDict):
    name: str


class Resources(TypedDict, total=False):
    limits: dict[str, str]
    claims: list[ResourceClaimRef]


class Container(TypedDict, total=False):
    name: str
    image: str
    command: list[str]
    args: list[str]
    ports: list[ContainerPort]
    env: list[EnvVar]
    volumeMounts: list[VolumeMount]
    imagePullPolicy: str
    resources: Resources


class PodResourceClaim(TypedDict, total=False):
    name: str
    resourceClaimTemplateName: str | None
    resourceClaimName: str | None


class NodeSelectorRequirement(TypedDict, total=False):
    key: str
    operator: str
    values: list[str]


class NodeSelectorTerm(TypedDict, total=False):
    matchExpressions: list[NodeSelectorRequirement]
    matchFields: list[NodeSelectorRequirement]


class NodeSelector(TypedDict, total=False):
    nodeSelectorTerms: list[NodeSelectorTerm]


class NodeAffinity(TypedDict, total=False):
    requiredDuringSchedulingIgnoredDuringExecution: NodeSelector


class Affinity(TypedDict, total=False):
    """A pod's affinity; the config's may hold more (podAffinity ...), passed on as written."""

    nodeAffinity: NodeAffinity


class LocalObjectReference(TypedDict):
    name: str


class PodSpec(TypedDict, total=False):
    restartPolicy: str
    terminationGracePeriodSeconds: int
    enableServiceLinks: bool
    containers: list[Container]
    volumes: list[Volume]
    resourceClaims: list[PodResourceClaim]
    nodeSelector: dict[str, str]
    affinity: Affinity
    """As the config wrote it (`server.affinity`, or `away_from`'s)."""
    tolerations: list[Toleration]
    """As the config wrote them (`server.tolerations`)."""
    imagePullSecrets: list[LocalObjectReference]
    subdomain: str
    nodeName: str


class TemplateMeta(TypedDict):
    labels: dict[str, str]


class PodTemplate(TypedDict):
    metadata: TemplateMeta
    spec: PodSpec


class JobSpec(TypedDict, total=False):
    completionMode: str
    completions: int
    parallelism: int
    backoffLimit: int
    activeDeadlineSeconds: int | None
    ttlSecondsAfterFinished: int | None
    template: PodTemplate


class ServicePort(TypedDict):
    name: str
    port: int
    targetPort: int


class ServiceSpec(TypedDict):
    clusterIP: str
    publishNotReadyAddresses: bool
    selector: dict[str, str]
    ports: list[ServicePort]


class LeaderWorkerTemplate(TypedDict, total=False):
    size: int
    restartPolicy: str
    leaderTemplate: PodTemplate
    workerTemplate: PodTemplate


class LeaderWorkerSetSpec(TypedDict):
    replicas: int
    startupPolicy: str
    leaderWorkerTemplate: LeaderWorkerTemplate


class ContainerStateWaiting(TypedDict, total=False):
    reason: str
    message: str


class ContainerStateTerminated(TypedDict, total=False):
    reason: str
    message: str
    exitCode: int


class ContainerState(TypedDict, total=False):
    waiting: ContainerStateWaiting
    running: dict[str, str]
    terminated: ContainerStateTerminated


class ContainerStatus(TypedDict, total=False):
    name: str
    state: ContainerState
    lastState: ContainerState
    restartCount: int
    imageID: str
    ready: bool


class PodCondition(TypedDict, total=False):
    type: str
    status: str
    reason: str
    message: str


class PodStatus(TypedDict, total=False):
    phase: str
    reason: str
    message: str
    podIP: str
    conditions: list[PodCondition]
    containerStatuses: list[ContainerStatus]


class Manifest(TypedDict, total=False):
    """An object the launcher creates (a Job, LeaderWorkerSet, Service or ConfigMap; `kind`
    says which) or reads back (a Job or LeaderWorkerSet: its metadata)."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: JobSpec | LeaderWorkerSetSpec | ServiceSpec
    immutable: bool
    data: dict[str, str]
    binaryData: dict[str, str]


class Pod(TypedDict, total=False):
    """A pod as the API lists or watches it."""

    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus


class ObjectList(TypedDict, total=False):
    """A list answer: Jobs, LeaderWorkerSets, Services or ConfigMaps (their metadata)."""

    metadata: ListMeta
    items: list[Manifest]


class PodList(TypedDict, total=False):
    metadata: ListMeta
    items: list[Pod]


class Toleration(TypedDict, total=False):
    key: str
    operator: str
    value: str
    effect: str
    tolerationSeconds: int
