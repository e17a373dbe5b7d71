"""Regressions from the adversarial pass: scheduler and allocator misuse end cleanly."""

from __future__ import annotations

from pathlib import Path

import pytest

from pagedsim import (
    ContiguousAllocator,
    CostModel,
    PagedAllocator,
    Request,
    SchedulerConfig,
    get_gpu,
    get_model,
    simulate,
)
from pagedsim.cli import main
from pagedsim.memory.schemes import make_allocator

COST = CostModel(get_model("opt-13b"), get_gpu("a100-40gb"))


def test_request_larger_than_the_pool_is_rejected_under_swap():
    """Was: RuntimeError 'simulation stalled ... 0 waiting, 0 swapped'."""
    alloc = PagedAllocator(40, 16)  # 640 slots; the request needs 2,000
    cfg = SchedulerConfig(preemption="swap", cpu_swap_slots=100_000)
    result = simulate([Request(0, 0.0, 500, 1500)], alloc, COST, cfg, progress=False)
    (rid, reason), = result.rejections
    assert rid == 0 and "outgrows the whole pool of 640 slots" in reason
    assert alloc.num_seqs == 0


def test_big_request_cli_reproducer(tmp_path: Path, capsys):
    trace = tmp_path / "big.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n0,500,1500\n")
    code = main(["compare", "--workload", str(trace), "--weights-gb", "37.5",
                 "--preemption", "swap", "--schemes", "paged", "--jobs", "1", "--no-write"])
    out = capsys.readouterr().out
    assert code == 0
    assert "paged: 1 of 1 requests rejected, e.g. request 0" in out


def test_recomputed_group_gets_its_sharing_back():
    """Was: 'request 1 ... can never be scheduled', although it completes alone."""
    reqs = [Request(0, 0.0, 500, 818, n=4), Request(1, 0.0, 500, 818, n=4)]
    alloc = make_allocator("paged", 5232, 16)
    cfg = SchedulerConfig(preemption="recompute", cpu_swap_slots=0)
    result = simulate(reqs, alloc, COST, cfg, progress=False)
    assert result.rejections == []
    assert result.num_preemptions >= 1
    assert {row[0]: row[9] for row in result.request_rows} == {0: 818, 1: 818}


def test_rejection_names_the_limit_that_bites():
    """Was: '... does not fit an empty pool of 1296 slots' with 917 < 1296."""
    alloc = make_allocator("contiguous-max", 1296, 16, 2048)
    result = simulate([Request(0, 0.0, 416, 501)], alloc, COST, progress=False)
    (_, reason), = result.rejections
    assert "takes 2,048 slots" in reason and "1,296 slots" in reason


def test_wider_than_max_num_seqs_is_rejected():
    alloc = PagedAllocator(100, 16)
    cfg = SchedulerConfig(max_num_seqs=2)
    result = simulate([Request(0, 0.0, 10, 5, n=3), Request(1, 0.0, 10, 5)], alloc, COST, cfg,
                      progress=False)
    assert [rid for rid, _ in result.rejections] == [0]
    assert "max_num_seqs (2)" in result.rejections[0][1]


@pytest.mark.parametrize("bad", [-5, 2.5, True, "3"])
def test_paged_sizes_refuse_bad_token_counts(bad):
    a = PagedAllocator(4, 16)
    with pytest.raises((ValueError, TypeError), match="num_tokens"):
        a.can_allocate(bad)
    with pytest.raises((ValueError, TypeError), match="num_tokens"):
        a.slots_needed(bad)


@pytest.mark.parametrize("make", [lambda: PagedAllocator(8, 4),
                                  lambda: ContiguousAllocator(64, "oracle", "first-fit", 32)])
def test_stale_or_foreign_swapped_group_is_refused(make):
    a, other = make(), make()
    a.allocate("s", 5, 8)
    group = a.swap_out(["s"])
    with pytest.raises(ValueError, match="another allocator"):
        other.swap_in(group)
    with pytest.raises(ValueError, match="another allocator"):
        other.can_swap_in(group)
    a.swap_in(group)
    a.free("s")
    before = a.snapshot()
    with pytest.raises(ValueError, match="already swapped in"):
        a.swap_in(group)
    assert a.snapshot() == before


