"""The hybrid KV-cache manager (issue 24): KV-cache groups sharing one pool, sliding-window
groups that give blocks back behind the window, hits intersected over the groups, the
accounting per group, and what it changes for a hybrid model's batch."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from pagedsim.engine.cost import CostModel
from pagedsim.engine.scheduler import SchedulerConfig
from pagedsim.engine.simulator import simulate
from pagedsim.errors import OutOfMemoryError
from pagedsim.experiments import Experiment
from pagedsim.memory.accounting import CATEGORIES, account
from pagedsim.memory.hybrid import HybridAllocator
from pagedsim.memory.hybrid_groups import NULL_BLOCK, GroupSpec, hybrid_layout
from pagedsim.memory.schemes import (
    DEFAULT_SCHEMES,
    HYBRID_DEFAULT_SCHEMES,
    default_schemes,
    make_allocator,
)
from pagedsim.metrics.summary import summarize
from pagedsim.models.specs import get_gpu, get_model
from pagedsim.models.vllm_kv import vllm_kv_cache
from pagedsim.units import GiB
from pagedsim.workloads.workload import Request

FULL, SLIDE = GroupSpec("full"), GroupSpec("sliding", 9)  # W = 9: two blocks of 4 back


def hybrid(num_blocks=40, bs=4, groups=(FULL, SLIDE), cache=False) -> HybridAllocator:
    return HybridAllocator(num_blocks, bs, groups, prefix_cache=cache)


# ------------------------------------------------------------------ the layout
@pytest.mark.parametrize("name, groups, per_block_layers", [
    ("gpt-oss-120b", [("full", 0, 18), ("sliding", 128, 18)], 18),
    ("gpt-oss-20b", [("full", 0, 12), ("sliding", 128, 12)], 12),
    ("gemma-3-27b", [("full", 0, 10)] + [("sliding", 1024, 9)] * 4
     + [("sliding", 1024, 8)] * 2, 10),
])
def test_layout_is_vllms_groups_and_block_count(name, groups, per_block_layers):
    model = get_model(name)
    layout = hybrid_layout(model, 10 * GiB)
    assert [(g.kind, g.window_tokens, g.num_layers) for g in layout.groups] == groups
    assert layout.num_blocks == vllm_kv_cache(model, 10 * GiB).num_blocks
    page = 16 * 2 * model.num_kv_heads * model.head_dim * model.dtype_bytes
    assert layout.block_bytes == page * per_block_layers
    assert layout.num_blocks == 10 * GiB // layout.block_bytes
    off = hybrid_layout(model, 10 * GiB, hybrid=False)  # every layer full: one group
    assert [g.kind for g in off.groups] == ["full"]
    assert off.num_blocks == 10 * GiB // (16 * model.bytes_per_token)


def test_fp8_doubles_the_blocks_and_mla_is_one_latent_group():
    model = get_model("gpt-oss-120b")
    bf16, fp8 = (hybrid_layout(model, 10 * GiB, kv_cache_dtype=d) for d in ("auto", "fp8"))
    assert fp8.block_bytes * 2 == bf16.block_bytes
    assert fp8.num_blocks == 10 * GiB // fp8.block_bytes > bf16.num_blocks
    mla = hybrid_layout(get_model("deepseek-v3"), 10 * GiB)
    assert [(g.kind, g.num_layers) for g in mla.groups] == [("mla", 61)]
    assert mla.block_bytes == 16 * (512 + 64) * 2 * 61  # one latent per token and layer


def test_compare_picks_the_hybrid_pair_for_sliding_window_models():
    assert default_schemes("gpt-oss-120b") == default_schemes("gemma-3-27b") \
        == HYBRID_DEFAULT_SCHEMES == ("all-full", "hybrid")
    assert default_schemes("opt-13b") == default_schemes("deepseek-v3") == DEFAULT_SCHEMES


def test_the_same_bytes_give_the_hybrid_pool_twice_the_blocks_for_gpt_oss():
    model = get_model("gpt-oss-120b")
    full = make_allocator("all-full", 16 * 1000, 16, 4096, model=model)
    hyb = make_allocator("hybrid", 16 * 1000, 16, 4096, model=model)
    assert full.num_blocks == 1000 and len(full.groups) == 1
    assert hyb.num_blocks == 2000 and [g.kind for g in hyb.groups] == ["full", "sliding"]


# ---------------------------------------------------------- the sliding window
def test_a_sliding_group_gives_back_what_falls_behind_the_window():
    a = hybrid()
    a.allocate(1, 10, 40)  # 3 blocks in each group: the prefill reads whole windows
    assert [len(t) - t.count(NULL_BLOCK) for t in a.block_tables(1)] == [3, 3]
    for _ in range(20):
        a.append_slot(1)
        a.check_invariants()
        n = a.seq_len(1)
        full, slide = a.block_tables(1)
        assert NULL_BLOCK not in full
        # The query of the last token appended read tokens n - 9 .. n - 1: blocks wholly
        # before token n - 9 are null, the others held.
        assert slide.count(NULL_BLOCK) == max(n - 9, 0) // 4
        assert len(slide) - slide.count(NULL_BLOCK) == SLIDE.blocks_held(n, 4)
        assert len(slide) - slide.count(NULL_BLOCK) <= math.ceil((9 - 1) / 4) + 1
    assert a.seq_len(1) == 30
    assert a.window_dropped_entries == [0, 5] and a.window_freed_blocks == [0, 5]
    assert a.group_blocks == [8, 3]
    assert a.window_null_entries() == [0, 5]
    a.free(1)
    a.check_invariants()
    assert a.group_blocks == [0, 0] and a.num_free_slots == a.capacity_slots


def test_gpt_oss_keeps_nine_sliding_blocks_however_long_it_decodes():
    a = make_allocator("hybrid", 16 * 400, 16, 8192, model="gpt-oss-120b")
    a.allocate(1, 1000, 2000)
    held = []
    for _ in range(600):
        a.append_slot(1)
        slide = a.block_table(1, group=1)
        held.append(len(slide) - slide.count(NULL_BLOCK))
        assert held[-1] == a.groups[1].blocks_held(a.seq_len(1), 16)
    assert max(held) == math.ceil(127 / 16) + 1 == 9 and min(held) == 8
    full = a.block_table(1)
    assert len(full) == 100 and NULL_BLOCK not in full
    a.check_invariants()


def test_a_chunk_reads_from_its_first_token_and_fork_shares_every_group():
    a = hybrid()
    a.allocate(1, 12, 40)
    a.extend(1, 8)  # the chunk's first query (token 12) reads from token 4 on: block 0 goes
    assert a.block_tables(1)[1][:2] == [NULL_BLOCK, a.block_tables(1)[1][1]]
    a.fork(1, 2)
    assert a.block_tables(2) == a.block_tables(1)
    slot, copies = a.append_slot(2)  # length 20: a fresh block in each group, no copy
    assert copies is None and slot == a.slot_of(2, 20)
    slot, copies = a.append_slot(1)
    a.fork(1, 3)  # 21 tokens: the partial last block shared in both groups
    slot, copies = a.append_slot(3)
    assert isinstance(copies, list) and len(copies) == 2  # one copy-on-write per group
    assert all(c.num_slots == 21 % 4 for c in copies)
    a.check_invariants()


def test_room_is_answered_exactly_with_blocks_given_back_first():
    a = hybrid(num_blocks=7)
    a.allocate(1, 9, 40)  # 3 + 3 blocks, 1 free
    for _ in range(3):
        a.append_slot(1)  # 12 tokens: the full group's 3 blocks are full
    assert a.pool.get_num_free_blocks() == 1
    # Token 12 needs a block in each group; its query reads from token 4, so the sliding
    # group first gives back block 0: exactly enough.
    assert a.can_append_all([1]) and a.can_extend(1, 1)
    assert not a.can_extend(1, 5)
    a.append_slot(1)
    assert a.pool.get_num_free_blocks() == 0
    before = a.snapshot()
    with pytest.raises(OutOfMemoryError):
        a.extend(1, 5)
    assert a.snapshot() == before


def test_groups_partition_the_pool_in_the_six_way_account():
    a = hybrid(num_blocks=30)
    a.allocate(1, 14, 30)
    a.allocate(2, 5, 9)
    for _ in range(9):
        a.append_slot(1)
    rows = a.group_accounts()
    *groups, total = rows
    assert [r["kind"] for r in groups] == ["full", "sliding"]
    assert total["blocks"] == sum(r["blocks"] for r in groups) == 30 - a.pool.get_num_free_blocks()
    parts = ("token", "reserved", "internal_frag", "cached")
    assert sum(total[p] for p in parts) + total["free"] == a.capacity_slots
    acct = account(a)
    assert sum(getattr(acct, c) for c in CATEGORIES) == a.capacity_slots
    assert (acct.token, acct.reserved, acct.internal_frag) == tuple(
        total[p] for p in parts[:3])
    # Sequence 1 (23 tokens, final 30): 6 blocks in the full group; the query of token 22
    # read from token 14, so the sliding group holds blocks 3 to 5 (tokens 12 to 22).
    # Sequence 2 (5 tokens, final 9, never grown) holds its 2 blocks in each group.
    full, slide = a.group_usage(0), a.group_usage(1)
    assert (full.physical_blocks, full.token_slots, full.reserved_slots) == (6 + 2, 23 + 5, 1 + 3)
    assert (slide.physical_blocks, slide.token_slots, slide.reserved_slots) == (3 + 2, 11 + 5,
                                                                               1 + 3)


# ------------------------------------------------------------- prefix caching
def test_a_hit_is_the_longest_prefix_every_group_accepts():
    a = hybrid(cache=True)
    cache, chain = a.cache, list(range(100, 106))
    cached = a.pool.cached

    def holds(group, blocks):
        for j in blocks:
            cached[(group, chain[j])] = 0  # a name in the map is what a lookup sees

    holds(0, range(6))
    holds(1, [0, 1, 3, 4])  # W = 9: a hit needs the two blocks before its end
    assert cache.group_hit(0, chain, 6) == 6 and cache.group_hit(1, chain, 6) == 5
    assert cache.hit_blocks(chain, 6) == 5
    del cached[(1, chain[4])]
    assert cache.group_hit(1, chain, 6) == 2  # blocks 0-1 end the only run of two
    assert cache.hit_blocks(chain, 6) == 2
    cached.clear()
    holds(0, range(2))
    holds(1, [3, 4])  # the sliding group's run is past the full group's hit: none
    assert cache.hit_blocks(chain, 6) == 0


def test_prefix_cache_serves_a_repeated_prompt_from_every_group():
    a = hybrid(cache=True)
    r = Request(1, 0.0, 20, 4, prompt_pieces=(7,), prompt_piece_tokens=64)
    assert a.allocate_group([1], 20, 24, block_hashes=r)
    for _ in range(4):
        a.append_slot(1)
    a.free(1)  # its blocks stay cached, the sliding group's behind the window too
    r2 = Request(2, 0.0, 22, 4, prompt_pieces=(7,), prompt_piece_tokens=64)
    assert a.lookup_prefix(r2, 22, 2) == 20
    assert a.allocate_group([2], 22, 26, block_hashes=r2) and a.prefix_hit_tokens(2) == 20
    full, slide = a.block_tables(2)
    assert slide[:3] == [NULL_BLOCK] * 3  # only the last two hit blocks are held
    assert slide[3:5] == full[3:5] or a.ref_count(slide[3]) == 1
    a.check_invariants()


# ------------------------------------------------------------ in the simulator
def _run(scheme: str, requests: list[Request], capacity_slots: int, policy: str = "v0"):
    model = get_model("gpt-oss-120b")
    alloc = make_allocator(scheme, capacity_slots, 16, 8192, model=model)
    cfg = SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=8192, policy=policy,
                          max_model_len=8192)
    return summarize(simulate(requests, alloc, CostModel(model, get_gpu("h100-80gb")), cfg,
                              scheme=scheme, progress=False))


REQUESTS = [Request(i, 0.05 * i, 300 + 37 * (i % 11), 200 + 53 * (i % 7)) for i in range(120)]


def test_all_full_is_the_paged_allocator_block_for_block():
    paged, full = (_run(s, REQUESTS, 16 * 600) for s in ("paged", "all-full"))
    keys = ("mean_batch_size", "throughput_tokens_per_s", "preemptions", "sim_time_s",
            *(f"all_{c}" for c in CATEGORIES))
    assert {k: paged[k] for k in keys} == {k: full[k] for k in keys}


@pytest.mark.parametrize("policy", ["v0", "chunked"])
def test_hybrid_batches_more_than_all_full_on_the_same_requests(policy):
    full, hyb = (_run(s, REQUESTS, 16 * 600, policy) for s in HYBRID_DEFAULT_SCHEMES)
    assert full["preemptions"] > 0  # the pool binds
    assert hyb["mean_batch_size"] > full["mean_batch_size"]
    assert hyb["throughput_tokens_per_s"] > full["throughput_tokens_per_s"]
    assert hyb["preemptions"] < full["preemptions"]


def test_an_experiment_with_a_sliding_model_has_window_groups_only_under_hybrid():
    from pagedsim.experiments.hybrid_report import group_timeline, has_window_groups

    exp = Experiment(model="gpt-oss-20b", gpu="h100-80gb", num_requests=40, rate_per_s=5.0)
    assert has_window_groups(exp, "hybrid") and not has_window_groups(exp, "all-full")
    assert not has_window_groups(exp, "paged")
    frame = group_timeline(exp, "hybrid")
    last = frame[frame["step"] == frame["step"].max()]
    assert list(last["kind"]) == ["full", "sliding"]
    assert last["freed_blocks_total"].iloc[1] > 0 and last["freed_blocks_total"].iloc[0] == 0
    # every step: the sliding group holds no more than the full one
    wide = frame.pivot_table(index="step", columns="group", values="blocks")
    assert (wide[1] <= wide[0]).all()


def test_compare_on_gpt_oss_writes_the_groups_figure(tmp_path, capsys):
    """``pagedsim compare --model gpt-oss-...``: the all-full and hybrid rows, a line saying
    how many blocks the sliding group gave back, and the per-group CSV and figure."""
    import pandas as pd

    from pagedsim.cli import main

    argv = ["compare", "--model", "gpt-oss-20b", "--gpu", "h100-80gb", "--num-requests", "30",
            "--jobs", "1", "--out", str(tmp_path), "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "all-full" in out and "hybrid" in out
    assert "hybrid: its sliding-window groups gave" in out
    frame = pd.read_csv(tmp_path / "compare_hybrid_groups.csv")
    assert set(frame["scheme"]) == {"hybrid"} and set(frame["kind"]) == {"full", "sliding"}
    freed = frame[frame["kind"] == "sliding"]["freed_blocks_total"].max()
    assert freed > 0 and f"gave {freed:,} blocks back" in out
    assert (tmp_path / "compare_hybrid_groups_hybrid.png").stat().st_size > 0


def test_a_refused_admission_is_retried_once_the_window_gives_blocks_back(monkeypatch):
    """Request 0 (64 tokens) fills 32 of 40 blocks; request 1 needs 20 and waits. At request
    0's first decode its sliding group gives 14 blocks back: request 1 starts then, long
    before request 0 finishes, though the scheduler released nothing (it retries a refused
    admission only when memory came back: ``freed_while_running_blocks`` says so)."""
    from pagedsim.memory.kv_cache_manager import KVCacheManager

    def starts_and_ends():
        alloc = HybridAllocator(40, 4, (FULL, SLIDE))
        reqs = [Request(0, 0.0, 64, 40), Request(1, 0.0, 40, 4)]
        # For the step times only: gpt-oss-20b, its sliding layers given the toy window.
        oss = get_model("gpt-oss-20b")
        model = replace(oss, layers=tuple(replace(layer, window_tokens=SLIDE.window_tokens)
                                          if layer.kind == "sliding" else layer
                                          for layer in oss.layers))
        res = simulate(reqs, alloc, CostModel(model, get_gpu("h100-80gb")), SchedulerConfig(),
                       progress=False)
        rows = {row[0]: row for row in res.request_rows}
        return rows[1][6], rows[0][8]  # request 1's first scheduling, request 0's finish

    started, finished = starts_and_ends()
    assert started < finished
    monkeypatch.setattr(KVCacheManager, "freed_while_running_blocks", property(lambda _: 0))
    started, finished = starts_and_ends()  # blind to the window: it waits for the release
    assert started >= finished
