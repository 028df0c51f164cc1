"""The one action table: key bindings, the command palette and the help
screen are all generated from ``ACTIONS``."""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding, BindingType


@dataclass(frozen=True, slots=True)
class Action:
    """One thing the operator can do."""

    action: str  # Textual action name, e.g. "show_pane('engines')"
    keys: str  # Textual key spec, comma-separated alternatives
    title: str  # palette / help text
    group: str = "General"
    show_in_footer: bool = True
    footer_label: str = ""
    mutating: bool = False  # disabled in --read-only mode
    priority: bool = False
    panes: tuple[str, ...] = ()  # the panes whose footer shows it (empty: every pane)

    @property
    def display_keys(self) -> str:
        return " ".join(key_display(k) for k in self.keys.split(","))


_KEY_NAMES = {"question_mark": "?", "slash": "/", "escape": "Esc", "enter": "Enter", "tab": "Tab",
              "shift+tab": "Shift+Tab", "space": "Space",
              "right_square_bracket": "]", "left_square_bracket": "[", "plus": "+", "minus": "-"}


def key_display(key: str) -> str:
    """One spelling of a key everywhere (footer, help, palette): ``^R`` for ctrl+r."""
    key = key.strip()
    if key in _KEY_NAMES:
        return _KEY_NAMES[key]
    if key.startswith("ctrl+"):
        return "^" + key.removeprefix("ctrl+").upper()
    return key


