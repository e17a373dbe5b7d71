"""Scheduler properties on random small workloads, over every allocator and preemption mode."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pagedsim import ContiguousAllocator, PagedAllocator, get_gpu, get_model
from pagedsim.engine.cost import CostModel
from pagedsim.engine.scheduler import Scheduler, SchedulerConfig
from pagedsim.engine.simulator import simulate
from pagedsim.workloads.workload import Request

MAX_LEN = 64
COST = CostModel(get_model("opt-13b"), get_gpu("a100-40gb"))


@st.composite
def workloads(draw):
    num = draw(st.integers(1, 10))
    sharing = draw(st.sampled_from(["none", "n", "beam"]))
    reqs, t = [], 0.0
    for i in range(num):
        t += draw(st.sampled_from([0.0, 0.01, 0.2]))
        prompt = draw(st.integers(1, 40))
        output = draw(st.integers(1, MAX_LEN - prompt))
        width = draw(st.integers(1, 3))
        reqs.append(Request(
            request_id=i, arrival_s=t, prompt_len=prompt, output_len=output,
            n=width if sharing == "n" else 1, beam_width=width if sharing == "beam" else 1,
        ))  # fmt: skip
    return reqs


@st.composite
def allocators(draw):
    """Pools from barely big enough for the widest request to roomy."""
    if draw(st.booleans()):
        bs = draw(st.sampled_from([1, 4, 16]))
        min_blocks = 3 * -(-MAX_LEN // bs) + 2
        return PagedAllocator(draw(st.integers(min_blocks, 4 * min_blocks)), bs)
    reservation = draw(st.sampled_from(["max", "pow2", "oracle"]))
    placement = draw(st.sampled_from(["first-fit", "best-fit", "buddy"]))
    capacity = draw(st.integers(3 * MAX_LEN, 10 * MAX_LEN))
    return ContiguousAllocator(capacity, reservation, placement, MAX_LEN)


def configs():
    return st.builds(
        SchedulerConfig,
        max_num_seqs=st.integers(3, 16),
        max_num_batched_tokens=st.sampled_from([MAX_LEN, 256]),
        preemption=st.sampled_from(["recompute", "swap"]),
        cpu_swap_slots=st.sampled_from([0, 64, 4096]),
        seed=st.integers(0, 3),
    )


def _run(reqs, alloc, cfg):
    finished: list[int] = []

    def check(sched: Scheduler, plan) -> None:
        sched.allocator.check_invariants()
        finished.extend(plan.finished)

    result = simulate(reqs, alloc, COST, cfg, progress=False, on_step=check)
    return result, finished


@given(workloads(), allocators(), configs())
def test_every_request_finishes_once_with_its_exact_length(reqs, alloc, cfg):
    result, finished = _run(reqs, alloc, cfg)
    assert sorted(finished) == sorted(r.request_id for r in reqs), "lost or duplicated"
    df = result.requests()
    assert (df["num_output"] == df["output_len"]).all()
    assert (df["finish_s"] >= df["arrival_s"]).all()
    steps = result.steps()
    parts = steps[["token", "reserved", "internal_frag", "external_frag", "free"]].sum(axis=1)
    assert (parts == steps["capacity"]).all()
    assert alloc.num_seqs == 0, "memory left allocated after every request finished"
    assert (steps["running"] <= cfg.max_num_seqs).all()


@given(workloads(), st.integers(0, 3))
def test_same_seed_same_frames(reqs, seed):
    cfg = SchedulerConfig(seed=seed, preemption="swap", cpu_swap_slots=256)
    a, _ = _run(reqs, PagedAllocator(3 * MAX_LEN // 4, 4), cfg)
    b, _ = _run(reqs, PagedAllocator(3 * MAX_LEN // 4, 4), cfg)
    assert a.steps().equals(b.steps())
    assert a.requests().equals(b.requests())


def test_parallel_sampling_shares_prompt_and_copies_on_write():
    """The seed's example: one prompt, n = 3 samples; paged shares the prompt's blocks."""
    alloc = PagedAllocator(16, 4)
    sched = Scheduler(alloc, SchedulerConfig(watermark=0))
    sched.add_request(Request(0, 0.0, prompt_len=6, output_len=4, n=3))
    p1 = sched.schedule()
    assert len(p1.prefills) == 1 and alloc.num_used_blocks == 2  # prompt prefilled once
    p2 = sched.schedule()  # forks, then each sample writes its first token
    assert len(p2.forks) == 2 and not any(f.copies for f in p2.forks)
    assert len(p2.decode_seq_ids) == 3
    assert len(p2.cow_copies) == 2  # two samples copy the shared half-full block
    assert alloc.num_used_blocks == 4  # 1 shared full block + 3 private last blocks
    tables = [alloc.block_table(s) for s in p2.decode_seq_ids]
    assert len({t[0] for t in tables}) == 1 and len({t[1] for t in tables}) == 3


def test_contiguous_parallel_sampling_copies_the_prompt():
    alloc = ContiguousAllocator(512, "oracle", "first-fit", 64)
    sched = Scheduler(alloc)
    sched.add_request(Request(0, 0.0, prompt_len=6, output_len=4, n=3))
    sched.schedule()
    assert alloc.num_seqs == 3  # the samples' regions are held from admission
    p2 = sched.schedule()
    assert [len(f.copies) for f in p2.forks] == [1, 1]
    assert all(f.copies[0].num_slots == 6 for f in p2.forks)


def test_preemption_recompute_requeues_newest_first():
    alloc = PagedAllocator(6, 4)  # 24 slots
    sched = Scheduler(alloc, SchedulerConfig(watermark=0))
    sched.add_request(Request(0, 0.0, prompt_len=8, output_len=12))
    sched.add_request(Request(1, 0.0, prompt_len=8, output_len=12))
    preempted = []
    while sched.has_unfinished():
        preempted += sched.schedule().preempted
    assert preempted and preempted[0] == 1, "the newest request is preempted first"
    assert all(g.num_output == 12 for g in sched.groups.values())


def test_request_that_can_never_fit_is_rejected_with_a_reason():
    """It used to abort the whole run; now it is rejected and the others still run."""
    alloc = PagedAllocator(2, 4)
    reqs = [Request(0, 0.0, prompt_len=20, output_len=1), Request(1, 0.0, 3, 2)]
    result = simulate(reqs, alloc, COST, progress=False)
    (rid, reason), = result.rejections
    assert rid == 0 and "does not fit the empty pool of 8 slots" in reason
    assert {row[0]: row[9] for row in result.request_rows}[1] == 2


def test_recomputed_group_larger_than_the_token_budget_still_runs():
    """Found by hypothesis: a preempted n = 2 group re-prefills 2 x (40 + generated)
    tokens, more than max_num_batched_tokens = 64; it must run alone, not wait forever."""
    reqs = [
        Request(0, 0.0, prompt_len=1, output_len=22, n=3),
        Request(1, 0.0, prompt_len=1, output_len=1),
        Request(2, 0.0, prompt_len=30, output_len=22),
        Request(3, 0.0, prompt_len=40, output_len=21, n=2),
    ]
    cfg = SchedulerConfig(max_num_seqs=6, max_num_batched_tokens=64, cpu_swap_slots=0)
    result, finished = _run(reqs, PagedAllocator(13, 16), cfg)
    assert sorted(finished) == [0, 1, 2, 3]
    assert result.requests()["num_preemptions"].sum() > 0
