"""The Triage pane: the verdicts active at this tick, worst first — each with its evidence and its
remedies, a remedy's key one keystroke from its pre-filled action.

Also what the other panes need to mark what a verdict is about (:func:`affected`) and the Overview's
one line (:func:`worst_line`). Every text from a verdict came from outside (an engine name, an
error, a recording): it is written as :class:`~rich.text.Text`, never parsed as markup.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from ...analysis.triage import Remedy, Verdict
from ...format import age_human
from ...text import plain
from ..actions import key_display
from .panels import QuietStatic

MARK = "◆"  # an engine or GPU row a verdict is about (red: critical, yellow: warning)
MAX_SHOWN = 100  # verdicts listed; a recording may hold any number
# Remedy keys the pane opens: the action table's key → what opens (the rest is advice, shown as text)
OPENS = {"m": "max_num_seqs dialog", "S": "scale confirmation", "r": "restart confirmation",
         "N": "node drain", "enter": "engine detail", "5": "Cluster pane",
         "p": "the previous container's log", "e": "the object's events"}
# Of those, the keys that only read the cluster: they open in --read-only too (not in a replay: no live cluster)
READS = frozenset({"p", "e"})


def severity_style(severity: str) -> str:
    return "bold red" if severity == "critical" else "yellow"


def gpu_subject(g) -> str:
    """A GPU as triage names it (its verdicts' subject): ``host:label``, or the label alone."""
    return f"{g.host}:{g.label}" if g.host else g.label


def affected(state) -> tuple[dict[str, str], dict[str, str]]:
    """(engine name → worst severity, GPU subject → worst severity) of the state's verdicts. An engine on a
    GPU a verdict is about is affected too (a throttled GPU slows its engine)."""
    engines: dict[str, str] = {}
    gpus: dict[str, str] = {}
    verdicts = getattr(state, "verdicts", ()) or ()
    if not verdicts:
        return engines, gpus
    names = {e.name for e in state.engines}
    by_subject = {gpu_subject(g): g for g in state.gpus}

    def worst(into: dict[str, str], key: str, severity: str) -> None:
        if into.get(key) != "critical":
            into[key] = severity

    for v in verdicts:
        if v.subject in names:
            worst(engines, v.subject, v.severity)
        g = by_subject.get(v.subject)
        if g is not None:
            worst(gpus, v.subject, v.severity)
            if g.engine:
                worst(engines, g.engine, v.severity)
    return engines, gpus


def mark_text(text: str, severity: str | None) -> tuple[str, str]:
    """A row's first cell with the verdict mark: (text, style)."""
    if severity is None:
        return text, ""
    return f"{MARK} {text}", severity_style(severity)


def since_human(v: Verdict, now_s: float) -> str:
    """"12 s" — how long the verdict has held, on the tick's clock (a replay's recorded time)."""
    return age_human(max(0.0, now_s - v.since))


def worst_line(verdicts: tuple[Verdict, ...], now_s: float) -> Text:
    """The Overview's first line: the worst verdict (kind, subject, since), how many more, where to look."""
    v = verdicts[0]
    line = Text(f"{MARK} ", style=severity_style(v.severity))
    line.append(f"{v.severity} {plain(v.kind, 40)} ", style=severity_style(v.severity))
    line.append(plain(v.subject, 60), style="bold")
    line.append(f" · since {since_human(v, now_s)}")
    if len(verdicts) > 1:
        line.append(f" · +{len(verdicts) - 1} more")
    line.append(" — 8: Triage", style="dim")
    return line


def remedy_keys(r: Remedy) -> str:
    return key_display(r.key) if r.key else ""


def opens(r: Remedy) -> bool:
    return r.key in OPENS


class Row(NamedTuple):
    """What one line of the list is: a verdict (remedy None) or one of its remedies."""

    key: tuple[str, str]
    remedy: int | None


def verdict_prompt(v: Verdict, now_s: float) -> Text:
    """The verdict's lines: severity, kind, subject, since; the explanation; one line per evidence."""
    style = severity_style(v.severity)
    t = Text(f"{MARK} {v.severity.upper()} ", style=style)
    t.append(plain(v.kind, 40), style=style)
    t.append("  ")
    t.append(plain(v.subject, 80), style="bold")
    t.append(f"  · since {since_human(v, now_s)}", style="dim")
    t.append("\n  " + plain(v.explanation, 600))
    for e in v.evidence:
        t.append("\n  · ", style="dim")
        t.append(plain(e.signal, 80), style="bold")
        t.append(f" {plain(e.value, 80)}")
        t.append(f"  against {plain(e.against, 120)}", style="dim")
        t.append(f"  ({plain(e.window, 40)})", style="dim")
    for c in getattr(v, "changes", ()) or ():  # what changed in the minutes before the onset
        t.append("\n  changed before: ", style="dim")
        t.append(plain(str(c), 300))
    return t


def remedy_prompt(r: Remedy, actionable: bool, readable: bool | None = None) -> Text:
    """``m  lower max_num_seqs 16 → 12 …`` — the key only where pressing it opens something (``readable``:
    a read of the cluster opens, as in --read-only; by default as ``actionable``)."""
    can = (actionable if readable is None else readable) if r.key in READS else actionable
    if can and opens(r):
        t = Text(f"    {remedy_keys(r):>5}  ", style="bold cyan")
    else:
        t = Text("        ·  ", style="dim")
    t.append(plain(r.text, 400))
    return t


class TriagePane(Vertical):
    """The title line, then the verdicts and their remedies as one list (↑ ↓ move, Enter opens)."""

    DEFAULT_CSS = """
    TriagePane #triage-title { height: 1; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    TriagePane #triage-list { height: 1fr; border: none; padding: 0 1; }
    TriagePane #triage-list:focus { border: none; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.verdicts: tuple[Verdict, ...] = ()
        self.actionable = True
        self.readable = True  # the cluster-reading remedies (p, e) open
        self._rows: list[Row | None] = []  # per option: what it is (None: the "healthy" line, a note)
        self._shown: tuple | None = None  # (rows, actionable) of the options on screen
        self._prompts: list[Text] = []

    def compose(self) -> ComposeResult:
        yield QuietStatic(id="triage-title")
        yield OptionList(id="triage-list")

    @property
    def options(self) -> OptionList:
        return self.query_one("#triage-list", OptionList)

    def show(self, verdicts: Iterable[Verdict], now_s: float, *, actionable: bool, why_text_only: str = "",
             readable: bool | None = None) -> None:
        """The verdicts active at ``now_s`` (the tick's time). ``actionable`` False (read-only, replay): the
        remedies are text, with ``why_text_only`` in the title; ``readable``: the remedies that only read the
        cluster (a pod's previous log, its events) open all the same (read-only; not a replay)."""
        verdicts = tuple(verdicts)
        readable = actionable if readable is None else readable
        self.verdicts, self.actionable, self.readable = verdicts, actionable, readable
        self.query_one("#triage-title", QuietStatic).show(self._title(verdicts, actionable, why_text_only))
        rows: list[Row | None] = []
        prompts: list[Text] = []
        if not verdicts:
            rows.append(None)
            prompts.append(Text("no verdict — the fleet looks healthy", style="green"))
        for v in verdicts[:MAX_SHOWN]:
            rows.append(Row(v.key, None))
            prompts.append(verdict_prompt(v, now_s))
            for j, r in enumerate(v.remedies):
                rows.append(Row(v.key, j))
                prompts.append(remedy_prompt(r, actionable, readable))
        if len(verdicts) > MAX_SHOWN:
            rows.append(None)
            prompts.append(Text(f"… {len(verdicts) - MAX_SHOWN} more verdicts", style="dim"))
        self._apply(rows, prompts)

    def _title(self, verdicts: tuple[Verdict, ...], actionable: bool, why_text_only: str) -> Text:
        t = Text("Triage", style="bold")
        if not verdicts:
            t.append(" · no verdict", style="green")
            return t
        critical = sum(1 for v in verdicts if v.severity == "critical")
        t.append(f" · {len(verdicts)} verdict{'s' if len(verdicts) != 1 else ''}")
        if critical:
            t.append(f" ({critical} critical)", style="bold red")
        if actionable:
            t.append(" · Enter: the evidence, or the remedy's action · a remedy's key opens it pre-filled",
                     style="dim")
        else:
            t.append(f" · Enter: the evidence · remedies as text only ({why_text_only or 'read-only'})"
                     + (", but for the reads of a pod (p, e)" if self.readable else ""), style="dim")
        return t

    def _apply(self, rows: list[Row | None], prompts: list[Text]) -> None:
        """Rebuild the list when its lines changed what they are; else only the prompts that changed (the
        ages), so the highlight and the scroll stay where the operator left them."""
        ol = self.options
        structure = (tuple(rows), self.actionable, self.readable)
        if structure == self._shown:
            for i, (old, new) in enumerate(zip(self._prompts, prompts)):
                if old != new:
                    ol.replace_option_prompt_at_index(i, new)
            self._prompts = prompts
            return
        keep = self.selected_row()
        self._shown, self._rows, self._prompts = structure, rows, prompts
        ol.set_options(Option(p, disabled=row is None) for row, p in zip(rows, prompts))
        if keep in rows:
            ol.highlighted = rows.index(keep)
        elif keep is not None and Row(keep.key, None) in rows:
            ol.highlighted = rows.index(Row(keep.key, None))
        elif any(r is not None for r in rows):
            ol.highlighted = next(i for i, r in enumerate(rows) if r is not None)

    def selected_row(self) -> Row | None:
        i = self.options.highlighted
        return self._rows[i] if i is not None and 0 <= i < len(self._rows) else None

    def selected(self) -> tuple[Verdict | None, Remedy | None]:
        """The verdict of the highlighted line, and the remedy when the line is one."""
        row = self.selected_row()
        if row is None:
            return None, None
        v = next((v for v in self.verdicts if v.key == row.key), None)
        if v is None or row.remedy is None or row.remedy >= len(v.remedies):
            return v, None
        return v, v.remedies[row.remedy]
