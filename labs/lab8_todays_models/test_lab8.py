"""Graders of lab 8 (today's models, sized as vLLM sizes them). One marker per task.

Run them with ``pagedsim labs grade 8 --path .`` (points per task), or directly with
``python -m pytest -p pagedsim.labs.plugin test_lab8.py -m lab8_1`` from this folder.

They call your code only through ``adapters.py``. Expected numbers are real vLLM
start-up lines, worked examples (in the comments) and pagedsim's own reader and sizing
(``lab8_oracles.py`` says where each comes from).
"""

from __future__ import annotations

from collections.abc import Iterator

import adapters
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lab8_oracles import (
    CONFIGS,
    DTYPES,
    PLAIN_REFUSALS,
    PRESETS,
    REFUSALS,
    TASK_ORDER,
    TOKEN_LINES,
    GiB,
    KiB,
    MiB,
    configs,
    lent,
    oracle,
    oracle_layers,
    oracle_request,
    tp_for,
)

# Derandomized: every grading run tries the same examples, so the same files always get
# the same grade (the plugin derandomizes too; this keeps a bare pytest run the same).
FAST = settings(max_examples=30, deadline=None, derandomize=True, database=None)


@pytest.fixture(autouse=True)
def _earlier_tasks_are_pagedsims(request: pytest.FixtureRequest) -> Iterator[None]:
    """One mistake, one task: while a test of task 8.k runs, your functions of the tasks
    before it (``read_layers`` for 8.2; those and 8.2's for 8.3; those and
    ``request_kv_bytes`` for 8.4) are pagedsim's (``lab8_oracles.lent``). Counting the MLA
    latent twice then costs points in 8.2, where ``layer_bytes_per_token`` is asked for,
    and not again in 8.3 and 8.4."""
    task = next((m.name for m in request.node.iter_markers() if m.name in TASK_ORDER), None)
    if task is None or task == TASK_ORDER[0]:
        yield
        return
    with lent(adapters.lab, task):
        yield

# --------------------------------------------------------------------------------------
# Task 8.1: a config.json's layers.


@pytest.mark.lab8_1
def test_llama_3_1_8b_has_32_full_layers_of_8_kv_heads() -> None:
    # 32 attention heads share 8 KV heads (GQA): the cache holds the 8.
    assert adapters.read_layers(PRESETS["llama-3.1-8b"]) == [("full", 8, 128, 0)] * 32


