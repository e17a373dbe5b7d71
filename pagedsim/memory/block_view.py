"""What is read of a block manager from outside: the accounting's split of its slots,
its whole state as plain data (pictures, step-through recorders, tests), and the
consistency checks the property tests run after every operation."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace

from .base import SeqId, SlotUsage
from .fast_usage import usage_by_block_walk, usage_by_last_blocks


class View:
    """``usage``, ``snapshot`` and ``check_invariants`` of a
    :class:`~.block_manager.BlockManager`."""

    def usage(self, final_lens: Mapping[SeqId, int] | None = None) -> SlotUsage:
        """Allocated slots split into token / reserved / internal fragmentation, plus the
        cached ones (:mod:`pagedsim.memory.accounting` has the rules; one visit per sequence)."""
        pool, regions = self.pool, self.regions
        held = 0 if regions is None else len(regions.held_blocks())  # not in any table
        u = usage_by_last_blocks(self._seqs, self._ref, self.block_size,
                                 self.num_blocks - pool.get_num_free_blocks() - held,
                                 self._num_logical_blocks, final_lens,
                                 cached_slots=pool.num_cached_blocks * self.block_size,
                                 shared=self.refs.num_shared > 0)
        return u if regions is None else regions.usage(self, u)

    def snapshot(self) -> dict:
        """The whole state as plain data: block tables, reference counts, the pool's free
        structure (and, in a caching pool, its cached blocks and every block's hash)."""
        snap = {
            "kind": self.kind,
            "view": "blocks",
            "num_blocks": self.num_blocks,
            "block_size": self.block_size,
            "free_blocks": [],
            "ref_counts": list(self._ref),
            "seqs": {
                sid: {"block_table": list(s.table), "num_tokens": s.num_tokens,
                      "final_len": s.final_len}
                for sid, s in self._seqs.items()
            },
        }
        self.pool.snapshot(snap)
        if self.cache is not None:
            self.cache.snapshot(snap)
        if self.regions is not None:
            self.regions.snapshot(snap)
        return snap

    def _referenced_blocks(self) -> Counter[int]:
        """How many references each used block has (block tables and held rooms)."""
        counts = Counter(b for seq in self._seqs.values() for b in seq.table)
        if self.regions is not None:
            counts.update(self.regions.held_blocks())
        return counts

    def check_invariants(self) -> None:
        """Assert that tables, reference counts, counters, the pool and the accounting
        agree (``AssertionError`` naming the first disagreement)."""
        counts = self._referenced_blocks()
        for b in range(self.num_blocks):
            assert self._ref[b] == counts[b], (
                f"block {b}: ref count {self._ref[b]} != {counts[b]} table entries")
        self.pool.check(set(counts))
        assert self.refs.num_shared == sum(1 for c in counts.values() if c > 1)
        assert self._num_logical_blocks == sum(len(s.table) for s in self._seqs.values())
        bs = self.block_size
        for seq_id, seq in self._seqs.items():
            assert len(seq.table) == -(-seq.num_tokens // bs), (
                f"sequence {seq_id!r}: {len(seq.table)} blocks for {seq.num_tokens} tokens")
            room = seq.end_slot - seq.next_slot
            if room > 0:  # the fast path of append_slot writes to a private last block
                n = seq.num_tokens
                last = bs - (self.cache is not None)  # a cache names the block's last slot
                assert self._ref[seq.table[-1]] == 1 and n % bs + room <= last, (
                    f"sequence {seq_id!r}: room {room} past its private last block")
                assert seq.next_slot == seq.table[-1] * bs + n % bs, (
                    f"sequence {seq_id!r}: next slot {seq.next_slot} is not its next token's")
            if seq.content is not None:
                full = seq.num_tokens // bs
                assert len(seq.hashes) == full, (
                    f"sequence {seq_id!r}: {len(seq.hashes)} names for {full} full blocks")
        # The fast accounting (one visit per sequence) against the walk over every block.
        held = 0 if self.regions is None else len(self.regions.held_blocks())
        walked = replace(usage_by_block_walk(self._seqs, self._ref, bs,
                                             self.num_blocks - self.pool.get_num_free_blocks()
                                             - held, self._num_logical_blocks),
                         cached_slots=self.pool.num_cached_blocks * bs)
        if self.regions is not None:
            walked = self.regions.usage(self, walked)
            self.regions.check(self)
        assert self.usage() == walked, f"fast usage {self.usage()} != {walked}"
        if self.cache is not None:
            self.cache.check(self)
