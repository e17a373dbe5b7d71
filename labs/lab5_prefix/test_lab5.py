"""Graders of lab 5 (prefix caching: chained block hashes and LRU eviction, vLLM v1 style).

One marker per task (``lab5_1`` ... ``lab5_4``). The graders reach your code only through
``adapters``. The worked examples are the scenarios vLLM's own prefix-caching tests check
(blocks of 16 tokens), as pagedsim's ``tests/memory/test_prefix_cache.py`` runs them on
``pagedsim.memory.PrefixCachingAllocator``; their block ids and counts are what that
allocator gives for the same calls. The request streams' numbers were computed once by
serving the same stream with :class:`Oracle` (pagedsim's ``PrefixCachingAllocator``
behind the same calls), see :func:`serve`. The state machine compares your cache with
that oracle after every call.

Task-local: task 5.4's tests run your cache with task 5.3's ``lookup`` done as the handout
says (:class:`Task54Cache`), so that breaking the last-token rule costs points in 5.3 only.
"""

from __future__ import annotations

import itertools
import os
import random
from collections import Counter
from collections.abc import Sequence

import adapters
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from pagedsim.labs.counting import CountedBlock, comparisons, cpu_seconds, list_scan_seconds
from pagedsim.memory import PrefixCachingAllocator
from pagedsim.workloads.workload import Request

# Derandomized: every grading run tries the same examples. A failure is not shrunk to a
# minimal example unless LAB_SHRINK=1 (shrinking can take a minute; graders take seconds).
PHASES = tuple(Phase) if os.environ.get("LAB_SHRINK") == "1" else (Phase.explicit,
                                                                     Phase.generate)
MACHINE = settings(max_examples=20, stateful_step_count=25, deadline=None, derandomize=True,
                   database=None, phases=PHASES, suppress_health_check=list(HealthCheck))
OOM = adapters.OutOfMemoryError
BS = 16


def lookup_as_the_handout_says(cache: adapters.LabCache):
    """Task 5.3's ``lookup``, done here on your cache's state (its ``cached`` map, with
    your task 5.1 hashes) instead of by your ``lookup``."""
    def lookup(tokens: Sequence[int]) -> list[int]:
        most = max(len(tokens) - 1, 0) // cache.block_size
        cached = cache.lab.cached
        hits: list[int] = []
        for h in adapters.block_hashes(tokens, cache.block_size)[:most]:
            blocks = cached.get(h)
            if not blocks:
                break
            hits.append(blocks[0])
        return hits
    return lookup


class Task54Cache(adapters.LabCache):
    """Your cache, as task 5.4's tests see it: its ``lookup`` (task 5.3's, which your
    ``allocate`` calls too) is :func:`lookup_as_the_handout_says`, so that a mistake in
    ``lookup`` (the last-token rule) costs points in task 5.3 only."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self.lab.lookup = lookup_as_the_handout_says(self)


@pytest.fixture(autouse=True)
def _task_54_looks_up_as_the_handout_says(request: pytest.FixtureRequest,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("lab5_4") is not None:
        monkeypatch.setattr(adapters, "LabCache", Task54Cache)


def piece(p: int) -> list[int]:
    """One block's worth of tokens named ``p``: ids ``16 p .. 16 p + 15``."""
    return [p * BS + i for i in range(BS)]


def toks(*pieces: int, length: int | None = None) -> list[int]:
    """The pieces' tokens one after the other, cut to ``length``."""
    out = [t for p in pieces for t in piece(p)]
    return out if length is None else out[:length]


# ======================================================= lab5_1: chained block hashes
@pytest.mark.lab5_1
def test_one_hash_per_full_block():
    t = toks(10, 11, 12, 13, length=3 * BS + 5)
    assert len(adapters.block_hashes(t, BS)) == 3  # the partial fourth block has none
    assert [len(adapters.block_hashes(t[:n], BS)) for n in (0, 1, 15, 16, 17, 32)] == \
        [0, 0, 0, 1, 1, 2]
    assert len(adapters.block_hashes(t, 1)) == len(t)
    assert len(adapters.block_hashes(t, 4)) == len(t) // 4
    assert all(isinstance(h, int) for h in adapters.block_hashes(t, 4))


