"""Parser speed vs prometheus_client on the real vLLM 0.32 captures, side by side.

    .venv/bin/python benchmarks/bench_parser.py

Cases, per capture (51 KB, 435 samples):
  prometheus_client   text_string_to_metric_families, all samples
  infertop cold       a fresh Parser (first scrape of an endpoint), all samples materialised
  infertop warm       the same Parser on the *next* scrapes: same series, new values
                      (what every poll after the first looks like), all samples materialised
  line split          str.split per line — a floor for any Python parser
Reported as time per document and ratio to prometheus_client. Medians of repeated runs.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from infertop.sources.expfmt import Parser

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"


def new_values(text: str, k: float) -> str:
    out = []
    for line in text.split("\n"):
        if line and not line.startswith("#"):
            head, _, v = line.rpartition(" ")
            line = f"{head} {float(v) + k!r}"
        out.append(line)
    return "\n".join(out)


def interleaved(cases: dict, rounds: int = 9) -> dict[str, float]:
    """Median seconds per call of each case, the cases run in turn each round
    so that background load hits them alike."""
    runs: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(rounds):
        for name, (fn, inner) in cases.items():
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            runs[name].append((time.perf_counter() - t0) / inner)
    return {k: statistics.median(v) for k, v in runs.items()}


def main() -> int:
    print(f"{'capture':28} {'case':20} {'ms/doc':>8} {'vs prometheus_client':>21}")
    for path in sorted(FIXTURES.glob("metrics_*.txt")):
        text = path.read_text()
        docs = [new_values(text, k) for k in range(1, 17)]
        warm_parser = Parser()
        warm_parser.parse(text)
        i = iter(range(10**9))
        res = interleaved({
            "prometheus_client": (lambda: [s for f in text_string_to_metric_families(text) for s in f.samples], 3),
            "infertop cold": (lambda: Parser().parse(text).all_samples, 10),
            "infertop warm": (lambda: warm_parser.parse(docs[next(i) % 16]).all_samples, 40),
            "line split": (lambda: [line.split(" ") for line in text.split("\n")], 40),
        })
        ref = res["prometheus_client"]
        for case, t in res.items():
            print(f"{path.name:28} {case:20} {t * 1e3:8.3f} {ref / t:20.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
