"""Graders of lab 3 (the paged allocator).

One marker per task (``lab3_1`` ... ``lab3_6``). The graders reach your code only through
``adapters``. Worked examples are notebook 03's (a pool of 12 blocks of 4 slots); task
3.6 runs pagedsim's own allocator state machine (:mod:`pagedsim.testing.allocator_machine`)
and pagedsim's scheduler and simulator on your allocator, and compares the simulated run
step by step with the same run on pagedsim's ``PagedAllocator``. Expected numbers were
computed once with ``pagedsim.PagedAllocator`` on the same calls.

Task-local: the tests of tasks 3.3 and 3.4 free sequences with
:func:`free_as_the_handout_says`, not with your ``free``, so that a mistake in ``free``
(task 3.5) costs points in task 3.5 only.
"""

from __future__ import annotations

import os

import adapters
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

import pagedsim
from pagedsim.metrics.sim_result import STEP_COLUMNS
from pagedsim.testing.allocator_machine import AccountingRules, AllocatorMachine, ChunkRules

# Derandomized: every grading run tries the same examples. A failure is not shrunk to a
# minimal example unless LAB_SHRINK=1 (shrinking can take a minute; graders take seconds).
PHASES = tuple(Phase) if os.environ.get("LAB_SHRINK") == "1" else (Phase.explicit,
                                                                     Phase.generate)
MACHINE = settings(max_examples=20, stateful_step_count=30, deadline=None, derandomize=True,
                   database=None, phases=PHASES, suppress_health_check=list(HealthCheck))
OOM = adapters.OutOfMemoryError


def free_as_the_handout_says(pool, seq_id):
    """Task 3.5's ``free``, done here on your allocator's state (its ``free_blocks``,
    ``ref_counts``, ``block_tables`` and ``seq_lens``) instead of by your ``free``: the
    tests of tasks 3.3 and 3.4 free with it, so that a mistake in your ``free`` costs
    points in task 3.5 only. One reference less per block, last block first; a block left
    with none goes back on the free list."""
    lab = pool.lab
    table = list(lab.block_tables[seq_id])
    del lab.block_tables[seq_id]
    del lab.seq_lens[seq_id]
    refs = lab.ref_counts
    for block in reversed(table):
        refs[block] -= 1
        if refs[block] == 0:
            lab.free_blocks.append(block)
    pool._final.pop(seq_id, None)


def notebook03_pool():
    """Notebook 03, section 1: 12 blocks of 4 slots; A (6 of 9 tokens) and B (9 of 12)."""
    pool = adapters.LabPaged(12, 4)
    pool.allocate("A", 6, 9)
    pool.allocate("B", 9, 12)
    return pool


# ============================================================== lab3_1: the free list
@pytest.mark.lab3_1
def test_free_list_hands_out_block_0_first():
    pool = adapters.LabPaged(4, 16)
    assert sorted(pool.free_block_ids()) == [0, 1, 2, 3]
    assert [pool.ref_count(b) for b in range(4)] == [0, 0, 0, 0]
    assert [pool.take_block() for _ in range(4)] == [0, 1, 2, 3]
    assert [pool.ref_count(b) for b in range(4)] == [1, 1, 1, 1]
    assert pool.free_block_ids() == []
    with pytest.raises(OOM):
        pool.take_block()


@pytest.mark.lab3_1
def test_free_list_is_a_stack():
    pool = adapters.LabPaged(6, 2)
    for expected in range(6):
        assert pool.free_block_ids()[-1] == expected  # the top of the stack comes out next
        assert pool.take_block() == expected
        assert len(pool.free_block_ids()) == 5 - expected


# ================================================================ lab3_2: allocate
@pytest.mark.lab3_2
def test_blocks_needed():
    assert [adapters.LabPaged(8, 16).blocks_needed(n) for n in (0, 1, 15, 16, 17, 33)] == \
        [0, 1, 1, 1, 2, 3]
    assert [adapters.LabPaged(8, 4).blocks_needed(n) for n in (6, 9, 14)] == [2, 3, 4]


@pytest.mark.lab3_2
def test_notebook03_allocate():
    pool = notebook03_pool()
    assert pool.block_table("A") == [0, 1]
    assert pool.block_table("B") == [2, 3, 4]
    assert pool.seq_len("A") == 6 and pool.seq_len("B") == 9
    assert pool.num_free_blocks == 7
    assert [pool.ref_count(b) for b in range(12)] == [1] * 5 + [0] * 7


