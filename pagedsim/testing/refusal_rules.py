"""Rules of the allocator state machine for calls that must fail and change nothing.

Mixed into :class:`~pagedsim.testing.allocator_machine.FullAllocatorMachine` (every
registered scheme, ``tests/memory/test_allocator_state.py``), after its fork and swap rules,
whose state (``held``, ``swapped``, ``tokens``) these rules read: a failed call must raise
``ValueError`` (bad input) or ``OutOfMemoryError`` (no room) and leave the snapshot equal.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from .kv_copies import apply_copies


class RefusalRules:
    """Calls that must fail, each with ``ValueError`` and nothing changed (snapshot equal):
    a room held for a fork used as a running sequence, an id of a swapped-out group given
    to a new sequence, an id given twice, an unknown id, content that is not a request."""

    @rule(data=st.data())
    def calls_that_must_fail(self, data):
        alloc, fresh = self.alloc, self._new_id()
        calls: list[Callable[[], object]] = [
            lambda: alloc.append_slot(-99), lambda: alloc.free(-99),
            lambda: alloc.fork(-99, fresh), lambda: alloc.swap_out([-99]),
            lambda: alloc.allocate_group([fresh, fresh], 1, 2),
            lambda: alloc.allocate_group([fresh], 1, 2, block_hashes=5),
        ]
        held = [c for children in self.held.values() for c in children]
        if held:  # a room held for a fork is not a running sequence
            child = data.draw(st.sampled_from(held))
            calls += [lambda: alloc.append_slot(child), lambda: alloc.extend(child, 1),
                      lambda: alloc.swap_out([child]), lambda: alloc.fork(child, fresh)]
        if self.tokens:
            seq = data.draw(st.sampled_from(sorted(self.tokens)))
            calls += [lambda: alloc.can_append_all([seq, seq]),
                      lambda: alloc.swap_out([seq, seq]),
                      lambda: alloc.allocate_group([seq], 1, 2)]
        for _, _, moved in self.swapped:  # its ids stay reserved until it comes back
            gone = next(iter(moved))
            calls.append(lambda gone=gone: alloc.allocate_group([gone], 1, 2))
            if self.tokens:
                calls.append(lambda gone=gone: alloc.fork(next(iter(self.tokens)), gone))
        for call in calls:
            self._expect_failure(call, ValueError)

    @precondition(lambda self: self.held and self.tokens)
    @rule(data=st.data())
    def fork_held_from_another(self, data):
        """A held room forked from another (perhaps longer) sequence: it fits, or
        ``OutOfMemoryError`` leaves everything as it was, the held room included."""
        parent = data.draw(st.sampled_from(sorted(self.tokens)))
        owner = data.draw(st.sampled_from(sorted(self.held)))
        child = self.held[owner][-1]
        copies = self._fork_or_nothing(parent, child)
        if copies is None:
            return
        self.held[owner].pop()
        if not self.held[owner]:
            del self.held[owner]
        apply_copies(self.mem, self.mem, copies)
        self.tokens[child] = list(self.tokens[parent])
        self.finals[child] = self.finals[parent]
