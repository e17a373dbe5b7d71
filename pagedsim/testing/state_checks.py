"""Consistency checks of an allocator's state, given as plain data.

Lab adapters call these from ``check_invariants`` with what a student's allocator
exposes, so that :mod:`pagedsim.testing.allocator_machine` can check a lab allocator
the way it checks pagedsim's own (whose ``check_invariants`` look at their private
state). Each raises ``AssertionError`` naming the first inconsistency.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence


def check_arena(capacity_slots: int, used: Iterable[tuple[int, int]],
                holes: Sequence[tuple[int, int]]) -> None:
    """A linear arena of ``capacity_slots`` slots: the regions in use (``(start, size)``)
    and the free ``holes`` (``(start, size)``, sorted by start) cover every slot exactly
    once, and no two holes touch (they would have been merged)."""
    assert list(holes) == sorted(holes), f"holes are not sorted by start: {list(holes)}"
    pos = 0
    for start, size in sorted([*used, *holes]):
        assert size > 0, f"empty span at slot {start}"
        assert start == pos, f"gap or overlap at slot {start} (expected {pos})"
        pos = start + size
    assert pos == capacity_slots, f"regions and holes end at {pos}, capacity {capacity_slots}"
    for (s1, n1), (s2, _) in zip(holes, holes[1:], strict=False):
        assert s1 + n1 < s2, f"adjacent holes at {s1} and {s2} were not merged"


def check_blocks(num_blocks: int, block_size: int, free_blocks: Sequence[int],
                 ref_counts: Sequence[int], block_tables: Mapping[Hashable, Sequence[int]],
                 seq_lens: Mapping[Hashable, int]) -> None:
    """A paged pool of ``num_blocks`` blocks of ``block_size`` slots: every block is free
    xor referenced, its reference count equals the number of block-table entries that
    point at it, and each sequence of ``n`` tokens has ``ceil(n / block_size)`` blocks."""
    assert len(ref_counts) == num_blocks, f"{len(ref_counts)} ref counts for {num_blocks} blocks"
    assert len(set(free_blocks)) == len(free_blocks), "a block is on the free list twice"
    assert all(0 <= b < num_blocks for b in free_blocks), "the free list holds an unknown block"
    assert set(block_tables) == set(seq_lens), "block tables and lengths name other sequences"
    counts = Counter(b for table in block_tables.values() for b in table)
    free = set(free_blocks)
    for b in range(num_blocks):
        assert (b in free) != (counts[b] > 0), f"block {b} is not either free or referenced"
        assert ref_counts[b] == counts[b], (
            f"block {b}: ref count {ref_counts[b]} != {counts[b]} block-table entries")
    for seq_id, table in block_tables.items():
        n = seq_lens[seq_id]
        assert len(table) == -(-n // block_size), (
            f"sequence {seq_id!r}: {len(table)} blocks for {n} tokens")