# ------------------------------------------- issue 22, part 2: no stall, no abort mid-run

def _all_schemes_allocators(capacity_slots: int, max_model_len: int):
    from pagedsim.memory.schemes import SCHEMES

    model = get_model("opt-13b")
    for name in SCHEMES:
        yield name, make_allocator(name, capacity_slots, 16, max_model_len, model=model)


@pytest.mark.parametrize("capacity, reqs", [
    (2048, [Request(0, 0.0, 99, 1543), Request(1, 0.0, 1207, 341)]),
    (4096, [Request(0, 0.0, 63, 1346), Request(1, 0.0, 949, 782, n=2)]),  # was step 1350
])
def test_swapped_group_larger_than_the_pool_minus_the_watermark_comes_back(capacity, reqs):
    """Was: 'simulation stalled at step 1350: 0 waiting, 1 swapped, 0 running' (vattention,
    watermark 0.3: the swapped group needs more than 70% of the pool, and nothing runs to
    free the rest). Now it comes back past the watermark once nothing runs."""
    alloc = make_allocator("vattention", capacity, 16, 2048, model=get_model("opt-13b"))
    cfg = SchedulerConfig(watermark=0.3, preemption="swap", cpu_swap_slots=10**6)
    result = simulate(reqs, alloc, COST, cfg, progress=False)
    assert result.rejections == [] and result.num_swaps_out >= 1
    assert {row[0]: row[9] for row in result.request_rows} == {r.request_id: r.output_len
                                                               for r in reqs}
    assert alloc.num_seqs == 0


@pytest.mark.parametrize("policy", ["v0", "chunked"])
def test_request_longer_than_max_model_len_is_rejected_in_every_scheme(policy):
    """Was: contiguous runs aborted mid-way ('final_len (699) exceeds max_model_len (512)',
    the other requests' results lost), vattention rejected it as 'outgrows the whole
    pool'. Now every scheme rejects it with the limit's name, and the others finish."""
    reqs = [Request(0, 0.0, 100, 50), Request(1, 0.0, 400, 300), Request(2, 0.0, 50, 20)]
    for name, alloc in _all_schemes_allocators(40_960, 512):
        cfg = SchedulerConfig(max_model_len=512, policy=policy)
        result = simulate(reqs, alloc, COST, cfg, progress=False, scheme=name)
        (rid, reason), = result.rejections
        assert rid == 1, name
        assert "700 tokens are more than max_model_len (512)" in reason, (name, reason)
        outputs = {row[0]: row[9] for row in result.request_rows}
        assert outputs == {0: 50, 1: 0, 2: 20}, name
        assert alloc.num_seqs == 0, name


@pytest.mark.parametrize("scheme", ["contiguous-pow2", "vattention", "paged", "prefix-cache",
                                    "radix", "radix-lfu"])
def test_allocator_limit_is_used_when_the_config_sets_none(scheme):
    """simulate() without max_model_len in the config takes the limit of the allocator
    make_allocator built (contiguous and vAttention regions enforce it; paged blocks were
    given it by the registry: they used to run the request past the model's context)."""
    alloc = make_allocator(scheme, 40_960, 16, 512, model=get_model("opt-13b"))
    result = simulate([Request(0, 0.0, 400, 300), Request(1, 0.0, 10, 10)], alloc, COST,
                      progress=False)
    assert [rid for rid, _ in result.rejections] == [0]
    assert "max_model_len (512)" in result.rejections[0][1]


def test_experiments_pass_the_models_max_model_len_to_the_scheduler():
    """compare / sweep / figures (Experiment.scheduler_config) reject, never abort, a
    request longer than the model's context, in every scheme."""
    from pagedsim.experiments import Experiment

    assert Experiment().scheduler_config().max_model_len == get_model("opt-13b").max_model_len
