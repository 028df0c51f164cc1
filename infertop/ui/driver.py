"""Send the terminal only the cells that changed, as curses does.

Textual rewrites every dirty widget line in full, with a 24-bit colour escape
per segment and a reset after each: a tile going from 116ms to 117ms costs its
whole width. :class:`CellDiff` keeps a model of what the terminal shows; each
frame the app writes is parsed into cells and only the cells whose character
or style changed are sent, with one SGR per change of style. Other escape
sequences go out in order; after one that may change the screen (an erase, the
alternate screen, a scroll) the model is forgotten, and so is it before a frame
that repaints every row (a resize, another screen): that frame goes out whole.

:func:`driver_class` wraps Textual's LinuxDriver with it (POSIX terminals only).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from rich.cells import cell_len

TOKEN = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()*+].|\x1b[^\[\]]"
                   r"|[\x00-\x1f]|[^\x00-\x1f\x1b]+")
CUP = re.compile(r"\x1b\[(\d*)(?:;(\d*))?H")
SGR = re.compile(r"\x1b\[([0-9;:]*)m")
GAP = 6  # rewrite up to this many unchanged cells rather than move the cursor over them
# CSI finals that may move or clear cells the model cannot follow: erase, scroll region, scroll, insert/delete
FORGET_CSI = ("J", "K", "r", "S", "T", "L", "M", "P", "@", "X")

Cell = tuple[str, tuple]  # (text, SGR parameters since the last reset)


class CellDiff:
    """The model of one terminal screen, and the bytes that bring it to each new frame."""

    def __init__(self, cols: int, rows: int) -> None:
        self.resize(cols, rows)

    def resize(self, cols: int, rows: int) -> None:
        """A new size: what the terminal shows is unknown, so the next frame is sent in full."""
        self.cols, self.rows = cols, rows
        self.want: list[list[Cell | None]] = [[None] * cols for _ in range(rows)]  # what the app wrote
        self.r = self.c = 0  # the app's cursor
        self.style: tuple = ()  # the app's SGR since its last reset
        self.forget()

    def forget(self) -> None:
        self.shown: list[list[Cell | None]] = [[None] * self.cols for _ in range(self.rows)]
        self.term_r = self.term_c = -1  # the terminal's cursor (unknown)
        self.term_style: tuple | None = None

    # ----- what the app writes ------------------------------------------------------
    def frame(self, data: str) -> str:
        """The bytes to send for ``data`` (one write of the app)."""
        if len({m.group(1) for m in CUP.finditer(data)}) >= self.rows:
            self.forget()  # every row repainted (a resize, a screen switch): send it as painted
        out: list[str] = []
        dirty: dict[int, list[int]] = {}  # row → [first, last + 1) of the columns written to it
        for tok in TOKEN.findall(data):
            if tok[0] != "\x1b" and tok[0] >= " ":
                self._text(tok, dirty)
                continue
            last = tok[-1]
            m = CUP.fullmatch(tok) if last == "H" else None
            if m is not None:
                self.r = min(max(int(m.group(1) or 1) - 1, 0), self.rows - 1)
                self.c = min(max(int(m.group(2) or 1) - 1, 0), self.cols - 1)
                continue
            m = SGR.fullmatch(tok) if last == "m" else None
            if m is not None:
                params = m.group(1)
                if params in ("", "0"):
                    self.style = ()
                elif params.startswith("0;"):
                    self.style = (params[2:],)
                else:
                    self.style = self.style + (params,)
                continue
            if tok == "\r":
                self.c = 0
                continue
            if tok == "\n":
                self.r = min(self.r + 1, self.rows - 1)
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

    def _text(self, text: str, dirty: dict[int, list[int]]) -> None:
        row = self.want[self.r]
        style = self.style
        start = self.c
        span = dirty.get(self.r)
        if span is None:
            span = dirty[self.r] = [start, start]
        elif start < span[0]:
            span[0] = start
        if text.isascii() and "\x7f" not in text:  # one cell per character: no width to measure
            n = min(len(text), self.cols - self.c)
            row[self.c:self.c + n] = [(ch, style) for ch in text[:n]]
            self.c += n
            if self.c > span[1]:
                span[1] = self.c
            return
        if start > 0:
            span[0] = min(span[0], start - 1)  # a combining mark may join the cell before
        for ch in text:
            w = cell_len(ch)
            if w == 0:  # a combining mark joins the previous cell
                if self.c > 0 and row[self.c - 1] is not None:
                    row[self.c - 1] = (row[self.c - 1][0] + ch, style)
                continue
            if self.c + w > self.cols:
                break
            row[self.c] = (ch, style)
            if w == 2:
                row[self.c + 1] = ("", style)  # the right half of a wide character
            self.c += w
        span[1] = max(span[1], self.c)

    # ----- what the terminal needs --------------------------------------------------
    def _flush(self, dirty: dict[int, list[int]], out: list[str]) -> None:
        for r in sorted(dirty):
            want, shown = self.want[r], self.shown[r]
            lo, hi = dirty[r]  # only what was written can differ from what the terminal shows
            if want[lo:hi] == shown[lo:hi]:  # (most spans of a frame): compared in C
                continue
            changed = [c for c in range(lo, hi) if want[c] is not None and want[c] != shown[c]]
            if not changed:
                continue
            runs: list[list[int]] = [[changed[0], changed[0]]]
            for c in changed[1:]:
                if c - runs[-1][1] <= GAP and None not in want[runs[-1][1]:c]:
                    runs[-1][1] = c
                else:
                    runs.append([c, c])
            for start, end in runs:
                if want[start][0] == "" and start > 0:  # begin at the left half of a wide character
                    start -= 1
                if (self.term_r, self.term_c) != (r, start):
                    out.append(f"\x1b[{r + 1};{start + 1}H")
                c = start
                while c <= end:
                    ch, style = want[c]
                    if style != self.term_style:
                        out.append(_sgr(style))
                        self.term_style = style
                    out.append(ch)
                    shown[c] = want[c]
                    c += 1
                    if ch and not ch.isascii() and cell_len(ch) == 2 and c < self.cols:
                        shown[c] = want[c]
                        c += 1
                self.term_r, self.term_c = r, c
                if c >= self.cols:
                    self.term_r = self.term_c = -1  # a pending wrap: where the cursor is, is unclear


def _sgr(style: tuple) -> str:
    return "\x1b[0;" + ";".join(style) + "m" if style else "\x1b[0m"


def driver_class(on_frame: Callable[[str, str, int, int], None] | None = None):
    """Textual's LinuxDriver whose writes go through :class:`CellDiff`, and whose input thread
    waits for input instead of polling (:mod:`.driver_input`).
    ``on_frame(written, sent, cols, rows)`` sees each write (tests replay both)."""
    from textual.drivers.linux_driver import LinuxDriver

    from .driver_input import WakingEvent, run_input_thread, wake_pipe

    class CellDiffDriver(LinuxDriver):
        _diff: CellDiff | None = None

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self._wake_r, wake_w = wake_pipe()
            self.exit_event = WakingEvent(wake_w)  # stopping wakes the input thread at once

        def run_input_thread(self) -> None:
            run_input_thread(self, self._wake_r)

        def close(self) -> None:
            super().close()
            self.exit_event.close()
            if self._wake_r >= 0:
                os.close(self._wake_r)
                self._wake_r = -1

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
            sent = diff.frame(data)
            if on_frame is not None:
                on_frame(data, sent, cols, rows)
            if sent:
                super().write(sent)

    return CellDiffDriver


def default_driver_class():
    """The cell-diffing driver on a POSIX terminal; None (Textual's own choice) on
    Windows or when TEXTUAL_DRIVER names another driver (e.g. ``textual serve``)."""
    if os.name != "posix" or os.environ.get("TEXTUAL_DRIVER"):
        return None
    return driver_class()
