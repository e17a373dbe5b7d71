"""What each picture shows, computed from an allocator snapshot (no drawing here).

The pictures colour every slot by the same rules as :func:`pagedsim.account`, so the
counts here equal the account's (a test checks it); keeping the rules in one small
pure module lets tests check them without looking at pixels.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from ..accounting import CATEGORIES


def as_snapshot(allocator_or_snapshot: Any) -> dict:
    """A private deep copy of ``allocator.snapshot()`` (or of a snapshot dict already taken)."""
    snap = allocator_or_snapshot
    if hasattr(snap, "snapshot"):
        snap = snap.snapshot()
    if not isinstance(snap, Mapping) or snap.get("kind") not in ("paged", "contiguous"):
        raise TypeError(
            "expected a PagedAllocator, a ContiguousAllocator or one's .snapshot() dict, "
            f"got {type(allocator_or_snapshot).__name__}"
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

    @property
    def is_free(self) -> bool:
        return not self.owners


def _final(num_tokens: int, final_len: int | None) -> int:
    # As the allocators' usage(): a sequence with no (or a stale) final length is finished.
    return final_len if final_len is not None and final_len > num_tokens else num_tokens


def paged_blocks(snap: Mapping) -> list[BlockState]:
    """Every physical block of a paged snapshot, indexed by block id.

    A shared block's fill and future fill come from the sharer with the largest future
    fill, exactly as :meth:`PagedAllocator.usage` counts it.
    """
    bs = snap["block_size"]
    owners: dict[int, list[Hashable]] = {}
    fills: dict[int, tuple[int, int]] = {}  # block -> (fill, future fill), slots
    for sid, seq in snap["seqs"].items():
        n, final = seq["num_tokens"], _final(seq["num_tokens"], seq["final_len"])
        for j, b in enumerate(seq["block_table"]):
            owners.setdefault(b, []).append(sid)
            fill, future = min(bs, n - j * bs), min(bs, final - j * bs)
            old = fills.get(b)
            if old is None or future > old[1]:
                fills[b] = (fill, future)
    out = []
    for b in range(snap["num_blocks"]):
        fill, future = fills.get(b, (0, 0))
        internal = bs - future if b in owners else 0
        out.append(BlockState(b, snap["ref_counts"][b], tuple(owners.get(b, ())),
                              fill, future - fill, internal))
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
        n, size = r["num_tokens"], r["size"]
        filled_at_end = min(_final(n, r["final_len"]), size)
        pos = r["start"]
        for cat, length in (("token", n), ("reserved", filled_at_end - n),
                            ("internal_frag", size - filled_at_end)):
            if length > 0:
                segs.append(Segment(pos, length, cat, sid))
                pos += length
    for start, size in snap["holes"]:
        small = next_need_slots is not None and next_need_slots > 0 and size < next_need_slots
        segs.append(Segment(start, size, "external_frag" if small else "free", None))
    return sorted(segs, key=lambda s: s.start)


def capacity_slots(snap: Mapping) -> int:
    """Pool size (slots) of a snapshot of either kind."""
    if snap["kind"] == "paged":
        return snap["num_blocks"] * snap["block_size"]
    return snap["capacity_slots"]


def category_counts(snap: Mapping, next_need_slots: int | None = None) -> dict[str, int]:
    """The five categories (slots) of a snapshot; equals :func:`pagedsim.account`."""
    counts = dict.fromkeys(CATEGORIES, 0)
    if snap["kind"] == "paged":
        bs = snap["block_size"]
        for blk in paged_blocks(snap):
            if blk.is_free:
                counts["free"] += bs
            else:
                counts["token"] += blk.token
                counts["reserved"] += blk.reserved
                counts["internal_frag"] += blk.internal_frag
    else:
        for seg in arena_segments(snap, next_need_slots):
            counts[seg.category] += seg.size
    return counts
