"""The prefix-cache scheme in the scenarios vLLM's own prefix-caching tests check, in
behaviour terms (blocks of 16 tokens), plus the accounting's sixth category."""

from __future__ import annotations

import pytest
from memory_helpers import BS, admit, req

from pagedsim import account
from pagedsim.memory import PrefixCachingAllocator
from pagedsim.workloads.block_hashes import BlockHashes
from pagedsim.workloads.prompts import block_hashes
from pagedsim.workloads.workload import Request


def test_two_requests_share_a_three_block_prefix():
    a = PrefixCachingAllocator(16, BS)
    r1 = req(1, (10, 11, 12, 13), prompt_len=3 * BS + 5)
    r2 = req(2, (10, 11, 12, 14), prompt_len=3 * BS + 9)
    assert admit(a, 1, r1)
    assert a.prefix_hit_tokens(1) == 0
    free_before = a.num_free_blocks
    assert a.lookup_prefix(r2, r2.prompt_len, 2) == 3 * BS
    assert admit(a, 2, r2)
    t1, t2 = a.block_table(1), a.block_table(2)
    assert t1[:3] == t2[:3] and t1[3] != t2[3]
    assert [a.ref_count(b) for b in t2[:3]] == [2, 2, 2]
    assert free_before - a.num_free_blocks == 1  # only its own tail block
    assert a.prefix_hit_tokens(2) == 3 * BS
    a.check_invariants()


def test_after_both_free_a_third_hits_all_three():
    a = PrefixCachingAllocator(16, BS)
    r1, r2 = req(1, (10, 11, 12, 13), 3 * BS + 5), req(2, (10, 11, 12, 14), 3 * BS + 9)
    admit(a, 1, r1)
    admit(a, 2, r2)
    shared = a.block_table(1)[:3]
    a.free(1)
    a.free(2)
    assert a.num_cached_blocks == 3 and account(a).cached == 3 * BS
    r3 = req(3, (10, 11, 12, 15), 3 * BS + 2)
    assert admit(a, 3, r3)
    assert a.block_table(3)[:3] == shared
    assert a.prefix_hit_tokens(3) == 3 * BS
    assert a.num_cached_blocks == 0
    a.check_invariants()


def test_last_token_rule_a_prompt_of_exactly_three_cached_blocks_hits_two():
    a = PrefixCachingAllocator(16, BS)
    r1 = req(1, (10, 11, 12))
    admit(a, 1, r1)
    a.free(1)
    r2 = req(2, (10, 11, 12))  # the same 48 tokens
    assert a.lookup_prefix(r2, r2.prompt_len, 2) == 2 * BS
    admit(a, 2, r2)
    assert a.prefix_hit_tokens(2) == 2 * BS
    a.check_invariants()


def test_free_queue_least_recently_freed_first_and_tail_before_head():
    a = PrefixCachingAllocator(8, BS)
    r1 = req(1, (10, 11, 12))  # blocks 0, 1, 2
    r2 = req(2, (20, 21))  # blocks 3, 4
    admit(a, 1, r1)
    admit(a, 2, r2)
    t1, t2 = a.block_table(1), a.block_table(2)
    a.free(1)  # freed first: its tail, then its head
    a.free(2)
    snap = a.snapshot()
    assert snap["free_blocks"][:3] == [5, 6, 7]  # never used: at the head since the start
    assert snap["free_blocks"][3:] == [t1[2], t1[1], t1[0], t2[1], t2[0]]
    # 3 never-used blocks and then r1's tail go to a request that shares nothing
    admit(a, 3, req(3, (30, 31, 32, 33)))
    assert a.block_table(3) == [5, 6, 7, t1[2]]
    assert a.evicted_blocks == 1
    assert a.block_hash(t1[0]) is not None and a.block_hash(t1[2]) is not None  # re-named
    # r1's head is still reachable: a lookup of r1 stops where the chain was evicted
    assert a.lookup_prefix(r1, r1.prompt_len + 1, 4) == 2 * BS
    a.check_invariants()


def test_a_block_a_running_request_holds_is_never_evicted():
    a = PrefixCachingAllocator(4, BS)
    admit(a, 1, req(1, (10, 11)))  # holds 2 blocks
    admit(a, 2, req(2, (20,)))
    a.free(2)  # 1 cached block, 1 never used
    held = set(a.block_table(1))
    assert admit(a, 3, req(3, (30, 31)))  # takes the never-used and evicts the cached one
    assert held.isdisjoint(a.block_table(3))
    assert not admit(a, 4, req(4, (40,)))  # nothing left: running blocks are not evicted
    assert set(a.block_table(1)) == held
    a.check_invariants()


