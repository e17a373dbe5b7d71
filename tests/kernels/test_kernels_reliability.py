"""Regressions from an adversarial pass over the kernel wrappers and the KV cache.

One test per finding. Each runs the reproducer and asserts the clean outcome: the right
numbers against the reference, or a one-line ValueError naming the bad argument and
what is valid, raised before anything is written.

1. Triton paged_attention read a strided ``seq_lens`` as if contiguous.
2. Triton write_kv read a strided ``slot_mapping`` as if contiguous (a wild write).
3. ``append_slots`` failing halfway left a sequence one token longer over an uncopied block.
4. copy_blocks truncated float pairs and read bools as block ids.
5. paged_attention accepted a NaN, infinite, zero or negative ``scale``.
6. ``num_splits`` was unbounded (2,000 splits: 32 s in the interpreter).
7. torch write_kv on a strided cache raised a bare RuntimeError from ``view``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from kernels_helpers import BACKENDS, REL_TOL, device_for, make_paged_batch, rel_err

from pagedsim import OutOfMemoryError, kernels
from pagedsim.kernels.attention import MAX_SPLITS
from pagedsim.kernels.kv_cache import ContiguousKVCache, KVCache, KVCacheConfig, PagedKVCache


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text, text
    return text


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equal, NaN sentinels included (``torch.equal`` says NaN != NaN)."""
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))


# --------------------------------------------------------------------------- 1


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("num_splits", [1, 2])
def test_strided_seq_lens_and_block_tables_are_read_through_their_strides(
    backend_name: str, num_splits: int
) -> None:
    device = device_for(backend_name)
    b = make_paged_batch([5, 12, 20], num_kv_heads=2, group=2, head_dim=32, block_size=4,
                         dtype=torch.float32, seed=101, device=device)
    num_seqs, width = b.block_tables.shape
    # seq_lens as column 0 of an int32 [S, 2] metadata tensor (stride 2). Column 1 holds
    # other valid lengths, so reading with stride 1 gives wrong numbers, not a crash.
    meta = torch.stack([b.seq_lens, torch.ones_like(b.seq_lens)], dim=1)  # [S, 2]
    seq_lens = meta[:, 0]  # [S], stride 2
    # block tables as every other column of a wider table whose other columns hold
    # the spare blocks' ids (valid, never the right ones).
    spare = b.k_cache.shape[0] - 1
    wide = torch.full((num_seqs, width, 2), spare, dtype=torch.int32, device=device)
    wide[..., 0] = b.block_tables
    tables = wide[..., 0]  # [S, MB], strides (2 * MB, 2)
    assert not seq_lens.is_contiguous() and not tables.is_contiguous()

    out = kernels.paged_attention(b.q, b.k_cache, b.v_cache, tables, seq_lens,
                                  num_splits=num_splits, backend=backend_name)
    ref = kernels.paged_attention_reference(b.q, b.k_cache, b.v_cache, b.block_tables,
                                            b.seq_lens)
    assert rel_err(out, ref) < REL_TOL[torch.float32]  # was a max error of 0.40 (triton)


# --------------------------------------------------------------------------- 2


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_strided_slot_mapping_writes_exactly_the_slots_asked(backend_name: str) -> None:
    device = device_for(backend_name)
    gen = torch.Generator().manual_seed(202)
    k_cache = torch.randn(8, 4, 2, 32, generator=gen).to(device)  # 32 slots
    v_cache = torch.randn(8, 4, 2, 32, generator=gen).to(device)
    k = torch.randn(3, 2, 32, generator=gen).to(device)
    v = torch.randn(3, 2, 32, generator=gen).to(device)
    # Slots [0, 1, -1] as column 0 of an int64 [T, 2] tensor; column 1 holds 31s, which
    # a kernel ignoring the stride wrote (slots 0 and 31 instead of 0 and 1).
    slot_mapping = torch.tensor([[0, 31], [1, 31], [-1, 31]], device=device)[:, 0]  # [T]
    assert not slot_mapping.is_contiguous()
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    kernels.write_kv(k_cache, v_cache, k, v, slot_mapping, backend=backend_name)
    kernels.write_kv_reference(k_ref, v_ref, k, v, slot_mapping)
    assert torch.equal(k_cache, k_ref) and torch.equal(v_cache, v_ref)


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_strided_pairs_tensor_copies_the_pairs_asked(backend_name: str) -> None:
    device = device_for(backend_name)
    gen = torch.Generator().manual_seed(203)
    k_cache = torch.randn(6, 4, 2, 32, generator=gen).to(device)
    v_cache = torch.randn(6, 4, 2, 32, generator=gen).to(device)
    pairs = torch.tensor([[0, 3], [1, 4]]).t().contiguous().t()  # [2, 2], column-major
    assert not pairs.is_contiguous()
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    kernels.copy_blocks(k_cache, v_cache, pairs, backend=backend_name)
    kernels.copy_blocks_reference(k_ref, v_ref, [(0, 3), (1, 4)])
    assert torch.equal(k_cache, k_ref) and torch.equal(v_cache, v_ref)


