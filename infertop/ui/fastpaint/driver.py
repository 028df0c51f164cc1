"""Send the terminal only the cells that changed, as curses does.

Textual rewrites every dirty widget line in full, with a 24-bit colour escape
per segment and a reset after each: a tile going from 116ms to 117ms costs its
whole width. :class:`CellDiff` keeps a model of what the terminal shows; each
frame the app writes is parsed into cells and only the cells whose character
or style changed are sent, with one SGR per change of style. Other escape
sequences go out in order; after one that may change the screen (an erase, the
alternate screen, a scroll) the model is forgotten, and so is it before a frame
that repaints every row (a resize, another screen): that frame goes out whole.

:func:`driver_class` wraps Textual's LinuxDriver with it (POSIX terminals only);
:func:`.fastpaint.install` makes it the app's driver when its checks pass.
"""

from __future__ import annotations

import os
import re
import weakref
from collections.abc import Callable
from itertools import groupby
from operator import itemgetter
from typing import cast

from rich.cells import cell_len
from textual.strip import Strip

CUP = re.compile(r"\x1b\[(\d*)(?:;(\d*))?H")
# The tokens of what the app writes, in one pass, each told by the group it matched (Match.lastindex):
# 1-2 a cursor move (row; column), 3 an SGR's parameters, 4 text, 5 any other sequence or control character
_TOKENS = re.compile(r"\x1b\[(\d*)(?:;(\d*))?H|\x1b\[([0-9;:]*)m|([^\x00-\x1f\x1b]+)"
                     r"|(\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()*+].|\x1b[^\[\]]|[\x00-\x1f])")
GAP = 6  # rewrite up to this many unchanged cells rather than move the cursor over them
# CSI finals that may move or clear cells the model cannot follow: erase, scroll region, scroll, insert/delete
FORGET_CSI = ("J", "K", "r", "S", "T", "L", "M", "P", "@", "X")

Cell = tuple[str, tuple]  # (text, SGR parameters since the last reset)

# characters known to take one cell: printable ASCII, then each other one once measured so (bars, box
# lines, ≤, ✓): a text of them is written to the model by slices, without measuring each character
_ONE_CELL: set[str] = {chr(c) for c in range(0x20, 0x7F)}
_MOST_ONE_CELL = 8192  # what a stream of odd characters can make it hold
_first, _second = itemgetter(0), itemgetter(1)
# console → the model its driver diffs against: a partial update writes its cells into it directly
_MODELS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def cell_model(console: object) -> CellDiff | None:
    """The terminal model the cell-diffing driver keeps for ``console``'s app (None: no such driver)."""
    return _MODELS.get(console)


def one_cell_each(text: str) -> bool:
    """Whether each character of ``text`` takes one cell (checked in one set operation once known)."""
    if _ONE_CELL.issuperset(text):
        return True
    for ch in set(text) - _ONE_CELL:
        if cell_len(ch) != 1:
            return False
        if len(_ONE_CELL) < _MOST_ONE_CELL:
            _ONE_CELL.add(ch)
    return True


