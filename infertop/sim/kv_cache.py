"""The engine model's parts that hold requests and blocks: the waiting queue and the KV-block accounting.

:class:`infertop.sim.model.EngineModel` owns one of each (``waiting``, ``kv``) and builds them anew at
every (re)start; they know nothing of steps or decoders, which stay in the model.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque

from .requests import FINISHED, WAITING, SimRequest, _PrefixEntry

__all__ = ["KvBlocks", "WaitingQueue"]


class WaitingQueue:
    """Requests waiting to be scheduled: FIFO, or ordered by ``(priority, arrival)`` under the priority
    policy (lower integer priority first). Entries that left (aborted, finished) are skipped lazily when
    they reach the head; ``count`` is the number still waiting."""

    __slots__ = ("priority", "count", "_fifo", "_heap")

    def __init__(self, *, priority: bool) -> None:
        self.priority = priority
        self.count = 0
        self._fifo: deque[SimRequest] = deque()
        self._heap: list[tuple[int, float, int, SimRequest]] = []

    def push(self, req: SimRequest, *, front: bool) -> None:
        """Queue ``req``; ``front``: ahead of the others (a preempted request; FIFO only, the heap
        orders by priority and arrival whatever the push)."""
        if self.priority:
            assert req.arrival_t is not None  # set by submit, before a request is ever queued
            heapq.heappush(self._heap, (req.priority, req.arrival_t, req.seq, req))
        elif front:
            self._fifo.appendleft(req)
        else:
            self._fifo.append(req)
        self.count += 1

    def peek(self) -> SimRequest | None:
        """The next request to schedule, None when none waits."""
        if self.priority:
            heap = self._heap
            while heap and heap[0][3].state != WAITING:
                heapq.heappop(heap)
            return heap[0][3] if heap else None
        fifo = self._fifo
        while fifo and fifo[0].state != WAITING:
            fifo.popleft()
        return fifo[0] if fifo else None

    def pop(self) -> None:
        """Take out the request :meth:`peek` returned."""
        if self.priority:
            heapq.heappop(self._heap)
        else:
            self._fifo.popleft()
        self.count -= 1

    def remove(self, req: SimRequest) -> None:
        """``req`` leaves the queue (an abort). Lazy: its entry is skipped when it reaches the head."""
        req.state = FINISHED
        self.count -= 1

    def requests(self) -> list[SimRequest]:
        """The waiting requests in the order they would be scheduled."""
        if self.priority:
            return [e[3] for e in sorted(self._heap) if e[3].state == WAITING]
        return [r for r in self._fifo if r.state == WAITING]


class KvBlocks:
    """The KV-block accounting of one engine: blocks held by running requests (``own``) and the prefix
    cache's blocks, shared while referenced (``prefix_ref``) and evictable, oldest first, when not
    (``prefix_unref``)."""

    __slots__ = ("num_gpu_blocks", "block_size", "prefix_caching", "own", "prefix_ref", "prefix_unref",
                 "prefixes")

    def __init__(self, num_gpu_blocks: int, block_size: int, *, prefix_caching: bool) -> None:
        self.num_gpu_blocks = num_gpu_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.own = 0
        self.prefix_ref = 0
        self.prefix_unref = 0
        self.prefixes: OrderedDict[str, _PrefixEntry] = OrderedDict()

    @property
    def used(self) -> int:
        """Blocks held by running requests, their shared prefixes included."""
        return self.own + self.prefix_ref

    def truly_free(self) -> int:
        return self.num_gpu_blocks - self.own - self.prefix_ref - self.prefix_unref

    def ensure_free(self, n: int) -> bool:
        """True when ``n`` blocks are free, evicting unreferenced prefixes (oldest first) as needed."""
        if n <= 0:
            return True
        free = self.truly_free()
        if free >= n:
            return True
        prefixes = self.prefixes
        if self.prefix_unref:
            for pid in [pid for pid, e in prefixes.items() if e.ref == 0]:
                e = prefixes.pop(pid)
                self.prefix_unref -= e.blocks
                free += e.blocks
                if free >= n:
                    break
        return free >= n

    def match(self, req: SimRequest) -> _PrefixEntry | None:
        """The cached prefix ``req`` can skip, None for none (caching off, no prefix, or the prefix
        covers the whole prompt)."""
        if not self.prefix_caching or req.prefix_id is None:
            return None
        entry = self.prefixes.get(req.prefix_id)
        return entry if entry is not None and entry.tokens < req.prompt_tokens else None

    def holds(self, entry: _PrefixEntry) -> bool:
        """Whether ``entry`` is still cached (an :meth:`ensure_free` may have evicted it)."""
        return self.prefixes.get(entry.prefix_id) is entry

    def ref_entry(self, req: SimRequest, entry: _PrefixEntry) -> None:
        """``req`` starts using the cached ``entry``: shared now, and the most recently used."""
        if entry.ref == 0:
            self.prefix_unref -= entry.blocks
            self.prefix_ref += entry.blocks
        entry.ref += 1
        self.prefixes.move_to_end(entry.prefix_id)
        req.entry = entry

    def unref_entry(self, req: SimRequest) -> None:
        """``req`` stops using its prefix entry (if any); unreferenced, it becomes evictable."""
        e = req.entry
        if e is None:
            return
        req.entry = None
        e.ref -= 1
        if e.ref == 0:
            self.prefix_ref -= e.blocks
            if self.prefixes.get(e.prefix_id) is e:
                self.prefix_unref += e.blocks
            # An evicted-while-referenced entry cannot happen (only ref 0 evicts).

    def register_prefix(self, req: SimRequest) -> None:
        """Once ``req`` has computed its prefix, the prefix's full blocks move from the request to the
        cache (shared, referenced by ``req``)."""
        if not self.prefix_caching or req.prefix_id is None or req.entry is not None:
            return
        bs = self.block_size
        tokens = (min(req.prefix_tokens, req.prompt_tokens - 1) // bs) * bs
        if tokens <= 0 or req.prefix_id in self.prefixes:
            return
        blocks = tokens // bs
        if req.blocks < blocks:
            return
        e = _PrefixEntry(req.prefix_id, tokens, blocks)
        e.ref = 1
        self.prefixes[req.prefix_id] = e
        req.entry = e
        req.blocks -= blocks
        self.own -= blocks
        self.prefix_ref += blocks

    def check_invariants(self, running: list[SimRequest]) -> None:
        """Recount the prefix references of ``running`` and the blocks; AssertionError if they drifted."""
        refs: dict[str, int] = {}
        for r in running:
            if r.entry is not None:
                refs[r.entry.prefix_id] = refs.get(r.entry.prefix_id, 0) + 1
        ref_blocks = unref_blocks = 0
        for pid, e in self.prefixes.items():
            assert e.ref == refs.get(pid, 0), (pid, e.ref, refs.get(pid))
            if e.ref:
                ref_blocks += e.blocks
            else:
                unref_blocks += e.blocks
        assert ref_blocks == self.prefix_ref and unref_blocks == self.prefix_unref
        assert self.truly_free() >= 0, self.truly_free()
