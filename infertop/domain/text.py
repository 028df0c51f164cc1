"""Untrusted text made one printable line: the control and format characters that would drive the
terminal or reorder what it shows are escaped visibly (an ESC byte is shown as ``\\x1b``). Pure: the
sanitising boundary (``sources.sanitize``) and the document codec both use it."""

from __future__ import annotations

import re

MAX_LABEL_CHARS = 160  # a label value shown in a table cell or a log line

# C0 controls, DEL, C1 controls, the format characters (Unicode category Cf:
# soft hyphen, zero-width space/joiners, bidi marks, overrides and isolates,
# BOM, tags…) that hide in a name or reorder what a terminal shows, the line and
# paragraph separators, and lone surrogates (which no UTF-8 stdout can encode).
_CONTROL_RE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2"
    "\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    "\ud800-\udfff\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]")


def _visible(m: re.Match[str]) -> str:
    c = ord(m.group(0))
    if c < 0x100:
        return f"\\x{c:02x}"
    return f"\\u{c:04x}" if c < 0x10000 else f"\\U{c:08x}"


def plain_text(value: object, limit: int = MAX_LABEL_CHARS) -> str:
    """One line of printable text: control characters escaped, at most ``limit`` chars."""
    s = value if isinstance(value, str) else str(value)
    if _CONTROL_RE.search(s):
        s = _CONTROL_RE.sub(_visible, s)
    if len(s) > limit:
        s = s[: max(0, limit - 1)] + "…"
    return s


def plain_or_none(value: object, limit: int = MAX_LABEL_CHARS) -> str | None:
    """:func:`plain_text`, keeping ``None`` and turning "" into ``None``."""
    if value is None:
        return None
    s = plain_text(value, limit)
    return s or None
