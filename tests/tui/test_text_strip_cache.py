"""``text_strip``'s layout cache gives exactly the segments of the uncached slow path (Textual's
Content conversion): for random tile and alert texts, on a miss and on a hit with other
characters, in both themes, and not stale after a theme switch."""

from __future__ import annotations

import random

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import App
from textual.color import Color
from textual.style import Style as VisualStyle

from infertop.ui.widgets import tiles
from infertop.ui.widgets.tiles import TileGrid, _text_strip_slow, text_strip
from pilot_wait import until

PIECES = ("12", "3.5", "ms", " ms", "≤2s", "—", "°C", "…", " / ", "%", "kv ", "engine-3", "● ", "日", "\t", "x")
STYLES = ("", "red", "bold", "dim", "bold red", "yellow", Style(color="green", bold=True), "$primary")


def exact(segments: list[Segment]) -> list[tuple]:
    """Every segment's text, style (by value and as written) and control codes."""
    return [(s.text, s.style, repr(s.style), s.control) for s in segments]


def random_text(rng: random.Random) -> Text:
    text = Text(style=rng.choice(STYLES[:-1]))
    for _ in range(rng.randint(0, 5)):
        piece = rng.choice(PIECES)
        style = rng.choice(STYLES[:-1]) if rng.random() < 0.6 else ""
        text.append(piece, style=style or None)
    return text


def same_shape(text: Text, rng: random.Random) -> Text:
    """``text`` with every digit and ASCII letter replaced: same length, spans and styles."""
    chars = [rng.choice("0123456789") if c.isdigit() else rng.choice("abcxyz") if c.isascii() and c.isalpha() else c
             for c in text.plain]
    other = text.copy()
    other.plain = "".join(chars)
    assert other.spans == text.spans and len(other.plain) == len(text.plain)
    return other


def check_many(rng: random.Random, bases: list[VisualStyle], console: Console, n: int) -> tuple[int, int]:
    """Feed ``n`` random texts (each, then one of the same shape) through ``text_strip``; return how
    many were cached as a layout and how many went the slow way."""
    tiles._LAYOUTS.clear()
    cached = slow = 0
    for _ in range(n):
        text = random_text(rng)
        width = rng.randint(0, len(text.plain) + 4)  # around the text's length: some are cut
        lead = rng.choice((0, 1, 2))
        base = rng.choice(bases)
        for t in (text, same_shape(text, rng), text):  # a miss, then hits
            assert exact(text_strip(t, width, base, console, lead)) == exact(_text_strip_slow(t, width, base, console, lead)), \
                (t.plain, t.style, t.spans, width, lead)
        layout = [v for k, v in tiles._LAYOUTS.items() if k[0] == len(text.plain) and k[3] == width and k[4] == lead]
        if any(v is not tiles._NOT_CACHED for v in layout):
            cached += 1
        else:
            slow += 1
    return cached, slow


def test_random_texts_without_an_app_match_the_slow_path():
    rng = random.Random(8)
    bases = [VisualStyle.parse("#e0e0e0 on #121212"), VisualStyle.parse("#1e1e1e on #f0f0f0 bold")]
    cached, slow = check_many(rng, bases, Console(), 1500)
    assert cached > 300 and slow > 300  # both paths were taken often


def styles_in_theme(app: App) -> bool:
    """The stylesheet re-applied for the current theme: the screen's background is the theme's."""
    return app.screen.styles.background == Color.parse(app.get_css_variables()["background"])


class TilesApp(App):
    def compose(self):
        yield TileGrid([("k0", "Label 0")], id="tiles")


async def test_random_texts_in_both_themes_match_the_slow_path():
    app = TilesApp()
    rng = random.Random(10)
    async with app.run_test(size=(40, 8)) as pilot:
        bases = []
        for theme in ("textual-dark", "textual-light"):
            app.theme = theme
            await until(pilot, lambda: app.ansi_theme is (app.ansi_theme_dark if theme.endswith("dark") else app.ansi_theme_light),
                        "the theme applied")
            await until(pilot, lambda: styles_in_theme(app), "the styles in the new theme")
            grid = app.query_one(TileGrid)
            bases += [grid.visual_style, grid.get_visual_style("tiles--label")]  # a tile's value and label
            cached, slow = check_many(rng, bases, app.console, 600)
            assert cached > 100 and slow > 100


async def test_a_theme_switch_leaves_nothing_stale():
    """A str style with a CSS variable parses to the theme's colour: with the same base and
    console before and after the switch, the cached layout must not keep the old colour."""
    app = App()
    async with app.run_test(size=(40, 8)) as pilot:
        app.theme = "textual-dark"
        await until(pilot, lambda: styles_in_theme(app), "the styles in the dark theme")
        base = app.screen.visual_style
        before = text_strip(Text("12 ms", style="bold $primary"), 10, base, app.console, 1)
        assert exact(before) == exact(_text_strip_slow(Text("12 ms", style="bold $primary"), 10, base, app.console, 1))
        app.theme = "textual-light"
        await until(pilot, lambda: styles_in_theme(app), "the styles in the light theme")
        text = Text("34 ms", style="bold $primary")
        after = text_strip(text, 10, base, app.console, 1)
        assert exact(after) == exact(_text_strip_slow(text, 10, base, app.console, 1))
        assert after[1].style.color != before[1].style.color  # the theme's primary colour, not the cached one


def test_wide_characters_tabs_and_cut_texts_are_not_cached_as_layouts():
    console = Console()
    base = VisualStyle.parse("#e0e0e0 on #121212")
    tiles._LAYOUTS.clear()
    for plain in ("日本", "a\tb", "a\nb", "much too long for it"):
        text = Text(plain, style="bold")
        assert exact(text_strip(text, 8, base, console, 1)) == exact(_text_strip_slow(text, 8, base, console, 1))
    assert not tiles._LAYOUTS  # none of them even looked for a layout
    text_strip(Text("12 ms", style="bold"), 8, base, console, 1)
    assert sum(v is not tiles._NOT_CACHED for v in tiles._LAYOUTS.values()) == 1



def test_the_cache_is_bounded():
    console = Console()
    base = VisualStyle.parse("#e0e0e0 on #121212")
    tiles._LAYOUTS.clear()
    for width in range(1, tiles._LAYOUTS_MAX + 200):
        text_strip(Text("1", style="bold"), width, base, console)
    assert 0 < len(tiles._LAYOUTS) <= tiles._LAYOUTS_MAX
