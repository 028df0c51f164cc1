"""The resource types the emulator serves, and the discovery documents.

Each :class:`ResourceType` is one REST collection (``pods``,
``deployments`` ...). Its ``key`` (group, plural) names it inside the
store. Discovery answers (``/api``, ``/apis``, ``/api/v1``,
``/apis/apps/v1`` ...) are generated from this table, so what discovery
advertises is exactly what the router serves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
RO_SUB_VERBS = ("get", "patch", "update")


@dataclass(frozen=True)
class Subresource:
    name: str
    kind: str
    verbs: tuple[str, ...]
    group: str | None = None  # for discovery when the kind lives elsewhere
    version: str | None = None


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    subresources: tuple[Subresource, ...] = ()
    categories: tuple[str, ...] = ()
    # fields a fieldSelector may use besides metadata.name/metadata.namespace
    field_labels: tuple[str, ...] = ()
    # kinds with a /status subresource: writes to the main resource keep
    # the stored status, writes to /status keep everything but the status
    has_status: bool = False
    # metadata.generation is bumped when the spec changes
    tracks_generation: bool = False
    # a custom resource: served (and discovered) only once installed (KubeEmulator.install)
    optional: bool = False
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """``deployments.apps`` / ``pods``: how the real API names it in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def subresource(self, name: str) -> Subresource | None:
        for sub in self.subresources:
            if sub.name == name:
                return sub
        return None


def _status(kind: str) -> Subresource:
    return Subresource("status", kind, RO_SUB_VERBS)


def _scale() -> Subresource:
    return Subresource("scale", "Scale", RO_SUB_VERBS, group="autoscaling", version="v1")


RESOURCE_TYPES: tuple[ResourceType, ...] = (
    ResourceType(
        "", "v1", "namespaces", "Namespace", False, "namespace", ("ns",),
        verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
        subresources=(_status("Namespace"),),
        field_labels=("status.phase",), has_status=True,
    ),
    ResourceType(
        "", "v1", "nodes", "Node", False, "node", ("no",),
        subresources=(_status("Node"),), field_labels=("spec.unschedulable",),
        has_status=True,
    ),
    ResourceType(
        "", "v1", "pods", "Pod", True, "pod", ("po",), categories=("all",),
        subresources=(
            _status("Pod"),
            Subresource("eviction", "Eviction", ("create",), group="policy", version="v1"),
            Subresource("log", "Pod", ("get",)),
        ),
        field_labels=(
            "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
            "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
            "status.podIP", "status.nominatedNodeName",
        ),
        has_status=True,
    ),
    ResourceType(
        "", "v1", "events", "Event", True, "event", ("ev",),
        field_labels=(
            "involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
            "involvedObject.uid", "involvedObject.apiVersion",
            "involvedObject.resourceVersion", "involvedObject.fieldPath",
            "reason", "reportingComponent", "source", "type",
        ),
    ),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, "configmap", ("cm",)),
    ResourceType(
        "", "v1", "services", "Service", True, "service", ("svc",), categories=("all",),
        verbs=("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"),
        subresources=(_status("Service"),), has_status=True,
    ),
    ResourceType(
        "apps", "v1", "deployments", "Deployment", True, "deployment", ("deploy",),
        categories=("all",), subresources=(_status("Deployment"), _scale()),
        has_status=True, tracks_generation=True,
    ),
    ResourceType(
        "apps", "v1", "statefulsets", "StatefulSet", True, "statefulset", ("sts",),
        categories=("all",), subresources=(_status("StatefulSet"), _scale()),
        has_status=True, tracks_generation=True,
    ),
    ResourceType(
        "apps", "v1", "replicasets", "ReplicaSet", True, "replicaset", ("rs",),
        categories=("all",), subresources=(_status("ReplicaSet"), _scale()),
        has_status=True, tracks_generation=True,
    ),
    ResourceType(
        "autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", True,
        "horizontalpodautoscaler", ("hpa",), categories=("all",),
        subresources=(_status("HorizontalPodAutoscaler"),),
        has_status=True, tracks_generation=True,
    ),
    ResourceType(  # kept by the emulator's EndpointSlice controller (one slice per Service with a selector)
        "discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True, "endpointslice",
        field_labels=("addressType",),
    ),
    ResourceType(
        "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True,
        "poddisruptionbudget", ("pdb",), subresources=(_status("PodDisruptionBudget"),),
        has_status=True, tracks_generation=True,
    ),
    ResourceType(
        "authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview",
        False, "selfsubjectaccessreview", verbs=("create",),
    ),
    # optional custom resources (KubeEmulator(custom_resources=…) / install())
    ResourceType(
        "keda.sh", "v1alpha1", "scaledobjects", "ScaledObject", True, "scaledobject", ("so",),
        subresources=(_status("ScaledObject"),), has_status=True, tracks_generation=True, optional=True,
    ),
    ResourceType(
        "llmd.ai", "v1alpha1", "variantautoscalings", "VariantAutoscaling", True, "variantautoscaling", ("va",),
        subresources=(_status("VariantAutoscaling"),), has_status=True, tracks_generation=True, optional=True,
    ),
    ResourceType(  # Gateway API Inference Extension: the model servers behind one endpoint picker
        "inference.networking.k8s.io", "v1", "inferencepools", "InferencePool", True, "inferencepool",
        subresources=(_status("InferencePool"),), has_status=True, tracks_generation=True, optional=True,
    ),
    ResourceType(  # Gateway API Inference Extension: a request's priority band (spec.priority)
        "inference.networking.x-k8s.io", "v1alpha2", "inferenceobjectives", "InferenceObjective", True,
        "inferenceobjective", tracks_generation=True, optional=True,
    ),
)

