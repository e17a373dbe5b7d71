"""The plain pool under PagedAttention: a free list of block ids, nothing cached.

A pool is the strategy :class:`~pagedsim.memory.block_manager.BlockManager` asks for
blocks; the manager keeps the block tables and reference counts, the pool only knows
which blocks nobody holds. This one is the simplest: a stack. It hands out the block
freed last (so a prompt freed and allocated again gets the same blocks back) and starts
as ``0, 1, 2, ...``. Its sibling :class:`~pagedsim.memory.block_pool.BlockPool`
keeps freed blocks' content for a prefix cache; both answer the same calls, in vLLM v1's
words (``get_new_blocks``, ``free_blocks``, ``get_num_free_blocks``).
"""

from __future__ import annotations

from collections.abc import Callable

from ..validate import check_int


class FreeList:
    """``num_blocks`` blocks of ``block_size`` slots; the free ones on a stack."""

    #: The manager names full blocks by their content only for pools that cache it.
    caches = False
    hashes = None  # no block is named by its content here
    host = None  # no host tier: nothing cached to spill

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        self.num_blocks = check_int("num_blocks", num_blocks, minimum=1)
        self.block_size = check_int("block_size", block_size, minimum=1)
        # Reversed so that the first allocations get blocks 0, 1, 2, ... (pops from the end).
        self.free = list(range(self.num_blocks - 1, -1, -1))
        #: ``on_release(start_slot, num_slots)`` for every block that goes back to the
        #: free list, so a real cache can scrub it.
        self.on_release: Callable[[int, int], None] | None = None
        self.evicted_blocks = 0  # nothing is cached, so nothing is ever evicted

    def get_num_free_blocks(self) -> int:
        """Blocks a new allocation may take."""
        return len(self.free)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free)

    @property
    def num_cached_blocks(self) -> int:
        return 0

    def describe_free(self) -> str:
        return f"{len(self.free)} free"

    def get_new_block(self) -> int:
        """The next free block (``IndexError`` when none)."""
        return self.free.pop()

    def get_new_blocks(self, n: int) -> list[int]:
        """``n`` free blocks, in the order ``n`` pops would give them (caller checked room)."""
        if not n:
            return []
        free = self.free
        blocks = free[-n:]
        blocks.reverse()
        del free[-n:]
        return blocks

    def free_blocks(self, blocks: list[int]) -> None:
        """Blocks nobody holds any more, in the order the next pops should *not* see them
        (the last one given is handed out first)."""
        hook, bs = self.on_release, self.block_size
        if hook is None:
            self.free.extend(blocks)
            return
        for b in blocks:
            self.free.append(b)
            hook(b * bs, bs)

    def touch(self, block: int) -> None:  # pragma: no cover - nothing is cached here
        raise AssertionError("a free list caches nothing, so nothing is ever hit")

    def touch_blocks(self, blocks: list[int]) -> None:  # pragma: no cover - as touch
        raise AssertionError("a free list caches nothing, so nothing is ever hit")

    def snapshot(self, snap: dict) -> None:
        """Add the free list, next taken last, to a manager's snapshot."""
        snap["free_blocks"] = list(self.free)

    def check(self, referenced: set[int]) -> None:
        """Assert the free list is the complement of the ``referenced`` blocks."""
        free = self.free
        assert len(set(free)) == len(free), "a block is on the free list twice"
        assert all(0 <= b < self.num_blocks for b in free), "free list holds an unknown block"
        assert not referenced & set(free), "a referenced block is on the free list"
        assert len(free) + len(referenced) == self.num_blocks, "free + used != total"
