"""Triton kernels that move K/V: cache writes and whole-block copies (need triton).

The public wrappers with their checks and references are in :mod:`pagedsim.kernels.cache_ops`.
Shapes: T new tokens, B cache blocks, BS block size, KVH kv heads, D head_dim.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import backend


@triton.jit
def _write_kv_kernel(
    k_cache_ptr,  # [B, BS, KVH, D]
    v_cache_ptr,  # [B, BS, KVH, D]
    k_ptr,  # [T, KVH, D]
    v_ptr,  # [T, KVH, D]
    slot_mapping_ptr,  # int [T]: slot of token i, or -1 to skip it (padding)
    stride_slot,  # slot_mapping's stride: a sliced column is not contiguous
    stride_cb, stride_ct, stride_ch, stride_cd,  # cache strides (K and V share them)
    stride_kt, stride_kh, stride_kd,
    stride_vt, stride_vh, stride_vd,
    NUM_KV_HEADS: tl.constexpr,
    KV_HEADS_PAD: tl.constexpr,  # next power of two
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    UPCAST: tl.constexpr,  # route values through fp32 (the interpreter mangles bf16)
):
    # One program per new token: vLLM's reshape_and_cache.
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token * stride_slot).to(tl.int64)
    h = tl.arange(0, KV_HEADS_PAD)  # [KVHP]
    d = tl.arange(0, HEAD_DIM_PAD)  # [DP]
    # A skipped token (slot -1) loads and stores nothing: the mask carries the condition.
    # (slot is broadcast to a tensor first: the interpreter rejects a scalar bool in a mask.)
    slot_2d = tl.zeros([KV_HEADS_PAD, HEAD_DIM_PAD], dtype=tl.int64) + slot  # [KVHP, DP]
    mask = (h[:, None] < NUM_KV_HEADS) & (d[None, :] < HEAD_DIM) & (slot_2d >= 0)
    block = slot // BLOCK_SIZE
    offset = slot % BLOCK_SIZE
    dst = block * stride_cb + offset * stride_ct + h[:, None] * stride_ch + d[None, :] * stride_cd
    k = tl.load(k_ptr + token * stride_kt + h[:, None] * stride_kh + d[None, :] * stride_kd,
                mask=mask, other=0.0)
    v = tl.load(v_ptr + token * stride_vt + h[:, None] * stride_vh + d[None, :] * stride_vd,
                mask=mask, other=0.0)
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    tl.store(k_cache_ptr + dst, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(v_cache_ptr + dst, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _copy_blocks_kernel(
    k_cache_ptr,  # [B, BS * KVH * D] (a contiguous cache, one row per block)
    v_cache_ptr,
    pairs_ptr,  # int64 [num_pairs, 2]: (src_block, dst_block)
    stride_pp, stride_pc,  # pairs' strides (pair, column)
    block_numel,  # BS * KVH * D
    CHUNK: tl.constexpr,  # elements copied per program
    UPCAST: tl.constexpr,
):
    # Grid (pair, chunk): a block of e.g. 16 x 8 x 128 = 16K elements is copied by
    # several programs so that a handful of pairs still occupies the GPU.
    pair = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1).to(tl.int64)
    src = tl.load(pairs_ptr + pair * stride_pp)
    dst = tl.load(pairs_ptr + pair * stride_pp + stride_pc)
    i = chunk * CHUNK + tl.arange(0, CHUNK)  # [CHUNK] element index within the block
    mask = i < block_numel
    k = tl.load(k_cache_ptr + src * block_numel + i, mask=mask)
    v = tl.load(v_cache_ptr + src * block_numel + i, mask=mask)
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    tl.store(k_cache_ptr + dst * block_numel + i, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(v_cache_ptr + dst * block_numel + i, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


def launch_write_kv(
    k_cache: torch.Tensor,  # [B, BS, KVH, D]
    v_cache: torch.Tensor,  # [B, BS, KVH, D]
    k: torch.Tensor,  # [T, KVH, D]
    v: torch.Tensor,  # [T, KVH, D]
    slot_mapping: torch.Tensor,  # int [T], any stride
) -> None:
    """One program per token. Inputs are assumed checked by
    :func:`pagedsim.kernels.cache_ops.write_kv`; every tensor's strides are passed, so views
    are read where they really are."""
    num_tokens, num_kv_heads, head_dim = k.shape
    _write_kv_kernel[(num_tokens,)](
        k_cache, v_cache, k, v, slot_mapping, slot_mapping.stride(0),
        *k_cache.stride(), *k.stride(), *v.stride(),
        NUM_KV_HEADS=num_kv_heads,
        KV_HEADS_PAD=triton.next_power_of_2(num_kv_heads),
        HEAD_DIM=head_dim,
        HEAD_DIM_PAD=triton.next_power_of_2(head_dim),
        BLOCK_SIZE=k_cache.shape[1],
        UPCAST=backend.INFO.interpreter,
    )


def launch_copy_blocks(
    k_cache: torch.Tensor,  # [B, BS, KVH, D], contiguous
    v_cache: torch.Tensor,  # [B, BS, KVH, D], contiguous
    pairs: torch.Tensor,  # int64 [num_pairs, 2], any strides
) -> None:
    """Grid (pair, chunk). Inputs are assumed checked by
    :func:`pagedsim.kernels.cache_ops.copy_blocks`."""
    block_numel = k_cache[0].numel()
    chunk = min(4096, triton.next_power_of_2(block_numel))
    grid = (pairs.shape[0], triton.cdiv(block_numel, chunk))
    _copy_blocks_kernel[grid](
        k_cache, v_cache, pairs, *pairs.stride(), block_numel,
        CHUNK=chunk, UPCAST=backend.INFO.interpreter,
    )