ACTIONS: tuple[Action, ...] = (
    Action("show_pane('overview')", "1", "Show the Overview pane", "Panes", footer_label="Overview",
           show_in_footer=False),
    Action("show_pane('engines')", "2", "Show the Engines pane", "Panes", footer_label="Engines",
           show_in_footer=False),
    Action("show_pane('log')", "3", "Show the Log pane", "Panes", footer_label="Log", show_in_footer=False),
    Action("show_pane('gpus')", "4", "Show the GPUs pane", "Panes", footer_label="GPUs", show_in_footer=False),
    # Priority: a focused table or input would otherwise take Tab to move the focus.
    Action("next_pane", "tab", "Next pane", "Panes", show_in_footer=False, priority=True),
    Action("previous_pane", "shift+tab", "Previous pane", "Panes", show_in_footer=False, priority=True),
    # Before the Engines pane's / and s: these act on the Cluster pane only.
    Action("cluster_filter", "slash", "Cluster pane: filter the view (regex; !regex: not matching; -l key=value: "
           "label selector)", "Cluster", footer_label="Filter", show_in_footer=False, panes=("cluster",)),
    Action("cluster_sort", "s", "Cluster pane: sort the view on the next column (ascending, descending, then "
           "unsorted)", "Cluster", footer_label="Sort", show_in_footer=False, panes=("cluster",)),
    Action("cluster_all_namespaces", "0", "Cluster pane: all namespaces ⇄ the configured ones (k9s's 0)", "Cluster",
           footer_label="All ns", show_in_footer=False, panes=("cluster",)),
    Action("filter", "slash", "Filter engines by name or model", "View", footer_label="Filter", panes=("engines",)),
    Action("clear_filter", "escape", "Clear the filter / close", "View", show_in_footer=False),
    # Before engine_detail: all are Enter; triage_open acts only on the Triage pane, gpu_detail on the GPUs pane.
    Action("triage_open", "enter", "Triage pane: open the selected verdict's evidence (trends around its onset), "
           "or the selected remedy's action, pre-filled", "View", footer_label="Open", panes=("triage",)),
    Action("gpu_detail", "enter", "Open the selected GPU's detail", "View", footer_label="Detail", panes=("gpus",)),
    Action("engine_detail", "enter", "Open the selected engine's detail", "View", footer_label="Detail",
           panes=("engines",)),
    Action("sort_pick", "s", "Sort engines: pick a column (the same column again reverses)", "View",
           footer_label="Sort", panes=("engines",)),
    Action("group_engines", "G", "Group engines by deployment, model or node, with group totals (cycles; "
           "then no groups)", "View", footer_label="Group", panes=("engines",)),
    Action("refresh_now", "ctrl+r", "Poll every source now", "View", show_in_footer=False),
    Action("toggle_dark", "t", "Switch between the dark and light theme", "View", footer_label="Theme",
           show_in_footer=False),
    Action("engine_new", "n", "Start a local vLLM engine from a launch profile", "Local engines",
           footer_label="New", mutating=True, panes=("engines",)),
    Action("engine_stop", "x", "Stop (drain) the selected local engine", "Local engines", footer_label="Stop",
           mutating=True, panes=("engines",)),
    Action("engine_restart", "r", "Restart the selected local engine", "Local engines", footer_label="Restart",
           mutating=True, panes=("engines",)),
    Action("engine_set_seqs", "m", "Change max_num_seqs of the selected local engine (drain, restart, verify)",
           "Local engines", footer_label="Max seqs", mutating=True, panes=("engines",)),
    Action("show_pane('cluster')", "5", "Show the Cluster pane (Kubernetes)", "Panes", footer_label="Cluster",
           show_in_footer=False),
    # Before the Queue pane's d and the Autoscaler pane's p: these act on the Cluster pane only (k9s's keys).
    Action("kube_describe", "d", "Cluster pane: describe the selected object (conditions, container states, "
           "resources and QoS, owner chain, events)", "Cluster", footer_label="Describe", panes=("cluster",)),
    Action("kube_yaml", "y", "Cluster pane: the selected object's YAML (read-only, managedFields folded)",
           "Cluster", footer_label="YAML", show_in_footer=False, panes=("cluster",)),
    Action("kube_logs", "l", "Cluster pane: the selected pod's container log, followed (w wrap, t timestamps, "
           "/ filter)", "Cluster", footer_label="Logs", panes=("cluster",)),
    Action("kube_logs_previous", "p", "Cluster pane: the previous container's log (before the last restart)",
           "Cluster", footer_label="Prev logs", show_in_footer=False, panes=("cluster",)),
    Action("kube_events", "e", "Cluster pane: the selected object's events", "Cluster", footer_label="Events",
           show_in_footer=False, panes=("cluster",)),
    Action("show_pane('queues')", "6", "Show the Queue pane (gateways, endpoint pickers)", "Panes",
           footer_label="Queue", show_in_footer=False),
    Action("queue_switch", "f", "Queue pane: move between the classes and the engines table", "Queues",
           footer_label="Table", panes=("queues",)),
    Action("queue_edit", "w", "Edit the selected class's weight / max wait on its gateway", "Queues",
           footer_label="Weight", mutating=True, panes=("queues",)),
    Action("queue_drain", "d", "Drain / undrain the selected engine at its gateway (follows in-flight to 0)",
           "Queues", footer_label="Drain", mutating=True, panes=("queues",)),
    Action("queue_objective", "i", "Change an InferenceObjective's priority (Kubernetes custom resource)", "Queues",
           footer_label="Objective", mutating=True, panes=("queues",)),
    Action("cluster_view", "v", "Cluster pane: next view (workloads, pods, nodes, HPAs, events)", "Kubernetes",
           footer_label="View", panes=("cluster",)),
    Action("kube_scale", "S", "Scale the selected Deployment/StatefulSet (scale subresource)", "Kubernetes",
           mutating=True, show_in_footer=False),
    Action("kube_hpa", "H", "Edit the min/max replicas of the selected HPA", "Kubernetes", mutating=True,
           show_in_footer=False),
    Action("kube_args", "A", "Patch the vLLM container args of the selected workload (rolling update)",
           "Kubernetes", mutating=True, show_in_footer=False),
    Action("kube_restart", "R", "Rollout restart the selected workload", "Kubernetes", mutating=True,
           show_in_footer=False),
    Action("kube_drain_pod", "D", "Drain the selected pod: out of its Service, wait for 0 in flight, then remove",
           "Kubernetes", mutating=True, show_in_footer=False),
    Action("kube_delete_pod", "ctrl+d", "Delete the selected pod", "Kubernetes", mutating=True,
           show_in_footer=False),
    Action("kube_cordon", "C", "Cordon / uncordon the selected node", "Kubernetes", mutating=True,
           show_in_footer=False),
    Action("kube_drain_node", "N", "Drain the selected node (cordon + evictions honouring PDBs)", "Kubernetes",
           mutating=True, show_in_footer=False),
    Action("kube_configmap", "M", "Patch a ConfigMap key (e.g. the gateway's priority weights)", "Kubernetes",
           mutating=True, show_in_footer=False),
    Action("show_pane('autoscaler')", "7", "Show the Autoscaler pane (scaling advisor, HPA)", "Panes",
           footer_label="Autoscaler", show_in_footer=False),
    Action("advisor_apply", "p", "Apply the selected workload's recommendation (scale action, confirm with y)",
           "Autoscaler", footer_label="Apply", mutating=True, panes=("autoscaler",)),
    Action("advisor_mode", "o", "Advisor mode: off, recommend or auto", "Autoscaler", footer_label="Mode",
           panes=("autoscaler",)),
    # Targets and the kill switch change what auto mode may do: read-only offers neither.
    Action("advisor_targets", "T", "Advisor targets: queue depth and p99", "Autoscaler", footer_label="Targets",
           mutating=True, panes=("autoscaler",)),
    Action("advisor_kill", "X", "Kill switch: stop (or resume) the advisor's automatic applies", "Autoscaler",
           mutating=True, show_in_footer=False),
    Action("kube_context", "K", "Switch the Kubernetes context", "Kubernetes", footer_label="Context",
           panes=("cluster",)),
    Action("kube_namespace", "ctrl+n", "Switch the Kubernetes namespace", "Kubernetes", show_in_footer=False),
    Action("save_bundle", "B", "Save an incident bundle: the last 15 minutes of state, the log, the audit lines "
           "and the config (secrets redacted), replayable", "General", show_in_footer=False),
    Action("replay_toggle", "space", "Replay: pause / resume", "Replay", footer_label="Pause"),
    Action("replay_step(1)", "right_square_bracket", "Replay: step one tick forward", "Replay",
           footer_label="Step"),
    Action("replay_step(-1)", "left_square_bracket", "Replay: step one tick back", "Replay", show_in_footer=False),
    Action("replay_speed(True)", "plus", "Replay: faster", "Replay", footer_label="Faster", show_in_footer=False),
    Action("replay_speed(False)", "minus", "Replay: slower", "Replay", show_in_footer=False),
    Action("replay_seek", "g", "Replay: seek to a time", "Replay", footer_label="Seek"),
    Action("show_pane('triage')", "8", "Show the Triage pane: verdicts worst first, their evidence and remedies "
           "(a remedy's key — m, S, r, N — opens its action pre-filled; ◆ marks the engines and GPUs a verdict is "
           "about in their panes)", "Panes", footer_label="Triage", show_in_footer=False),
    Action("show_pane('slo')", "9", "Show the SLO pane: per workload class its stage budgets, burn rates with "
           "their windows, capacity (Little's law, what-ifs) and cost, with plots against their targets", "Panes",
           footer_label="SLO", show_in_footer=False),
    Action("command_palette", "ctrl+p", "Open the command palette", "General", footer_label="Palette",
           show_in_footer=False),
    Action("help", "question_mark", "Show every key binding", "General", footer_label="Help"),
    Action("actions_list", "a", "List the running actions: reopen one to follow or abort it", "General",
           footer_label="Actions", show_in_footer=False),
    Action("quit", "q", "Quit infertop", "General", footer_label="Quit", priority=True),
)


def bindings(read_only: bool = False) -> list[BindingType]:
    """Textual bindings for the app, minus mutating actions in read-only mode."""
    out: list[BindingType] = []
    for a in ACTIONS:
        if read_only and a.mutating:
            continue
        out.append(
            Binding(a.keys, a.action, a.footer_label or a.title, show=a.show_in_footer, priority=a.priority)
        )
    return out


def footer_panes() -> dict[str, tuple[str, ...]]:
    """Action name → the panes whose footer shows it (actions shown on every pane are left out)."""
    return {a.action: a.panes for a in ACTIONS if a.panes}


def visible_actions(read_only: bool = False) -> list[Action]:
    return [a for a in ACTIONS if not (read_only and a.mutating)]
