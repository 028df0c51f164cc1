"""Prometheus text-exposition building blocks for the simulated ``/metrics``.

Value formatting as prometheus_client does it (``floatToGoString``), label
sets, and the :class:`_Builder` that lays out a family list once (HELP/TYPE
lines, label sets, created timestamps) as static text plus value slots, so
that a render (:class:`_Layout`) only formats the current values.
"""

from __future__ import annotations

import math
from itertools import accumulate
from typing import Callable, Iterable
from urllib.parse import parse_qs

from .histograms import Histogram

__all__ = ["format_value", "escape_label_value", "restrict", "query_names"]

_INF = math.inf


def query_names(path: str) -> set[str] | None:
    """The sample names of a ``/metrics?name[]=…`` request; None when it asks for everything."""
    query = path.partition("?")[2]
    names = parse_qs(query).get("name[]") if query else None
    return set(names) if names else None


def restrict(text: str, names: set[str]) -> str:
    """``text`` with only the samples named in ``names``, as prometheus_client answers a ``name[]``
    query: a family keeps its HELP and TYPE lines only while it keeps a sample."""
    out: list[str] = []
    head: list[str] = []
    kept: list[str] = []
    for line in text.split("\n"):
        if line.startswith("# HELP "):
            if kept:
                out += head + kept
            head, kept = [line], []
        elif line.startswith("#"):
            head.append(line)
        elif line and line.partition("{")[0].partition(" ")[0] in names:
            kept.append(line)
    if kept:
        out += head + kept
    return "\n".join(out) + "\n" if out else ""


def format_value(d: float) -> str:
    """prometheus_client's ``floatToGoString``."""
    d = float(d)
    if 0.0 <= d < 1e6:
        return repr(d)
    if d == _INF:
        return "+Inf"
    if d == -_INF:
        return "-Inf"
    if d != d:
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def escape_label_value(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labelstr(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label_value(str(v))}"' for k, v in sorted(labels.items())) + "}"


def _help(doc: str) -> str:
    return doc.replace("\\", r"\\").replace("\n", r"\n")


def _hist_values(h: Histogram) -> list[float]:
    vals = list(accumulate(h.counts))
    vals.append(vals[-1])
    vals.append(h.sum)
    return vals


# ---------------------------------------------------------------------------
# Layout: static text + value slots


class _Layout:
    __slots__ = ("prefixes", "tail", "getters", "key")

    def __init__(self, prefixes: list[str], tail: str, getters: list[Callable[[], Iterable[float]]], key) -> None:
        self.prefixes = prefixes
        self.tail = tail
        self.getters = getters
        self.key = key

    def render(self) -> str:
        vals: list[float] = []
        ext = vals.extend
        for g in self.getters:
            ext(g())
        if len(vals) != len(self.prefixes):  # pragma: no cover - programming error
            raise RuntimeError(f"metrics layout has {len(self.prefixes)} slots but {len(vals)} values")
        fmt = format_value
        return "".join([p + fmt(v) for p, v in zip(self.prefixes, vals)]) + self.tail


class _Builder:
    def __init__(self, created_unix: float | None) -> None:
        self._prefixes: list[str] = []
        self._getters: list[Callable[[], Iterable[float]]] = []
        self._cur: list[str] = []
        self._created = created_unix
        self._created_k = 0

    # low level
    def text(self, s: str) -> None:
        self._cur.append(s)

    def header(self, name: str, typ: str, doc: str) -> None:
        self._cur.append(f"# HELP {name} {_help(doc)}\n# TYPE {name} {typ}\n")

    def slot(self, series: str) -> None:
        self._cur.append(series + " ")
        self._prefixes.append("".join(self._cur))
        self._cur = ["\n"]

    def static_sample(self, series: str, value: float) -> None:
        self._cur.append(f"{series} {format_value(value)}\n")

    def getter(self, g: Callable[[], Iterable[float]]) -> None:
        self._getters.append(g)

    def _next_created(self) -> float:
        assert self._created is not None  # callers add _created samples only when there is a time
        self._created_k += 1
        return self._created + self._created_k * 3.1e-05

    # families
    def gauge(self, name: str, doc: str, children: list[dict[str, str]], get: Callable[[], Iterable[float]]) -> None:
        self.header(name, "gauge", doc)
        for labels in children:
            self.slot(name + _labelstr(labels))
        self.getter(get)

    def static_gauge(self, name: str, doc: str, children: list[tuple[dict[str, str], float]]) -> None:
        self.header(name, "gauge", doc)
        for labels, value in children:
            self.static_sample(name + _labelstr(labels), value)

    def counter(self, base: str, doc: str, children: list[dict[str, str]], get: Callable[[], Iterable[float]],
                created: bool = True) -> None:
        self.header(base + "_total", "counter", doc)
        for labels in children:
            self.slot(base + "_total" + _labelstr(labels))
        self.getter(get)
        if created and self._created is not None:
            self.header(base + "_created", "gauge", doc)
            for labels in children:
                self.static_sample(base + "_created" + _labelstr(labels), self._next_created())

    def histogram(self, name: str, doc: str, children: list[tuple[dict[str, str], tuple[float, ...]]],
                  get: Callable[[], Iterable[float]], created: bool = True) -> None:
        """``get`` returns, per child: cumulative buckets (+Inf last), count, sum."""
        self.header(name, "histogram", doc)
        for labels, bounds in children:
            for b in bounds:
                self.slot(name + "_bucket" + _labelstr({**labels, "le": format_value(b)}))
            self.slot(name + "_bucket" + _labelstr({**labels, "le": "+Inf"}))
            self.slot(name + "_count" + _labelstr(labels))
            self.slot(name + "_sum" + _labelstr(labels))
        self.getter(get)
        if created and self._created is not None:
            self.header(name + "_created", "gauge", doc)
            for labels, _ in children:
                self.static_sample(name + "_created" + _labelstr(labels), self._next_created())

    def summary(self, name: str, doc: str, children: list[dict[str, str]], get: Callable[[], Iterable[float]],
                created_times: list[float] | None = None) -> None:
        self.header(name, "summary", doc)
        for labels in children:
            self.slot(name + "_count" + _labelstr(labels))
            self.slot(name + "_sum" + _labelstr(labels))
        self.getter(get)
        if created_times is not None:
            self.header(name + "_created", "gauge", doc)
            for labels, ts in zip(children, created_times):
                self.static_sample(name + "_created" + _labelstr(labels), ts)

    def build(self, key) -> _Layout:
        tail = "".join(self._cur)
        return _Layout(self._prefixes, tail, self._getters, key)
