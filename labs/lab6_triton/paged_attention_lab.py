"""Lab 6: a paged-attention decode kernel in Triton, runnable on a CPU in Triton's interpreter.

Read ``README.md`` beside this file first. You write the bodies marked ``TODO lab 6.k``;
everything else (the wrapper :func:`paged_attention`, the kernel's skeleton) is given.

Shapes (every tensor is contiguous and fp32; the wrapper checks it):

- ``q``            ``[S, H, D]``: one new query token per sequence;
- ``k_cache``      ``[B, BS, KVH, D]``: ``B`` blocks of ``BS`` slots each; slot number
  ``block * BS + offset``; the row of KV head ``j`` in slot ``s`` starts
  ``(s * KVH + j) * D`` elements into the tensor;
- ``v_cache``      ``[B, BS, KVH, D]``, laid out like ``k_cache``;
- ``block_tables`` int32 ``[S, MB]``: row ``s`` lists sequence ``s``'s physical blocks in
  order; entries past ``ceil(seq_len / BS)`` are padding (``-1`` or anything);
- ``seq_lens``     int32 ``[S]``: tokens per sequence (>= 1).

``G = H // KVH`` query heads share one KV head (grouped-query attention). The result is, for
each sequence ``s`` and query head ``h``, ``softmax(q[s, h] . K^T * scale) @ V`` over the
sequence's ``seq_lens[s]`` cached tokens of KV head ``h // G``.
"""

from __future__ import annotations

import math
import os

import torch

# Triton reads TRITON_INTERPRET when it is imported and when a kernel is decorated, so
# without a GPU the CPU interpreter must be asked for before `import triton`.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

LOG2_E = math.log2(math.e)  # exp(x) == exp2(x * log2(e)); the kernel works in log2 units


# --------------------------------------------------------------------------- task 6.1


@triton.jit
def token_slots(block_tables_ptr, seq, t, t_mask, max_blocks, BLOCK_SIZE: tl.constexpr):
    """Physical slots (int64 ``[N]``) of tokens ``t`` (``[N]``) of sequence ``seq``.

    Token ``t`` sits in logical block ``t // BLOCK_SIZE`` of its sequence; row ``seq`` of the
    block table (``max_blocks`` int32 entries per row) says which physical block that is,
    and the token's slot is ``physical_block * BLOCK_SIZE + t % BLOCK_SIZE``. Lanes where
    ``t_mask`` is False are past the sequence's end: they must not read the table (its
    row holds padding there, or the row ends) and their slot is never used.
    """
    # BEGIN SOLUTION lab 6.1: masked table load, then block * BLOCK_SIZE + offset
    block = tl.load(block_tables_ptr + seq * max_blocks + t // BLOCK_SIZE, mask=t_mask, other=0)
    # int64 before multiplying: on a real GPU cache, slot * row size passes 2**31.
    return block.to(tl.int64) * BLOCK_SIZE + t % BLOCK_SIZE
    # END SOLUTION


# --------------------------------------------------------------------------- task 6.2


@triton.jit
def load_rows(cache_ptr, slots, t_mask, kv_head, num_kv_heads, HEAD_DIM: tl.constexpr):
    """The K (or V) rows ``[N, HEAD_DIM]`` of KV head ``kv_head`` in ``slots`` (``[N]``).

    Rows where ``t_mask`` is False read as 0.0 and must not touch memory: past the end of a
    sequence the last block's slots hold whatever was there before (NaN in the graders),
    and a padding slot may lie outside the cache.
    """
    d = tl.arange(0, HEAD_DIM)
    # BEGIN SOLUTION lab 6.2: [N, HEAD_DIM] pointers, one masked load, 0.0 past the end
    rows = (slots * num_kv_heads + kv_head) * HEAD_DIM  # [N] element offset of each row
    return tl.load(cache_ptr + rows[:, None] + d[None, :], mask=t_mask[:, None], other=0.0)
    # END SOLUTION


# --------------------------------------------------------------------------- task 6.3


@triton.jit
def load_group_queries(q_ptr, seq, kv_head, num_heads, GROUP: tl.constexpr,
                       GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr):
    """The queries of the ``GROUP`` query heads that read KV head ``kv_head`` (GQA).

    Returns ``(q, heads, valid)``: ``q`` ``[GROUP_PAD, HEAD_DIM]``, row ``g`` the query of
    query head ``heads[g]`` of sequence ``seq``; ``valid`` ``[GROUP_PAD]`` is False on the
    padding rows (``GROUP_PAD`` is ``GROUP`` rounded up to a power of two, because
    ``tl.arange`` needs one), whose ``q`` rows are 0.0 and must not be read from memory.
    Query head ``h`` reads KV head ``h // GROUP``.
    """
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, HEAD_DIM)
    # BEGIN SOLUTION lab 6.3: the group's query heads, real lanes, masked load of q
    heads = kv_head * GROUP + g
    valid = g < GROUP
    q = tl.load(q_ptr + (seq * num_heads + heads[:, None]) * HEAD_DIM + d[None, :],
                mask=valid[:, None], other=0.0)
    return q, heads, valid
    # END SOLUTION


