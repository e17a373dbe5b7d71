"""One KV-cache group's manager on its own: the window is its one rule (full groups keep
every block, sliding ones give up what falls behind), over a pool shared with others."""

from __future__ import annotations

from collections import Counter

from pagedsim.memory.block_refs import BlockRefs
from pagedsim.memory.free_list import FreeList
from pagedsim.memory.hybrid_group_manager import GroupManager
from pagedsim.memory.hybrid_groups import NULL_BLOCK, GroupSpec


def _pair(num_blocks: int = 32, block_size: int = 4, window: int = 6):
    refs = BlockRefs(FreeList(num_blocks, block_size))
    full = GroupManager(0, GroupSpec("full"), refs, block_size)
    slide = GroupManager(1, GroupSpec("sliding", window), refs, block_size)
    return refs, full, slide


def _grow(m: GroupManager, seq_id: int, start: int, end: int) -> None:
    for n in range(start, end):
        m.remove_skipped_blocks(seq_id, n)
        m.append(seq_id, n)


def test_a_full_group_keeps_every_block_a_sliding_one_only_its_window():
    refs, full, slide = _pair()
    for m in (full, slide):
        m.allocate("a", 2)  # 8 prompt tokens
        _grow(m, "a", 8, 20)  # 12 decodes: 20 tokens, 5 blocks
    assert full.tables["a"] == [b for b in full.tables["a"] if b != NULL_BLOCK]
    assert (full.num_blocks, full.num_entries, full.dropped_entries) == (5, 5, 0)
    # The query at 19 reads 14..19: blocks 0-2 (tokens 0-11) fell behind the window.
    assert slide.tables["a"][:3] == [NULL_BLOCK] * 3 and slide.first["a"] == 3
    assert (slide.num_blocks, slide.num_entries) == (2, 2)
    assert slide.dropped_entries == slide.freed_blocks == 3
    assert slide.null_entries() == 3 and full.null_entries() == 0
    assert refs.pool.get_num_free_blocks() == 32 - 7  # the groups share one pool


def test_a_block_another_table_holds_is_dropped_but_not_freed():
    _, _, slide = _pair(window=5)
    slide.allocate("a", 3)  # 12 tokens: growing at 12, the query reads 8..12
    slide.fork("a", "b")
    assert slide.num_blocks == 3 and slide.num_entries == 6
    assert slide.returned("b", 12, None) == 0  # "a" still holds blocks 0-1
    assert slide.remove_skipped_blocks("b", 12) == 0
    assert slide.dropped_entries == 2 and slide.freed_blocks == 0
    dropped: Counter[int] = Counter()
    assert slide.returned("a", 12, dropped) == 2  # "b" let go: "a" is the last holder
    assert slide.remove_skipped_blocks("a", 12) == 2 and slide.num_blocks == 1


def test_an_append_into_a_shared_partial_block_copies_it_in_that_group():
    refs, full, _ = _pair()
    full.allocate("a", 1)  # 1..4 tokens: one block
    full.fork("a", "b")
    block, copy = full.append("b", 3)  # token 3 of a 3-token sequence: partial, shared
    assert copy is not None and block != full.tables["a"][0]
    assert (copy.src_slot, copy.dst_slot, copy.num_slots) == (
        full.tables["a"][0] * 4, block * 4, 3)
    assert full.num_blocks == 2 and refs.num_shared == 0
    table = full.pop("b")
    refs.release(table)
    full.released(table)
    assert full.num_blocks == 1 and full.num_entries == 1
