"""Requests of the simulated engine: :class:`SimRequest`, its states and prefix-cache entries."""

from __future__ import annotations

import itertools
from typing import Any, Callable

__all__ = ["SimRequest", "FINISHED_REASONS", "PENDING", "WAITING", "RUNNING", "FINISHED"]

FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")

# Request states
PENDING, WAITING, RUNNING, FINISHED = "pending", "waiting", "running", "finished"

_req_ids = itertools.count()


class SimRequest:
    """One request. Create it, then :meth:`EngineModel.submit` it.

    ``on_token(req, num_output_tokens, t)`` is called (from whichever thread
    steps the model) after every new output token; ``on_finish(req)`` once at
    the end (``req.finished_reason`` is then set: stop, length or abort).
    A restart of the engine finishes in-flight requests with reason "abort".
    """

    __slots__ = (
        "request_id", "prompt_tokens", "max_tokens", "stop_at", "prefix_id", "prefix_tokens", "priority", "n",
        "arrival_t", "on_token", "on_finish", "user_data",
        # state
        "state", "target", "out", "computed", "prefill_target", "blocks", "entry", "o0", "g0", "phase",
        "decoding", "epoch", "seq", "first_scheduled_t", "first_token_t", "last_token_t", "finish_t",
        "num_preemptions", "first_hit", "finished_reason", "counted_prompt",
    )

    def __init__(
        self,
        prompt_tokens: int,
        max_tokens: int,
        *,
        request_id: str | None = None,
        stop_at: int | None = None,
        prefix_id: str | None = None,
        prefix_tokens: int = 0,
        priority: int = 0,
        n: int = 1,
        arrival_t: float | None = None,
        on_token: Callable[[SimRequest, int, float], Any] | None = None,
        on_finish: Callable[[SimRequest], Any] | None = None,
        user_data: Any = None,
    ) -> None:
        if prompt_tokens < 1:
            raise ValueError("prompt_tokens must be >= 1")
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        self.request_id = request_id if request_id is not None else f"sim-{next(_req_ids)}"
        self.prompt_tokens = int(prompt_tokens)
        self.max_tokens = int(max_tokens)
        #: Natural end of the answer (EOS): finishing there counts as "stop".
        self.stop_at = stop_at
        self.prefix_id = prefix_id
        self.prefix_tokens = int(prefix_tokens)
        self.priority = int(priority)
        self.n = int(n)
        self.arrival_t = arrival_t
        self.on_token = on_token
        self.on_finish = on_finish
        self.user_data = user_data
        self.state = PENDING
        self.target = self.max_tokens
        self.out = 0
        self.computed = 0
        self.prefill_target = 0
        self.blocks = 0
        self.entry: _PrefixEntry | None = None
        self.o0 = 0
        self.g0 = 0
        self.phase = 0
        self.decoding = False
        self.epoch = 0
        self.seq = 0
        self.first_scheduled_t: float | None = None
        self.first_token_t: float | None = None
        self.last_token_t: float | None = None
        self.finish_t: float | None = None
        self.num_preemptions = 0
        self.first_hit = 0
        self.finished_reason: str | None = None
        self.counted_prompt = False

    @property
    def output_tokens(self) -> int:
        """Output tokens so far (exact between steps)."""
        return self.out

    def __repr__(self) -> str:
        return (f"SimRequest({self.request_id!r}, prompt={self.prompt_tokens}, max_tokens={self.max_tokens}, "
                f"state={self.state}, out={self.out})")


class _PrefixEntry:
    __slots__ = ("prefix_id", "tokens", "blocks", "ref")

    def __init__(self, prefix_id: str, tokens: int, blocks: int) -> None:
        self.prefix_id = prefix_id
        self.tokens = tokens
        self.blocks = blocks
        self.ref = 0
