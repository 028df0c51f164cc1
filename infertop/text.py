"""Untrusted text (label values, error messages, names) made safe to print.

Control characters would drive the terminal (an ESC in a label can set the
title or clear the screen); they are shown as visible escapes instead.
Rendering code also never parses such text as markup (see ``ui``).
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def _escape(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}"


def plain(text: object, limit: int = 500) -> str:
    """``text`` as one printable line: control characters escaped, newlines and
    tabs as spaces, at most ``limit`` characters."""
    s = "" if text is None else str(text)
    s = s.replace("\r\n", " ").replace("\n", " ").replace("\t", " ")
    s = _CONTROL.sub(_escape, s)
    return s if len(s) <= limit else s[: limit - 1] + "…"
