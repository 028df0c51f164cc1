"""Hostile engines: small loopback servers that misbehave in one way each.

Every case is a :class:`Case`: how to script a :class:`ScriptedServer`, and
what infertop must make of it (state, error text, values as "no data").
The suites in this folder run each next to a healthy simulated engine.
"""

from __future__ import annotations

import ctypes
import gc
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from infertop.sim import SimCluster
from scripted_server import ScriptedServer, Stream
from vllm_text import v1_doc

INF = float("inf")
NAN = float("nan")
ESC_MODEL = "\x1b]0;pwned\x07\x1b[2Jtiny"  # sets the terminal title, clears the screen
ESC_SHOWN = "\\x1b]0;pwned\\x07\\x1b[2Jtiny"  # what infertop shows instead
HANG_TIMEOUT_S = 0.5  # the hanging engines' timeout (the others keep the default 2 s)
MANY = 20_000


@dataclass
class Case:
    name: str
    setup: Callable[[ScriptedServer], None]
    state: str  # "up", "degraded" or "down" once polled a few times
    error: str | None = None  # a substring of the engine's error text ("" = no error)
    none_fields: tuple[str, ...] = ()  # values that must be "no data"
    model: str | None = None  # the model shown, verbatim
    names: int = 1  # engines this endpoint shows
    timeout_s: float = 2.0
    extra: dict = field(default_factory=dict)


def _engine(srv: ScriptedServer, metrics, model: str = "tiny") -> None:
    srv.serve_engine(metrics, model=model)


def hang(srv: ScriptedServer) -> None:
    _engine(srv, "")
    srv.hang.add("/metrics")


def slowloris(srv: ScriptedServer) -> None:
    _engine(srv, "")
    doc = v1_doc().encode()
    srv.routes["/metrics"] = (200, Stream(lambda: (doc[i:i + 1] for i in range(len(doc))), delay_s=0.05))


def http500(srv: ScriptedServer) -> None:
    _engine(srv, "")
    srv.routes["/metrics"] = (500, b"Internal Server Error")


def garbage(srv: ScriptedServer) -> None:
    _engine(srv, bytes(range(256)) * 64)


def nonfinite(srv: ScriptedServer) -> None:
    _engine(srv, v1_doc(engines={"0": dict(running=NAN, waiting=INF, kv=1e308, gen=1e308, prompt=-INF)}))


def negative(srv: ScriptedServer) -> None:
    _engine(srv, v1_doc(engines={"0": dict(running=-5, waiting=-1e308, kv=-0.3, gen=-10)}))


def counter_poison(srv: ScriptedServer) -> None:
    """A sane counter with one +Inf and one 1e308 sample in the middle."""
    values = itertools.chain([100.0, 200.0, INF, 300.0, 1e308], itertools.count(400.0, 100.0))
    _engine(srv, lambda: v1_doc(engines={"0": dict(running=1, gen=next(values))}))


def nonmonotonic(srv: ScriptedServer) -> None:
    doc = v1_doc(engines={"0": dict(running=1, ttft=[0.3] * 5)})
    lines = []
    n = 100.0
    for line in doc.splitlines():
        if line.startswith("vllm:time_to_first_token_seconds_bucket"):
            line = line.rpartition(" ")[0] + f" {n}"  # cumulative counts that fall with le
            n -= 7
        lines.append(line)
    lines.append('vllm:time_to_first_token_seconds_bucket{engine="0",le="NaN",model_name="tiny"} 3')
    lines.append('vllm:time_to_first_token_seconds_bucket{engine="0",le="junk",model_name="tiny"} 3')
    lines.append('vllm:time_to_first_token_seconds_bucket{engine="0",le="-Inf",model_name="tiny"} 3')
    lines.append('vllm:time_to_first_token_seconds_bucket{engine="0",le="-5",model_name="tiny"} 3')
    _engine(srv, "\n".join(lines) + "\n")


def markup_label(srv: ScriptedServer) -> None:
    _engine(srv, v1_doc(engines={"0": dict(running=2)}, model="[/evil]"), model="[/evil]")


def markup_metric(srv: ScriptedServer) -> None:
    _engine(srv, "foo[/x] 1\n")


def esc_label(srv: ScriptedServer) -> None:
    esc = ESC_MODEL.replace("\\", "\\\\")
    _engine(srv, v1_doc(engines={"0": dict(running=2)}, model=esc), model="x")