# --------------------------------------------------------------------------- 3


def _snapshot(cache: KVCache, seq_ids: list[str]) -> dict:
    return dict(
        lens={s: cache.seq_len(s) for s in seq_ids},
        tables={s: cache.block_table(s) for s in seq_ids},
        k=[t.clone() for t in cache.k_caches],
        v=[t.clone() for t in cache.v_caches],
        usage=cache.usage(),  # token, reserved, fragmentation and free slots
    )


def _assert_unchanged(cache: KVCache, before: dict) -> None:
    after = _snapshot(cache, list(before["lens"]))
    assert after["lens"] == before["lens"]
    assert after["tables"] == before["tables"]
    assert after["usage"] == before["usage"]
    for a, b in zip(after["k"] + after["v"], before["k"] + before["v"], strict=True):
        assert same(a, b)


def _fill(cache: KVCache, seq_id: str, gen: torch.Generator) -> None:
    """Random K/V for every token the sequence holds, in every layer."""
    slots = cache.slot_mapping([seq_id])
    shape = (slots.numel(), cache.config.num_kv_heads, cache.config.head_dim)
    for layer in range(cache.config.num_layers):
        cache.write(layer, torch.randn(shape, generator=gen).to(cache.config.device),
                    torch.randn(shape, generator=gen).to(cache.config.device), slots)


def test_failed_append_slots_changes_nothing_paged() -> None:
    gen = torch.Generator().manual_seed(303)
    cache = PagedKVCache(KVCacheConfig(num_layers=2, num_kv_heads=2, head_dim=32,
                                       num_blocks=3, block_size=4))
    cache.add("A", 2)
    _fill(cache, "A", gen)
    cache.fork("A", "B")  # A's half-full last block is shared: A's append copies it
    cache.add("C", 4)  # C's block is full: its append takes a fresh block
    assert cache.allocator.num_free_blocks == 1  # one block for two appends
    before = _snapshot(cache, ["A", "B", "C"])
    a_k = cache.gather(0, "A")[0].clone()  # [2, KVH, D]

    with pytest.raises(OutOfMemoryError) as err:
        cache.append_slots(["A", "C"])
    assert "nothing was changed" in one_line(err)
    _assert_unchanged(cache, before)
    assert torch.equal(cache.gather(0, "A")[0], a_k)  # was NaN: a CoW whose copy never ran
    for bad in (["A", "nobody"], ["C", "C"]):  # unknown and repeated ids: also untouched
        with pytest.raises(ValueError) as err:
            cache.append_slots(bad)
        assert repr(bad[1]) in one_line(err)
        _assert_unchanged(cache, before)

    # With room, the same call succeeds and A's copied block holds A's tokens.
    cache.free("B")
    slots = cache.append_slots(["A", "C"])
    assert slots.shape == (2,) and cache.seq_len("A") == 3 and cache.seq_len("C") == 5
    assert torch.equal(cache.gather(0, "A")[0][:2], a_k)


def test_failed_append_slots_changes_nothing_contiguous() -> None:
    gen = torch.Generator().manual_seed(304)
    cache = ContiguousKVCache(KVCacheConfig(num_layers=1, num_kv_heads=2, head_dim=32,
                                            num_blocks=4, block_size=4), max_model_len=8)
    cache.add("C", 2)  # room to grow
    cache.add("A", 8)  # its region is full
    _fill(cache, "C", gen)
    _fill(cache, "A", gen)
    before = _snapshot(cache, ["A", "C"])
    with pytest.raises(OutOfMemoryError):
        cache.append_slots(["C", "A"])  # C first: a one-by-one loop grew C, then failed
    _assert_unchanged(cache, before)