@pytest.mark.lab5_1
def test_equal_prefixes_equal_hashes():
    t1 = toks(10, 11, 12, 13, length=3 * BS + 5)
    t2 = toks(10, 11, 12, 14, length=3 * BS + 9)
    h1, h2 = adapters.block_hashes(t1, BS), adapters.block_hashes(t2, BS)
    assert h1 == h2 and len(set(h1)) == 3
    longer = adapters.block_hashes(toks(10, 11, 12, 13, 14), BS)
    assert longer[:3] == h1 and longer[3] not in h1  # tokens after a block change nothing
    assert adapters.block_hashes(list(t1), BS) == h1  # the same tokens, the same names


@pytest.mark.lab5_1
def test_a_hash_names_the_whole_prefix():
    h1 = adapters.block_hashes(toks(10, 11, 12), BS)
    h2 = adapters.block_hashes(toks(99, 11, 12), BS)  # blocks 1 and 2 equal, block 0 not
    assert all(a != b for a, b in zip(h1, h2, strict=True))
    same = adapters.block_hashes(toks(7, 7, 7), BS)  # three equal blocks, three prefixes
    assert len(set(same)) == 3
    t = toks(10, 11, 12)
    t[BS + 3] += 1  # one token of block 1 changed: blocks 1 and 2 renamed, block 0 not
    h3 = adapters.block_hashes(t, BS)
    assert h3[0] == h1[0] and h3[1] != h1[1] and h3[2] != h1[2]


@pytest.mark.lab5_1
def test_block_hashes_chain_hash_block():
    t = [3, 1, 4, 1, 5, 9, 2, 6, 5]
    h = adapters.block_hashes(t, 4)
    assert h[0] == adapters.hash_block(0, [3, 1, 4, 1])  # ROOT_HASH = 0 is the first parent
    assert h[1] == adapters.hash_block(h[0], [5, 9, 2, 6])


# ============================================== lab5_2: the free queue and eviction
@pytest.mark.lab5_2
def test_free_queue_order():
    q = adapters.LabFreeQueue(range(5))
    assert q.order() == [0, 1, 2, 3, 4] and len(q) == 5
    assert q.popleft() == 0 and q.popleft() == 1
    q.append(0)  # freed now: to the tail
    assert q.order() == [2, 3, 4, 0]
    q.remove(3)  # hit: out of the middle
    assert q.order() == [2, 4, 0] and len(q) == 3
    assert 4 in q and 3 not in q and 1 not in q
    assert [q.popleft() for _ in range(3)] == [2, 4, 0]
    with pytest.raises(OOM):
        q.popleft()
    assert len(q) == 0


