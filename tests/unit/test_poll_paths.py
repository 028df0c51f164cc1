"""The cheaper per-poll paths give what the plain ones give.

Each fast path here (quantiles from one sort per histogram, bucket increases by a
per-key plan, dcgm rows by a per-layout plan) is checked against a plain reference
written out in the test, on hand-made and on random inputs: NaN and infinite counts
and bounds, dips, missing series, MIG devices, DCGM "blank" values.
"""

from __future__ import annotations

import math
import random

import pytest

from infertop.domain.engine_stats import QUANTILES, all_window_buckets, derived_fields
from infertop.domain.quantiles import histogram_quantile, prepare, prepared_quantile
from infertop.sources.dcgm import LabelCache, build_rows, parse_dcgm, triples_from_exposition
from infertop.sources.expfmt import Parser
from infertop.domain.window import CounterWindow
from dcgm_text import H100_VALUES, exporter_text, gpu_labels


def reference_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus' bucketQuantile written as plainly as it reads (linear scan, running max)."""
    if math.isnan(q):
        return None
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    bs = sorted(buckets)
    if len(bs) < 2 or not math.isinf(bs[-1][0]):
        return None
    top, mono = -math.inf, []
    for le, c in bs:
        top = max(top, c)
        mono.append((le, top))
    observations = mono[-1][1]
    if observations <= 0:
        return None
    rank = q * observations
    b = 0
    while b < len(mono) - 1 and mono[b][1] < rank:
        b += 1
    if b == len(mono) - 1:
        return mono[-2][0]
    if b == 0 and mono[0][0] <= 0:
        return mono[0][0]
    start, end, count = 0.0, mono[b][0], mono[b][1]
    if b > 0:
        start, count, rank = mono[b - 1][0], count - mono[b - 1][1], rank - mono[b - 1][1]
    if count <= 0:
        return end
    return start + (end - start) * (rank / count)


def same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return a == b


def test_quantiles_match_the_plain_scan_on_random_histograms():
    rng = random.Random(5)
    odd = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, 5.0]
    for _ in range(20_000):
        buckets = []
        for _ in range(rng.randint(0, 7)):
            le = rng.choice([rng.choice(odd), rng.uniform(-1, 10), float(rng.randint(0, 5))])
            count = rng.choice([rng.choice(odd), rng.uniform(-5, 100), float(rng.randint(0, 20))])
            buckets.append((le, count))
        if rng.random() < 0.6:
            buckets.append((math.inf, rng.choice([rng.uniform(0, 120), 0.0, math.nan, float(rng.randint(0, 30))])))
        if rng.random() < 0.5:  # bounds and counts both ascending (the usual shape), ties and zeros kept
            counts = sorted(c for _, c in buckets if c == c) + [c for _, c in buckets if c != c]
            buckets = list(zip(sorted(le for le, _ in buckets), counts))
        q = rng.choice([rng.random(), 0.0, -0.0, 1.0, 0.5, 0.99, -0.1, 1.1, math.nan])
        want = reference_quantile(q, buckets)
        assert same(histogram_quantile(q, buckets), want), (q, buckets)
        prepared = prepare(buckets)
        if 0 <= q <= 1:
            assert same(prepared_quantile(q, prepared) if prepared is not None else None, want), (q, buckets)


def test_one_preparation_serves_every_quantile_of_a_histogram():
    buckets = [(1.0, 40.0), (0.1, 10.0), (math.inf, 50.0), (0.5, 30.0), (0.7, 25.0)]  # unsorted, with a dip
    prepared = prepare(buckets)
    assert prepared is not None
    assert list(prepared[0]) == [0.1, 0.5, 0.7, 1.0, math.inf] and list(prepared[1]) == [10, 30, 30, 40, 50]
    for q in (0.1, 0.5, 0.61, 0.7, 0.9, 0.99):
        assert prepared_quantile(q, prepared) == histogram_quantile(q, buckets) == reference_quantile(q, buckets)
    assert prepare([(1.0, 3.0)]) is None and prepare([(1.0, 3.0), (2.0, 4.0)]) is None  # no +Inf bucket


