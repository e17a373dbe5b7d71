"""The vAttention KV cache (kernels/vattention_cache.py) on real tensors.

Configs are chosen so that pages hold a few tokens: a 64 KiB page over fp32 rows of
``num_kv_heads * head_dim * 4`` bytes, e.g. 16 x 256 x 4 = 16 KiB rows -> 4 tokens per
page, 4 x 256 x 4 = 4 KiB -> 16. The Triton interpreter is slow, so only the decoder
test and the attention test run it; the rest use the torch backend or no kernel.

Measured vs simulated runs with recompute and with swap preemption; one test forces a
group to fork and be swapped out in the same step (the executor once read the
swap-out before the fork copies, and the children came back as NaN).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from kernels_helpers import BACKENDS, REL_TOL, device_for, rel_err

import pagedsim
from pagedsim.kernels import (
    Decoder,
    Generation,
    KVCacheConfig,
    ModelConfig,
    VAttentionKVCache,
    paged_attention_reference,
)
from pagedsim.kernels.executor import RealExecutor
from pagedsim.kernels.measure import MeasureConfig, measure_scheme, model_spec
from pagedsim.kernels.vattention_cache import kernel_block_size, page_bytes_for_scheme
from pagedsim.memory.schemes import kv_cache_class

PROMPT = [5, 17, 300, 42, 7, 99, 1, 2, 3]  # 9 tokens: part of a 16-token page
NEW_TOKENS = 12  # 9 + 11 fed tokens = 20: every sample grows into a second page
LOGITS_TOL = 1e-4


def cache_config(num_kv_heads: int, head_dim: int, num_slots: int, num_layers: int = 2,
                 device: str | None = None) -> KVCacheConfig:
    """A pool of ``num_slots`` slots (blocks of 4: only the slot count matters here)."""
    kw = {} if device is None else {"device": device}
    return KVCacheConfig(num_layers, num_kv_heads, head_dim, num_slots // 4, 4, **kw)


def write_dense(cache: VAttentionKVCache, seq_id, start: int, end: int,
                dense: dict, gen: torch.Generator) -> None:
    """Random K/V for tokens ``start .. end-1`` of ``seq_id`` in every layer, written
    through the allocator's slots and remembered in ``dense[(seq_id, layer)]``."""
    c = cache.config
    slots = cache.slot_mapping([seq_id], start, end)  # [end - start]
    for layer in range(c.num_layers):
        k = torch.randn(end - start, c.num_kv_heads, c.head_dim, generator=gen)  # [T, KVH, D]
        v = torch.randn(end - start, c.num_kv_heads, c.head_dim, generator=gen)
        k, v = k.to(c.device, c.dtype), v.to(c.device, c.dtype)
        cache.write(layer, k, v, slots)
        old_k, old_v = dense.get((seq_id, layer), (k[:0], v[:0]))
        dense[(seq_id, layer)] = (torch.cat([old_k, k]), torch.cat([old_v, v]))


def assert_views_equal_dense(cache: VAttentionKVCache, dense: dict) -> None:
    for (seq_id, layer), (k, v) in dense.items():
        got_k, got_v = cache.contiguous_view(layer, seq_id)
        assert got_k.shape == k.shape == (cache.seq_len(seq_id), cache.config.num_kv_heads,
                                          cache.config.head_dim)
        assert torch.equal(got_k, k) and torch.equal(got_v, v), (seq_id, layer)


# --------------------------------------------------------------------------- registry


def test_make_cache_through_the_registry_64k() -> None:
    assert kv_cache_class("vattention-64k") is VAttentionKVCache
    model = Decoder(ModelConfig(num_heads=8, num_kv_heads=4, head_dim=256))
    cache = model.make_cache(num_blocks=10, block_size=4, scheme="vattention-64k",
                             max_model_len=64)  # 40 slots
    # 4 kv heads x 256 x 4 bytes = 4 KiB rows: 16 tokens per 64 KiB page; 40 slots hold
    # 2 whole pages (the remaining 8 slots are no page) and the tensors are reshaped so.
    assert isinstance(cache, VAttentionKVCache)
    assert (cache.page_tokens, cache.num_pages, cache.blocks_per_page) == (16, 2, 1)
    assert (cache.config.num_blocks, cache.config.block_size) == (2, 16)
    assert cache.k_caches[0].shape == (2, 16, 4, 256)
    # The simulator cuts the same pool the same way.
    sim = pagedsim.make_allocator("vattention-64k", 40, 4, 64,
                                  model=model_spec(model.config, 64))
    assert (sim.num_blocks, sim.block_size) == (cache.num_pages, cache.page_tokens)
    assert (cache.allocator.max_model_len, cache.allocator.max_regions) == (64, 256)


