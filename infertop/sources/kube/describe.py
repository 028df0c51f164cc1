"""One Kubernetes object as text, in ``kubectl describe``'s spirit, and as read-only YAML.

Pure: API objects (JSON dicts) in, lines out. A section title is a line without indent;
its fields are indented. ``describe`` covers pods (conditions, container states with the
last termination's reason and exit code, restarts, resources and QoS, node, owner chain),
workloads, nodes (capacity, allocatable and what the pods request) and HPAs, then the
object's recent events. Never imports textual or rich.
"""

from __future__ import annotations

import time
from typing import Any

import yaml

from ...domain.quantity import parse_quantity
from .view import GPU, parse_time, pod_is_live, pod_owner, pod_requests, selector_text

__all__ = ["describe", "node_requests", "pod_requests", "qos_class", "to_yaml", "event_lines",
           "cpu_text", "memory_text"]

RESOURCES = ("cpu", "memory", GPU)


def _age(ts: Any, now: float) -> str:
    t = parse_time(ts)
    if t is None:
        return "?"
    s = max(0.0, now - t)
    if s < 120:
        return f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.0f}m"
    return f"{s / 3600:.0f}h" if s < 172800 else f"{s / 86400:.0f}d"


def cpu_text(cores: float | None) -> str:
    if cores is None:
        return "—"
    if cores == 0:
        return "0"
    return f"{cores:g}" if cores >= 1 and float(cores).is_integer() else f"{cores * 1000:.0f}m"


def memory_text(n: float | None) -> str:
    if n is None:
        return "—"
    for unit, size in (("Ti", 2 ** 40), ("Gi", 2 ** 30), ("Mi", 2 ** 20), ("Ki", 2 ** 10)):
        if n >= size:
            v = n / size
            return f"{v:.0f}{unit}" if v >= 10 or v.is_integer() else f"{v:.1f}{unit}"
    return f"{n:.0f}"


def quantity_text(resource: str, value: float | None) -> str:
    return cpu_text(value) if resource == "cpu" else memory_text(value) if resource == "memory" else (
        "—" if value is None else f"{value:g}")


def _resources(c: dict) -> tuple[dict, dict]:
    res = c.get("resources") or {}
    limits = {k: parse_quantity(v) for k, v in (res.get("limits") or {}).items()}
    requests = {k: parse_quantity(v) for k, v in (res.get("requests") or {}).items()}
    for k, v in limits.items():  # a limit without a request requests as much (the API server's default)
        requests.setdefault(k, v)
    return requests, limits


def qos_class(pod: dict) -> str:
    """status.qosClass, or the rule behind it: Guaranteed (every container's cpu and memory limited at its
    request), BestEffort (nothing requested or limited), else Burstable."""
    given = (pod.get("status") or {}).get("qosClass")
    if given:
        return str(given)
    containers = (pod.get("spec") or {}).get("containers") or []
    pairs = [_resources(c) for c in containers]
    if not any(r or lim for r, lim in pairs):
        return "BestEffort"
    if containers and all(all(lim.get(k) is not None and r.get(k) == lim.get(k) for k in ("cpu", "memory"))
                          for r, lim in pairs):
        return "Guaranteed"
    return "Burstable"


_live = pod_is_live


def node_requests(node_name: str, pods: list[dict]) -> dict[str, float]:
    """What the live pods bound to ``node_name`` request, per resource (kubectl's "Allocated resources")."""
    total: dict[str, float] = {}
    for p in pods:
        if (p.get("spec") or {}).get("nodeName") == node_name and _live(p):
            for k, v in pod_requests(p).items():
                total[k] = total.get(k, 0.0) + v
    return total


def _kv(d: Any, limit: int = 12) -> list[str]:
    items = sorted((d or {}).items())
    out = [f"{k}={v}" for k, v in items[:limit]]
    if len(items) > limit:
        out.append(f"… and {len(items) - limit} more")
    return out or ["<none>"]


def _conditions(conds: Any, now: float) -> list[str]:
    out = []
    for c in conds or []:
        if isinstance(c, dict):
            tail = " ".join(x for x in (c.get("reason") or "", c.get("message") or "") if x)
            since = c.get("lastTransitionTime")
            out.append(f"  {c.get('type')}={c.get('status')}{'  ' + tail if tail else ''}"
                       f"{f'  ({_age(since, now)} ago)' if since else ''}")
    return out or ["  <none>"]


