"""Input dialogs for Kubernetes actions: a small form (replicas, args, HPA
min/max, ConfigMap key) and a chooser (context, namespace, drain follow-up).

They only collect what the operator wants; the exact change is shown, dry-run
and confirmed afterwards in :class:`~infertop.ui.screens.confirm.ConfirmScreen`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option

_CSS = """
{name} {{ align: center middle; }}
{name} > Vertical {{ width: 90; max-width: 100%; height: auto; max-height: 100%;
    border: round $primary; background: $surface; padding: 0 1; overflow-y: auto; }}
{name} .title {{ text-style: bold; padding: 0 0 1 0; }}
{name} .hint {{ color: $text-muted; }}
{name} .error {{ color: $error; }}
{name} Label {{ padding: 1 0 0 0; }}
{name} OptionList {{ height: auto; max-height: 16; }}
"""


# editing keys an OrderedInput handles itself: key → Input action
_EDIT_KEYS = {"backspace": "delete_left", "delete": "delete_right", "left": "cursor_left",
              "right": "cursor_right", "home": "home", "end": "end"}


class OrderedInput(Input):
    """An Input whose editing keys act in the order they were typed.

    Textual (8.2) inserts a printable key in the Input's own key handler, but runs Backspace, Delete and the
    arrows through bindings only once the key event has bubbled up to the App — after the keys that came in
    the same terminal read were already inserted: "9 ⌫ 1 0" typed fast gave "91", not "10". Handling them
    here keeps them in the Input's queue, in order. Enter with a ``next_field`` moves the focus there at
    once, and the keys already queued here follow it ("2 ⏎ 9" in one read: 2 here, 9 there — not "29")."""

    next_field: "OrderedInput | None" = None  # where Enter goes (None: Enter submits)
    _forward_to: "OrderedInput | None" = None  # keys that reach this field after Enter moved the focus on

    async def _on_key(self, event: events.Key) -> None:
        if self._forward_to is not None and self.screen.focused is not self:  # has_focus lags (a Blur event)
            event.stop()
            event.prevent_default()
            self._forward_to.post_message(events.Key(event.key, event.character))
            return
        if event.key == "enter" and self.next_field is not None:
            event.stop()
            event.prevent_default()
            self._forward_to = self.next_field
            self.screen.set_focus(self.next_field)
            return
        action = _EDIT_KEYS.get(event.key)
        if action is None:
            await super()._on_key(event)
            return
        event.stop()
        event.prevent_default()
        self._restart_blink()
        getattr(self, f"action_{action}")()

    def _on_focus(self, event: events.Focus) -> None:
        self._forward_to = None  # back here: keys are this field's again
        super()._on_focus(event)


@dataclass(frozen=True)
class FormField:
    id: str
    label: str
    value: str = ""
    placeholder: str = ""
    type: str = "text"  # text, integer


class FormDialog(ModalScreen[dict | None]):
    """A few labelled inputs; Enter in the last one submits (after ``validate``), Esc cancels."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", show=False)]
    DEFAULT_CSS = _CSS.format(name="FormDialog")

    def __init__(self, title: str, fields: Iterable[FormField], *, context: str = "", hint: str = "",
                 validate: Callable[[dict], str | None] | None = None) -> None:
        super().__init__()
        self.title_text = title
        self.fields = list(fields)
        self.context_text = context
        self.hint = hint
        self.validate = validate

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.title_text, classes="title", markup=False)
            if self.context_text:
                yield Static(self.context_text, markup=False)
            for f in self.fields:
                yield Label(f.label)
                yield OrderedInput(value=f.value, placeholder=f.placeholder, id=f"field-{f.id}",
                                   type="integer" if f.type == "integer" else "text")
            yield Static("", id="form-error", classes="error", markup=False)
            if self.hint:
                yield Static(self.hint, classes="hint", markup=False)

    def on_mount(self) -> None:
        inputs = [self.query_one(f"#field-{f.id}", OrderedInput) for f in self.fields]
        for here, after in zip(inputs, inputs[1:]):
            here.next_field = after  # Enter moves on, in order with the keys typed after it
        if inputs:
            inputs[0].focus()

    def values(self) -> dict[str, int | str | None]:
        """Each field's value: an integer field's as an int (None when empty; the raw text when it is no
        number, for the plan to refuse by name)."""
        out: dict[str, int | str | None] = {}
        for f in self.fields:
            raw = self.query_one(f"#field-{f.id}", Input).value.strip()
            if f.type == "integer":
                try:
                    out[f.id] = int(raw) if raw else None
                except ValueError:
                    out[f.id] = raw
            else:
                out[f.id] = raw
        return out

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        ids = [f"field-{f.id}" for f in self.fields]
        i = ids.index(event.input.id) if event.input.id in ids else len(ids) - 1
        if i < len(ids) - 1:
            self.query_one(f"#{ids[i + 1]}", Input).focus()
            return
        self.submit()

    def submit(self) -> None:
        vals = self.values()
        problem = self.validate(vals) if self.validate else None
        if problem:
            self.query_one("#form-error", Static).update(Text(problem))
            return
        self.dismiss(vals)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ChoiceDialog(ModalScreen[str | None]):
    """Pick one option (Enter); Esc cancels."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", show=False)]
    DEFAULT_CSS = _CSS.format(name="ChoiceDialog")

    def __init__(self, title: str, options: Iterable[tuple[str, str]], *, current: str | None = None,
                 hint: str = "") -> None:
        super().__init__()
        self.title_text = title
        self.options = list(options)
        self.current = current
        self.hint = hint

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.title_text, classes="title", markup=False)
            yield OptionList(*(Option(label + ("  (current)" if oid == self.current else ""), id=oid)
                               for oid, label in self.options), id="choices")
            if self.hint:
                yield Static(self.hint, classes="hint", markup=False)

    def on_mount(self) -> None:
        ol = self.query_one(OptionList)
        ol.focus()
        ids = [oid for oid, _ in self.options]
        if self.current in ids:
            ol.highlighted = ids.index(self.current)
        elif ids:
            ol.highlighted = 0

    @on(OptionList.OptionSelected)
    def _picked(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ReviewDialog(ModalScreen[bool]):
    """What a form would change, one line each: ``y`` applies, ``n``/Esc discards. Enter does neither, so
    an Enter typed for the form and delivered late never applies anything."""

    BINDINGS = [Binding("y", "apply", "Apply", show=False), Binding("n", "discard", "Discard", show=False),
                Binding("escape", "discard", "Discard", show=False)]
    DEFAULT_CSS = _CSS.format(name="ReviewDialog")

    def __init__(self, title: str, lines: Iterable[str], hint: str = "y applies · n or Esc discards") -> None:
        super().__init__()
        self.title_text = title
        self.lines = list(lines)
        self.hint = hint

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.title_text, classes="title", markup=False)
            yield Static("\n".join(self.lines), id="review-lines", markup=False)
            yield Static(self.hint, classes="hint", markup=False)

    def action_apply(self) -> None:
        self.dismiss(True)

    def action_discard(self) -> None:
        self.dismiss(False)


# ----------------------------------------------------------- the dialogs

def _int_at_least(name: str, low: int) -> Callable[[object], str | None]:
    def check(v: object) -> str | None:
        if not isinstance(v, int) or v < low:
            return f"{name} must be a whole number ≥ {low}"
        return None
    return check


def scale_dialog(target: str, current: int | None) -> FormDialog:
    check = _int_at_least("replicas", 0)
    return FormDialog(
        f"Scale {target}",
        [FormField("replicas", f"Replicas (now {current if current is not None else '?'})",
                   str(current if current is not None else ""), "a whole number ≥ 0", "integer")],
        hint="Uses the scale subresource. Enter: preview, dry run and confirm. Esc: cancel. "
             "An HPA on this workload may change it again: edit its bounds with H.",
        validate=lambda v: check(v["replicas"]),
    )


def hpa_dialog(target: str, min_replicas: int | None, max_replicas: int | None) -> FormDialog:
    def validate(v: dict) -> str | None:
        problem = _int_at_least("min", 1)(v["min"]) or _int_at_least("max", 1)(v["max"])
        if problem:
            return problem
        if v["min"] > v["max"]:
            return "min must not exceed max"
        return None

    return FormDialog(
        f"Edit the bounds of {target}",
        [FormField("min", "Min replicas", str(min_replicas or 1), "≥ 1", "integer"),
         FormField("max", "Max replicas", str(max_replicas or ""), "≥ min", "integer")],
        hint="Enter in the last field: preview, dry run and confirm. Esc: cancel.",
        validate=validate,
    )


def args_dialog(target: str, container: str | None, current: Iterable[str]) -> FormDialog:
    import shlex

    now = shlex.join(list(current)) or "(no args)"
    return FormDialog(
        f"Patch the engine args of {target}",
        [FormField("changes", "Change", "", "--max-num-seqs 32   (--flag value sets, !--flag removes, = … replaces all)")],
        context=f"container {container or '?'}: {now}",
        hint="The pod template changes: a rolling update replaces every pod, and infertop follows it until it "
             "completes or is stuck (ImagePullBackOff, CrashLoopBackOff, Pending for lack of GPUs).",
        validate=lambda v: None if v["changes"] else "type a change, e.g. --max-num-seqs 32",
    )


def configmap_dialog(namespace: str, names: list[str], name: str = "", key: str = "", value: str = ""
                     ) -> FormDialog:
    shown = ", ".join(names[:8]) + (" …" if len(names) > 8 else "") if names else "none found"
    return FormDialog(
        f"Patch a ConfigMap key in {namespace}",
        [FormField("name", "ConfigMap", name or (names[0] if names else ""), "name"),
         FormField("key", "Key", key, "e.g. weights.yaml"),
         FormField("value", "New value", value, "the new value of the key")],
        context=f"ConfigMaps here: {shown}",
        hint="Enter in the last field: preview (diff of the data), dry run and confirm. Esc: cancel.",
        validate=lambda v: None if v["name"] and v["key"] else "a ConfigMap name and a key are needed",
    )


def text_dialog(title: str, label: str, value: str = "", hint: str = "") -> FormDialog:
    return FormDialog(title, [FormField("value", label, value)], hint=hint,
                      validate=lambda v: None if v["value"] else f"{label.lower()} is empty")
