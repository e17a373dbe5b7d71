"""Stateful property tests of the hybrid manager over real hybrid layouts (issue 24).

``tests/memory/test_allocator_state.py`` runs every registered scheme, the hybrid ones included,
on a full-attention model: one KV-cache group. Here the groups are a full one and one or
two sliding-window ones (windows of 1 to 17 tokens, blocks of 1 to 4), driven by every
rule of :class:`~pagedsim.testing.allocator_machine.FullAllocatorMachine` (its model of
the K/V reads group 0, which holds every token) plus:

* the groups partition the pool: each block is free or held by exactly one group, and the
  groups' slots plus the free ones are the capacity (``check_invariants`` and
  :meth:`~pagedsim.memory.hybrid.HybridAllocator.group_accounts`);
* blocks out of the window return: after a decode a sliding group holds at most
  ``ceil((W - 1) / block_size) + 1`` blocks of the sequence, the rest are null entries,
  and every block goes back to the pool when everything is freed;
* prefix hits never exceed any group's own hit (:class:`HybridPrefixMachine`, with
  requests that share prompt pieces).
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pagedsim.memory.accounting import CATEGORIES, account
from pagedsim.memory.hybrid import HybridAllocator
from pagedsim.memory.hybrid_groups import NULL_BLOCK, GroupSpec
from pagedsim.testing.allocator_machine import FullAllocatorMachine, apply_copies
from pagedsim.workloads.workload import Request

WINDOWS = st.lists(st.sampled_from([1, 2, 3, 5, 9, 17]), min_size=1, max_size=2)


def _groups(data) -> list[GroupSpec]:
    return [GroupSpec("full"), *(GroupSpec("sliding", w) for w in data.draw(WINDOWS))]


class HybridMachine(FullAllocatorMachine):
    """Every rule of the full machine on a pool shared by a full and sliding groups."""

    def make(self, data):
        groups = _groups(data)
        return HybridAllocator(data.draw(st.integers(len(groups), 90), label="num_blocks"),
                               data.draw(st.sampled_from([1, 2, 4]), label="block_size"),
                               groups, prefix_cache=data.draw(st.booleans(), label="cache"))

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), k=st.integers(1, 30))
    def decode_many(self, data, k):
        """One sequence decodes up to ``k`` tokens: after each, every sliding group holds
        only the blocks the next query reads from, at most ceil((W - 1) / bs) + 1."""
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        alloc, bs = self.alloc, self.alloc.block_size
        for _ in range(k):
            if len(self.tokens[seq]) >= self.max_len or not alloc.can_append_all([seq]):
                return
            slot, copies = alloc.append_slot(seq)
            if copies is not None:
                apply_copies(self.mem, self.mem, [copies])
            value = self._value()
            self.mem[slot] = value
            self.tokens[seq].append(value)
            n = len(self.tokens[seq])
            for g, spec in enumerate(alloc.groups):
                table = alloc.block_table(seq, g)
                held = len(table) - table.count(NULL_BLOCK)
                if spec.window is None:
                    assert held == len(table)
                else:
                    assert held == spec.blocks_held(n, bs) <= -(-(spec.window - 1) // bs) + 1
                    assert table.count(NULL_BLOCK) == max(n - spec.window, 0) // bs

    @invariant()
    def categories_partition_capacity(self):
        """The six-way account partitions the pool, its token slots being every held
        slot of every group (a shared one once)."""
        alloc = self.alloc
        held = {s for q in self.tokens for g in range(len(alloc.groups))
                for s in alloc.slot_mapping(q, group=g) if s >= 0}
        for need in (None, 1, 17):
            acct = account(alloc, need)
            assert sum(getattr(acct, c) for c in CATEGORIES) == alloc.capacity_slots
            assert acct.token == len(held)

    @invariant()
    def groups_partition_the_pool(self):
        alloc = self.alloc
        *groups, total = alloc.group_accounts()
        assert sum(r["blocks"] for r in groups) + alloc.pool.get_num_free_blocks() \
            == alloc.num_blocks
        parts = ("token", "reserved", "internal_frag", "cached")
        assert sum(r[p] for r in groups for p in parts) + total["free"] == alloc.capacity_slots
        assert sum(r["cached"] for r in groups) == alloc.pool.num_cached_blocks * alloc.block_size


TestHybridState = HybridMachine.TestCase


PROMPTS = [(1, 2, 3, 8), (1, 2, 4, 9), (5, 6, 10, 11), (1, 7, 12, 13)]  # pieces of 4 tokens


class HybridPrefixMachine(RuleBasedStateMachine):
    """Requests sharing prompt pieces admitted, decoded and freed through a caching
    hybrid pool: every hit is whole blocks, at most every group's own hit."""

    @initialize(data=st.data())
    def setup(self, data):
        self.alloc = HybridAllocator(data.draw(st.integers(6, 60)), 4, _groups(data),
                                     prefix_cache=True)
        self.next_id = 0

    def _request(self, prompt: int, length: int) -> Request:
        self.next_id += 1
        return Request(self.next_id, 0.0, length, 8, prompt_pieces=PROMPTS[prompt],
                       prompt_piece_tokens=4)

    def _own_hits(self, r: Request, seq_id: int) -> list[int]:
        cache, bs = self.alloc.cache, self.alloc.block_size
        chain = r_hashes(self.alloc, r, seq_id)
        most = (r.prompt_len - 1) // bs
        return [cache.group_hit(g, chain, most) * bs for g in range(len(self.alloc.groups))]

    @rule(prompt=st.integers(0, len(PROMPTS) - 1), length=st.integers(1, 16))
    def admit(self, prompt, length):
        r = self._request(prompt, length)
        seq = r.request_id
        found = self.alloc.lookup_prefix(r, length, seq)
        own = self._own_hits(r, seq)
        assert found % self.alloc.block_size == 0 and found <= max(length - 1, 0)
        assert all(found <= h for h in own), (found, own)  # never more than any group holds
        if self.alloc.allocate_group([seq], length, length + 8, block_hashes=r):
            assert self.alloc.prefix_hit_tokens(seq) == found

    @precondition(lambda self: self.alloc.num_seqs)
    @rule(data=st.data(), k=st.integers(1, 8))
    def grow(self, data, k):
        seq = data.draw(st.sampled_from(sorted(self.alloc.seq_ids())))
        for _ in range(k):
            if self.alloc.seq_len(seq) >= 20 or not self.alloc.can_append_all([seq]):
                return
            self.alloc.append_slot(seq)

    @precondition(lambda self: self.alloc.num_seqs)
    @rule(data=st.data())
    def free(self, data):
        self.alloc.free(data.draw(st.sampled_from(sorted(self.alloc.seq_ids()))))

    @invariant()
    def consistent(self):
        self.alloc.check_invariants()


def r_hashes(alloc: HybridAllocator, r: Request, seq_id: int) -> list:
    """The chained block hashes of ``r``'s prompt as the allocator names them."""
    from pagedsim.workloads.block_hashes import BlockHashes, branch_of

    return BlockHashes(r, alloc.block_size).chain(branch_of(seq_id), r.prompt_len // 4)


TestHybridPrefix = HybridPrefixMachine.TestCase
