"""A step's decodes in one call: :meth:`BatchAppend.append_slots`, one token for each of
many sequences, all or nothing.

The simulator's steps are mostly decodes: every running sequence appends one token, and
nearly every one of them has room in its private last block (15 appends in 16, with
blocks of 16 and no prefix cache). Asking
:meth:`~.block_manager.BlockManager.append_slot` one by one costs a call, a check and a
tuple per token; this writes the common case in one loop over the batch and leaves the
rest (a fresh block, a copy-on-write, a block a prefix cache names) to ``append_slot``
itself, in the same order, so the result is the same appends'.
"""

from __future__ import annotations

from .base import KVCopy, SeqId


class BatchAppend:
    """``append_slots`` of a :class:`~.block_manager.BlockManager`."""

    def append_slots(self, seq_ids: list[SeqId]) -> tuple[list[KVCopy], list[int]] | None:
        """One :meth:`append_slot` for each of ``seq_ids`` in order, all or nothing (a
        step's decodes in one call): ``(copies, slots)``, or None and nothing changed when
        they do not all fit.

        One pass writes every sequence with room in its private last block (it takes
        nothing from the pool, so it cannot fail) and sets the others aside; if those
        find their blocks, they append in order, else the pass is undone."""
        if len(set(seq_ids)) != len(seq_ids):  # a second append of one id is another count
            raise ValueError(f"duplicate sequence ids in {tuple(seq_ids)!r}")
        seqs = self._seqs
        slots: list[int] = []
        later: list[int] = []  # positions that take the general path
        for seq_id in seq_ids:
            try:
                seq = seqs[seq_id]
            except (KeyError, TypeError):
                break  # unknown: undone below, then said
            slot = seq.next_slot
            if slot < seq.end_slot:  # append_slot's common case, inlined: the hot loop
                seq.next_slot = slot + 1
                seq.num_tokens += 1
            else:
                later.append(len(slots))
            slots.append(slot)
        if len(slots) < len(seq_ids) or later and not self.can_append_all(
                [seq_ids[i] for i in later]):
            self._undo_appends(seq_ids, slots, later)
            if len(slots) < len(seq_ids):
                self._get(seq_ids[len(slots)])  # raises: which id is unknown
            return None
        copies: list[KVCopy] = []
        for i in later:
            slots[i], copy = self.append_slot(seq_ids[i])
            if copy is not None:
                copies.append(copy)
        return copies, slots

    def _undo_appends(self, seq_ids: list[SeqId], slots: list[int], later: list[int]) -> None:
        """Take back the first pass of :meth:`append_slots` (``slots`` so far)."""
        skip = set(later)
        for i in range(len(slots)):
            if i not in skip:
                seq = self._seqs[seq_ids[i]]
                seq.next_slot -= 1
                seq.num_tokens -= 1