# --------------------------------------------------------------------------- the kernel


@triton.jit
def paged_decode_kernel(
    out_ptr,  # NUM_SPLITS == 1: [S, H, D];  else fp32 partial outputs [S, H, NUM_SPLITS, D]
    lse_ptr,  # fp32 [S, H, NUM_SPLITS]: each split's log2-sum-exp2 (unused if NUM_SPLITS == 1)
    q_ptr,  # [S, H, D]
    k_ptr,  # [B, BS, KVH, D]
    v_ptr,  # [B, BS, KVH, D]
    block_tables_ptr,  # int32 [S, MB]
    seq_lens_ptr,  # int32 [S]
    scale_log2,  # softmax scale * log2(e)
    num_heads,  # H
    num_kv_heads,  # KVH
    max_blocks,  # MB, entries per block-table row
    tokens_per_split,  # tokens each split covers: a multiple of TILE_N
    GROUP: tl.constexpr,  # G = H // KVH
    GROUP_PAD: tl.constexpr,  # G rounded up to a power of two
    HEAD_DIM: tl.constexpr,  # D, a power of two
    BLOCK_SIZE: tl.constexpr,  # BS, slots per block
    TILE_N: tl.constexpr,  # tokens per loop iteration, a power of two
    NUM_SPLITS: tl.constexpr,  # P, pieces each sequence's context is cut into (split-K)
):
    """One program per (sequence, KV head, split): attention of the KV head's ``GROUP``
    query heads over tokens ``[split * tokens_per_split, ...)`` of the sequence."""
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    start = split * tokens_per_split
    end = tl.minimum(start + tokens_per_split, seq_len)  # start >= end: an empty split

    q, heads, valid = load_group_queries(q_ptr, seq, kv_head, num_heads, GROUP, GROUP_PAD,
                                         HEAD_DIM)  # [GP, D], [GP], [GP]
    m_i = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)  # running max (log2 units)
    l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)  # running sum of exp2(score - m_i)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)  # running sum of p * v
    n = tl.arange(0, TILE_N)
    for tile_start in range(start, end, TILE_N):
        t = tile_start + n  # [N] token positions
        t_mask = t < end
        slots = token_slots(block_tables_ptr, seq, t, t_mask, max_blocks, BLOCK_SIZE)
        k = load_rows(k_ptr, slots, t_mask, kv_head, num_kv_heads, HEAD_DIM)  # [N, D]
        v = load_rows(v_ptr, slots, t_mask, kv_head, num_kv_heads, HEAD_DIM)  # [N, D]
        # Scores s [GP, N] = (q . k) * scale_log2, -inf where t_mask is False; then the
        # online-softmax update: new running max, rescale l_i and acc by exp2(old - new max),
        # add this tile's exp2(s - new max) to l_i and its p-weighted sum of v rows to acc.
        # BEGIN SOLUTION lab 6.4: masked scores [GP, N], then the online-softmax update
        # q . k for every (query head, token) pair; tl.dot would need tiles of 16 or more.
        s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale_log2  # [GP, N]
        s = tl.where(t_mask[None, :], s, float("-inf"))
        # Every tile holds at least one token of the range, so m_new is finite.
        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # [GP]
        alpha = tl.exp2(m_i - m_new)  # rescales what was summed against the old max
        p = tl.exp2(s - m_new[:, None])  # [GP, N]; 0 past the end
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        m_i = m_new
        # END SOLUTION

    d = tl.arange(0, HEAD_DIM)
    if NUM_SPLITS == 1:
        # BEGIN SOLUTION lab 6.4: normalise, store the real query heads' rows of out
        o = acc / l_i[:, None]
        tl.store(out_ptr + (seq * num_heads + heads[:, None]) * HEAD_DIM + d[None, :], o,
                 mask=valid[:, None])
        # END SOLUTION
    else:
        # Store this split's normalised output acc / l_i in row (seq, head, split) of the
        # partial buffer and its log2-sum-exp2 m_i + log2(l_i) in lse. An empty split (it
        # starts past seq_len) has l_i == 0: store 0.0 and lse = -inf, never 0 / 0.
        # BEGIN SOLUTION lab 6.5: the split's partial output and lse (empty: 0.0, -inf)
        l_safe = tl.where(l_i > 0, l_i, 1.0)  # an empty split has l_i == 0 and acc == 0
        row = (seq * num_heads + heads) * NUM_SPLITS + split  # [GP] row of partial and lse
        tl.store(out_ptr + row[:, None] * HEAD_DIM + d[None, :], acc / l_safe[:, None],
                 mask=valid[:, None])
        lse = tl.where(l_i > 0, m_i + tl.log2(l_safe), float("-inf"))
        tl.store(lse_ptr + row, lse, mask=valid)
        # END SOLUTION


