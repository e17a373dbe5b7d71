"""Triton kernels for paged decode attention (imported only when triton is installed).

Read top to bottom: the decode kernel (one program per sequence, kv head and split),
the reduce kernel that merges the splits (flash-decoding), and ``launch`` which
sizes the grid. Shape checks, the split heuristic and the torch reference live in
:mod:`pagedsim.kernels.attention`, which is the public entry point.

Notation in the shape comments:
S sequences, H query heads, KVH kv heads, G = H // KVH query heads per kv head,
D head_dim, B cache blocks, BS block size (slots per block), MB blocks per table row,
P number of splits along the sequence, N tokens per tile.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from . import backend


@triton.jit
def _paged_decode_kernel(
    out_ptr,  # P == 1: [S, H, D] in q's dtype;  P > 1: fp32 partial outputs [S, H, P, D]
    lse_ptr,  # fp32 [S, H, P]: log2-sum-exp2 of each split's scores (unused when P == 1)
    q_ptr,  # [S, H, D]
    k_ptr,  # [B, BS, KVH, D]
    v_ptr,  # [B, BS, KVH, D]
    block_tables_ptr,  # int32 [S, MB]
    seq_lens_ptr,  # int32 [S], any stride (a column of a metadata tensor is fine)
    scale_log2,  # softmax scale * log2(e): we use exp2, which is what the hardware has
    tokens_per_split,  # int, a multiple of TILE_N
    window,  # sliding window in tokens (2**30 when none): the query reads the last `window`
    stride_qs, stride_qh, stride_qd,
    stride_kb, stride_kt, stride_kh, stride_kd,
    stride_vb, stride_vt, stride_vh, stride_vd,
    stride_bts, stride_btb,
    stride_sl,  # seq_lens' stride: assuming 1 read the wrong lengths for a sliced column
    stride_os, stride_oh, stride_op, stride_od,
    stride_ls, stride_lh, stride_lp,
    GROUP: tl.constexpr,  # G, query heads sharing one kv head
    GROUP_PAD: tl.constexpr,  # G padded to a power of two >= 16 (tl.dot's minimum)
    HEAD_DIM: tl.constexpr,  # D, a power of two
    BLOCK_SIZE: tl.constexpr,  # BS, slots per cache block (any integer 1..256)
    TILE_N: tl.constexpr,  # N, tokens processed per loop iteration
    NUM_SPLITS: tl.constexpr,  # P
    UPCAST: tl.constexpr,  # compute in fp32 (interpreter, or fp32 inputs)
):
    # int64 from the start: seq * stride and block * stride_kb can pass 2^31 on big caches.
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2)

    seq_len = tl.load(seq_lens_ptr + seq * stride_sl)
    # The tokens attended to are first .. seq_len - 1: all of them without a window, the
    # last `window` with one. Splits cut that range, so blocks wholly before `first` are
    # never touched (a hybrid manager may have given them back: their entries are -1),
    # and the first tile starts at `first` itself: tokens before it are masked off.
    first = tl.maximum(seq_len - window, 0)
    start = first + split * tokens_per_split
    end = tl.minimum(start + tokens_per_split, seq_len)  # empty range for splits past the end

    g = tl.arange(0, GROUP_PAD)  # [GP] query head within the group
    d = tl.arange(0, HEAD_DIM)  # [D]
    n = tl.arange(0, TILE_N)  # [N]
    head = kv_head * GROUP + g  # [GP] query head index
    g_mask = g < GROUP

    q = tl.load(  # [GP, D]; padding rows are zeros and their results are never stored
        q_ptr + seq * stride_qs + head[:, None] * stride_qh + d[None, :] * stride_qd,
        mask=g_mask[:, None], other=0.0,
    )
    if UPCAST:
        q = q.to(tl.float32)  # the interpreter miscomputes bf16 arithmetic

    m_i = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)  # running max (log2 units)
    l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)  # running sum of exp2(score - m_i)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)  # running sum of p * v

    for tile_start in range(start, end, TILE_N):
        t = tile_start + n  # [N] token positions in the sequence
        t_mask = t < end
        # Where each token lives: its logical block's physical block, then the offset in it.
        # The block-table load is masked too: past seq_len the row may hold garbage or -1.
        block = tl.load(
            block_tables_ptr + seq * stride_bts + (t // BLOCK_SIZE) * stride_btb,
            mask=t_mask, other=0,
        ).to(tl.int64)  # [N]
        offset = t % BLOCK_SIZE  # [N]
        k_row = block * stride_kb + offset * stride_kt + kv_head * stride_kh  # [N] int64
        v_row = block * stride_vb + offset * stride_vt + kv_head * stride_vh  # [N] int64

        k_t = tl.load(  # [D, N]: K transposed, so q @ k_t needs no tl.trans
            k_ptr + k_row[None, :] + d[:, None] * stride_kd, mask=t_mask[None, :], other=0.0
        )
        v = tl.load(  # [N, D]
            v_ptr + v_row[:, None] + d[None, :] * stride_vd, mask=t_mask[:, None], other=0.0
        )
        if UPCAST:
            k_t = k_t.to(tl.float32)
            v = v.to(tl.float32)
            s = tl.dot(q, k_t, input_precision="ieee")  # [GP, N]; "ieee": no tf32 rounding
        else:
            s = tl.dot(q, k_t)  # fp16/bf16 tensor-core dot, fp32 accumulation
        s = s * scale_log2
        s = tl.where(t_mask[None, :], s, float("-inf"))

        # Online softmax: rescale what we have so far to the new running max.
        # Every tile holds at least one valid token, so m_new is finite.
        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # [GP]
        alpha = tl.exp2(m_i - m_new)  # [GP]; exp2(-inf) = 0 on the first tile
        p = tl.exp2(s - m_new[:, None])  # [GP, N]
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if UPCAST:
            acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    # An empty split (start >= seq_len) has l_i == 0: write 0 and lse = -inf so the
    # reduce gives it weight exp2(-inf) = 0 instead of propagating 0/0.
    l_safe = tl.where(l_i > 0, l_i, 1.0)
    o = acc / l_safe[:, None]  # [GP, D]
    o_ptrs = out_ptr + seq * stride_os + head[:, None] * stride_oh + d[None, :] * stride_od
    if NUM_SPLITS == 1:
        tl.store(o_ptrs, o.to(out_ptr.dtype.element_ty), mask=g_mask[:, None])
    else:
        tl.store(o_ptrs + split * stride_op, o, mask=g_mask[:, None])
        lse = tl.where(l_i > 0, m_i + tl.log2(l_safe), float("-inf"))  # [GP]
        tl.store(lse_ptr + seq * stride_ls + head * stride_lh + split * stride_lp, lse,
                 mask=g_mask)


@triton.jit
def _reduce_splits_kernel(
    out_ptr,  # [S, H, D] in q's dtype
    partial_ptr,  # fp32 [S, H, P, D]: each split's softmax-normalised output
    lse_ptr,  # fp32 [S, H, P]: each split's log2-sum-exp2
    stride_os, stride_oh, stride_od,
    stride_ps, stride_ph, stride_pp, stride_pd,
    stride_ls, stride_lh, stride_lp,
    NUM_SPLITS: tl.constexpr,  # P
    SPLITS_PAD: tl.constexpr,  # P padded to a power of two
    HEAD_DIM: tl.constexpr,
):
    # One program per (sequence, query head). Split i's output is weighted by its share
    # of the total softmax mass, 2^lse_i / sum_j 2^lse_j (computed relative to the max).
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    p = tl.arange(0, SPLITS_PAD)  # [SP]
    d = tl.arange(0, HEAD_DIM)  # [D]
    p_mask = p < NUM_SPLITS

    lse = tl.load(lse_ptr + seq * stride_ls + head * stride_lh + p * stride_lp,
                  mask=p_mask, other=float("-inf"))  # [SP]
    lse_max = tl.max(lse, axis=0)  # finite: split 0 always holds the first token attended to
    w = tl.exp2(lse - lse_max)  # [SP]; 0 for empty and padding splits
    part = tl.load(  # [SP, D]
        partial_ptr + seq * stride_ps + head * stride_ph + p[:, None] * stride_pp
        + d[None, :] * stride_pd,
        mask=p_mask[:, None], other=0.0,
    )
    o = tl.sum(part * w[:, None], axis=0) / tl.sum(w, axis=0)  # [D]
    tl.store(out_ptr + seq * stride_os + head * stride_oh + d * stride_od,
             o.to(out_ptr.dtype.element_ty))


def tile_tokens(head_dim: int) -> int:
    """Tokens per loop iteration.

    On a GPU 64 (32 for head_dim 256, to bound registers). In the interpreter 16, the
    smallest tl.dot accepts, so that the short sequences of the CPU tests still span
    several tiles and the online-softmax rescaling and the splits get exercised.
    """
    if backend.INFO.interpreter:
        return 16
    return 64 if head_dim <= 128 else 32


def launch(
    out: torch.Tensor,  # [S, H, D]
    q: torch.Tensor,  # [S, H, D]
    k_cache: torch.Tensor,  # [B, BS, KVH, D]
    v_cache: torch.Tensor,  # [B, BS, KVH, D]
    block_tables: torch.Tensor,  # int32 [S, MB]
    seq_lens: torch.Tensor,  # int32 [S]
    scale: float,
    num_splits: int,
    window_tokens: int | None = None,
) -> None:
    """Run the decode kernel (and the reduce kernel when ``num_splits > 1``) into ``out``;
    ``window_tokens``: each query reads its sequence's last that many tokens only.

    Inputs are assumed checked by :func:`pagedsim.kernels.attention.paged_attention`. Every
    tensor's strides are passed, so views (a ``seq_lens`` column sliced out of a
    ``[S, 2]`` metadata tensor, a transposed table) are read where they really are,
    without a hidden copy.
    """
    num_seqs, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    tile_n = tile_tokens(head_dim)
    table_tokens = block_tables.shape[1] * block_size  # longest sequence the tables allow
    window = 2**30 if window_tokens is None else window_tokens
    # Each split covers a whole number of tiles; computed from the table width (or the
    # window, which bounds what one query reads), not from seq_lens, so launching needs no
    # device-to-host sync.
    span = min(table_tokens, window)
    tokens_per_split = max(tile_n, math.ceil(span / num_splits / tile_n) * tile_n)
    upcast = backend.INFO.interpreter or q.dtype == torch.float32
    common = dict(
        GROUP=group,
        GROUP_PAD=max(16, triton.next_power_of_2(group)),
        HEAD_DIM=head_dim,
        BLOCK_SIZE=block_size,
        TILE_N=tile_n,
        NUM_SPLITS=num_splits,
        UPCAST=upcast,
    )
    grid = (num_seqs, num_kv_heads, num_splits)
    if num_splits == 1:
        _paged_decode_kernel[grid](
            out, out, q, k_cache, v_cache, block_tables, seq_lens,
            scale * math.log2(math.e), tokens_per_split, window,
            *q.stride(), *k_cache.stride(), *v_cache.stride(), *block_tables.stride(),
            seq_lens.stride(0),
            out.stride(0), out.stride(1), 0, out.stride(2),
            0, 0, 0,
            **common,
        )
        return
    partial = torch.empty(  # fp32 [S, H, P, D]
        (num_seqs, num_heads, num_splits, head_dim), dtype=torch.float32, device=q.device
    )
    lse = torch.empty((num_seqs, num_heads, num_splits), dtype=torch.float32, device=q.device)
    _paged_decode_kernel[grid](
        partial, lse, q, k_cache, v_cache, block_tables, seq_lens,
        scale * math.log2(math.e), tokens_per_split, window,
        *q.stride(), *k_cache.stride(), *v_cache.stride(), *block_tables.stride(),
        seq_lens.stride(0),
        *partial.stride(), *lse.stride(),
        **common,
    )
    _reduce_splits_kernel[(num_seqs, num_heads)](
        out, partial, lse,
        *out.stride(), *partial.stride(), *lse.stride(),
        NUM_SPLITS=num_splits,
        SPLITS_PAD=triton.next_power_of_2(num_splits),
        HEAD_DIM=head_dim,
    )
