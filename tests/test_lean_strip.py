"""lean_strip and filtered: the same lines as Textual's Strip and line filters, for random segments."""

from __future__ import annotations

import random

from rich.color import Color as RichColor
from rich.segment import Segment
from rich.style import Style
from rich.terminal_theme import DEFAULT_TERMINAL_THEME
from textual.color import Color
from textual.filter import ANSIToTruecolor, Monochrome
from textual.strip import Strip

from infertop.ui.widgets.lean_strip import _LeanStrip, _truecolor_already, filtered, lean_strip


def random_style(rng: random.Random) -> Style | None:
    def color() -> RichColor | None:
        kind = rng.randrange(5)
        if kind == 0:
            return None
        if kind == 1:
            return RichColor.parse(rng.choice(["red", "green", "bright_blue", "default", "color(123)"]))  # ANSI
        return RichColor.from_rgb(rng.randrange(256), rng.randrange(256), rng.randrange(256))

    if rng.random() < 0.1:
        return None
    return Style(color=color(), bgcolor=color(), bold=rng.random() < 0.3, dim=rng.random() < 0.15)


def random_segments(rng: random.Random) -> list[Segment]:
    out = []
    for _ in range(rng.randrange(0, 8)):
        text = "".join(rng.choice("ab █▁…漢") for _ in range(rng.randrange(0, 6)))
        control = [(1,)] if rng.random() < 0.03 else None  # a control segment: the filter drops its code
        out.append(Segment(text, random_style(rng), control))
    return out


def test_lean_strip_is_a_strip_with_textuals_caches_made_when_first_used():
    assert lean_strip is _LeanStrip  # this Textual's Strip has the slots lean_strip knows
    strip = lean_strip([Segment("abc", Style(bold=True))], 3)
    assert isinstance(strip, Strip)
    assert strip.crop(1, 2).text == "b"
    assert strip.crop(1, 2) is strip.crop(1, 2)  # the crop cache, made on first use, is kept


def test_lean_strips_answer_as_strips_do():
    rng = random.Random(8)
    for _ in range(400):
        segments = [seg for seg in random_segments(rng) if not seg.control]
        plain, lean = Strip(list(segments)), lean_strip(list(segments))
        width = plain.cell_length
        assert lean.cell_length == width and lean.text == plain.text and list(lean) == list(plain)
        a, b = sorted(rng.randrange(width + 2) for _ in range(2))
        assert list(lean.crop(a, b)) == list(plain.crop(a, b))
        assert list(lean.divide([a, b, width])[0]) == list(plain.divide([a, b, width])[0])
        n = rng.randrange(width + 4)
        assert list(lean.adjust_cell_length(n, Style(bgcolor="#101010"))) == \
            list(plain.adjust_cell_length(n, Style(bgcolor="#101010")))
        assert lean.render(console_for_render()) == plain.render(console_for_render())


def console_for_render():
    from rich.console import Console
    return Console(color_system="truecolor", width=200, legacy_windows=False, force_terminal=True)


def test_filtered_lines_are_the_filters_lines_and_a_truecolor_line_is_left_as_it_is():
    rng = random.Random(9)
    truecolor = ANSIToTruecolor(DEFAULT_TERMINAL_THEME)
    background = Color(16, 16, 16)
    skipped = 0
    for _ in range(2000):
        segments = random_segments(rng)
        filters = [truecolor] if rng.random() < 0.8 else [truecolor, Monochrome()]
        if len(filters) > 1:  # Monochrome reads every segment's style
            segments = [Segment(text, style or Style(), control) for text, style, control in segments]
        expected = segments
        for f in filters:
            expected = f.apply(expected, background)
        got = filtered(segments, filters, background)
        assert got == expected
        if _truecolor_already(segments):
            skipped += 1
            assert truecolor.apply(segments, background) == segments  # skipping changed nothing
    assert skipped > 100  # the random lines include truecolor-only ones