# --------------------------------------------------------------------------- task 6.5


@triton.jit
def reduce_splits_kernel(
    out_ptr,  # [S, H, D]
    partial_ptr,  # fp32 [S, H, NUM_SPLITS, D]: each split's normalised output
    lse_ptr,  # fp32 [S, H, NUM_SPLITS]: each split's log2-sum-exp2 (-inf if it was empty)
    num_heads,  # H
    NUM_SPLITS: tl.constexpr,
    SPLITS_PAD: tl.constexpr,  # NUM_SPLITS rounded up to a power of two
    HEAD_DIM: tl.constexpr,
):
    """One program per (sequence, query head): merge the splits. Split ``i`` holds the share
    ``2**lse_i`` of the softmax's total mass, so ``out = sum_i w_i * partial_i / sum_i w_i``
    with ``w_i = 2**(lse_i - max_j lse_j)`` (relative to the max, so nothing overflows)."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    p = tl.arange(0, SPLITS_PAD)
    d = tl.arange(0, HEAD_DIM)
    # BEGIN SOLUTION lab 6.5: weight the splits' partial rows by 2 ** lse, store
    p_mask = p < NUM_SPLITS
    row = (seq * num_heads + head) * NUM_SPLITS + p  # [SP]
    lse = tl.load(lse_ptr + row, mask=p_mask, other=float("-inf"))
    w = tl.exp2(lse - tl.max(lse, axis=0))  # [SP]; split 0 holds token 0, so the max is finite
    part = tl.load(partial_ptr + row[:, None] * HEAD_DIM + d[None, :], mask=p_mask[:, None],
                   other=0.0)
    o = tl.sum(part * w[:, None], axis=0) / tl.sum(w, axis=0)
    tl.store(out_ptr + (seq * num_heads + head) * HEAD_DIM + d, o)
    # END SOLUTION


# --------------------------------------------------------------------------- the wrapper


def _check_inputs(q, k_cache, v_cache, block_tables, seq_lens, num_splits, tile_n) -> None:
    """Raise ``ValueError`` naming the first bad input (one line)."""
    for name, x, ndim, dtype in (("q", q, 3, torch.float32), ("k_cache", k_cache, 4,
                                 torch.float32), ("v_cache", v_cache, 4, torch.float32),
                                 ("block_tables", block_tables, 2, torch.int32),
                                 ("seq_lens", seq_lens, 1, torch.int32)):
        if not isinstance(x, torch.Tensor) or x.ndim != ndim or x.dtype != dtype:
            got = (f"{tuple(x.shape)} {x.dtype}" if isinstance(x, torch.Tensor)
                   else type(x).__name__)
            raise ValueError(f"{name} must be a {ndim}-d {dtype} tensor, got {got}")
        if x.device != q.device:
            raise ValueError(f"{name} is on {x.device}, q on {q.device}: use one device")
    num_seqs, num_heads, head_dim = q.shape
    num_blocks, block_size, num_kv_heads, cache_dim = k_cache.shape
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache is {tuple(v_cache.shape)}, k_cache {tuple(k_cache.shape)}")
    if cache_dim != head_dim or head_dim & (head_dim - 1):
        raise ValueError(f"head_dim must be one power of two in q and the caches, got "
                         f"{head_dim} and {cache_dim}")
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads ({num_heads}) must be a multiple of num_kv_heads "
                         f"({num_kv_heads})")
    if block_tables.shape[0] != num_seqs or seq_lens.shape[0] != num_seqs:
        raise ValueError(f"q has {num_seqs} sequences, block_tables {block_tables.shape[0]} "
                         f"rows, seq_lens {seq_lens.shape[0]} entries")
    for name, value in (("num_splits", num_splits), ("tile_n", tile_n)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if tile_n & (tile_n - 1):
        raise ValueError(f"tile_n must be a power of two, got {tile_n}")
    lens = seq_lens.cpu().long()
    capacity = block_tables.shape[1] * block_size
    bad = [int(n) for n in lens if not 1 <= n <= capacity]
    if bad:
        raise ValueError(f"seq_lens must be in 1..{capacity} (the table's {block_tables.shape[1]}"
                         f" blocks x {block_size} slots), got {bad[0]}")
    used = torch.arange(block_tables.shape[1])[None, :] < (lens[:, None] + block_size - 1
                                                           ) // block_size
    tables = block_tables.cpu().long()
    out_of_range = used & ((tables < 0) | (tables >= num_blocks))
    if out_of_range.any():
        s, b = (int(i) for i in out_of_range.nonzero()[0])
        raise ValueError(f"block_tables[{s}, {b}] = {int(tables[s, b])} is not a block of the "
                         f"cache (0..{num_blocks - 1})")


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    block_tables: torch.Tensor, seq_lens: torch.Tensor,
                    scale: float | None = None, *, num_splits: int = 1,
                    tile_n: int = 8) -> torch.Tensor:
    """Decode attention over a paged KV cache: ``[S, H, D]`` fp32 (shapes: module docstring).

    ``scale`` defaults to ``1 / sqrt(D)``. ``num_splits > 1`` cuts each sequence's context
    into that many pieces of whole tiles, run as separate programs and merged by
    :func:`reduce_splits_kernel` (split-K, as flash-decoding does). ``tile_n`` is the number
    of tokens the kernel handles per loop iteration.
    """
    _check_inputs(q, k_cache, v_cache, block_tables, seq_lens, num_splits, tile_n)
    q, k_cache, v_cache = q.contiguous(), k_cache.contiguous(), v_cache.contiguous()
    block_tables, seq_lens = block_tables.contiguous(), seq_lens.contiguous()
    num_seqs, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    max_blocks = block_tables.shape[1]
    group = num_heads // num_kv_heads
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    # Splits cover whole tiles of the longest context the table allows (known without
    # reading seq_lens back from the device).
    tiles = math.ceil(max_blocks * block_size / tile_n)
    tokens_per_split = math.ceil(tiles / num_splits) * tile_n
    out = torch.empty_like(q)
    common = dict(GROUP=group, GROUP_PAD=triton.next_power_of_2(group), HEAD_DIM=head_dim,
                  BLOCK_SIZE=block_size, TILE_N=tile_n, NUM_SPLITS=num_splits)
    grid = (num_seqs, num_kv_heads, num_splits)
    args = (q, k_cache, v_cache, block_tables, seq_lens, scale * LOG2_E, num_heads,
            num_kv_heads, max_blocks, tokens_per_split)
    if num_splits == 1:
        paged_decode_kernel[grid](out, out, *args, **common)  # lse_ptr unused: any tensor
        return out
    partial = torch.empty(num_seqs, num_heads, num_splits, head_dim, dtype=torch.float32,
                          device=q.device)
    lse = torch.empty(num_seqs, num_heads, num_splits, dtype=torch.float32, device=q.device)
    paged_decode_kernel[grid](partial, lse, *args, **common)
    reduce_splits_kernel[(num_seqs, num_heads)](
        out, partial, lse, num_heads, NUM_SPLITS=num_splits,
        SPLITS_PAD=triton.next_power_of_2(num_splits), HEAD_DIM=head_dim)
    return out
