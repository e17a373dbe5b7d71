"""What is read of a contiguous allocator from outside: the accounting's split of its
regions, its holes (external fragmentation), its state as plain data, and its checks."""

from __future__ import annotations

from collections.abc import Mapping

from .accounting import final_tokens, split_slots
from .base import SeqId, SlotUsage


class ContiguousView:
    """``usage``, ``holes``, ``snapshot`` and ``check_invariants`` of a
    :class:`~.contiguous.ContiguousAllocator`."""

    def usage(self, final_lens: Mapping[SeqId, int] | None = None) -> SlotUsage:
        """Token, reserved (will be filled) and internal-fragmentation slots of all regions.

        Final lengths come from ``final_lens``, else from ``final_len`` at allocation;
        a sequence with neither is taken as finished.
        """
        token = reserved = allocated = 0
        fl = final_lens or {}
        for seq_id, r in self._regions.items():
            n = r.num_tokens
            final = final_tokens(n, fl.get(seq_id, r.final_len) if fl else r.final_len)
            t, res, _ = split_slots(n, final, r.size)
            token += t
            reserved += res
            allocated += r.size
        return SlotUsage(
            token_slots=token,
            reserved_slots=reserved,
            internal_frag_slots=allocated - token - reserved,
            physical_blocks=len(self._regions),
            logical_blocks=len(self._regions),
        )

    def holes(self) -> list[tuple[int, int]]:
        """Free holes as ``(start_slot, size_slots)``, by address."""
        return self._arena.holes()

    @property
    def num_free_slots(self) -> int:
        return sum(size for _, size in self._arena.holes())

    def external_frag_slots(self, need_slots: int | None) -> int:
        """Free slots in holes smaller than ``need_slots`` (0 when nobody waits)."""
        if not need_slots:
            return 0
        return sum(size for _, size in self._arena.holes() if size < need_slots)

    def snapshot(self) -> dict:
        """The whole state as plain data (for pictures, step-through recorders and tests)."""
        return {
            "kind": "contiguous",
            "view": "arena",
            "capacity_slots": self.capacity_slots,
            "reservation": self.reservation,
            "placement": self.placement,
            "max_model_len": self.max_model_len,
            "align_slots": self.align_slots,
            "holes": self._arena.holes(),
            "seqs": {
                sid: {"start": r.start, "size": r.size, "num_tokens": r.num_tokens,
                      "final_len": r.final_len}
                for sid, r in self._regions.items()
            },
        }

    def check_invariants(self) -> None:
        self._arena.check_invariants()
        used = self._arena.used()
        assert len(used) == len(self._regions), "arena and region table disagree"
        for seq_id, r in self._regions.items():
            assert used.get(r.start) == r.size, f"sequence {seq_id!r}: region not in arena"
            assert 0 <= r.start and r.start + r.size <= self.capacity_slots, "region out of bounds"
            assert 0 <= r.num_tokens <= r.size, f"sequence {seq_id!r} overflows its region"
            assert r.start % self.align_slots == 0, f"sequence {seq_id!r}: unaligned region"
        for child in self._held:
            assert child in self._regions and self._regions[child].num_tokens == 0, (
                f"held child {child!r} has no empty region")
