"""Graders of lab 4 (copy-on-write fork: parallel sampling and beam search).

One marker per task (``lab4_1`` ... ``lab4_3``). The graders reach your code only through
``adapters``, whose ``LabCow`` lets pagedsim's scheduler and simulator drive your
allocator. The worked example is the seed tutorial's (its section 3.5): the prompt
中国的首都是 sampled with n = 3, as notebook 04 runs it (blocks of 4 slots, 16 blocks,
a character vocabulary, each sample 3 tokens long); its block tables, reference counts
and copies below are what pagedsim's ``PagedAllocator`` gives for the same calls. The
simulated runs (parallel sampling, beam search, an Alpaca-like load with n = 4) are
compared step by step with the same runs on ``PagedAllocator``.
"""

from __future__ import annotations

import functools
import os

import adapters
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

import pagedsim
from pagedsim.metrics.sim_result import STEP_COLUMNS
from pagedsim.testing.allocator_machine import (
    AccountingRules,
    AllocatorMachine,
    ChunkRules,
    ForkRules,
)

# Derandomized: every grading run tries the same examples. A failure is not shrunk to a
# minimal example unless LAB_SHRINK=1 (shrinking can take a minute; graders take seconds).
PHASES = tuple(Phase) if os.environ.get("LAB_SHRINK") == "1" else (Phase.explicit,
                                                                     Phase.generate)
MACHINE = settings(max_examples=20, stateful_step_count=30, deadline=None, derandomize=True,
                   database=None, phases=PHASES, suppress_health_check=list(HealthCheck))
KVCopy = pagedsim.KVCopy
COL = {c: i for i, c in enumerate(STEP_COLUMNS)}

PROMPT = "中国的首都是"  # "the capital of China is": 6 tokens in a character vocabulary
SAMPLES = ["北京。", "北京市", "哪里？"]  # notebook 04's three continuations
BLOCK_SIZE, NUM_BLOCKS = 4, 16
FINAL_LEN = len(PROMPT) + 3


def _prefilled_and_forked(kv: list):
    """Notebook 04, sections 2 and 3: sequence 0 holds the prompt, forked into 1 and 2."""
    pool = adapters.LabCow(NUM_BLOCKS, BLOCK_SIZE)
    pool.allocate(0, len(PROMPT), FINAL_LEN)
    for ch, slot in zip(PROMPT, pool.slot_mapping(0), strict=True):
        kv[slot] = ch  # the prefill writes every prompt token's K/V
    assert pool.fork(0, 1) == [] and pool.fork(0, 2) == []
    return pool


def _write(pool, kv: list, seq: int, ch: str):
    """One decode step of one sample: copy first if told to, then write the token."""
    slot, kv_copy = pool.append_slot(seq)
    if kv_copy is not None:
        kv[kv_copy.dst_slot:kv_copy.dst_slot + kv_copy.num_slots] = \
            kv[kv_copy.src_slot:kv_copy.src_slot + kv_copy.num_slots]
    kv[slot] = ch
    return slot, kv_copy


# ==================================================================== lab4_1: fork
@pytest.mark.lab4_1
def test_seed_example_fork_shares_every_block():
    kv = [None] * (NUM_BLOCKS * BLOCK_SIZE)
    pool = _prefilled_and_forked(kv)
    assert [pool.block_table(s) for s in range(3)] == [[0, 1], [0, 1], [0, 1]]
    assert [pool.ref_count(b) for b in range(4)] == [3, 3, 0, 0]
    assert pool.num_free_blocks == 14  # nothing taken by the forks
    assert [pool.seq_len(s) for s in range(3)] == [6, 6, 6]
    for s in range(3):
        assert "".join(kv[i] for i in pool.slot_mapping(s)) == PROMPT


@pytest.mark.lab4_1
def test_fork_errors_change_nothing():
    pool = adapters.LabCow(4, 4)
    pool.allocate("p", 5, 8)
    pool.fork("p", "c")
    before = pool.snapshot()
    with pytest.raises(ValueError):
        pool.fork("nobody", "x")
    with pytest.raises(ValueError):
        pool.fork("p", "c")  # the child exists
    assert pool.snapshot() == before


@pytest.mark.lab4_1
def test_forks_of_forks_and_frees():
    pool = adapters.LabCow(6, 4)
    pool.allocate("p", 9, 12)  # [0, 1, 2]
    pool.fork("p", "c")
    pool.fork("c", "g")  # a fork of a fork shares the same blocks
    assert [pool.ref_count(b) for b in range(6)] == [3, 3, 3, 0, 0, 0]
    pool.free("p")
    assert [pool.ref_count(b) for b in range(3)] == [2, 2, 2]
    assert pool.num_free_blocks == 3
    pool.free("g")
    pool.free("c")
    assert sorted(pool.free_block_ids()) == list(range(6))
    pool.allocate("e", 0, 2)
    pool.fork("e", "e2")  # an empty sequence forks into an empty one
    assert pool.block_table("e2") == [] and pool.seq_len("e2") == 0


