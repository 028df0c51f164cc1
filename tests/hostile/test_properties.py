"""Property-based tests (Hypothesis): arbitrary input never raises anything but the
parser's own ParseError, and whatever comes out of the cleaning boundary is clean."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from infertop.domain.engine_stats import derive
from infertop.domain.engine import EngineStats
from infertop.sources.expfmt import ParseError, Parser, parse
from infertop.sources.sanitize import clean_engine, plain_text
from infertop.sources.vllm_names import Extractor
from infertop.state.history import HistoryStore
from infertop.domain.window import CounterWindow

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

NAMES = st.sampled_from(["vllm:num_requests_running", "vllm:generation_tokens_total", "up", "a_b:c",
                         "vllm:time_to_first_token_seconds_bucket", "x", "1bad", "", "foo[/x]"])
LABEL_VALUES = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
LABELS = st.dictionaries(st.sampled_from(["model_name", "engine", "le", "a", "__name__", "bad-key"]),
                         LABEL_VALUES, max_size=3)
VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr),
                   st.sampled_from(["NaN", "+Inf", "-Inf", "1e308", "-0", "1_0", "0x10", "", "abc", "1 2 3"]))


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def lines(draw) -> str:
    kind = draw(st.integers(0, 4))
    if kind == 0:  # a sample line
        labels = draw(LABELS)
        block = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        return f"{draw(NAMES)}{{{block}}} {draw(VALUES)}" if labels else f"{draw(NAMES)} {draw(VALUES)}"
    if kind == 1:
        return f"# TYPE {draw(NAMES)} {draw(st.sampled_from(['gauge', 'counter', 'histogram', 'bogus', '']))}"
    if kind == 2:
        return f"# HELP {draw(NAMES)} {draw(st.text(max_size=10))}"
    if kind == 3:
        return draw(st.text(max_size=30))  # anything at all
    return ""


DOCS = st.lists(lines(), max_size=12).map("\n".join)


@FAST
@given(st.text())
def test_arbitrary_text_only_ever_raises_parse_error(text):
    try:
        parse(text)
    except ParseError:
        pass


@FAST
@given(st.binary())
def test_arbitrary_bytes_decoded_like_a_scrape_only_raise_parse_error(body):
    try:
        parse(body.decode("utf-8", errors="replace"))
    except ParseError:
        pass


@FAST
@given(st.lists(DOCS, min_size=1, max_size=4))
def test_documents_through_parser_extractor_and_derive(docs):
    """Layout reuse across scrapes, extraction, windows and the cleaning boundary:
    only ParseError may escape, and every derived number is finite or None."""
    parser, extractor, window = Parser(), Extractor(max_label_sets=8), CounterWindow(60)
    for t, doc in enumerate(docs):
        try:
            exp = parser.parse(doc)
        except ParseError:
            continue
        fresh = parse(doc)
        assert [repr(v) for v in exp.values] == [repr(v) for v in fresh.values]  # reuse == cold parse
        _, samples = extractor.extract(exp)
        assert len(samples) <= 8
        for s in samples:
            window.add(float(t), s.counters)
            e = clean_engine(derive(EngineStats(name="e", url="u", model=s.key[0]), window, s.gauges))
            for f in ("running", "waiting", "kv_cache_pct", "generation_tokens_per_s", "ttft_p99_s"):
                v = getattr(e, f)
                assert v is None or (math.isfinite(v) and v >= 0)
            assert e.kv_cache_pct is None or e.kv_cache_pct <= 100


@FAST
@given(st.text())
def test_plain_text_has_no_control_characters(s):
    out = plain_text(s)
    assert not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in out)
    assert len(out) <= 160


@FAST
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=2, max_size=30))
@example([7.765457250805025e-121, 1000000000001.0])  # a jump's offset rounded the counter below its start
def test_counter_window_rates_stay_finite_and_non_negative(values):
    w = CounterWindow(1000)
    for t, v in enumerate(values):
        w.add(float(t), {"c": v})
        r = w.rate("c")
        assert r is None or (math.isfinite(r) and r >= 0)


class _PerSeriesWindow(CounterWindow):
    """The window with its whole-scrape shortcut off: every series through the per-series path."""

    __slots__ = ()

    def _steady(self, raw):
        return False


SCRAPE_VALUES = st.one_of(*[st.floats(0, 50)] * 8, st.floats(allow_nan=True, allow_infinity=True),
                          st.sampled_from([2e12, 1e15, 1.0000001e15]))  # a jump; at and just over MAX_COUNTER
# mostly one set of series in one order (the shortcut's case), sometimes another set or order
SCRAPES = st.lists(st.one_of(
    *[st.lists(SCRAPE_VALUES, min_size=3, max_size=3).map(lambda vs: dict(zip("abc", vs)))] * 4,
    st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), SCRAPE_VALUES, min_size=1)), min_size=1, max_size=25)


@FAST
@given(SCRAPES, st.booleans())
@example([{"a": 1e15, "b": 1.0}, {"a": 1.0000001e15, "b": 2.0}], True)  # past MAX_COUNTER by a small step
def test_counter_window_shortcut_gives_what_the_per_series_path_gives(scrapes, climb):
    """Scrapes with the same series in the same order skip the per-series loop: the points, the
    resets and the drops must be those of the loop, whatever comes (NaN, resets, jumps, series
    added, removed or reordered). ``climb`` makes most scrapes the steady kind the shortcut takes."""
    fast, slow = CounterWindow(10), _PerSeriesWindow(10)
    total: dict[str, float] = {}
    for t, raw in enumerate(scrapes):
        if climb:  # cumulative: a small value is added to the series' total, anything else sent as it is
            raw = {k: total.get(k, 0.0) + v if 0 <= v <= 50 else v for k, v in raw.items()}
            total.update((k, v) for k, v in raw.items() if 0 <= v <= 1e9)
        fast.add(float(t), raw)
        slow.add(float(t), raw)
        assert list(fast._points) == list(slow._points)
        assert (fast.resets, fast.dropped) == (slow.resets, slow.dropped)
        assert fast._last_raw == slow._last_raw and fast._last_corrected == slow._last_corrected
        assert fast._offset == slow._offset


@FAST
@given(st.lists(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)), max_size=200))
def test_history_never_holds_an_infinity(values):
    h = HistoryStore(capacity=50)
    for v in values:
        h.record("e", "m", v)
    assert all(not math.isinf(x) for x in h.series("e", "m"))
    assert len(h.series("e", "m")) == min(50, len(values))
