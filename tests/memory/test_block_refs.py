"""BlockRefs, the reference counts every block manager composes, against a model: a
``Counter`` of holders per block. Random takes, holds (a free queue's unheld blocks hit
too), copy-on-write drops, releases and swap-in takes over a free list and over vLLM v1's
free queue; after each step the counts, the shared-block counter and the pool's free
blocks must be the model's."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pagedsim.errors import OutOfMemoryError
from pagedsim.memory.block_pool import BlockPool
from pagedsim.memory.block_refs import BlockRefs
from pagedsim.memory.free_list import FreeList

NUM_BLOCKS = 12


class RefsMachine(RuleBasedStateMachine):
    """Holders are lists of blocks (a table each); the model counts each block's holders."""

    @initialize(pool_kind=st.sampled_from(["free-list", "block-pool"]))
    def start(self, pool_kind: str) -> None:
        pool = FreeList(NUM_BLOCKS, 4) if pool_kind == "free-list" else BlockPool(NUM_BLOCKS, 4)
        self.refs = BlockRefs(pool)
        self.tables: list[list[int]] = []

    def _model(self) -> Counter:
        return Counter(b for t in self.tables for b in t)

    def _free(self) -> int:
        return self.refs.pool.get_num_free_blocks()

    @rule(n=st.integers(0, 5))
    def take(self, n: int) -> None:
        if n > self._free():
            return
        blocks = self.refs.take(n)
        assert len(blocks) == len(set(blocks)) == n
        assert not set(blocks) & set(self._model()), "a held block was handed out again"
        self.tables.append(blocks)

    @rule()
    def take_one(self) -> None:
        if not self._free():
            with pytest.raises(OutOfMemoryError, match="'s9'"):
                self.refs.take_one("s9")
            return
        self.tables.append([self.refs.take_one("s9")])

    @precondition(lambda self: self.tables)
    @rule(data=st.data())
    def hold(self, data) -> None:
        """A fork: a new holder of every block of one table."""
        table = data.draw(st.sampled_from(self.tables))
        assert self.refs.hold(list(table)) == 0  # every one held already
        self.tables.append(list(table))

    @precondition(lambda self: isinstance(self.refs.pool, BlockPool) and self._free())
    @rule(data=st.data(), known=st.booleans())
    def hit(self, data, known: bool) -> None:
        """A prefix hit on blocks nobody holds (vLLM v1's pool: they sit in the free
        queue): held again, out of the queue; ``hold_cached`` when the caller knows."""
        free = list(self.refs.pool.free)
        blocks = data.draw(st.lists(st.sampled_from(free), min_size=1, max_size=3,
                                    unique=True))
        if known:
            self.refs.hold_cached(blocks)
        else:
            assert self.refs.hold(blocks) == len(blocks)
        assert not set(blocks) & set(self.refs.pool.free)
        self.tables.append(blocks)

    @precondition(lambda self: any(self._model()[t[-1]] > 1 for t in self.tables if t))
    @rule(data=st.data())
    def drop(self, data) -> None:
        """A copy-on-write: one table's shared last block replaced by a fresh one."""
        i = data.draw(st.sampled_from([i for i, t in enumerate(self.tables)
                                       if t and self._model()[t[-1]] > 1]))
        if not self._free():
            return
        new = self.refs.take_one(i)
        self.refs.drop(self.tables[i][-1])
        self.tables[i][-1] = new

    @precondition(lambda self: self.tables)
    @rule(data=st.data())
    def release(self, data) -> None:
        i = data.draw(st.integers(0, len(self.tables) - 1))
        table = self.tables.pop(i)
        still = self._model()
        gone = [b for b in reversed(table) if not still[b]]
        free_before = self._free()
        assert self.refs.release(table) == len(gone)
        assert self._free() == free_before + len(gone)

    @rule(shape=st.lists(st.lists(st.integers(-1, 3), max_size=4, unique=True), min_size=1,
                         max_size=3))
    def take_for(self, shape: list[list[int]]) -> None:
        """A swapped-out group coming back: tables of indices into ``n`` new blocks."""
        used = sorted({i for t in shape for i in t if i >= 0})
        n = len(used)
        if n > self._free():
            return
        # Indices 0..n-1 each named at least once, as a swap-out writes them.
        rename = {old: new for new, old in enumerate(used)}
        shape = [[rename[i] if i >= 0 else -1 for i in t] for t in shape]
        blocks, tables = self.refs.take_for(n, shape)
        assert len(blocks) == n
        for ids, idx in zip(tables, shape, strict=True):
            assert ids == [blocks[i] if i >= 0 else -1 for i in idx]
            self.tables.append([b for b in ids if b >= 0])

    @invariant()
    def counts_are_the_models(self) -> None:
        if not hasattr(self, "refs"):
            return
        model = self._model()
        assert [self.refs.counts[b] for b in range(NUM_BLOCKS)] == \
            [model[b] for b in range(NUM_BLOCKS)]
        assert self.refs.num_shared == sum(1 for c in model.values() if c > 1)
        assert self._free() == NUM_BLOCKS - len(model)


TestBlockRefs = RefsMachine.TestCase


def test_release_hands_the_tail_back_first() -> None:
    """A table's blocks go back tail first, so the pool hands its head out last."""
    refs = BlockRefs(FreeList(8, 4))
    table = refs.take(3)
    refs.release(table)
    assert refs.take(3) == table  # popped back in the order they were first taken


def test_take_one_names_the_sequence_only_when_the_pool_is_dry() -> None:
    refs = BlockRefs(FreeList(1, 4))
    refs.take_one("a")
    with pytest.raises(OutOfMemoryError, match="no free block for the copy of 'b'"):
        refs.take_one("b", "no free block for the copy of")
