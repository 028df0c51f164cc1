"""Load Textual themes from ``themes/*.yaml``."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from textual.color import Color
from textual.theme import Theme

from ..config_load import ConfigError, Limits, one_line, read_file

# A theme is a dozen colours: anything near these limits is not one (an alias bomb is refused).
THEME_LIMITS = Limits(max_bytes=256 * 2**10, max_depth=8, max_nodes=10_000, max_scalar_chars=4096)

_FIELDS = {"name", "primary", "secondary", "warning", "error", "success", "accent", "foreground",
           "background", "surface", "panel", "boost", "dark", "variables"}
_COLOUR_FIELDS = _FIELDS - {"name", "dark", "variables"}


def theme_dirs() -> list[Path]:
    """User themes first, then the shipped ones: the top-level themes/, installed inside the
    package as ``infertop.themes`` (setup.py; an editable install maps it to the checkout's)."""
    dirs = []
    cfg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    dirs.append(Path(cfg) / "infertop" / "themes")
    dirs.append(_shipped_dir())
    return dirs


def _shipped_dir() -> Path:
    # a namespace package (no __init__.py in themes/): its folder is its one search location
    spec = importlib.util.find_spec("infertop.themes")
    places = list(spec.submodule_search_locations or ()) if spec is not None else []
    return Path(places[0]) if places else Path(__file__).resolve().parents[2] / "themes"  # an uninstalled tree


def load_themes() -> tuple[list[Theme], list[str]]:
    """(themes, problems). A broken theme file is reported, never fatal."""
    themes: dict[str, Theme] = {}
    problems: list[str] = []
    for d in reversed(theme_dirs()):  # earlier dirs override later ones
        if not d.is_dir():
            continue
        for f in sorted(d.glob("*.yaml")):
            try:
                theme = _load(f)
            except Exception as e:  # noqa: BLE001
                problems.append(_problem(f, e))
            else:
                themes[theme.name] = theme
    return list(themes.values()), problems


def _load(f: Path) -> Theme:
    """The theme in ``f``; raises (ValueError for a field that is wrong, naming it)."""
    data = read_file(f, THEME_LIMITS) or {}
    if not isinstance(data, dict):
        raise ValueError("not a mapping")
    unknown = set(data) - _FIELDS
    if unknown:
        raise ValueError(f"unknown field {sorted(unknown)[0]!r}")
    for name in sorted(set(data) & _COLOUR_FIELDS):
        try:  # Theme() takes any string; a bad one raised at paint time (exit 70)
            Color.parse(data[name])
        except Exception:  # noqa: BLE001 — ColorParseError, or not a string at all
            raise ValueError(f"field {name!r}: not a colour: {str(data[name])[:40]!r}") from None
    data.setdefault("name", f.stem)
    return Theme(**data)


def _problem(f: Path, e: Exception) -> str:
    """One line: ``theme FILE:LINE: why`` for the YAML itself (its error names file and line)."""
    if isinstance(e, ConfigError):
        return f"theme {one_line(str(e), 400)}"
    return f"theme {f}: {one_line(str(e), 200)}"


def broken_theme(wanted: str) -> str | None:
    """One line on why the theme file named ``wanted`` cannot be used; None when it can
    (or when no file has that name: a built-in theme)."""
    for d in theme_dirs():  # the first file found is the one that counts
        f = d / f"{wanted}.yaml"
        if f.is_file():
            try:
                _load(f)
            except Exception as e:  # noqa: BLE001
                return _problem(f, e)
            return None
    return None
