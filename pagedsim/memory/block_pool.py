"""The pool under vLLM v1's prefix cache (``vllm/v1/core/block_pool.py``): a free queue
that keeps freed blocks' content, and the map from content hashes to blocks.

* ``free``, the *free queue*: every block nobody holds, never-used and cached alike,
  least recently freed first; an ``OrderedDict`` gives O(1) remove (a hit takes a
  cached block out of the middle) and append.
* ``eviction``, which free blocks are handed out next (an :class:`EvictionPolicy`):
  vLLM's :class:`LRU` by default, the free queue's head, least recently freed first;
  another policy (:mod:`.eviction_lfu`) is one class that the pool tells which blocks
  join the queue and which a hit takes back out.
* ``hashes``: block -> the chained hash naming its content (None: not full, or content
  unknown). ``cached``: hash -> the block a lookup finds for that content, and ``dups``:
  hash -> the other blocks holding it, in the order they were named (vLLM v1 keeps
  duplicates: two requests that computed the same block before either finished).
* Eviction is lazy: a cached block loses its name only when the free queue hands it out
  for new content (:meth:`BlockPool.get_new_blocks`); ``on_release`` reports it then,
  not when it was freed, since its K/V is still wanted until that moment.

* ``host``: a :class:`~.host_tier.HostTier` behind the pool, or None: an evicted block's
  K/V is written back to it (:meth:`~.host_tier.HostTier.evicted`) before the block is
  handed out again.

Accounting: blocks in the free queue with a hash are the ``cached`` category (free to take,
but holding reusable K/V); the others are ``free``. The block tables, reference counts,
lookups and naming are the manager's (:mod:`pagedsim.memory.block_manager`); this
pool answers the same calls as the plain :class:`~pagedsim.memory.free_list.FreeList`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from itertools import islice
from typing import Protocol

from ..validate import check_int
from .host_tier import HostTier


class EvictionPolicy(Protocol):
    """Which free blocks a :class:`BlockPool` hands out next (evicting the cached ones
    among them). The pool reports every block that joins its free queue and every block a
    hit takes back out, in the queue's order; the policy only orders, never owns."""

    def freed(self, blocks: list[int]) -> None:
        """``blocks`` joined the tail of the free queue, in this order."""

    def touched(self, blocks: list[int]) -> None:
        """A hit took ``blocks`` (cached, nobody held them) back out of the free queue."""

    def victims(self, free: OrderedDict[int, None], n: int) -> list[int]:
        """The next ``n`` blocks of ``free`` to hand out, in order (fewer when it holds
        fewer); they leave the queue now."""


class LRU:
    """vLLM v1's eviction: the free queue's head first, least recently freed (a chain's
    tail before its head, since a request frees its blocks tail first)."""

    def freed(self, blocks: list[int]) -> None:
        pass  # the queue's own order is the policy

    def touched(self, blocks: list[int]) -> None:
        pass

    def victims(self, free: OrderedDict[int, None], n: int) -> list[int]:
        # The head's keys read in one C-level pass: cheaper than popitem's tuple per block.
        return list(islice(free, n))


