"""vLLM v1's KV-cache sizing (pagedsim.models.vllm_kv): groups, blocks, the two logged lines.

Sizes in bytes per GPU; GiB = 2**30 bytes.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagedsim.models.specs import MODELS
from pagedsim.models.vllm_kv import vllm_kv_cache
from pagedsim.units import GiB, KiB, MiB


def test_the_issues_qwen3_14b_example() -> None:
    """LMCache#1739: 6.51 GiB, 160 KiB per token -> 2,666 blocks of 16 = 42,656 tokens."""
    r = vllm_kv_cache("qwen3-14b", round(6.51 * GiB), max_model_len=32768)
    assert r.bytes_per_token == 160 * KiB
    assert r.page_size_bytes == 16 * 2 * 8 * 128 * 2
    assert r.num_blocks == 2666
    assert r.log_lines() == ["GPU KV cache size: 42,656 tokens",
                             "Maximum concurrency for 32,768 tokens per request: 1.30x"]


def test_fp8_doubles_the_tokens() -> None:
    bf16 = vllm_kv_cache("llama-3.1-8b", 10 * GiB)
    fp8 = vllm_kv_cache("llama-3.1-8b", 10 * GiB, kv_cache_dtype="fp8")
    assert fp8.bytes_per_token * 2 == bf16.bytes_per_token
    assert fp8.num_blocks == 2 * bf16.num_blocks


def test_tp_divides_heads_until_they_run_out() -> None:
    """Llama-3.1-70B has 8 KV heads: per GPU, TP 8 holds one head; TP 16 still one
    (replicated), so per-GPU tokens stop growing."""
    per_token = {tp: vllm_kv_cache("llama-3.1-70b", 10 * GiB, tensor_parallel_size=tp)
                 .bytes_per_token for tp in (1, 2, 4, 8, 16)}
    assert per_token == {1: 320 * KiB, 2: 160 * KiB, 4: 80 * KiB, 8: 40 * KiB, 16: 40 * KiB}


def test_mla_is_the_same_on_every_gpu() -> None:
    one = vllm_kv_cache("deepseek-v3", 10 * GiB, block_size=64)
    eight = vllm_kv_cache("deepseek-v3", 10 * GiB, tensor_parallel_size=8, block_size=64)
    assert one.bytes_per_token == eight.bytes_per_token == 61 * 576 * 2
    assert one.gpu_kv_cache_size_tokens == eight.gpu_kv_cache_size_tokens
    assert one.num_blocks == 10 * GiB // (64 * 576 * 2 * 61)


