"""Reference counts over a pool: how many block tables hold each block.

A block nobody holds (count 0) is the pool's: free, or cached and evictable. Taking one
from the pool sets its count to 1; a fork, a prefix hit or a sibling's share adds 1; a
sequence's free subtracts 1 from each of its blocks, and those at 0 go back to the pool.
``num_shared`` counts the blocks held more than once: while it is 0 nothing is shared,
so a free hands a whole table back without looking at counts (the common case), and a
write never needs a copy-on-write.

The managers (:class:`~.block_manager.BlockManager`, :class:`~.hybrid.HybridAllocator`)
each compose one over their pool, as vLLM v1's ``BlockPool`` keeps ``ref_cnt`` on every
block and nano-vllm's ``BlockManager`` a ``ref_count``. The pools themselves know only
which blocks nobody holds.
"""

from __future__ import annotations

from ..errors import OutOfMemoryError


class BlockRefs:
    """``counts[b]``: the block tables holding block ``b`` of ``pool``."""

    __slots__ = ("pool", "counts", "num_shared")

    def __init__(self, pool) -> None:
        self.pool = pool
        self.counts: list[int] = [0] * pool.num_blocks
        self.num_shared = 0  # blocks with a count above 1

    def take(self, n: int, names: list[int] | tuple = ()) -> list[int]:
        """``n`` blocks from the pool (the caller checked room), one holder each; a caching
        pool names the first ``len(names)`` by those hashes."""
        blocks = self.pool.get_new_blocks(n, names) if names else self.pool.get_new_blocks(n)
        counts = self.counts
        for b in blocks:
            counts[b] = 1
        return blocks

    def take_one(self, seq_id: object = None, why: str = "no free block for sequence") -> int:
        """One block from the pool with one holder, for ``seq_id``: ``OutOfMemoryError``
        saying ``why`` and naming it when none is free (formatted only then: this is the
        decode hot path)."""
        try:
            b = self.pool.get_new_block()
        except IndexError:
            raise OutOfMemoryError(f"{why} {seq_id!r}") from None
        self.counts[b] = 1
        return b

    def take_for(self, n: int, tables: list[list[int]]) -> tuple[list[int], list[list[int]]]:
        """``n`` blocks from the pool (the caller checked room) for ``tables`` of indices
        into them, -1 for no block (the hybrid manager's ``NULL_BLOCK``): a swapped-out
        group coming back, its sharing with it, each block one holder per entry naming
        it. Returns the blocks and the tables of their ids (-1 kept)."""
        blocks = self.pool.get_new_blocks(n)
        counts, shared, out = self.counts, 0, []
        for table in tables:
            ids = [blocks[i] if i >= 0 else -1 for i in table]
            for b in ids:
                if b >= 0:
                    r = counts[b] + 1
                    counts[b] = r
                    if r == 2:
                        shared += 1
            out.append(ids)
        self.num_shared += shared
        return blocks, out

    def hold(self, blocks: list[int]) -> int:
        """One more holder of each of ``blocks`` (hits, a sibling's, a parent's); those
        nobody held leave the pool's free structure (``touch``). Returns how many did."""
        counts, unheld, shared = self.counts, [], 0
        for b in blocks:
            r = counts[b]
            if r == 0:
                unheld.append(b)
            elif r == 1:
                shared += 1
            counts[b] = r + 1
        self.num_shared += shared
        if unheld:
            self.pool.touch_blocks(unheld)
        return len(unheld)

    def hold_cached(self, blocks: list[int]) -> None:
        """:meth:`hold` of blocks the caller knows nobody holds (prefix hits its plan
        looked at): one holder each, out of the pool's free structure, without the
        looking."""
        counts = self.counts
        for b in blocks:
            counts[b] = 1
        self.pool.touch_blocks(blocks)

    def drop(self, block: int) -> None:
        """One holder less of a block others still hold (a copy-on-write left it)."""
        r = self.counts[block] - 1
        self.counts[block] = r
        if r == 1:
            self.num_shared -= 1

    def release(self, blocks: list[int]) -> int:
        """One holder less of each of ``blocks`` (a table, in token order), the last
        first, so that a chain's tail is evicted before its head; those nobody holds now
        go back to the pool in that order. Returns how many went back."""
        counts = self.counts
        if not self.num_shared:  # nobody shares a block: every one goes back
            for b in blocks:
                counts[b] = 0
            self.pool.free_blocks(blocks[::-1])
            return len(blocks)
        zero, unshared = [], 0
        for i in range(len(blocks) - 1, -1, -1):
            b = blocks[i]
            r = counts[b] - 1
            counts[b] = r
            if r == 0:
                zero.append(b)
            elif r == 1:
                unshared += 1
        self.num_shared -= unshared
        self.pool.free_blocks(zero)
        return len(zero)
