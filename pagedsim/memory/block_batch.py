"""A step's decodes in one call: :meth:`BatchAppend.append_slots`, one token for each of
many sequences, all or nothing (or as many as fit, in order).

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

    def append_slots(self, seq_ids: list[SeqId], as_many_as_fit: bool = False
                     ) -> tuple[list[KVCopy], list[int]] | None:
        """One :meth:`append_slot` for each of ``seq_ids`` in order, all or nothing (a
        step's decodes in one call): ``(copies, slots)``, or None and nothing changed when
        they do not all fit. ``as_many_as_fit``: in order until one does not fit; the
        slots (and copies) of those that did, which may be none.

        One pass writes every sequence with room in its private last block (it takes
        nothing from the pool, so it cannot fail) and sets the others aside; those then
        append in order, through ``append_slot``, if they find their blocks; what does not
        happen is undone."""
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
        if len(slots) < len(seq_ids):
            self._undo_appends(seq_ids, slots, later)
            self._get(seq_ids[len(slots)])  # raises: which id is unknown
        if not as_many_as_fit and later and not self.can_append_all(
                [seq_ids[i] for i in later]):
            self._undo_appends(seq_ids, slots, later)
            return None
        copies: list[KVCopy] = []
        for i in later:
            # One by one, each as it would find the pool in order (the appends written
            # above took nothing from it).
            if as_many_as_fit and not self.can_append_all([seq_ids[i]]):
                self._undo_appends(seq_ids, slots, later, after=i)
                return copies, slots[:i]
            slots[i], copy = self.append_slot(seq_ids[i])
            if copy is not None:
                copies.append(copy)
        return copies, slots

    def _undo_appends(self, seq_ids: list[SeqId], slots: list[int], later: list[int],
                      after: int = -1) -> None:
        """Take back the first pass of :meth:`append_slots` (``slots`` so far), at the
        positions past ``after``."""
        skip = set(later)
        for i in range(after + 1, len(slots)):
            if i not in skip:
                seq = self._seqs[seq_ids[i]]
                seq.next_slot -= 1
                seq.num_tokens -= 1