# ========================================================= lab4_2: copy-on-write
@pytest.mark.lab4_2
def test_seed_example_copy_on_write():
    kv = [None] * (NUM_BLOCKS * BLOCK_SIZE)
    pool = _prefilled_and_forked(kv)
    # Each sample writes its first token; block 1 (2 prompt tokens) is shared by three.
    first = [_write(pool, kv, s, SAMPLES[s][0]) for s in range(3)]
    assert first == [(10, KVCopy(4, 8, 2)),  # sample 0 copies block 1 into block 2
                     (14, KVCopy(4, 12, 2)),  # sample 1 copies it into block 3
                     (6, None)]  # sample 2 finds block 1 private by then: no copy
    assert [pool.block_table(s) for s in range(3)] == [[0, 2], [0, 3], [0, 1]]
    assert [pool.ref_count(b) for b in range(5)] == [3, 1, 1, 1, 0]
    rest = [[_write(pool, kv, s, SAMPLES[s][i]) for s in range(3)] for i in (1, 2)]
    assert rest == [[(11, None), (15, None), (7, None)],
                    [(16, None), (20, None), (24, None)]]  # new blocks 4, 5, 6: no copies
    assert [pool.block_table(s) for s in range(3)] == [[0, 2, 4], [0, 3, 5], [0, 1, 6]]
    assert [pool.ref_count(b) for b in range(8)] == [3, 1, 1, 1, 1, 1, 1, 0]
    for s in range(3):  # every sample reads back its own text through its block table
        assert "".join(kv[i] for i in pool.slot_mapping(s)) == PROMPT + SAMPLES[s]


@pytest.mark.lab4_2
def test_copy_on_write_needs_a_free_block():
    pool = adapters.LabCow(2, 4)
    pool.allocate("p", 6, 8)  # [0, 1]: no block left
    pool.fork("p", "c")
    assert not pool.can_append_all(["p"])
    before = pool.snapshot()
    with pytest.raises(adapters.OutOfMemoryError):
        pool.append_slot("p")  # block 1 is shared: a copy needs a free block
    assert pool.snapshot() == before
    pool.free("c")
    assert pool.append_slot("p") == (6, None)  # private again: written in place


#: Notebook 04's n = 3 request through pagedsim's scheduler: per step, the block tables
#: (by sequence id; the scheduler numbers sequences from 1) and the first 5 ref counts.
PARALLEL_STEPS = [
    ({1: [0, 1]}, [1, 1, 0, 0, 0]),  # prefill
    ({1: [0, 2], 2: [0, 3], 3: [0, 1]}, [3, 1, 1, 1, 0]),  # forked, then 2 copies
    ({1: [0, 2], 2: [0, 3], 3: [0, 1]}, [3, 1, 1, 1, 0]),  # last token: in place
]


def _cost():
    return pagedsim.CostModel(pagedsim.get_model("opt-13b"), pagedsim.get_gpu("a100-40gb"))


def _run(requests, allocator, config=None):
    """Simulate; the step rows and a snapshot of the allocator after every step."""
    snaps = []
    result = pagedsim.simulate(requests, allocator, _cost(), config or pagedsim.SchedulerConfig(),
                               scheme="lab4", progress=False,
                               on_step=lambda sched, plan: snaps.append(
                                   sched.allocator.snapshot()))
    return result, snaps


@pytest.mark.lab4_2
def test_seed_example_through_the_scheduler():
    request = pagedsim.Request(0, 0.0, prompt_len=len(PROMPT), output_len=3, n=3)
    result, snaps = _run([request], adapters.LabCow(NUM_BLOCKS, BLOCK_SIZE, your_usage=False))
    got = [({s: v["block_table"] for s, v in snap["seqs"].items()}, snap["ref_counts"][:5])
           for snap in snaps]
    assert got == PARALLEL_STEPS
    assert [row[COL["cow_copies"]] for row in result.step_rows] == [0, 2, 0]


def _alpaca_n4():
    return pagedsim.generate_workload(pagedsim.WorkloadConfig(
        kind="alpaca", num_requests=30, rate_per_s=10, n=4, seed=0, max_model_len=256))


@functools.cache
def _alpaca_n4_reference():
    """The n = 4 load on pagedsim's own PagedAllocator (run once for both tasks' tests)."""
    return _run(_alpaca_n4(), pagedsim.PagedAllocator(128, 16))


#: Step-row columns that do not depend on usage() (task 4.3): what the scheduler did.
SCHEDULE_COLUMNS = ("step", "running", "waiting", "prefill_tokens", "decode_seqs",
                    "preemptions", "cow_copies", "finished")


