"""The Cluster pane: Deployments/StatefulSets, Pods, Nodes, HPAs and Events.

One view at a time (``v`` cycles) so that an 80×24 terminal shows enough
rows; a detail area under the table explains the selected row (why a
rollout is stuck, why the autoscaler does not scale, the object's warning
events). Tables repaint only cells whose text changed; ages are computed at
each :meth:`ClusterPane.show` (``clock``), so they move without a watch event.
While the cluster cannot be read the pane is ``-stale``: its tables are dimmed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual import on
from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import ContentSwitcher, DataTable, Input

from ...analysis.autoscaler.explain import explain_workloads
from ...sources.kube.describe import cpu_text, memory_text
from ...text import plain
from ...domain.kube import (ClusterSnapshot, ConfigMapView, EventView, HpaView, InferenceObjectiveView,
                            InferencePoolView, NodeView, PdbView, PodView, ReplicaSetView, ServiceView, WorkloadView)
from ...format import DASH, count_human, age_short
from .cluster_detail import DetailContext, clip, detail_text
from .cluster_filter import RowFilter, keeps, parse_filter, sort_key
from ..fastpaint.lean import LeanLines
from .panels import QuietStatic
from .triage import mark_text

VIEWS: tuple[tuple[str, str], ...] = (
    ("workloads", "Workloads"), ("pods", "Pods"), ("nodes", "Nodes"), ("hpas", "HPAs"), ("events", "Events"),
    ("replicasets", "RS"), ("services", "Svc"), ("pdbs", "PDBs"), ("configmaps", "CM"), ("inference", "Pools"),
)

COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "workloads": (("kind", "Kind"), ("name", "Name"), ("ready", "Ready"), ("upd", "Upd"), ("avail", "Avail"),
                  ("rollout", "Rollout"), ("hpa", "HPA min-max cur→des"), ("args", "Args")),
    "pods": (("name", "Pod"), ("status", "Status"), ("ready", "Ready"), ("restarts", "Restarts"),
             ("run", "Run"), ("wait", "Wait"), ("node", "Node"), ("age", "Age"), ("last", "Last exit"),
             ("engine", "Engine")),
    "nodes": (("name", "Node"), ("gpu", "GPU req/alloc"), ("state", "State"), ("problems", "Conditions"),
              ("cpu", "CPU req/alloc"), ("mem", "Mem req/alloc"), ("product", "GPU product")),
    "hpas": (("name", "HPA"), ("target", "Target"), ("bounds", "Min-max"), ("replicas", "Cur→des"),
             ("metrics", "Metrics (current/target)"), ("flags", "ASL"), ("why", "Why / last scale")),
    "events": (("type", "Type"), ("age", "Age"), ("object", "Object"), ("reason", "Reason"), ("count", "#"),
               ("message", "Message")),
    "replicasets": (("name", "ReplicaSet"), ("owner", "Deployment"), ("rev", "Rev"), ("ready", "Ready/des"),
                    ("age", "Age"), ("image", "Image")),
    "services": (("name", "Service"), ("type", "Type"), ("ip", "Cluster IP"), ("ports", "Ports"),
                 ("endpoints", "Ready endpoints"), ("selector", "Selector")),
    "pdbs": (("name", "PDB"), ("bound", "Min avail / max unavail"), ("allowed", "Allowed"),
             ("healthy", "Healthy/desired"), ("selector", "Selector")),
    "configmaps": (("name", "ConfigMap"), ("n", "#"), ("size", "Size"), ("keys", "Keys")),
    # InferencePools, then the InferenceObjectives (each under its pool's name)
    "inference": (("kind", "Kind"), ("name", "Name"), ("pool", "Selector / pool"), ("ports", "Target ports"),
                  ("picker", "Endpoint picker"), ("ready", "Ready endpoints"), ("priority", "Priority")),
}

# the resource kinds (informers) behind each view: a view whose kinds are all absent says why, not an empty table
VIEW_KINDS: dict[str, tuple[str, ...]] = {
    "workloads": ("deployments", "statefulsets"), "pods": ("pods",), "nodes": ("nodes",), "hpas": ("hpas",),
    "events": ("events",), "replicasets": ("replicasets",), "services": ("services",), "pdbs": ("pdbs",),
    "configmaps": ("configmaps",), "inference": ("inferencepools", "inferenceobjectives"),
}


_ROLLOUT_STYLE = {"complete": "green", "progressing": "yellow", "waiting": "yellow", "stuck": "bold red",
                  "paused": "dim"}


class KubeTable(LeanLines, DataTable):
    """A DataTable keyed by object; ``update_rows`` rewrites only changed cells."""

    DEFAULT_CSS = """
    KubeTable { height: 1fr; scrollbar-size-horizontal: 0; }
    """

    def __init__(self, columns: tuple[tuple[str, str], ...], **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self.cols = columns
        self._order: list[str] = []
        self._shown: dict[str, list[str | None]] = {}  # None: repaint that cell
        self.cells_updated = 0  # cells rewritten in place (a repaint each), for tests and benchmarks

    def on_mount(self) -> None:
        for key, header in self.cols:
            self.add_column(header, key=key)

    @property
    def selected_key(self) -> str | None:
        if not self._order or self.cursor_row is None or not 0 <= self.cursor_row < len(self._order):
            return None
        return self._order[self.cursor_row]

    def update_rows(self, rows: list[tuple[str, list]]) -> None:
        # Object names, event messages and args come from the API server: never markup.
        rows = [(k, [c if isinstance(c, Text) else Text(plain(c)) for c in cells]) for k, cells in rows]
        order = [k for k, _ in rows]
        if order != self._order:
            selected = self.selected_key
            self.clear()
            self._shown.clear()
            for key, cells in rows:
                self.add_row(*cells, key=key)
                self._shown[key] = [str(getattr(c, "plain", c)) for c in cells]
            self._order = order
            if selected in order:
                self.move_cursor(row=order.index(selected))
            return
        for key, cells in rows:
            shown = self._shown[key]
            for i, cell in enumerate(cells):
                text = str(getattr(cell, "plain", cell))
                if shown[i] != text:
                    shown[i] = text
                    self.cells_updated += 1
                    self.update_cell(key, self.cols[i][0], cell, update_width=True)


class ClusterPane(Vertical):
    """Attributes down: the app calls :meth:`show` with a snapshot; nothing here reads the API."""

    DEFAULT_CSS = """
    ClusterPane { height: 1fr; }
    ClusterPane #cluster-header { height: auto; max-height: 4; padding: 0 1; }
    ClusterPane #cluster-tabs { height: 1; padding: 0 1; }
    ClusterPane #cluster-absent { height: auto; padding: 0 1; color: $warning; display: none; }
    ClusterPane.-absent-note #cluster-absent { display: block; }
    ClusterPane.-absent-all ContentSwitcher { display: none; }
    ClusterPane ContentSwitcher { height: 1fr; }
    ClusterPane #cluster-detail { height: auto; max-height: 45%; padding: 0 1; border-top: solid $panel;
        color: $text-muted; }
    ClusterPane #cluster-filter { display: none; height: 1; border: none; padding: 0 1; }
    ClusterPane.-filtering #cluster-filter { display: block; }
    ClusterPane #cluster-keys { height: 1; padding: 0 1; color: $text-muted; }
    ClusterPane.-stale KubeTable { opacity: 55%; }
    """

    BINDINGS = [Binding("escape", "back", "Back", show=False)]

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.marks: dict[str, str] = {}  # triage subject → severity (rows marked ◆)
        self.filters: dict[str, RowFilter] = {}  # view → its / filter
        self.sort_by: dict[str, tuple[int, bool]] = {}  # view → (column, descending)
        # Enter on a workload or a node: the pods view narrowed to it; Esc goes back to ``drill[0]``
        self.drill: tuple[str, str, Callable[[PodView], bool]] | None = None
        self.drill_owner: WorkloadView | None = None  # the workload drilled into: its ReplicaSets above its pods
        self.scope_note: str | None = None  # why the all-namespaces view could not be opened (said in place)
        self._shown_args: tuple | None = None
        self.snapshot: ClusterSnapshot | None = None
        self.loads: dict = {}
        self.pod_engines: dict[str, str] = {}  # pod key → the engine it runs
        self.view = "workloads"
        self.key_hint = ""
        self.stale = False
        self.clock: Callable[[], float] = time.time  # ages are "clock() - created"; tests inject one

    def compose(self) -> ComposeResult:
        yield QuietStatic(id="cluster-header")
        yield QuietStatic(id="cluster-tabs")
        yield QuietStatic(id="cluster-absent")
        yield Input(placeholder="filter: regex, !regex (not matching), -l key=value", id="cluster-filter")
        with ContentSwitcher(initial="k-workloads", id="cluster-switcher"):
            for view, _ in VIEWS:
                yield KubeTable(COLUMNS[view], id=f"k-{view}")
        yield QuietStatic(id="cluster-detail")
        yield QuietStatic(id="cluster-keys")

    def on_mount(self) -> None:
        self._render_tabs()
        self.show_message("Kubernetes is not configured.")

    # ----- views
    def table(self, view: str | None = None) -> KubeTable:
        return self.query_one(f"#k-{view or self.view}", KubeTable)

    def set_view(self, view: str) -> None:
        self.view = view
        self.query_one(ContentSwitcher).current = f"k-{view}"
        self._render_tabs()
        self._render_absent()
        self.table().focus()
        self._render_detail()

    def absent_of(self, view: str | None = None) -> list[tuple[str, str]]:
        """(kind, why) of the kinds behind ``view`` that are not shown at all (forbidden, not served)."""
        snap = self.snapshot
        absent = snap.absent if snap is not None else {}
        return [(k, absent[k]) for k in VIEW_KINDS[view or self.view] if k in absent]

    def _render_absent(self) -> None:
        missing = self.absent_of()
        every = bool(missing) and len(missing) == len(VIEW_KINDS[self.view])
        drill = self.drill[1] if self.drill is not None and self.view == "pods" else None
        self.set_class(every, "-absent-all")
        text = Text()
        note = self.scope_note
        self.set_class(bool(missing) or drill is not None or note is not None, "-absent-note")
        if note is not None:
            text.append(note, style="bold yellow")
            if missing or drill is not None:
                text.append("\n")
        if drill is not None:  # the drill-down's breadcrumb (Esc: back)
            text.append(drill, style="bold cyan")
            text.append("  (Esc: back)", style="dim")
            for line in self.owner_rs_lines():
                text.append("\n")
                text.append_text(line)
            if missing:
                text.append("\n")
        for i, (kind, why) in enumerate(missing):
            if i:
                text.append("\n")
            text.append(f"{kind}: {why}", style="bold yellow")
            if every and i == len(missing) - 1:
                text.append(" — not shown: this is no empty list", style="dim")
        self.query_one("#cluster-absent", QuietStatic).show(text)

    MAX_RS_LINES = 4  # a rollout's new and old ReplicaSets; older ones are in the RS view

    def owner_rs_lines(self) -> list[Text]:
        """The drilled workload's ReplicaSets, newest revision first (a rollout's old and new side by side)."""
        w, snap = self.drill_owner, self.snapshot
        if w is None or snap is None:
            return []
        if w.kind == "StatefulSet":
            return [Text("no ReplicaSets: a StatefulSet manages its pods itself (revisions are "
                         "ControllerRevisions)", style="dim")]
        if "replicasets" in snap.absent:
            return [Text(f"ReplicaSets: {snap.absent['replicasets']}", style="bold yellow")]
        mine = [r for r in snap.replicasets if r.namespace == w.namespace and r.owner_name == w.name]
        mine.sort(key=lambda r: int(r.revision) if r.revision.isdigit() else -1, reverse=True)
        if not mine:
            return [Text("no ReplicaSet owned by it", style="dim")]
        out = []
        for r in mine[: self.MAX_RS_LINES]:
            style = "" if r.ready >= r.desired else "yellow"
            if r.desired == 0 and r.current == 0:
                style = "dim"  # an old revision scaled to zero
            out.append(Text(f"RS {r.name} rev {r.revision or DASH}: {r.ready}/{r.desired} ready, "
                            f"image {r.image or DASH}", style=style))
        if len(mine) > self.MAX_RS_LINES:
            out.append(Text(f"+{len(mine) - self.MAX_RS_LINES} older ReplicaSets (RS view)", style="dim"))
        return out

    def cycle(self, step: int = 1) -> str:
        if self.drill is not None:  # another view: the drill-down is over
            self.drill = None
            self.drill_owner = None
            self.refilter()
        names = [v for v, _ in VIEWS]
        self.set_view(names[(names.index(self.view) + step) % len(names)])
        return self.view

    def focus_table(self) -> None:
        self.table().focus()

    def _render_tabs(self) -> None:
        snap = self.snapshot
        counts = {}
        if snap is not None:
            counts = {"workloads": len(snap.workloads), "pods": len(snap.pods), "nodes": len(snap.nodes),
                      "hpas": len(snap.hpas), "events": len(snap.events), "replicasets": len(snap.replicasets),
                      "services": len(snap.services), "pdbs": len(snap.pdbs), "configmaps": len(snap.configmaps),
                      "inference": len(snap.inference_pools) + len(snap.inference_objectives)}
        t = Text()
        for i, (view, title) in enumerate(VIEWS):
            if i:
                t.append("  ")
            n = counts.get(view)
            label = f"{title} {n}" if n is not None else title
            if snap is not None and all(k in snap.absent for k in VIEW_KINDS[view]):
                label = f"{title} ✗"  # forbidden or not served: no count to give
            warnings = len(snap.warnings) if snap is not None and view == "events" else 0
            t.append(f" {label}", style="reverse bold" if view == self.view else "")
            if warnings:
                t.append(f" ⚠{warnings}", style="bold yellow" + (" reverse" if view == self.view else ""))
            t.append(" ", style="reverse bold" if view == self.view else "")
        extra = []
        f = self.filters.get(self.view)
        if f is not None and f.active:
            extra.append(f"/{f.text}")
        order = self.sort_by.get(self.view)
        if order is not None and order[0] < len(COLUMNS[self.view]):
            extra.append(f"sort {COLUMNS[self.view][order[0]][1]} {'▼' if order[1] else '▲'}")
        if extra:
            t.append("  " + "  ".join(extra), style="bold cyan")
        t.append("   v: next view", style="dim")
        self.query_one("#cluster-tabs", QuietStatic).show(t)

    def set_keys(self, hint: str) -> None:
        self.key_hint = hint
        self.query_one("#cluster-keys", QuietStatic).show(Text(hint, style="dim"))

    # ----- content
    def show_message(self, text: str, style: str = "yellow") -> None:
        self.query_one("#cluster-header", QuietStatic).show(Text(text, style=style))

    def show(self, snap: ClusterSnapshot, header: Text | str, loads: dict | None = None,
             pod_engines: dict[str, str] | None = None, *, stale: bool = False,
             marks: dict[str, str] | None = None) -> None:
        """Render ``snap``; ``loads`` / ``pod_engines``: pod key → its load and the engine it runs;
        ``stale``: these are the last objects read, the cluster cannot be read now;
        ``marks``: triage subjects (an engine, "ns/Kind/name") → worst severity: their rows are marked."""
        self.snapshot = snap
        self.marks = marks or {}
        self.loads = loads or {}
        self.pod_engines = pod_engines or {}
        if stale != self.stale:
            self.stale = stale
            self.set_class(stale, "-stale")
        self._shown_args = (header,)
        self.query_one("#cluster-header", QuietStatic).show(header)
        multi = snap.all_namespaces or len(snap.namespaces) > 1
        now = self.clock()
        self._update("workloads", [(w.key, w, self._workload_cells(snap, w, multi)) for w in snap.workloads])
        pods = [p for p in snap.pods if self.drill is None or self.drill[2](p)]
        self._update("pods", [(p.key, p, self._pod_cells(p, multi, now)) for p in pods])
        self._update("nodes", [(n.name, n, self._node_cells(n)) for n in snap.nodes])
        self._explained = explain_workloads(snap, now)  # HPA / KEDA / llm-d: current → desired and why not
        by_hpa = {f"{a.namespace}/{a.name}": a for w in self._explained for a in w.autoscalers
                  if a.kind == "HorizontalPodAutoscaler"}
        self._update("hpas", [(h.key, h, self._hpa_cells(h, multi, by_hpa.get(h.key))) for h in snap.hpas])
        events = list(snap.events)[:200]
        self._update("events", [(f"{i}", e, self._event_cells(e, now)) for i, e in enumerate(events)])
        self._update("replicasets", [(r.key, r, self._rs_cells(r, multi, now)) for r in snap.replicasets])
        self._update("services", [(v.key, v, self._service_cells(v, multi)) for v in snap.services])
        self._update("pdbs", [(b.key, b, self._pdb_cells(b, multi)) for b in snap.pdbs])
        self._update("configmaps", [(c.key, c, self._cm_cells(c, multi)) for c in snap.configmaps])
        self._update("inference", [(o.key, o, self._pool_cells(o, multi)) for o in snap.inference_pools]
                     + [(o.key, o, self._objective_cells(snap, o, multi)) for o in snap.inference_objectives])
        self._render_tabs()
        self._render_absent()
        self._render_detail()

    def _update(self, view: str, rows: list[tuple[str, object, list]]) -> None:
        """The view's rows through its filter and sort, then into its table."""
        f = self.filters.get(view)
        text = [(k, o, c, [str(getattr(x, "plain", x)) for x in c]) for k, o, c in rows]
        if f is not None and f.active:
            text = [r for r in text if keeps(f, r[1], r[3])]
        order = self.sort_by.get(view)
        if order is not None:
            col, desc = order
            text.sort(key=lambda r: sort_key(r[3][col]) if col < len(r[3]) else (2, 0.0, ""), reverse=desc)
        self.table(view).update_rows([(k, c) for k, _o, c, _t in text])

    def refilter(self) -> None:
        """Repaint with the filters, sort and drill-down as they are now."""
        if self.snapshot is not None and self._shown_args is not None:
            self.show(self.snapshot, self._shown_args[0], self.loads, self.pod_engines, stale=self.stale,
                      marks=self.marks)

    # ----- filter, sort, drill-down
    def open_filter(self) -> None:
        box = self.query_one("#cluster-filter", Input)
        box.value = self.filters.get(self.view, RowFilter()).text
        self.add_class("-filtering")
        box.focus()

    @on(Input.Changed, "#cluster-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.set_filter(event.value)

    @on(Input.Submitted, "#cluster-filter")
    def _filter_done(self, event: Input.Submitted) -> None:
        event.stop()
        if not event.value.strip():
            self.remove_class("-filtering")
        self.table().focus()

    def set_filter(self, text: str, view: str | None = None) -> None:
        f = parse_filter(text)
        self.filters[view or self.view] = f
        self.refilter()
        self._render_tabs()

    def cycle_sort(self) -> str:
        """``s``: the next column ascending, then descending, …, then the view's own order."""
        cols = COLUMNS[self.view]
        cur = self.sort_by.get(self.view)
        if cur is None:
            nxt: tuple[int, bool] | None = (0, False)
        elif not cur[1]:
            nxt = (cur[0], True)
        elif cur[0] + 1 < len(cols):
            nxt = (cur[0] + 1, False)
        else:
            nxt = None
        if nxt is None:
            self.sort_by.pop(self.view, None)
        else:
            self.sort_by[self.view] = nxt
        self.refilter()
        self._render_tabs()
        return "the view's own order" if nxt is None else f"{cols[nxt[0]][1]} {'▼' if nxt[1] else '▲'}"

    def drill_down(self) -> bool:
        """Enter: a workload → its pods; a node → its pods (and GPU allocation in the line above)."""
        view, obj = self.selected()
        snap = self.snapshot
        if snap is None or obj is None:
            return False
        if isinstance(obj, WorkloadView):
            w = obj
            label = (f"{w.kind} {w.namespace}/{w.name} › pods — rollout {w.rollout}, {w.ready}/{w.desired} ready, "
                     f"selector {w.selector or DASH}")
            self.drill = (view, label, lambda p: p.namespace == w.namespace and p.owner_kind == w.kind
                          and p.owner_name == w.name)
            self.drill_owner = w
        elif isinstance(obj, NodeView):
            n = obj
            label = (f"node {n.name} › pods — GPUs {n.gpu_requested}/{count_human(n.gpu_allocatable)} requested, "
                     f"CPU {cpu_text(n.cpu_requested)}/{cpu_text(n.cpu_allocatable)}, memory "
                     f"{memory_text(n.memory_requested_bytes)}/{memory_text(n.memory_allocatable_bytes)}")
            self.drill = (view, label, lambda p: p.node == n.name)
            self.drill_owner = None
        else:
            return False
        self.set_view("pods")
        self.refilter()
        return True

    def action_back(self) -> None:
        """Esc: close the filter box, else leave the drill-down, else clear this view's filter; else the app's."""
        if self.has_class("-filtering") and self.query_one("#cluster-filter", Input).has_focus:
            self.remove_class("-filtering")
            self.set_filter("")
            self.table().focus()
            return
        if self.drill is not None:
            back = self.drill[0]
            self.drill = None
            self.drill_owner = None
            self.set_view(back)
            self.refilter()
            return
        if self.filters.get(self.view, RowFilter()).active:
            self.remove_class("-filtering")
            self.set_filter("")
            return
        raise SkipAction()

    @on(DataTable.RowSelected)
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        if isinstance(event.data_table, KubeTable):
            event.stop()
            self.drill_down()

    def _label(self, ns: str, name: str, multi: bool) -> str:
        return f"{ns}/{name}" if multi else name

    @staticmethod
    def _marked(label: str, severity: str | None) -> Text | str:
        """A row a triage verdict is about: ◆ before its name, in the verdict's colour (as in Engines)."""
        if severity is None:
            return label
        text, style = mark_text(label, severity)
        return Text(text, style=style)

    def workload_problem(self, snap: ClusterSnapshot, w: WorkloadView, with_pod: bool = False) -> str | None:
        for p in snap.pods_of(w):
            if p.problem:
                return f"pod {p.name}: {p.problem}" if with_pod else p.problem
        return None

    def _workload_cells(self, snap: ClusterSnapshot, w: WorkloadView, multi: bool) -> list:
        hpa = snap.hpa_for(w)
        problem = self.workload_problem(snap, w)
        rollout = w.rollout if w.rollout != "complete" else "complete"
        text = f"{rollout}: {problem}" if problem and w.rollout != "complete" else (
            f"{rollout} ({w.rollout_detail})" if w.rollout != "complete" else "complete")
        style = _ROLLOUT_STYLE.get(w.rollout, "")
        if problem and w.rollout != "complete":
            style = "bold red"
        ready_style = "green" if w.desired is not None and w.ready >= w.desired else "yellow"
        hpa_text = DASH
        if hpa is not None:
            hpa_text = (f"{hpa.min_replicas}-{hpa.max_replicas} "
                        f"{count_human(hpa.current_replicas)}→{count_human(hpa.desired_replicas)}")
        return [
            "deploy" if w.kind == "Deployment" else "sts",
            self._marked(self._label(w.namespace, w.name, multi), self.marks.get(f"{w.namespace}/{w.kind}/{w.name}")),
            Text(f"{w.ready}/{w.desired if w.desired is not None else '?'}", style=ready_style),
            str(w.updated),
            str(w.available),
            Text(clip(text, 70), style=style),
            Text(hpa_text, style="yellow" if hpa is not None and hpa.why_not_scaling else ""),
            clip(" ".join(w.args) or DASH, 60),
        ]

    def _pod_cells(self, p: PodView, multi: bool, now: float) -> list:
        load = self.loads.get(p.key)
        run = count_human(load.running) if load is not None and load.error is None else DASH
        wait = count_human(load.waiting) if load is not None and load.error is None else DASH
        status_style = "green" if p.ready else ("bold red" if p.problem or p.status in (
            "CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "Error", "OOMKilled") else "yellow")
        if p.terminating:
            status_style = "dim"
        url = p.engine_url
        engine = self.pod_engines.get(p.key) or (url or DASH).replace("http://", "")
        last = p.last_termination_reason or DASH
        severity = self.marks.get(f"{p.namespace}/Pod/{p.name}") or self.marks.get(engine)
        return [
            self._marked(self._label(p.namespace, p.name, multi), severity),
            Text(p.status, style=status_style),
            p.ready_text,
            Text(str(p.restarts), style="yellow" if p.restarts else ""),
            run,
            Text(wait, style="yellow" if load is not None and (load.waiting or 0) > 0 else ""),
            p.node or DASH,
            age_short(now - p.created_ts if p.created_ts else None),
            Text(last, style="bold red" if last == "OOMKilled" else ""),
            engine,
        ]

    def _node_cells(self, n: NodeView) -> list:
        gpu = DASH
        if n.gpu_allocatable is not None:
            gpu = f"{n.gpu_requested}/{n.gpu_allocatable}"
            if n.gpu_capacity is not None and n.gpu_capacity != n.gpu_allocatable:
                gpu += f" (cap {n.gpu_capacity})"
        state = "Ready" if n.ready else ("NotReady" if n.ready is False else "Unknown")
        if n.cordoned:
            state += ",SchedulingDisabled"
        problems = ", ".join(n.problems) or "ok"
        return [
            n.name,
            gpu,
            Text(state, style="green" if n.ready and not n.cordoned else ("yellow" if n.ready else "bold red")),
            Text(clip(problems, 60), style="" if problems == "ok" else "bold red"),
            f"{cpu_text(n.cpu_requested)}/{cpu_text(n.cpu_allocatable)}",
            f"{memory_text(n.memory_requested_bytes)}/{memory_text(n.memory_allocatable_bytes)}",
            n.gpu_product or DASH,
        ]

    def _hpa_cells(self, h: HpaView, multi: bool, explained=None) -> list:
        metrics = ", ".join(f"{m.name.split(':')[-1]} {m.current or '?'}/{m.target or '?'}" for m in h.metrics)
        why = explained.reason if explained is not None and explained.reason else h.why_not_scaling
        return [
            self._label(h.namespace, h.name, multi),
            f"{h.target_kind}/{h.target_name}",
            f"{count_human(h.min_replicas)}-{count_human(h.max_replicas)}",
            f"{count_human(h.current_replicas)}→{count_human(h.desired_replicas)}",
            clip(metrics or DASH, 50),
            h.flags,
            Text(clip(why, 80), style="yellow") if why else f"scaled {h.last_scale_time or DASH}",
        ]

    def _event_cells(self, e: EventView, now: float) -> list:
        return [
            Text("Warning" if e.warning else "Normal", style="bold yellow" if e.warning else "dim"),
            age_short(now - e.last_seen_ts if e.last_seen_ts else None),
            f"{e.kind}/{e.name}",
            e.reason,
            str(e.count),
            clip(e.message, 120),
        ]

    @staticmethod
    def _ns_name(ns: str, name: str, multi: bool) -> str:
        return f"{ns}/{name}" if multi else name

    def _rs_cells(self, r: ReplicaSetView, multi: bool, now: float) -> list:
        return [self._ns_name(r.namespace, r.name, multi), r.owner_name or DASH, r.revision or DASH,
                Text(f"{r.ready}/{r.desired}", style="" if r.ready >= r.desired else "yellow"),
                age_short(now - r.created_ts if r.created_ts else None), clip(r.image, 50)]

    def _service_cells(self, v: ServiceView, multi: bool) -> list:
        if not v.slices_read:
            eps = Text("unreadable", style="dim")
        elif not v.selector:
            eps = Text("no selector", style="dim")
        else:
            eps = Text(f"{v.ready_endpoints}/{len(v.endpoints)}", style="" if v.ready_endpoints else "bold red")
        return [self._ns_name(v.namespace, v.name, multi), v.type, v.cluster_ip or DASH, v.ports or DASH, eps,
                ",".join(f"{k}={x}" for k, x in sorted(v.selector.items())) or DASH]

    def _pdb_cells(self, b: PdbView, multi: bool) -> list:
        bound = (f"min {b.min_available}" if b.min_available is not None else
                 f"max unavail {b.max_unavailable}" if b.max_unavailable is not None else DASH)
        allowed = (Text("not counted yet", style="dim") if b.disruptions_allowed is None else
                   Text(str(b.disruptions_allowed), style="bold yellow" if b.disruptions_allowed == 0 else ""))
        healthy = DASH if b.current_healthy is None else f"{b.current_healthy}/{b.desired_healthy}"
        return [self._ns_name(b.namespace, b.name, multi), bound, allowed, healthy, b.selector or DASH]

    def _cm_cells(self, c: ConfigMapView, multi: bool) -> list:
        return [self._ns_name(c.namespace, c.name, multi), str(len(c.keys)), f"{c.size_bytes} B",
                clip(", ".join(c.keys), 80) or DASH]

    def _pool_cells(self, o: InferencePoolView, multi: bool) -> list:
        ready = Text(f"{o.ready_endpoints}/{o.endpoints}", style="" if o.ready_endpoints else "bold red")
        return ["pool", self._ns_name(o.namespace, o.name, multi), o.selector or DASH,
                ",".join(str(p) for p in o.target_ports) or DASH, o.picker or DASH, ready, DASH]

    def _objective_cells(self, snap: ClusterSnapshot, o: InferenceObjectiveView, multi: bool) -> list:
        pool = next((p for p in snap.inference_pools if p.namespace == o.namespace and p.name == o.pool), None)
        return ["objective", self._ns_name(o.namespace, o.name, multi),
                Text(o.pool or DASH, style="" if pool is not None or not o.pool else "yellow"), DASH, DASH,
                f"{pool.ready_endpoints}/{pool.endpoints}" if pool is not None else DASH,
                DASH if o.priority is None else str(o.priority)]

    # ----- selection and detail
    def selected(self) -> tuple[str, object | None]:
        """(view, the selected WorkloadView / PodView / NodeView / HpaView / EventView or None)."""
        snap = self.snapshot
        if snap is None:
            return self.view, None
        key = self.table().selected_key
        if key is None:
            return self.view, None
        find: dict[str, Callable[[], Any]] = {
            "workloads": lambda: next((w for w in snap.workloads if w.key == key), None),
            "pods": lambda: next((p for p in snap.pods if p.key == key), None),
            "nodes": lambda: next((n for n in snap.nodes if n.name == key), None),
            "hpas": lambda: next((h for h in snap.hpas if h.key == key), None),
            "events": lambda: snap.events[int(key)] if key.isdigit() and int(key) < len(snap.events) else None,
            "replicasets": lambda: next((r for r in snap.replicasets if r.key == key), None),
            "services": lambda: next((v for v in snap.services if v.key == key), None),
            "pdbs": lambda: next((b for b in snap.pdbs if b.key == key), None),
            "configmaps": lambda: next((c for c in snap.configmaps if c.key == key), None),
            "inference": lambda: next((o for o in snap.inference_pools if o.key == key), None)
            or next((o for o in snap.inference_objectives if o.key == key), None),
        }
        return self.view, find[self.view]()

    def select(self, view: str, key: str) -> bool:
        """Move the cursor to ``key`` in ``view`` (tests, and jumping to a pod's node)."""
        table = self.table(view)
        if key not in table._order:
            return False
        if view != self.view:
            self.set_view(view)
        table.move_cursor(row=table._order.index(key))
        self._render_detail()
        return True

    @on(DataTable.RowHighlighted)
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._render_detail()

    def _render_detail(self) -> None:
        snap = self.snapshot
        _, obj = self.selected()
        if snap is None or obj is None:
            self.query_one("#cluster-detail", QuietStatic).show(Text(""))
            return
        ctx = DetailContext(snap, getattr(self, "_explained", ()), self.loads,
                            lambda w: self.workload_problem(snap, w, with_pod=True))
        self.query_one("#cluster-detail", QuietStatic).show(detail_text(obj, ctx))
