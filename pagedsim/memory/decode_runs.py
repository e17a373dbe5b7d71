"""Runs of decode steps at once: the simulator's shortcut for stretches in which every
running sequence only decodes (:mod:`pagedsim.engine.steady` finds them).

A step of decodes appends one token to every running sequence, and nearly every one of
those appends writes into room of the sequence's private last block (15 appends in 16,
with blocks of 16 and no prefix cache). Over a run of such steps the pool's usage then
changes by the same amount each step: one token slot more, and one reserved slot less, per
sequence. So :func:`append_steps` makes one by one, at their step and in order, only the
appends that take a fresh block (through :meth:`~.block_manager.BlockManager.append_slot`),
counts the others, and writes them into each sequence once
(:meth:`~.block_manager.BlockManager.append_in_place`), when it next takes a fresh block or
the run ends. The result is the plain path's, step by step: ``tests/memory/test_decode_steps.py``
and ``tests/engine/test_steady.py`` compare them.
"""

from __future__ import annotations

from typing import NamedTuple

from ..validate import check_int
from .base import SeqId, distinct_ids
from .block_manager import BlockManager


class StepUsage(NamedTuple):
    """The pool after one step of :func:`append_steps` (slots and blocks, as
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


def append_steps(mgr: BlockManager, seq_ids: list[SeqId], max_steps: int
                 ) -> list[StepUsage] | None:
    """Up to ``max_steps`` steps of ``mgr`` that each append one token to every one of
    ``seq_ids`` (each step what :meth:`~.KVCacheManager.allocate_slots` does with them), stopping
    before the first step that does not fit whole; the pool's usage after each step
    done (none, maybe). None, and nothing changed, where the usage needs a look at every
    sequence after every step: a prefix cache, a shared block. Also never past
    a sequence's final length (the usage's reserved slots change their rule there).

    Why it is cheap: most appends write into room of the sequence's private last
    block, and the usage then changes by the same amount each step (one token slot
    more, and one reserved slot less, per sequence). So only the appends that take the
    general path (a fresh block) are made one by one, at their step and in order; the
    others are counted, and written into each sequence once, when it next takes the
    general path or the run ends."""
    max_steps = check_int("max_steps", max_steps, minimum=0)
    if mgr.cache is not None or mgr.refs.num_shared:
        return None
    distinct_ids(seq_ids)  # refused: a repeat, or an unhashable id
    try:
        seqs = [mgr.seqs[s] for s in seq_ids]
    except (KeyError, TypeError):
        for s in seq_ids:
            mgr.seq_len(s)  # raises, naming the unknown id
        raise
    bs = mgr.block_size
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
    if len(mgr.seqs) != len(seqs):  # others hold blocks too: the usage counts them
        usage = mgr.usage()
        token, reserved = usage.token_slots, usage.reserved_slots
    pool = mgr.pool
    upto = [0] * len(seqs)  # the step each sequence's fields are written up to
    rows: list[StepUsage] = []
    for k in range(1, steps + 1):
        general = due.pop(k, None)
        shrunk = counted
        if general is not None:
            general.sort()  # in order, as a step's appends are made
            for p in general:  # written up to the step before
                seq, behind = seqs[p], k - 1 - upto[p]
                seq.next_slot += behind
                seq.num_tokens += behind
                upto[p] = k - 1
            if not mgr.can_append_all([seq_ids[p] for p in general]):
                break
            for p in general:
                seq = seqs[p]
                before = _reserved_slots(seq.num_tokens, seq.final_len, bs)
                mgr.append_slot(seq_ids[p])
                upto[p] = k
                reserved += _reserved_slots(seq.num_tokens, seq.final_len, bs) - before
                shrunk -= seq.final_len is not None
                room = seq.end_slot - seq.next_slot
                due.setdefault(k + 1 + (room if room > 0 else 0), []).append(p)
        token += len(seqs)
        reserved -= shrunk
        free = pool.get_num_free_blocks()
        physical = mgr.num_blocks - free
        cached = pool.num_cached_blocks
        rows.append(StepUsage(token, reserved, physical * bs - token - reserved, physical,
                              mgr.num_logical_blocks, cached * bs, (free - cached) * bs))
    done = len(rows)
    for p, seq in enumerate(seqs):
        if done > upto[p]:
            mgr.append_in_place(seq, done - upto[p])
    return rows