@pytest.mark.lab4_2
def test_parallel_sampling_load_through_the_simulator():
    """30 Alpaca-like requests with n = 4 in 128 blocks of 16: 563 steps, 99 preemptions
    (each restarts its group: prefill once, fork again), 222 copy-on-write copies; every
    step's block tables and ref counts as with pagedsim's PagedAllocator."""
    ours, our_snaps = _run(_alpaca_n4(), adapters.LabCow(128, 16, your_usage=False))
    theirs, their_snaps = _alpaca_n4_reference()
    assert (len(ours.step_rows), ours.num_preemptions, ours.num_cow_copies) == (563, 99, 222)
    for mine, ref, snap, ref_snap in zip(ours.step_rows, theirs.step_rows, our_snaps,
                                         their_snaps, strict=True):
        assert [mine[COL[c]] for c in SCHEDULE_COLUMNS] == \
            [ref[COL[c]] for c in SCHEDULE_COLUMNS], f"step {ref[0]}"
        assert snap == ref_snap, f"step {ref[0]}: block tables or ref counts differ"


class CowMachine(ForkRules, ChunkRules, AllocatorMachine):
    """pagedsim's allocator state machine with forks on your allocator: a sequence that
    forgot a copy-on-write reads another sequence's tokens back."""

    your_usage = False  # no accounting here: that is task 4.3

    def make(self, data):
        block_size = data.draw(st.sampled_from([1, 2, 4, 16]), label="block_size")
        num_blocks = data.draw(st.integers(1, 40), label="num_blocks")
        return adapters.LabCow(num_blocks, block_size, your_usage=self.your_usage)


@pytest.mark.lab4_2
def test_fork_state_machine():
    run_state_machine_as_test(CowMachine, settings=MACHINE)


# ============================================================ lab4_3: usage, savings
SHARED_ONCE = ("token slots are physical slots: a slot shared by several sequences counts "
               "once (the three samples share the prompt's 6 slots), while logical blocks "
               "count every block table's entries")

@pytest.mark.lab4_3
def test_seed_example_usage():
    kv = [None] * (NUM_BLOCKS * BLOCK_SIZE)
    pool = _prefilled_and_forked(kv)
    assert pool.counts() == (6, 2, 6), (  # token slots, physical blocks, logical blocks
        f"counts {pool.counts()}, expected (6, 2, 6): {SHARED_ONCE}")
    assert pool.sharing_saving() == pytest.approx(1 - 2 / 6)
    for i in range(3):
        for s in range(3):
            _write(pool, kv, s, SAMPLES[s][i])
    assert pool.counts() == (19, 7, 9)  # block 0 (4 prompt tokens) is stored once
    assert pool.sharing_saving() == pytest.approx(1 - 7 / 9)
    acct = pagedsim.account(pool)
    assert (acct.token, acct.reserved, acct.internal_frag, acct.free) == (19, 0, 9, 36)


#: Notebook 04, section 6: one request, beam width 3, 10 output tokens, through the
#: scheduler (SchedulerConfig(seed=0)): per step (token slots, logical, physical blocks).
BEAM_STEPS = [(6, 2, 2), (13, 6, 4), (16, 6, 4), (19, 9, 7), (18, 9, 6), (21, 9, 6),
              (24, 9, 6), (23, 12, 8), (18, 12, 6), (21, 12, 6)]


@pytest.mark.lab4_3
def test_beam_search_through_the_scheduler():
    request = pagedsim.Request(0, 0.0, prompt_len=len(PROMPT), output_len=10, beam_width=3)
    ours, _ = _run([request], adapters.LabCow(NUM_BLOCKS, BLOCK_SIZE),
                   pagedsim.SchedulerConfig(seed=0))
    got = [(r[COL["token"]], r[COL["logical_blocks"]], r[COL["physical_blocks"]])
           for r in ours.step_rows]
    assert got == BEAM_STEPS
    theirs, _ = _run([request], pagedsim.PagedAllocator(NUM_BLOCKS, BLOCK_SIZE),
                     pagedsim.SchedulerConfig(seed=0))
    assert ours.step_rows == theirs.step_rows


@pytest.mark.lab4_3
def test_parallel_sampling_load_accounting():
    """The n = 4 load of task 4.2: every step's slot account and block counts as with
    pagedsim's PagedAllocator."""
    ours, _ = _run(_alpaca_n4(), adapters.LabCow(128, 16))
    theirs, _ = _alpaca_n4_reference()
    for mine, ref in zip(ours.step_rows, theirs.step_rows, strict=True):
        assert mine == ref, f"step {ref[0]} differs"


class CowAccountingMachine(AccountingRules, CowMachine):
    """The fork machine, with the slot account (from your usage()) checked at every
    step: the parts partition the pool and token slots count a shared slot once."""

    your_usage = True


@pytest.mark.lab4_3
def test_accounting_state_machine():
    run_state_machine_as_test(CowAccountingMachine, settings=MACHINE)
