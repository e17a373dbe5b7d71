"""Prefix caching over KV-cache groups, as vLLM v1's hybrid coordinator does it.

Every group keeps its own K/V, so a full block is named per group: by ``(group, chained
hash)`` in the one pool's hash map (vLLM's ``BlockHashWithGroupId``). A cached prefix is
usable only if *every* group holds what it needs of it:

* a **full-attention** group needs every block of the prefix: its own hit is the longest
  run of cached blocks from the start;
* a **sliding-window** group of window ``W`` needs only the last
  ``ceil((W - 1) / block_size)`` blocks before the hit's end (the first computed token
  reads ``W - 1`` tokens back), or every block of a hit shorter than that: its hit is
  the longest prefix length that ends such a run (vLLM's right-to-left search);

Each group's manager knows its own rule
(:meth:`~.hybrid_group_manager.GroupManager.longest_hit`, vLLM's
``find_longest_cache_hit``); this policy asks them and takes the **intersection**: the
longest length valid for every group (:meth:`HybridCache.hit_blocks`). Shortening a hit
can invalidate a sliding group's (its run must end where the hit ends), so the search
repeats until no group shortens it further; each pass only lowers it to a length some
group accepts, so it stops at the longest one all accept. A sliding group's table starts
with null entries up to its run, which are never held. Blocks a window leaves behind
keep their names in the pool, so a later request's sliding groups can still hit them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..workloads.block_hashes import BlockHashes, branch_of
from .base import SeqId
from .hybrid_groups import NULL_BLOCK, HybridSeq


class HybridCache:
    """The prefix-cache policy of a :class:`~.hybrid.HybridAllocator` (see the module)."""

    def __init__(self, alloc) -> None:
        self.alloc, self.pool, self.block_size = alloc, alloc.pool, alloc.block_size
        self.managers = alloc.managers  # one per group, in group order
        # A full group's hit is a prefix (shorter ones stay valid): those are asked first.
        self._full = [m for m in self.managers if m.run_blocks is None]
        self._sliding = [m for m in self.managers if m.run_blocks is not None]

    # ------------------------------------------------------------- hits
    def group_hit(self, group: int, chain: list, most: int) -> int:
        """Group ``group``'s own longest hit, in blocks, at most ``most`` (its manager's
        rule, :meth:`~.hybrid_group_manager.GroupManager.longest_hit`)."""
        return self.managers[group].longest_hit(chain, most)

    def hit_blocks(self, chain: list, most: int) -> int:
        """The longest hit, in blocks (at most ``most``), that every group accepts."""
        k = most
        for m in self._full:
            k = m.longest_hit(chain, k)
        changed = True
        while k and changed:
            changed = False
            for m in self._sliding:
                if (kg := m.longest_hit(chain, k)) < k:
                    k, changed = kg, True
        return k

    def lookup(self, block_hashes: BlockHashes, num_tokens: int, seq_id: SeqId) -> int:
        """Tokens of a new ``num_tokens``-token sequence every group holds now (whole
        blocks, at most ``num_tokens - 1``: the last prompt token is always computed)."""
        bs = self.block_size
        most = max(num_tokens - 1, 0) // bs
        if not most or not self.pool.cached:
            return 0
        return self.hit_blocks(block_hashes.chain(branch_of(seq_id), num_tokens // bs), most) * bs

    # -------------------------------------------------------- admission
    def plan(self, seq_ids: Sequence[SeqId], num_tokens: int, block_hashes: BlockHashes):
        """Per sequence ``(hit blocks k, per group (first held index, hit blocks), chain)``
        and the blocks the admission takes from the free queue (new ones, and hits nobody
        holds); changes nothing."""
        bs, pool, ref = self.block_size, self.pool, self.alloc.refs.counts
        n, most = -(-num_tokens // bs), max(num_tokens - 1, 0) // bs
        plans, from_queue, touched = [], 0, set()
        for seq_id in seq_ids:
            chain = block_hashes.chain(branch_of(seq_id), num_tokens // bs)
            k = self.hit_blocks(chain, most) if most and pool.cached else 0
            hits = []
            for m in self.managers:
                lo, blocks = m.hit_blocks(chain, k)
                for b in blocks:
                    if not ref[b] and b not in touched:  # it leaves the free queue
                        touched.add(b)
                        from_queue += 1
                hits.append((lo, blocks))
            from_queue += (n - k) * len(self.managers)
            plans.append((k, hits, chain))
        return plans, from_queue

    def admit(self, seq_ids: Sequence[SeqId], num_tokens: int, final_len: int | None,
              block_hashes: BlockHashes, plans) -> None:
        """Carry out a plan that fits: every hit held first (no new block may evict one),
        then new blocks, each full one named for its group as it is taken."""
        bs, managers = self.block_size, self.managers
        n = -(-num_tokens // bs)
        for _, hits, _ in plans:
            for m, (_, blocks) in zip(managers, hits, strict=True):
                m.hold(blocks)
        for seq_id, (k, hits, chain) in zip(seq_ids, plans, strict=True):
            for m, (lo, blocks) in zip(managers, hits, strict=True):
                names = [(m.index, h) for h in chain[k:]]
                m.add(seq_id, [NULL_BLOCK] * lo + blocks + m.take(n - k, names), lo)
            self.alloc.add_seq(seq_id, HybridSeq(num_tokens, final_len, block_hashes,
                                                 branch_of(seq_id), list(chain), k * bs))

    # ------------------------------------------------------------ naming
    def filled(self, seq_id: SeqId, seq: HybridSeq, index: int,
               h: object = None) -> None:
        """Block ``index`` of ``seq`` is full: name it by its hash (``h``, or its next
        one) in every group that holds it (a hit or a block shared with a sibling is
        named already)."""
        if h is None:
            h = seq.next_hash()
        for m in self.managers:
            m.cache_block(seq_id, index, h)

    def swapped_in(self, seq_id: SeqId, seq: HybridSeq) -> None:
        """A sequence back from the CPU (its names kept): its full blocks are named again."""
        for j, h in enumerate(seq.hashes):
            self.filled(seq_id, seq, j, h)

    def check(self) -> None:
        """Every full block a sequence with content holds is named for its group."""
        names, bs = self.pool.hashes, self.block_size
        for seq_id, seq in self.alloc.seqs.items():
            if seq.block_hashes is None:
                continue
            assert len(seq.hashes) == seq.num_tokens // bs, f"{seq_id!r}: names != blocks"
            for m in self.managers:
                g, table = m.index, m.tables[seq_id]
                for j, h in enumerate(seq.hashes):
                    b = table[j]
                    assert b == NULL_BLOCK or names[b] == (g, h), (
                        f"sequence {seq_id!r}: group {g} block {j} ({b}) is named "
                        f"{names[b]}, not {(g, h)}")
