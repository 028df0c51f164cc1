"""The fast paint: infertop's uses of Textual's and Rich's private internals, each checked before use.

Four pieces build on internals that any Textual release may change:

- ``driver``: the cell-diffing driver (:mod:`.driver`), which sends the terminal only the cells that
  changed (5,147 → 1,105 bytes/s at 6 engines). It sits on Textual's driver hook (``App.driver_class``,
  ``LinuxDriver.write``); only POSIX terminals.
- ``compositor``: :class:`.compositor.ChangedOnlyCompositor`, a subclass of ``textual._compositor``'s
  Compositor holding a copy of 8.2's ``_render_chops``, which renders only the widgets a frame changed.
- ``direct_lines``: :class:`.direct_lines.DirectLines` painting line widgets without Textual's
  styles cache and adding a repainted widget to ``screen._dirty_widgets`` itself; ``one_frame``.
- ``lean_table``: :class:`.lean.LeanTable` re-rendering only the changed cells of a DataTable
  through its private caches and row maps.

:func:`install` checks each piece's internals (attributes and signatures present; Textual and Rich in
the tested range for those that copy or patch Textual's code), turns on the pieces that pass, logs which
are on and why others are off, and leaves the rest to stock Textual. ``INFERTOP_FAST_PAINT=0`` turns
every piece off, ``INFERTOP_FAST_PAINT=-lean_table`` one of them, ``=driver,compositor`` all but those. Widgets ask :func:`enabled` for their app; an app :func:`install` never saw gets what
the checks give for this Textual and the environment.
"""

from __future__ import annotations

import inspect
import logging
import os
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

log = logging.getLogger(__name__)

ENV = "INFERTOP_FAST_PAINT"
DRIVER, COMPOSITOR, DIRECT_LINES, LEAN_TABLE = "driver", "compositor", "direct_lines", "lean_table"
PIECES = (DRIVER, COMPOSITOR, DIRECT_LINES, LEAN_TABLE)
# the minors the copied and patched internals were checked against (pyproject pins the same)
TESTED = {"textual": (8, 2), "rich": (15, 0)}
UNKNOWN = object()  # what active_ansi_theme returns where this Textual has no active-app context


@dataclass(frozen=True)
class Internals:
    """The private objects the pieces build on; :func:`real_internals` imports them (None: missing).
    Tests pass one with a class lacking an attribute to see the piece that needs it fall back."""

    textual_version: str | None
    rich_version: str | None
    compositor: Any = None  # textual._compositor.Compositor
    chops_update: Any = None  # textual._compositor.ChopsUpdate
    screen: Any = None  # textual.screen.Screen
    widget: Any = None  # textual.widget.Widget
    data_table: Any = None  # textual.widgets.DataTable
    linux_driver: Any = None  # textual.drivers.linux_driver.LinuxDriver
    strip: Any = None  # textual.strip.Strip
    posix: bool = True


@dataclass(frozen=True)
class Pieces:
    """Which pieces are on, and why each other one is off."""

    on: frozenset[str]
    off: Mapping[str, str] = field(default_factory=dict)  # piece → the reason

    def __contains__(self, piece: object) -> bool:
        return piece in self.on

    def summary(self) -> str:
        on = ", ".join(p for p in PIECES if p in self.on) or "none"
        off = "; ".join(f"{p} ({self.off[p]})" for p in PIECES if p in self.off)
        return f"fast paint on: {on}" + (f"; off: {off}" if off else "")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def real_internals() -> Internals:
    """The installed Textual's and Rich's objects, each None where it cannot be imported."""
    def load(module: str, name: str) -> Any:
        try:
            return getattr(__import__(module, fromlist=[name]), name)
        except (ImportError, AttributeError):
            return None

    return Internals(
        textual_version=_version("textual"), rich_version=_version("rich"),
        compositor=load("textual._compositor", "Compositor"),
        chops_update=load("textual._compositor", "ChopsUpdate"),
        screen=load("textual.screen", "Screen"), widget=load("textual.widget", "Widget"),
        data_table=load("textual.widgets", "DataTable"),
        linux_driver=load("textual.drivers.linux_driver", "LinuxDriver") if os.name == "posix" else None,
        strip=load("textual.strip", "Strip"), posix=os.name == "posix")


# ----- the checks -----------------------------------------------------------------------------------

def _params(func: Any) -> list[str] | None:
    try:
        return list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return None


def _missing(obj: Any, names: tuple[str, ...]) -> str | None:
    """The first of ``names`` that ``obj`` lacks (as ``Type.name``); None when it has them all."""
    for name in names:
        if not hasattr(obj, name):
            return f"{getattr(obj, '__name__', type(obj).__name__)}.{name} missing"
    return None


