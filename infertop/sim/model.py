"""Pure-Python model of one vLLM 0.32 (V1) engine on a virtual clock.

Nothing here reads the wall clock or the global ``random`` module: the model
is advanced by :meth:`EngineModel.step` and draws its (few) random numbers
from its own ``random.Random(seed)``, so a run is reproducible.

What is modelled (after vLLM's V1 scheduler):

* **Continuous batching.** At most ``max_num_seqs`` requests run; the rest
  wait in a FIFO queue (or, with ``scheduling_policy="priority"``, a queue
  ordered by ``(priority, arrival)``; lower integer priority runs first).
* **Iterations.** One engine step schedules every decoding request for one
  token plus prefill chunks (chunked prefill, ``max_num_batched_tokens`` per
  step). Its duration grows with the batch, the context held in the KV cache
  and the prefill tokens, and shrinks with the GPU's SM clock
  (:attr:`EngineModel.speed`).
* **KV-cache blocks.** A running request holds ``ceil(tokens / block_size)``
  blocks. When a step cannot get the blocks it needs, the newest running
  request (lowest priority under the priority policy) is preempted: its
  blocks are freed and it goes back to the front of the waiting queue, to be
  recomputed later (``num_preemptions``).
* **Prefix caching.** Requests may carry a ``prefix_id``. Once one request
  has computed that prefix, its full blocks stay cached (shared while in use,
  evictable LRU when not) and later requests skip them (queries/hits are
  counted in tokens, as vLLM does).

Every metric vLLM 0.32 records is kept here (counters, gauges, histograms);
:mod:`infertop.sim.metrics` renders them.

Decoding requests are tracked lazily so that a step costs O(1) per
*event* (arrival, prefill chunk, finish, preemption), not per running
request: a decoder's output count is ``o0 + (g - g0)`` where ``g`` counts
steps, block-boundary crossings are found through ``block_size`` phase
buckets, and every decoder in a step observes the same inter-token latency.
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import fields, replace
from typing import Any, Callable

# The engine's parts live in sibling modules; the names below are re-exported
# here because callers import them from ``infertop.sim.model``.
from .engine_config import EngineConfig
from .histograms import (
    ITERATION_BUCKETS_V0,
    ITERATION_BUCKETS_V1,
    ITL_BUCKETS_V0,
    ITL_BUCKETS_V1,
    LATENCY_BUCKETS_V0,
    LATENCY_BUCKETS_V1,
    PARAMS_N_BUCKETS,
    PREEMPTION_BUCKETS,
    TTFT_BUCKETS_V0,
    TTFT_BUCKETS_V1,
    Histogram,
    build_1_2_5_buckets,
)
from .kv_cache import KvBlocks, WaitingQueue
from .requests import FINISHED, FINISHED_REASONS, PENDING, RUNNING, WAITING, SimRequest

__all__ = [
    "DEFAULT_EPOCH_S",
    "EngineConfig",
    "EngineModel",
    "Histogram",
    "SimRequest",
    "build_1_2_5_buckets",
    "FINISHED_REASONS",
]

#: Unix time that virtual t=0 maps to when no ``epoch_s`` is given (keeps
#: ``_created`` samples deterministic in tests).
DEFAULT_EPOCH_S = 1_795_937_400.0


class EngineModel:
    """One simulated vLLM engine. Not thread-safe: callers serialise access."""

    def __init__(self, config: EngineConfig | None = None, *, seed: int = 0, epoch_s: float = DEFAULT_EPOCH_S,
                 **overrides: Any) -> None:
        config = config or EngineConfig()
        if overrides:
            if "max_num_seqs" in overrides and "max_num_batched_tokens" not in overrides:
                overrides["max_num_batched_tokens"] = max(config.max_num_batched_tokens,
                                                          int(overrides["max_num_seqs"]))
            config = replace(config, **overrides)
        self.config = config
        self.seed = seed
        self.epoch_s = float(epoch_s)
        self._rng = random.Random(f"infertop-sim-engine:{seed}")
        self.now = 0.0
        #: Relative GPU speed (SM clock / max clock); the GPU model sets it.
        self.speed = 1.0
        #: 0 awake, 1 weights offloaded, 2 discard all (``/sleep`` levels).
        self.sleep_level = 0
        #: Bumped whenever the exposition layout changes (restart, config).
        self.layout_version = 0
        self.restarts = 0
        self._seq = itertools.count()
        self._reset_state()
        self._reset_metrics()

    # ------------------------------------------------------------------ state

    def _reset_state(self) -> None:
        c = self.config
        self.created_t = self.now
        self.running: list[SimRequest] = []
        self._prefilling: list[SimRequest] = []
        self.waiting = WaitingQueue(priority=c.scheduling_policy == "priority")
        self._pending: list[tuple[float, int, SimRequest]] = []
        # requests streaming their tokens, with their callbacks (insertion order: submission)
        self._watched: dict[SimRequest, Callable[[SimRequest, int, float], Any]] = {}
        self.g = 0
        self._buckets: list[set[SimRequest]] = [set() for _ in range(c.block_size)]
        self._finish_heap: list[tuple[int, int, int, SimRequest]] = []
        self._n_dec = 0
        self._ctx_dec = 0
        self.kv = KvBlocks(c.num_gpu_blocks, c.block_size, prefix_caching=c.enable_prefix_caching)
        # current iteration
        self._it_active = False
        self._dec_alloc = False
        self._it_start = 0.0
        self._it_gpu_start = 0.0
        self._it_end = 0.0
        self._it_n_dec = 0
        self._it_prefills: list[tuple[SimRequest, int]] = []
        self._prev_end = self.now
        self._busy_done = 0.0
        self._act_busy_mark = 0.0
        self._act_tokens = 0
        self._act_steps = 0

    def _reset_metrics(self) -> None:
        c = self.config
        v0 = c.metrics_version == "v0"
        tok = build_1_2_5_buckets(c.max_model_len)
        self.prompt_tokens_total = 0.0
        self.generation_tokens_total = 0.0
        self.num_preemptions_total = 0.0
        self.prefix_cache_queries_total = 0.0
        self.prefix_cache_hits_total = 0.0
        self.prompt_tokens_by_source = {"local_compute": 0.0, "local_cache_hit": 0.0, "external_kv_transfer": 0.0}
        self.prompt_tokens_cached_total = 0.0
        self.prompt_tokens_cached_by_source = {"device": 0.0, "host": 0.0, "p2p": 0.0, "disk": 0.0,
                                               "external_unspecified": 0.0}
        self.request_success = {r: 0.0 for r in FINISHED_REASONS}
        self.admission_rejections = {"max_num_queued_reqs": 0.0, "max_num_queued_tokens": 0.0}
        self.iterations_total = 0
        self.h_prompt_tokens = Histogram(tok)
        self.h_generation_tokens = Histogram(tok)
        self.h_iteration_tokens = Histogram(ITERATION_BUCKETS_V0 if v0 else ITERATION_BUCKETS_V1)
        self.h_max_num_generation_tokens = Histogram(tok)
        self.h_params_n = Histogram(PARAMS_N_BUCKETS)
        self.h_params_max_tokens = Histogram(tok)
        self.h_ttft = Histogram(TTFT_BUCKETS_V0 if v0 else TTFT_BUCKETS_V1)
        self.h_itl = Histogram(ITL_BUCKETS_V0 if v0 else ITL_BUCKETS_V1)
        self.h_request_tpot = Histogram(ITL_BUCKETS_V1)
        lat = LATENCY_BUCKETS_V0 if v0 else LATENCY_BUCKETS_V1
        self.h_e2e = Histogram(lat)
        self.h_queue = Histogram(lat)
        self.h_inference = Histogram(lat)
        self.h_prefill = Histogram(lat)
        self.h_decode = Histogram(lat)
        self.h_num_preemptions = Histogram(PREEMPTION_BUCKETS)
        self.h_prefill_kv_computed = Histogram(tok)

    @property
    def created_unix(self) -> float:
        """Unix time of the last (re)start: what ``*_created`` samples show."""
        return self.epoch_s + self.created_t

    def restart(self, **config_changes: Any) -> None:
        """Process restart: queues emptied, counters and histograms reset.

        In-flight requests are finished with reason "abort" (callbacks fire,
        nothing is counted). ``config_changes`` apply new engine arguments,
        e.g. ``restart(max_num_seqs=32)``.
        """
        inflight = list(self.running) + self.waiting.requests() + [p[2] for p in self._pending]
        if config_changes:
            if "max_num_seqs" in config_changes and "max_num_batched_tokens" not in config_changes:
                config_changes["max_num_batched_tokens"] = max(self.config.max_num_batched_tokens,
                                                               int(config_changes["max_num_seqs"]))
            self.config = replace(self.config, **config_changes)
        self._reset_state()
        self._reset_metrics()
        self.sleep_level = 0
        self.restarts += 1
        self.layout_version += 1
        for req in inflight:
            req.state = FINISHED
            req.finished_reason = "abort"
            req.finish_t = self.now
            if req.on_finish is not None:
                req.on_finish(req)

    def sleep(self, level: int = 1) -> None:
        """vLLM sleep mode: nothing is scheduled until :meth:`wake_up`."""
        if level not in (1, 2):
            raise ValueError("sleep level must be 1 or 2")
        self.sleep_level = level

    def wake_up(self) -> None:
        self.sleep_level = 0

    # ------------------------------------------------------------ submission

    def submit(self, req: SimRequest) -> bool:
        """Queue a request. Its ``arrival_t`` may lie in the future (it then
        arrives during a later :meth:`step`); None or a past time means "now": it waits at once.

        Returns False (and counts an admission rejection) when the waiting
        queue is full; raises ValueError for a prompt that cannot fit.
        """
        c = self.config
        if req.state != PENDING:
            raise ValueError(f"request {req.request_id} was already submitted")
        if req.prompt_tokens >= c.max_model_len:
            raise ValueError(f"prompt of {req.prompt_tokens} tokens does not fit max_model_len {c.max_model_len}")
        if req.arrival_t is None or req.arrival_t < self.now:
            req.arrival_t = self.now
        if c.max_num_queued_reqs is not None and self.num_waiting + len(self._pending) >= c.max_num_queued_reqs:
            self.admission_rejections["max_num_queued_reqs"] += 1
            return False
        target = min(req.max_tokens, c.max_model_len - req.prompt_tokens)
        if req.stop_at is not None:
            target = min(target, max(1, int(req.stop_at)))
        req.target = target
        req.seq = next(self._seq)
        if req.on_token is not None:
            self._watched[req] = req.on_token
        if req.arrival_t <= self.now:
            # it is here: waiting from this moment (as vLLM's scheduler has it), not at the next step,
            # so /metrics never shows an accepted request as neither waiting nor running
            req.state = WAITING
            self.waiting.push(req, front=False)
        else:
            heapq.heappush(self._pending, (req.arrival_t, req.seq, req))
        return True

    def abort(self, req: SimRequest) -> bool:
        """Abort a request (client went away). Counts finished_reason="abort"."""
        if req.state == FINISHED:
            return False
        t = self.now
        if req.state == PENDING:
            self._pending = [p for p in self._pending if p[2] is not req]
            heapq.heapify(self._pending)
        elif req.state == WAITING:
            self.waiting.remove(req)
        elif req.state == RUNNING:
            self._release_running(req)
            if req in self._prefilling:
                self._prefilling.remove(req)
        self._watched.pop(req, None)
        req.state = FINISHED
        req.finished_reason = "abort"
        req.finish_t = t
        self.request_success["abort"] += 1
        if req.on_finish is not None:
            req.on_finish(req)
        return True

    # ------------------------------------------------------------- accessors

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_pending(self) -> int:
        return len(self._pending)

    @property
    def num_waiting(self) -> int:
        return self.waiting.count

    @property
    def used_blocks(self) -> int:
        return self.kv.used

    @property
    def kv_cache_usage(self) -> float:
        """Fraction of KV blocks held by running requests, 0..1."""
        return self.used_blocks / self.config.num_gpu_blocks

    @property
    def is_busy(self) -> bool:
        return self._it_active

    def busy_time(self) -> float:
        """Seconds of (virtual) time spent executing steps since the (re)start."""
        b = self._busy_done
        if self._it_active and self.now > self._it_gpu_start:
            b += min(self.now, self._it_end) - self._it_gpu_start
        return b

    def take_activity(self) -> tuple[float, int, int]:
        """(busy seconds, tokens, steps) since the previous call: feeds the GPU model."""
        busy = self.busy_time()
        d = busy - self._act_busy_mark
        self._act_busy_mark = busy
        tokens, steps = self._act_tokens, self._act_steps
        self._act_tokens = 0
        self._act_steps = 0
        return max(0.0, d), tokens, steps

    def requests(self) -> list[SimRequest]:
        """Running, then waiting, then not-yet-arrived requests."""
        return list(self.running) + self.waiting.requests() + [p[2] for p in sorted(self._pending)]

    def output_tokens_of(self, req: SimRequest) -> int:
        if req.decoding:
            return req.o0 + (self.g - req.g0)
        return req.out

    # ------------------------------------------------------------------ steps

    def step(self, dt: float) -> None:
        """Advance the virtual clock by ``dt`` seconds, running engine steps."""
        if dt < 0:
            raise ValueError("dt must be >= 0")
        target = self.now + dt
        pending = self._pending
        while True:
            if self._it_active:
                if self._it_end > target:
                    break
                self._end_iteration()
                self._admit_arrivals(self.now)
                self._start_iteration()
            else:
                self._admit_arrivals(self.now)
                if (self.running or self.waiting.count) and self.sleep_level == 0 and self._start_iteration():
                    continue
                if pending and pending[0][0] <= target:
                    self.now = max(self.now, pending[0][0])
                    self._admit_arrivals(self.now)
                    if self.sleep_level == 0:
                        self._start_iteration()
                    continue
                break
        self.now = target
        self._admit_arrivals(target)

    def stall(self, dt: float) -> None:
        """``dt`` seconds of a stuck engine core (a hung collective, a wedged kernel): the clock moves,
        the step in flight never ends, nothing is scheduled or admitted, so every counter and gauge
        stays where it was; the GPU sees no busy time."""
        if dt < 0:
            raise ValueError("dt must be >= 0")
        self.now += dt
        if self._it_active:  # the step in flight is pushed out with the clock: it neither ends nor counts busy
            self._it_start += dt
            self._it_gpu_start += dt
            self._it_end += dt

    def _admit_arrivals(self, t: float) -> None:
        pending = self._pending
        while pending and pending[0][0] <= t:
            req = heapq.heappop(pending)[2]
            req.state = WAITING
            self.waiting.push(req, front=False)

    # The waiting queue and the KV blocks (prefix cache included) are the model's parts
    # (infertop.sim.kv_cache); taking a request out of the batch and preemption are below.

    # the batch -----------------------------------------------------------------

    def _dec_own_blocks(self, req: SimRequest, out: int) -> int:
        """Blocks a decoder with ``out`` output tokens holds beside its shared prefix."""
        shared = req.entry.blocks if req.entry is not None else 0
        return -(-(req.prompt_tokens + out - 1) // self.config.block_size) - shared

    def _release_running(self, req: SimRequest) -> int:
        """Take a running request out of the batch; returns its output count."""
        kv = self.kv
        if req.decoding:
            out = req.o0 + (self.g - req.g0)
            own = self._dec_own_blocks(req, out)
            if self._dec_alloc and req.phase == (1 - self.g) % self.config.block_size:
                own += 1  # the block allocated for this step's token
            if self._it_active:
                self._it_n_dec -= 1  # leaves the step in flight: no token from it
            kv.own -= own
            self._buckets[req.phase].discard(req)
            self._ctx_dec -= req.prompt_tokens + out
            self._n_dec -= 1
            req.decoding = False
            req.epoch += 1
            req.out = out
        else:
            out = req.out
            kv.own -= req.blocks
            req.blocks = 0
        kv.unref_entry(req)
        self.running.remove(req)
        return out

    def _pick_victim(self) -> SimRequest:
        """The request preemption takes: the newest, or the lowest priority under the priority policy."""
        if self.config.scheduling_policy == "priority":
            return max(self.running, key=lambda r: (r.priority, r.arrival_t or 0.0, r.seq))
        return self.running[-1]

    def _preempt(self, victim: SimRequest) -> None:
        """Free ``victim``'s blocks and queue it at the front, to be recomputed."""
        if not victim.decoding and victim in self._prefilling:
            self._prefilling.remove(victim)
        self._release_running(victim)
        victim.computed = 0
        victim.last_token_t = self._prev_end if victim.out else None
        victim.num_preemptions += 1
        self.num_preemptions_total += 1
        victim.state = WAITING
        self.waiting.push(victim, front=True)

    # iterations --------------------------------------------------------------

    def _start_iteration(self) -> bool:
        """Schedule one engine step at ``self.now``; False if nothing to do."""
        c = self.config
        if self.sleep_level:
            return False
        bs = c.block_size
        budget = c.max_num_batched_tokens
        preempted = False
        # 1. decoders: one token each; new blocks for those crossing a boundary.
        if self._n_dec:
            while True:
                need = len(self._buckets[(1 - self.g) % bs])
                if self.kv.ensure_free(need) or not self.running:
                    break
                self._preempt(self._pick_victim())
                preempted = True
            self.kv.own += len(self._buckets[(1 - self.g) % bs])
            self._dec_alloc = True
        n_dec = self._n_dec
        budget -= n_dec
        prefills: list[tuple[SimRequest, int]] = []
        pf_tokens = 0
        # 2. running requests still in prefill (in scheduling order).
        for req in list(self._prefilling):
            if req.state != RUNNING or budget <= 0:
                continue
            chunk = min(req.prefill_target - req.computed, budget)
            shared = req.entry.blocks if req.entry is not None else 0
            while True:
                need = -(-(req.computed + chunk) // bs) - shared - req.blocks
                if self.kv.ensure_free(need):
                    break
                victim = self._pick_victim()
                self._preempt(victim)
                preempted = True
                if victim is req:
                    break
            if req.state != RUNNING:
                continue
            self.kv.own += need
            req.blocks += need
            prefills.append((req, chunk))
            budget -= chunk
            pf_tokens += chunk
        # 3. waiting requests, unless this step had to preempt.
        if not preempted:
            while budget > 0 and len(self.running) < c.max_num_seqs:
                head = self.waiting.peek()
                if head is None:
                    break
                req = head
                entry = self.kv.match(req)
                hit = entry.tokens if entry is not None else 0
                todo = req.prompt_tokens + req.out
                chunk = min(todo - hit, budget)
                need = -(-(hit + chunk) // bs) - (entry.blocks if entry is not None else 0)
                if not self.kv.ensure_free(need):
                    break
                if entry is not None and not self.kv.holds(entry):
                    # evicted by the call above to make room: recompute without it
                    continue
                self.waiting.pop()
                if entry is not None:
                    self.kv.ref_entry(req, entry)
                if c.enable_prefix_caching:
                    self.prefix_cache_queries_total += todo
                    self.prefix_cache_hits_total += hit
                if req.first_scheduled_t is None:
                    req.first_scheduled_t = self.now
                    req.first_hit = hit
                req.state = RUNNING
                req.computed = hit
                req.prefill_target = todo
                req.blocks = need
                self.kv.own += need
                self.running.append(req)
                self._prefilling.append(req)
                prefills.append((req, chunk))
                budget -= chunk
                pf_tokens += chunk
        n_dec = self._n_dec  # decoders preempted above produce nothing
        if n_dec == 0 and not prefills:
            self._dec_alloc = False
            return False
        d = (c.step_base_s + c.step_per_seq_s * (n_dec + len(prefills)) + c.step_per_ctx_token_s * self._ctx_dec
             + c.prefill_per_token_s * pf_tokens)
        if c.step_jitter:
            d *= 1.0 + c.step_jitter * (2.0 * self._rng.random() - 1.0)
        d /= max(self.speed, 0.05)
        self._it_active = True
        self._it_start = self.now
        self._it_gpu_start = self.now + c.step_overhead_s
        self._it_end = self.now + c.step_overhead_s + d
        self._it_n_dec = n_dec
        self._it_prefills = prefills
        return True

    def _end_iteration(self) -> None:
        t = self._it_end
        d = t - self._it_start
        self.now = t
        self._it_active = False
        self._dec_alloc = False
        self._busy_done += t - self._it_gpu_start
        n = self._it_n_dec
        self.g += 1
        self._ctx_dec += n
        h_itl = self.h_itl
        if n:
            h_itl.observe(d, n)
            self.generation_tokens_total += n
        # token callbacks for watched decoders (before prefill completions join)
        if self._watched:
            for req, on_token in list(self._watched.items()):
                if req.decoding and req.g0 < self.g:
                    on_token(req, req.o0 + (self.g - req.g0), t)
        pf_tokens = 0
        bs = self.config.block_size
        for req, chunk in self._it_prefills:
            pf_tokens += chunk
            if req.state != RUNNING or req.decoding:
                continue
            req.computed += chunk
            if req.computed < req.prefill_target:
                continue
            # prefill done: this step sampled a token
            self._prefilling.remove(req)
            self.generation_tokens_total += 1
            assert req.arrival_t is not None  # set by submit
            if req.out == 0:
                req.first_token_t = t
                self.h_ttft.observe(t - req.arrival_t)
                if not req.counted_prompt:
                    req.counted_prompt = True
                    P = req.prompt_tokens
                    hit = req.first_hit
                    self.prompt_tokens_total += P
                    self.prompt_tokens_by_source["local_compute"] += P - hit
                    self.prompt_tokens_by_source["local_cache_hit"] += hit
                    self.prompt_tokens_cached_total += hit
                    self.prompt_tokens_cached_by_source["device"] += hit
            else:
                assert req.last_token_t is not None  # a request with output keeps its last token's time
                h_itl.observe(t - req.last_token_t)
            req.out += 1
            req.last_token_t = t
            self.kv.register_prefix(req)
            if req.on_token is not None:
                req.on_token(req, req.out, t)
            if req.out >= req.target:
                self._finish(req, t)
                continue
            # becomes a decoder (holds ceil((P + out - 1) / bs) blocks, as now)
            self.kv.own -= req.blocks
            req.blocks = 0
            req.decoding = True
            req.o0 = req.out
            req.g0 = self.g
            req.phase = (req.prompt_tokens + req.o0 - req.g0) % bs
            self._buckets[req.phase].add(req)
            self.kv.own += self._dec_own_blocks(req, req.out)
            heapq.heappush(self._finish_heap, (self.g + req.target - req.o0, req.seq, req.epoch, req))
            self._ctx_dec += req.prompt_tokens + req.out
            self._n_dec += 1
        tokens = n + pf_tokens
        self.h_iteration_tokens.observe(tokens)
        self.iterations_total += 1
        self._act_tokens += tokens
        self._act_steps += 1
        heap = self._finish_heap
        g = self.g
        while heap and heap[0][0] <= g:
            _, _, epoch, req = heapq.heappop(heap)
            if req.epoch == epoch and req.state == RUNNING and req.decoding:
                req.last_token_t = t
                self._finish(req, t)
        self._prev_end = t
        self._it_prefills = []

    def _finish(self, req: SimRequest, t: float) -> None:
        out = self._release_running(req)
        if req in self._prefilling:
            self._prefilling.remove(req)
        req.out = out
        req.state = FINISHED
        req.finish_t = t
        self._watched.pop(req, None)
        reason = "stop" if (req.stop_at is not None and out >= req.stop_at) else "length"
        req.finished_reason = reason
        self.request_success[reason] += 1
        arrival = req.arrival_t
        assert arrival is not None  # set by submit
        sched = req.first_scheduled_t if req.first_scheduled_t is not None else t
        first = req.first_token_t if req.first_token_t is not None else t
        self.h_e2e.observe(t - arrival)
        self.h_queue.observe(sched - arrival)
        self.h_prefill.observe(first - sched)
        self.h_decode.observe(t - first)
        self.h_inference.observe(t - sched)
        self.h_request_tpot.observe((t - first) / (out - 1) if out > 1 else 0.0)
        self.h_prompt_tokens.observe(req.prompt_tokens)
        self.h_generation_tokens.observe(out)
        self.h_max_num_generation_tokens.observe(out)
        self.h_params_n.observe(req.n)
        self.h_params_max_tokens.observe(req.max_tokens)
        self.h_num_preemptions.observe(req.num_preemptions)
        self.h_prefill_kv_computed.observe(req.prompt_tokens - req.first_hit)
        if req.on_finish is not None:
            req.on_finish(req)

    def check_invariants(self) -> None:
        """Recompute the incremental bookkeeping from scratch; raise AssertionError if it drifted."""
        c = self.config
        bs = c.block_size
        own = 0
        n_dec = 0
        ctx = 0
        for r in self.running:
            assert r.state == RUNNING, r
            if r.decoding:
                n_dec += 1
                out = r.o0 + (self.g - r.g0)
                own += self._dec_own_blocks(r, out)
                if self._dec_alloc and r.phase == (1 - self.g) % bs:
                    own += 1
                ctx += r.prompt_tokens + out
                assert r in self._buckets[r.phase]
                assert out < r.target, (r, out)
            else:
                assert r in self._prefilling
                shared = r.entry.blocks if r.entry is not None else 0
                assert r.blocks + shared >= -(-r.computed // bs), r
                own += r.blocks
        assert own == self.kv.own, (own, self.kv.own)
        assert n_dec == self._n_dec, (n_dec, self._n_dec)
        assert ctx == self._ctx_dec, (ctx, self._ctx_dec)
        assert sum(len(b) for b in self._buckets) == n_dec
        self.kv.check_invariants(self.running)
        assert len(self.running) <= c.max_num_seqs
        waiting = self.waiting.requests()
        assert len(waiting) == self.waiting.count, (len(waiting), self.waiting.count)
        assert len(self._prefilling) == len(self.running) - n_dec

    # --------------------------------------------------------------- summary

    def snapshot(self) -> dict[str, Any]:
        """A small dict of the current state (for logs and debugging)."""
        return {
            "now": self.now,
            "running": len(self.running),
            "waiting": self.num_waiting,
            "kv_cache_usage": self.kv_cache_usage,
            "preemptions": self.num_preemptions_total,
            "prompt_tokens": self.prompt_tokens_total,
            "generation_tokens": self.generation_tokens_total,
            "finished": sum(self.request_success.values()),
            "prefix_hits": self.prefix_cache_hits_total,
            "prefix_queries": self.prefix_cache_queries_total,
        }


#: Names accepted by :meth:`EngineModel.restart` and ``EngineModel(**overrides)``.
CONFIG_FIELDS = tuple(f.name for f in fields(EngineConfig))