@pytest.mark.lab5_2
def test_free_queue_remove_and_append_take_constant_time():
    # Counted, not timed (a time limit depends on the machine): 400 removals from the
    # middle of a 2,000-block queue and as many appends, with block ids that count the
    # comparisons they take part in. A dict-backed queue needs at most one per call; a
    # list scans to the block (about 1,000 per removal here: 400,000 in all).
    n, k = 2_000, 200
    q = adapters.LabFreeQueue([CountedBlock(b) for b in range(n)])
    before = comparisons()
    for b in range(n // 2 - k, n // 2 + k):
        q.remove(CountedBlock(b))
    for b in range(n // 2 - k, n // 2 + k):
        q.append(CountedBlock(b))
    made = comparisons() - before
    assert len(q) == n and q.popleft() == 0
    assert made <= 4 * 4 * k, (f"{4 * k:,} removes and appends made {made:,} comparisons "
                               f"of block ids ({made / (4 * k):,.0f} per call): not O(1)")
    # The count above is kept where your code runs; the CPU time your code's processes use
    # (any it starts included) is counted by the operating system. Removing the last 200
    # blocks of a queue of 500,000 (and appending them again) must cost it far less than
    # the 200 list scans of 500,000 blocks (measured here, on this machine) that a
    # list-backed queue makes.
    n, k = 500_000, 200
    q = adapters.LabFreeQueue(range(n))
    scans = list_scan_seconds(n, 20) * k / 20
    before = cpu_seconds()
    for b in range(n - k, n):
        q.remove(b)
    for b in range(n - k, n):
        q.append(b)
    ok = len(q) == n and q.popleft() == 0  # the queue's answers, before the time is read
    after = cpu_seconds()
    if before is not None and after is not None:  # None: not Linux (the count stands)
        spent = after - before
        assert spent <= scans / 4, (
            f"{2 * k} removes and appends at the end of a {n:,}-block queue took your code "
            f"{spent:.2f} s of CPU; {k} list scans of the queue take {scans:.2f} s here: "
            "not O(1)")
    assert ok


@pytest.mark.lab5_2
def test_take_and_reuse_blocks():
    cache = adapters.LabCache(4, BS)
    assert cache.free_queue() == [0, 1, 2, 3] and cache.ref_counts() == [0, 0, 0, 0]
    assert cache.take_block() == 0 and cache.ref_count(0) == 1
    cache.reuse_block(0)  # held already: one more reference, nothing leaves the queue
    assert cache.ref_count(0) == 2 and cache.free_queue() == [1, 2, 3]
    cache.reuse_block(2)  # nobody held it: it leaves the queue from the middle
    assert cache.ref_count(2) == 1 and cache.free_queue() == [1, 3]
    assert cache.take_block() == 1 and cache.take_block() == 3
    with pytest.raises(OOM):
        cache.take_block()
    assert cache.evictions == 0 and cache.hash_map() == {}


@pytest.mark.lab5_2
def test_eviction_drops_the_map_entry():
    cache = adapters.LabCache(8, BS)
    r1, r2 = toks(10, 11, 12), toks(20, 21)
    cache.allocate(1, r1)  # blocks 0, 1, 2
    cache.allocate(2, r2)  # blocks 3, 4
    h1 = adapters.block_hashes(r1, BS)
    cache.free(1)
    cache.free(2)
    assert cache.evictions == 0 and cache.hash_map()[h1[2]] == [2]
    # 3 never-used blocks, then r1's tail: the only cached block evicted
    cache.allocate(3, toks(30, 31, 32, 33))
    assert cache.block_table(3) == [5, 6, 7, 2] and cache.evictions == 1
    assert h1[2] not in cache.hash_map()
    assert cache.block_hash(2) == adapters.block_hashes(toks(30, 31, 32, 33), BS)[3]
    assert cache.hash_map()[h1[0]] == [0] and cache.hash_map()[h1[1]] == [1]
    # r1's chain is found up to where it was evicted, not into block 2's new content
    assert cache.lookup(r1 + [0]) == 2 * BS
    assert cache.lookup_blocks(r1 + [0]) == [0, 1]


@pytest.mark.lab5_2
def test_a_held_block_is_never_evicted():
    cache = adapters.LabCache(4, BS)
    cache.allocate(1, toks(10, 11))  # holds blocks 0 and 1
    cache.allocate(2, toks(20))  # block 2
    cache.free(2)  # 1 cached block (2), 1 never used (3)
    assert cache.free_queue() == [3, 2] and cache.cached_blocks() == [2]
    assert cache.allocate(3, toks(30, 31)) == 0  # takes 3, then evicts 2
    assert cache.block_table(3) == [3, 2] and cache.evictions == 1
    before = cache.snapshot()
    with pytest.raises(OOM):
        cache.allocate(4, toks(40))  # nothing in the queue: held blocks are not evicted
    assert cache.snapshot() == before
    assert cache.block_table(1) == [0, 1] and cache.ref_counts() == [1, 1, 1, 1]


@pytest.mark.lab5_2
def test_a_hit_leaves_the_queue_without_eviction():
    cache = adapters.LabCache(8, BS)
    cache.allocate(1, toks(10, 11, 12))
    cache.allocate(2, toks(20, 21))
    cache.free(1)
    cache.free(2)  # queue: 5 6 7 | 2 1 0 | 4 3
    assert cache.allocate(3, toks(20, 21, 22, length=2 * BS + 1)) == 2 * BS
    assert cache.block_table(3) == [3, 4, 5]
    assert cache.free_queue() == [6, 7, 2, 1, 0] and cache.evictions == 0
    assert cache.ref_count(3) == 1 and cache.block_hash(3) is not None


# ======================================== lab5_3: lookup and all-or-nothing admission
@pytest.mark.lab5_3
def test_two_requests_share_a_three_block_prefix():
    cache = adapters.LabCache(16, BS)
    r1 = toks(10, 11, 12, 13, length=3 * BS + 5)
    r2 = toks(10, 11, 12, 14, length=3 * BS + 9)
    assert cache.allocate(1, r1) == 0
    assert cache.lookup(r2) == 3 * BS
    free_before = len(cache.free_queue())
    assert cache.allocate(2, r2) == 3 * BS
    t1, t2 = cache.block_table(1), cache.block_table(2)
    assert t1 == [0, 1, 2, 3] and t2 == [0, 1, 2, 4]
    assert [cache.ref_count(b) for b in t2] == [2, 2, 2, 1]
    assert free_before - len(cache.free_queue()) == 1  # only its own last block


@pytest.mark.lab5_3
def test_after_both_free_a_third_hits_all_three():
    cache = adapters.LabCache(16, BS)
    cache.allocate(1, toks(10, 11, 12, 13, length=3 * BS + 5))
    cache.allocate(2, toks(10, 11, 12, 14, length=3 * BS + 9))
    cache.free(1)
    cache.free(2)
    assert sorted(cache.cached_blocks()) == [0, 1, 2]  # the partial blocks 3, 4 are not
    assert cache.ref_counts() == [0] * 16
    assert cache.allocate(3, toks(10, 11, 12, 15, length=3 * BS + 2)) == 3 * BS
    assert cache.block_table(3) == [0, 1, 2, 5]
    assert cache.cached_blocks() == [] and cache.evictions == 0


@pytest.mark.lab5_3
def test_last_token_rule_a_prompt_of_exactly_three_cached_blocks_hits_two():
    cache = adapters.LabCache(16, BS)
    r = toks(10, 11, 12)
    cache.allocate(1, r)
    cache.free(1)
    got = cache.lookup(r)
    assert got == 2 * BS, (
        f"lookup of a prompt of exactly 3 cached blocks gives {got} tokens, expected "
        f"{2 * BS}: the last-token rule, the prompt's last token is always computed (its "
        "logits give the first output token), so lookup hits whole blocks of at most "
        "len(tokens) - 1 tokens")
    assert cache.lookup(r + [7]) == 3 * BS
    assert cache.lookup(r[:2 * BS + 1]) == 2 * BS and cache.lookup(r[:2 * BS]) == BS
    assert cache.lookup(r[:1]) == 0 and cache.lookup([]) == 0
    assert cache.allocate(2, r) == 2 * BS
    # The third block is computed again into a new block: vLLM keeps both copies named
    h = adapters.block_hashes(r, BS)
    assert cache.block_table(2) == [0, 1, 3]
    assert cache.hash_map()[h[2]] == [2, 3]
    assert cache.lookup_blocks(r + [7]) == [0, 1, 2]  # the older copy comes first


@pytest.mark.lab5_3
def test_lookup_changes_nothing():
    cache = adapters.LabCache(6, BS)
    cache.allocate(1, toks(10, 11, 12))
    cache.free(1)
    cache.allocate(2, toks(10, 20))
    before = cache.snapshot()
    assert cache.lookup(toks(10, 11, 12, 13)) == 3 * BS
    assert cache.lookup(toks(10, 20, length=BS + 1)) == BS
    assert cache.snapshot() == before


@pytest.mark.lab5_3
def test_an_admission_that_does_not_fit_changes_nothing():
    cache = adapters.LabCache(6, BS)
    cache.allocate(1, toks(10, 11, 12))
    cache.free(1)  # 3 cached, 3 never used
    cache.allocate(2, toks(20))  # takes block 3
    before = cache.snapshot()
    big = toks(10, 11, 12, 13, 14, 15, 16)  # hits 3 (in the queue), needs 4 new: 7 > 5
    with pytest.raises(OOM):
        cache.allocate(3, big)
    assert cache.snapshot() == before  # no reference count, no eviction, no table
    with pytest.raises(ValueError):
        cache.allocate(2, toks(30))  # a duplicate id
    with pytest.raises(ValueError):
        cache.allocate(4, [])  # an empty prompt
    assert cache.snapshot() == before
    assert cache.allocate(3, toks(10, 11, 12, 13, 14, length=5 * BS - 1)) == 3 * BS
    assert cache.block_table(3) == [0, 1, 2, 4, 5] and cache.free_queue() == []


@pytest.mark.lab5_3
def test_hits_leave_the_queue_before_new_blocks_are_taken():
    cache = adapters.LabCache(4, BS)
    cache.allocate(1, toks(10, 11))  # 0, 1
    cache.allocate(2, toks(20, 21))  # 2, 3
    cache.free(1)
    cache.free(2)  # queue: 1 0 3 2, r1's blocks at the head
    assert cache.allocate(3, toks(10, 11, 12)) == 2 * BS
    # r1's blocks were hit (taken out first); the new block is the next head, r2's tail
    assert cache.block_table(3) == [0, 1, 3] and cache.free_queue() == [2]
    assert cache.evictions == 1 and cache.ref_counts() == [1, 1, 0, 1]


# ====================================== lab5_4: free tail first; decode-filled blocks
@pytest.mark.lab5_4
def test_free_queue_least_recently_freed_first_and_tail_before_head():
    cache = adapters.LabCache(8, BS)
    r1, r2 = toks(10, 11, 12), toks(20, 21)
    cache.allocate(1, r1)
    cache.allocate(2, r2)
    assert cache.free_queue() == [5, 6, 7]
    cache.free(1)  # freed first: its tail, then its head
    cache.free(2)
    assert cache.free_queue() == [5, 6, 7, 2, 1, 0, 4, 3]
    assert cache.cached_blocks() == [2, 1, 0, 4, 3]
    cache.allocate(3, toks(30, 31, 32, 33))  # never-used blocks, then r1's tail
    assert cache.block_table(3) == [5, 6, 7, 2] and cache.evictions == 1
    assert cache.lookup(r1 + [0]) == 2 * BS  # r1's head is still reachable
    cache.allocate(4, toks(40, 41))  # evicts r1's block 1, then its head
    assert cache.block_table(4) == [1, 0] and cache.evictions == 3
    assert cache.lookup(r1 + [0]) == 0 and cache.lookup(r2 + [0]) == 2 * BS


@pytest.mark.lab5_4
def test_shared_blocks_return_with_their_last_user_and_partial_blocks_unnamed():
    cache = adapters.LabCache(8, BS)
    cache.allocate(1, toks(10, 11, 12, length=2 * BS + 3))  # 0, 1, 2 (2 partial)
    cache.allocate(2, toks(10, 11, 13, length=2 * BS + 7))  # 0, 1, 3
    cache.free(1)
    assert cache.free_queue() == [4, 5, 6, 7, 2] and cache.ref_counts()[:4] == [1, 1, 0, 1]
    assert cache.cached_blocks() == [] and cache.block_hash(2) is None
    cache.free(2)
    assert cache.free_queue() == [4, 5, 6, 7, 2, 3, 1, 0]
    assert cache.cached_blocks() == [1, 0]
    with pytest.raises(ValueError):
        cache.free(2)  # freed already


@pytest.mark.lab5_4
def test_decode_filled_blocks_are_cached():
    cache = adapters.LabCache(8, BS)
    prompt = toks(10)
    out = [900 + i for i in range(BS + 3)]
    assert cache.allocate(7, prompt) == 0
    slots = [cache.append_token(7, t) for t in out]
    assert slots == list(range(BS, 2 * BS)) + [2 * BS, 2 * BS + 1, 2 * BS + 2]
    assert cache.block_table(7) == [0, 1, 2]
    full = prompt + out
    assert cache.seq_hashes(7) == adapters.block_hashes(full, BS)
    assert cache.block_hash(1) == adapters.block_hashes(full, BS)[1]
    assert cache.block_hash(2) is None
    cache.free(7)
    assert cache.cached_blocks() == [1, 0]
    # the same sequence recomputed (after a preemption) finds both blocks
    assert cache.lookup(full) == 2 * BS
    other = prompt + [901 + i for i in range(BS + 3)]  # another sample's output
    assert cache.lookup(other) == BS
    assert cache.allocate(8, full) == 2 * BS and cache.block_table(8) == [0, 1, 3]


@pytest.mark.lab5_4
def test_the_next_turn_of_a_chat_hits_the_previous_output():
    cache = adapters.LabCache(8, BS)
    turn1 = toks(1, 2, length=BS + 5)
    cache.allocate(1, turn1)
    reply = [500 + i for i in range(2 * BS)]
    for t in reply:
        cache.append_token(1, t)
    cache.free(1)
    turn2 = turn1 + reply + toks(3, length=4)
    assert cache.lookup(turn2) == 3 * BS  # prompt and reply, in whole blocks
    assert cache.allocate(2, turn2) == 3 * BS


@pytest.mark.lab5_4
def test_append_without_a_free_block_changes_nothing():
    cache = adapters.LabCache(2, BS)
    cache.allocate(1, toks(10, 11, length=2 * BS - 1))
    assert cache.append_token(1, 5) == 2 * BS - 1  # fills block 1
    before = cache.snapshot()
    with pytest.raises(OOM):
        cache.append_token(1, 6)
    with pytest.raises(ValueError):
        cache.append_token(9, 6)
    assert cache.snapshot() == before


# ============================================ the oracle and the request streams
class Oracle:
    """pagedsim's ``PrefixCachingAllocator`` driven with token lists, with the calls of
    ``adapters.LabCache``: a prompt becomes a ``Request`` whose ``prompt_pieces`` are its
    token ids (``prompt_piece_tokens=1``) and, so that decode-filled blocks are named by
    their tokens too, the pieces go on with the tokens it will generate (``future``)."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.alloc = PrefixCachingAllocator(num_blocks, block_size)
        self.block_size = block_size
        self._ids = itertools.count()

    def _request(self, tokens: Sequence[int], future: Sequence[int] = ()) -> Request:
        return Request(next(self._ids), 0.0, len(tokens), max(len(future), 1),
                       prompt_pieces=tuple(tokens) + tuple(future), prompt_piece_tokens=1,
                       output_in_pieces=bool(future))

    def allocate(self, seq_id: int, tokens: Sequence[int], future: Sequence[int] = ()) -> int:
        if not self.alloc.allocate_group([seq_id], len(tokens),
                                         block_hashes=self._request(tokens, future)):
            raise OOM(f"sequence {seq_id} does not fit")
        return self.alloc.prefix_hit_tokens(seq_id)

    def lookup(self, tokens: list[int]) -> int:
        return self.alloc.lookup_prefix(self._request(tokens), len(tokens), 0) if tokens else 0

    def append_token(self, seq_id: int, token: int) -> int:
        return self.alloc.append_slot(seq_id)[0]  # the token is in the request's pieces

    def free(self, seq_id: int) -> None:
        self.alloc.free(seq_id)

    def free_queue(self) -> list[int]:
        return self.alloc.snapshot()["free_blocks"]

    def cached_blocks(self) -> list[int]:
        return self.alloc.snapshot()["cached_blocks"]

    def ref_counts(self) -> list[int]:
        return [self.alloc.ref_count(b) for b in range(self.alloc.num_blocks)]

    def block_table(self, seq_id: int) -> list[int]:
        return self.alloc.block_table(seq_id)

    @property
    def evictions(self) -> int:
        return self.alloc.evicted_blocks


def chat_stream(seed: int = 5, num_requests: int = 60) -> list[tuple[list[int], list[int]]]:
    """``(prompt, output)`` token lists: three system prompts (16 to 80 tokens), chats
    that start from one of them, and next turns whose prompt repeats the previous turn's
    prompt and output before 1 to 32 new user tokens; a chat longer than 168 tokens starts
    over (so a request holds at most 224 tokens, 14 blocks of 16)."""
    rng = random.Random(seed)
    systems = [[rng.randrange(5000) for _ in range(rng.randrange(16, 81))] for _ in range(3)]
    chats: list[list[int]] = []
    out = []
    for _ in range(num_requests):
        if chats and rng.random() < 0.5:
            k = rng.randrange(len(chats))
        else:
            k = len(chats)
            chats.append(list(rng.choice(systems)))
        if len(chats[k]) > 168:
            chats[k] = list(rng.choice(systems))
        prompt = chats[k] + [rng.randrange(5000) for _ in range(rng.randrange(1, 33))]
        output = [rng.randrange(5000) for _ in range(rng.randrange(1, 25))]
        chats[k] = prompt + output
        out.append((prompt, output))
    return out


def serve(cache, stream, decode: bool) -> tuple[int, int, int]:
    """Serve ``stream`` in order, two requests at a time: admit request i (its prompt),
    append its output tokens when ``decode``, then free request i - 1. Returns prompt
    tokens, prompt tokens served from the cache, and blocks evicted."""
    queries = hits = 0
    for i, (prompt, output) in enumerate(stream):
        if isinstance(cache, Oracle):
            hits += cache.allocate(i, prompt, output if decode else [])
        else:
            hits += cache.allocate(i, prompt)
        queries += len(prompt)
        if decode:
            for t in output:
                cache.append_token(i, t)
        if i:
            cache.free(i - 1)
    return queries, hits, cache.evictions


# The numbers below were computed once with serve(Oracle(num_blocks, 16), chat_stream(),
# decode): pagedsim's own PrefixCachingAllocator. Without decode and with no eviction (512
# blocks), the hit count also equals pagedsim.experiments.cache_replay.replay's with an unbounded
# cache and blocks of 16 (each prompt as a Request whose prompt_pieces are its tokens).
@pytest.mark.lab5_3
@pytest.mark.parametrize("num_blocks, expected", [
    (512, (4544, 2880, 0)),  # hit rate 63%; nothing evicted
    (24, (4544, 2528, 78)),  # 56%: evictions lose hits
])
def test_chat_stream_prompts_only(num_blocks, expected):
    assert serve(adapters.LabCache(num_blocks, BS), chat_stream(), decode=False) == expected


@pytest.mark.lab5_4
@pytest.mark.parametrize("num_blocks, expected", [
    (512, (4544, 3280, 0)),  # 72%: next turns also hit the previous turns' outputs
    (32, (4544, 2688, 117)),  # 59%
])
def test_chat_stream_with_decode(num_blocks, expected):
    assert serve(adapters.LabCache(num_blocks, BS), chat_stream(), decode=True) == expected


# ================================================== the cache against the oracle
class CacheMachine(RuleBasedStateMachine):
    """Random admissions (prompts that repeat parts of earlier sequences), appends, frees
    and lookups on your cache and on the oracle; after every call the two must agree on
    every block (tables, reference counts, the free queue in order, which blocks are
    cached, evictions), and your state must be consistent on its own."""

    def __init__(self) -> None:
        super().__init__()
        self.cache = None

    @initialize(block_size=st.sampled_from([1, 2, 4]), num_blocks=st.integers(1, 12))
    def setup(self, block_size, num_blocks):
        self.cache = adapters.LabCache(num_blocks, block_size)
        self.oracle = Oracle(num_blocks, block_size)
        self.future: dict[int, list[int]] = {}  # live sequence -> tokens it will generate
        self.seen: list[list[int]] = [[]]  # sequences so far, prompts are cut from them
        self.ids = itertools.count()

    def _tokens(self, data, at_least: int) -> list[int]:
        """An earlier sequence's prefix and a few new tokens (ids 0 to 2: blocks repeat)."""
        base = data.draw(st.sampled_from(self.seen), label="earlier")
        cut = data.draw(st.integers(0, len(base)), label="cut")
        new = data.draw(st.lists(st.integers(0, 2), min_size=max(at_least - cut, 0),
                                 max_size=6), label="new")
        return base[:cut] + new

    @rule(data=st.data())
    def allocate(self, data):
        prompt = self._tokens(data, 1)
        future = data.draw(st.lists(st.integers(0, 2), max_size=6), label="future")
        seq = next(self.ids)
        before = self.cache.snapshot()
        try:
            ref = self.oracle.allocate(seq, prompt, future)
        except OOM:
            with pytest.raises(OOM):
                self.cache.allocate(seq, prompt)
            assert self.cache.snapshot() == before, "a failed admission changed the cache"
            return
        assert self.cache.allocate(seq, prompt) == ref, "hit tokens differ"
        self.future[seq] = list(future)
        self.seen.append(prompt + future)

    @precondition(lambda self: any(self.future.values()))
    @rule(data=st.data())
    def append(self, data):
        seq = data.draw(st.sampled_from(sorted(s for s, f in self.future.items() if f)))
        token = self.future[seq].pop(0)
        before = self.cache.snapshot()
        try:
            ref = self.oracle.append_token(seq, token)
        except OOM:
            with pytest.raises(OOM):
                self.cache.append_token(seq, token)
            assert self.cache.snapshot() == before, "a failed append changed the cache"
            self.future[seq].insert(0, token)  # to be generated later, after a free
            return
        assert self.cache.append_token(seq, token) == ref, "slots differ"

    @precondition(lambda self: bool(self.future))
    @rule(data=st.data())
    def free(self, data):
        seq = data.draw(st.sampled_from(sorted(self.future)))
        del self.future[seq]
        self.oracle.free(seq)
        self.cache.free(seq)

    @rule(data=st.data())
    def lookup(self, data):
        tokens = self._tokens(data, 0)
        before = self.cache.snapshot()
        assert self.cache.lookup(tokens) == self.oracle.lookup(tokens)
        assert self.cache.snapshot() == before, "a lookup changed the cache"

    @invariant()
    def same_blocks_as_the_oracle(self):
        if self.cache is None:
            return
        c, o = self.cache, self.oracle
        assert c.free_queue() == o.free_queue(), "free queue (head first)"
        assert c.cached_blocks() == o.cached_blocks(), "cached blocks"
        assert c.ref_counts() == o.ref_counts(), "reference counts"
        assert c.evictions == o.evictions, "evictions"
        assert sorted(c.seq_ids()) == sorted(self.future)
        for seq in self.future:
            assert c.block_table(seq) == o.block_table(seq), f"block table of {seq}"

    @invariant()
    def consistent_on_its_own(self):
        if self.cache is None:
            return
        c = self.cache
        queue, refs = c.free_queue(), c.ref_counts()
        assert len(set(queue)) == len(queue) and all(refs[b] == 0 for b in queue)
        used = sum(r > 0 for r in refs)
        cached = len(c.cached_blocks())
        assert (len(queue) - cached) + cached + used == c.num_blocks, \
            "free + cached + used != total"
        tables = {s: c.block_table(s) for s in c.seq_ids()}
        held = Counter(b for t in tables.values() for b in t)
        assert refs == [held[b] for b in range(c.num_blocks)], "ref counts != table refs"
        named = 0
        for h, blocks in c.hash_map().items():
            assert blocks and len(set(blocks)) == len(blocks)
            assert all(c.block_hash(b) == h for b in blocks), f"map entry {h}"
            named += len(blocks)
        assert named == sum(c.block_hash(b) is not None for b in range(c.num_blocks))
        for s, table in tables.items():
            hashes = adapters.block_hashes(c.seq_tokens(s), c.block_size)
            assert c.seq_hashes(s) == hashes
            assert [c.block_hash(b) for b in table[:len(hashes)]] == hashes


@pytest.mark.lab5_4
def test_cache_state_machine():
    run_state_machine_as_test(CacheMachine, settings=MACHINE)
