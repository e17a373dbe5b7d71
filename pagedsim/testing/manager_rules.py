"""Rules of the allocator state machine for the scheduler's seam, the KV-cache manager.

Mixed into :class:`~pagedsim.testing.allocator_machine.FullAllocatorMachine`, so every
registered scheme (``tests/memory/test_allocator_state.py``) is driven through
:class:`~pagedsim.memory.kv_cache_manager.KVCacheManager` as the scheduler drives it:
a ``None`` answer must leave the snapshot equal; a grant must hand out the slots the
allocator maps the new tokens to, and its copies must keep the model of the K/V right;
``as_many_as_fit`` grows a prefix of its group, and a group with a swapped-out or unknown
id is refused and changes nothing.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from ..memory.kv_cache_manager import KVCacheManager
from .kv_copies import apply_copies


class ManagerRules:
    """Admission, decodes, chunks and swap-outs through ``KVCacheManager``."""

    def _kv(self) -> KVCacheManager:
        return KVCacheManager(self.alloc)

    def _unchanged_unless(self, grant, before) -> None:
        if grant is None:
            assert self.alloc.snapshot() == before, "a refused allocate_slots changed memory"

    @rule(num_tokens=st.integers(1, 40), extra=st.integers(0, 24))
    def manager_admits(self, num_tokens, extra):
        seq = self._new_id()
        final = min(num_tokens + extra, self.max_len)
        before = self.alloc.snapshot()
        grant = self._kv().allocate_slots([seq], num_tokens, final_len=final)
        self._unchanged_unless(grant, before)
        if grant is not None:
            assert grant.copies == [] and grant.slots == []
            assert grant.computed_tokens == [0]  # no request: nothing is cached
            self._prefill(seq, num_tokens, final)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), k=st.integers(1, 12))
    def manager_grows(self, data, k):
        """One token for each of a group (a decode), or a chunk of ``k`` for one."""
        seqs = data.draw(st.lists(st.sampled_from(sorted(self.tokens)), min_size=1,
                                  max_size=1 if k > 1 else 3, unique=True))
        before = self.alloc.snapshot()
        grant = self._kv().allocate_slots(seqs, k)
        self._unchanged_unless(grant, before)
        if grant is None:
            return
        apply_copies(self.mem, self.mem, grant.copies)
        if k == 1:
            assert len(grant.slots) == len(seqs)
        for i, s in enumerate(seqs):
            n = len(self.tokens[s])
            for pos in range(n, n + k):
                slot = self.alloc.slot_of(s, pos)
                if k == 1:
                    assert grant.slots[i] == slot
                value = self._value()
                self.mem[slot] = value
                self.tokens[s].append(value)

    @precondition(lambda self: self.tokens or self.swapped)
    @rule(data=st.data(), bad=st.sampled_from(["", "", "swapped", "unknown"]))
    def manager_grows_as_many_as_fit(self, data, bad):
        """``as_many_as_fit``: one token each, in order, while each fits (never None). A
        group holding an id that is no running sequence (a swapped-out one, or unknown)
        is refused with ``ValueError`` and changes nothing, with and without it."""
        seqs = data.draw(st.lists(st.sampled_from(sorted(self.tokens)), max_size=3,
                                  unique=True) if self.tokens else st.just([]))
        if bad == "swapped" and self.swapped:
            moved = self.swapped[data.draw(st.integers(0, len(self.swapped) - 1))][2]
            seqs.insert(data.draw(st.integers(0, len(seqs))), next(iter(moved)))
        elif bad == "unknown":
            seqs.insert(data.draw(st.integers(0, len(seqs))), -99)
        if not seqs:
            return
        kv = self._kv()
        if bad and not set(seqs) <= set(self.tokens):
            for fit in (True, False):
                self._expect_failure(
                    lambda fit=fit: kv.allocate_slots(seqs, 1, as_many_as_fit=fit), ValueError)
            return
        grant = kv.allocate_slots(seqs, 1, as_many_as_fit=True)
        assert grant is not None, "as_many_as_fit answered None"
        done = len(grant.slots)
        if done < len(seqs):  # it stopped at the first that did not fit
            assert not self.alloc.can_append_all([seqs[done]])
        apply_copies(self.mem, self.mem, grant.copies)
        for s, slot in zip(seqs, grant.slots, strict=False):
            assert slot == self.alloc.slot_of(s, len(self.tokens[s]))
            value = self._value()
            self.mem[slot] = value
            self.tokens[s].append(value)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), cpu_free_slots=st.integers(0, 64))
    def manager_swaps_out(self, data, cpu_free_slots):
        """A swap-out that does not fit the CPU pool is refused and changes nothing."""
        seqs = data.draw(st.lists(st.sampled_from(sorted(self.tokens)), min_size=1,
                                  max_size=2, unique=True))
        need = self.alloc.swap_out_slots(seqs)
        before = self.alloc.snapshot()
        group = self._kv().swap_out(seqs, cpu_free_slots)
        if need > cpu_free_slots:
            assert group is None and self.alloc.snapshot() == before
            return
        assert group is not None and group.cpu_slots == need
        cpu: dict[int, int] = {}
        apply_copies(self.mem, cpu, group.out_copies)
        moved = {s: (self.tokens.pop(s), self.finals.pop(s)) for s in seqs}
        self.swapped.append((group, cpu, moved))
