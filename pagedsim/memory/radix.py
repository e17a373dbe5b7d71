"""SGLang's RadixAttention: paged blocks whose full pages stay in a radix tree of token
content until their memory is needed.

:func:`RadixAllocator` builds the one block-table manager
(:mod:`pagedsim.memory.block_manager`: block tables, reference counts, copy-on-write)
over SGLang's pool (:mod:`~pagedsim.memory.radix_pool`: a free list plus the tree's
evictable pages) with SGLang's policy (:mod:`~pagedsim.memory.radix_cache`: match,
lock, insert; read its docstring for what happens when). Which unlocked leaf is evicted
first is the tree's eviction policy (:mod:`~pagedsim.memory.radix_tree`): least
recently used by default, as SGLang; another policy is one function. ``host``: a
:class:`~pagedsim.memory.host_tier.HostTier` behind the pool (HiCache's L2), or None.
"""

from __future__ import annotations

from .block_manager import BlockManager
from .host_tier import HostTier
from .radix_cache import RadixCache
from .radix_pool import RadixPool
from .radix_tree import Priority, RadixTree, lru


def RadixAllocator(num_blocks: int, block_size: int = 16,  # noqa: N802
                   eviction: Priority = lru, host: HostTier | None = None) -> BlockManager:
    """A paged pool whose full pages stay in a radix tree (``.pool.tree``) until their
    memory is needed; ``eviction`` ranks the unlocked leaves (smallest first)."""
    pool = RadixPool(num_blocks, block_size, RadixTree(eviction), host)
    return BlockManager(pool, RadixCache(pool), kind="radix")
