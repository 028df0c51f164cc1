"""Fault injection of the simulated engine server: fault names and the bodies bad faults answer.

See :mod:`infertop.sim.server` for what each fault does (:meth:`SimEngine.set_fault`).
"""

from __future__ import annotations

import threading

__all__ = ["FAULTS", "HUGE_BODY_BYTES", "HUGE_LABEL_COUNT"]

FAULTS = (None, "garbage", "http500", "hang", "huge", "huge_labels", "down")
HUGE_BODY_BYTES = 50 * 1024 * 1024
HUGE_LABEL_COUNT = 10_000


_GARBAGE = (b"\x00\x01\x02\xff\xfe<html><head><title>502 Bad Gateway</title></head>\n"
            b"<body>\x89PNG\r\n\x1a\n{{{ this is not an exposition }}} \xde\xad\xbe\xef\n"
            b"vllm:num_requests_running{engine=\"0\" 1 2 3 four\n\xc3\x28\n")

# built once, on first use, under the lock (the padding is 50 MiB)
_huge_pad: bytes | None = None
_huge_labels: str | None = None
_huge_lock = threading.Lock()


def _huge_body(head: str) -> bytes:
    """``head`` plus a valid padding family, to exactly HUGE_BODY_BYTES."""
    global _huge_pad
    with _huge_lock:
        pad = _huge_pad
        if pad is None:
            line = b'sim_padding_bytes{chunk="%08d",filler="' + b"x" * 200 + b'"} 0.0\n'
            n = HUGE_BODY_BYTES // len(line % 0) + 1
            pad = b"# HELP sim_padding_bytes Padding (fault injection).\n# TYPE sim_padding_bytes gauge\n" + \
                b"".join(line % i for i in range(n))
            _huge_pad = pad
    h = head.encode()
    return h + pad[: max(0, HUGE_BODY_BYTES - len(h))]


def _huge_labels_text() -> str:
    global _huge_labels
    with _huge_lock:
        t = _huge_labels
        if t is None:
            labels = ",".join(f'label_{i:05d}="v{i}"' for i in range(HUGE_LABEL_COUNT))
            t = ("# HELP sim_huge_labels One sample with 10000 labels (fault injection).\n"
                 "# TYPE sim_huge_labels gauge\n"
                 f"sim_huge_labels{{{labels}}} 1.0\n")
            _huge_labels = t
    return t
