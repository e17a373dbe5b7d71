"""A hypothesis state machine for KV-cache allocators, in groups of rules.

Hypothesis drives random sequences of allocate / append / fork / free / swap and
deliberately bad or oversized requests. Beside the allocator the machine keeps a
model of what a real KV cache would hold: a dict ``slot -> token value`` updated
only through the copies the allocator reports and the slots it hands out. If the
allocator forgot a copy-on-write, handed a slot to two sequences, or lost a token
on swap, some sequence would read back a wrong value.

The rules come in groups, so that an allocator offering only part of pagedsim's
narrow interface (:class:`pagedsim.memory.base.Allocator`), such as a classroom
lab's, can be tested with the groups it supports:

- :class:`AllocatorMachine`, the core: ``allocate_group`` (one sequence, no forks),
  ``allocate``, ``can_append_all`` (of one sequence), ``append_slot``, ``slot_of``,
  ``slot_mapping``, ``free``, ``in``, ``snapshot``, ``check_invariants`` and
  ``capacity_slots``; failed operations must raise ``OutOfMemoryError`` (no room) or
  ``ValueError`` (bad input) and change nothing;
- :class:`ForkRules`: ``fork``, and ``allocate_group`` with ``fork_ids``;
- :class:`ChunkRules`: ``can_extend`` / ``extend``, and ``can_append_all`` of a group;
- :class:`SwapRules`: ``swap_out`` / ``can_swap_in`` / ``swap_in``;
- :class:`AccountingRules`: :func:`pagedsim.account` (``usage``, ``num_free_slots``,
  ``external_frag_slots``) partitions the pool and counts a shared slot once;
- :class:`~pagedsim.testing.refusal_rules.RefusalRules`: calls that must fail with
  ``ValueError`` and change nothing (held rooms used as sequences, swapped-out ids reused,
  duplicates, unknown ids, bad content), and held rooms forked from other sequences;
- :class:`~pagedsim.testing.manager_rules.ManagerRules`: the same memory driven through
  the scheduler's seam, :class:`~pagedsim.memory.kv_cache_manager.KVCacheManager`
  (admission, decodes, chunks and swap-outs; a refusal changes nothing).

:class:`FullAllocatorMachine` has every group (``tests/memory/test_allocator_state.py`` runs
it on every registered scheme). A subclass says how to build the allocator by
overriding ``make(data)``. Hypothesis orders rules by name, whatever group they come
from, so a machine's behaviour depends only on which rules it has.

This module imports hypothesis (a ``dev`` dependency); nothing else in pagedsim
imports it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ..errors import OutOfMemoryError
from ..memory.accounting import CATEGORIES, SlotAccount, account
from ..memory.base import KVCopy
from .kv_copies import apply_copies
from .manager_rules import ManagerRules
from .refusal_rules import RefusalRules

__all__ = ["AccountingRules", "AllocatorMachine", "ChunkRules", "ForkRules", "FullAllocatorMachine",
           "RefusalRules", "SwapRules", "apply_copies", "expect_raises"]

ExcTypes = type[BaseException] | tuple[type[BaseException], ...]


def expect_raises(exc: ExcTypes, fn: Callable[[], object]) -> None:
    """Call ``fn``; fail unless it raises ``exc`` (any other exception propagates)."""
    try:
        fn()
    except exc:
        return
    raise AssertionError(f"expected {exc!r} to be raised")


class AllocatorMachine(RuleBasedStateMachine):
    """The core rules; mix in the other groups, and override ``make``."""

    max_len = 64  # longest sequence, in tokens
    forks = False  # whether bad_input also tries a fork of an unknown parent

    def make(self, data):  # pragma: no cover - overridden
        raise NotImplementedError

    @initialize(data=st.data())
    def setup(self, data):
        self.alloc = self.make(data)
        self.initial = self.alloc.snapshot()
        self.tokens: dict[int, list[int]] = {}  # seq -> token values, in order
        self.finals: dict[int, int] = {}
        self.held: dict[int, list[int]] = {}  # parent -> children admitted, not yet forked
        self.mem: dict[int, int] = {}  # GPU slot -> value
        self.swapped: list[tuple[object, dict[int, int], dict[int, list[int]]]] = []
        self.next_id = 0
        self.next_value = 1

    # ----------------------------------------------------------------- helpers
    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def _value(self) -> int:
        self.next_value += 1
        return self.next_value

    def _expect_failure(self, fn, exc):
        before = self.alloc.snapshot()
        expect_raises(exc, fn)
        assert self.alloc.snapshot() == before, "a failed operation changed the allocator"

    def _prefill(self, seq: int, num_tokens: int, final: int) -> None:
        slots = self.alloc.slot_mapping(seq)
        values = [self._value() for _ in range(num_tokens)]
        for s, v in zip(slots, values, strict=True):
            self.mem[s] = v
        self.tokens[seq] = values
        self.finals[seq] = final

    # ------------------------------------------------------------------- rules
    @rule(num_tokens=st.integers(1, 40), extra=st.integers(0, 24),
          watermark=st.sampled_from([0.0, 0.0, 0.25]))
    def allocate(self, num_tokens, extra, watermark):
        seq = self._new_id()
        final = min(num_tokens + extra, self.max_len)
        before = self.alloc.snapshot()
        if self.alloc.allocate_group([seq], num_tokens, final, watermark=watermark):
            self._prefill(seq, num_tokens, final)
        else:
            assert self.alloc.snapshot() == before, "a failed admission changed the allocator"
            if watermark == 0.0:  # the single-sequence call agrees
                self._expect_failure(lambda: self.alloc.allocate(seq, num_tokens, final),
                                     OutOfMemoryError)

    @rule()
    def over_allocate(self):
        too_many = self.alloc.capacity_slots + 1
        self._expect_failure(lambda: self.alloc.allocate(-1, too_many, too_many),
                             (OutOfMemoryError, ValueError))

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def append(self, data):
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        if not self.alloc.can_append_all([seq]):
            self._expect_failure(lambda: self.alloc.append_slot(seq), OutOfMemoryError)
            return
        slot, kv_copy = self.alloc.append_slot(seq)
        if kv_copy is not None:
            apply_copies(self.mem, self.mem, [kv_copy])
        assert slot == self.alloc.slot_of(seq, len(self.tokens[seq]))
        # The written slot belongs to this sequence alone: copy-on-write did its job.
        for other in self.tokens:
            if other != seq:
                assert slot not in self.alloc.slot_mapping(other), "slot written is shared"
        value = self._value()
        self.mem[slot] = value
        self.tokens[seq].append(value)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def free(self, data):
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        self.alloc.free(seq)
        del self.tokens[seq], self.finals[seq]
        self._expect_failure(lambda: self.alloc.free(seq), ValueError)  # double free

    @rule()
    def bad_input(self):
        self._expect_failure(lambda: self.alloc.append_slot("nope"), ValueError)
        if self.forks:
            self._expect_failure(lambda: self.alloc.fork("nope", "child"), ValueError)
        self._expect_failure(lambda: self.alloc.allocate(-2, -1, 4), ValueError)
        if self.tokens:
            dup = next(iter(self.tokens))
            self._expect_failure(lambda: self.alloc.allocate(dup, 1, 2), ValueError)

    @rule()
    def free_everything(self):
        for s in list(self.tokens):
            self.alloc.free(s)
        self.tokens.clear()
        self.finals.clear()
        for children in self.held.values():
            for child in children:
                if child in self.alloc:
                    self.alloc.free(child)
        self.held.clear()
        for group, _, _ in self.swapped:
            self.alloc.swap_in(group)  # always fits into an empty pool
            for s in group.seq_ids:
                self.alloc.free(s)
        self.swapped.clear()
        now, init = self.alloc.snapshot(), dict(self.initial)
        if "free_blocks" in now:  # the free list's order may differ; its content may not
            assert sorted(now.pop("free_blocks")) == sorted(init.pop("free_blocks"))
        assert now == init, "freeing everything did not restore the initial state"
        self.mem.clear()

    # -------------------------------------------------------------- invariants
    @invariant()
    def consistent(self):
        self.alloc.check_invariants()

    @invariant()
    def contents_match(self):
        for seq, values in self.tokens.items():
            slots = self.alloc.slot_mapping(seq)
            assert [self.mem.get(s) for s in slots] == values, f"sequence {seq} reads wrong K/V"


class ForkRules:
    """Forks: of a running sequence, and of children whose room was held at admission."""

    forks = True

    def _fork_or_nothing(self, parent: int, child: int) -> list[KVCopy] | None:
        """``fork``'s copies, or None when ``OutOfMemoryError`` left all as it was."""
        before = self.alloc.snapshot()
        try:
            return self.alloc.fork(parent, child)
        except OutOfMemoryError:
            assert self.alloc.snapshot() == before, "a failed fork changed the allocator"
            return None

    @rule(num_tokens=st.integers(1, 40), extra=st.integers(0, 24), k=st.integers(1, 3))
    def admit_with_forks(self, num_tokens, extra, k):
        """A request admitted with room for k samples to fork later (as the scheduler does)."""
        seq = self._new_id()
        children = [self._new_id() for _ in range(k)]
        final = min(num_tokens + extra, self.max_len)
        before = self.alloc.snapshot()
        if not self.alloc.allocate_group([seq], num_tokens, final, children):
            assert self.alloc.snapshot() == before, "a failed admission changed the allocator"
            return
        self._prefill(seq, num_tokens, final)
        self.held[seq] = children

    @precondition(lambda self: any(p in self.tokens for p in self.held))
    @rule(data=st.data())
    def fork_held(self, data):
        """Forking a child whose room was held at admission cannot fail while its parent
        still holds its prompt (the scheduler forks before any append)."""
        parent = data.draw(st.sampled_from(sorted(p for p in self.held if p in self.tokens)))
        child = self.held[parent].pop()
        if not self.held[parent]:
            del self.held[parent]
        before = self.alloc.snapshot()
        try:
            copies = self.alloc.fork(parent, child)
        except OutOfMemoryError:
            assert self.alloc.snapshot() == before, "a failed fork changed the allocator"
            self.alloc.free(child)  # give back the held room
            return
        apply_copies(self.mem, self.mem, copies)
        self.tokens[child] = list(self.tokens[parent])
        self.finals[child] = self.finals[parent]

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def free_held(self, data):
        """A sample never forked (a one-token output) gives its held room back."""
        parent = data.draw(st.sampled_from(sorted(self.held)))
        for child in self.held.pop(parent):
            if child in self.alloc:
                self.alloc.free(child)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(sorted(self.tokens)))
        child = self._new_id()
        copies = self._fork_or_nothing(parent, child)
        if copies is None:
            return
        apply_copies(self.mem, self.mem, copies)
        self.tokens[child] = list(self.tokens[parent])
        self.finals[child] = self.finals[parent]


