"""KV-cache bookkeeping of the engine model: waiting queue, blocks, prefix cache, preemption.

:class:`KvCacheMixin` is a base class of :class:`infertop.sim.model.EngineModel`;
its methods work on the state that ``EngineModel._reset_state`` sets up.
"""

from __future__ import annotations

import heapq

from .requests import FINISHED, RUNNING, WAITING, SimRequest, _PrefixEntry

__all__ = ["KvCacheMixin"]


class KvCacheMixin:
    """Waiting queue, KV-block accounting, prefix cache and preemption of :class:`EngineModel`."""

    # waiting queue ----------------------------------------------------------

    def _push_waiting(self, req: SimRequest, front: bool) -> None:
        if self.config.scheduling_policy == "priority":
            heapq.heappush(self._waiting_heap, (req.priority, req.arrival_t, req.seq, req))
        elif front:
            self._waiting_fifo.appendleft(req)
        else:
            self._waiting_fifo.append(req)
        self.num_waiting += 1

    def _peek_waiting(self) -> SimRequest | None:
        if self.config.scheduling_policy == "priority":
            heap = self._waiting_heap
            while heap and heap[0][3].state != WAITING:
                heapq.heappop(heap)
            return heap[0][3] if heap else None
        fifo = self._waiting_fifo
        while fifo and fifo[0].state != WAITING:
            fifo.popleft()
        return fifo[0] if fifo else None

    def _pop_waiting(self) -> None:
        if self.config.scheduling_policy == "priority":
            heapq.heappop(self._waiting_heap)
        else:
            self._waiting_fifo.popleft()
        self.num_waiting -= 1

    def _remove_waiting(self, req: SimRequest) -> None:
        # Lazy: the entry is skipped when it reaches the head (state check).
        req.state = FINISHED
        self.num_waiting -= 1

    def _waiting_list(self) -> list[SimRequest]:
        if self.config.scheduling_policy == "priority":
            return [e[3] for e in sorted(self._waiting_heap) if e[3].state == WAITING]
        return [r for r in self._waiting_fifo if r.state == WAITING]

    # blocks ------------------------------------------------------------------

    def _truly_free(self) -> int:
        return self.config.num_gpu_blocks - self._own_blocks - self._prefix_ref_blocks - self._prefix_unref_blocks

    def _ensure_free(self, n: int) -> bool:
        if n <= 0:
            return True
        free = self._truly_free()
        if free >= n:
            return True
        prefixes = self._prefixes
        if self._prefix_unref_blocks:
            for pid in [pid for pid, e in prefixes.items() if e.ref == 0]:
                e = prefixes.pop(pid)
                self._prefix_unref_blocks -= e.blocks
                free += e.blocks
                if free >= n:
                    break
        return free >= n

    def _dec_own_blocks(self, req: SimRequest, out: int) -> int:
        bs = self.config.block_size
        shared = req.entry.blocks if req.entry is not None else 0
        return -(-(req.prompt_tokens + out - 1) // bs) - shared

    def _unref_entry(self, req: SimRequest) -> None:
        e = req.entry
        if e is None:
            return
        req.entry = None
        e.ref -= 1
        if e.ref == 0:
            self._prefix_ref_blocks -= e.blocks
            if self._prefixes.get(e.prefix_id) is e:
                self._prefix_unref_blocks += e.blocks
            # An evicted-while-referenced entry cannot happen (only ref 0 evicts).

    def _release_running(self, req: SimRequest) -> int:
        """Take a running request out of the batch; returns its output count."""
        if req.decoding:
            out = req.o0 + (self.g - req.g0)
            own = self._dec_own_blocks(req, out)
            if self._dec_alloc and req.phase == (1 - self.g) % self.config.block_size:
                own += 1  # the block allocated for this step's token
            if self._it_active:
                self._it_n_dec -= 1  # leaves the step in flight: no token from it
            self._own_blocks -= own
            self._buckets[req.phase].discard(req)
            self._ctx_dec -= req.prompt_tokens + out
            self._n_dec -= 1
            req.decoding = False
            req.epoch += 1
            req.out = out
        else:
            out = req.out
            self._own_blocks -= req.blocks
            req.blocks = 0
        self._unref_entry(req)
        self.running.remove(req)
        return out

    def _pick_victim(self) -> SimRequest:
        if self.config.scheduling_policy == "priority":
            return max(self.running, key=lambda r: (r.priority, r.arrival_t, r.seq))
        return self.running[-1]

    def _preempt(self, victim: SimRequest) -> None:
        if not victim.decoding and victim in self._prefilling:
            self._prefilling.remove(victim)
        self._release_running(victim)
        victim.computed = 0
        victim.last_token_t = self._prev_end if victim.out else None
        victim.num_preemptions += 1
        self.num_preemptions_total += 1
        victim.state = WAITING
        self._push_waiting(victim, front=True)

    # prefix cache ------------------------------------------------------------

    def _register_prefix(self, req: SimRequest) -> None:
        if not self.config.enable_prefix_caching or req.prefix_id is None or req.entry is not None:
            return
        bs = self.config.block_size
        tokens = (min(req.prefix_tokens, req.prompt_tokens - 1) // bs) * bs
        if tokens <= 0 or req.prefix_id in self._prefixes:
            return
        blocks = tokens // bs
        if req.blocks < blocks:
            return
        e = _PrefixEntry(req.prefix_id, tokens, blocks)
        e.ref = 1
        self._prefixes[req.prefix_id] = e
        req.entry = e
        req.blocks -= blocks
        self._own_blocks -= blocks
        self._prefix_ref_blocks += blocks

    # invariants --------------------------------------------------------------

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
        assert own == self._own_blocks, (own, self._own_blocks)
        assert n_dec == self._n_dec, (n_dec, self._n_dec)
        assert ctx == self._ctx_dec, (ctx, self._ctx_dec)
        assert sum(len(b) for b in self._buckets) == n_dec
        refs: dict[str, int] = {}
        for r in self.running:
            if r.entry is not None:
                refs[r.entry.prefix_id] = refs.get(r.entry.prefix_id, 0) + 1
        ref_blocks = unref_blocks = 0
        for pid, e in self._prefixes.items():
            assert e.ref == refs.get(pid, 0), (pid, e.ref, refs.get(pid))
            if e.ref:
                ref_blocks += e.blocks
            else:
                unref_blocks += e.blocks
        assert ref_blocks == self._prefix_ref_blocks and unref_blocks == self._prefix_unref_blocks
        assert self._truly_free() >= 0, self._truly_free()
        assert len(self.running) <= c.max_num_seqs
        assert len(self._waiting_list()) == self.num_waiting, (len(self._waiting_list()), self.num_waiting)
        assert len(self._prefilling) == len(self.running) - n_dec
