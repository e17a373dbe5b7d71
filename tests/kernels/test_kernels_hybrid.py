"""A decoder with sliding-window layers on the hybrid manager's cache (issue 24, part 3):
the same tokens as the dense reference, K/V where the allocator says, and measured equal
to simulated at every step while the sliding group gives blocks back behind the window."""

from __future__ import annotations

import pytest
import torch
from kernels_helpers import BACKENDS

from pagedsim.kernels import Decoder, HybridKVCache, ModelConfig, PagedKVCache
from pagedsim.kernels.measure import MeasureConfig, measure_scheme
from pagedsim.memory.hybrid_groups import NULL_BLOCK

WINDOWS = (5, 0, 5, 0)  # gpt-oss's pattern: sliding, full, sliding, full
MODEL = ModelConfig(vocab_size=256, hidden_size=64, num_layers=4, num_heads=4, num_kv_heads=2,
                    head_dim=32, intermediate_size=128, layer_windows=WINDOWS)


def test_windows_change_the_model_and_the_cache_layout():
    dec = Decoder(MODEL)
    prompt = list(range(3, 17))
    windowed = dec.forward_dense(prompt)[0]
    full = Decoder(ModelConfig(**{**{f: getattr(MODEL, f) for f in MODEL.__slots__},
                                  "layer_windows": ()})).forward_dense(prompt)[0]
    assert not torch.allclose(windowed, full, atol=1e-3)  # the window is really applied
    cache = dec.make_cache(24, 4, "hybrid", 64)
    assert isinstance(cache, HybridKVCache)
    groups = cache.allocator.groups
    assert [(g.kind, g.layer_indices) for g in groups] == [("full", (1, 3)), ("sliding", (0, 2))]
    # The same bytes: twice the blocks, each holding two layers' pages.
    assert cache.config.num_blocks == 48 and len(cache.k_caches) == 2
    assert isinstance(dec.make_cache(24, 4, "paged", 64), PagedKVCache)


@pytest.mark.slow
@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("scheme", ["hybrid", "all-full", "paged"])
def test_generation_through_any_cache_is_the_dense_reference(scheme, backend_name):
    """n = 2 samples: the fork shares both groups' blocks, the first decode copies the
    partial last block in each; the sliding group gives blocks back as the samples grow."""
    dec = Decoder(MODEL)
    cache = dec.make_cache(24, 4, scheme, 64)
    cache.backend = backend_name
    prompt = list(range(1, 12))
    got = dec.generate(prompt, 12, n=2, cache=cache, keep_in_cache=True)
    want = dec.generate_dense(prompt, 12, n=2)
    assert got.token_ids == want.token_ids
    for a, b in zip(got.logits, want.logits, strict=True):
        assert torch.allclose(a, b, atol=1e-4)
    if scheme == "hybrid":
        alloc = cache.allocator
        assert sum(alloc.window_freed_blocks) > 0
        for seq_id in got.seq_ids:
            slide = alloc.block_table(seq_id, 1)
            assert slide.count(NULL_BLOCK) == (alloc.seq_len(seq_id) - 5) // 4
        # The cache holds each layer's K/V where its group's table says: the dense K/V of
        # every token for full layers, of the window's tokens for sliding ones.
        seq = got.seq_ids[0]
        tokens = prompt + got.token_ids[0][:-1]
        dense_kv = dec.forward_dense(tokens)[1]
        n = len(tokens)
        for layer, (k_ref, _) in enumerate(dense_kv):
            k, _ = cache.gather(layer, seq)
            lo = 0 if WINDOWS[layer] == 0 else (n - 5) // 4 * 4
            assert torch.allclose(k[lo:], k_ref[lo:], atol=1e-4), layer
            assert torch.isnan(k[:lo]).all()


def _measure(scheme: str, **kw):
    cfg = MeasureConfig(schemes=(scheme,), model=MODEL, backend="torch", **kw)
    return measure_scheme(cfg, scheme)


@pytest.mark.parametrize("kw", [dict(), dict(n=2, num_blocks=16), dict(policy="chunked",
                                                                       max_num_batched_tokens=8)])
def test_measured_equals_simulated_while_blocks_leave_the_window(kw):
    m = _measure("hybrid", **kw)
    assert m.window_freed_blocks > 0 and m.rejections == []
    assert m.max_token_gap_slots == 0 and m.max_cached_gap_slots == 0
    frame = m.frame
    assert (frame["token_gap_slots"] == 0).all() and len(frame) > 20


def test_measured_equals_simulated_with_prefix_hits_intersected_over_groups():
    m = _measure("hybrid-prefix-cache", workload="system-prompt", num_requests=10)
    assert m.prefix_hit_tokens > 0 and m.window_freed_blocks > 0
    assert m.max_token_gap_slots == 0 and m.max_cached_gap_slots == 0


def test_the_all_full_variant_holds_more_for_the_same_requests():
    """Same bytes, same requests: the hybrid pool's sliding group gives blocks back, so
    fewer requests wait and none is preempted where the all-full pool preempts."""
    full, hyb = _measure("all-full", num_blocks=16), _measure("hybrid", num_blocks=16)
    assert full.max_token_gap_slots == hyb.max_token_gap_slots == 0
    assert int(hyb.frame["preemptions"].sum()) < int(full.frame["preemptions"].sum())
    assert hyb.frame["running"].mean() > full.frame["running"].mean()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_sliding_window_on_the_gpu_matches_the_reference_in_bf16():  # pragma: no cover
    from kernels_helpers import REL_TOL, rel_err
    from test_kernels_sliding import windowed_batch

    from pagedsim import kernels

    case = dict(seq_lens=[4000, 129, 128, 7], num_kv_heads=8, group=8, head_dim=64,
                block_size=16, dtype=torch.bfloat16, seed=1)
    batch = windowed_batch(case, 128, "cuda")
    for splits in (None, 1, 4):
        out = kernels.paged_attention(batch.q, batch.k_cache, batch.v_cache,
                                      batch.block_tables, batch.seq_lens, num_splits=splits,
                                      window_tokens=128)
        ref = kernels.paged_attention_reference(batch.q, batch.k_cache, batch.v_cache,
                                                batch.block_tables, batch.seq_lens,
                                                window_tokens=128)
        assert rel_err(out, ref) <= REL_TOL[torch.bfloat16]