class ChunkRules:
    """Chunks of several tokens (chunked prefill), and one append for each of a group."""

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), k=st.integers(0, 20))
    def extend(self, data, k):
        """A chunk of k tokens (chunked prefill): can_extend predicts it exactly."""
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        if not self.alloc.can_extend(seq, k):
            self._expect_failure(lambda: self.alloc.extend(seq, k), OutOfMemoryError)
            return
        apply_copies(self.mem, self.mem, self.alloc.extend(seq, k))
        n = len(self.tokens[seq])
        for i in range(n, n + k):
            value = self._value()
            self.mem[self.alloc.slot_of(seq, i)] = value
            self.tokens[seq].append(value)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def append_group(self, data):
        """can_append_all predicts exactly whether a whole group's appends succeed."""
        seqs = data.draw(st.lists(st.sampled_from(sorted(self.tokens)), min_size=1,
                                  max_size=4, unique=True))
        if not self.alloc.can_append_all(seqs):
            trial = copy.deepcopy(self.alloc)  # check the "no" on a copy

            def append_all():
                for s in seqs:
                    trial.append_slot(s)

            expect_raises(OutOfMemoryError, append_all)
            return
        for s in seqs:
            slot, kv_copy = self.alloc.append_slot(s)  # must not raise: the answer was yes
            if kv_copy is not None:
                apply_copies(self.mem, self.mem, [kv_copy])
            value = self._value()
            self.mem[slot] = value
            self.tokens[s].append(value)


