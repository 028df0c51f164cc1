"""A Kubernetes API emulator over real HTTP, for infertop's tests and ``infertop sim --kube-port``.

No API server can be installed where the tests run, so tests start a
:class:`KubeEmulator` on 127.0.0.1, write a kubeconfig pointing at it and
drive it with the real ``kubernetes`` client (no patched client, no
monkeypatching). Standard library only.

What it serves (see ``resources.py``): core/v1 pods (+status, eviction),
nodes, events, configmaps, services, namespaces; apps/v1 deployments,
statefulsets, replicasets (+status, scale); autoscaling/v2
horizontalpodautoscalers; policy/v1 poddisruptionbudgets;
authorization.k8s.io/v1 selfsubjectaccessreviews; optional custom resources
served only once installed (``KubeEmulator(custom_resources=…)`` /
:meth:`KubeEmulator.install`): KEDA keda.sh/v1alpha1 scaledobjects and llm-d
llmd.ai/v1alpha1 variantautoscalings (+status; ``add_scaled_object`` also
makes the HPA KEDA would own); discovery (``/version``,
``/api``, ``/apis``, ``/api/v1``, ``/apis/<group>[/<version>]``, with or
without trailing slash).

API semantics (the verbs in ``api.py``, ``subresources.py`` and ``events.py``; admission in
``typecheck.py``, ``defaults.py`` and ``validation.py``): a cluster-wide resourceVersion counter; 409 on a stale
resourceVersion (PUT body, or ``metadata.resourceVersion`` in a patch);
strategic-merge / merge / JSON patch by Content-Type; ``dryRun=All``;
label and field selectors; ``limit``/``continue``; watches (chunked
newline-delimited JSON, resume from a resourceVersion, 410 Gone when it
is older than the history, 504 "Too large resource version" when it is
newer than the server's, ``timeoutSeconds``, bookmarks,
``sendInitialEvents``); :meth:`KubeEmulator.restart` (same port, optionally
with the resourceVersion counter reset, as a restored server); Status
errors (400, 401, 403, 404, 405, 409, 410, 415, 422, 429, 504) shaped like the real API's; no-op updates write nothing;
the status subresource split; graceful pod deletion.

Controllers (``controllers.py`` runs a pass over ``deployments.py``, ``replicasets.py``,
``statefulsets.py``, ``scheduler.py``, ``kubelet.py`` and its own small ones): Deployments -> ReplicaSets -> Pods with
rolling updates (maxSurge/maxUnavailable, Recreate, revisions, rollback
by template), StatefulSets (ordinals, OrderedReady/Parallel, rolling
update with partition), a scheduler (round-robin, cordons, taints,
nodeSelector, ``nvidia.com/gpu``), a kubelet (IPs, container states,
readiness delay, ImagePullBackOff / CrashLoopBackOff failure modes,
termination), the disruption controller (PDB status), garbage collection,
namespace termination, HPA status bookkeeping; Events for all of them; an HPA
controller (``set_hpa_metrics``: tolerance, stabilisation windows, min/max,
FailedGetPodsMetric, SuccessfulRescale; see ``hpa.py``) fed by a metrics source.

Not emulated: server-side apply field ownership (an apply patch is a
strategic merge, or a create), protobuf and Table output, aggregated
discovery, admission webhooks, quotas/LimitRanges, CPU/memory scheduling,
affinity other than nodeSelector, Endpoints/EndpointSlices, ControllerRevisions,
a metrics API (an HPA's status is set by tests, or computed from ``set_hpa_metrics``'s source), TLS.
"""

from .http_server import Request
from .server import KubeEmulator

__all__ = ["KubeEmulator", "Request"]