BY_PATH: dict[tuple[str, str, str], ResourceType] = {
    (rt.group, rt.version, rt.plural): rt for rt in RESOURCE_TYPES
}
BY_KEY: dict[tuple[str, str], ResourceType] = {rt.key: rt for rt in RESOURCE_TYPES}
BY_KIND: dict[str, ResourceType] = {rt.kind: rt for rt in RESOURCE_TYPES}
BY_PLURAL: dict[str, ResourceType] = {rt.plural: rt for rt in RESOURCE_TYPES}

# Group versions served, in the order /apis lists them.
GROUP_VERSIONS: dict[str, list[str]] = {}
for _rt in RESOURCE_TYPES:
    GROUP_VERSIONS.setdefault(_rt.group, [])
    if _rt.version not in GROUP_VERSIONS[_rt.group]:
        GROUP_VERSIONS[_rt.group].append(_rt.version)


def resource_type(plural_or_kind: str, group: str | None = None) -> ResourceType:
    """Look a type up by plural (``pods``), kind (``Pod``) or short name (``po``)."""
    for rt in RESOURCE_TYPES:
        if group is not None and rt.group != group:
            continue
        if plural_or_kind in (rt.plural, rt.kind, rt.singular) or plural_or_kind in rt.short_names:
            return rt
    raise KeyError(plural_or_kind)


def version_info() -> dict:
    return {
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.1-infertop-emulator",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-05-15T00:00:00Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> dict:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def withheld_key(rt: ResourceType) -> tuple[str, str]:
    """The mark in ``installed`` of a built-in type the server does not serve (``uninstall``)."""
    return ("!" + rt.group, rt.plural)


def served(rt: ResourceType, installed: frozenset | set | None = None) -> bool:
    """Built-in types unless withheld; an optional (custom) type only once installed."""
    if not rt.optional:
        return installed is None or withheld_key(rt) not in installed
    return installed is not None and rt.key in installed


def _versions(group: str, installed) -> list[str]:
    return [v for v in GROUP_VERSIONS.get(group, [])
            if any(served(rt, installed) for rt in RESOURCE_TYPES if rt.group == group and rt.version == v)]


def _group_doc(group: str, installed=None) -> dict:
    versions = [
        {"groupVersion": f"{group}/{v}", "version": v} for v in _versions(group, installed)
    ]
    return {"name": group, "versions": versions, "preferredVersion": versions[0]}


def api_group_list(installed=None) -> dict:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group_doc(g, installed) for g in GROUP_VERSIONS if g and _versions(g, installed)],
    }


def api_group(group: str, installed=None) -> dict | None:
    if not group or not _versions(group, installed):
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(group, installed)}


def api_resource_list(group: str, version: str, installed=None) -> dict | None:
    resources = []
    for rt in RESOURCE_TYPES:
        if rt.group != group or rt.version != version or not served(rt, installed):
            continue
        entry = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": list(rt.verbs),
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        resources.append(entry)
        for sub in rt.subresources:
            sub_entry = {
                "name": f"{rt.plural}/{sub.name}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": sub.kind or rt.kind,
                "verbs": list(sub.verbs),
            }
            if sub.group is not None:
                sub_entry["group"] = sub.group
                sub_entry["version"] = sub.version
            resources.append(sub_entry)
    if not resources:
        return None
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}
