"""The token / reserved / internal-fragmentation split of a paged pool in one visit per
sequence (:func:`usage_by_block_walk`, the rule itself, gives the same numbers by visiting
every block; the invariant checks hold one against the other).

A prefix cache nearly always has shared blocks (every hit is one), and a Mooncake-sized
pool holds tens of thousands of blocks, so walking them all at every simulated step
dominated a run. Two facts make the walk unnecessary:

* every block of a block table but the last is full (a table has exactly
  ``ceil(num_tokens / block_size)`` blocks): it holds ``block_size`` tokens now and
  will hold no more, so it is ``block_size`` token slots and nothing else;
* a block is full for all its sharers or for none, since no sequence writes into a
  shared block (it copies first), so sharers agree on its fill.

So the full blocks' token slots are ``block_size`` per used physical block that is
not some sequence's partial last block, and only partial last blocks need a look (a
shared one counted once, with the largest future among its sharers, as the paged
pool's rule says).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol

from .accounting import final_tokens, split_slots
from .base import SeqId, SlotUsage


class _HasTable(Protocol):
    table: list[int]
    num_tokens: int
    final_len: int | None


def usage_by_last_blocks(seqs: Mapping[SeqId, _HasTable], ref: list[int], block_size: int,
                         physical_blocks: int, logical_blocks: int,
                         final_lens: Mapping[SeqId, int] | None = None,
                         cached_slots: int = 0, shared: bool = True) -> SlotUsage:
    """The :class:`SlotUsage` (slots) of a paged pool whose sequences ``seqs`` hold block
    tables over blocks with reference counts ``ref``; ``physical_blocks`` are the blocks
    with a reference, ``logical_blocks`` the sum of the tables' lengths. ``final_lens``
    overrides sequences' final lengths (tokens). ``shared=False`` says no block has more
    than one reference (the counts are then not read)."""
    bs = block_size
    if not shared and not final_lens:
        # Nothing shared: every token slot is one sequence's own, so the token slots are
        # the sequences' tokens, and a partial last block's reserved slots are its room
        # up to the owner's final length (split_by_last_blocks' rule, every ``ref[b] == 1``).
        token = reserved = 0
        for seq in seqs.values():
            n = seq.num_tokens
            token += n
            fill = n % bs
            if fill:
                left = seq.final_len
                if left is not None and left > n:
                    left -= n
                    room = bs - fill
                    reserved += left if left < room else room
        return SlotUsage(token_slots=token, reserved_slots=reserved,
                         internal_frag_slots=physical_blocks * bs - token - reserved,
                         physical_blocks=physical_blocks, logical_blocks=logical_blocks,
                         cached_slots=cached_slots)
    token, reserved = split_by_last_blocks(_partial_lasts(seqs, bs, final_lens or {}), ref,
                                           physical_blocks, bs)
    return SlotUsage(token_slots=token, reserved_slots=reserved,
                     internal_frag_slots=physical_blocks * bs - token - reserved,
                     physical_blocks=physical_blocks, logical_blocks=logical_blocks,
                     cached_slots=cached_slots)


def _partial_lasts(seqs: Mapping[SeqId, _HasTable], block_size: int,
                   final_lens: Mapping[SeqId, int]) -> Iterator[tuple[int, int, int]]:
    """``(block, fill, future fill)`` of each sequence's partial last block: its tokens
    in it now, and at its final length (``final_lens`` overriding the sequence's own)."""
    bs = block_size
    for seq_id, seq in seqs.items():
        n = seq.num_tokens
        fill = n % bs
        if fill:
            final = final_tokens(n, final_lens.get(seq_id, seq.final_len) if final_lens
                                 else seq.final_len)
            yield seq.table[-1], fill, min(bs, final - (n - fill))


def split_by_last_blocks(lasts: Iterable[tuple[int, int, int]], ref: list[int],
                         held_blocks: int, block_size: int) -> tuple[int, int]:
    """``(token, reserved)`` slots of ``held_blocks`` blocks with reference counts
    ``ref``, given each sequence's partial last block as ``(block, fill, future fill)``
    (:func:`_partial_lasts`): every other held block is full of tokens, and a shared
    partial block counts once, with the largest future fill among its sharers. The
    internal fragmentation is the rest of the held slots. (The hybrid manager's groups
    use it too, group by group.)"""
    token = reserved = 0
    shared_last: dict[int, tuple[int, int]] = {}  # shared partial block -> (fill, future)
    num_partial = 0  # distinct blocks that are some sequence's partial last block
    for b, fill, future in lasts:
        if ref[b] == 1:
            num_partial += 1
            token += fill
            reserved += future - fill
        else:
            old = shared_last.get(b)
            if old is None:
                num_partial += 1
            if old is None or future > old[1]:
                shared_last[b] = (fill, future)
    for fill, future in shared_last.values():
        token += fill
        reserved += future - fill
    return token + (held_blocks - num_partial) * block_size, reserved


def usage_by_block_walk(seqs: Mapping[SeqId, _HasTable], ref: list[int], block_size: int,
                        physical_blocks: int, logical_blocks: int,
                        final_lens: Mapping[SeqId, int] | None = None) -> SlotUsage:
    """The same :class:`SlotUsage` as :func:`usage_by_last_blocks`, by the rule itself: a
    visit to every block of every table. A block's future fill is what its owner(s) will
    have written into it when they finish (a sequence's final length, else taken as
    finished); a shared block counts once, with the largest future among its sharers.
    Slow; the invariant checks hold the fast count against it."""
    bs = block_size
    fl = final_lens or {}
    token = reserved = 0
    seen: dict[int, tuple[int, int]] = {}  # shared block -> (fill, future fill)
    for seq_id, seq in seqs.items():
        n = seq.num_tokens
        final = final_tokens(n, fl.get(seq_id, seq.final_len) if fl else seq.final_len)
        for j, b in enumerate(seq.table):
            fill = min(bs, n - j * bs)
            future = min(bs, final - j * bs)
            if ref[b] == 1:
                token += fill
                reserved += future - fill
            else:
                old = seen.get(b)
                if old is None or future > old[1]:
                    seen[b] = (fill, future)
    for fill, future in seen.values():
        t, r, _ = split_slots(fill, future, bs)
        token += t
        reserved += r
    return SlotUsage(token_slots=token, reserved_slots=reserved,
                     internal_frag_slots=physical_blocks * bs - token - reserved,
                     physical_blocks=physical_blocks, logical_blocks=logical_blocks)
