"""Kubernetes reads for autoscalers beyond the HPA: KEDA ScaledObjects and llm-d VariantAutoscalings.

Both are custom resources, read through the custom-objects API of the official
client (:class:`~infertop.sources.kube.session.KubeSession` knows their list
functions, so the informers and the one-shot read treat them like any other
kind). Whether a type exists is asked once, by discovery
(``GET /apis/<group>/<version>``): a 404 means "not installed here", which is
not an error; a 403 is shown as such. :func:`scaled_object_view` and
:func:`variant_view` turn the objects into the domain view (pure), and
:func:`read_wva_desired` reads the variant autoscaler's ``wva_desired_replicas``
from a metrics URL or a Prometheus server, when one is configured.

Blocking, like the official client. This module never imports textual or rich.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import httpx

from ...domain.kube import (
    HpaBehaviorView,
    KubeCondition,
    ScaledObjectView,
    ScalingPolicyView,
    ScalingRulesView,
    TriggerView,
    VariantAutoscalerView,
)
from ..http_client import HttpError, blocking_get
from .session import CUSTOM_KINDS, KubeError, KubeSession

WVA_MAX_BYTES = 8 * 1024 * 1024  # a /metrics document or a Prometheus answer: one series per variant

__all__ = [
    "CUSTOM_KINDS",
    "KEDA_PAUSED",
    "KEDA_PAUSED_REPLICAS",
    "Discovery",
    "behavior_view",
    "discover_custom_kinds",
    "read_wva_desired",
    "scaled_object_view",
    "variant_view",
    "wva_desired_from_text",
]

KEDA_PAUSED = "autoscaling.keda.sh/paused"
KEDA_PAUSED_REPLICAS = "autoscaling.keda.sh/paused-replicas"
# trigger metadata worth showing; anything else (auth, headers) may hold secrets
_TRIGGER_KEYS = ("query", "threshold", "activationThreshold", "serverAddress", "metricName", "targetValue", "value",
                 "namespace", "metricType")


class Discovery:
    """Which custom kinds the API server serves: ``present``, and what could not be asked (``errors``)."""

    def __init__(self, present: Iterable[str] = (), errors: Iterable[str] = ()) -> None:
        self.present = tuple(present)
        self.errors = tuple(errors)

    def __repr__(self) -> str:
        return f"Discovery(present={self.present!r}, errors={self.errors!r})"


def discover_custom_kinds(session: KubeSession, kinds: Iterable[str] = tuple(CUSTOM_KINDS)) -> Discovery:
    """One discovery GET per group/version. 404: absent (not an error); 403: an error line;
    no answer at all raises KubeError (status 0), so the caller can try again later."""
    present, errors = [], []
    asked: dict[tuple[str, str], dict | KubeError] = {}
    for kind in kinds:
        group, version, plural = CUSTOM_KINDS[kind]
        if (group, version) not in asked:
            try:
                asked[(group, version)] = session.raw(session.custom.get_api_resources, group, version)
            except KubeError as e:
                if e.status == 0:
                    raise
                asked[(group, version)] = e
        doc = asked[(group, version)]
        if isinstance(doc, KubeError):
            if doc.status != 404:
                errors.append(f"{kind}: {doc}")
            continue
        names = {str(r.get("name")) for r in doc.get("resources") or [] if isinstance(r, dict)}
        if plural in names:
            present.append(kind)
    return Discovery(present, errors)


# ----------------------------------------------------------------- views (pure)

def _int(v: Any) -> int | None:
    try:
        return int(v) if v is not None and not isinstance(v, bool) else None
    except (TypeError, ValueError):
        return None


def _conditions(raw: Any) -> tuple[KubeCondition, ...]:
    out = []
    for c in raw or []:
        if isinstance(c, dict) and c.get("type"):
            out.append(KubeCondition(str(c["type"]), str(c.get("status") or "Unknown"), str(c.get("reason") or ""),
                                     str(c.get("message") or ""), c.get("lastTransitionTime")))
    return tuple(out)


def _rules(raw: Any) -> ScalingRulesView | None:
    if not isinstance(raw, dict):
        return None
    policies = tuple(ScalingPolicyView(str(p.get("type") or ""), _int(p.get("value")) or 0,
                                       _int(p.get("periodSeconds")) or 0)
                     for p in raw.get("policies") or [] if isinstance(p, dict))
    tol = raw.get("tolerance")
    tolerance = None
    if tol is not None:
        from ...domain.quantity import parse_quantity

        tolerance = parse_quantity(tol)
    return ScalingRulesView(_int(raw.get("stabilizationWindowSeconds")),
                            str(raw["selectPolicy"]) if raw.get("selectPolicy") else None, policies, tolerance)


def behavior_view(raw: Any) -> HpaBehaviorView | None:
    """An HPA's ``spec.behavior`` (None when it has none)."""
    if not isinstance(raw, dict) or not raw:
        return None
    return HpaBehaviorView(_rules(raw.get("scaleUp")), _rules(raw.get("scaleDown")))


def _no_userinfo(value: str) -> str:
    """``http://user:secret@prometheus:9090`` → ``http://prometheus:9090``: a password is never shown."""
    return re.sub(r"(?<=://)[^/@\s]*@", "", value)


