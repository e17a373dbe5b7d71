"""The two parts a block manager is composed of, as the protocols they implement.

:class:`~.block_manager.BlockManager` is written once for every paged scheme; what differs
between schemes is the pool it takes blocks from and the prefix-cache policy it consults,
each an object passed in (vLLM v1's ``KVCacheManager`` over a ``BlockPool``; SGLang's
scheduler over a ``RadixCache``). This file says what the manager asks of each, so that
a new pool or policy is one class that answers these calls, and nothing else needs to
change:

* a :class:`Pool` hands out blocks and takes them back: :class:`~.free_list.FreeList`
  (nothing cached), vLLM v1's :class:`~.block_pool.BlockPool` (a free queue that keeps
  freed blocks' content, a hash map, an eviction policy), SGLang's
  :class:`~.radix_pool.RadixPool` (a free list plus the radix tree's evictable pages);
* a :class:`PrefixCache` decides which cached blocks a new sequence starts with and what
  happens to a block's content as it fills and is freed: vLLM's
  :class:`~.hash_cache.HashCache` or SGLang's :class:`~.radix_cache.RadixCache`. A
  manager without one (``cache=None``) caches nothing.

The manager owns the block tables and the reference counts
(:class:`~.block_refs.BlockRefs`); a policy reads the manager's ``seqs`` and ``refs``,
takes and holds blocks through ``refs``, and adds a sequence only through
:meth:`~.block_manager.BlockManager.add_seq`, so the manager's counts stay its own.
Units: blocks are ids in ``range(num_blocks)``, each of ``block_size`` token slots;
lengths are in tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from ..workloads.block_hashes import BlockHashes
from .base import SeqId
from .block_seq import Seq
from .host_tier import HostTier


@runtime_checkable
class Pool(Protocol):
    """Where a manager's blocks come from and go back to (vLLM v1's names)."""

    num_blocks: int  # blocks in the pool
    block_size: int  # token slots per block
    #: Whether freed blocks keep their content for a prefix cache (the manager then names
    #: full blocks by their hashes).
    caches: bool
    #: Each block's hash (None: unnamed), for a pool that names blocks by content; None
    #: for one that does not (a free list, SGLang's pool, whose tree holds the names).
    hashes: list[int | None] | None
    #: The host-memory tier cached blocks spill to (:class:`~.host_tier.HostTier`), or None.
    host: HostTier | None
    evicted_blocks: int  # cached blocks handed out for other content, so far
    #: ``on_release(start_slot, num_slots)`` for memory going back, so a real cache can
    #: scrub it; None: nobody asks.
    on_release: Callable[[int, int], None] | None

    def get_num_free_blocks(self) -> int:
        """Blocks an allocation may take now: free ones, and cached ones by eviction."""
        ...

    @property
    def num_free_blocks(self) -> int:
        """Blocks in the pool's free structure (vLLM's free queue holds cached ones)."""
        ...

    @property
    def num_cached_blocks(self) -> int:
        """Blocks nobody holds that keep reusable K/V."""
        ...

    def describe_free(self) -> str:
        """What is free, for an out-of-memory message (``"3 free"``)."""
        ...

    def get_new_block(self) -> int:
        """One block for new content (evicting a cached one if need be)."""
        ...

    def get_new_blocks(self, n: int) -> list[int]:
        """``n`` blocks for new content, in the order ``n`` single takes would give them
        (the caller checked there is room)."""
        ...

    def free_blocks(self, blocks: list[int]) -> None:
        """``blocks`` are held by nobody now (a caching pool keeps the named ones)."""
        ...

    def touch(self, block: int) -> None:
        """``block``, held by nobody, is held again (a cache hit): a pool that counts it
        among its free blocks takes it out (vLLM's free queue; SGLang's tree locks it)."""
        ...

    def touch_blocks(self, blocks: list[int]) -> None:
        """:meth:`touch` for each of ``blocks``."""
        ...

    def snapshot(self, snap: dict) -> None:
        """Add the pool's state to a manager's snapshot ``snap`` (plain data)."""
        ...

    def check(self, referenced: set[int]) -> None:
        """Assert the pool agrees with the blocks the manager's tables ``referenced``."""
        ...


@runtime_checkable
class PrefixCache(Protocol):
    """A prefix-cache policy: the manager's calls into it, in the order a request meets
    them. ``mgr`` is the :class:`~.block_manager.BlockManager` calling."""

    #: Whether the manager's ``free`` calls :meth:`freeing` and :meth:`freed` (SGLang's
    #: tree takes a freed sequence's pages; vLLM's pool needs nothing more).
    acts_at_free: bool

    def lookup(self, mgr: Any, block_hashes: BlockHashes, num_tokens: int, seq_id: SeqId) -> int:
        """Tokens of a new ``num_tokens``-token sequence ``seq_id``, named by
        ``block_hashes``, that the cache holds now (whole blocks, at most
        ``num_tokens - 1``). Changes nothing."""
        ...

    def plan(self, mgr: Any, seq_ids: Sequence[SeqId], num_tokens: int,
             block_hashes: BlockHashes) -> tuple[object, int]:
        """An admission's plan (opaque to the manager) and the blocks it needs from the
        pool, hits not counted. Changes nothing: the manager checks the room first."""
        ...

    def admit(self, mgr: Any, seq_ids: Sequence[SeqId], num_tokens: int,
              final_len: int | None, block_hashes: BlockHashes, plans: object) -> None:
        """Carry out a plan that fits: each sequence added with its hits and new blocks."""
        ...

    def filled(self, mgr: Any, seq: Seq, index: int, h: object = None,
               dedup: bool = False) -> int:
        """Block ``index`` of ``seq`` became full: name its content; returns the block
        the table holds now (with ``dedup``, maybe a cached copy of the same content)."""
        ...

    def forked(self, mgr: Any, parent: Seq, child: Seq) -> None:
        """``child`` was forked from ``parent`` (they share every block)."""
        ...

    def freeing(self, mgr: Any, seq: Seq) -> None:
        """``seq`` is about to release its blocks (only when :attr:`acts_at_free`)."""
        ...

    def freed(self, mgr: Any, seq: Seq) -> None:
        """``seq`` released its blocks (only when :attr:`acts_at_free`)."""
        ...

    def swapped_in(self, mgr: Any, seq: Seq, hashes: list) -> None:
        """``seq`` is back from the CPU with the names ``hashes`` of its full blocks."""
        ...

    def snapshot(self, snap: dict) -> None:
        """Add the policy's state to a manager's snapshot ``snap`` (plain data)."""
        ...

    def check(self, mgr: Any) -> None:
        """Assert the policy agrees with the manager's tables and pool."""
        ...