# --------------------------------------------------------------------------- 4


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize(
    ("pairs", "named"),
    [
        ([(1.7, 6.9)], r"pairs\[0\] = \(1\.7, 6\.9\)"),
        ([(0, 5), (True, 2)], r"pairs\[1\] = \(True, 2\)"),
        ([(1, 2.0)], r"pairs\[0\] = \(1, 2\.0\)"),
        ([(-1, 2)], r"pairs\[0\] = \(-1, 2\).*0\.\.7"),
        ([(0, 1), (2, 8)], r"pairs\[1\] = \(2, 8\).*0\.\.7"),
        ([3], r"pairs\[0\] = 3"),
        (torch.tensor([[1.7, 6.9]]), r"int32 or int64"),
    ],
)
def test_copy_blocks_rejects_non_integer_and_out_of_range_pairs(
    backend_name: str, pairs, named: str
) -> None:
    device = device_for(backend_name)
    gen = torch.Generator().manual_seed(404)
    k_cache = torch.randn(8, 2, 1, 32, generator=gen).to(device)
    v_cache = torch.randn(8, 2, 1, 32, generator=gen).to(device)
    k_before, v_before = k_cache.clone(), v_cache.clone()
    # check_values=False too: Python pairs sit on the host, so checking them is free
    for check_values in (True, False):
        with pytest.raises(ValueError, match=named) as err:
            kernels.copy_blocks(k_cache, v_cache, pairs, backend=backend_name,
                                check_values=check_values)
        one_line(err)
    assert torch.equal(k_cache, k_before) and torch.equal(v_cache, v_before)
    # numpy ints are ints: accepted, and they copy what they name
    kernels.copy_blocks(k_cache, v_cache, [(np.int64(1), np.int32(6))], backend=backend_name)
    assert torch.equal(k_cache[6], k_before[1]) and torch.equal(k_cache[:6], k_before[:6])


# --------------------------------------------------------------------------- 5, 6


def _small_batch(backend_name: str, seed: int):
    return make_paged_batch([7, 3], num_kv_heads=1, group=2, head_dim=32, block_size=4,
                            dtype=torch.float32, seed=seed, device=device_for(backend_name))


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("scale", [float("nan"), float("inf"), float("-inf"), 0.0, -0.5,
                                   True, "0.5", torch.tensor(0.5)])
def test_scale_must_be_finite_and_positive(backend_name: str, scale) -> None:
    b = _small_batch(backend_name, seed=505)
    out = torch.full_like(b.q, float("nan"))
    with pytest.raises(ValueError, match="scale must be a finite float > 0") as err:
        kernels.paged_attention(b.q, b.k_cache, b.v_cache, b.block_tables, b.seq_lens,
                                scale=scale, out=out, backend=backend_name)
    one_line(err)
    assert out.isnan().all(), "a kernel ran before the error"


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_valid_scales_of_other_number_types_give_the_right_numbers(backend_name: str) -> None:
    b = _small_batch(backend_name, seed=506)
    args = (b.q, b.k_cache, b.v_cache, b.block_tables, b.seq_lens)
    for scale in (1, np.float32(0.25), 3.0):
        out = kernels.paged_attention(*args, scale=scale, backend=backend_name)
        ref = kernels.paged_attention_reference(*args, scale=float(scale))
        assert rel_err(out, ref) < REL_TOL[torch.float32], scale


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("num_splits", [0, -1, MAX_SPLITS + 1, 2000, 2.0, True])
def test_num_splits_is_bounded(backend_name: str, num_splits) -> None:
    b = _small_batch(backend_name, seed=606)
    out = torch.full_like(b.q, float("nan"))
    with pytest.raises(ValueError, match=rf"num_splits must be an int in 1\.\.{MAX_SPLITS}"):
        kernels.paged_attention(b.q, b.k_cache, b.v_cache, b.block_tables, b.seq_lens,
                                num_splits=num_splits, out=out, backend=backend_name)
    assert out.isnan().all(), "a kernel ran before the error"


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_the_largest_num_splits_is_right(backend_name: str) -> None:
    # Most of the 32 splits of this short context are empty: the reduce must weigh them 0.
    b = _small_batch(backend_name, seed=607)
    args = (b.q, b.k_cache, b.v_cache, b.block_tables, b.seq_lens)
    out = kernels.paged_attention(*args, num_splits=MAX_SPLITS, backend=backend_name)
    assert rel_err(out, kernels.paged_attention_reference(*args)) < REL_TOL[torch.float32]


# --------------------------------------------------------------------------- 7


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_write_kv_into_a_strided_cache(backend_name: str) -> None:
    device = device_for(backend_name)
    gen = torch.Generator().manual_seed(707)
    # Caches that are every other block of bigger tensors: no flat [B*BS, ...] view exists.
    k_big = torch.randn(8, 4, 2, 32, generator=gen).to(device)
    v_big = torch.randn(8, 4, 2, 32, generator=gen).to(device)
    k_cache, v_cache = k_big[::2], v_big[::2]  # [4, 4, 2, 32] views
    assert not k_cache.is_contiguous()
    k = torch.randn(3, 2, 32, generator=gen).to(device)
    v = torch.randn(3, 2, 32, generator=gen).to(device)
    slots = torch.tensor([5, -1, 14], device=device)
    k_ref, v_ref = k_big.clone(), v_big.clone()
    kernels.write_kv(k_cache, v_cache, k, v, slots, backend=backend_name)
    kernels.write_kv_reference(k_ref[::2], v_ref[::2], k, v, slots)
    # the views were written where asked, and the blocks between them were not touched
    assert torch.equal(k_big, k_ref) and torch.equal(v_big, v_ref)
