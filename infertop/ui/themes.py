"""Load Textual themes from ``themes/*.yaml``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml
from textual.theme import Theme

_FIELDS = {"name", "primary", "secondary", "warning", "error", "success", "accent", "foreground",
           "background", "surface", "panel", "boost", "dark", "variables"}


def theme_dirs() -> list[Path]:
    """User themes first, then the repo's themes/, then an installed copy."""
    dirs = []
    cfg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    dirs.append(Path(cfg) / "infertop" / "themes")
    dirs.append(Path(__file__).resolve().parents[2] / "themes")
    dirs.append(Path(sys.prefix) / "share" / "infertop" / "themes")
    return dirs


def load_themes() -> tuple[list[Theme], list[str]]:
    """(themes, problems). A broken theme file is reported, never fatal."""
    themes: dict[str, Theme] = {}
    problems: list[str] = []
    for d in reversed(theme_dirs()):  # earlier dirs override later ones
        if not d.is_dir():
            continue
        for f in sorted(d.glob("*.yaml")):
            try:
                data = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
                if not isinstance(data, dict):
                    raise ValueError("not a mapping")
                unknown = set(data) - _FIELDS
                if unknown:
                    raise ValueError(f"unknown field {sorted(unknown)[0]!r}")
                data.setdefault("name", f.stem)
                themes[data["name"]] = Theme(**data)
            except Exception as e:  # noqa: BLE001
                problems.append(f"theme {f}: {e}")
    return list(themes.values()), problems