def reference_buckets(window: CounterWindow) -> dict[str, list[tuple[float, float]]]:
    edges = window.edges()
    if edges is None:
        return {}
    (_, first), (_, last) = edges
    out: dict[str, list[tuple[float, float]]] = {}
    for key, v in last.items():
        hist, sep, le = key.partition("@")
        try:
            bound = float(le)
        except ValueError:
            continue
        if sep and key in first:
            out.setdefault(hist, []).append((bound, v - first[key]))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_bucket_increases_and_derived_fields_match_the_plain_reading(seed):
    rng = random.Random(seed)
    les = ["0.001", "0.01", "0.1", "0.5", "1.0", "5.0", "+Inf"]
    window = CounterWindow(10.0)
    counts: dict[str, float] = {}
    for t in range(30):
        raw = {"requests": 3.0 * t, "prefix_hits": 2.0 * t, "prefix_queries": 4.0 * t, "bad@bound": float(t)}
        for h in ("ttft", "itl", "e2e", "queue"):
            for le in les:
                k = f"{h}@{float(le)!r}"
                counts[k] = counts.get(k, 0.0) + rng.choice([0.0, 1.0, 2.0, 7.0])
                raw[k] = counts[k]
        if t > 3 and rng.random() < 0.3:  # a series that comes and goes: the points' keys differ
            raw["itl@0.25"] = float(t)
        if rng.random() < 0.1:
            raw["ttft@0.1"] = math.nan  # dropped by the window: the point keeps the last good value
        window.add(float(t), raw)
        got = all_window_buckets(window)
        assert got == reference_buckets(window)
        fields = derived_fields(window, {"running": 1.0})
        buckets = reference_buckets(window)
        for hist, q, attr in QUANTILES:
            v = reference_quantile(q, buckets[hist]) if buckets.get(hist) else None
            if fields["quantile_edges"].get(attr) == "<":  # in the first bucket: its bound, marked "under"
                v = min(le for le, _ in buckets[hist])
            assert same(fields[attr], None if v is None or math.isnan(v) else v), (t, attr)


def mig_exporter_text() -> str:
    return exporter_text([
        (gpu_labels(0, "GPU-a", pod="vllm-0", namespace="llm", container="vllm"), H100_VALUES),
        (gpu_labels(1, "GPU-b", host_key=None), {"DCGM_FI_DEV_GPU_UTIL": 3, "DCGM_FI_DEV_FB_USED": 10}),
        (gpu_labels(0, "GPU-a", GPU_I_PROFILE="1g.10gb", GPU_I_ID="3"), {"DCGM_FI_DEV_FB_USED": 5}),
        (gpu_labels(2, "GPU-c", model="A100\x1b[31m", GPU_I_PROFILE="2g.20gb", GPU_I_ID="1", pod="p1"),
         {"DCGM_FI_DEV_FB_USED": 5}),  # a MIG parent made from its devices' labels (an escape in the name)
        (gpu_labels(2, "GPU-c", model="A100\x1b[31m", GPU_I_PROFILE="2g.20gb", GPU_I_ID="2", pod="p2"),
         {"DCGM_FI_DEV_FB_USED": 7}),
        (gpu_labels(3, "GPU-d", uuid_key="uuid", host_key="hostname", pod_name="x", pod_namespace="y"),
         {"dcgm_gpu_utilization": 4, "DCGM_FI_DEV_GPU_UTIL": 5}),  # both namings: the first in FIELDS wins
    ])


def with_values(text: str, rng: random.Random) -> str:
    odd = ["NaN", "+Inf", "-Inf", "2147483632", "1.4e14", "0", "-5", "1e308", "3"]
    out = []
    for line in text.split("\n"):
        if line and not line.startswith("#"):
            head, _, _ = line.rpartition(" ")
            line = f"{head} {rng.choice(odd) if rng.random() < 0.3 else repr(rng.uniform(0, 1e4))}"
        out.append(line)
    return "\n".join(out)


