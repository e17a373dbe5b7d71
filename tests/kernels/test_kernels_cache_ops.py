"""write_kv and copy_blocks against their one-at-a-time references."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from kernels_helpers import BACKENDS, DTYPES, device_for, kernel_settings

from pagedsim import kernels


def random_cache(num_blocks: int, block_size: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: str, gen: torch.Generator):
    shape = (num_blocks, block_size, kv_heads, head_dim)
    k = torch.randn(shape, generator=gen).to(dtype=dtype, device=device)
    v = torch.randn(shape, generator=gen).to(dtype=dtype, device=device)
    return k, v


@pytest.mark.parametrize("backend_name", BACKENDS)
@kernel_settings(20)
@given(
    num_blocks=st.integers(1, 6),
    block_size=st.sampled_from((1, 2, 4, 8, 16, 32)),
    kv_heads=st.sampled_from((1, 2, 3, 8)),
    head_dim=st.sampled_from((32, 64, 48)),
    dtype=st.sampled_from(DTYPES),
    num_tokens=st.integers(1, 12),
    seed=st.integers(0, 2**31 - 1),
)
def test_write_kv_matches_reference(backend_name, num_blocks, block_size, kv_heads, head_dim,
                                    dtype, num_tokens, seed) -> None:
    device = device_for(backend_name)
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    k_cache, v_cache = random_cache(num_blocks, block_size, kv_heads, head_dim, dtype, device, gen)
    num_slots = num_blocks * block_size
    # distinct slots, some tokens skipped with -1
    slots = rng.sample(range(num_slots), min(num_tokens, num_slots))
    slots = [s if rng.random() < 0.8 else -1 for s in slots]
    k = torch.randn(len(slots), kv_heads, head_dim, generator=gen).to(dtype=dtype, device=device)
    v = torch.randn(len(slots), kv_heads, head_dim, generator=gen).to(dtype=dtype, device=device)
    slot_mapping = torch.tensor(slots, dtype=rng.choice((torch.int32, torch.int64)), device=device)

    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    kernels.write_kv(k_cache, v_cache, k, v, slot_mapping, backend=backend_name)
    kernels.write_kv_reference(k_ref, v_ref, k, v, slot_mapping)
    # a copy must be exact, bf16 included; untouched slots keep their random contents
    assert torch.equal(k_cache, k_ref) and torch.equal(v_cache, v_ref)


@pytest.mark.parametrize("backend_name", BACKENDS)
@kernel_settings(20)
@given(
    num_blocks=st.integers(2, 10),
    block_size=st.sampled_from((1, 4, 16, 32)),
    kv_heads=st.sampled_from((1, 2, 8)),
    head_dim=st.sampled_from((32, 64)),
    dtype=st.sampled_from(DTYPES),
    data=st.data(),
)
def test_copy_blocks_matches_reference(backend_name, num_blocks, block_size, kv_heads, head_dim,
                                       dtype, data) -> None:
    device = device_for(backend_name)
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1)))
    k_cache, v_cache = random_cache(num_blocks, block_size, kv_heads, head_dim, dtype, device, gen)
    order = data.draw(st.permutations(range(num_blocks)))
    num_pairs = data.draw(st.integers(1, num_blocks // 2))
    # sources and destinations drawn from disjoint halves: pairs are independent
    pairs = [(order[i], order[num_blocks - 1 - i]) for i in range(num_pairs)]

    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    kernels.copy_blocks(k_cache, v_cache, pairs, backend=backend_name)
    kernels.copy_blocks_reference(k_ref, v_ref, pairs)
    assert torch.equal(k_cache, k_ref) and torch.equal(v_cache, v_ref)
    for src, dst in pairs:
        assert torch.equal(k_cache[dst], k_cache[src])


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_copy_blocks_accepts_a_tensor_of_pairs(backend_name) -> None:
    device = device_for(backend_name)
    gen = torch.Generator().manual_seed(0)
    k_cache, v_cache = random_cache(4, 16, 2, 32, torch.float16, device, gen)
    before = k_cache.clone()
    pairs = torch.tensor([[0, 3]], dtype=torch.int32)
    kernels.copy_blocks(k_cache, v_cache, pairs, backend=backend_name)
    assert torch.equal(k_cache[3], before[0]) and torch.equal(k_cache[:3], before[:3])
