"""Automatic prefix caching, as vLLM v1 does it: paged blocks that outlive their requests.

A full block is named by its *chained hash*: the hash of its parent block's hash and its
own tokens (:func:`pagedsim.workloads.prompts.block_key`), so two blocks with equal hashes
hold equal prefixes. When a request frees its blocks, the full ones keep their K/V and their
hash: they are *cached*. A later request whose prompt starts with the same blocks finds them
through the hash map and shares them (reference count + 1) instead of computing them.

:func:`PrefixCachingAllocator` builds the one block-table manager
(:mod:`pagedsim.memory.block_manager`, as ``kv_cache_manager.py``) over the pool
that keeps freed blocks' content (:mod:`pagedsim.memory.block_pool`, as
``block_pool.py``: the free queue, the hash map, lazy eviction):

* Lookup (:meth:`~PrefixCachingAllocator.lookup_prefix`) walks the prompt's hash chain
  while the map has it: whole blocks only, and at most ``num_tokens - 1`` tokens, since
  the last prompt token must be computed to sample the first output token. A request's
  chain comes with it, hashed once (:class:`~pagedsim.workloads.block_hashes.BlockHashes`,
  as vLLM hashes a request's blocks on arrival); a request given directly is hashed then.
* Admission (:meth:`~PrefixCachingAllocator.allocate_group`) is all or nothing: it counts
  the hits, the new blocks, and the hit blocks that must leave the free queue, before
  touching anything.
* Blocks filled during decode get their hash too, so a preempted request that is
  recomputed, or the next turn of a chat, finds them. ``dedup=True`` makes a block that
  fills with content already cached switch to the cached copy, as vLLM v0 and SGLang do
  (v1 keeps the duplicate).
* ``host``: a :class:`~pagedsim.memory.host_tier.HostTier` behind the pool (evicted
  blocks written back to it, lookups continued in it, hits loaded from it), or None.
* :meth:`~PrefixCachingAllocator.free` returns a sequence's blocks *tail first*, so the
  tail of a chain sits nearer the head of the free queue and is evicted before the
  chain's head (evicting a head first would strand its tail: no lookup could reach it).
"""

from __future__ import annotations

from .block_manager import BlockManager
from .block_pool import BlockPool, EvictionPolicy
from .hash_cache import HashCache
from .host_tier import HostTier

__all__ = ["PrefixCachingAllocator"]


def PrefixCachingAllocator(num_blocks: int, block_size: int = 16,  # noqa: N802
                           dedup: bool = False, host: HostTier | None = None,
                           eviction: EvictionPolicy | None = None) -> BlockManager:
    """A paged pool whose freed full blocks stay reusable until their memory is needed:
    the block manager over vLLM v1's pool, with the hash policy. ``eviction``: which free
    blocks the pool hands out first (None: vLLM's LRU, :class:`~.block_pool.LRU`)."""
    pool = BlockPool(num_blocks, block_size, host, eviction)
    return BlockManager(pool, HashCache(pool), dedup=dedup, kind="prefix-cache")
