"""The host tier behind a prefix cache: its own rules (write-back, write-through, LRU,
pins), the caching schemes serving hits from it, the cost of its copies, and runs with it.
The stateful properties are in ``tests/memory/test_host_tier_state.py``."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from pagedsim.engine.cost import CostModel
from pagedsim.engine.simulator import simulate
from pagedsim.experiments.run_one import run_scheme
from pagedsim.experiments.spec import Experiment
from pagedsim.memory.host_tier import HostCopy, HostTier
from pagedsim.memory.kv_cache_manager import KVCacheManager
from pagedsim.memory.schemes import PoolSpec, make_allocator
from pagedsim.models.specs import (
    GPUS,
    PCIE4_X16_BYTES_PER_S,
    PCIE5_X16_BYTES_PER_S,
    get_gpu,
    get_model,
)
from pagedsim.workloads.sharing_workloads import sharing_workload
from pagedsim.workloads.workload import Request


# ------------------------------------------------------------------ the tier itself
def test_write_back_once_and_least_recently_used_eviction():
    host = HostTier(2, 16)
    host.evicted(5, 111)
    host.evicted(6, 222)
    host.evicted(7, 111)  # held already: no copy, only used again
    host.evicted(8, 333)  # full: the least recently used (222) goes
    assert host.flush().copies == [HostCopy(True, 5, 0), HostCopy(True, 6, 1),
                                   HostCopy(True, 8, 1)]
    assert list(host.entries) == [111, 333] and host.evicted_blocks == 1
    host.check()


def test_pinned_entries_survive_the_write_backs_of_their_admission():
    host = HostTier(2, 4)
    host.evicted(1, 10)
    host.evicted(2, 20)
    host.flush()
    host.pin([10, 20])
    host.evicted(3, 30)  # every entry pinned: dropped, not stored
    assert 30 not in host and host.dropped_blocks == 1
    host.load([10, 20], [7, 8])
    assert host.flush().copies == [HostCopy(False, 7, 0), HostCopy(False, 8, 1)]
    host.evicted(3, 30)  # unpinned now: the least recently used goes
    assert 30 in host and len(host) == 2
    host.check()


def test_write_through_waits_for_the_step_unless_the_block_is_evicted_first():
    host = HostTier(4, 4, write_through=True)
    host.inserted(3, 30)
    host.inserted(4, 40)
    host.evicted(4, 40)  # evicted before the flush: written back now, in order
    moved = host.flush()
    assert moved.copies == [HostCopy(True, 4, 0)]
    assert moved.writes == [HostCopy(True, 3, 1)]
    host.inserted(9, 30)  # held already: nothing to write
    assert host.flush().writes == [] and host.written_through_blocks == 1


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
def test_a_bad_capacity_is_refused(bad):
    with pytest.raises((TypeError, ValueError), match="host_cache_blocks"):
        PoolSpec(64, host_cache_blocks=bad)


def test_no_tier_at_zero_and_a_bad_policy_is_refused():
    assert PoolSpec(64).host_tier() is None
    assert PoolSpec(64, host_cache_blocks=3).host_tier().capacity_blocks == 3
    with pytest.raises(ValueError, match="write_through"):
        PoolSpec(64, host_write_through="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="write_through"):
        HostTier(3, 16, 1)  # type: ignore[arg-type]


def test_a_huge_tier_costs_nothing_until_used():
    """--host-cache-gb at its maximum (2**20 GiB: tens of millions of blocks) must not
    build a free list of every block up front (3.4 GB for a 10-request run)."""
    import tracemalloc

    tracemalloc.start()
    try:
        host = HostTier(2_000_000, 16)  # the old list: about 72 MB of ints
        host.evicted(5, 111)
        host.evicted(6, 222)
        host.check()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak:,} bytes for a tier of two entries"
    assert host.flush().copies == [HostCopy(True, 5, 0), HostCopy(True, 6, 1)]
    assert len(host.free) == 2_000_000 - 2 and host.free[-1] == 2  # taken next, in order


def test_the_never_used_blocks_go_in_order_then_evicted_ones_are_reused():
    host = HostTier(3, 4)
    assert host.describe()["free"] == [2, 1, 0]
    for b, h in ((1, 10), (2, 20), (3, 30), (4, 40)):
        host.evicted(b, h)
    assert host.describe()["free"] == [] and host.evicted_blocks == 1
    assert [c.host_block for c in host.flush().copies] == [0, 1, 2, 0]
    host.check()


# ------------------------------------------------------------ through the manager
def _chat(rid: int, prompt_len: int, pieces: tuple[int, ...]) -> Request:
    return Request(rid, 0.0, prompt_len, 4, prompt_pieces=pieces, prompt_piece_tokens=32)


@pytest.mark.parametrize("scheme", ["prefix-cache", "prefix-cache-dedup", "radix",
                                    "radix-lfu"])
def test_an_evicted_prompt_comes_back_from_the_host(scheme):
    alloc = make_allocator(scheme, 8 * 16, 16, host_cache_blocks=8)
    kv = KVCacheManager(alloc)
    first = _chat(1, 64, (1, 2))
    assert kv.allocate_slots([1], 64, hashes=kv.hashes_of(first), final_len=67)
    kv.free([1])
    other = _chat(2, 120, (7, 8, 9, 10))  # takes the whole pool: evicts the first prompt
    assert kv.allocate_slots([2], 120, hashes=kv.hashes_of(other), final_len=123)
    backs = kv.host_transfers().copies
    assert backs and all(c.to_host for c in backs)
    kv.free([2])
    again = _chat(3, 64, (1, 2))
    hashes = kv.hashes_of(again)
    assert kv.get_computed_tokens(hashes, 3, 64) == 48  # the last-token rule: 3 of 4 blocks
    grant = kv.allocate_slots([3], 64, hashes=hashes, final_len=67)
    assert grant.computed_tokens == [48] and grant.host_tokens == [48]
    loads = [c for c in kv.host_transfers().copies if not c.to_host]
    assert [c.gpu_block for c in loads] == alloc.block_table(3)[:3]
    alloc.check_invariants()


def test_a_radix_node_knows_its_tiers():
    alloc = make_allocator("radix", 8 * 16, 16, host_cache_blocks=8, host_write_through=True)
    kv = KVCacheManager(alloc)
    assert kv.allocate_slots([1], 64, hashes=kv.hashes_of(_chat(1, 64, (1, 2))),
                             final_len=67)
    (node,) = alloc.pool.tree.root.children.values()
    assert alloc.cache.tiers(node) == ("gpu",)  # queued for the host, not copied yet
    kv.host_transfers()
    assert alloc.cache.tiers(node) == ("gpu", "host")


def test_schemes_without_a_prefix_cache_ignore_the_tier():
    for scheme in ("paged", "contiguous-max"):
        alloc = make_allocator(scheme, 256, 16, host_cache_blocks=4)
        assert getattr(alloc, "host", None) is None
        assert KVCacheManager(alloc).host_transfers() is None


# ------------------------------------------------------------------------ costs
def test_the_gpu_presets_say_their_host_link():
    assert GPUS["a100-40gb"].host_link_bytes_per_s == PCIE4_X16_BYTES_PER_S == 25e9
    assert GPUS["h200-141gb"].host_link_bytes_per_s == PCIE5_X16_BYTES_PER_S == 50e9


def _cost(**kw) -> CostModel:
    gpu = get_gpu("h200-141gb")
    return CostModel(get_model("llama-3.1-8b"), gpu,
                     host_link_bytes_per_s=gpu.host_link_bytes_per_s, **kw)


def test_host_copies_cost_the_link_and_one_call_per_layer():
    cost = _cost()
    layers = cost.model.num_layers
    assert cost.host_copy_s(0) == 0.0
    assert cost.host_copy_s(50_000_000) == pytest.approx(layers * 10e-6 + 1e-3)
    # Not overlapped: the copies, then the model; both directions on one stream.
    serial = _cost(host_overlap=False)
    assert serial.host_transfer_s(0.01, 50_000_000, 50_000_000) == pytest.approx(
        2 * cost.host_copy_s(50_000_000))
    # Overlapped, copies shorter than the compute: one layer's copy is exposed.
    step = 0.05 + cost.step_overhead_s
    link = cost.host_copy_s(50_000_000)
    assert cost.host_transfer_s(step, 50_000_000, 0) == pytest.approx(link / layers)
    # ... longer than it: the link sets the pace, one layer's compute after it.
    big = 5_000_000_000
    assert cost.host_transfer_s(step, big, big) == pytest.approx(
        cost.host_copy_s(big) - 0.05 + 0.05 / layers)


def test_a_short_prefix_is_cheaper_to_recompute_a_long_one_to_load():
    cost = _cost()
    loaded, recomputed = cost.load_or_recompute_s(16)
    assert recomputed < loaded  # a memory-bound step: 16 more tokens cost nothing
    loaded, recomputed = cost.load_or_recompute_s(4096)
    assert loaded < recomputed / 4


@pytest.mark.parametrize("kw", [{"host_link_bytes_per_s": 0}, {"host_overlap": 1}])
def test_bad_host_costs_are_refused(kw):
    with pytest.raises((TypeError, ValueError), match="host_"):
        _cost(**kw)


# ------------------------------------------------------------------------- runs
def _requests():
    return sharing_workload("multi-turn", 150, 5.0, 0, 2048)


def _run(host_blocks: int, write_through: bool = False, overlap: bool = True):
    model, gpu = get_model("opt-13b"), get_gpu("a100-40gb")
    alloc = make_allocator("prefix-cache", 4096, 16, host_cache_blocks=host_blocks,
                           host_write_through=write_through)
    cost = CostModel(model, gpu, host_link_bytes_per_s=gpu.host_link_bytes_per_s,
                     host_overlap=overlap)
    return simulate(_requests(), alloc, cost, scheme="prefix-cache")


def test_no_host_tier_runs_as_before():
    from pagedsim.metrics.summary import summarize

    model, gpu = get_model("opt-13b"), get_gpu("a100-40gb")
    plain = simulate(_requests(), make_allocator("prefix-cache", 4096, 16),
                     CostModel(model, gpu), scheme="prefix-cache")
    assert summarize(_run(0)) == summarize(plain)
    assert "prefix_hits_host" not in summarize(plain)


@pytest.mark.parametrize("write_through", [False, True])
def test_hits_per_tier_add_up_and_the_tier_stays_in_its_capacity(write_through):
    from pagedsim.metrics.summary import summarize

    gpu_only = summarize(_run(0))
    s = summarize(_run(64, write_through))
    assert s["prefix_hits_gpu"] + s["prefix_hits_host"] == s["prefix_hits"]
    assert s["prefix_hits_host"] > 0 and s["prefix_hit_rate"] > gpu_only["prefix_hit_rate"]
    assert s["host_max_used_blocks"] <= s["host_cache_blocks"] == 64
    block_bytes = 16 * get_model("opt-13b").bytes_per_token
    assert s["host_loaded_bytes"] == s["host_loaded_blocks"] * block_bytes
    assert s["host_loaded_blocks"] * 16 == s["prefix_hits_host"]  # one load per hit block
    assert (s["host_written_through_blocks"] > 0) == write_through
    assert s["host_offloaded_bytes"] == block_bytes * (s["host_written_back_blocks"]
                                                       + s["host_written_through_blocks"])
    assert 0 < s["host_transfer_s"] and math.isfinite(s["host_mean_used_blocks"])


def test_copies_not_overlapped_cost_more():
    from pagedsim.metrics.summary import summarize

    assert (summarize(_run(64, overlap=False))["host_transfer_s"]
            > summarize(_run(64))["host_transfer_s"])


def test_an_experiment_sizes_its_tier_in_gib():
    exp = Experiment(model="llama-3.1-8b", gpu="h200-141gb", workload="multi-turn",
                     num_requests=20, host_cache_gb=1000)
    assert exp.host_cache_blocks() == 1000 * 2**30 // (16 * 128 * 1024) == 512_000
    assert "host tier 1000 GiB (write-back, overlapped)" in exp.label()
    assert replace(exp, host_cache_gb=0).host_cache_blocks() == 0
    for bad in (-1, math.inf, math.nan, "8", True):
        with pytest.raises(ValueError, match="host_cache_gb"):
            replace(exp, host_cache_gb=bad)
    summary, _ = run_scheme(replace(exp, host_cache_gb=1.0), "radix", keep_steps=False)
    assert summary["host_cache_gb"] == 1.0 and summary["host_cache_blocks"] == 512
