"""The exposition parser gives exactly prometheus_client's samples."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from locations import CAPTURES
from vllm_text import perturb
from infertop.sources.expfmt import ParseError, Parser, parse


def reference(text: str) -> list[tuple]:
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.append((s.name, tuple(sorted(s.labels.items())), float(s.value), s.timestamp))
    return out


def ours(exp) -> list[tuple]:
    return [(s.name, tuple(sorted(s.labels.items())), s.value, s.timestamp_s) for s in exp.all_samples]


def same(a: list[tuple], b: list[tuple]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x[:2] != y[:2] or x[3] != y[3]:
            return False
        if not (x[2] == y[2] or (math.isnan(x[2]) and math.isnan(y[2]))):
            return False
    return True


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_real_capture_matches_prometheus_client(path):
    text = path.read_text()
    exp = parse(text)
    assert len(exp) == 435
    assert same(ours(exp), reference(text))


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_warm_parser_follows_new_values(path):
    text = path.read_text()
    parser = Parser()
    parser.parse(text)
    for k in (1.0, 2.5, -0.5):
        doc = perturb(text, k)
        exp = parser.parse(doc)
        assert same(ours(exp), reference(doc))


def test_families_and_types_match_reference():
    text = CAPTURES[0].read_text()
    ref = {s.name: fam.type for fam in text_string_to_metric_families(text) for s in fam.samples}
    got = {s.name: fam.type for fam in parse(text).families for s in fam.samples}
    # prometheus_client reports counters under the OpenMetrics name without _total;
    # the type is what must agree.
    assert got == ref


def test_layout_change_is_detected():
    parser = Parser()
    a = 'm{x="1"} 1\nm{x="2"} 2\n'
    b = 'm{x="1"} 1\nm{x="3"} 5\n'
    parser.parse(a)
    exp = parser.parse(b)
    assert exp.series("m") == [({"x": "1"}, 1.0), ({"x": "3"}, 5.0)]


def test_help_change_is_detected_on_warm_path():
    parser = Parser()
    parser.parse("# HELP m old text\n# TYPE m gauge\nm 1\n")
    exp = parser.parse("# HELP m new text\n# TYPE m gauge\nm 1\n")
    assert exp.families[0].help == "new text"


EDGE_CASES = [
    # escapes in label values
    'm{path="C:\\\\dir",msg="say \\"hi\\"",nl="a\\nb"} 1\n',
    # special values
    "a +Inf\nb -Inf\nc NaN\nd 1e-3\ne -0\nf 12345678901234567890\n",
    # timestamps (milliseconds in the text format)
    "m 3 1700000000123\nm2{a=\"b\"} 4 -5\n",
    # HELP escaping and TYPE, histograms, _created
    "# HELP h A \\\\ help\\nline\n# TYPE h histogram\n"
    'h_bucket{le="0.5"} 1\nh_bucket{le="+Inf"} 2\nh_sum 0.7\nh_count 2\nh_created 1.7e9\n',
    # counters with and without _total, untyped, comments, blank lines
    "# a free comment\n\n# TYPE c counter\nc_total 5\nuntyped_thing 1\n",
    # label values with spaces, braces and commas; trailing comma; empty label set
    'm{a="x y",b="}{,"} 1\nn{a="1",} 2\no{} 3\n',
    # summary
    '# TYPE s summary\ns{quantile="0.5"} 1\ns_sum 3\ns_count 4\n',
    # tabs and extra spaces
    "m\t1\nn   2\n",
]


@pytest.mark.parametrize("text", EDGE_CASES)
def test_edge_cases_match_prometheus_client(text):
    assert same(ours(parse(text)), reference(text))
    # and again through a warm parser (layout reuse must not change results)
    p = Parser()
    p.parse(text)
    assert same(ours(p.parse(text)), reference(text))


def test_counter_without_total_keeps_its_wire_name():
    # Deliberate difference: prometheus_client renames a counter sample "d" to
    # "d_total" (its OpenMetrics model). Prometheus itself, and infertop, keep
    # the name that is on the wire, so queries find what the engine exported.
    text = "# TYPE d counter\nd 2\n"
    assert reference(text)[0][0] == "d_total"
    exp = parse(text)
    assert exp.series("d") == [({}, 2.0)]
    assert exp.families[0].type == "counter"


def test_escaped_values_are_unescaped():
    exp = parse('m{path="C:\\\\dir",msg="say \\"hi\\"",nl="a\\nb"} 1\n')
    assert exp.series("m")[0][0] == {"path": "C:\\dir", "msg": 'say "hi"', "nl": "a\nb"}


def test_special_values():
    exp = parse("a +Inf\nb -Inf\nc NaN\n")
    assert exp.series("a")[0][1] == math.inf
    assert exp.series("b")[0][1] == -math.inf
    assert math.isnan(exp.series("c")[0][1])


@pytest.mark.parametrize(
    "text",
    [
        "<html><body>502 Bad Gateway</body></html>",
        "m{a=\"unterminated} 1\n",
        "m{a=b} 1\n",
        "m notanumber\n",
        "m 1 2 3\n",
        "9bad 1\n",
        "# TYPE m nonsense\nm 1\n",
        "m 1_000\n",
        'm{a="1",a="2"} 1\n',
    ],
)
def test_garbage_raises_parse_error_with_line(text):
    with pytest.raises(ParseError) as err:
        parse(text)
    assert err.value.line_no >= 1


def test_huge_label_set_parses():
    labels = ",".join(f'l{i}="v{i}"' for i in range(10_000))
    exp = parse(f"big{{{labels}}} 1\nm 2\n")
    assert len(exp.series("big")[0][0]) == 10_000
    assert exp.series("m") == [({}, 2.0)]


def test_series_cache_is_bounded():
    p = Parser(max_cache=10)
    for i in range(5):
        p.parse("\n".join(f'm{{i="{i}-{j}"}} 1' for j in range(50)))
    assert len(p._series) <= 10
