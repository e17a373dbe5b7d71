"""Swapping a hybrid allocator's sequences to a CPU buffer and back (vLLM v0's
preemption by swapping), every group at once.

A swap-out copies each distinct block the sequences hold once, in whichever group holds
it; null entries (blocks a sliding group gave up behind its window) stay null, so nothing
behind a window is copied or brought back. The group comes back into fresh blocks with
the same sharing and, in a caching pool, its full blocks named again.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import OutOfMemoryError
from ..workloads.block_hashes import branch_of
from .base import KVCopy, SeqId, SwappedGroup, distinct_ids
from .hybrid_groups import NULL_BLOCK, HybridSeq


class HybridSwapping:
    """Swap-out and swap-in of a :class:`~.hybrid.HybridAllocator`'s sequences."""

    def swap_out_slots(self, seq_ids: Iterable[SeqId]) -> int:
        """CPU slots a swap-out would take: every distinct block held, once."""
        held = {b for s in seq_ids for t in self._get(s).tables for b in t if b >= 0}
        return len(held) * self.block_size

    def swap_out(self, seq_ids: Iterable[SeqId]) -> SwappedGroup:
        """Move ``seq_ids`` to a CPU buffer (each distinct block once, null entries kept)
        and release their GPU blocks."""
        seq_ids = distinct_ids(seq_ids)
        seqs = [self._get(s) for s in seq_ids]
        bs, local = self.block_size, {}  # GPU block -> (its index in the buffer, group)
        tables = [[[NULL_BLOCK if b < 0 else local.setdefault(b, (len(local), g))[0]
                    for b in t] for g, t in enumerate(q.tables)] for q in seqs]
        out = [KVCopy(b * bs, i * bs, bs) for b, (i, _) in local.items()]
        meta = [(q.num_tokens, q.final_len, list(q.first), q.grown_at, q.content,
                 list(q.hashes)) for q in seqs]
        for s in seq_ids:
            self.free(s)
        self._swapped_ids.update(seq_ids)
        state = {"tables": tables, "meta": meta, "num_blocks": len(local),
                 "groups": [g for _, g in local.values()]}
        return SwappedGroup(seq_ids=seq_ids, cpu_slots=len(local) * bs, out_copies=out,
                            state=state, owner=self._swap_token)

    def can_swap_in(self, group: SwappedGroup, watermark: float = 0.0) -> bool:
        """Whether the group's blocks fit and leave ``watermark`` of the pool free."""
        group.check_can_return_to(self._swap_token)
        need = group.state["num_blocks"]
        return self.pool.get_num_free_blocks() - need >= self.watermark_blocks(watermark)

    def swap_in(self, group: SwappedGroup) -> list[KVCopy]:
        """Bring a swapped group back into fresh blocks (all or nothing); the copies
        CPU -> GPU."""
        group.check_can_return_to(self._swap_token)
        n, free = group.state["num_blocks"], self.pool.get_num_free_blocks()
        if n > free:
            raise OutOfMemoryError(f"swap-in needs {n} blocks, {free} free")
        num_groups = len(self.groups)
        # Every group's table of every sequence, in one list (the group's sharing comes back).
        new, flat = self.refs.take_for(n, [t for tables in group.state["tables"]
                                           for t in tables])
        for g in group.state["groups"]:
            self.group_blocks[g] += 1
        for j, (seq_id, meta) in enumerate(zip(group.seq_ids, group.state["meta"],
                                               strict=True)):
            num_tokens, final_len, first, grown_at, content, hashes = meta
            phys = flat[j * num_groups:(j + 1) * num_groups]
            self._num_logical_blocks += sum(b != NULL_BLOCK for t in phys for b in t)
            seq = self._seqs[seq_id] = HybridSeq(phys, list(first), num_tokens, final_len,
                                                 content, branch_of(seq_id))
            seq.grown_at = grown_at
            if content is not None:
                self.cache.swapped_in(seq, hashes)
        group.swapped_in = True
        self._swapped_ids.difference_update(group.seq_ids)
        bs = self.block_size
        return [KVCopy(i * bs, b * bs, bs) for i, b in enumerate(new)]
