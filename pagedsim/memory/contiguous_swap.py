"""Swapping a contiguous allocator's sequences to a CPU buffer and back: each region's
tokens are copied out and the region released; coming back, every region of the group is
placed again (all or nothing), wherever the arena has room."""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import OutOfMemoryError
from ..validate import check_fraction
from .base import KVCopy, SeqId, SwappedGroup, distinct_ids
from .region import Region


class ContiguousSwapping:
    """Swap-out and swap-in of a :class:`~.contiguous.ContiguousAllocator`'s regions."""

    def swap_out(self, seq_ids: Iterable[SeqId]) -> SwappedGroup:
        """Copy each sequence's tokens to a CPU buffer and release its region."""
        seq_ids = distinct_ids(seq_ids)
        regions = [self._running(s) for s in seq_ids]
        out, meta, offset = [], [], 0
        for r in regions:
            if r.num_tokens:
                out.append(KVCopy(r.start, offset, r.num_tokens))
            meta.append((r.size, r.num_tokens, r.final_len, offset))
            offset += r.num_tokens
        for s in seq_ids:
            self.free(s)
        self._swapped.update(seq_ids)
        return SwappedGroup(seq_ids, offset, out, {"meta": meta}, owner=self._swap_token)

    def swap_out_slots(self, seq_ids: Iterable[SeqId]) -> int:
        """CPU slots a swap-out would take: every sequence's tokens (nothing is shared)."""
        return sum(self._get(s).num_tokens for s in seq_ids)

    def _try_place_all(self, sizes: list[int]) -> list[int] | None:
        starts: list[int] = []
        for size in sizes:
            start = self._arena.alloc(size)
            if start is None:
                for s in reversed(starts):  # roll back: frees merge back exactly
                    self._arena.free(s)  # (never written: no release to report)
                return None
            starts.append(start)
        return starts

    def can_swap_in(self, group: SwappedGroup, watermark: float = 0.0) -> bool:
        """Whether every region of the group can be placed (no watermark, as admission;
        it is checked all the same)."""
        check_fraction("watermark", watermark)
        group.check_can_return_to(self._swap_token)
        starts = self._try_place_all([m[0] for m in group.state["meta"]])
        if starts is None:
            return False
        for s in reversed(starts):
            self._arena.free(s)
        return True

    def swap_in(self, group: SwappedGroup) -> list[KVCopy]:
        """Place every region of the group again (all or nothing); copies CPU -> GPU."""
        group.check_can_return_to(self._swap_token)
        clash = [s for s in group.seq_ids if s in self._regions]
        if clash:
            raise ValueError(f"sequence ids {clash!r} already exist")
        meta = group.state["meta"]
        starts = self._try_place_all([m[0] for m in meta])
        if starts is None:
            raise OutOfMemoryError(f"no room to swap in {len(meta)} regions")
        copies = []
        for seq_id, start, (size, n, final, offset) in zip(
            group.seq_ids, starts, meta, strict=True
        ):
            self._regions[seq_id] = Region(start, size, n, final)
            if n:
                copies.append(KVCopy(offset, start, n))
        group.swapped_in = True
        self._swapped.difference_update(group.seq_ids)
        return copies
