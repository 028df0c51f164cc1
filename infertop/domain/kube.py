"""What infertop knows about the Kubernetes side of the fleet at one moment.

Plain immutable values built by ``sources/kube/read.py`` from API objects; the
Cluster pane renders them and ``infertop snapshot --json`` prints them.
``None`` means "not known" (field absent, not yet reported), never zero.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# Waiting / termination reasons that mean "this will not fix itself soon".
STUCK_REASONS = ("ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CrashLoopBackOff",
                 "CreateContainerConfigError", "CreateContainerError", "RunContainerError")


@dataclass(frozen=True)
class KubeCondition:
    type: str
    status: str  # "True", "False", "Unknown"
    reason: str = ""
    message: str = ""
    last_transition: str | None = None


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    uid: str = ""
    phase: str = "Unknown"
    status: str = "Unknown"  # as kubectl's STATUS column: Running, Pending, CrashLoopBackOff, Terminating…
    ready: bool = False
    ready_text: str = "0/0"  # ready containers / containers
    restarts: int = 0
    node: str | None = None
    created_ts: float | None = None  # epoch seconds
    ip: str | None = None
    port: int | None = None  # the engine's HTTP port (vLLM container's first containerPort)
    owner_kind: str | None = None  # Deployment, StatefulSet, ReplicaSet, … (the workload when known)
    owner_name: str | None = None
    container: str | None = None  # the vLLM container
    image: str | None = None
    args: tuple[str, ...] = ()
    waiting_reason: str | None = None
    waiting_message: str | None = None
    last_termination_reason: str | None = None  # e.g. OOMKilled, Error
    unschedulable_message: str | None = None  # PodScheduled=False message
    terminating: bool = False
    gpus: int = 0  # nvidia.com/gpu requested
    labels: dict[str, str] = field(default_factory=dict)
    resource_version: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def engine_url(self) -> str | None:
        """Where the pod's vLLM engine answers, when it has an IP and a port."""
        if not self.ip or not self.port:
            return None
        return f"http://{self.ip}:{self.port}"

    @property
    def problem(self) -> str | None:
        """Why the pod is not serving, in one phrase; None when it is fine."""
        if self.terminating:
            return None
        if self.waiting_reason in STUCK_REASONS:
            return f"{self.waiting_reason}: {self.waiting_message}" if self.waiting_message else self.waiting_reason
        if self.unschedulable_message:
            return f"Pending: {short_unschedulable(self.unschedulable_message)}"
        if self.last_termination_reason == "OOMKilled":
            return "last terminated: OOMKilled"
        return None


@dataclass(frozen=True)
class WorkloadView:
    kind: str  # Deployment or StatefulSet
    namespace: str
    name: str
    uid: str = ""
    desired: int | None = None  # spec.replicas
    current: int | None = None  # status.replicas
    ready: int = 0
    updated: int = 0
    available: int = 0
    generation: int | None = None
    observed_generation: int | None = None
    rollout: str = "unknown"  # complete, progressing, stuck, waiting
    rollout_detail: str = ""
    conditions: tuple[KubeCondition, ...] = ()
    selector: str = ""  # matchLabels as k=v,…
    container: str | None = None
    image: str | None = None
    args: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    resource_version: str = ""

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"

    @property
    def ref(self) -> str:
        return f"{self.kind.lower()} {self.namespace}/{self.name}"


@dataclass(frozen=True)
class MetricView:
    name: str  # vllm:num_requests_waiting, cpu, …
    type: str  # Pods, Resource, Object, External, ContainerResource
    current: str | None = None
    target: str | None = None


@dataclass(frozen=True)
class ScalingPolicyView:
    type: str  # Pods or Percent
    value: int
    period_s: int


@dataclass(frozen=True)
class ScalingRulesView:
    """One direction of an HPA's ``spec.behavior``; None fields: the controller's default."""

    stabilization_window_s: int | None = None  # default: 0 up, 300 down
    select_policy: str | None = None  # Max (default), Min, Disabled
    policies: tuple[ScalingPolicyView, ...] = ()
    tolerance: float | None = None  # per-direction tolerance (alpha in 1.33); default 0.1


@dataclass(frozen=True)
class HpaBehaviorView:
    scale_up: ScalingRulesView | None = None
    scale_down: ScalingRulesView | None = None


