"""What each picture shows, computed from an allocator snapshot (no drawing here).

The pictures colour every slot with the accounting's own rules
(:func:`pagedsim.memory.accounting.final_tokens` and
:func:`~pagedsim.memory.accounting.split_slots`,
which every allocator's ``usage()`` uses too), so the counts here equal the account's.
A snapshot's ``view`` says which layout applies: ``"blocks"`` (a pool of equal blocks
or pages with block tables) or ``"arena"`` (regions and holes in a linear arena).
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from ..memory.accounting import CATEGORIES, final_tokens, split_slots

#: What a snapshot's ``view`` may say (as :data:`pagedsim.memory.schemes.VIEWS`).
VIEWS = ("blocks", "arena")


def as_snapshot(allocator_or_snapshot: Any) -> dict:
    """A private deep copy of ``allocator.snapshot()`` (or of a snapshot dict already taken)."""
    snap = allocator_or_snapshot
    if hasattr(snap, "snapshot"):
        snap = snap.snapshot()
    if not isinstance(snap, Mapping) or snap.get("view") not in VIEWS:
        raise TypeError(
            "expected an allocator or its .snapshot() dict (with a 'view' of "
            f"{' or '.join(VIEWS)}), got {type(allocator_or_snapshot).__name__}"
        )
    return copy.deepcopy(dict(snap))


@dataclass(frozen=True, slots=True)
class BlockState:
    """One physical block of a paged pool, its slots split by category (slots)."""

    block: int
    ref_count: int
    owners: tuple[Hashable, ...]  # sequences whose block table holds it, snapshot order
    token: int  # filled slots (offsets 0 .. token-1)
    reserved: int  # next offsets, which an owner will still fill
    internal_frag: int  # the remaining offsets, never to be filled
    cached: bool = False  # nobody's, but a prefix cache keeps its K/V for reuse

    @property
    def is_free(self) -> bool:
        """No sequence holds it (free, or cached)."""
        return not self.owners


def paged_blocks(snap: Mapping) -> list[BlockState]:
    """Every physical block of a paged snapshot, indexed by block id.

    A shared block's fill and future fill come from the sharer with the largest future
    fill, exactly as :meth:`PagedAllocator.usage` counts it.
    """
    bs = snap["block_size"]
    owners: dict[int, list[Hashable]] = {}
    fills: dict[int, tuple[int, int]] = {}  # block -> (fill, future fill), slots
    for sid, seq in snap["seqs"].items():
        n, final = seq["num_tokens"], final_tokens(seq["num_tokens"], seq["final_len"])
        for j, b in enumerate(seq["block_table"]):
            owners.setdefault(b, []).append(sid)
            fill, future = min(bs, n - j * bs), min(bs, final - j * bs)
            old = fills.get(b)
            if old is None or future > old[1]:
                fills[b] = (fill, future)
    cached = set(snap.get("cached_blocks", ()))
    out = []
    for b in range(snap["num_blocks"]):
        if b in owners:
            token, reserved, internal = split_slots(*fills[b], bs)
        else:
            token = reserved = internal = 0
        out.append(BlockState(b, snap["ref_counts"][b], tuple(owners.get(b, ())),
                              token, reserved, internal, b in cached))
    return out


@dataclass(frozen=True, slots=True)
class Segment:
    """A run ``[start, start + size)`` of arena slots in one category."""

    start: int
    size: int
    category: str
    seq_id: Hashable | None  # owner, None for holes


def arena_segments(snap: Mapping, next_need_slots: int | None = None) -> list[Segment]:
    """A contiguous snapshot as category runs, by address.

    A region is ``token`` (its first ``num_tokens`` slots), then ``reserved`` (up to
    ``min(final_len, size)``), then ``internal_frag``; a hole smaller than
    ``next_need_slots`` is ``external_frag``, any other hole ``free``.
    """
    segs: list[Segment] = []
    for sid, r in snap["seqs"].items():
        parts = split_slots(r["num_tokens"], final_tokens(r["num_tokens"], r["final_len"]),
                            r["size"])
        pos = r["start"]
        for cat, length in zip(("token", "reserved", "internal_frag"), parts, strict=True):
            if length > 0:
                segs.append(Segment(pos, length, cat, sid))
                pos += length
    for start, size in snap["holes"]:
        small = next_need_slots is not None and next_need_slots > 0 and size < next_need_slots
        segs.append(Segment(start, size, "external_frag" if small else "free", None))
    return sorted(segs, key=lambda s: s.start)


def capacity_slots(snap: Mapping) -> int:
    """Pool size (slots) of a snapshot of either kind."""
    if snap["view"] == "blocks":
        return snap["num_blocks"] * snap["block_size"]
    return snap["capacity_slots"]


def category_counts(snap: Mapping, next_need_slots: int | None = None) -> dict[str, int]:
    """The six categories (slots) of a snapshot; equals :func:`pagedsim.account`."""
    counts = dict.fromkeys(CATEGORIES, 0)
    if snap["view"] == "blocks":
        bs = snap["block_size"]
        for blk in paged_blocks(snap):
            if blk.is_free:
                counts["cached" if blk.cached else "free"] += bs
            else:
                counts["token"] += blk.token
                counts["reserved"] += blk.reserved
                counts["internal_frag"] += blk.internal_frag
    else:
        for seg in arena_segments(snap, next_need_slots):
            counts[seg.category] += seg.size
    return counts
