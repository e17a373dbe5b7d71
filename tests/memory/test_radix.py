"""The radix scheme (SGLang's RadixAttention): vLLM's prefix-caching scenarios run on it,
the tree's own behaviour (splits, LRU leaves, lock counts along paths, de-duplication on
insert), a state machine driving both caching schemes with real prompt content, and the
``lpm`` order of the waiting queue."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from memory_helpers import BS, admit, req

from pagedsim import account
from pagedsim.engine.plan import SequenceGroup
from pagedsim.engine.scheduler import Scheduler, SchedulerConfig
from pagedsim.engine.waiting_queue import LPM_MAX_WAITING, order_waiting
from pagedsim.errors import OutOfMemoryError
from pagedsim.memory import RadixAllocator
from pagedsim.memory.accounting import CATEGORIES
from pagedsim.memory.block_manager import BlockManager
from pagedsim.memory.fast_usage import usage_by_block_walk
from pagedsim.memory.kv_cache_manager import KVCacheManager
from pagedsim.memory.schemes import make_allocator
from pagedsim.testing.allocator_machine import apply_copies
from pagedsim.workloads.prompts import block_hashes
from pagedsim.workloads.workload import Request


def tree(a: BlockManager) -> list[tuple[int, list[int], int]]:
    """The tree as (parent index, blocks, lock_ref) per node, parents first."""
    return [(n["parent"], n["blocks"], n["lock_ref"]) for n in a.snapshot()["tree"]]


def released(a: BlockManager) -> list[int]:
    """Record the blocks ``on_release`` reports, in order."""
    out: list[int] = []
    a.on_release = lambda start, n: out.extend(range(start // BS, (start + n) // BS))
    return out


# ------------------------------------------------------- vLLM's scenarios, on radix
def test_two_requests_share_a_three_block_prefix():
    a = RadixAllocator(16, BS)
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
    assert tree(a) == [(-1, t1[:3], 2)]  # r1's full pages went in at admission
    a.check_invariants()


def test_after_both_free_a_third_hits_all_three():
    a = RadixAllocator(16, BS)
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
    a = RadixAllocator(16, BS)
    r1 = req(1, (10, 11, 12))
    admit(a, 1, r1)
    a.free(1)
    r2 = req(2, (10, 11, 12))  # the same 48 tokens
    assert a.lookup_prefix(r2, r2.prompt_len, 2) == 2 * BS
    assert admit(a, 2, r2)
    assert a.prefix_hit_tokens(2) == 2 * BS
    a.check_invariants()


def test_a_block_a_running_request_holds_is_never_evicted():
    a = RadixAllocator(4, BS)
    admit(a, 1, req(1, (10, 11)))  # holds 2 blocks (both in the tree, locked)
    admit(a, 2, req(2, (20,)))
    a.free(2)  # 1 cached block, 1 never used
    held = set(a.block_table(1))
    assert admit(a, 3, req(3, (30, 31)))  # takes the never-used and evicts the cached one
    assert held.isdisjoint(a.block_table(3))
    assert a.evicted_blocks == 1
    assert not admit(a, 4, req(4, (40,)))  # nothing left: locked pages are not evicted
    assert set(a.block_table(1)) == held
    a.check_invariants()


def test_an_admission_that_does_not_fit_changes_nothing():
    a = RadixAllocator(6, BS)
    admit(a, 1, req(1, (10, 11, 12)))
    a.free(1)  # 3 cached
    admit(a, 2, req(2, (20,)))
    before = a.snapshot()  # the tree, its lock counts and times, and the clock included
    evicted = a.evicted_blocks
    big = req(3, (10, 11, 12, 13, 14, 15, 16))  # hits 3, needs 4 more; 2 free
    assert not admit(a, 3, big)
    assert a.snapshot() == before and a.evicted_blocks == evicted
    with pytest.raises(OutOfMemoryError, match="needs"):
        a.allocate(3, big.prompt_len, block_hashes=big)
    assert a.snapshot() == before
    # Cached pages that will be hit are no room for new ones: 3 hits leave 2 free blocks
    # for the 3 new ones (counting the cached pages as room too would say 5)
    assert not admit(a, 4, req(4, (10, 11, 12, 13, 14, 15)))
    assert a.snapshot() == before
    a.check_invariants()


# ------------------------------------------------------------- the tree itself
def test_a_partial_match_splits_the_node():
    a = RadixAllocator(16, BS)
    r1 = req(1, (10, 11, 12, 13, 96), 4 * BS + 1)
    admit(a, 1, r1)
    t1 = a.block_table(1)
    a.free(1)
    assert tree(a) == [(-1, t1[:4], 0)]  # one node of 4 pages, cached
    r2 = req(2, (10, 11, 20, 21, 95), 4 * BS + 1)
    assert a.lookup_prefix(r2, r2.prompt_len, 2) == 2 * BS
    assert tree(a) == [(-1, t1[:4], 0)]  # a lookup splits nothing
    assert admit(a, 2, r2)
    t2 = a.block_table(2)
    assert t2[:2] == t1[:2]
    # split after 2 pages: the head is on r2's path (locked), r1's tail is cached
    assert tree(a) == [(-1, t1[:2], 1), (0, t1[2:4], 0), (0, t2[2:4], 1)]
    a.check_invariants()


def test_lock_ref_counts_the_running_sequences_along_each_path():
    a = RadixAllocator(32, BS)
    ra, rb, rc = (req(1, (1, 2, 3, 90), 3 * BS + 1), req(2, (1, 2, 4, 91), 3 * BS + 1),
                  req(3, (1, 5, 92), 2 * BS + 1))
    for sid, r in ((1, ra), (2, rb), (3, rc)):
        assert admit(a, sid, r)
    locks = {tuple(blocks): lock for _, blocks, lock in tree(a)}
    ta, tb, tc = a.block_table(1), a.block_table(2), a.block_table(3)
    assert locks == {(ta[0],): 3, (ta[1],): 2, (ta[2],): 1, (tb[2],): 1, (tc[1],): 1}
    a.free(2)
    locks = {tuple(blocks): lock for _, blocks, lock in tree(a)}
    assert locks == {(ta[0],): 2, (ta[1],): 1, (ta[2],): 1, (tb[2],): 0, (tc[1],): 1}
    assert a.num_cached_blocks == 1
    a.fork(1, 9)  # a forked child locks its parent's path too
    assert {tuple(b): lk for _, b, lk in tree(a)}[(ta[0],)] == 3
    a.check_invariants()


def test_least_recently_used_leaf_is_evicted_first_and_a_tail_before_its_head():
    a = RadixAllocator(6, BS)
    out = released(a)
    r1, r2, r3 = (req(1, (10, 11, 97), 2 * BS + 1), req(2, (20, 98), BS + 1),
                  req(3, (30, 99), BS + 1))
    tables = {}
    for sid, r in ((1, r1), (2, r2), (3, r3)):
        admit(a, sid, r)
        tables[sid] = a.block_table(sid)
        a.free(sid)  # last used at clock ticks 2, 4 and 6
    # r1's first page again (a partial match: its node splits), then a page of its own:
    # r1's head and r4's page are used at tick 8, r1's tail keeps tick 2
    r4 = req(4, (10, 12))
    admit(a, 4, r4)
    tables[4] = a.block_table(4)
    a.free(4)
    assert a.num_free_blocks == 1 and a.num_cached_blocks == 5
    out.clear()
    assert admit(a, 5, req(5, (50, 51, 52, 53, 54)))  # 5 blocks: 1 free, 4 evicted
    # leaves by last use: r1's tail (2), r2 (4), r3 (6), r4's page (8); r1's head was
    # no leaf until its last child went, and enough was free by then
    assert out == [tables[1][1], tables[2][0], tables[3][0], tables[4][1]]
    assert a.evicted_blocks == 4
    assert a.lookup_prefix(r1, r1.prompt_len, 1) == BS  # the head is still there
    assert a.lookup_prefix(r2, r2.prompt_len, 2) == 0
    assert a.lookup_prefix(r3, r3.prompt_len, 3) == 0
    a.check_invariants()


def test_insert_on_free_deduplicates_pages_the_tree_already_holds():
    a = RadixAllocator(16, BS)
    out = released(a)
    r = req(1, (10, 11, 12, 13), 3 * BS + 4)
    assert a.allocate_group([1], BS, block_hashes=r)  # a first chunk: page 0 goes in the tree
    assert admit(a, 2, r)  # the whole prompt: hits page 0, puts pages 1 and 2 in
    assert a.prefix_hit_tokens(2) == BS
    a.extend(1, 2 * BS)  # seq 1 computes pages 1 and 2 again, privately
    t1, t2 = a.block_table(1), a.block_table(2)
    assert t1[0] == t2[0] and t1[1:3] != t2[1:3]
    out.clear()
    a.free(1)
    assert sorted(out) == sorted(t1[1:3])  # its duplicates are freed at once
    assert [n["blocks"] for n in a.snapshot()["tree"]] == [[t2[0]], t2[1:3]]
    a.check_invariants()
    a.free(2)
    assert a.num_cached_blocks == 3 and a.num_used_blocks == 0
    a.check_invariants()


def test_decode_filled_pages_go_in_at_free_and_a_recomputation_finds_them():
    a = RadixAllocator(8, BS)
    r = req(1, (10,), output_len=40)
    admit(a, 7, r)
    for _ in range(BS + 3):
        a.append_slot(7)  # fills page 1 with generated tokens (branch = seq id 7)
    assert a.num_cached_blocks == 0 and len(a.snapshot()["tree"]) == 1
    a.free(7)
    assert a.num_cached_blocks == 2
    n = r.prompt_len + BS + 3
    assert a.lookup_prefix(r, n, 7) == 2 * BS
    assert a.lookup_prefix(r, n, 8) == BS  # another sample's output is not the same
    assert a.allocate_group([7], n, block_hashes=r) and a.prefix_hit_tokens(7) == 2 * BS
    a.check_invariants()


def test_swap_out_caches_the_pages_and_swap_in_takes_fresh_blocks():
    a = RadixAllocator(8, BS)
    r = req(1, (10, 11, 12), 2 * BS + 3)
    admit(a, 1, r)
    group = a.swap_out([1])
    assert a.num_cached_blocks == 2 and 1 not in a
    assert a.can_swap_in(group)
    copies = a.swap_in(group)
    assert len(copies) == 3 and a.seq_len(1) == r.prompt_len
    assert a.prefix_hit_tokens(1) == 0
    a.check_invariants()
    a.free(1)  # its pages duplicate the cached ones: freed
    assert a.num_cached_blocks == 2 and a.num_used_blocks == 0
    a.check_invariants()


def test_the_six_categories_partition_the_pool():
    a = RadixAllocator(10, BS)
    admit(a, 1, req(1, (10, 11, 12), 40))
    admit(a, 2, req(2, (10, 11, 13), 40))
    a.free(1)  # its two full pages are still r2's; its partial page is free
    assert account(a).cached == 0
    a.free(2)
    acct = account(a)
    assert acct.cached == 2 * BS and acct.free == 8 * BS
    assert acct.token + acct.reserved + acct.internal_frag + acct.cached + acct.free \
        + acct.external_frag == 10 * BS
    assert acct.physical_blocks == 0


# ------------------------------------------- both caching schemes, with real content
class ContentMachine(RuleBasedStateMachine):
    """Requests whose prompts are a few pieces from a three-letter alphabet, so prefixes
    collide all the time, admitted (fresh, or recomputed with their generated tokens),
    grown, forked, swapped and freed in a small pool.

    Beside the allocator a model memory maps each slot to the K/V it holds: a token's
    value is ``(chained block hash of its block, position)`` for its sequence's content,
    so two tokens have equal values exactly when a prefix cache may share them. Only the
    tokens a prefill computes (after the cache hit), appends and reported copies write
    it; ``on_release`` scrubs it. A hit that served the wrong K/V, or a block evicted or
    freed while someone still reads it, shows up as a sequence reading back wrong values.

    Forked children are never admitted again: their blocks that fill after the fork are
    named by the child's own outputs (as both schemes name them), and no lookup asks for
    those.
    """

    scheme = "radix"

    @initialize(data=st.data())
    def setup(self, data):
        self.bs = data.draw(st.sampled_from([1, 2, 4]), label="block_size")
        self.pt = data.draw(st.sampled_from([2, 3, 4]), label="piece_tokens")
        capacity = data.draw(st.integers(12, 64), label="capacity_slots")
        self.alloc = make_allocator(self.scheme, capacity // self.bs * self.bs, self.bs)
        self.released: list[tuple[int, int]] = []
        self.alloc.on_release = lambda start, n: self.released.append((start, n))
        self.mem: dict[int, tuple[int, int]] = {}  # slot -> (block hash, position)
        self.expect: dict[int, list[tuple[int, int]]] = {}  # live sequence -> its values
        self.owner: dict[int, tuple[Request, bool]] = {}  # live -> (request, forked child)
        self.gone: dict[int, tuple[Request, int]] = {}  # freed, may come back: its tokens
        self.requests: list[Request] = []
        self.swapped: list[tuple[object, dict, dict]] = []
        self.next_seq, self.next_child = 0, 10_000

    # ----------------------------------------------------------------- helpers
    def values(self, r: Request, branch: int, start: int, end: int) -> list[tuple[int, int]]:
        hashes = block_hashes(r, self.bs, -(-end // self.bs) * self.bs, branch)
        return [(hashes[p // self.bs], p) for p in range(start, end)]

    def scrub(self) -> None:
        for start, n in self.released:
            for s in range(start, start + n):
                self.mem.pop(s, None)
        self.released.clear()

    def admit_seqs(self, r: Request, ids: list[int], num_tokens: int) -> bool:
        hit_now = self.alloc.lookup_prefix(r, num_tokens, ids[0])
        before = self.alloc.snapshot()
        if not self.alloc.allocate_group(ids, num_tokens, num_tokens + 4, block_hashes=r):
            assert self.alloc.snapshot() == before, "a failed admission changed the allocator"
            assert not self.released
            return False
        self.scrub()  # evicted blocks
        for s in ids:
            hit = self.alloc.prefix_hit_tokens(s)
            assert hit % self.bs == 0 and hit <= max(num_tokens - 1, 0)
            if s == ids[0]:
                assert hit == hit_now, "the admission hit other than the lookup said"
            vals = self.values(r, s, 0, num_tokens)
            slots = self.alloc.slot_mapping(s)
            for p in range(hit, num_tokens):  # the prefill computes what was not cached
                self.mem[slots[p]] = vals[p]
            self.expect[s], self.owner[s] = vals, (r, False)
        return True

    def grow(self, seq: int, copies, slots: list[int]) -> None:
        self.scrub()
        apply_copies(self.mem, self.mem, copies)
        r, _ = self.owner[seq]
        n = len(self.expect[seq])
        vals = self.values(r, seq, n, n + len(slots))
        for s, v in zip(slots, vals, strict=True):
            self.mem[s] = v
        self.expect[seq].extend(vals)

    # ------------------------------------------------------------------- rules
    @rule(pieces=st.lists(st.integers(0, 2), min_size=1, max_size=5), cut=st.integers(0, 3),
          output_len=st.integers(1, 12))
    def new_request(self, pieces, cut, output_len):
        prompt_len = max(1, len(pieces) * self.pt - min(cut, self.pt - 1))
        self.requests.append(Request(len(self.requests), 0.0, prompt_len, output_len,
                                     prompt_pieces=tuple(pieces),
                                     prompt_piece_tokens=self.pt))

    @precondition(lambda self: self.requests)
    @rule(data=st.data(), width=st.integers(1, 2), extra=st.integers(0, 5))
    def admit(self, data, width, extra):
        r = data.draw(st.sampled_from(self.requests))
        num_tokens = data.draw(st.integers(1, r.prompt_len + extra))
        ids = list(range(self.next_seq + 1, self.next_seq + 1 + width))
        self.next_seq += width
        self.admit_seqs(r, ids, num_tokens)

    @precondition(lambda self: self.gone)
    @rule(data=st.data())
    def readmit(self, data):
        """A preempted sequence recomputed: its prompt and generated tokens, same id."""
        seq = data.draw(st.sampled_from(sorted(self.gone)))
        r, n = self.gone.pop(seq)
        if not self.admit_seqs(r, [seq], n):
            self.gone[seq] = (r, n)

    @precondition(lambda self: self.expect)
    @rule(data=st.data(), k=st.integers(1, 6))
    def extend(self, data, k):
        seq = data.draw(st.sampled_from(sorted(self.expect)))
        if not self.alloc.can_extend(seq, k):
            return
        copies = self.alloc.extend(seq, k)
        n = self.alloc.seq_len(seq)
        self.grow(seq, copies, [self.alloc.slot_of(seq, i) for i in range(n - k, n)])

    @precondition(lambda self: self.expect)
    @rule(data=st.data())
    def append(self, data):
        seq = data.draw(st.sampled_from(sorted(self.expect)))
        if not self.alloc.can_append_all([seq]):
            before = self.alloc.snapshot()
            with pytest.raises(OutOfMemoryError):
                self.alloc.append_slot(seq)
            assert self.alloc.snapshot() == before
            return
        slot, copy = self.alloc.append_slot(seq)
        self.grow(seq, [copy] if copy else [], [slot])

    @precondition(lambda self: self.expect)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(sorted(self.expect)))
        self.next_child += 1
        child = self.next_child
        apply_copies(self.mem, self.mem, self.alloc.fork(parent, child))
        self.expect[child] = list(self.expect[parent])
        self.owner[child] = (self.owner[parent][0], True)

    @precondition(lambda self: self.expect)
    @rule(data=st.data())
    def free(self, data):
        seq = data.draw(st.sampled_from(sorted(self.expect)))
        self.alloc.free(seq)
        self.scrub()
        (r, child), vals = self.owner.pop(seq), self.expect.pop(seq)
        if not child:
            self.gone[seq] = (r, len(vals))

    @precondition(lambda self: self.expect)
    @rule(data=st.data())
    def swap_out(self, data):
        seqs = data.draw(st.lists(st.sampled_from(sorted(self.expect)), min_size=1,
                                  max_size=2, unique=True))
        group = self.alloc.swap_out(seqs)
        cpu: dict[int, tuple[int, int]] = {}
        apply_copies(self.mem, cpu, group.out_copies)  # read before the scrub
        self.scrub()
        moved = {s: (self.expect.pop(s), self.owner.pop(s)) for s in seqs}
        self.swapped.append((group, cpu, moved))

    @precondition(lambda self: self.swapped)
    @rule(data=st.data())
    def swap_in(self, data):
        i = data.draw(st.integers(0, len(self.swapped) - 1))
        group, cpu, moved = self.swapped[i]
        if not self.alloc.can_swap_in(group):
            return
        copies = self.alloc.swap_in(group)
        self.scrub()  # blocks evicted to make room, before the copies fill them
        apply_copies(cpu, self.mem, copies)
        for s, (vals, owner) in moved.items():
            self.expect[s], self.owner[s] = vals, owner
        del self.swapped[i]

    # -------------------------------------------------------------- invariants
    @invariant()
    def consistent(self):
        self.alloc.check_invariants()

    @invariant()
    def six_categories_partition_the_pool(self):
        acct = account(self.alloc)
        assert sum(getattr(acct, c) for c in CATEGORIES) == self.alloc.capacity_slots
        live = {s for q in self.expect for s in self.alloc.slot_mapping(q)}
        assert acct.token == len(live)
        assert acct.cached == self.alloc.num_cached_blocks * self.bs
        if self.alloc.kind == "radix":  # its fast usage agrees with the general
            a = self.alloc  # walk (which counts cached as used)
            slow = usage_by_block_walk(a.seqs, a.refs.counts, a.block_size,
                                       a.num_blocks - a.num_free_blocks, 0)
            assert (acct.token, acct.reserved, acct.internal_frag + acct.cached) == (
                slow.token_slots, slow.reserved_slots, slow.internal_frag_slots)

    @invariant()
    def every_sequence_reads_its_own_content(self):
        for seq, vals in self.expect.items():
            got = [self.mem.get(s) for s in self.alloc.slot_mapping(seq)]
            assert got == vals, f"sequence {seq} reads K/V of other content"


class PrefixCacheContentMachine(ContentMachine):
    scheme = "prefix-cache"


class PrefixCacheDedupContentMachine(ContentMachine):
    scheme = "prefix-cache-dedup"


TestRadixContent = ContentMachine.TestCase
TestPrefixCacheContent = PrefixCacheContentMachine.TestCase
TestPrefixCacheDedupContent = PrefixCacheDedupContentMachine.TestCase
for _case in (TestRadixContent, TestPrefixCacheContent, TestPrefixCacheDedupContent):
    _case.settings = settings(_case.settings, stateful_step_count=50)


# ------------------------------------------------------------ the lpm order
def _cached_pool(*requests: Request) -> BlockManager:
    """A radix pool whose tree holds the prompts of ``requests`` (admitted, then freed)."""
    a = RadixAllocator(64, BS)
    for i, r in enumerate(requests):
        assert admit(a, 10_000 + i, r)
        a.free(10_000 + i)
    return a


def test_lpm_admits_the_longest_cached_prefix_first():
    cached = req(1, (10, 11, 12, 13))
    first, second = req(2, (20, 21, 22)), req(3, (10, 11, 30))  # the second hits 2 blocks
    admitted = {}
    for order in ("fcfs", "lpm"):
        sched = Scheduler(_cached_pool(cached), SchedulerConfig(max_num_seqs=1, order=order))
        sched.add_requests([first, second])
        plan = sched.schedule()
        admitted[order] = [(p.request_id, p.start) for p in plan.prefills]
    assert admitted == {"fcfs": [(2, 0)], "lpm": [(3, 2 * BS)]}


def _waiting(kv: KVCacheManager, request: Request, seq_id: int, **kw) -> SequenceGroup:
    """A waiting group as the scheduler makes it: its block hashes made on arrival."""
    return SequenceGroup(request, [seq_id], block_hashes=kv.hashes_of(request), **kw)


def test_lpm_keeps_preempted_requests_first_and_ties_in_arrival_order():
    kv = KVCacheManager(_cached_pool(req(1, (10, 11, 12, 13))))
    groups = [_waiting(kv, req(2, (20, 21)), 1), _waiting(kv, req(3, (10, 30)), 2),
              _waiting(kv, req(4, (10, 11, 31)), 3), _waiting(kv, req(5, (10, 32)), 4),
              _waiting(kv, req(6, (40, 41)), 5, num_preemptions=1)]
    waiting = deque(groups)
    order_waiting(waiting, kv, "lpm")
    assert [g.request.request_id for g in waiting] == [6, 4, 3, 5, 2]
    order_waiting(waiting, kv, "fcfs")  # fcfs leaves the queue alone
    assert [g.request.request_id for g in waiting] == [6, 4, 3, 5, 2]
    with pytest.raises(ValueError, match="lpm"):
        SchedulerConfig(order="longest")


def test_lpm_serves_fcfs_when_more_than_128_wait():
    kv = KVCacheManager(_cached_pool(req(1, (10, 11, 12, 13))))
    groups = [_waiting(kv, req(2 + i, (100 + i, 200 + i)), 1 + i)
              for i in range(LPM_MAX_WAITING - 1)]
    hit = _waiting(kv, req(1000, (10, 11, 12, 14)), 999)  # arrives last, hits 3 blocks
    waiting = deque([*groups, hit])
    assert len(waiting) == LPM_MAX_WAITING == 128
    order_waiting(waiting, kv, "lpm")
    assert waiting[0] is hit  # 128 waiting: sorted
    waiting.append(_waiting(kv, req(2000, (300, 301)), 2000))
    # 129 waiting: FCFS again, the earlier sort undone
    order_waiting(waiting, kv, "lpm")
    assert waiting[0] is groups[0] and waiting[-2] is hit
    assert [g.request.request_id for g in waiting] == sorted(
        g.request.request_id for g in waiting)


def test_lfu_eviction_keeps_the_prefix_hit_more_often():
    """radix evicts the least recently used leaf, radix-lfu the least hit one: a system
    prompt used twice (one hit) outlives a later one-off prompt under LFU only."""
    def prompt(i: int, piece: int) -> Request:
        return Request(i, 0.0, 9, 1, prompt_pieces=(piece, piece, 100 + i),
                       prompt_piece_tokens=4)

    kept = {}
    for scheme in ("radix", "radix-lfu"):
        a = make_allocator(scheme, 6 * 4, block_size=4)
        for i, piece in [(0, 1), (1, 1), (2, 2)]:  # piece 1 twice (a hit), piece 2 once
            assert a.allocate_group([i], 9, 10, block_hashes=prompt(i, piece))
            a.free(i)
        other = Request(9, 0.0, 16, 1, prompt_pieces=(7, 8, 9, 10), prompt_piece_tokens=4)
        assert a.allocate_group([9], 16, 17, block_hashes=other)  # 4 blocks: one leaf evicted
        a.check_invariants()
        assert a.evicted_blocks == 2
        kept[scheme] = (a.lookup_prefix(prompt(3, 1), 9, 3), a.lookup_prefix(prompt(4, 2), 9, 4))
    assert kept == {"radix": (0, 8), "radix-lfu": (8, 0)}
