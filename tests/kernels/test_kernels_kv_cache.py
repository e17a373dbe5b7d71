"""KV caches driven by the pagedsim allocators: same tokens, same attention, whatever the layout."""

from __future__ import annotations

import pytest
import torch
from kernels_helpers import REL_TOL, rel_err

from pagedsim import OutOfMemoryError, kernels
from pagedsim.kernels.kv_cache import ContiguousKVCache, KVCacheConfig, PagedKVCache

LAYERS, KV_HEADS, GROUP, HEAD_DIM = 2, 2, 2, 32


def make_caches(block_size: int, num_blocks: int, dtype=torch.float32):
    config = KVCacheConfig(LAYERS, KV_HEADS, HEAD_DIM, num_blocks, block_size, dtype)
    paged = PagedKVCache(config)
    contiguous = ContiguousKVCache(config, reservation="max", max_model_len=8 * block_size)
    return paged, contiguous


def fill(caches, seq_id, tokens: int, gen: torch.Generator, dtype) -> list:
    """Add a sequence of ``tokens`` random K/V to every cache (the same values in each)."""
    kv = [(torch.randn(tokens, KV_HEADS, HEAD_DIM, generator=gen).to(dtype),
           torch.randn(tokens, KV_HEADS, HEAD_DIM, generator=gen).to(dtype))
          for _ in range(LAYERS)]
    for cache in caches:
        cache.add(seq_id, tokens)
        slots = cache.slot_mapping([seq_id])
        for layer, (k, v) in enumerate(kv):
            cache.write(layer, k.to(cache.config.device), v.to(cache.config.device), slots)
    return kv