class BlockPool:
    """Blocks whose content is named by hashes, and a free queue that keeps them."""

    caches = True

    def __init__(self, num_blocks: int, block_size: int = 16,
                 host: HostTier | None = None, eviction: EvictionPolicy | None = None
                 ) -> None:
        self.num_blocks = check_int("num_blocks", num_blocks, minimum=1)
        self.block_size = check_int("block_size", block_size, minimum=1)
        # The free queue, least recently freed first (block 0 first at the start).
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(self.num_blocks))
        self.hashes: list[int | None] = [None] * self.num_blocks  # block -> its hash
        self.cached: dict[int, int] = {}  # hash -> the block lookups find (named first)
        self.dups: dict[int, list[int]] = {}  # hash -> later blocks with that content
        self.num_cached_blocks = 0  # blocks in the free queue that hold a hash
        self.evicted_blocks = 0
        self.on_release: Callable[[int, int], None] | None = None
        self.host = host  # the host tier evicted blocks are written back to, or None
        self.eviction: EvictionPolicy = LRU() if eviction is None else eviction
        self.eviction.freed(list(self.free))

    def get_num_free_blocks(self) -> int:
        """Blocks a new allocation may take (cached ones too: they are evicted)."""
        return len(self.free)

    @property
    def num_free_blocks(self) -> int:
        """Blocks in the free queue, cached ones included."""
        return len(self.free)

    def describe_free(self) -> str:
        return f"{len(self.free)} free or cached"

    # ------------------------------------------------------------ handing out
    def get_new_block(self) -> int:
        """The next block the eviction policy hands out (``IndexError`` when the queue is
        empty); a cached one is evicted now."""
        if not self.free:
            raise IndexError("the free queue is empty")
        return self.get_new_blocks(1)[0]

    def get_new_blocks(self, n: int, new_hashes: list[int] | tuple = ()) -> list[int]:
        """``n`` blocks from the free queue, in the eviction policy's order (the caller
        checked room), evicting the cached ones among them (written back to a host tier,
        reported to ``on_release``); the first ``len(new_hashes)`` are named by those
        hashes as they are taken (an admission's new full blocks)."""
        free, names, hook, host, bs = self.free, self.hashes, self.on_release, self.host, \
            self.block_size
        if len(free) < n:
            raise IndexError(f"the free queue holds {len(free)} blocks, not {n}")
        out = self.eviction.victims(free, n)
        if len(out) < n:
            raise IndexError(f"the free queue holds {len(out)} blocks, not {n}")
        evicted = 0
        for j, b in enumerate(out):
            del free[b]
            h = names[b]
            if h is not None:  # cached: evicted now, its K/V wanted until this moment
                if host is not None:  # written back to the host before the block is reused
                    host.evicted(b, h)
                self.forget(b, h)
                evicted += 1
                if hook is not None:
                    hook(b * bs, bs)
            if j < len(new_hashes):
                self.cache_block(b, new_hashes[j])
        self.num_cached_blocks -= evicted
        self.evicted_blocks += evicted
        return out

    def free_blocks(self, blocks: list[int]) -> None:
        """Blocks nobody holds any more join the tail of the free queue, in order: named
        ones stay cached, the others are released (``on_release``) at once."""
        free, names, hook, bs = self.free, self.hashes, self.on_release, self.block_size
        self.eviction.freed(blocks)
        if hook is None:  # the common case: count the unnamed ones (a partial last block)
            unnamed = 0
            for b in blocks:
                free[b] = None
                if names[b] is None:
                    unnamed += 1
            self.num_cached_blocks += len(blocks) - unnamed
            return
        cached = 0
        for b in blocks:
            free[b] = None
            if names[b] is not None:
                cached += 1
            else:
                hook(b * bs, bs)
        self.num_cached_blocks += cached

    def touch(self, block: int) -> None:
        """A block nobody held is hit (or shared again): it leaves the free queue."""
        del self.free[block]
        self.eviction.touched([block])
        if self.hashes[block] is not None:
            self.num_cached_blocks -= 1

    def touch_blocks(self, blocks: list[int]) -> None:
        """:meth:`touch` of each of ``blocks`` (an admission's hits), in one loop."""
        free, names, cached = self.free, self.hashes, 0
        for b in blocks:
            del free[b]
            if names[b] is not None:
                cached += 1
        self.num_cached_blocks -= cached
        self.eviction.touched(blocks)

    # ---------------------------------------------------------------- names
    def get_cached_block(self, h: int) -> int | None:
        """The block a lookup finds for the content named ``h``, or None."""
        return self.cached.get(h)

    def cache_block(self, b: int, h: int) -> None:
        """Block ``b`` now holds the content named ``h``: into the map (after any block
        named so before it)."""
        self.hashes[b] = h
        if self.cached.setdefault(h, b) != b:
            self.dups.setdefault(h, []).append(b)

    def forget(self, b: int, h: int) -> None:
        """Block ``b`` no longer holds the content named ``h``: out of the map (the next
        duplicate, if any, becomes the block lookups find)."""
        self.hashes[b] = None
        dups = self.dups.get(h)
        if self.cached[h] == b:
            if dups:
                self.cached[h] = dups.pop(0)
            else:
                del self.cached[h]
        else:
            dups.remove(b)  # type: ignore[union-attr]
        if dups is not None and not dups:
            del self.dups[h]

    # -------------------------------------------------------------- pictures
    def snapshot(self, snap: dict) -> None:
        """Add the free queue (head, next taken, first), the cached blocks and every
        block's hash to a manager's snapshot."""
        snap["free_blocks"] = list(self.free)
        snap["cached_blocks"] = [b for b in self.free if self.hashes[b] is not None]
        snap["block_hashes"] = list(self.hashes)
        if self.host is not None:
            snap["host"] = self.host.describe()

    def check(self, referenced: set[int]) -> None:
        """Assert the free queue is the complement of the ``referenced`` blocks and the
        hash map, the names and the cached count agree."""
        free, hashes = self.free, self.hashes
        assert not referenced & set(free), "a referenced block is in the free queue"
        assert len(free) + len(referenced) == self.num_blocks, "free + used != total"
        for h, first in self.cached.items():
            for b in (first, *self.dups.get(h, ())):
                assert hashes[b] == h, f"block {b} is in the map under a hash it does not hold"
        for h, dups in self.dups.items():
            assert dups and h in self.cached, f"duplicates of hash {h} but no first block"
        named = len(self.cached) + sum(len(v) for v in self.dups.values())
        assert named == sum(h is not None for h in hashes), "a named block is not in the map"
        assert self.num_cached_blocks == sum(hashes[b] is not None for b in free)
        if self.host is not None:
            self.host.check()
            for b, h in self.host.pending.items():  # a write-through reads what is there
                assert hashes[b] == h, f"block {b} waits to be written through as {h}"
