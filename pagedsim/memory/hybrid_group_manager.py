"""One KV-cache group's block tables: vLLM v1's single-type manager.

vLLM v1 gives each KV-cache group of a hybrid model its own manager
(``SingleTypeKVCacheManager``: ``FullAttentionManager``, ``SlidingWindowManager``), all
drawing from one ``BlockPool``; the coordinator over them
(:class:`~.hybrid.HybridAllocator`) asks each and decides for all. A
:class:`GroupManager` is one of them. It is one class for every kind of group,
parameterised by its :class:`~.hybrid_groups.GroupSpec`: the spec's window is the only
rule that differs, and it enters in two places.

* **What falls behind the window.** A full group (no window) keeps every block. A
  sliding group of window ``W``, before a sequence grows at position ``n``, gives up the
  blocks wholly before token ``n - W + 1``, the first one the query at ``n`` reads
  (vLLM's ``remove_skipped_blocks``): their table entries become
  :data:`~.hybrid_groups.NULL_BLOCK`, so a table stays indexed by token position, and a
  block nobody else holds goes back to the pool.
* **Its own cache hit** (:meth:`GroupManager.longest_hit`). A full group needs every
  block of a cached prefix; a sliding group only the last ``ceil((W - 1) / block_size)``
  before the hit's end. :mod:`.hybrid_cache` intersects the groups' answers.

Everything else is the same for every group: a table per sequence (vLLM's
``req_to_blocks``), the index of its first held entry (``first``: 0 in a full group),
the blocks taken from the pool and held through the shared
:class:`~.block_refs.BlockRefs` (forks share; a write into a shared partial block copies
it first), and the group's own counts: the blocks it holds (``num_blocks``: the groups
partition the pool, so a block is one group's), its held table entries
(``num_entries``), and what its window gave up since the start. The sequence itself (its
tokens, its final length) is the coordinator's: a manager is told the position at which
a sequence grows. Its state is written only by its own methods.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from .base import KVCopy, SeqId
from .block_refs import BlockRefs
from .fast_usage import split_by_last_blocks
from .hybrid_groups import NULL_BLOCK, GroupSpec


class GroupManager:
    """Group ``index``'s block tables over the pool of ``refs`` (see the module)."""

    __slots__ = ("index", "spec", "window", "run_blocks", "block_size", "refs", "_ref",
                 "_pool", "tables", "first", "num_blocks", "num_entries",
                 "dropped_entries", "freed_blocks")

    def __init__(self, index: int, spec: GroupSpec, refs: BlockRefs, block_size: int) -> None:
        self.index = index  # its group number: its cached blocks are named (index, hash)
        self.spec = spec
        #: The window in tokens, or None: the group keeps every block.
        self.window = spec.window
        #: Blocks a cache hit needs before its end (None: all of them, full attention;
        #: the first computed token reads ``W - 1`` tokens back).
        self.run_blocks = (None if self.window is None
                           else -(-(self.window - 1) // block_size))
        self.block_size = block_size
        self.refs = refs
        self._ref = refs.counts  # (the same list, bound for the hot paths)
        self._pool = refs.pool
        self.tables: dict[SeqId, list[int]] = {}  # vLLM's req_to_blocks
        self.first: dict[SeqId, int] = {}  # index of each table's first held entry
        self.num_blocks = 0  # distinct blocks this group holds now
        self.num_entries = 0  # held table entries, all sequences
        #: Table entries given up behind the window, and of those the blocks that went
        #: back to the pool (nobody else held them), since the start.
        self.dropped_entries = 0
        self.freed_blocks = 0

    # ----------------------------------------------------------------------------- admission
    def take(self, n: int, names: list | tuple = ()) -> list[int]:
        """``n`` blocks for this group from the pool (the coordinator checked room), one
        holder each; a caching pool names the first ``len(names)``."""
        self.num_blocks += n
        return self.refs.take(n, names)

    def hold(self, blocks: list[int]) -> None:
        """One more holder of each of ``blocks`` (a prefix hit); those nobody held become
        this group's."""
        self.num_blocks += self.refs.hold(blocks)

    def allocate(self, seq_id: SeqId, num_blocks: int) -> None:
        """A table of ``num_blocks`` fresh blocks for a new sequence."""
        self.add(seq_id, self.take(num_blocks))

    def add(self, seq_id: SeqId, table: list[int], first: int = 0) -> None:
        """Record ``seq_id``'s table, whose blocks it holds already (a cached admission's,
        a fork's, a swap-in's), null before ``first``."""
        self.tables[seq_id] = table
        self.first[seq_id] = first
        self.num_entries += len(table) - first

    def own_new(self, n: int) -> None:
        """``n`` blocks the coordinator took for several groups in one call (a swap-in)
        are this group's."""
        self.num_blocks += n

    # ------------------------------------------------------------------------------- growing
    def remove_skipped_blocks(self, seq_id: SeqId, position: int) -> int:
        """Before ``seq_id`` grows at ``position``: give up the blocks before the one
        holding token ``position - W + 1`` (nothing in a full group), latest first as
        vLLM does. Returns how many went back to the pool."""
        w = self.window
        if w is None:
            return 0
        first = self.first[seq_id]
        cut = (position - w + 1) // self.block_size
        if cut <= first:
            return 0
        table = self.tables[seq_id]
        back = self.refs.release(table[first:cut])  # latest first, as vLLM does
        table[first:cut] = [NULL_BLOCK] * (cut - first)
        self.first[seq_id] = cut
        self.num_entries -= cut - first
        self.dropped_entries += cut - first
        self.freed_blocks += back
        self.num_blocks -= back
        return back

    def append(self, seq_id: SeqId, position: int) -> tuple[int, KVCopy | None]:
        """Room for token ``position`` (the sequence's next): ``(block, copy)``, the block
        it goes in and the copy-on-write copy to carry out first, or None. A fresh block
        when the last one is full (or there is none), a copy when the partial last block
        is shared (the coordinator checked room)."""
        table = self.tables[seq_id]
        off = position % self.block_size
        if not off:
            b = self.refs.take_one()
            self.num_blocks += 1
            self.num_entries += 1
            table.append(b)
            return b, None
        b = table[-1]
        if self._ref[b] == 1:
            return b, None
        return self._copy_last(table, off)

    def extend(self, seq_id: SeqId, position: int, total_blocks: int) -> KVCopy | None:
        """Room for the tokens from ``position`` on, up to ``total_blocks`` blocks in all
        (a prefill chunk): a shared partial last block is copied first (the copy, or
        None), then fresh blocks are added."""
        table = self.tables[seq_id]
        copy = None
        off = position % self.block_size
        if off and self._ref[table[-1]] > 1:
            _, copy = self._copy_last(table, off)
        add = total_blocks - len(table)
        table += self.take(add)
        self.num_entries += add
        return copy

    def _copy_last(self, table: list[int], fill: int) -> tuple[int, KVCopy]:
        """Copy-on-write of the shared partial last block of ``table`` (``fill`` tokens)."""
        old = table[-1]
        new = self.refs.take_one()
        self.num_blocks += 1
        self.refs.drop(old)
        table[-1] = new
        bs = self.block_size
        return new, KVCopy(old * bs, new * bs, fill)

    # ------------------------------------------------------------------- sharing and release
    def fork(self, parent_id: SeqId, child_id: SeqId) -> None:
        """``child_id`` holds every block ``parent_id`` holds here (nothing copied)."""
        table = list(self.tables[parent_id])
        self.num_blocks += self.refs.hold([b for b in table if b != NULL_BLOCK])
        self.add(child_id, table, self.first[parent_id])

    def pop(self, seq_id: SeqId) -> list[int]:
        """Forget ``seq_id``'s table and return it; the coordinator releases its blocks
        (every group's together, tail first), then says :meth:`released`."""
        table = self.tables.pop(seq_id)
        self.num_entries -= len(table) - self.first.pop(seq_id)
        return table

    def released(self, table: list[int]) -> None:
        """The blocks of a popped ``table`` were released: those nobody holds now are no
        longer this group's."""
        ref = self._ref
        self.num_blocks -= sum(1 for b in table if b != NULL_BLOCK and not ref[b])

    # ----------------------------------------------------------- room (nothing changes)
    def returned(self, seq_id: SeqId, position: int, dropped: Counter | None) -> int:
        """Blocks that would go back to the pool if ``seq_id`` grew at ``position``: those
        the window gives up that nobody else holds (``dropped`` counts the references
        earlier growths of the same batch gave up). 0 in a full group."""
        w = self.window
        if w is None:
            return 0
        table, ref, back = self.tables[seq_id], self._ref, 0
        for i in range(self.first[seq_id], (position - w + 1) // self.block_size):
            b = table[i]
            if dropped is None:
                back += ref[b] == 1
            else:
                dropped[b] += 1
                back += dropped[b] == ref[b]
        return back

    def blocks_to_extend(self, seq_id: SeqId, position: int, total_blocks: int) -> int:
        """Blocks :meth:`extend` would take: new ones, and a copy of a shared partial
        last block."""
        table = self.tables[seq_id]
        return total_blocks - len(table) + (position % self.block_size != 0
                                            and self._ref[table[-1]] > 1)

    # ------------------------------------------------------------------------ the cache hit
    def longest_hit(self, chain: list, most: int) -> int:
        """This group's own longest cache hit, in blocks, at most ``most`` (``chain``: a
        sequence's block hashes; a block is cached under ``(index, hash)``)."""
        cached, need, g = self._pool.cached, self.run_blocks, self.index
        if need is None:  # full attention: the cached run from the start
            k = 0
            while k < most and (g, chain[k]) in cached:
                k += 1
            return k
        if need == 0:  # a window of one token reads nothing before itself
            return most
        run = 0
        for i in range(most - 1, -1, -1):  # right to left: the first long enough run wins
            if (g, chain[i]) in cached:
                run += 1
                if run >= need:
                    return i + need
            else:
                run = 0
        return run  # the run from block 0, shorter than ``need``: valid all the same

    def hit_blocks(self, chain: list, num_hit_blocks: int) -> tuple[int, list[int]]:
        """Of a hit of ``num_hit_blocks`` blocks, what this group holds: the index of its
        first entry and the cached blocks from there (every one in a full group, the last
        ``run_blocks`` in a sliding one)."""
        need, cached, g = self.run_blocks, self._pool.cached, self.index
        lo = 0 if need is None else max(0, num_hit_blocks - need)
        return lo, [cached[(g, chain[j])] for j in range(lo, num_hit_blocks)]

    def cache_block(self, seq_id: SeqId, index: int, h: object) -> None:
        """Block ``index`` of ``seq_id`` is full: name it ``(group, h)`` unless it is
        null here or named already (a hit, a block shared with a sibling)."""
        b = self.tables[seq_id][index]
        if b != NULL_BLOCK and self._pool.hashes[b] is None:
            self._pool.cache_block(b, (self.index, h))

    # ------------------------------------------------------------------------- the account
    def split(self, lasts: Iterable[tuple[SeqId, int, int]]) -> tuple[int, int]:
        """(token, reserved) slots of the blocks this group holds, given each sequence's
        partial last block as ``(seq_id, fill, future fill)`` (its tokens in it now and at
        its final length): every other held block is full of tokens (a table's blocks
        before its last are full; those behind a window were given up). A shared partial
        block counts once, with its largest future fill."""
        tables = self.tables
        return split_by_last_blocks(((tables[seq_id][-1], fill, future)
                                     for seq_id, fill, future in lasts),
                                    self._ref, self.num_blocks, self.block_size)

    def num_cached(self) -> int:
        """Cached blocks named for this group (a scan of the free queue; 0 in a pool
        that caches nothing)."""
        names = self._pool.hashes
        if names is None:
            return 0
        g = self.index
        return sum(1 for b in self._pool.free if names[b] is not None and names[b][0] == g)

    def null_entries(self) -> int:
        """Table entries live sequences hold as null (given up behind the window)."""
        return sum(self.first.values())

    def check(self, num_tokens: Mapping[SeqId, int], grown_at: Mapping[SeqId, int]) -> None:
        """Assert each table fits its sequence's ``num_tokens``, is null exactly before
        ``first``, keeps no block behind the window of its last growth (``grown_at``, -1:
        none), and the counts agree with the tables."""
        bs, w, g = self.block_size, self.window, self.index
        assert self.tables.keys() == num_tokens.keys(), f"group {g}: sequences differ"
        for seq_id, table in self.tables.items():
            first = self.first[seq_id]
            assert len(table) == -(-num_tokens[seq_id] // bs), (
                f"sequence {seq_id!r}: {len(table)} blocks for {num_tokens[seq_id]} "
                f"tokens in group {g}")
            assert w is not None or first == 0, f"{seq_id!r}: full group dropped"
            assert all(b == NULL_BLOCK for b in table[:first]), f"{seq_id!r}: {g}"
            assert NULL_BLOCK not in table[first:], f"{seq_id!r}: hole in group {g}"
            assert not table or first < len(table), f"{seq_id!r}: last block dropped"
            if w is not None and grown_at[seq_id] >= 0:
                assert first >= (grown_at[seq_id] - w + 1) // bs, (
                    f"sequence {seq_id!r}: group {g} keeps blocks behind its window")
        assert self.num_entries == sum(len(t) - self.first[s] for s, t in
                                       self.tables.items()), f"group {g}: entry count"