def test_dcgm_rows_planned_per_layout_are_the_rows_build_rows_makes():
    rng = random.Random(7)
    parser, cache = Parser(), LabelCache()
    layouts = set()
    for k in range(200):
        text = with_values(mig_exporter_text(), rng)
        exp = parser.parse(text)
        got = parse_dcgm(exp, source_url="http://n:9400/metrics", default_host="n", cache=cache)
        want = build_rows(triples_from_exposition(Parser().parse(text)), source="dcgm",
                          source_url="http://n:9400/metrics", default_host="n")
        assert repr(got) == repr(want), k
        layouts.add(id(cache.plan))
    assert len(layouts) == 1  # one layout: planned once, then only values read
    parent = next(g for g in got if g.uuid == "GPU-c")
    assert parent.name == "A100\\x1b[31m" and [m.pod for m in parent.mig_devices] == ["p1", "p2"]


def test_a_changed_layout_is_planned_afresh():
    parser, cache = Parser(), LabelCache()
    one = exporter_text([(gpu_labels(0, "GPU-a"), {"DCGM_FI_DEV_GPU_UTIL": 10})])
    two = exporter_text([(gpu_labels(0, "GPU-a"), {"DCGM_FI_DEV_GPU_UTIL": 20}),
                         (gpu_labels(1, "GPU-b"), {"DCGM_FI_DEV_GPU_UTIL": 30})])
    assert [g.util_pct for g in parse_dcgm(parser.parse(one), cache=cache)] == [10.0]
    assert [g.util_pct for g in parse_dcgm(parser.parse(two), cache=cache)] == [20.0, 30.0]
    assert [g.util_pct for g in parse_dcgm(parser.parse(one), cache=cache)] == [10.0]
    hostless = exporter_text([(gpu_labels(0, "GPU-a", host_key=None), {"DCGM_FI_DEV_GPU_UTIL": 10})])
    assert [g.host for g in parse_dcgm(parser.parse(hostless), default_host="node-a", cache=cache)] == ["node-a"]
    assert [g.host for g in parse_dcgm(parser.parse(hostless), default_host="node-b", cache=cache)] == ["node-b"]


def reference_counters(exp, key) -> dict[str, float]:
    """Counters and buckets of one label set read plainly from the document's samples."""
    from infertop.sources.vllm_names import COUNTERS, HISTOGRAMS, _key, _le

    out: dict[str, float] = {}
    for fld, names in COUNTERS.items():
        name = next((n for n in names if exp.series(n)), None)
        vals = [v for lab, v in exp.series(name) if _key(lab) == key] if name else []
        if vals:
            out[fld] = sum(vals) if len(vals) > 1 else vals[0]
    for fld, names in HISTOGRAMS.items():
        name = next((n for n in names if exp.series(n)), None)
        for lab, v in exp.series(name) if name else ():
            le = _le(lab.get("le"))
            if le is not None and _key(lab) == key:
                k = f"{fld}@{le!r}"
                out[k] = out[k] + v if k in out else v
    return out


def test_extracted_counters_are_the_documents_sums_per_label_set():
    from infertop.sources.vllm_names import Extractor
    from vllm_text import v1_doc

    text = v1_doc(engines={"0": {"running": 2, "success": 7, "ttft": [0.02, 0.3, 4.0]},
                           "1": {"running": 5, "success": 3, "ttft": [0.5]}})
    parser, extractor = Parser(lazy_values=True), Extractor()
    for _ in range(2):  # a new layout, then the same layout again (the planned path)
        exp = parser.parse(text)
        _, samples = extractor.extract(exp)
        assert [s.key[1] for s in samples] == ["0", "1"]
        for s in samples:
            assert s.counters == reference_counters(exp, s.key)
            assert list(s.counters) == list(reference_counters(exp, s.key))  # and in the same order
        assert samples[0].counters["requests"] == 8.0 and samples[1].counters["requests"] == 4.0  # summed