def _probe(cls: Any) -> Any:
    """An instance of ``cls`` (Textual widgets can be made outside an app), to see its instance attributes."""
    try:
        return cls()
    except Exception:  # noqa: BLE001 — any failure means the piece cannot be checked: off
        return None


def _in_range(internals: Internals) -> str | None:
    for dist, version in (("textual", internals.textual_version), ("rich", internals.rich_version)):
        want = TESTED[dist]
        try:
            got = tuple(int(part) for part in (version or "").split(".")[:2])
        except ValueError:
            got = ()
        if got != want:
            return f"{dist} {version} is not the tested {want[0]}.{want[1]}"
    return None


def _check_driver(i: Internals) -> str | None:
    if not i.posix or i.linux_driver is None:
        return "no POSIX terminal driver"
    return (_missing(i.linux_driver, ("write", "start_application_mode"))
            or _missing(i.strip, ("render_ansi",)))


def _check_compositor(i: Internals) -> str | None:
    if i.compositor is None or i.chops_update is None or i.screen is None:
        return "textual._compositor not importable"
    reason = (_missing(i.compositor, ("_render_chops", "_get_renders", "render_partial_update", "visible_widgets",
                                      "cuts"))
              or _missing(i.strip, ("render", "render_style", "crop", "divide", "cell_length")))
    if reason:
        return reason
    for func, want in ((i.compositor._render_chops, ["self", "crop", "is_rendered_line"]),
                       (i.compositor._get_renders, ["self", "crop"]),
                       (i.chops_update.__init__, ["self", "chops", "spans", "chop_ends"])):
        if _params(func) != want:
            return f"{func.__qualname__} takes {_params(func)}, not {want}"
    probe = _probe(i.compositor)
    if probe is None or not hasattr(probe, "_dirty_regions"):
        return "Compositor()._dirty_regions missing"
    screen = _probe(i.screen)
    if screen is None or type(getattr(screen, "_compositor", None)) is not i.compositor:
        return "Screen()._compositor is not a Compositor"
    return None


def _check_direct_lines(i: Internals) -> str | None:
    if i.screen is None or i.widget is None:
        return "textual.screen not importable"
    reason = (_missing(i.screen, ("_compositor_refresh", "check_idle"))
              or _missing(i.widget, ("_set_dirty", "clear_cached_dimensions", "get_line_filters", "render_lines")))
    if reason:
        return reason
    screen = _probe(i.screen)
    if screen is None:
        return "Screen() cannot be made"
    reason = (_missing(screen, ("_dirty_widgets", "_compositor", "_layout_required", "_scroll_required",
                                "_repaint_required", "_recompose_required", "_is_mounted", "_closing",
                                "_parent", "_layout_cache", "_rich_style_cache"))
              or _missing(screen.styles, ("_cache_key",))
              or _missing(screen._compositor, ("update_widgets", "__contains__")))
    if reason is None and not isinstance(screen._dirty_widgets, set):
        reason = "Screen._dirty_widgets is not a set"
    return reason


_TABLE_ATTRS = ("_row_locations", "_column_locations", "_cell_render_cache", "_row_render_cache",
                "_row_renderable_cache", "_line_cache", "_data", "_new_rows", "_updated_cells", "_update_count",
                "_show_hover_cursor", "_pseudo_class_state")


def _check_lean_table(i: Internals) -> str | None:
    if i.data_table is None:
        return "textual.widgets.DataTable not importable"
    table = i.data_table
    reason = _missing(table, ("_render_cell", "_get_styles_to_render_cell", "_get_offsets", "_get_cell_region",
                              "_refresh_region", "update_cell", "ordered_rows"))
    if reason:
        return reason
    want = ["self", "row_index", "column_index", "base_style", "width", "cursor", "hover"]
    if _params(table._render_cell) != want:
        return f"DataTable._render_cell takes {_params(table._render_cell)}, not {want}"
    if len(_params(table._get_styles_to_render_cell) or ()) != 10:
        return "DataTable._get_styles_to_render_cell has another signature"
    probe = _probe(table)
    if probe is None:
        return "DataTable() cannot be made"
    reason = _missing(probe, _TABLE_ATTRS)
    if reason is None:
        for name in ("_cell_render_cache", "_row_render_cache", "_row_renderable_cache", "_line_cache"):
            reason = reason or _missing(getattr(probe, name), ("keys", "discard"))
        reason = reason or _missing(probe._row_locations, ("get", "get_key"))
    return reason


