"""vAttention's page size in tokens for models whose layers are not plain K and V: an MLA
layer maps one latent tensor whose row is its latent (kv_lora_rank + qk_rope_head_dim
values, no factor 2, no head count), not num_kv_heads x head_dim."""

from __future__ import annotations

from dataclasses import replace

import pytest

import pagedsim
from pagedsim.memory.schemes import make_allocator
from pagedsim.memory.vattention import PAGE_BYTES_OPTIONS, page_tokens_for, row_bytes_for
from pagedsim.models.kv_spec import LayerKV

MiB, KiB = 2**20, 2**10


def test_mla_row_is_the_latent():
    ds = pagedsim.get_model("deepseek-v3")  # 576 values x 2 bytes = 1,152 bytes per row
    assert row_bytes_for(ds) == 1152
    # The heads' formula would take 128 kv heads x 56 (7168 / 128) x 2 = 14,336 bytes.
    assert ds.num_kv_heads * ds.head_dim * ds.dtype_bytes == 14_336
    assert page_tokens_for(ds, PAGE_BYTES_OPTIONS[""]) == 1820  # 2 MiB // 1,152
    assert page_tokens_for(ds, PAGE_BYTES_OPTIONS["-64k"]) == 56  # 64 KiB // 1,152
    alloc = make_allocator("vattention", 1820 * 3 + 7, model=ds)
    assert (alloc.block_size, alloc.num_blocks) == (1820, 3)


def test_fp8_mla_row_halves():
    ds = replace(pagedsim.get_model("deepseek-v3"), dtype_bytes=1)
    assert (row_bytes_for(ds), page_tokens_for(ds, 2 * MiB)) == (576, 3640)


def test_plain_and_hybrid_rows_are_one_kv_head_set():
    llama = pagedsim.get_model("llama-3-8b")  # 8 x 128 x 2 B
    assert row_bytes_for(llama) == 2 * KiB and page_tokens_for(llama, 2 * MiB) == 1024
    gpt = pagedsim.get_model("gpt-oss-20b")  # sliding and full layers alike: 8 x 64 x 2 B
    assert row_bytes_for(gpt) == KiB and page_tokens_for(gpt, 2 * MiB) == 2048


def test_a_model_without_per_token_kv_has_no_pages():
    state = LayerKV("state", state_bytes=4096)
    spec = replace(pagedsim.get_model("llama-3-8b"), num_layers=1, layers=(state,))
    with pytest.raises(ValueError, match="keeps no KV per token"):
        page_tokens_for(spec, 2 * MiB)
    with pytest.raises(ValueError, match="holds no token"):
        page_tokens_for(pagedsim.get_model("deepseek-v3"), 1000)
