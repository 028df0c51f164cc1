"""Strips made each tick, without the caches nobody reads, and filters skipped where they change nothing."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.cache import FIFOCache
from textual.filter import ANSIToTruecolor, LineFilter
from textual.strip import Strip

# Strip's seven caches and their sizes (textual/strip.py): made on first use here.
_CACHE_SIZES = {"_divide_cache": 4, "_crop_cache": 16, "_style_cache": 16, "_filter_cache": 4,
                "_line_length_cache": 4, "_crop_extend_cache": 4, "_offsets_cache": 4}
_OTHER_SLOTS = {"_segments", "_cell_length", "_render_cache", "_link_ids", "_cell_count"}


class _LeanStrip(Strip):
    """A Strip whose seven caches are made when first used.

    ``Strip()`` makes seven caches (seven objects and seven dicts) for crops, divisions and
    filters; a line painted once a tick and then dropped uses none or one of them, and a tick
    makes some fifty such lines. The segments list is taken as given, not copied: the caller
    hands over a list it made for this strip and does not change afterwards."""

    __slots__ = ()

    def __init__(self, segments: list[Segment], cell_length: int | None = None) -> None:
        self._segments = segments
        self._cell_length = cell_length
        self._render_cache = None
        self._link_ids = None
        self._cell_count = None

    def __getattr__(self, name: str):
        size = _CACHE_SIZES.get(name)
        if size is None:
            raise AttributeError(name)
        cache: FIFOCache = FIFOCache(size)
        setattr(self, name, cache)
        return cache


# A Textual whose Strip has other slots than these would leave one unset: plain Strips then.
lean_strip = _LeanStrip if set(Strip.__slots__) == set(_CACHE_SIZES) | _OTHER_SLOTS else Strip


_UNCHANGED: set[Style] = set()  # styles ANSIToTruecolor gives back as they are
_UNCHANGED_MAX = 4096


def filtered(segments: list[Segment], filters: list[LineFilter], background) -> list[Segment]:
    """``segments`` through the app's line filters. ANSIToTruecolor is skipped for a line it
    would give back unchanged — every colour already a truecolor, nothing dim, no control
    codes — which is every line of infertop's themes: it would make a new segment of each."""
    for line_filter in filters:
        if type(line_filter) is ANSIToTruecolor and _truecolor_already(segments):
            continue
        segments = line_filter.apply(segments, background)
    return segments


def _truecolor_already(segments: list[Segment]) -> bool:
    unchanged = _UNCHANGED
    for _, style, control in segments:
        if control is not None:
            return False  # the filter drops control codes
        if style is None or style in unchanged:
            continue
        color, bgcolor = style.color, style.bgcolor
        if style.dim or (color is not None and color.triplet is None) or (bgcolor is not None and bgcolor.triplet is None):
            return False
        if len(unchanged) >= _UNCHANGED_MAX:
            unchanged.clear()
        unchanged.add(style)
    return True
