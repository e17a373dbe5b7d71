"""Least frequently used eviction for vLLM-style prefix caching (scheme
``prefix-cache-lfu``): the free block whose content was reused least often goes first,
and among equals the least recently freed (vLLM's own order).

A block's *uses* count how many times a prefix hit brought it back from the free queue
(:meth:`~.block_pool.EvictionPolicy.touched`) since it was last handed out for new
content. A system prompt that every conversation reuses so outlives a burst of one-off
documents that LRU would keep, having freed them last. A never-used block, or a cached one
nobody reused, has 0 uses, so the free queue's order decides among those, as under LRU.

The order is a heap of ``(uses, freed_at, block)`` with lazy deletion: a hit does not
search the heap, it only forgets the block's ``freed_at``, and an entry whose stamp is no
longer its block's is skipped when it reaches the top (the heap is rebuilt when stale
entries outnumber live ones three to one, so it stays O(free blocks)).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict


class LFU:
    """An :class:`~.block_pool.EvictionPolicy`: fewest uses first, then least recently
    freed."""

    def __init__(self) -> None:
        self.uses: dict[int, int] = {}  # block -> hits that revived it (0: absent)
        self.freed_at: dict[int, int] = {}  # free block -> when it joined the queue
        self.heap: list[tuple[int, int, int]] = []  # (uses, freed_at, block), lazily
        self.clock = 0

    def freed(self, blocks: list[int]) -> None:
        uses, freed_at, heap = self.uses, self.freed_at, self.heap
        for b in blocks:
            self.clock += 1
            freed_at[b] = self.clock
            heapq.heappush(heap, (uses.get(b, 0), self.clock, b))
        if len(heap) > 4 * len(freed_at) + 64:  # mostly stale: rebuild from the live ones
            self.heap = [(uses.get(b, 0), t, b) for b, t in freed_at.items()]
            heapq.heapify(self.heap)

    def touched(self, blocks: list[int]) -> None:
        uses, freed_at = self.uses, self.freed_at
        for b in blocks:
            del freed_at[b]  # its heap entry is stale now
            uses[b] = uses.get(b, 0) + 1

    def victims(self, free: OrderedDict[int, None], n: int) -> list[int]:
        out: list[int] = []
        heap, freed_at, uses = self.heap, self.freed_at, self.uses
        while len(out) < n and heap:
            _, t, b = heapq.heappop(heap)
            if freed_at.get(b) == t:  # live: the block's latest entry
                del freed_at[b]
                uses.pop(b, None)  # handed out for new content: its uses start over
                out.append(b)
        return out