@pytest.mark.lab3_2
def test_allocate_is_all_or_nothing():
    pool = notebook03_pool()
    before = pool.snapshot()
    with pytest.raises(OOM):
        pool.allocate("big", 29, 29)  # 8 blocks, 7 free
    with pytest.raises(ValueError):
        pool.allocate("A", 1, 1)  # a duplicate id
    with pytest.raises(ValueError):
        pool.allocate("neg", -1, 1)
    assert pool.snapshot() == before
    pool.allocate("fits", 28, 28)  # exactly the 7 free blocks
    assert pool.block_table("fits") == [5, 6, 7, 8, 9, 10, 11]
    pool.allocate("empty", 0, 4)  # a sequence with no token yet holds no block
    assert pool.block_table("empty") == []


# ============================================================ lab3_3: slot mapping
@pytest.mark.lab3_3
def test_notebook03_slot_mapping():
    pool = notebook03_pool()
    assert pool.slot_mapping("A") == [0, 1, 2, 3, 4, 5]
    assert pool.slot_mapping("B") == list(range(8, 17))
    free_as_the_handout_says(pool, "A")
    pool.allocate("C", 14, 16)  # A's blocks come back first: [0, 1, 5, 6]
    assert pool.slot_mapping("C") == [0, 1, 2, 3, 4, 5, 6, 7, 20, 21, 22, 23, 24, 25]


@pytest.mark.lab3_3
def test_slot_mapping_follows_scattered_tables():
    pool = adapters.LabPaged(8, 4)
    pool.allocate("x", 4, 4)  # [0]
    pool.allocate("y", 4, 4)  # [1]
    free_as_the_handout_says(pool, "x")
    pool.allocate("z", 10, 10)  # [0, 2, 3]
    assert pool.block_table("z") == [0, 2, 3]
    assert pool.slot_mapping("z") == [0, 1, 2, 3, 8, 9, 10, 11, 12, 13]


# ============================================================= lab3_4: append_slot
@pytest.mark.lab3_4
def test_notebook03_appends():
    pool = notebook03_pool()
    # A holds 6 tokens in [0, 1]: two more fit in block 1, the third takes block 5.
    assert [pool.append_slot("A") for _ in range(3)] == [(6, None), (7, None), (20, None)]
    assert pool.block_table("A") == [0, 1, 5]
    assert pool.slot_mapping("A")[-3:] == [6, 7, 20]
    assert pool.num_free_blocks == 6


@pytest.mark.lab3_4
def test_append_out_of_blocks():
    pool = adapters.LabPaged(2, 2)
    pool.allocate("s", 3, 5)  # [0, 1], one slot left in block 1
    assert pool.append_slot("s") == (3, None)
    before = pool.snapshot()
    with pytest.raises(OOM):
        pool.append_slot("s")  # block 1 is full and no block is free
    with pytest.raises(ValueError):
        pool.append_slot("nobody")
    assert pool.snapshot() == before
    pool.allocate("e", 0, 2)
    free_as_the_handout_says(pool, "s")  # last first: 1, then 0, which is now on top
    assert pool.append_slot("e") == (0, None)  # the first token takes a block


# ==================================================================== lab3_5: free
@pytest.mark.lab3_5
def test_notebook03_free_and_reuse():
    pool = notebook03_pool()
    for _ in range(3):
        pool.append_slot("A")
    pool.free("A")
    assert sorted(pool.free_block_ids()) == [0, 1, 5, 6, 7, 8, 9, 10, 11]
    assert [pool.ref_count(b) for b in (0, 1, 5)] == [0, 0, 0]
    assert pool.free_block_ids()[-3:] == [5, 1, 0], (
        "free: blocks must be freed last-first (walk the block table from its last block), "
        "so that the free list, a stack, hands A's blocks out again in A's order; after "
        f"freeing A = [0, 1, 5] the top of your free list is {pool.free_block_ids()[-3:]}, "
        "expected [5, 1, 0] (block 0 on top)")
    pool.allocate("C", 14, 16)
    pool.allocate("D", 5, 8)
    assert pool.block_table("C") == [0, 1, 5, 6]  # freed last block first: same order back
    assert pool.block_table("D") == [7, 8]
    with pytest.raises(ValueError):
        pool.free("A")  # freed already
    for s in ("B", "C", "D"):
        pool.free(s)
    assert sorted(pool.free_block_ids()) == list(range(12))
    assert [pool.ref_count(b) for b in range(12)] == [0] * 12