def test_pp_takes_the_smallest_stage() -> None:
    r = vllm_kv_cache("deepseek-v3", 10 * GiB, pipeline_parallel_size=4, block_size=64)
    assert r.stage_layers == (15, 15, 16, 15)
    page = 64 * 576 * 2
    assert r.stage_num_blocks == (10 * GiB // (page * 15),) * 2 + (10 * GiB // (page * 16),
                                                                   10 * GiB // (page * 15))
    assert r.num_blocks == 10 * GiB // (page * 16)


def test_gpt_oss_two_groups_of_12() -> None:
    r = vllm_kv_cache("gpt-oss-20b", 10 * GiB)
    assert r.group_size == 12
    assert [(g.kind, len(g.layer_indices)) for g in r.groups] == [("sliding", 12), ("full", 12)]
    page = 16 * 2 * 8 * 64 * 2
    assert r.page_size_bytes == page
    assert r.num_blocks == 10 * GiB // page // 12
    assert r.gpu_kv_cache_size_tokens == r.num_blocks // 2 * 16
    # a request: cdiv(131072, 16) full blocks + cdiv(128 - 1 + 8192, 16) + 1 sliding ones
    assert r.blocks_per_request == 8192 + 520 + 1
    assert r.max_concurrency == r.num_blocks / (8192 + 521)


def test_gemma3_groups_pad_the_sliding_layers() -> None:
    """52 sliding + 10 full layers: group size 10, six sliding groups (the last two with
    8 layers and padding) and one full group."""
    r = vllm_kv_cache("gemma-3-27b", 20 * GiB)
    assert r.group_size == 10
    assert sorted(len(g.layer_indices) for g in r.groups) == [8, 8, 9, 9, 9, 9, 10]
    assert r.gpu_kv_cache_size_tokens == r.num_blocks // 7 * 16


def test_without_the_hybrid_manager_sliding_layers_are_full() -> None:
    r = vllm_kv_cache("gpt-oss-20b", 10 * GiB, hybrid=False)
    assert len(r.groups) == 1 and r.groups[0].kind == "full"
    assert r.num_blocks == 10 * GiB // (16 * 2 * 8 * 64 * 2 * 24)
    assert r.gpu_kv_cache_size_tokens == r.num_blocks * 16


def test_sliding_window_saves_on_concurrency_not_on_tokens() -> None:
    """Mistral-7B-v0.1 slides on every layer: one group, the same blocks as full
    attention, but a request needs only its window."""
    r = vllm_kv_cache("mistral-7b-v0.1", 10 * GiB)
    assert r.num_blocks == 10 * GiB // (128 * KiB * 16)
    assert r.blocks_per_request == -(-(4095 + 8192) // 16) + 1


def test_max_model_len_that_does_not_fit_is_reported() -> None:
    r = vllm_kv_cache("llama-3.1-8b", 1 * GiB)
    assert not r.fits_max_model_len and r.max_model_len_bytes == 131072 * 128 * KiB
    # the longest request that fits: 1 GiB // 2 MiB blocks = 512 blocks of 16 tokens
    assert r.estimated_max_model_len == 512 * 16
    ok = vllm_kv_cache("llama-3.1-8b", 17 * GiB)
    assert ok.fits_max_model_len and ok.estimated_max_model_len == 131072


def test_estimate_for_a_sliding_model_counts_the_window_once() -> None:
    """gpt-oss-20b: a request of L tokens needs cdiv(L, 16) full blocks and at most
    cdiv(127 + 8192, 16) + 1 sliding ones; the estimate is the longest L that fits."""
    r = vllm_kv_cache("gpt-oss-20b", 1 * GiB)
    page_x_layers = 16 * 2 * 8 * 64 * 2 * 12
    budget_blocks = GiB // page_x_layers
    sliding = -(-(127 + 8192) // 16) + 1
    assert not r.fits_max_model_len
    assert r.estimated_max_model_len == (budget_blocks - sliding) * 16


def test_each_pp_stage_is_checked_against_its_own_memory() -> None:
    """Stage 0 holds 31 of DeepSeek-V3's 61 layers: with room for 30 layers' request on
    stage 0 only, the model does not fit, though the largest memory would hold stage 1."""
    need_per_layer = 163840 * 576 * 2
    r = vllm_kv_cache("deepseek-v3", [30 * need_per_layer, 31 * need_per_layer],
                      pipeline_parallel_size=2, block_size=64)
    assert r.stage_layers == (31, 30)
    assert not r.fits_max_model_len
    assert r.stage_request_bytes == (31 * need_per_layer, 30 * need_per_layer)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"kv_cache_dtype": "int4"}, "kv_cache_dtype 'int4'"),
    ({"tensor_parallel_size": 3}, "tensor_parallel_size 3"),
    ({"tensor_parallel_size": 0}, "tensor_parallel_size must be >= 1"),
    ({"pipeline_parallel_size": 99}, "pipeline_parallel_size 99 exceeds"),
    ({"block_size": 0}, "block_size must be >= 1"),
    ({"max_model_len": 0}, "max_model_len must be >= 1"),
    ({"kv_cache_memory_bytes": -1}, "kv_cache_memory_bytes must be >= 0"),
])
def test_bad_arguments(kwargs: dict, match: str) -> None:
    args = {"model": "llama-3.1-8b", "kv_cache_memory_bytes": GiB, **kwargs}
    with pytest.raises(ValueError, match=match):
        vllm_kv_cache(**args)


@given(st.sampled_from(sorted(MODELS)), st.integers(0, 200 * GiB),
       st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]),
       st.sampled_from([1, 16, 32, 64]), st.sampled_from(["auto", "fp8"]))
def test_blocks_fit_the_memory(name: str, memory: int, tp: int, pp: int, block: int,
                               dtype: str) -> None:
    """On every stage the blocks x page x layers per group fit in the memory, and one
    more block would not fit on the tightest stage."""
    model = MODELS[name]
    try:
        r = vllm_kv_cache(model, memory, tensor_parallel_size=tp, pipeline_parallel_size=pp,
                          block_size=block, kv_cache_dtype=dtype)
    except ValueError as e:
        assert "tensor_parallel_size" in str(e)
        return
    assert sum(r.stage_layers) == model.num_layers
    for blocks in r.stage_num_blocks:
        assert blocks >= r.num_blocks
    used_per_block = memory // r.num_blocks if r.num_blocks else 0
    assert r.num_blocks == 0 or used_per_block >= r.page_size_bytes
    assert r.gpu_kv_cache_size_tokens <= r.num_blocks * block
    assert r.max_concurrency == r.num_blocks / r.blocks_per_request
    assert r.gpu_kv_cache_size_tokens % block == 0
    assert memory < MiB or r.bytes_per_token > 0