class _AutoscalerObject:
    """What HPAs, ScaledObjects and VariantAutoscalings share: a namespaced name and conditions."""

    namespace: str
    name: str
    conditions: tuple[KubeCondition, ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def condition(self, ctype: str) -> KubeCondition | None:
        return next((c for c in self.conditions if c.type == ctype), None)


@dataclass(frozen=True)
class HpaView(_AutoscalerObject):
    namespace: str
    name: str
    target_kind: str
    target_name: str
    min_replicas: int | None = None
    max_replicas: int | None = None
    current_replicas: int | None = None
    desired_replicas: int | None = None
    metrics: tuple[MetricView, ...] = ()
    conditions: tuple[KubeCondition, ...] = ()
    last_scale_time: str | None = None
    resource_version: str = ""
    behavior: HpaBehaviorView | None = None  # None: no spec.behavior (the controller's defaults)
    owner_kind: str | None = None  # ScaledObject when KEDA made this HPA
    owner_name: str | None = None

    @property
    def why_not_scaling(self) -> str | None:
        """The condition that explains a stuck autoscaler, as 'Reason: message'."""
        checks = (("AbleToScale", "False"), ("ScalingActive", "False"), ("ScalingLimited", "True"))
        for ctype, bad in checks:
            c = self.condition(ctype)
            if c is not None and c.status == bad:
                return f"{ctype} {c.reason}: {c.message}" if c.message else f"{ctype} {c.reason}"
        return None

    @property
    def flags(self) -> str:
        """Compact condition summary: A S L for AbleToScale, ScalingActive, ScalingLimited (lowercase = not)."""
        out = []
        for ctype, letter in (("AbleToScale", "A"), ("ScalingActive", "S"), ("ScalingLimited", "L")):
            c = self.condition(ctype)
            if c is None:
                out.append("·")
            else:
                out.append(letter if c.status == "True" else letter.lower())
        return "".join(out)


@dataclass(frozen=True)
class NodeView:
    name: str
    gpu_capacity: int | None = None
    gpu_allocatable: int | None = None
    gpu_requested: int = 0  # by the pods infertop sees on this node
    gpu_product: str | None = None
    cordoned: bool = False
    ready: bool | None = None
    conditions: tuple[KubeCondition, ...] = ()
    taints: tuple[str, ...] = ()
    resource_version: str = ""
    cpu_capacity: float | None = None  # cores
    cpu_allocatable: float | None = None
    cpu_requested: float = 0.0  # by the live pods infertop sees on this node
    memory_capacity_bytes: float | None = None
    memory_allocatable_bytes: float | None = None
    memory_requested_bytes: float = 0.0

    @property
    def problems(self) -> tuple[str, ...]:
        """Conditions that are not as they should be (Ready not True, pressure True)."""
        out = []
        for c in self.conditions:
            if (c.type == "Ready" and c.status != "True") or (c.type != "Ready" and c.status == "True"):
                out.append(f"{c.type}={c.status}" + (f" ({c.reason})" if c.reason else ""))
        return tuple(out)


@dataclass(frozen=True)
class EventView:
    namespace: str
    type: str  # Normal or Warning
    reason: str
    message: str
    kind: str  # involved object's kind
    name: str  # involved object's name
    count: int = 1
    last_seen_ts: float | None = None
    component: str = ""

    @property
    def warning(self) -> bool:
        return self.type == "Warning"


@dataclass(frozen=True)
class TriggerView:
    """One KEDA trigger: its type (prometheus, cpu, …), its metadata and its health."""

    type: str
    name: str = ""
    metric_type: str = ""  # AverageValue, Value, Utilization
    metadata: dict[str, str] = field(default_factory=dict)  # query, threshold, serverAddress, … (no secrets)
    health: str | None = None  # Happy, Failing (status.health[metric].status)
    failures: int | None = None  # status.health[metric].numberOfFailures


@dataclass(frozen=True)
class ScaledObjectView(_AutoscalerObject):
    """A KEDA ScaledObject (keda.sh/v1alpha1)."""

    namespace: str
    name: str
    target_kind: str
    target_name: str
    min_replicas: int | None = None
    max_replicas: int | None = None
    polling_interval_s: int | None = None
    cooldown_period_s: int | None = None
    triggers: tuple[TriggerView, ...] = ()
    hpa_name: str | None = None  # the HPA KEDA made and owns (status.hpaName)
    conditions: tuple[KubeCondition, ...] = ()
    paused: bool = False  # autoscaling.keda.sh/paused(-replicas) annotation
    paused_replicas: int | None = None
    fallback_replicas: int | None = None
    fallback_failure_threshold: int | None = None
    last_active_time: str | None = None
    external_metric_names: tuple[str, ...] = ()
    resource_version: str = ""


@dataclass(frozen=True)
class VariantAutoscalerView(_AutoscalerObject):
    """An llm-d workload variant autoscaler (VariantAutoscaling, llmd.ai/v1alpha1)."""

    namespace: str
    name: str
    target_kind: str
    target_name: str
    model_id: str = ""
    min_replicas: int | None = None
    max_replicas: int | None = None
    current_replicas: int | None = None  # status.currentAlloc.numReplicas
    desired_replicas: int | None = None  # status.desiredOptimizedAlloc.numReplicas
    accelerator: str | None = None
    last_run_time: str | None = None
    applied: bool | None = None  # status.actuation.applied
    conditions: tuple[KubeCondition, ...] = ()
    metric_desired_replicas: float | None = None  # wva_desired_replicas, when a metrics source is configured
    resource_version: str = ""


@dataclass(frozen=True)
class ReplicaSetView:
    """A ReplicaSet: one revision of a Deployment's pod template."""

    namespace: str
    name: str
    owner_name: str | None = None  # the Deployment (ownerReferences)
    revision: str = ""  # deployment.kubernetes.io/revision
    desired: int = 0
    current: int = 0
    ready: int = 0
    created_ts: float | None = None
    image: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref_tuple(self) -> tuple[str, str, str]:  # describe / YAML / events (controllers/kube_reads.object_ref)
        return "ReplicaSet", self.namespace, self.name


@dataclass(frozen=True)
class InferencePoolView:
    """A Gateway API Inference Extension InferencePool: model-server pods (selector, target ports) behind
    an endpoint picker; ``ready_endpoints`` of ``endpoints``: its selected pods that are ready."""

    namespace: str
    name: str
    selector: str = ""  # "app=vllm,tier=gpu"
    target_ports: tuple[int, ...] = ()
    picker: str = ""  # spec.endpointPickerRef: "name:port"
    endpoints: int = 0
    ready_endpoints: int = 0

    @property
    def key(self) -> str:
        return f"InferencePool/{self.namespace}/{self.name}"

    @property
    def ref_tuple(self) -> tuple[str, str, str]:
        return "InferencePool", self.namespace, self.name


@dataclass(frozen=True)
class InferenceObjectiveView:
    """An InferenceObjective: the priority (``spec.priority``, higher first) of requests to its pool."""

    namespace: str
    name: str
    pool: str = ""  # spec.poolRef.name
    priority: int | None = None

    @property
    def key(self) -> str:
        return f"InferenceObjective/{self.namespace}/{self.name}"

    @property
    def ref_tuple(self) -> tuple[str, str, str]:
        return "InferenceObjective", self.namespace, self.name


@dataclass(frozen=True)
class EndpointView:
    """One endpoint of a Service (from its EndpointSlices): a pod receives traffic while ready."""

    pod: str | None
    ip: str
    ready: bool
    terminating: bool = False


@dataclass(frozen=True)
class ServiceView:
    namespace: str
    name: str
    type: str = "ClusterIP"
    cluster_ip: str = ""
    ports: str = ""  # "http 8000→8000/TCP"
    selector: dict[str, str] = field(default_factory=dict)
    endpoints: tuple[EndpointView, ...] = ()
    slices_read: bool = True  # False: its EndpointSlices could not be read (forbidden / not served)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref_tuple(self) -> tuple[str, str, str]:  # describe / YAML / events (controllers/kube_reads.object_ref)
        return "Service", self.namespace, self.name

    @property
    def ready_endpoints(self) -> int:
        return sum(1 for e in self.endpoints if e.ready)


@dataclass(frozen=True)
class PdbView:
    namespace: str
    name: str
    selector: str = ""
    min_available: str | None = None
    max_unavailable: str | None = None
    disruptions_allowed: int | None = None  # None: its status is not computed yet
    current_healthy: int | None = None
    desired_healthy: int | None = None
    expected_pods: int | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref_tuple(self) -> tuple[str, str, str]:  # describe / YAML / events (controllers/kube_reads.object_ref)
        return "PodDisruptionBudget", self.namespace, self.name


@dataclass(frozen=True)
class ConfigMapView:
    namespace: str
    name: str
    keys: tuple[str, ...] = ()
    size_bytes: int = 0  # the data and binaryData values together

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref_tuple(self) -> tuple[str, str, str]:  # describe / YAML / events (controllers/kube_reads.object_ref)
        return "ConfigMap", self.namespace, self.name


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything the Cluster pane shows, read at ``taken_at`` (epoch seconds)."""

    context: str
    namespaces: tuple[str, ...]
    taken_at: float
    user: str = ""
    server: str = ""
    workloads: tuple[WorkloadView, ...] = ()
    pods: tuple[PodView, ...] = ()
    nodes: tuple[NodeView, ...] = ()
    hpas: tuple[HpaView, ...] = ()
    events: tuple[EventView, ...] = ()
    scaled_objects: tuple[ScaledObjectView, ...] = ()  # KEDA, when its resource type exists
    variant_autoscalers: tuple[VariantAutoscalerView, ...] = ()  # llm-d WVA, when its resource type exists
    replicasets: tuple[ReplicaSetView, ...] = ()
    services: tuple[ServiceView, ...] = ()
    pdbs: tuple[PdbView, ...] = ()
    configmaps: tuple[ConfigMapView, ...] = ()
    inference_pools: tuple[InferencePoolView, ...] = ()  # when the cluster serves InferencePools
    inference_objectives: tuple[InferenceObjectiveView, ...] = ()
    errors: tuple[str, ...] = ()  # "nodes: forbidden …" — what could not be read
    # resource kind ("pods", "nodes", "hpas"…) → why it is not shown at all: "forbidden (list pods)",
    # "not served (horizontalpodautoscalers.autoscaling/v2)" — an empty view is then no empty cluster
    absent: dict[str, str] = field(default_factory=dict)
    synced: bool = True  # False until every resource was read once
    stale_since: float | None = None  # reads failing since (epoch s): the objects are the last ones read
    stale_error: str | None = None  # why, one line
    all_namespaces: bool = False  # read across every namespace (``namespaces``: those its objects are in)

    @property
    def stale(self) -> bool:
        return self.stale_since is not None

    def pods_of(self, w: WorkloadView) -> list[PodView]:
        return [p for p in self.pods if p.namespace == w.namespace and p.owner_kind == w.kind
                and p.owner_name == w.name]

    def workload_of(self, pod: PodView) -> WorkloadView | None:
        return next((w for w in self.workloads if w.namespace == pod.namespace and w.kind == pod.owner_kind
                     and w.name == pod.owner_name), None)

    def hpa_for(self, w: WorkloadView) -> HpaView | None:
        return next((h for h in self.hpas if h.namespace == w.namespace and h.target_kind == w.kind
                     and h.target_name == w.name), None)

    def workload_for_hpa(self, h: HpaView) -> WorkloadView | None:
        return next((w for w in self.workloads if w.namespace == h.namespace and w.kind == h.target_kind
                     and w.name == h.target_name), None)

    def events_for(self, kind: str, name: str, namespace: str | None = None) -> list[EventView]:
        """Events of one object, warnings first, newest first."""
        out = [e for e in self.events if e.kind == kind and e.name == name
               and (namespace is None or kind == "Node" or e.namespace == namespace)]
        return sort_events(out)

    @property
    def warnings(self) -> list[EventView]:
        return [e for e in self.events if e.warning]

    def to_dict(self) -> dict:
        """Plain data for ``infertop snapshot --json``."""
        def workload(w: WorkloadView) -> dict:
            d = asdict(w)
            d["conditions"] = [asdict(c) for c in w.conditions]
            d["args"] = list(w.args)
            return d

        def hpa(h: HpaView) -> dict:
            d = asdict(h)
            d["why_not_scaling"] = h.why_not_scaling
            return d

        def pod(p: PodView) -> dict:
            d = asdict(p)
            d["engine_url"] = p.engine_url
            d["problem"] = p.problem
            d["args"] = list(p.args)
            return d

        def node(n: NodeView) -> dict:
            d = asdict(n)
            d["problems"] = list(n.problems)
            return d

        return {
            "context": self.context,
            "user": self.user,
            "server": self.server,
            "namespaces": list(self.namespaces),
            "taken_at": self.taken_at,
            "workloads": [workload(w) for w in self.workloads],
            "hpas": [hpa(h) for h in self.hpas],
            "pods": [pod(p) for p in self.pods],
            "nodes": [node(n) for n in self.nodes],
            "events": [asdict(e) for e in sort_events(list(self.events))[:50]],
            "scaled_objects": [asdict(o) for o in self.scaled_objects],
            "variant_autoscalers": [asdict(o) for o in self.variant_autoscalers],
            "errors": list(self.errors),
            "absent": dict(self.absent),
            "stale_since": self.stale_since,
            "stale_error": self.stale_error,
        }


def short_unschedulable(message: str) -> str:
    """The scheduler's reasons without the preamble: "0/2 nodes are available: 2 Insufficient
    nvidia.com/gpu. preemption: …" → "2 Insufficient nvidia.com/gpu"."""
    text = message.split(" preemption:", 1)[0].strip().rstrip(".")
    if "nodes are available:" in text:
        text = text.split("nodes are available:", 1)[1].strip()
    return text or message


def sort_events(events: list[EventView]) -> list[EventView]:
    """Warnings first, then the most recent first."""
    return sorted(events, key=lambda e: (not e.warning, -(e.last_seen_ts or 0.0)))


@dataclass(frozen=True)
class PodLoad:
    """vLLM's in-flight requests on one pod, read from its /metrics."""

    running: float | None = None
    waiting: float | None = None
    error: str | None = None

    @property
    def in_flight(self) -> float | None:
        if self.running is None and self.waiting is None:
            return None
        return (self.running or 0.0) + (self.waiting or 0.0)


def load_of(running: float | None, waiting: float | None) -> PodLoad:
    """A pod's load from its engine's running and waiting; neither known is an error that says so."""
    if running is None and waiting is None:
        return PodLoad(error="no vllm:num_requests_* at /metrics")
    return PodLoad(running, waiting)