def test_make_cache_through_the_registry_2mib_pages_cut_into_kernel_blocks() -> None:
    assert kv_cache_class("vattention") is VAttentionKVCache
    model = Decoder(ModelConfig(num_heads=8, num_kv_heads=4, head_dim=128))
    cache = model.make_cache(num_blocks=9, block_size=256, scheme="vattention")
    # 2 KiB rows: 1,024 tokens per 2 MiB page, more than the kernels' largest block
    # (256), so each page is 4 consecutive blocks of 256.
    assert (cache.page_tokens, cache.num_pages, cache.blocks_per_page) == (1024, 2, 4)
    assert (cache.config.num_blocks, cache.config.block_size) == (8, 256)
    cache.add("a", 1030)  # 2 pages: all 4 blocks of the first, 1 of the second
    first, second = cache.pages("a")
    assert cache.block_table("a") == [first * 4 + j for j in range(4)] + [second * 4]


def test_page_size_from_the_scheme_name_and_pools_without_a_page() -> None:
    assert page_bytes_for_scheme("vattention") == 2 * 1024 * 1024
    assert page_bytes_for_scheme("vattention-64k") == 64 * 1024
    with pytest.raises(ValueError, match="not a vattention scheme"):
        page_bytes_for_scheme("paged")
    with pytest.raises(ValueError, match="unknown scheme"):
        page_bytes_for_scheme("vattention-1k")
    with pytest.raises(ValueError, match="holds no page"):  # 12 slots < 16 per page
        VAttentionKVCache.for_scheme(cache_config(4, 256, 12), "vattention-64k")
    with pytest.raises(ValueError, match="holds no token"):  # 2 MiB rows in a 64 KiB page
        VAttentionKVCache.for_scheme(
            KVCacheConfig(1, 2048, 256, 1, 4), "vattention-64k")


def test_kernel_block_size_divides_the_page() -> None:
    assert kernel_block_size(16) == 16
    assert kernel_block_size(256) == 256
    assert kernel_block_size(1024) == 256
    assert kernel_block_size(5461) == 127  # 5461 = 43 x 127 (a 2 MiB page of 384 B rows)
    assert kernel_block_size(257) == 1  # a prime: only blocks of one token divide it


def test_cache_and_allocator_must_agree() -> None:
    alloc = pagedsim.make_allocator("vattention-64k", 64, model=pagedsim.ModelSpec(
        "m", 1, 4, 4, 256, 4, 0, 64))  # 4 pages of 16 tokens
    with pytest.raises(ValueError, match="not whole blocks"):
        VAttentionKVCache(KVCacheConfig(1, 4, 256, 2, 32), alloc)
    with pytest.raises(ValueError, match="the cache 32 slots"):
        VAttentionKVCache(KVCacheConfig(1, 4, 256, 2, 16), alloc)
    with pytest.raises(TypeError, match="VAttentionAllocator"):
        VAttentionKVCache(KVCacheConfig(1, 4, 256, 4, 16), pagedsim.PagedAllocator(4, 16))


# ----------------------------------------------------------------- contiguous view


