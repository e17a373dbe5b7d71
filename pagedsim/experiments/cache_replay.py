"""The Mooncake paper's cache experiment (FAST'25, Figure 9): how many prompt tokens a
prefix cache of a given capacity could serve, with no scheduler in the way.

Requests are taken in arrival order. For each prompt, the cached prefix is looked up
block by block along its hash chain (:func:`pagedsim.workloads.prompts.block_hashes`): whole blocks
only, and at most ``prompt_len - 1`` tokens, since the last prompt token must be
computed to produce the first output token (vLLM's rule). Then every full block of the
prompt is inserted (or touched), and the least recently used blocks are evicted while
the cache holds more than ``capacity_tokens``. Blocks are touched tail first, so a
chain's head is more recent than its tail and a chain is evicted from its tail, as
vLLM's free queue does: evicting a head first would strand its tail (a prefix lookup
could never reach it).

``hit_rate`` = hit tokens / prompt tokens, as vLLM's ``prefix_cache_hits /
prefix_cache_queries``.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from ..validate import check_int
from ..workloads.prompts import block_hashes
from ..workloads.workload import Request

#: Most prompt blocks one replay may hash: 4 million (the cache holds up to one entry per
#: block, about 120 bytes each: 2 million blocks measured 320 MB). A replay past it is
#: refused before any block is hashed; a prompt of 10**15 tokens would otherwise grow the
#: cache until memory runs out.
MAX_REPLAY_BLOCKS = 4_000_000
#: The ``scheme`` of a sweep's scheduler-free rows (the cache-size and host-cache sweeps).
REPLAY_ROW = "cache-replay (no scheduler)"


def check_replay_size(requests: Iterable[Request], block_size: int) -> int:
    """The prompt blocks a replay of ``requests`` hashes (whole and partial blocks);
    raises ``ValueError`` if more than :data:`MAX_REPLAY_BLOCKS`."""
    check_int("block_size", block_size, minimum=1)
    total = 0
    for r in requests:
        total += -(-r.prompt_len // block_size)
        if total > MAX_REPLAY_BLOCKS:
            raise ValueError(
                f"the prompts make more than {MAX_REPLAY_BLOCKS:,} blocks of {block_size} "
                f"tokens (the most a replay keeps in memory; request {r.request_id} has "
                f"{r.prompt_len:,} prompt tokens): replay fewer requests or larger blocks")
    return total


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """One replay: counts in tokens (``queries``, ``hits``) and blocks (``evictions``)."""

    block_size: int
    capacity_tokens: float  # math.inf: unbounded
    num_requests: int
    queries: int  # prompt tokens looked up
    hits: int  # prompt tokens served from the cache
    evictions: int  # blocks evicted
    peak_blocks: int  # most blocks the cache held

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else math.nan

    def to_dict(self) -> dict[str, object]:
        return {"block_size": self.block_size,
                "capacity_tokens": None if math.isinf(self.capacity_tokens)
                else int(self.capacity_tokens),
                "num_requests": self.num_requests, "queries": self.queries,
                "hits": self.hits, "hit_rate": self.hit_rate,
                "evictions": self.evictions, "peak_blocks": self.peak_blocks}


def replay(requests: Iterable[Request], block_size: int = 512,
           capacity_tokens: float = math.inf) -> ReplayResult:
    """Replay ``requests`` (in the order given) through an LRU prefix cache of
    ``capacity_tokens`` tokens in blocks of ``block_size`` tokens (see the module doc)."""
    requests = list(requests)
    check_replay_size(requests, block_size)
    if isinstance(capacity_tokens, bool) or not isinstance(capacity_tokens, (int, float)) \
            or math.isnan(capacity_tokens) or capacity_tokens < 0:
        raise ValueError(f"capacity_tokens must be a number >= 0 or inf, got {capacity_tokens!r}")
    capacity_blocks = math.inf if math.isinf(capacity_tokens) else int(capacity_tokens
                                                                      // block_size)
    cache: OrderedDict[int, None] = OrderedDict()  # least recently used first
    queries = hits = evictions = peak = num = 0
    for request in requests:
        num += 1
        hashes = block_hashes(request, block_size)
        queries += request.prompt_len
        most = (request.prompt_len - 1) // block_size  # the last-token rule
        k = 0
        while k < most and hashes[k] in cache:
            k += 1
        hits += k * block_size
        for h in reversed(hashes):  # tail first: the head ends up most recent
            if h in cache:
                cache.move_to_end(h)
            else:
                cache[h] = None
        peak = max(peak, len(cache))
        while len(cache) > capacity_blocks:
            cache.popitem(last=False)
            evictions += 1
    return ReplayResult(block_size, float(capacity_tokens), num, queries, hits, evictions,
                        peak)