def duplicate_names(srv: ScriptedServer) -> None:
    """("tiny", "0") and ("tiny", "") both derive "<name>/tiny#0"."""
    doc = v1_doc(engines={"0": dict(running=1)})
    doc += 'vllm:num_requests_running{model_name="tiny"} 3.0\n'
    _engine(srv, doc)


def malformed_models(srv: ScriptedServer) -> None:
    _engine(srv, v1_doc(engines={"0": dict(running=1)}, model=""))
    answers = itertools.cycle([b'{"data": ["x"]}', b'{"data": [{"id": 5}, null]}', b"[1, 2]", b"null",
                               b'{"data": {"id": "x"}}', b"\xff\xfe not json", b'{"data": [' * 5000])
    srv.routes["/v1/models"] = lambda: (200, next(answers))
    srv.routes["/version"] = (200, json.dumps({"version": {"nested": "[/evil]"}}))


def huge_metrics(srv: ScriptedServer) -> None:
    """A 60 MB /metrics, streamed without a Content-Length."""
    line = (b'x{a="' + b"y" * 1000 + b'"} 1\n') * 64

    def chunks():
        for _ in range(60 * 2**20 // len(line)):
            yield line

    _engine(srv, "")
    srv.routes["/metrics"] = (200, Stream(chunks, delay_s=0.001))  # ≤ 64 MB/s: this server shares our GIL


def endless_health(srv: ScriptedServer) -> None:
    """A sane /metrics, and a /health whose body never ends."""
    _engine(srv, v1_doc(engines={"0": dict(running=1)}))
    block = b"ok" * 32768
    srv.routes["/health"] = (200, Stream(lambda: itertools.repeat(block), delay_s=0.001))


def many_series(srv: ScriptedServer) -> None:
    rows = [f'vllm:num_requests_running{{engine="{i}",model_name="m"}} 1' for i in range(MANY)]
    rows += [f'vllm:generation_tokens_total{{engine="{i}",model_name="m"}} {i}' for i in range(MANY)]
    _engine(srv, "# TYPE vllm:num_requests_running gauge\n" + "\n".join(rows) + "\n")


CASES: list[Case] = [
    Case("hang", hang, "down", "timeout after 0.5 s", timeout_s=HANG_TIMEOUT_S),
    Case("slowloris", slowloris, "down", "timeout after 0.5 s", timeout_s=HANG_TIMEOUT_S),
    Case("http500", http500, "degraded", "HTTP 500"),
    Case("garbage", garbage, "degraded", "garbage /metrics (line 1"),
    Case("nonfinite", nonfinite, "up", "", ("running", "waiting", "kv_cache_pct", "prompt_tokens_per_s")),
    Case("negative", negative, "up", "", ("running", "waiting", "kv_cache_pct", "generation_tokens_per_s")),
    Case("counter-poison", counter_poison, "up", "", extra={"not_none": ("generation_tokens_per_s",)}),
    Case("nonmonotonic", nonmonotonic, "up", ""),
    Case("markup-label", markup_label, "up", "", model="[/evil]"),
    Case("markup-metric", markup_metric, "degraded", "invalid metric name 'foo[/x]'"),
    Case("esc-label", esc_label, "up", "", model=ESC_SHOWN),
    Case("duplicate-names", duplicate_names, "up", "", names=2),
    Case("malformed-models", malformed_models, "up", ""),
    # a generous timeout: the body must be cut off by its size, long before any timeout
    Case("huge-metrics", huge_metrics, "degraded", "response too large (> 8 MiB)", timeout_s=10.0),
    Case("endless-health", endless_health, "degraded", "/health failing: response too large (> 64 KiB)",
         timeout_s=10.0),
    Case("many-series", many_series, "degraded", f"too many series ({MANY}) — showing the first 64", names=64),
]
CASE_IDS = [c.name for c in CASES]


@pytest.fixture(scope="session")
def healthy():
    """One realtime simulated vLLM engine under steady load (no GPU exporter).
    (A fixture here, imported by the suites: a second conftest.py would shadow tests/conftest.py.)"""
    with SimCluster(1, seed=5, load="steady", dcgm=False) as c:
        yield c.engines[0]


def rss_bytes() -> int:
    """Resident set size of this test process, from /proc/self/status, after a collection and
    ``malloc_trim``: memory freed but still cached by the allocator (more of it on a loaded machine,
    where the server thread and the reader interleave differently) is not memory anyone holds."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the plain RSS
        pass
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")