def attend_all(cache, seq_ids, q):
    tables, lens = cache.attention_metadata(seq_ids)
    return [cache.attend(layer, q, tables, lens) for layer in range(LAYERS)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_paged_and_contiguous_give_the_same_attention(block_size: int, dtype) -> None:
    gen = torch.Generator().manual_seed(block_size)
    paged, contiguous = make_caches(block_size, num_blocks=40, dtype=dtype)
    lengths = {"a": 3 * block_size, "b": 1, "c": 2 * block_size + 1}
    dense = {}
    for seq_id, n in lengths.items():
        dense[seq_id] = fill([paged, contiguous], seq_id, n, gen, dtype)
    # a freed sequence in the middle leaves a hole; the next one lands elsewhere
    paged.free("b")
    contiguous.free("b")
    dense["d"] = fill([paged, contiguous], "d", block_size + 2, gen, dtype)
    seq_ids = ["a", "c", "d"]
    table_d = paged.block_table("d")
    steps = [b - a for a, b in zip(table_d, table_d[1:], strict=False)]
    assert any(step != 1 for step in steps), "paging not exercised"
    q = torch.randn(len(seq_ids), KV_HEADS * GROUP, HEAD_DIM, generator=gen).to(dtype)
    q = q.to(paged.config.device)
    for layer, (out_p, out_c) in enumerate(zip(attend_all(paged, seq_ids, q),
                                                attend_all(contiguous, seq_ids, q), strict=True)):
        assert rel_err(out_p, out_c) < 1e-6
        # and both are right: against the reference over the tokens we wrote
        for i, seq_id in enumerate(seq_ids):
            k, v = dense[seq_id][layer]
            tables = torch.zeros(1, 1, dtype=torch.int32)
            ref = kernels.paged_attention_reference(
                q[i:i + 1].cpu(), k[None].cpu(), v[None].cpu(), tables,
                torch.tensor([k.shape[0]], dtype=torch.int32))
            assert rel_err(out_p[i:i + 1], ref) < REL_TOL[dtype]


def test_contiguous_regions_are_runs_of_whole_blocks() -> None:
    paged, contiguous = make_caches(block_size=4, num_blocks=64)
    contiguous.add("x", 5)  # reservation "max": 32 slots = 8 blocks
    contiguous.add("y", 9)
    for seq_id in ("x", "y"):
        start, size = contiguous.allocator.region(seq_id)
        assert start % 4 == 0 and size % 4 == 0
        table = contiguous.block_table(seq_id)
        assert table == list(range(start // 4, start // 4 + len(table)))
        assert len(table) == -(-contiguous.seq_len(seq_id) // 4)


def test_fork_and_copy_on_write_keep_both_sequences_right() -> None:
    gen = torch.Generator().manual_seed(0)
    paged, contiguous = make_caches(block_size=4, num_blocks=40)
    kv = fill([paged, contiguous], "parent", 6, gen, torch.float32)  # last block half full
    for cache in (paged, contiguous):
        cache.fork("parent", "child")
        before = cache.num_copied_blocks
        # the child writes token 6: paged copies the shared last block first
        slot = cache.append_slots(["child"])
        new_k = torch.randn(1, KV_HEADS, HEAD_DIM, generator=gen).to(cache.config.device)
        for layer in range(LAYERS):
            cache.write(layer, new_k, new_k, slot)
        if isinstance(cache, PagedKVCache):
            assert cache.num_copied_blocks == before + 1  # one block, not the sequence
            assert cache.block_table("child")[:1] == cache.block_table("parent")[:1]
            assert cache.block_table("child")[1] != cache.block_table("parent")[1]
        for layer in range(LAYERS):
            pk, _ = cache.gather(layer, "parent")
            ck, _ = cache.gather(layer, "child")
            assert torch.equal(pk.cpu(), kv[layer][0])  # the parent is untouched
            assert torch.equal(ck[:6].cpu(), kv[layer][0]) and torch.equal(ck[6:], new_k)


@pytest.mark.parametrize("kind", ["paged", "contiguous"])
def test_swap_out_and_in_restores_the_tokens(kind: str) -> None:
    gen = torch.Generator().manual_seed(1)
    paged, contiguous = make_caches(block_size=4, num_blocks=40)  # contiguous: 8 per region
    cache = paged if kind == "paged" else contiguous
    fill([cache], "a", 7, gen, torch.float32)
    fill([cache], "b", 5, gen, torch.float32)
    cache.fork("a", "a2")
    before = {(s, layer): cache.gather(layer, s) for s in ("a", "a2", "b") for layer in range(2)}
    swapped = cache.swap_out(["a", "a2"])
    assert "a" not in cache and "a2" not in cache
    fill([cache], "filler", 4, gen, torch.float32)  # takes the freed memory first
    cache.swap_in(swapped)
    for (s, layer), (k, v) in before.items():
        k2, v2 = cache.gather(layer, s)
        assert torch.equal(k, k2) and torch.equal(v, v2)
    cache.allocator.check_invariants()


def test_written_slots_counts_what_the_kernels_wrote() -> None:
    gen = torch.Generator().manual_seed(2)
    paged, _ = make_caches(block_size=4, num_blocks=10)
    assert paged.written_slots() == 0
    fill([paged], "a", 6, gen, torch.float32)
    paged.fork("a", "b")
    assert paged.written_slots() == 6  # the fork shares, writes nothing
    slot = paged.append_slots(["b"])
    k = torch.randn(1, KV_HEADS, HEAD_DIM, generator=gen).to(paged.config.device)
    for layer in range(LAYERS):
        paged.write(layer, k, k, slot)
    # the copy-on-write copied 2 filled slots; plus the new token
    assert paged.written_slots() == 6 + 2 + 1
    assert paged.usage().token_slots == 9


def test_out_of_memory_comes_from_the_allocator() -> None:
    paged, contiguous = make_caches(block_size=4, num_blocks=4)
    paged.add("a", 16)
    with pytest.raises(OutOfMemoryError):
        paged.add("b", 1)
    with pytest.raises(OutOfMemoryError):
        paged.append_slots(["a"])
    with pytest.raises(OutOfMemoryError):  # reservation "max": 32 slots, the pool has 16
        contiguous.add("a", 5)


@pytest.mark.parametrize("bad", [
    dict(num_layers=0), dict(num_blocks=-1), dict(block_size=257), dict(dtype=torch.int8),
    dict(head_dim=True),
])
def test_config_validation(bad: dict) -> None:
    args = dict(num_layers=1, num_kv_heads=1, head_dim=32, num_blocks=4)
    with pytest.raises(ValueError):
        KVCacheConfig(**{**args, **bad})