@pytest.mark.lab8_1
def test_no_kv_heads_field_means_multi_head_attention() -> None:
    cfg = {"num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096}
    for shape in (cfg, {**cfg, "num_key_value_heads": None}):  # Llama-2-7B's shape
        assert adapters.read_layers(shape) == [("full", 32, 128, 0)] * 32


@pytest.mark.lab8_1
def test_head_dim_from_hidden_size_and_sliding_window_turned_off() -> None:
    # Qwen2-7B: no head_dim (3584 / 28 = 128); sliding_window set, use_sliding_window false.
    assert adapters.read_layers(CONFIGS["qwen2-7b-instruct"]) == [("full", 4, 128, 0)] * 28


@pytest.mark.lab8_1
def test_gpt_oss_alternates_and_mistral_slides_everywhere() -> None:
    assert adapters.read_layers(CONFIGS["gpt-oss-120b"]) == \
        [("sliding", 8, 64, 128), ("full", 8, 64, 0)] * 18  # layer_types
    assert adapters.read_layers(PRESETS["mistral-7b-v0.1"]) == [("sliding", 8, 128, 4096)] * 32


@pytest.mark.lab8_1
def test_gemma_3_keeps_its_layers_in_text_config() -> None:
    layers = adapters.read_layers(PRESETS["gemma-3-27b"])
    assert len(layers) == 62
    assert layers.count(("sliding", 16, 128, 1024)) == 52
    assert layers.count(("full", 16, 128, 0)) == 10 and layers[5] == ("full", 16, 128, 0)


@pytest.mark.lab8_1
def test_mla_keeps_one_latent_per_layer() -> None:
    # DeepSeek-V3: kv_lora_rank 512 + qk_rope_head_dim 64 = 576 values, one "head".
    assert adapters.read_layers(PRESETS["deepseek-v3"]) == [("mla", 1, 576, 0)] * 61
    assert adapters.read_layers(CONFIGS["deepseek-v2-lite"]) == [("mla", 1, 576, 0)] * 27


@pytest.mark.lab8_1
def test_every_config_reads_as_pagedsim_reads_it() -> None:
    for name, cfg in CONFIGS.items():
        assert adapters.read_layers(cfg) == oracle_layers(cfg), name


@pytest.mark.lab8_1
@FAST
@given(cfg=configs())
def test_any_config_reads_as_pagedsim_reads_it(cfg: dict) -> None:
    assert adapters.read_layers(cfg) == oracle_layers(cfg)


@pytest.mark.lab8_1
def test_a_config_without_layers_is_refused() -> None:
    with pytest.raises(ValueError):
        adapters.read_layers({"num_attention_heads": 32, "hidden_size": 4096})
    with pytest.raises(ValueError):
        adapters.read_layers({"num_hidden_layers": 0, "num_attention_heads": 32,
                              "hidden_size": 4096})


# --------------------------------------------------------------------------------------
# Task 8.2: bytes per token on one GPU.


@pytest.mark.lab8_2
def test_gqa_bytes_per_token_count_kv_heads() -> None:
    # 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 bytes; with the 32 attention heads it
    # would be 512 KiB.
    assert adapters.bytes_per_token(PRESETS["llama-3.1-8b"]) == 128 * KiB
    assert adapters.bytes_per_token(PRESETS["llama-3.1-70b"]) == 320 * KiB  # 80 x 8 x 128


@pytest.mark.lab8_2
def test_mla_caches_the_latent_once_whole_on_every_gpu() -> None:
    # 61 layers x 576 values x 2 bytes: no factor 2 (K and V are rebuilt from the latent),
    # and no TP split (every GPU keeps the whole latent).
    ds = PRESETS["deepseek-v3"]
    got = {tp: adapters.bytes_per_token(ds, tensor_parallel_size=tp) for tp in (1, 2, 8, 16)}
    assert set(got.values()) == {61 * 576 * 2}, (
        f"DeepSeek-V3 at TP 1, 2, 8, 16: you give {got}, expected 70,272 bytes at every TP. "
        "MLA caches its latent once per token (K and V are rebuilt from it, so no factor 2; "
        "twice 70,272 is the latent counted as K and V) and whole on every GPU (no TP split)")


@pytest.mark.lab8_2
def test_fp8_halves_every_kind_of_layer() -> None:
    sizes = {"auto": 2, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
    assert {d: adapters.kv_cache_dtype_bytes(d) for d in sizes} == sizes
    for bad in ("fp4", "int8", "FP8", ""):
        with pytest.raises(ValueError):
            adapters.kv_cache_dtype_bytes(bad)
    for name in ("llama-3.1-8b", "gpt-oss-20b", "deepseek-v3", "gemma-3-27b"):
        assert adapters.bytes_per_token(PRESETS[name], "fp8") * 2 == \
            adapters.bytes_per_token(PRESETS[name]), name


@pytest.mark.lab8_2
def test_shard_layer_splits_heads_down_to_one() -> None:
    assert adapters.shard_layer(("full", 8, 128, 0), 2) == ("full", 4, 128, 0)
    assert adapters.shard_layer(("sliding", 8, 64, 128), 8) == ("sliding", 1, 64, 128)
    # TP 16 > 8 KV heads: each head on 2 GPUs, one whole head per GPU.
    assert adapters.shard_layer(("full", 8, 128, 0), 16) == ("full", 1, 128, 0)
    assert adapters.shard_layer(("mla", 1, 576, 0), 8) == ("mla", 1, 576, 0)
    with pytest.raises(ValueError):
        adapters.shard_layer(("full", 8, 128, 0), 3)


@pytest.mark.lab8_2
def test_more_gpus_stop_shrinking_a_token_past_the_kv_heads() -> None:
    # Qwen3-235B-A22B has 4 KV heads: at TP 4 each GPU caches one; at TP 8 still one.
    qwen = CONFIGS["qwen3-235b-a22b"]
    assert adapters.bytes_per_token(qwen, tensor_parallel_size=4) == 94 * 2 * 128 * 2
    assert adapters.bytes_per_token(qwen, tensor_parallel_size=8) == 94 * 2 * 128 * 2
    llama = PRESETS["llama-3.1-70b"]
    assert adapters.bytes_per_token(llama, tensor_parallel_size=8) == 40 * KiB
    assert adapters.bytes_per_token(llama, tensor_parallel_size=16) == 40 * KiB


@pytest.mark.lab8_2
def test_tp_that_vllm_refuses_is_refused() -> None:
    with pytest.raises(ValueError):  # 3 does not divide Llama's 64 attention heads
        adapters.bytes_per_token(PRESETS["llama-3.1-70b"], tensor_parallel_size=3)
    shape = {"num_hidden_layers": 2, "num_attention_heads": 48, "num_key_value_heads": 8,
             "head_dim": 128}
    with pytest.raises(ValueError):  # 6 divides 48 heads, but not 8 KV heads, nor 8 it
        adapters.bytes_per_token(shape, tensor_parallel_size=6)


@pytest.mark.lab8_2
def test_every_config_bytes_per_token_matches_pagedsim() -> None:
    for name, cfg in CONFIGS.items():
        for tp in (1, 2, 4, 8, 16):
            for dtype in ("auto", "fp8"):
                try:
                    want = oracle(cfg, GiB, 16, tensor_parallel_size=tp,
                                  kv_cache_dtype=dtype).bytes_per_token
                except ValueError:
                    continue
                got = adapters.bytes_per_token(cfg, dtype, tp)
                assert got == want, (name, tp, dtype)


@pytest.mark.lab8_2
@FAST
@given(cfg=configs(), tp=st.sampled_from([1, 2, 4, 8, 16]), dtype=st.sampled_from(DTYPES))
def test_any_config_bytes_per_token(cfg: dict, tp: int, dtype: str) -> None:
    tp = tp_for(tp, cfg)
    want = oracle(cfg, GiB, 16, tensor_parallel_size=tp, kv_cache_dtype=dtype).bytes_per_token
    assert adapters.bytes_per_token(cfg, dtype, tp) == want


# --------------------------------------------------------------------------------------
# Task 8.3: what one request keeps.


@pytest.mark.lab8_3
def test_a_plain_request_keeps_every_token() -> None:
    assert adapters.request_kv_bytes(PRESETS["llama-3.1-8b"], 1024) == 128 * MiB
    assert adapters.request_kv_bytes(PRESETS["llama-3.1-8b"], 0) == 0
    with pytest.raises(ValueError):
        adapters.request_kv_bytes(PRESETS["llama-3.1-8b"], -1)


@pytest.mark.lab8_3
def test_gpt_oss_window_saves_on_its_sliding_layers_only() -> None:
    # gpt-oss-20b: 12 sliding layers keep 128 tokens, 12 full layers all 131,072; a token
    # is 8 KV heads x 64 x 2 (K, V) x 2 bytes = 2 KiB per layer.
    got = adapters.request_kv_bytes(PRESETS["gpt-oss-20b"], 131072)
    assert got == 12 * 2 * KiB * 131072 + 12 * 2 * KiB * 128
    everything = 24 * 2 * KiB * 131072
    assert everything / 2 < got < everything  # the saving is under the sliding share
    assert adapters.request_kv_bytes(PRESETS["gpt-oss-20b"], 100) == 24 * 2 * KiB * 100


@pytest.mark.lab8_3
def test_mistral_window_caps_every_layer_gemma_3_five_of_six() -> None:
    mistral = PRESETS["mistral-7b-v0.1"]  # every layer slides, W = 4096, 4 KiB per layer
    assert adapters.request_kv_bytes(mistral, 32768) == 32 * 4 * KiB * 4096
    assert adapters.request_kv_bytes(mistral, 1000) == 32 * 4 * KiB * 1000
    gemma = PRESETS["gemma-3-27b"]  # 10 full, 52 sliding layers (W = 1024), 8 KiB each
    assert adapters.request_kv_bytes(gemma, 131072) == 8 * KiB * (10 * 131072 + 52 * 1024)


@pytest.mark.lab8_3
@pytest.mark.parametrize("line", PLAIN_REFUSALS, ids=[x["id"] for x in PLAIN_REFUSALS])
def test_refused_full_and_mla_requests_need_what_vllm_said(line: dict) -> None:
    # vLLM's refusal for a model without sliding layers: one request of max_model_len (a
    # multiple of the block size) needs exactly its tokens' bytes, printed as GiB.
    got = adapters.request_kv_bytes(CONFIGS[line["config"]], line["max_model_len"],
                                    line["kv_cache_dtype"], line["tensor_parallel_size"])
    assert f"{got / GiB:.2f}" == f"{line['needed_gib']:.2f}", line["note"]


@pytest.mark.lab8_3
def test_every_config_request_matches_pagedsim() -> None:
    for name, cfg in CONFIGS.items():
        for n in (0, 1, 127, 128, 129, 1024, 4097, 131072):
            assert adapters.request_kv_bytes(cfg, n) == oracle_request(cfg, n), (name, n)


@pytest.mark.lab8_3
@FAST
@given(cfg=configs(), n=st.integers(0, 300_000), tp=st.sampled_from([1, 2, 4, 8]),
       dtype=st.sampled_from(DTYPES))
def test_any_request_bytes_match_pagedsim(cfg: dict, n: int, tp: int, dtype: str) -> None:
    tp = tp_for(tp, cfg)
    assert adapters.request_kv_bytes(cfg, n, dtype, tp) == oracle_request(cfg, n, dtype, tp)


# --------------------------------------------------------------------------------------
# Task 8.4: vLLM's start-up lines.


def _flags(line: dict) -> dict:
    return {"tensor_parallel_size": line["tensor_parallel_size"],
            "kv_cache_dtype": line["kv_cache_dtype"], "block_size": line["block_size"],
            "max_num_batched_tokens": line["max_num_batched_tokens"] or 8192}


def _run(line: dict, memory: int) -> dict:
    return adapters.vllm_kv_cache(CONFIGS[line["config"]], memory, line["max_model_len"],
                                  **_flags(line))


def _logged_range(line: dict) -> tuple[int, int]:
    """vLLM prints the GiB with two decimals: X stands for [X - 0.005, X + 0.005] GiB."""
    gib = line["available_gib"]
    return int((gib - 0.005) * GiB), int((gib + 0.005) * GiB)


@pytest.mark.lab8_4
@pytest.mark.parametrize("line", TOKEN_LINES, ids=[x["id"] for x in TOKEN_LINES])
def test_real_start_up_lines(line: dict) -> None:
    """The logged ``GPU KV cache size`` lies between what the two ends of the logged GiB
    give, and some block count in that range gives both logged numbers."""
    lo, hi = (_run(line, m) for m in _logged_range(line))
    logged = line["gpu_kv_cache_size_tokens"]
    assert lo["gpu_kv_cache_size_tokens"] <= logged <= hi["gpu_kv_cache_size_tokens"], \
        (f"{line['model']} ({line['kind']}): vLLM logged {logged:,} tokens, you give "
         f"{lo['gpu_kv_cache_size_tokens']:,} to {hi['gpu_kv_cache_size_tokens']:,}")
    if line["max_concurrency"] is not None:
        assert any(b // lo["num_groups"] * line["block_size"] == logged
                   and round(b / lo["blocks_per_request"], 2) == line["max_concurrency"]
                   for b in range(lo["num_blocks"], hi["num_blocks"] + 1)), \
            (f"{line['model']}: vLLM logged concurrency {line['max_concurrency']}x, you give "
             f"{lo['max_concurrency']:.2f} to {hi['max_concurrency']:.2f}")


@pytest.mark.lab8_4
@pytest.mark.parametrize("line", REFUSALS, ids=[x["id"] for x in REFUSALS])
def test_real_start_up_refusals(line: dict) -> None:
    """One request of max_model_len needs more than the memory: the GiB vLLM printed and,
    where it printed one, the longest request it said would fit."""
    lo_bytes, hi_bytes = _logged_range(line)
    got = _run(line, lo_bytes)
    assert got["request_bytes"] > hi_bytes
    assert f"{got['request_bytes'] / GiB:.2f}" == f"{line['needed_gib']:.2f}", line["note"]
    if line["estimated_max_model_len"] is not None:
        lo, hi = (adapters.estimated_max_model_len(CONFIGS[line["config"]], m,
                                                   line["max_model_len"], **_flags(line))
                  for m in (lo_bytes, hi_bytes))
        assert lo <= line["estimated_max_model_len"] <= hi, (lo, hi)


@pytest.mark.lab8_4
def test_gpt_oss_20b_is_two_groups_of_12() -> None:
    # 12 sliding + 12 full layers, pages of 16 x 2 KiB = 32 KiB: 10 GiB // (32 KiB x 12)
    # = 27,306 blocks; each group gets half of them as token slots.
    got = adapters.vllm_kv_cache(PRESETS["gpt-oss-20b"], 10 * GiB, 131072)
    assert (got["page_bytes"], got["group_size"], got["num_groups"]) == (32 * KiB, 12, 2)
    assert got["num_blocks"] == 27_306
    assert got["gpu_kv_cache_size_tokens"] == 27_306 // 2 * 16
    # 8,192 blocks for the full group, cdiv(127 + 8192, 16) + 1 = 521 for the sliding one
    assert got["blocks_per_request"] == 8192 + 521


@pytest.mark.lab8_4
def test_gemma_3_is_seven_groups_of_10_and_close_counts_one_size() -> None:
    # 52 sliding, 10 full: groups of 10 (52 is not under 1.5 x 10), 6 sliding + 1 full.
    got = adapters.vllm_kv_cache(PRESETS["gemma-3-27b"], 20 * GiB, 131072)
    assert (got["group_size"], got["num_groups"]) == (10, 7)
    assert got["num_blocks"] == 20 * GiB // (16 * 8 * KiB * 10)
    # 5 sliding and 7 full layers: 7 < 1.5 x 5, so groups of 7 (one of them padded).
    cfg = {"num_hidden_layers": 12, "num_attention_heads": 8, "head_dim": 64,
           "sliding_window": 256,
           "layer_types": ["sliding_attention"] * 5 + ["full_attention"] * 7}
    got = adapters.vllm_kv_cache(cfg, GiB, 4096)
    assert (got["group_size"], got["num_groups"]) == (7, 2)


@pytest.mark.lab8_4
def test_uniform_model_is_one_group() -> None:
    # Llama-3.1-8B: 32 layers of 16 x 4 KiB pages: 10 GiB // 2 MiB = 5,120 blocks of 16.
    got = adapters.vllm_kv_cache(PRESETS["llama-3.1-8b"], 10 * GiB, 8192)
    assert (got["group_size"], got["num_groups"], got["num_blocks"]) == (32, 1, 5120)
    assert got["gpu_kv_cache_size_tokens"] == 81_920
    assert got["max_concurrency"] == 10.0 and got["request_bytes"] == 8192 * 128 * KiB


def _agrees(cfg: dict, memory: int, max_len: int, where: str = "", **kw) -> None:
    want = oracle(cfg, memory, max_len, **kw)
    got = adapters.vllm_kv_cache(cfg, memory, max_len, **kw)
    assert got == {"page_bytes": want.page_size_bytes, "group_size": want.group_size,
                   "num_groups": len(want.groups), "num_blocks": want.num_blocks,
                   "gpu_kv_cache_size_tokens": want.gpu_kv_cache_size_tokens,
                   "blocks_per_request": want.blocks_per_request,
                   "max_concurrency": pytest.approx(want.max_concurrency),
                   "request_bytes": want.max_model_len_bytes}, where
    if not want.fits_max_model_len:
        assert adapters.estimated_max_model_len(cfg, memory, max_len, **kw) == \
            want.estimated_max_model_len


@pytest.mark.lab8_4
def test_every_config_sized_as_pagedsim_sizes_it() -> None:
    for name, cfg in CONFIGS.items():
        for tp, block, max_len in ((1, 16, 32768), (2, 16, 4096), (8, 64, 131072)):
            try:
                oracle(cfg, 40 * GiB, max_len, tensor_parallel_size=tp, block_size=block)
            except ValueError:
                continue
            _agrees(cfg, 40 * GiB, max_len, f"{name}, TP {tp}, blocks of {block}, "
                    f"max_model_len {max_len}", tensor_parallel_size=tp, block_size=block)


@pytest.mark.lab8_4
@FAST
@given(cfg=configs(), tp=st.sampled_from([1, 2, 4, 8]), dtype=st.sampled_from(DTYPES),
       block=st.sampled_from([1, 16, 32, 64]), max_len=st.integers(1, 200_000),
       batched=st.sampled_from([512, 2048, 8192]), memory_mib=st.integers(1, 80_000))
def test_any_config_sized_as_pagedsim_sizes_it(cfg: dict, tp: int, dtype: str, block: int,
                                               max_len: int, batched: int,
                                               memory_mib: int) -> None:
    tp = tp_for(tp, cfg)
    _agrees(cfg, memory_mib * MiB, max_len, tensor_parallel_size=tp, kv_cache_dtype=dtype,
            block_size=block, max_num_batched_tokens=batched)
