"""What the console shows on screen, for Pilot tests: the Overview's tiles and alert lines, a widget's text."""

from __future__ import annotations

from infertop.ui.widgets.alert_lines import AlertLines
from infertop.ui.widgets.hot_table import HotTable
from infertop.ui.widgets.tiles import TileGrid


def tiles(app) -> TileGrid:
    return app.query_one("#tiles", TileGrid)


def tile(app, key: str) -> str:
    """Tile ``key``'s value line as painted (with its note)."""
    return tiles(app).value_text(key)


def alerts(app) -> AlertLines:
    return app.query_one("#alerts", AlertLines)


def alert_lines(app) -> list[str]:
    """The alert lines on screen under the title, blank ones included."""
    return alerts(app).line_texts()


def hot(app) -> HotTable:
    return app.query_one("#hot", HotTable)


def hot_rows(app) -> dict[str, dict[str, str]]:
    """The "Under most pressure" rows, top first: engine → column → text."""
    return hot(app).rows_text()


def text_of(app, selector: str) -> str:
    r = app.query_one(selector).render()
    return str(getattr(r, "plain", r))