def test_contiguous_view_equals_the_dense_reference_through_growth_fork_and_swap() -> None:
    gen = torch.Generator().manual_seed(0)
    # 16 kv heads x 256 x 4 bytes = 16 KiB rows: 4 tokens per page; 16 pages.
    cache = VAttentionKVCache.for_scheme(cache_config(16, 256, 64), "vattention-64k",
                                         max_model_len=32)
    cache.backend = "torch"
    assert cache.page_tokens == 4
    dense: dict = {}
    # Free two early pages in the order that hands them back reversed, so that A's pages
    # are out of order: the view must follow the page table, not physical order.
    for s in ("x", "y", "z"):
        cache.add(s, 4)
    cache.free("x")
    cache.free("z")
    cache.add("A", 9)  # 3 pages, the last one a quarter full
    write_dense(cache, "A", 0, 9, dense, gen)
    assert cache.pages("A") != sorted(cache.pages("A"))
    cache.add("B", 4)  # exactly one page
    write_dense(cache, "B", 0, 4, dense, gen)
    assert_views_equal_dense(cache, dense)

    # Growth page by page: A's 4 appends fill its third page and map a fourth.
    for t in range(9, 13):
        slot = cache.append_slots(["A"])
        assert int(slot) == cache.allocator.slot_of("A", t)
        write_dense(cache, "A", t, t + 1, dense, gen)
    assert len(cache.pages("A")) == 4
    assert_views_equal_dense(cache, dense)

    # A fork copies A's pages into pages of its own: same view, nothing shared.
    cache.fork("A", "C")
    assert cache.num_copied_blocks == 4
    assert not set(cache.pages("A")) & set(cache.pages("C"))
    for layer in range(2):
        dense[("C", layer)] = dense[("A", layer)]
    assert_views_equal_dense(cache, dense)
    cache.append_slots(["C"])  # C's next token lands in C's pages only
    write_dense(cache, "C", 13, 14, dense, gen)
    assert_views_equal_dense(cache, dense)  # A unchanged

    # Swap A out, let B take pages, swap A back into different ones: the same view.
    before = cache.pages("A")
    swapped = cache.swap_out(["A"])
    cache.append_slots(["B"])
    write_dense(cache, "B", 4, 5, dense, gen)
    cache.swap_in(swapped)
    assert cache.pages("A") != before
    assert_views_equal_dense(cache, dense)
    # The view equals the slot-by-slot gather as well (a different path to the same rows).
    for layer in range(2):
        for seq_id in ("A", "B", "C"):
            got, want = cache.contiguous_view(layer, seq_id), cache.gather(layer, seq_id)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    cache.allocator.check_invariants()


