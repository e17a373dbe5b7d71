"""The pool under SGLang's radix cache: a free list, and the tree's unlocked pages as
blocks that eviction can hand out.

Every block is *free* (on the free list, a stack), *held* (in running sequences' block
tables) or *cached* (a page of the radix tree that nobody holds: evictable, its K/V kept
until eviction hands the block out again). So the blocks an allocation may take are the
free ones plus the tree's evictable pages: when the free list runs short, the tree's
eviction policy (least recently used unlocked leaf, or least frequently hit:
:mod:`~pagedsim.memory.radix_tree`) gives up a whole leaf, whose blocks join the free
list (``on_release`` reports them then). A held block that goes back stays in the tree if
it is a tree page, and joins the free list otherwise. The tree itself, the locks and the
insertions are the radix policy's (:mod:`~pagedsim.memory.radix_cache`). With a host
tier (``host``, :class:`~.host_tier.HostTier`) an evicted leaf's pages are written back to
it, tail first (so that its head, which lookups reach first, stays longest in the host).
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import OutOfMemoryError
from ..validate import check_int
from .host_tier import HostTier
from .radix_tree import RadixTree


class RadixPool:
    """``num_blocks`` blocks of ``block_size`` slots: a free list and a radix tree."""

    caches = True
    hashes = None  # the tree names pages by their tokens; blocks carry no hash here

    def __init__(self, num_blocks: int, block_size: int = 16,
                 tree: RadixTree | None = None, host: HostTier | None = None) -> None:
        self.num_blocks = check_int("num_blocks", num_blocks, minimum=1)
        self.block_size = check_int("block_size", block_size, minimum=1)
        self.free = list(range(self.num_blocks - 1, -1, -1))  # first taken: 0, 1, 2...
        self.tree = tree if tree is not None else RadixTree()
        self.in_tree = [False] * self.num_blocks
        self.evicted_blocks = 0
        self.on_release: Callable[[int, int], None] | None = None
        self.host = host  # the host tier evicted pages are written back to, or None

    def get_num_free_blocks(self) -> int:
        """Blocks an allocation may take: free ones, and cached ones (by eviction)."""
        return len(self.free) + self.tree.num_evictable

    @property
    def num_free_blocks(self) -> int:
        """Blocks on the free list (the tree's cached pages are not on it)."""
        return len(self.free)

    @property
    def num_cached_blocks(self) -> int:
        return self.tree.num_evictable

    def describe_free(self) -> str:
        return f"{len(self.free)} free and {self.tree.num_evictable} cached"

    # ------------------------------------------------------------ handing out
    def make_room(self, num_blocks: int) -> None:
        """Evict leaves by the tree's policy until ``num_blocks`` blocks are free."""
        free, hook, bs = self.free, self.on_release, self.block_size
        while len(free) < num_blocks:
            node = self.tree.pop_leaf()
            if node is None:
                raise OutOfMemoryError(f"need {num_blocks} free blocks, {len(free)} free and "
                                       "nothing evictable")
            if self.host is not None:  # K/V to the host before the blocks are reused
                for b, key in zip(reversed(node.blocks), reversed(node.keys), strict=True):
                    self.host.evicted(b, key)
            for b in reversed(node.blocks):  # the stack then hands out its head first
                self.in_tree[b] = False
                free.append(b)
                if hook is not None:
                    hook(b * bs, bs)
            self.evicted_blocks += len(node.blocks)

    def get_new_block(self) -> int:
        """A block for new content, evicting if the free list is empty (``IndexError``
        when nothing is free or evictable)."""
        if not self.free:
            if not self.tree.num_evictable:
                raise IndexError("no free or evictable block")
            self.make_room(1)
        return self.free.pop()

    def get_new_blocks(self, n: int) -> list[int]:
        """``n`` blocks (room checked), evicting as many as needed first."""
        self.make_room(n)
        free = self.free
        return [free.pop() for _ in range(n)]

    def free_blocks(self, blocks: list[int]) -> None:
        """Blocks nobody holds any more: tree pages stay cached, the others go back to
        the free list (``on_release``)."""
        free, in_tree, hook, bs = self.free, self.in_tree, self.on_release, self.block_size
        for b in blocks:
            if not in_tree[b]:
                free.append(b)
                if hook is not None:
                    hook(b * bs, bs)

    def touch(self, block: int) -> None:
        """A cached page is held again: its node's lock keeps it from eviction already."""

    def touch_blocks(self, blocks: list[int]) -> None:
        """:meth:`touch` of each of ``blocks``: nothing to do."""

    # -------------------------------------------------------------- pictures
    def snapshot(self, snap: dict) -> None:
        """Add the free list (next taken last) and the cached blocks."""
        snap["free_blocks"] = list(self.free)
        snap["cached_blocks"] = sorted(b for node in self.tree.nodes() if not node.lock_ref
                                       for b in node.blocks)
        if self.host is not None:
            snap["host"] = self.host.describe()

    def check(self, referenced: set[int]) -> None:
        """Assert the free list, the tree flags and the held blocks agree."""
        free = self.free
        assert len(set(free)) == len(free), "a block is on the free list twice"
        in_tree = {b for node in self.tree.nodes() for b in node.blocks}
        for b in range(self.num_blocks):
            assert self.in_tree[b] == (b in in_tree), f"block {b}: tree flag is wrong"
        free_set = set(free)
        for b in range(self.num_blocks):
            if b in free_set:
                assert b not in in_tree and b not in referenced, f"free block {b} is in use"
            else:
                assert b in in_tree or b in referenced, (
                    f"block {b} is neither free, cached nor held")
        if self.host is not None:
            self.host.check()
            key_of = {b: k for node in self.tree.nodes()
                      for b, k in zip(node.blocks, node.keys, strict=True)}
            for b, h in self.host.pending.items():  # a write-through reads a tree page
                assert key_of.get(b) == h, f"block {b} waits to be written through as {h}"
