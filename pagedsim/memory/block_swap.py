"""Swapping a block manager's sequences to a CPU buffer and back (vLLM v0's preemption
by swapping).

A swap-out keeps the group's sharing: a block several of its sequences hold is copied
out once, and the group comes back into fresh blocks with the same sharing. In a caching
pool the sequences' names come back too, so their full blocks are reusable again. The
copies to carry out are returned as :class:`~.base.KVCopy` records (GPU slot -> offset in
the group's CPU buffer, and back).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import OutOfMemoryError
from ..workloads.block_hashes import branch_of
from .base import KVCopy, SeqId, SwappedGroup, distinct_ids
from .block_seq import Seq


class Swapping:
    """Swap-out and swap-in of a :class:`~.block_manager.BlockManager`'s sequences."""

    def swap_out_slots(self, seq_ids: Iterable[SeqId]) -> int:
        """CPU slots a swap-out would take: every distinct block once."""
        blocks = {b for s in seq_ids for b in self._get(s).table}
        return len(blocks) * self.block_size

    def swap_out(self, seq_ids: Iterable[SeqId]) -> SwappedGroup:
        """Move ``seq_ids`` to a CPU buffer, keeping their sharing; their GPU blocks are
        released (a caching pool keeps the full ones cached)."""
        seq_ids = distinct_ids(seq_ids)
        if self.regions is not None:
            self.regions.check_running(seq_ids)
        seqs = [self._get(s) for s in seq_ids]
        bs = self.block_size
        local: dict[int, int] = {}  # GPU block -> index in the CPU buffer (in blocks)
        tables = [[local.setdefault(b, len(local)) for b in seq.table] for seq in seqs]
        out = [KVCopy(b * bs, i * bs, bs) for b, i in local.items()]
        meta = [(seq.num_tokens, seq.final_len) for seq in seqs]
        named = ({s: (q.content, q.hashes) for s, q in zip(seq_ids, seqs, strict=True)
                  if q.content is not None} if self.pool.caches else {})
        for s in seq_ids:
            self.free(s)
        self._swapped_ids.update(seq_ids)
        state = {"tables": tables, "meta": meta, "num_blocks": len(local)}
        if self.pool.caches:
            state["content"] = named
        return SwappedGroup(seq_ids=seq_ids, cpu_slots=len(local) * bs, out_copies=out,
                            state=state, owner=self._swap_token)

    def _check_swap_in(self, group: SwappedGroup) -> int:
        """Blocks ``group`` needs back, after checking it may return here and that none
        of its ids is live."""
        group.check_can_return_to(self._swap_token)
        clash = [s for s in group.seq_ids if s in self]  # cannot happen: ids are reserved
        if clash:
            raise ValueError(f"sequence ids {clash!r} already exist")
        return group.state["num_blocks"]

    def can_swap_in(self, group: SwappedGroup, watermark: float = 0.0) -> bool:
        """Whether the group's blocks fit and leave ``watermark`` of the blocks free."""
        group.check_can_return_to(self._swap_token)
        if self.regions is not None and not self.regions.has_room_for(self, group.seq_ids):
            return False
        need = group.state["num_blocks"]
        return self.pool.get_num_free_blocks() - need >= self.watermark_blocks(watermark)

    def swap_in(self, group: SwappedGroup) -> list[KVCopy]:
        """Bring a swapped group back into fresh blocks (all or nothing); the copies
        CPU -> GPU."""
        if self.regions is not None:
            self.regions.check_room_for(self, group.seq_ids)
        n = self._check_swap_in(group)
        free = self.pool.get_num_free_blocks()
        if n > free:
            raise OutOfMemoryError(f"swap-in needs {n} blocks, {free} free")
        new_blocks, tables = self.refs.take_for(n, group.state["tables"])
        named = group.state.get("content", {})
        for seq_id, phys, (num_tokens, final_len) in zip(
            group.seq_ids, tables, group.state["meta"], strict=True
        ):
            content, hashes = named.get(seq_id, (None, []))
            # Every count is final (take_for), so each one's room is right at once.
            seq = self._add_seq(seq_id, Seq(phys, num_tokens, final_len, content,
                                            branch_of(seq_id)))
            if content is not None:
                self.cache.swapped_in(self, seq, hashes)
        group.swapped_in = True
        self._swapped_ids.difference_update(group.seq_ids)
        bs = self.block_size
        return [KVCopy(i * bs, b * bs, bs) for i, b in enumerate(new_blocks)]
