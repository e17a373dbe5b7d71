"""Scheduler policies: v0 (prefill or decode) and chunked (decodes first, prefill chunks).

The bug they fix: with one token budget shared between running decodes and new
prefills, a prompt longer than the budget left by the decodes waited until the batch
had drained (the committed timelines showed the paged pool falling from 40 running
requests to 2 with hundreds waiting and most of the pool free).
"""

from __future__ import annotations

import copy

import pytest

from pagedsim import (
    CostModel,
    PagedAllocator,
    Request,
    SchedulerConfig,
    get_gpu,
    get_model,
    simulate,
)
from pagedsim.memory.schemes import make_allocator
from pagedsim.workloads.workload import WorkloadConfig, generate_workload

COST = CostModel(get_model("opt-13b"), get_gpu("a100-40gb"))


def _drain_case() -> list[Request]:
    # 200 short requests decode for a long time; then a 1,900-token prompt arrives. The
    # decodes alone take 200 of the 2,048-token budget, so a shared budget has no room.
    reqs = [Request(i, 0.0, 4, 400) for i in range(200)]
    return [*reqs, Request(200, 0.05, 1900, 10)]


@pytest.mark.parametrize("policy", ["v0", "chunked"])
def test_long_prompt_behind_running_decodes_is_admitted_at_once(policy):
    alloc = PagedAllocator(12_500, 16)  # room for everyone: only the budget could stop it
    cfg = SchedulerConfig(policy=policy, max_num_batched_tokens=2048)
    result = simulate(_drain_case(), alloc, COST, cfg, progress=False)
    row = next(r for r in result.request_rows if r[0] == 200)
    arrival_s, first_scheduled_s = row[1], row[6]
    # Admitted by the first step after its arrival (the step in flight finishes first).
    step_s = result.steps()["step_time_s"].max()
    assert first_scheduled_s - arrival_s <= step_s
    assert row[9] == 10  # and it completes


def test_v0_steps_prefill_or_decode_never_both():
    reqs = generate_workload(WorkloadConfig(num_requests=150, rate_per_s=20.0, seed=3))
    result = simulate(reqs, PagedAllocator(600, 16), COST, SchedulerConfig(policy="v0"),
                      progress=False)
    s = result.steps()
    assert not ((s["prefill_tokens"] > 0) & (s["decode_seqs"] > 0)).any()
    assert (s["prefill_tokens"] > 0).any() and (s["decode_seqs"] > 0).any()


def test_chunked_splits_a_long_prompt_and_mixes_decodes():
    reqs = [Request(0, 0.0, 8, 50), Request(1, 0.001, 3000, 5)]
    cfg = SchedulerConfig(policy="chunked", max_num_batched_tokens=512)
    chunks: list[tuple[int, int, bool]] = []

    def on_step(sched, plan):
        chunks.extend((p.start, p.num_tokens, p.last) for p in plan.prefills
                      if p.request_id == 1)
        assert plan.num_prefill_tokens + len(plan.decode_seq_ids) <= 512

    result = simulate(reqs, PagedAllocator(400, 16), COST, cfg, progress=False,
                      on_step=on_step)
    assert sum(n for _, n, _ in chunks) == 3000 and len(chunks) > 1
    assert [last for *_, last in chunks] == [False] * (len(chunks) - 1) + [True]
    starts = [start for start, *_ in chunks]
    assert starts == sorted(starts) and starts[0] == 0
    s = result.steps()
    assert ((s["prefill_tokens"] > 0) & (s["decode_seqs"] > 0)).any()
    assert {r[0]: r[9] for r in result.request_rows} == {0: 50, 1: 5}


def test_v0_rejects_a_prompt_longer_than_the_budget_and_chunked_runs_it():
    reqs = [Request(0, 0.0, 600, 4)]
    for policy, rejected in (("v0", 1), ("chunked", 0)):
        cfg = SchedulerConfig(policy=policy, max_num_batched_tokens=512)
        result = simulate(reqs, PagedAllocator(100, 16), COST, cfg, progress=False)
        assert len(result.rejections) == rejected, policy
    assert "max_num_batched_tokens (512)" in simulate(
        reqs, PagedAllocator(100, 16), COST, SchedulerConfig(max_num_batched_tokens=512),
        progress=False).rejections[0][1]


@pytest.mark.parametrize("policy", ["v0", "chunked"])
@pytest.mark.parametrize("scheme", ["paged", "contiguous-oracle"])
def test_no_head_of_line_drain(scheme, policy):
    """No stretch of over 1 s of simulated time in which requests wait, the head of the
    queue would fit (a trial admission on a copy of the allocator succeeds) and nothing
    is admitted."""
    reqs = generate_workload(WorkloadConfig(num_requests=100, rate_per_s=10.0, seed=1))
    alloc = make_allocator(scheme, 4000, 16, 2048)
    cfg = SchedulerConfig(policy=policy)
    drained_steps: list[tuple[int, bool]] = []

    def head_would_fit(sched) -> bool:
        head = sched.waiting[0]
        trial = copy.deepcopy(sched.allocator)
        n = head.request.prompt_len + head.num_output
        if head.num_output:  # a recomputation re-prefills every sequence
            return trial.allocate_group([("t", i) for i in range(len(head.seq_ids))], n,
                                        head.kv_final_len, watermark=cfg.watermark)
        forks = [("t", i) for i in range(1, head.width)]
        return trial.allocate_group([("t", 0)], n, head.kv_final_len, forks, cfg.watermark)

    def on_step(sched, plan):
        drained = bool(sched.waiting and not plan.prefills and not sched.swapped
                       and head_would_fit(sched))
        drained_steps.append((plan.step, drained))

    result = simulate(reqs, alloc, COST, cfg, progress=False, on_step=on_step)
    step_s = result.steps().set_index("step")["step_time_s"]
    longest = run = 0.0
    for step, drained in drained_steps:
        run = run + step_s[step] if drained else 0.0
        longest = max(longest, run)
    assert longest <= 1.0, f"{scheme}/{policy}: {longest:.2f} s of head-of-line drain"
