"""Many appends in one call: a prefill chunk's tokens of one sequence
(:meth:`BatchAppend.extend`); a step's decodes, :meth:`BatchAppend.append_slots`, one token
for each of many sequences, all or nothing (or as many as fit, in order); and a run of
such steps, with the pool's usage after each (:meth:`BatchAppend.append_steps`).

The simulator's steps are mostly decodes: every running sequence appends one token, and
nearly every one of them has room in its private last block (15 appends in 16, with
blocks of 16 and no prefix cache). Asking
:meth:`~.block_manager.BlockManager.append_slot` one by one costs a call, a check and a
tuple per token; this writes the common case in one loop over the batch and leaves the
rest (a fresh block, a copy-on-write, a block a prefix cache names) to ``append_slot``
itself, in the same order, so the result is the same appends'.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import OutOfMemoryError
from ..validate import check_int
from .base import KVCopy, SeqId, distinct_ids


class StepUsage(NamedTuple):
    """The pool after one step of :meth:`BatchAppend.append_steps` (slots and blocks, as
    :class:`~.base.SlotUsage` counts them, and the free slots)."""

    token_slots: int
    reserved_slots: int
    internal_frag_slots: int
    physical_blocks: int
    logical_blocks: int
    cached_slots: int
    free_slots: int


def _reserved_slots(num_tokens: int, final_len: int | None, block_size: int) -> int:
    """Reserved slots of a private partial last block: its room up to the final length
    (the rule of :func:`~.fast_usage.usage_by_last_blocks`)."""
    fill = num_tokens % block_size
    if not fill or final_len is None or final_len <= num_tokens:
        return 0
    return min(final_len - num_tokens, block_size - fill)


class BatchAppend:
    """Many appends of a :class:`~.block_manager.BlockManager` in one call."""

    def extend(self, seq_id: SeqId, num_tokens: int) -> list[KVCopy]:
        """Room for ``num_tokens`` more tokens of one sequence (a prefill chunk); the
        copies to carry out first. ``OutOfMemoryError`` and nothing changed when it does
        not fit."""
        if not self.can_extend(seq_id, num_tokens):
            raise OutOfMemoryError(f"no room for {num_tokens} more tokens of sequence "
                                   f"{seq_id!r} ({self.pool.get_num_free_blocks()} free "
                                   "blocks)")
        return [c for _ in range(num_tokens) if (c := self.append_slot(seq_id)[1])]

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
        try:  # (inline: once a step; a try costs nothing until it catches)
            repeats = len(set(seq_ids)) != len(seq_ids)  # a second append is another count
        except TypeError:
            repeats = True
        if repeats:
            distinct_ids(seq_ids)  # raises, saying why
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

    def append_steps(self, seq_ids: list[SeqId], max_steps: int) -> list[StepUsage] | None:
        """Up to ``max_steps`` steps that each append one token to every one of
        ``seq_ids`` (each step what :meth:`append_slots` does), stopping before the first
        step that does not fit whole; the pool's usage after each step done (none, maybe).
        None, and nothing changed, where the usage needs a look at every sequence after
        every step: a prefix cache, vAttention's regions, a shared block. Also never past
        a sequence's final length (the usage's reserved slots change their rule there).

        Why it is cheap: most appends write into room of the sequence's private last
        block, and the usage then changes by the same amount each step (one token slot
        more, and one reserved slot less, per sequence). So only the appends that take the
        general path (a fresh block) are made one by one, at their step and in order; the
        others are counted, and written into each sequence once, when it next takes the
        general path or the run ends."""
        max_steps = check_int("max_steps", max_steps, minimum=0)
        if self.cache is not None or self.regions is not None or self.refs.num_shared:
            return None
        distinct_ids(seq_ids)  # refused: a repeat, or an unhashable id
        try:
            seqs = [self._seqs[s] for s in seq_ids]
        except (KeyError, TypeError):
            seqs = [self._get(s) for s in seq_ids]  # raises: which id is unknown
        bs = self.block_size
        # One pass: the steps the finals allow, the step of each one's next general-path
        # append, and (nothing being shared) the usage's token and reserved slots.
        steps, counted, token, reserved = max_steps, 0, 0, 0  # counted: reserved shrinks
        due: dict[int, list[int]] = {}  # step -> positions whose append is general then
        for p, seq in enumerate(seqs):
            n, final = seq.num_tokens, seq.final_len
            token += n
            if final is not None:
                if final - n < steps:
                    steps = final - n
                counted += 1
                fill = n % bs
                if fill and final > n:
                    left, room = final - n, bs - fill
                    reserved += left if left < room else room
            room = seq.end_slot - seq.next_slot  # fast appends before the general path
            k = room + 1 if room > 0 else 1
            bucket = due.get(k)
            if bucket is None:
                due[k] = [p]
            else:
                bucket.append(p)
        if steps <= 0:
            return []
        if len(self._seqs) != len(seqs):  # others hold blocks too: the usage counts them
            usage = self.usage()
            token, reserved = usage.token_slots, usage.reserved_slots
        pool = self.pool
        upto = [0] * len(seqs)  # the step each sequence's fields are written up to
        rows: list[StepUsage] = []
        for k in range(1, steps + 1):
            general = due.pop(k, None)
            shrunk = counted
            if general is not None:
                general.sort()  # in order, as append_slots makes them
                for p in general:  # written up to the step before
                    seq, behind = seqs[p], k - 1 - upto[p]
                    seq.next_slot += behind
                    seq.num_tokens += behind
                    upto[p] = k - 1
                if not self.can_append_all([seq_ids[p] for p in general]):
                    break
                for p in general:
                    seq = seqs[p]
                    before = _reserved_slots(seq.num_tokens, seq.final_len, bs)
                    self.append_slot(seq_ids[p])
                    upto[p] = k
                    reserved += _reserved_slots(seq.num_tokens, seq.final_len, bs) - before
                    shrunk -= seq.final_len is not None
                    room = seq.end_slot - seq.next_slot
                    due.setdefault(k + 1 + (room if room > 0 else 0), []).append(p)
            token += len(seqs)
            reserved -= shrunk
            free = pool.get_num_free_blocks()
            physical = self.num_blocks - free
            cached = pool.num_cached_blocks
            rows.append(StepUsage(token, reserved, physical * bs - token - reserved, physical,
                                  self._num_logical_blocks, cached * bs, (free - cached) * bs))
        done = len(rows)
        for p, seq in enumerate(seqs):
            behind = done - upto[p]
            if behind > 0:
                seq.next_slot += behind
                seq.num_tokens += behind
        return rows
