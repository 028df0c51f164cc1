"""Segment merging keeps every visible cell and style, with fewer escapes."""

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from infertop.ui.fastpaint.lean import merge_segments


def test_merge_joins_equal_styles_and_keeps_first_meta():
    base = Style(color="white", bgcolor="black")
    green = Style(color="green", bgcolor="black")
    strip = Strip([
        Segment(" a  ", base + Style(meta={"row": 0, "column": 0})),
        Segment(" ", base + Style(meta={"row": 0, "column": 1})),
        Segment("up", green),
        Segment("   ", base),
        Segment(" 14 ", base + Style(meta={"row": 0, "column": 2})),
    ])
    out = merge_segments(strip)
    assert [s.text for s in out] == [" a   ", "up", "    14 "]
    assert out.text == strip.text and out.cell_length == strip.cell_length
    assert out._segments[0].style.meta == {"row": 0, "column": 0}
    assert out._segments[1].style == green


def test_merge_leaves_single_segment_alone():
    strip = Strip([Segment("x", Style(bold=True))])
    assert merge_segments(strip) is strip