class CellDiff:
    """The model of one terminal screen, and the bytes that bring it to each new frame.

    Each row is two lists, its characters and their styles (None: not known), for the app's writes
    (``_chars``, ``_styles``) and for what the terminal shows (``_shown_chars``, ``_shown_styles``):
    a text of one-cell characters goes in as two slice assignments and a row's written span is
    compared with the terminal's in C, so only changed cells cost Python steps."""

    def __init__(self, cols: int, rows: int) -> None:
        self.resize(cols, rows)

    def resize(self, cols: int, rows: int) -> None:
        """A new size: what the terminal shows is unknown, so the next frame is sent in full."""
        self.cols, self.rows = cols, rows
        self._chars: list[list[str | None]] = [[None] * cols for _ in range(rows)]  # what the app wrote
        self._styles: list[list[tuple | None]] = [[None] * cols for _ in range(rows)]
        self.r = self.c = 0  # the app's cursor
        self.style: tuple = ()  # the app's SGR since its last reset
        self._pending: dict[int, list[int]] = {}  # spans written by write_segments, sent by the next frame
        # when a list: the partial updates written as cells also add the text they stand for (tests compare)
        self.shadow: list[str] | None = None
        self.forget()

    def forget(self) -> None:
        self._shown_chars: list[list[str | None]] = [[None] * self.cols for _ in range(self.rows)]
        self._shown_styles: list[list[tuple | None]] = [[None] * self.cols for _ in range(self.rows)]
        self.term_r = self.term_c = -1  # the terminal's cursor (unknown)
        self.term_style: tuple | None = None

    @property
    def want(self) -> list[list[Cell | None]]:
        """What the app wrote, cell by cell: (text, SGR parameters) or None (never written)."""
        return [[None if ch is None else cast(Cell, (ch, st)) for ch, st in zip(chars, styles)]  # written together
                for chars, styles in zip(self._chars, self._styles)]

    # ----- what the app writes ------------------------------------------------------
    def frame(self, data: str) -> str:
        """The bytes to send for ``data`` (one write of the app)."""
        if len({m.group(1) for m in CUP.finditer(data)}) >= self.rows:
            self.forget()  # every row repainted (a resize, a screen switch): send it as painted
        out: list[str] = []
        dirty = self._pending  # row → [first, last + 1) of the columns written to it
        self._pending = {}
        last_row = self.rows - 1
        for m in _TOKENS.finditer(data):
            kind = m.lastindex
            if kind == 4:
                self._text(m.group(4), dirty)
            elif kind == 3:
                self._sgr(m.group(3))
            elif kind != 5:  # a cursor move
                row, col = m.group(1, 2)
                self._move(int(row or 1) - 1, int(col or 1) - 1)
            else:
                tok = m.group(5)
                if tok == "\r":
                    self.c = 0
                    continue
                if tok == "\n":
                    self.r = min(self.r + 1, last_row)
                    continue
                # Anything else goes out in order, after the cells written before it.
                self._flush(dirty, out)
                dirty.clear()
                if self.term_style != self.style:  # an erase fills with the current background
                    out.append(_sgr(self.style))
                    self.term_style = self.style
                out.append(tok)
                if tok.startswith("\x1b[") and tok.endswith(FORGET_CSI) or tok in ("\x1bc", "\x1bM"):
                    self.forget()
                elif tok.startswith("\x1b[?") and tok[-1] in "hl" and ("1049" in tok or "47" in tok):
                    self.forget()  # the alternate screen starts blank
        self._flush(dirty, out)
        if (self.term_r, self.term_c) != (self.r, self.c):  # where the app left its cursor
            out.append(f"\x1b[{self.r + 1};{self.c + 1}H")
            self.term_r, self.term_c = self.r, self.c
        return "".join(out)

    def write_segments(self, y: int, x: int, segments, color_system) -> None:
        """What ``\x1b[y+1;x+1H`` and ``Strip(segments).render()`` would write, put straight into the
        model: no escape sequences made to be parsed again. The next :meth:`frame` sends the cells
        that changed. Segments with a link or a control code are not for this (write their text)."""
        self._move(y, x)
        pending = self._pending
        render_ansi = Strip.render_ansi
        for text, style, _ in segments:
            ansi = None if style is None else render_ansi(style, color_system)  # cached by Textual
            if not ansi:  # no SGR: written in the current one, as Strip.render writes it
                if text:
                    self._text(text, pending)
                continue
            self._sgr(ansi)  # "\x1b[{ansi}m{text}\x1b[0m", as frame() reads it
            if text:
                self._text(text, pending)
            self.style = ()

    def _sgr(self, params: str) -> None:
        """The app's style after it writes ``\x1b[{params}m``."""
        if params in ("", "0"):
            self.style = ()
        elif params.startswith("0;"):
            self.style = (params[2:],)
        else:
            self.style = self.style + (params,)

    def _move(self, row: int, col: int) -> None:
        """The app's cursor moved to (row, col), 0-based, kept on the screen."""
        self.r = min(max(row, 0), self.rows - 1)
        self.c = min(max(col, 0), self.cols - 1)

    def line_feed(self) -> None:
        """What a written newline does to the app's cursor."""
        self.r = min(self.r + 1, self.rows - 1)

    def _text(self, text: str, dirty: dict[int, list[int]]) -> None:
        r, start = self.r, self.c
        chars, styles = self._chars[r], self._styles[r]
        style = self.style
        span = dirty.get(r)
        if span is None:
            span = dirty[r] = [start, start]
        elif start < span[0]:
            span[0] = start
        if one_cell_each(text):  # one cell per character: written by slices
            n = min(len(text), self.cols - start)
            end = start + n
            chars[start:end] = text[:n]
            styles[start:end] = [style] * n
            self.c = end
            if end > span[1]:
                span[1] = end
            return
        if start > 0:
            span[0] = min(span[0], start - 1)  # a combining mark may join the cell before
        c = start
        for ch in text:
            w = cell_len(ch)
            if w == 0:  # a combining mark joins the previous cell
                joined = chars[c - 1] if c > 0 else None
                if joined is not None:
                    chars[c - 1] = joined + ch
                    styles[c - 1] = style
                continue
            if c + w > self.cols:
                break
            chars[c], styles[c] = ch, style
            if w == 2:
                chars[c + 1], styles[c + 1] = "", style  # the right half of a wide character
            c += w
        self.c = c
        span[1] = max(span[1], c)

    # ----- what the terminal needs --------------------------------------------------
    def _flush(self, dirty: dict[int, list[int]], out: list[str]) -> None:
        cols = self.cols
        for r in sorted(dirty):
            chars, styles = self._chars[r], self._styles[r]
            shown_chars, shown_styles = self._shown_chars[r], self._shown_styles[r]
            lo, hi = dirty[r]  # only what was written can differ from what the terminal shows
            if chars[lo:hi] == shown_chars[lo:hi] and styles[lo:hi] == shown_styles[lo:hi]:
                continue  # (most spans of a frame): compared in C
            changed = [c for c in range(lo, hi)
                       if chars[c] is not None and (chars[c] != shown_chars[c] or styles[c] != shown_styles[c])]
            if not changed:
                continue
            runs: list[list[int]] = [[changed[0], changed[0]]]
            for c in changed[1:]:
                if c - runs[-1][1] <= GAP and None not in chars[runs[-1][1]:c]:
                    runs[-1][1] = c
                else:
                    runs.append([c, c])
            for start, end in runs:
                if chars[start] == "" and start > 0:  # begin at the left half of a wide character
                    start -= 1
                if (self.term_r, self.term_c) != (r, start):
                    out.append(f"\x1b[{r + 1};{start + 1}H")
                term_style = self.term_style
                stop = end + 1
                run_chars = chars[start:stop]
                if _ONE_CELL.issuperset(run_chars):  # (the usual run) each cell one character: by style
                    run_styles = styles[start:stop]
                    for style, cells in groupby(zip(run_styles, run_chars), key=_first):
                        if style != term_style:
                            out.append(_sgr(style))
                            term_style = style
                        out.append("".join(map(_second, cells)))
                    shown_chars[start:stop] = run_chars
                    shown_styles[start:stop] = run_styles
                    self.term_style = term_style
                    self.term_r, self.term_c = (r, stop) if stop < cols else (-1, -1)
                    continue
                c = start
                while c <= end:
                    ch, style = chars[c], styles[c]
                    assert ch is not None  # a run holds written cells only (see how runs are made above)
                    if style != term_style:
                        out.append(_sgr(style))
                        term_style = style
                    out.append(ch)
                    shown_chars[c], shown_styles[c] = ch, style
                    c += 1
                    if ch and ch not in _ONE_CELL and cell_len(ch) == 2 and c < cols:
                        shown_chars[c], shown_styles[c] = chars[c], styles[c]
                        c += 1
                self.term_style = term_style
                self.term_r, self.term_c = r, c
                if c >= cols:
                    self.term_r = self.term_c = -1  # a pending wrap: where the cursor is, is unclear