def dense_decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Independent reference: SDPA over dense ``k, v [L, KVH, D]`` for ``q [H, D]``."""
    group = q.shape[0] // k.shape[1]
    kh = k.double().repeat_interleave(group, dim=1).transpose(0, 1)  # [H, L, D]
    vh = v.double().repeat_interleave(group, dim=1).transpose(0, 1)  # [H, L, D]
    return F.scaled_dot_product_attention(q.double()[:, None, :], kh, vh)[:, 0]  # [H, D]


# (kv heads, head_dim, pool slots, scheme, sequence lengths): 16-token pages with GQA
# group 4, and 2 MiB pages of 1,024 tokens read as 4 blocks of 256 (one sequence spans
# two pages, so the table crosses a page boundary).
ATTENTION_CASES = [
    pytest.param(2, 256, 160, "vattention-64k", [40, 1, 16, 17], id="64k-pages-of-32"),
    pytest.param(4, 256, 160, "vattention-64k", [40, 1, 16, 17], id="64k-pages-of-16"),
    pytest.param(4, 128, 4096, "vattention", [1100, 300], id="2mib-pages-of-1024"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("kvh", "head_dim", "slots", "scheme", "lens"), ATTENTION_CASES)
def test_attend_contiguous_equals_the_paged_kernel_and_the_reference(
        backend: str, kvh: int, head_dim: int, slots: int, scheme: str,
        lens: list[int]) -> None:
    gen = torch.Generator().manual_seed(sum(lens) + kvh)
    cfg = cache_config(kvh, head_dim, slots, device=device_for(backend))
    cache = VAttentionKVCache.for_scheme(cfg, scheme, max_model_len=slots)
    cache.backend = "torch"  # writes in torch (the interpreter's write_kv is slow) ...
    dense: dict = {}
    ids = [f"s{i}" for i in range(len(lens))]
    # Map pages for every sequence, the first one a page short; then grow it token by
    # token into a page mapped after the others', so its pages are not consecutive.
    n0 = lens[0] - cache.page_tokens
    for seq_id, n in zip(ids, lens, strict=True):
        cache.add(seq_id, n0 if seq_id == "s0" else n)
    for _ in range(n0, lens[0]):
        cache.append_slots(["s0"])
    assert [cache.seq_len(s) for s in ids] == lens
    pages = cache.pages("s0")
    assert pages[-1] != pages[-2] + 1
    for seq_id in ids:
        write_dense(cache, seq_id, 0, cache.seq_len(seq_id), dense, gen)
    num_heads = 4 * kvh if scheme.endswith("64k") else 2 * kvh
    layer = 1  # not layer 0: a mix-up between layers would show
    q = torch.randn(len(ids), num_heads, head_dim, generator=gen).to(cfg.device)  # [S, H, D]

    cache.backend = backend  # ... attention on the backend under test
    got = cache.attend_contiguous(layer, q, ids)  # [S, H, D]
    tables, seq_lens = cache.attention_metadata(ids)
    kernel = cache.attend(layer, q, tables, seq_lens)  # [S, H, D]
    ref = paged_attention_reference(q, cache.k_caches[layer], cache.v_caches[layer], tables,
                                    seq_lens)  # fp64 [S, H, D]
    dense_ref = torch.stack([dense_decode_attention(q[s].cpu(), *(t.cpu() for t in
                                                               dense[(seq_id, layer)]))
                             for s, seq_id in enumerate(ids)])
    tol = REL_TOL[torch.float32]
    assert got.shape == q.shape and got.dtype == q.dtype
    assert rel_err(got, ref) < tol, rel_err(got, ref)
    assert rel_err(kernel, ref) < tol, rel_err(kernel, ref)
    assert rel_err(got, kernel) < tol
    assert rel_err(ref, dense_ref) < 1e-12  # the reference read the right rows


def test_attend_contiguous_checks_its_inputs() -> None:
    cache = VAttentionKVCache.for_scheme(cache_config(4, 256, 64), "vattention-64k")
    cache.add("a", 3)
    cache.add("empty", 0)
    with pytest.raises(ValueError, match=r"q must be \[1, H, 256\]"):
        cache.attend_contiguous(0, torch.zeros(2, 8, 256), ["a"])
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        cache.attend_contiguous(0, torch.zeros(1, 6, 256), ["a"])
    with pytest.raises(ValueError, match="float16"):
        cache.attend_contiguous(0, torch.zeros(1, 8, 256, dtype=torch.float16), ["a"])
    with pytest.raises(ValueError, match="no token"):
        cache.attend_contiguous(0, torch.zeros(1, 8, 256), ["empty"])


# ----------------------------------------------------------------------- decoder


@pytest.fixture(scope="module")
def model() -> Decoder:
    # 4 kv heads x 256 x 4 bytes: 16 tokens per 64 KiB page (GQA group 2).
    return Decoder(ModelConfig(seed=1, hidden_size=64, num_heads=8, num_kv_heads=4,
                               head_dim=256))


def test_parallel_sampling_matches_the_paged_cache_and_copies_pages(model: Decoder) -> None:
    paged = model.make_cache(num_blocks=18, block_size=4)
    want = model.generate(PROMPT, NEW_TOKENS, n=3, cache=paged)
    cache = model.make_cache(num_blocks=24, block_size=4, scheme="vattention-64k",
                             max_model_len=64)  # 6 pages: 2 per sample
    got = model.generate(PROMPT, NEW_TOKENS, n=3, cache=cache, keep_in_cache=True)

    assert len(got.logits) == len(want.logits) == NEW_TOKENS
    for step, (a, b) in enumerate(zip(got.logits, want.logits, strict=True)):
        err = rel_err(a, b)
        assert err < LOGITS_TOL, f"step {step}: logits rel err {err}"
    assert got.token_ids == want.token_ids
    dense: Generation = model.generate_dense(PROMPT, NEW_TOKENS, n=3)
    assert got.token_ids == dense.token_ids
    assert max(rel_err(a, b) for a, b in zip(got.logits, dense.logits, strict=True)) \
        < LOGITS_TOL

    # Each fork copied the prompt's one page; every page has one owner.
    assert cache.num_copied_blocks == 2
    pages = [cache.pages(s) for s in got.seq_ids]
    assert all(len(p) == 2 for p in pages)  # 20 cached tokens: two pages each
    flat = [p for table in pages for p in table]
    assert len(set(flat)) == len(flat) == 6
    assert [cache.allocator.ref_count(p) for p in flat] == [1] * 6
    usage = cache.usage()
    assert usage.physical_blocks == usage.logical_blocks == 6
    cache.allocator.check_invariants()
    # The contiguous views hold exactly the K/V a full recompute produces.
    for seq_id, new in zip(got.seq_ids, got.token_ids, strict=True):
        _, kvs = model.forward_dense(PROMPT + new[:-1])  # the last sample was never fed
        for layer, (k, v) in enumerate(kvs):
            view_k, view_v = cache.contiguous_view(layer, seq_id)
            torch.testing.assert_close(view_k, k, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(view_v, v, rtol=1e-5, atol=1e-5)
    for seq_id in got.seq_ids:
        cache.free(seq_id)
    assert cache.allocator.num_free_blocks == 6


# ----------------------------------------------------------- measured vs simulated


@pytest.fixture
def measure_with_model(monkeypatch):
    """Count the forks that copied pages in each step the real executor runs."""
    forks: list[int] = []
    execute = RealExecutor.execute

    def counting(self, scheduler, plan) -> None:
        forks.append(sum(1 for f in plan.forks if f.copies))
        execute(self, scheduler, plan)

    monkeypatch.setattr(RealExecutor, "execute", counting)
    return forks


def vattention_measure(**kw) -> MeasureConfig:
    # 8 kv heads x 256 x 4 bytes = 8 KiB rows: 8 tokens per 64 KiB page. Such rows are
    # 32 times the default model's, so one layer keeps the run short.
    model = ModelConfig(vocab_size=256, hidden_size=64, num_layers=1, num_heads=8,
                        num_kv_heads=8, head_dim=256, intermediate_size=128)
    # 256 blocks of 4 = 128 pages: room for all 6 x 3 samples at their longest (6 pages
    # each), so nothing is preempted (see the next test for preemption).
    base = dict(schemes=("vattention-64k",), num_requests=6, n=3, num_blocks=256,
                block_size=4, backend="torch", model=model)
    base.update(kw)
    return MeasureConfig(**base)


def test_vattention_measured_token_slots_equal_simulated_at_every_step(
        measure_with_model) -> None:
    m = measure_scheme(vattention_measure(), "vattention-64k", progress=False)
    f = m.frame
    assert sum(measure_with_model) >= 6 * 2  # every request forked its 2 samples
    assert f["sim_internal_frag"].max() > 0  # partly filled last pages existed
    assert (f["meas_token_slots"] == f["sim_token"]).all()
    assert m.max_token_gap_slots == 0


def test_vattention_measurement_stays_exact_under_preemption(measure_with_model) -> None:
    # A pool of 20 pages for 8 requests, and no CPU swap space: preempted groups are
    # recomputed.
    m = measure_scheme(vattention_measure(num_requests=8, num_blocks=40, cpu_swap_slots=0),
                       "vattention-64k", progress=False)
    f = m.frame
    assert f["preemptions"].sum() > 0
    assert (f["meas_token_slots"] == f["sim_token"]).all()


def test_fork_and_swap_out_in_one_step_keeps_the_children(monkeypatch) -> None:
    """A group may fork its samples and be swapped out in the same step: the executor
    must copy the children's pages before it reads the swap-out (it used to read first,
    and the children came back from the CPU as NaN)."""
    both: list[int] = []
    execute = RealExecutor.execute

    def watching(self, scheduler, plan) -> None:
        forked = {f.child_id for f in plan.forks}
        if any(forked & set(g.seq_ids) for g in plan.swap_outs):
            both.append(plan.step)
        execute(self, scheduler, plan)

    monkeypatch.setattr(RealExecutor, "execute", watching)
    m = measure_scheme(vattention_measure(num_requests=10, num_blocks=100,
                                          preemption="swap"), "vattention-64k",
                       progress=False)
    assert both, "the run never forked and swapped out a group in one step"
    assert m.max_token_gap_slots == 0


def test_page_arithmetic_matches_the_model_spec() -> None:
    # The cache sizes pages from its own rows; a ModelSpec with the same rows agrees.
    cfg = cache_config(8, 256, 64, num_layers=3)
    cache = VAttentionKVCache.for_scheme(cfg, "vattention-64k")
    spec = pagedsim.ModelSpec("m", 3, 16, 8, 256, 4, 0, 2048)
    assert cache.page_tokens == 64 * 1024 // (8 * 256 * 4) == 8
    assert cache.page_tokens == pagedsim.make_allocator(
        "vattention-64k", 64, model=spec).block_size
    assert math.prod(cache.k_caches[0].shape) == 64 * 8 * 256