def test_an_admission_that_does_not_fit_changes_nothing():
    a = PrefixCachingAllocator(6, BS)
    admit(a, 1, req(1, (10, 11, 12)))
    a.free(1)  # 3 cached
    admit(a, 2, req(2, (20,)))
    before = a.snapshot()
    evicted = a.evicted_blocks
    big = req(3, (10, 11, 12, 13, 14, 15, 16))  # hits 3, needs 4 more; 5 in the queue
    assert not admit(a, 3, big)
    assert a.snapshot() == before and a.evicted_blocks == evicted
    with pytest.raises(Exception, match="needs"):
        a.allocate(3, big.prompt_len, block_hashes=big)
    assert a.snapshot() == before
    a.check_invariants()


def test_decode_filled_blocks_are_cached_and_found_by_a_recomputation():
    a = PrefixCachingAllocator(8, BS)
    r = req(1, (10,), output_len=40)
    admit(a, 7, r)
    for _ in range(BS + 3):
        a.append_slot(7)  # fills block 1 with generated tokens (branch = seq id 7)
    a.free(7)
    assert a.num_cached_blocks == 2
    # the same sequence recomputed with its generated tokens finds both blocks
    n = r.prompt_len + BS + 3
    assert a.lookup_prefix(r, n, 7) == 2 * BS
    assert a.lookup_prefix(r, n, 8) == BS  # another sample's output is not the same
    assert a.allocate_group([7], n, block_hashes=r) and a.prefix_hit_tokens(7) == 2 * BS


def test_multi_turn_outputs_in_pieces_hit_the_next_turn():
    a = PrefixCachingAllocator(8, BS)
    turn1 = Request(1, 0.0, BS, 2 * BS, prompt_pieces=(1, 2, 3), prompt_piece_tokens=BS,
                    output_in_pieces=True)
    turn2 = Request(2, 1.0, 3 * BS + 4, 4, prompt_pieces=(1, 2, 3, 4), prompt_piece_tokens=BS)
    admit(a, 1, turn1)
    for _ in range(2 * BS - 1):  # the last sampled token's K/V is never written
        a.append_slot(1)
    a.free(1)
    assert a.lookup_prefix(turn2, turn2.prompt_len, 2) == 2 * BS  # prompt + full output block


def test_dedup_switches_a_filled_block_to_the_cached_copy():
    for dedup in (False, True):
        a = PrefixCachingAllocator(8, BS, dedup=dedup)
        turn = Request(1, 0.0, 8, BS, prompt_pieces=(1, 2), prompt_piece_tokens=BS,
                       output_in_pieces=True)
        a.allocate_group([1], 8, block_hashes=turn)
        a.allocate_group([2], 8, block_hashes=turn)  # the same partial block: no hit, own block
        for _ in range(8):
            a.append_slot(1)
            last, _ = a.append_slot(2)
        assert a.num_used_blocks == (1 if dedup else 2)
        if dedup:  # seq 2's last token lands in the copy it switched to
            assert a.block_table(2) == a.block_table(1) and last // BS == a.block_table(1)[0]
            assert a.ref_count(a.block_table(1)[0]) == 2
        a.check_invariants()


def test_the_six_categories_partition_the_pool():
    a = PrefixCachingAllocator(10, BS)
    admit(a, 1, req(1, (10, 11, 12), 40))
    admit(a, 2, req(2, (10, 11, 13), 40))
    a.free(1)  # its two full blocks are still r2's; its partial block is free
    assert account(a).cached == 0
    a.free(2)
    acct = account(a)
    assert acct.cached == 2 * BS and acct.free == 8 * BS
    assert acct.token + acct.reserved + acct.internal_frag + acct.cached + acct.free \
        + acct.external_frag == 10 * BS
    assert sum(acct.shares().values()) == pytest.approx(1.0)


def test_chain_hashes_ignore_nothing_before_them():
    r1 = req(1, (10, 11, 12))
    r2 = req(2, (99, 11, 12))  # same blocks 1 and 2, different parent
    h1, h2 = block_hashes(r1, BS), block_hashes(r2, BS)
    assert h1[0] != h2[0] and h1[1] != h2[1] and h1[2] != h2[2]



def test_an_admission_after_a_lookup_sees_evictions_made_in_between():
    """The plan reuses the lookup's hits only while no block was named or evicted since:
    here another admission evicts the third of the three blocks looked up."""
    a = PrefixCachingAllocator(6, BS)
    admit(a, 1, req(1, (10, 11, 12, 13)))
    a.free(1)  # free queue: the two never used, then its blocks tail first
    h2 = BlockHashes(req(2, (10, 11, 12, 14)), BS)
    assert a.lookup_prefix(h2, 4 * BS, 2) == 3 * BS
    assert admit(a, 3, req(3, (20, 21, 22, 23)))  # evicts the blocks of 13 and 12
    a.free(3)
    assert a.allocate_group([2], 4 * BS, 4 * BS, block_hashes=h2)
    assert a.prefix_hit_tokens(2) == 2 * BS
    assert a.block_table(2)[:2] == [0, 1]
    a.check_invariants()