def _sgr(style: tuple | None) -> str:
    """The SGR sequence setting ``style`` (none or empty: the default style)."""
    return "\x1b[0;" + ";".join(style) + "m" if style else "\x1b[0m"


def driver_class(on_frame: Callable[[str, str, int, int], None] | None = None):
    """Textual's LinuxDriver whose writes go through :class:`CellDiff`.
    ``on_frame(written, sent, cols, rows)`` sees each write (tests replay both)."""
    from textual.drivers.linux_driver import LinuxDriver

    class CellDiffDriver(LinuxDriver):
        _diff: CellDiff | None = None

        def start_application_mode(self) -> None:
            self._diff = None  # after a suspend the terminal shows something else
            super().start_application_mode()

        def write(self, data: str) -> None:
            try:
                size = os.get_terminal_size(self.fileno)
                cols, rows = size.columns, size.lines
            except OSError:  # not a terminal: nothing to diff against
                cols = rows = 0
            if not (cols and rows):  # no terminal, or one that reports no size (0x0): sent as written
                super().write(data)
                return
            diff = self._diff
            if diff is None or (diff.cols, diff.rows) != (cols, rows):
                diff = self._diff = CellDiff(cols, rows)
                app = getattr(self, "_app", None)  # Driver keeps its app there; without it frames go as text
                if app is not None:
                    _MODELS[app.console] = diff  # partial updates write their cells into it
                if on_frame is not None:
                    diff.shadow = []
            written = data
            if diff.shadow:  # what the partial update wrote as cells, as text (for on_frame)
                written = "".join(diff.shadow) + data
                diff.shadow.clear()
            sent = diff.frame(data)
            if on_frame is not None:
                on_frame(written, sent, cols, rows)
            if sent:
                super().write(sent)

    return CellDiffDriver