@pytest.mark.lab3_5
def test_shared_blocks_go_back_with_their_last_user():
    pool = notebook03_pool()
    pool.share("B", "B2")  # lab 4's fork, done by hand: B's blocks now have 2 references
    assert [pool.ref_count(b) for b in (2, 3, 4)] == [2, 2, 2]
    pool.free("B")
    assert [pool.ref_count(b) for b in (2, 3, 4)] == [1, 1, 1]
    assert not {2, 3, 4} & set(pool.free_block_ids())  # B2 still uses them
    assert pool.slot_mapping("B2") == list(range(8, 17))
    pool.free("B2")
    assert {2, 3, 4} <= set(pool.free_block_ids())
    assert [pool.ref_count(b) for b in (2, 3, 4)] == [0, 0, 0]


# ====================================================== lab3_6: the whole allocator
@pytest.mark.lab3_6
def test_can_allocate_with_a_watermark():
    pool = adapters.LabPaged(10, 4)
    assert pool.can_allocate(40) and not pool.can_allocate(41)
    assert pool.can_allocate(36, 0.1) and not pool.can_allocate(37, 0.1)  # keep 1
    assert pool.can_allocate(32, 0.25) and not pool.can_allocate(33, 0.25)  # keep 2
    assert pool.can_allocate(20, 0.0, 2) and not pool.can_allocate(21, 0.0, 2)
    pool.allocate("a", 30, 30)  # 8 blocks
    assert pool.allocate_group(["b"], 8, 8, watermark=0.0)
    assert not pool.allocate_group(["c"], 1, 1, watermark=0.0)


@pytest.mark.lab3_6
def test_can_append_all():
    pool = adapters.LabPaged(5, 4)
    pool.allocate("full", 4, 8)  # [0]: full, its next token needs a block
    pool.allocate("room", 3, 8)  # [1]: room for one more
    pool.allocate("full2", 8, 9)  # [2, 3]: full
    assert pool.can_append_all(["room"])
    assert pool.can_append_all(["full", "room"])  # one block needed, one free
    assert not pool.can_append_all(["full", "full2"])  # two needed
    pool.append_slot("full")
    assert not pool.can_append_all(["full2"])
    assert pool.can_append_all(["full", "room"])


class PagedMachine(ChunkRules, AccountingRules, AllocatorMachine):
    """pagedsim's allocator state machine on your allocator: core rules, chunks, and the
    slot account; block size and pool are drawn."""

    def make(self, data):
        block_size = data.draw(st.sampled_from([1, 2, 4, 16]), label="block_size")
        num_blocks = data.draw(st.integers(1, 40), label="num_blocks")
        return adapters.LabPaged(num_blocks, block_size)


@pytest.mark.lab3_6
def test_allocator_state_machine():
    run_state_machine_as_test(PagedMachine, settings=MACHINE)


def _notebook03_run(allocator):
    """Notebook 03, section 2: 12 uniform requests through pagedsim's simulator."""
    workload = pagedsim.WorkloadConfig(kind="uniform", num_requests=12, rate_per_s=40, seed=2,
                                       max_model_len=128, prompt_len_range=(4, 64),
                                       output_len_range=(4, 64))
    cost = pagedsim.CostModel(pagedsim.get_model("opt-13b"), pagedsim.get_gpu("a100-40gb"))
    return pagedsim.simulate(pagedsim.generate_workload(workload), allocator, cost,
                             pagedsim.SchedulerConfig(), scheme="lab3", progress=False)


@pytest.mark.lab3_6
@pytest.mark.parametrize("pool_slots, steps, preemptions, token_sum, peak_blocks", [
    (384, 93, 4, 22514, 24),  # notebook 03's pool: 24 blocks of 16
    (128, 231, 7, 20881, 8),  # a third of it: more preemptions (recompute)
])
def test_notebook03_run_through_the_simulator(pool_slots, steps, preemptions, token_sum,
                                               peak_blocks):
    ours = _notebook03_run(adapters.LabPaged(pool_slots // 16, 16))
    col = {c: i for i, c in enumerate(STEP_COLUMNS)}
    assert len(ours.step_rows) == steps
    assert ours.num_preemptions == preemptions
    assert sum(r[col["token"]] for r in ours.step_rows) == token_sum
    assert max(r[col["physical_blocks"]] for r in ours.step_rows) == peak_blocks
    # Every step, every column, as pagedsim's own paged allocator makes it.
    theirs = _notebook03_run(pagedsim.PagedAllocator(pool_slots // 16, 16))
    for mine, ref in zip(ours.step_rows, theirs.step_rows, strict=True):
        assert mine == ref, f"step {ref[0]} differs"