class SwapRules:
    """Swapping groups of sequences out to a CPU buffer and back."""

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def swap_out(self, data):
        seqs = data.draw(st.lists(st.sampled_from(sorted(self.tokens)), min_size=1,
                                  max_size=3, unique=True))
        group = self.alloc.swap_out(seqs)
        cpu: dict[int, int] = {}
        apply_copies(self.mem, cpu, group.out_copies)
        assert group.cpu_slots >= len({c.src_slot for c in group.out_copies})
        moved = {s: self.tokens.pop(s) for s in seqs}
        for s in seqs:
            moved_final = self.finals.pop(s)
            moved[s] = (moved[s], moved_final)
        self.swapped.append((group, cpu, moved))

    @precondition(lambda self: self.swapped)
    @rule(data=st.data())
    def swap_in(self, data):
        i = data.draw(st.integers(0, len(self.swapped) - 1))
        group, cpu, moved = self.swapped[i]
        if not self.alloc.can_swap_in(group):
            assert not self.alloc.can_swap_in(group, 0.25)
            self._expect_failure(lambda: self.alloc.swap_in(group), OutOfMemoryError)
            return
        copies = self.alloc.swap_in(group)
        apply_copies(cpu, self.mem, copies)
        for s, (toks, final) in moved.items():
            self.tokens[s] = toks
            self.finals[s] = final
        del self.swapped[i]


class AccountingRules:
    """The five-way account partitions the pool and counts a shared slot once."""

    def account_of(self, need: int | None) -> SlotAccount:
        """The account of the pool when the next request needs ``need`` slots (a lab
        machine overrides this to call the student's own accounting)."""
        return account(self.alloc, need)

    @invariant()
    def categories_partition_capacity(self):
        for need in (None, 1, 17, 64):
            acct = self.account_of(need)
            assert sum(getattr(acct, c) for c in CATEGORIES) == self.alloc.capacity_slots
            assert acct.token == len({s for q in self.tokens for s in self.alloc.slot_mapping(q)})
            assert acct.physical_blocks <= acct.logical_blocks


class FullAllocatorMachine(RefusalRules, ManagerRules, ForkRules, ChunkRules, SwapRules,
                           AccountingRules, AllocatorMachine):
    """Every group of rules: for allocators that offer the whole narrow interface."""