def scaled_object_view(obj: dict) -> ScaledObjectView:
    meta, spec, st = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    ref = spec.get("scaleTargetRef") or {}
    ann = meta.get("annotations") or {}
    health = st.get("health") or {}
    triggers = []
    for i, t in enumerate(spec.get("triggers") or []):
        if not isinstance(t, dict):
            continue
        md = {k: _no_userinfo(str(v)) for k, v in (t.get("metadata") or {}).items() if k in _TRIGGER_KEYS}
        name = str(t.get("name") or "")
        # status.health is keyed by the external metric name: s<i>-<type>[-…]
        h = next((v for k, v in health.items() if isinstance(v, dict) and (k.startswith(f"s{i}-") or (name and name in k))),
                 None)
        triggers.append(TriggerView(type=str(t.get("type") or ""), name=name, metric_type=str(t.get("metricType") or ""),
                                    metadata=md, health=str(h.get("status")) if h and h.get("status") else None,
                                    failures=_int(h.get("numberOfFailures")) if h else None))
    paused_replicas = _int(ann.get(KEDA_PAUSED_REPLICAS))
    paused = str(ann.get(KEDA_PAUSED, "")).lower() == "true" or paused_replicas is not None
    fallback = spec.get("fallback") or {}
    name = str(meta.get("name") or "")
    return ScaledObjectView(
        namespace=str(meta.get("namespace") or ""),
        name=name,
        target_kind=str(ref.get("kind") or "Deployment"),
        target_name=str(ref.get("name") or ""),
        min_replicas=_int(spec.get("minReplicaCount", 0)),
        max_replicas=_int(spec.get("maxReplicaCount", 100)),
        polling_interval_s=_int(spec.get("pollingInterval", 30)),
        cooldown_period_s=_int(spec.get("cooldownPeriod", 300)),
        triggers=tuple(triggers),
        hpa_name=str(st.get("hpaName") or "") or (f"keda-hpa-{name}" if name else None),
        conditions=_conditions(st.get("conditions")),
        paused=paused,
        paused_replicas=paused_replicas,
        fallback_replicas=_int(fallback.get("replicas")),
        fallback_failure_threshold=_int(fallback.get("failureThreshold")),
        last_active_time=st.get("lastActiveTime"),
        external_metric_names=tuple(str(n) for n in st.get("externalMetricNames") or ()),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def variant_view(obj: dict, wva_desired: dict[tuple[str, str], float] | None = None) -> VariantAutoscalerView:
    meta, spec, st = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    ref = spec.get("scaleTargetRef") or {}
    name, ns = str(meta.get("name") or ""), str(meta.get("namespace") or "")
    current = st.get("currentAlloc") or {}
    desired = st.get("desiredOptimizedAlloc") or {}
    return VariantAutoscalerView(
        namespace=ns,
        name=name,
        # older WVA versions had no scaleTargetRef: the variant is the Deployment of the same name
        target_kind=str(ref.get("kind") or "Deployment"),
        target_name=str(ref.get("name") or name),
        model_id=str(spec.get("modelID") or ""),
        min_replicas=_int(spec.get("minReplicas")),
        max_replicas=_int(spec.get("maxReplicas")),
        current_replicas=_int(current.get("numReplicas")),
        desired_replicas=_int(desired.get("numReplicas")),
        accelerator=str(desired.get("accelerator") or current.get("accelerator") or "") or None,
        last_run_time=desired.get("lastRunTime"),
        applied=(st.get("actuation") or {}).get("applied") if isinstance((st.get("actuation") or {}).get("applied"),
                                                                          bool) else None,
        conditions=_conditions(st.get("conditions")),
        metric_desired_replicas=(wva_desired or {}).get((ns, name)),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


# ----------------------------------------------------------------- wva_desired_replicas

_SAMPLE = re.compile(r"^wva_desired_replicas(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _key(labels: dict[str, str]) -> tuple[str, str] | None:
    name = labels.get("variant_name") or labels.get("variant")
    ns = labels.get("exported_namespace") or labels.get("namespace")
    return (ns, name) if name and ns else None


def wva_desired_from_text(text: str) -> dict[tuple[str, str], float]:
    """``wva_desired_replicas`` samples of an exposition document: (namespace, variant) → replicas."""
    out: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(2))
        except ValueError:
            continue
        key = _key(dict(_LABEL.findall(m.group(1) or "")))
        if key is not None:
            out[key] = value
    return out


def read_wva_desired(url: str, timeout_s: float = 2.0) -> dict[tuple[str, str], float]:
    """``wva_desired_replicas`` from a /metrics URL, or from Prometheus when ``url`` is a Prometheus
    server's base URL (it answers ``/api/v1/query``). Raises KubeError with one line on failure."""
    metrics = url.rstrip("/").endswith("/metrics")
    target, params = (url, None) if metrics else (url.rstrip("/") + "/api/v1/query", {"query": "wva_desired_replicas"})
    try:
        status, body = blocking_get(target, WVA_MAX_BYTES, timeout_s=timeout_s, params=params, error_body=False)
        if not 200 <= status < 300:
            raise KubeError(f"wva_desired_replicas from {url}: HTTP {status}")
        if metrics:
            return wva_desired_from_text(body.decode("utf-8", errors="replace"))
        doc = json.loads(body)
    except (httpx.HTTPError, HttpError, ValueError, RecursionError) as e:
        raise KubeError(f"wva_desired_replicas from {url}: {type(e).__name__}: {e}"[:240]) from None
    out: dict[tuple[str, str], float] = {}
    for r in ((doc.get("data") or {}).get("result") or []) if isinstance(doc, dict) else []:
        key = _key(r.get("metric") or {})
        try:
            value = float((r.get("value") or [0, "nan"])[1])
        except (TypeError, ValueError):
            continue
        if key is not None and value == value:
            out[key] = value
    return out