def _header(obj: dict, now: float) -> list[str]:
    meta = obj.get("metadata") or {}
    lines = [f"Name:         {meta.get('name')}"]
    if meta.get("namespace"):
        lines.append(f"Namespace:    {meta.get('namespace')}")
    lines.append(f"Created:      {meta.get('creationTimestamp') or '?'} ({_age(meta.get('creationTimestamp'), now)} ago)")
    lines.append("Labels:       " + ", ".join(_kv(meta.get("labels"))))
    notes = {k: (v if len(str(v)) <= 80 else str(v)[:79] + "…") for k, v in (meta.get("annotations") or {}).items()
             if k != "kubectl.kubernetes.io/last-applied-configuration"}
    lines.append("Annotations:  " + ", ".join(_kv(notes, 6)))
    if meta.get("deletionTimestamp"):
        lines.append(f"Terminating:  since {meta['deletionTimestamp']}")
    return lines


def owner_chain(obj: dict) -> str:
    """"ReplicaSet vllm-6d4f → Deployment vllm" (a ReplicaSet's Deployment by its name and pod-template-hash)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if not ref:
        return "<none> (a bare object: nothing recreates it)"
    chain = f"{ref.get('kind')} {ref.get('name')}"
    if ref.get("kind") == "ReplicaSet":
        kind, name = pod_owner(obj)
        if kind == "Deployment":
            chain += f" → Deployment {name}"
    return chain


def _state(state: Any, now: float) -> str:
    state = state or {}
    if "running" in state:
        at = (state["running"] or {}).get("startedAt")
        return f"Running since {at} ({_age(at, now)})"
    if "waiting" in state:
        w = state["waiting"] or {}
        return f"Waiting: {w.get('reason') or '?'}" + (f" — {w['message']}" if w.get("message") else "")
    if "terminated" in state:
        t = state["terminated"] or {}
        return (f"Terminated: {t.get('reason') or '?'}, exit code {t.get('exitCode')}"
                f" (started {t.get('startedAt') or '?'}, finished {t.get('finishedAt') or '?'})"
                + (f" — {t['message']}" if t.get("message") else ""))
    return "<unknown>"


def _container_spec(c: dict) -> list[str]:
    lines = [f"  {c.get('name')}:", f"    Image:         {c.get('image')}"]
    argv = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
    if argv:
        lines.append(f"    Command/args:  {' '.join(argv)}")
    ports = [f"{p.get('containerPort')}/{p.get('protocol') or 'TCP'}" for p in c.get("ports") or []]
    if ports:
        lines.append(f"    Ports:         {', '.join(ports)}")
    requests, limits = _resources(c)
    if requests or limits:
        lines.append("    Requests:      " + (", ".join(f"{k} {quantity_text(k, v)}" for k, v in sorted(requests.items()))
                                            or "<none>"))
        lines.append("    Limits:        " + (", ".join(f"{k} {quantity_text(k, v)}" for k, v in sorted(limits.items()))
                                            or "<none>"))
    return lines


def _pod(pod: dict, now: float) -> list[str]:
    spec, st = pod.get("spec") or {}, pod.get("status") or {}
    lines = [f"Node:         {spec.get('nodeName') or '<none> (not scheduled)'}",
             f"IP:           {st.get('podIP') or '<none>'}",
             f"Status:       {st.get('phase') or '?'}",
             f"QoS class:    {qos_class(pod)}",
             f"Controlled by: {owner_chain(pod)}",
             "Conditions:", *_conditions(st.get("conditions"), now), "Containers:"]
    statuses = {cs.get("name"): cs for cs in st.get("containerStatuses") or [] if isinstance(cs, dict)}
    for c in spec.get("containers") or []:
        lines.extend(_container_spec(c))
        cs = statuses.get(c.get("name")) or {}
        lines.append(f"    State:         {_state(cs.get('state'), now)}")
        if cs.get("lastState"):
            lines.append(f"    Last state:    {_state(cs.get('lastState'), now)}")
        lines.append(f"    Ready:         {cs.get('ready', False)}")
        lines.append(f"    Restarts:      {cs.get('restartCount', 0)}")
    total = pod_requests(pod)
    if total:
        lines.append("Pod requests: " + ", ".join(f"{k} {quantity_text(k, v)}" for k, v in sorted(total.items())))
    return lines


def _workload(obj: dict, kind: str, now: float) -> list[str]:
    spec, st = obj.get("spec") or {}, obj.get("status") or {}
    lines = [f"Selector:     {selector_text(spec.get('selector')) or '<none>'}",
             f"Replicas:     {spec.get('replicas', 1)} desired | {st.get('updatedReplicas', 0)} updated | "
             f"{st.get('replicas', 0)} total | {st.get('readyReplicas', 0)} ready | "
             f"{st.get('availableReplicas', 0)} available"]
    strategy = spec.get("strategy") or spec.get("updateStrategy") or {}
    if strategy:
        ru = strategy.get("rollingUpdate") or {}
        extra = ", ".join(f"{k} {v}" for k, v in ru.items())
        lines.append(f"Strategy:     {strategy.get('type') or 'RollingUpdate'}{' (' + extra + ')' if extra else ''}")
    if spec.get("paused"):
        lines.append("Paused:       true")
    if kind == "ReplicaSet" or (obj.get("metadata") or {}).get("ownerReferences"):
        lines.append(f"Controlled by: {owner_chain(obj)}")
    lines.append(f"Generation:   {(obj.get('metadata') or {}).get('generation')} "
                 f"(observed {st.get('observedGeneration')})")
    lines += ["Conditions:", *_conditions(st.get("conditions"), now), "Pod template:"]
    for c in ((spec.get("template") or {}).get("spec") or {}).get("containers") or []:
        lines.extend(_container_spec(c))
    return lines


def _node(node: dict, pods: list[dict], now: float) -> list[str]:
    spec, st = node.get("spec") or {}, node.get("status") or {}
    cap, alloc = st.get("capacity") or {}, st.get("allocatable") or {}
    used = node_requests((node.get("metadata") or {}).get("name") or "", pods)
    lines = [f"Unschedulable: {bool(spec.get('unschedulable'))}",
             "Taints:       " + (", ".join(f"{t.get('key')}{'=' + str(t['value']) if t.get('value') else ''}:"
                                           f"{t.get('effect')}" for t in spec.get("taints") or []) or "<none>"),
             "Conditions:", *_conditions(st.get("conditions"), now),
             "Resources:    capacity / allocatable / requested by pods"]
    for r in (*RESOURCES, "pods"):
        if r not in cap and r not in alloc:
            continue
        a = parse_quantity(alloc.get(r))
        if r == "pods":
            req = float(sum(1 for p in pods if (p.get("spec") or {}).get("nodeName") == node["metadata"]["name"]
                            and _live(p)))
        else:
            req = used.get(r, 0.0)
        pct = f" ({100 * req / a:.0f}%)" if a else ""
        lines.append(f"  {r:<15} {quantity_text(r, parse_quantity(cap.get(r)))} / {quantity_text(r, a)} / "
                     f"{quantity_text(r, req)}{pct}")
    mine = [p for p in pods if (p.get("spec") or {}).get("nodeName") == node["metadata"]["name"] and _live(p)]
    lines.append(f"Pods:         {len(mine)}")
    for p in mine[:50]:
        asks = pod_requests(p)
        lines.append(f"  {p['metadata'].get('namespace')}/{p['metadata'].get('name')}  "
                     + ", ".join(f"{k} {quantity_text(k, v)}" for k, v in sorted(asks.items())))
    return lines


def _hpa(hpa: dict, now: float) -> list[str]:
    spec, st = hpa.get("spec") or {}, hpa.get("status") or {}
    ref = spec.get("scaleTargetRef") or {}
    lines = [f"Target:       {ref.get('kind')}/{ref.get('name')}",
             f"Replicas:     min {spec.get('minReplicas', 1)}, max {spec.get('maxReplicas')}, current "
             f"{st.get('currentReplicas')}, desired {st.get('desiredReplicas')}",
             f"Last scale:   {st.get('lastScaleTime') or '<never>'}", "Metrics:      (current / target)"]
    current = st.get("currentMetrics") or []
    for i, m in enumerate(spec.get("metrics") or []):
        t = m.get("type") or "?"
        body = m.get({"Pods": "pods", "Resource": "resource", "Object": "object", "External": "external",
                      "ContainerResource": "containerResource"}.get(t, ""), {}) or {}
        name = body.get("name") or (body.get("metric") or {}).get("name") or "?"
        cur = next((c for c in current if c.get("type") == t and (
            (c.get(t[0].lower() + t[1:]) or {}).get("name") or ((c.get(t[0].lower() + t[1:]) or {}).get("metric")
                                                                 or {}).get("name")) == name), None)
        cbody = (cur or {}).get(t[0].lower() + t[1:]) or {}
        lines.append(f"  {t} {name}: {_val(cbody.get('current'))} / {_val(body.get('target'))}")
    behavior = spec.get("behavior") or {}
    for direction in ("scaleUp", "scaleDown"):
        b = behavior.get(direction)
        if b:
            lines.append(f"Behavior {direction}: window {b.get('stabilizationWindowSeconds', '?')} s, "
                         + ", ".join(f"{p.get('type')} {p.get('value')}/{p.get('periodSeconds')} s"
                                     for p in b.get("policies") or []))
    lines += ["Conditions:", *_conditions(st.get("conditions"), now)]
    return lines


def _val(v: Any) -> str:
    if not v:
        return "?"
    if v.get("averageUtilization") is not None:
        return f"{v['averageUtilization']}%"
    return str(v.get("averageValue") or v.get("value") or "?")


def _service(svc: dict) -> list[str]:
    spec = svc.get("spec") or {}
    return [f"Type:         {spec.get('type') or 'ClusterIP'}", f"Cluster IP:   {spec.get('clusterIP') or '<none>'}",
            "Selector:     " + (", ".join(_kv(spec.get("selector"))) if spec.get("selector") else "<none>"),
            "Ports:        " + (", ".join(f"{p.get('port')}→{p.get('targetPort', p.get('port'))}/"
                                          f"{p.get('protocol') or 'TCP'}" for p in spec.get("ports") or []) or "<none>")]


def _configmap(cm: dict) -> list[str]:
    data = cm.get("data") or {}
    lines = [f"Data:         {len(data)} key(s)"]
    for k, v in sorted(data.items()):
        text = str(v)
        lines.append(f"  {k}: {len(text.encode())} bytes" + (f" — {text}" if len(text) <= 60 and "\n" not in text
                                                               else ""))
    return lines


def event_lines(events: list[dict], now: float, limit: int = 30) -> list[str]:
    """Events as kubectl describe's table, the newest last (at most ``limit``)."""
    def when(e: dict) -> float:
        return parse_time(e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp")
                          or (e.get("metadata") or {}).get("creationTimestamp")) or 0.0
    rows = sorted(events, key=when)[-limit:]
    if not rows:
        return ["  <none>"]
    out = []
    for e in rows:
        last = e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp")
        count = e.get("count") or (e.get("series") or {}).get("count") or 1
        src = (e.get("source") or {}).get("component") or e.get("reportingComponent") or "?"
        msg = " ".join(str(e.get("message") or e.get("note") or "").split())
        out.append(f"  {e.get('type') or 'Normal':<8} {e.get('reason') or '?':<22} {_age(last, now):>4} "
                   f"{'x' + str(count) if count > 1 else '':>4} {src:<20} {msg}")
    return out


