"""The prefix cache's fast paths give exactly what the general code gives: the chained
hashes of :mod:`pagedsim.workloads.block_hashes` equal :func:`pagedsim.workloads.prompts.
block_hashes`, and the per-sequence usage of :mod:`pagedsim.memory.fast_usage`
equals :meth:`PagedAllocator.usage`'s walk over every block."""

from __future__ import annotations

import random

import pytest

from pagedsim.memory import PagedAllocator, PrefixCachingAllocator
from pagedsim.memory.block_manager import BlockManager
from pagedsim.memory.fast_usage import usage_by_block_walk, usage_by_last_blocks
from pagedsim.workloads.block_hashes import extend_chain
from pagedsim.workloads.prompts import block_hashes
from pagedsim.workloads.sharing_workloads import sharing_workload
from pagedsim.workloads.workload import Request

SHAPES = {
    # Mooncake's 512-token pieces: every 16-token block inside one piece.
    "pieces-512": Request(1, 0.0, 1000, 40, prompt_pieces=(7, 8), prompt_piece_tokens=512),
    # 10-token pieces: most 16-token blocks span two pieces (the general path).
    "pieces-10": Request(2, 0.0, 95, 30, prompt_pieces=tuple(range(10)),
                         prompt_piece_tokens=10),
    # No pieces: the prompt is the request's own, then generated tokens.
    "no-pieces": Request(3, 0.0, 70, 50),
    # A chat turn whose pieces name its output too (the next turn repeats it).
    "output-in-pieces": Request(4, 0.0, 40, 30, prompt_pieces=(1, 2, 3, 4, 5, 6, 7),
                                prompt_piece_tokens=10, output_in_pieces=True),
    # Parallel samples: the branch tells the samples' outputs apart.
    "samples": Request(5, 0.0, 33, 40, n=3, prompt_pieces=(9, 9, 9), prompt_piece_tokens=16),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("block_size", [1, 3, 16, 64])
@pytest.mark.parametrize("branch", [0, 5])
def test_extend_chain_equals_block_hashes(name: str, block_size: int, branch: int) -> None:
    r = SHAPES[name]
    total = r.prompt_len + r.output_len
    want = block_hashes(r, block_size, total, branch)
    got: list[int] = []
    extend_chain(r, block_size, branch, got, len(want))
    assert got == want
    # Extending a chain already started gives the same hashes as computing it at once.
    part = want[: len(want) // 3]
    extend_chain(r, block_size, branch, part, len(want))
    assert part == want


def test_extend_chain_on_a_sharing_workload() -> None:
    for r in sharing_workload("multi-turn", 30, seed=1):
        want = block_hashes(r, 16, r.prompt_len + r.output_len)
        got: list[int] = []
        extend_chain(r, 16, 0, got, len(want))
        assert got == want


def _random_walk(alloc: BlockManager, rng: random.Random, steps: int) -> None:
    """Allocate, fork, append and free at random, with prompts that share content, so
    the pool holds shared full blocks (hits) and shared partial last blocks (forks)."""
    live: list[int] = []
    next_id = 0
    for _ in range(steps):
        op = rng.random()
        if op < 0.3 or not live:
            next_id += 1
            r = Request(next_id, 0.0, rng.randint(1, 48), 20,
                        prompt_pieces=(rng.randint(0, 2), rng.randint(0, 2), next_id),
                        prompt_piece_tokens=16)
            final = r.prompt_len + r.output_len
            if alloc.allocate_group([next_id], r.prompt_len, final, block_hashes=r):
                live.append(next_id)
        elif op < 0.45:
            next_id += 1
            alloc.fork(rng.choice(live), next_id)
            live.append(next_id)
        elif op < 0.85:
            s = rng.choice(live)
            if alloc.can_append_all([s]):
                alloc.append_slot(s)
        else:
            alloc.free(live.pop(rng.randrange(len(live))))
        if alloc.kind == "prefix-cache":
            alloc.check_invariants()
        usage = alloc.usage()
        walked = BlockManager.usage(alloc)
        assert (usage.token_slots, usage.reserved_slots, usage.internal_frag_slots,
                usage.physical_blocks, usage.logical_blocks) == (
            walked.token_slots, walked.reserved_slots, walked.internal_frag_slots,
            walked.physical_blocks, walked.logical_blocks)


@pytest.mark.parametrize("seed", range(4))
def test_prefix_cache_usage_equals_the_block_walk(seed: int) -> None:
    alloc = PrefixCachingAllocator(64, 16)
    _random_walk(alloc, random.Random(seed), 400)
    alloc.check_invariants()


def test_usage_by_last_blocks_on_a_paged_pool_with_forks() -> None:
    a = PagedAllocator(32, 4)
    a.allocate(1, 10, 20)
    a.fork(1, 2)
    a.fork(1, 3)
    a.append_slot(2)  # 2 copies the shared last block; 1 and 3 still share it
    a.allocate(4, 8, 9)
    assert a.num_shared_blocks > 0
    fast = usage_by_last_blocks(a.seqs, a.refs.counts, a.block_size,
                                a.num_used_blocks, a.usage().logical_blocks)
    walked = usage_by_block_walk(a.seqs, a.refs.counts, a.block_size,
                                 a.num_used_blocks, a.usage().logical_blocks)
    assert fast == walked == a.usage()


def test_can_append_all_of_one_sequence_matches_the_general_count() -> None:
    a = PrefixCachingAllocator(4, 4)
    a.allocate(1, 4, 10)
    a.fork(1, 2)
    a.allocate(3, 6, 10)
    for seq_ids in ([1], [2], [3], [1, 2], [1, 2, 3]):
        assert a.can_append_all(seq_ids) == (a.append_blocks_needed(seq_ids)
                                             <= a.num_free_blocks)
    with pytest.raises(ValueError, match="unknown sequence id 9"):
        a.can_append_all([9])


def test_a_duplicate_takes_over_when_the_first_copy_is_evicted() -> None:
    """v1 keeps duplicates: a prompt of exactly two full blocks computes its second block
    again (last-token rule), so two blocks hold that content; evicting the one lookups
    find leaves the other to be found."""
    a = PrefixCachingAllocator(8, 4)
    two = Request(1, 0.0, 8, 4, prompt_pieces=(5, 6), prompt_piece_tokens=4)
    three = Request(3, 0.0, 12, 4, prompt_pieces=(5, 6, 7), prompt_piece_tokens=4)
    assert a.allocate_group([1], 8, 12, block_hashes=two)
    assert a.allocate_group([2], 8, 12, block_hashes=two)
    first, dup = a.block_table(1)[1], a.block_table(2)[1]
    assert first != dup and a.block_hash(first) == a.block_hash(dup) is not None
    a.check_invariants()
    a.free(1)  # ``first`` joins the free queue, behind the never-used blocks
    assert a.lookup_prefix(three, 12, 3) == 8
    a.allocate(9, 4 * (a.num_free_blocks - a.num_cached_blocks))  # every never-used block
    a.allocate(10, 4)  # the next block out of the queue is ``first``: evicted
    assert a.block_table(10) == [first] and a.block_hash(first) is None
    a.check_invariants()
    assert a.lookup_prefix(three, 12, 3) == 8  # found through the duplicate
    a.free(2)
    a.allocate(11, 4)  # evicts block 1 of request 2's table, the chain's tail
    a.check_invariants()