_CHECKS = {DRIVER: (_check_driver, False), COMPOSITOR: (_check_compositor, True),
           DIRECT_LINES: (_check_direct_lines, True), LEAN_TABLE: (_check_lean_table, True)}


def _asked_off(value: str) -> dict[str, str]:
    """The pieces INFERTOP_FAST_PAINT turns off, with the reason: ``0`` (off, no, false) every piece;
    ``1`` or empty none; else a comma list — ``-lean_table`` turns that piece off, a bare name keeps only
    the pieces named (``driver,compositor``). A name that is no piece is ignored (a typo keeps the
    pieces on rather than turning all of them off)."""
    value = value.strip().lower()
    if value in ("0", "off", "no", "false"):
        return {p: f"{ENV}=0" for p in PIECES}
    names = [n.strip() for n in value.split(",") if n.strip() and n.strip() not in ("1", "on", "yes", "true")]
    dropped = {n[1:] for n in names if n.startswith("-")}
    kept = {n for n in names if n in PIECES}
    return {p: f"{ENV}={value}" for p in PIECES if p in dropped or (kept and p not in kept)}


def check(internals: Internals, environ: Mapping[str, str]) -> Pieces:
    """The pieces whose internals are as checked and that INFERTOP_FAST_PAINT does not turn off
    (:func:`_asked_off`)."""
    asked_off = _asked_off(environ.get(ENV, "1"))
    if len(asked_off) == len(PIECES):
        return Pieces(frozenset(), asked_off)
    out_of_range = _in_range(internals)
    on, off = set(), dict(asked_off)
    for piece, (check_piece, pinned) in _CHECKS.items():
        if piece in asked_off:
            continue
        try:
            reason = (out_of_range if pinned else None) or check_piece(internals)
        except Exception as exc:  # noqa: BLE001 — a check that breaks means the internals differ
            reason = f"check failed: {type(exc).__name__}: {exc}"
        if reason is None:
            on.add(piece)
        else:
            off[piece] = reason
    return Pieces(frozenset(on), off)


# ----- what the app and its widgets ask -------------------------------------------------------------

_BY_APP: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # app → its Pieces
_DEFAULT: dict[str, Pieces] = {}  # the env's value → the pieces of an app install() never saw


def _default() -> Pieces:
    value = os.environ.get(ENV, "1")
    got = _DEFAULT.get(value)
    if got is None:
        got = _DEFAULT[value] = check(real_internals(), os.environ)
    return got


def install(app: Any, internals: Internals | None = None, environ: Mapping[str, str] | None = None) -> Pieces:
    """Check the internals, turn on the pieces that pass for ``app`` (its driver class among them) and log
    which are on. Call after ``App.__init__``, before the app runs."""
    internals = internals or real_internals()
    pieces = check(internals, os.environ if environ is None else environ)
    _BY_APP[app] = pieces
    if DRIVER in pieces:
        from .driver import driver_class

        if getattr(app, "driver_class", None) is internals.linux_driver:  # not another choice (TEXTUAL_DRIVER, Windows)
            app.driver_class = driver_class()
    log.info(pieces.summary())
    return pieces


def pieces_for(app: Any) -> Pieces:
    """The pieces on for ``app``."""
    try:
        return _BY_APP.get(app) or _default()
    except TypeError:  # not weak-referenceable: not an app
        return _default()


def enabled(app: Any, piece: str) -> bool:
    """Whether ``piece`` is on for ``app``."""
    return piece in pieces_for(app)


def fit_screen(screen: Any) -> None:
    """Give ``screen`` the changed-only compositor when that piece is on for its app (in its ``__init__``)."""
    try:
        app = screen.app
    except Exception:  # noqa: BLE001 — no active app (made outside one): the default pieces
        app = None
    if COMPOSITOR not in pieces_for(app):
        return
    from textual._compositor import Compositor

    from .compositor import ChangedOnlyCompositor

    if type(getattr(screen, "_compositor", None)) is Compositor:
        screen._compositor = ChangedOnlyCompositor()


def styles_key(styles: Any) -> object | None:
    """The key Textual bumps on every change of ``styles`` (None where this Textual has none: read them every time)."""
    return getattr(styles, "_cache_key", None)


def active_ansi_theme() -> object:
    """The running app's ``ansi_theme``; None outside an app; :data:`UNKNOWN` where it cannot be told."""
    try:
        from textual._context import active_app
    except ImportError:
        return UNKNOWN
    try:
        return active_app.get().ansi_theme
    except LookupError:
        return None
    except AttributeError:
        return UNKNOWN
