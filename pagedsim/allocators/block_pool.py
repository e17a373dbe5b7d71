"""The block pool under vLLM v1's prefix cache (``vllm/v1/core/block_pool.py``): paged
blocks, a free queue that keeps cached blocks, and the map from content hashes to blocks.

* ``_free``, the *free queue*: every block with reference count 0, never-used and
  cached alike, least recently freed first; an ``OrderedDict`` gives O(1) remove (a hit
  takes a cached block out of the middle) and append. New blocks come from its head.
* ``_hash``: block -> the chained hash naming its content (None: not full, or content
  unknown). ``_cached``: hash -> the block a lookup finds for that content, and
  ``_dups``: hash -> the other blocks holding it, in the order they were named (vLLM v1
  keeps duplicates: two requests that computed the same block before either finished).
* Eviction is lazy: a cached block is dropped from the map only when the free queue
  hands it out for new content (:meth:`BlockPool._take_many`); ``on_release`` reports it
  then, not when it was freed, since its K/V is still wanted until that moment.

Accounting: blocks in the free queue with a hash are the ``cached`` category (free to take,
but holding reusable K/V); the others are ``free``. :class:`~pagedsim.allocators.
prefix_cache.PrefixCachingAllocator` builds lookup, admission, growth and release on it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

from .base import SeqId, SlotUsage
from .fast_usage import usage_by_last_blocks
from .paged import PagedAllocator


class BlockPool(PagedAllocator):
    """Paged blocks whose content is named by hashes, and a free queue that keeps them."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        # The free queue, least recently freed first (block 0 first at the start).
        self._free = OrderedDict.fromkeys(range(self.num_blocks))  # type: ignore[assignment]
        self._hash: list[int | None] = [None] * self.num_blocks  # block -> its hash
        self._cached: dict[int, int] = {}  # hash -> the block lookups find (named first)
        self._dups: dict[int, list[int]] = {}  # hash -> later blocks with that content
        self._num_cached_free = 0  # blocks in the free queue that hold a hash
        self.evicted_blocks = 0

    def _hits(self, hashes: list[int], most_blocks: int) -> list[int]:
        """The cached blocks of the longest prefix of ``hashes`` (at most ``most_blocks``)."""
        get = self._cached.get
        out = []
        for h in hashes[:most_blocks]:
            b = get(h)
            if b is None:
                break
            out.append(b)
        return out

    def _take(self) -> int:
        """The block at the head of the free queue; a cached one is evicted now."""
        b, _ = self._free.popitem(last=False)
        h = self._hash[b]
        if h is not None:
            self._drop_hash(b, h)
            self._num_cached_free -= 1
            self.evicted_blocks += 1
            if self.on_release is not None:
                self.on_release(b * self.block_size, self.block_size)
        return b

    def _take_many(self, k: int) -> list[int]:
        """``k`` blocks from the head of the free queue, each with reference count 1 (the
        body of :meth:`_take`, inlined: an admission takes hundreds of blocks)."""
        popitem, names, hook = self._free.popitem, self._hash, self.on_release
        ref, bs, cached, dups = self._ref, self.block_size, self._cached, self._dups
        out = []
        evicted = 0
        for _ in range(k):
            b = popitem(last=False)[0]
            h = names[b]
            if h is not None:  # evict it (the common case of _drop_hash, inlined)
                if cached[h] == b and h not in dups:
                    del cached[h]
                    names[b] = None
                else:
                    self._drop_hash(b, h)
                evicted += 1
                if hook is not None:
                    hook(b * bs, bs)
            ref[b] = 1
            out.append(b)
        self._num_cached_free -= evicted
        self.evicted_blocks += evicted
        return out

    def _drop_hash(self, b: int, h: int) -> None:
        """Block ``b`` no longer holds the content named ``h``: out of the map (the next
        duplicate, if any, becomes the block lookups find)."""
        self._hash[b] = None
        dups = self._dups.get(h)
        if self._cached[h] == b:
            if dups:
                self._cached[h] = dups.pop(0)
            else:
                del self._cached[h]
        else:
            dups.remove(b)  # type: ignore[union-attr]
        if dups is not None and not dups:
            del self._dups[h]

    def _name(self, b: int, h: int) -> None:
        """Block ``b`` now holds the content named ``h``: into the map (after any block
        named so before it)."""
        self._hash[b] = h
        if self._cached.setdefault(h, b) != b:
            self._dups.setdefault(h, []).append(b)

    def _touch(self, b: int) -> None:
        """One more reference to block ``b`` (a hit, or a fork); it leaves the free queue."""
        r = self._ref[b]
        if r == 0:
            del self._free[b]
            if self._hash[b] is not None:
                self._num_cached_free -= 1
        elif r == 1:
            self._num_shared_blocks += 1
        self._ref[b] = r + 1

    def usage(self, final_lens: Mapping[SeqId, int] | None = None) -> SlotUsage:
        """As the paged pool's (same numbers), plus the cached blocks (``cached_slots``);
        one visit per sequence, not per block (:func:`.fast_usage.usage_by_last_blocks`)."""
        return usage_by_last_blocks(self._seqs, self._ref, self.block_size,
                                    self.num_blocks - len(self._free),
                                    self._num_logical_blocks, final_lens,
                                    cached_slots=self._num_cached_free * self.block_size)

    @property
    def num_free_slots(self) -> int:
        """Slots of never-used or released blocks (cached blocks are not counted)."""
        return (len(self._free) - self._num_cached_free) * self.block_size

    @property
    def num_cached_blocks(self) -> int:
        """Blocks nobody holds that keep reusable K/V."""
        return self._num_cached_free

    def block_hash(self, block: int) -> int | None:
        """The hash naming a block's content, or None (not full, or content unknown)."""
        return self._hash[block]

    def snapshot(self) -> dict:
        snap = super().snapshot()
        snap["kind"] = "prefix-cache"
        snap["free_blocks"] = list(self._free)  # the free queue, head (next taken) first
        snap["cached_blocks"] = [b for b in self._free if self._hash[b] is not None]
        snap["block_hashes"] = list(self._hash)
        return snap
