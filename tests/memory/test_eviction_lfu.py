"""LFU eviction for vLLM-style prefix caching (``prefix-cache-lfu``): a prefix that hits
brought back outlives content freed later that nobody reused; LRU evicts it first. The
stateful machines of test_allocator_state.py cover the scheme as every other."""

from __future__ import annotations

import random

from memory_helpers import BS, admit, req

from pagedsim.memory.eviction_lfu import LFU
from pagedsim.memory.schemes import make_allocator


def _story(scheme: str) -> tuple[int, int]:
    """A system prompt (2 blocks) behind two questions, the second a hit on the first's
    prompt blocks; then a one-off document (3 blocks) freed after them; then a request
    that needs every never-used block and 4 more: which cached blocks go? Returns the
    blocks of the prompt and of the document's first two that still hit afterwards."""
    a = make_allocator(scheme, 8 * BS, BS)
    prompt, document = req(0, (1, 2), output_len=1), req(1, (7, 8), output_len=1)
    for sid in (1, 2):  # the second admission hits the first one's blocks
        assert admit(a, sid, req(sid, (1, 2, 3 + sid), output_len=1))
        a.free(sid)
    assert admit(a, 3, req(3, (7, 8, 9), output_len=1))
    a.free(3)
    never_used = a.num_free_blocks - a.num_cached_blocks
    assert admit(a, 4, req(4, tuple(range(100, 104 + never_used)), output_len=1))
    a.check_invariants()
    return (a.lookup_prefix(prompt, 3 * BS, 5) // BS,
            a.lookup_prefix(document, 3 * BS, 6) // BS)


def test_lfu_keeps_the_reused_prompt_where_lru_evicts_it():
    # LRU hands out the least recently freed: both questions' tails, then the prompt
    # (freed before the document), tail first; the document keeps both blocks.
    assert _story("prefix-cache") == (0, 2)
    # LFU: the unreused blocks first (the tails, then the document's, tail first); the
    # prompt, reused once, stays whole.
    assert _story("prefix-cache-lfu") == (2, 1)


def test_lfu_order_is_uses_then_freed_order_and_a_hit_takes_a_block_out():
    p = LFU()
    p.freed([0, 1, 2, 3])
    p.touched([1])  # a hit: out of the queue, one use more
    p.freed([1])
    assert p.victims({}, 2) == [0, 2]  # 0 uses, least recently freed first
    p.freed([0])
    assert p.victims({}, 3) == [3, 0, 1]  # block 1's one use puts it last
    assert p.victims({}, 1) == []


def test_lfu_stale_entries_are_bounded():
    p, rng = LFU(), random.Random(0)
    free = set(range(64))
    p.freed(sorted(free))
    for _ in range(5_000):  # hits and frees of the same blocks leave stale entries
        b = rng.choice(sorted(free))
        p.touched([b])
        p.freed([b])
    assert len(p.heap) <= 4 * len(p.freed_at) + 64
    assert sorted(p.victims({}, 64)) == list(range(64))