def describe(kind: str, obj: dict, events: list[dict] | None = None, *, pods: list[dict] | None = None,
             now: float | None = None) -> list[str]:
    """``kubectl describe`` of one object as lines (``pods``: for a node, those bound to it)."""
    now = time.time() if now is None else now
    lines = [f"{kind}", *_header(obj, now)]
    if kind == "Pod":
        lines += _pod(obj, now)
    elif kind in ("Deployment", "StatefulSet", "ReplicaSet"):
        lines += _workload(obj, kind, now)
    elif kind == "Node":
        lines += _node(obj, pods or [], now)
    elif kind == "HorizontalPodAutoscaler":
        lines += _hpa(obj, now)
    elif kind == "Service":
        lines += _service(obj)
    elif kind == "ConfigMap":
        lines += _configmap(obj)
    if events is not None:
        lines += ["Events:", *event_lines(events, now)]
    return lines


def to_yaml(obj: dict) -> str:
    """The object as YAML, read-only: managedFields folded to one line (they are most of a real object)."""
    shown = dict(obj)
    meta = dict(shown.get("metadata") or {})
    managed = meta.get("managedFields")
    if managed:
        managers = sorted({str(m.get("manager") or "?") for m in managed if isinstance(m, dict)})
        meta["managedFields"] = f"<{len(managed)} entries folded: {', '.join(managers)}>"
    if meta:
        shown["metadata"] = meta
    return yaml.safe_dump(shown, sort_keys=False, default_flow_style=False, allow_unicode=True, width=120)
