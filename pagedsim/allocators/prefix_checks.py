"""Consistency checks of a :class:`~pagedsim.allocators.prefix_cache.PrefixCachingAllocator`
beyond the paged pool's (what ``check_invariants`` asserts; the property tests call it
after every operation)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from .paged import PagedAllocator

if TYPE_CHECKING:  # pragma: no cover
    from .prefix_cache import PrefixCachingAllocator


def check_prefix_cache(alloc: PrefixCachingAllocator) -> None:
    """Assert that the hash map, the block names, the free queue's cached count, every
    sequence's hashes and the fast usage agree (``AssertionError`` naming the first
    disagreement)."""
    bs = alloc.block_size
    walked = replace(PagedAllocator.usage(alloc), cached_slots=alloc.num_cached_blocks * bs)
    assert alloc.usage() == walked, f"fast usage {alloc.usage()} != {walked}"
    hashes = alloc._hash
    for h, first in alloc._cached.items():
        for b in (first, *alloc._dups.get(h, ())):
            assert hashes[b] == h, f"block {b} is in the map under a hash it does not hold"
    for h, dups in alloc._dups.items():
        assert dups and h in alloc._cached, f"duplicates of hash {h} but no first block"
    named = len(alloc._cached) + sum(len(v) for v in alloc._dups.values())
    assert named == sum(h is not None for h in hashes), "a named block is not in the map"
    assert alloc.num_cached_blocks == sum(hashes[b] is not None for b in alloc._free)
    for seq_id, seq in alloc._seqs.items():
        content = getattr(seq, "content", None)
        if content is None:
            continue
        full = seq.num_tokens // bs
        assert len(seq.hashes) == full, (  # type: ignore[attr-defined]
            f"sequence {seq_id!r}: {len(seq.hashes)} hashes for {full} full blocks")
        for j in range(full):
            b = seq.table[j]
            assert hashes[b] == seq.hashes[j], (  # type: ignore[attr-defined]
                f"sequence {seq_id!r}: full block {j} (block {b}) is named "
                f"{hashes[b]}, not {seq.hashes[j]}")
