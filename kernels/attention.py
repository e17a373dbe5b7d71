"""Paged decode attention: the public wrapper, the split heuristic, a torch backend, a reference.

``paged_attention`` computes, for each sequence ``s`` and query head ``h``,
``softmax(q[s, h] . K_s^T * scale) @ V_s`` where ``K_s``/``V_s`` are the sequence's
``seq_lens[s]`` cached tokens, found through its block table: token ``t`` sits in
physical block ``block_tables[s, t // block_size]`` at offset ``t % block_size``.

With a sliding window of ``W`` tokens (``window_tokens``, a sliding-window layer of
gpt-oss or Gemma 3) the new token at position ``L - 1`` attends only to tokens
``max(0, L - W) .. L - 1``: blocks wholly before them are skipped, never loaded, so
their table entries may be -1 (a hybrid manager's null block: the block went back to
the pool), and the tokens before ``L - W`` in the first block read are masked.

The Triton kernels are in :mod:`pagedsim.kernels.triton_attention`; this file checks inputs,
picks the number of splits, dispatches, and holds two torch versions: a vectorised
backend (used when triton is missing, or on request) and a deliberately naive
reference (a loop over tokens, fp64) that the tests trust.
"""

from __future__ import annotations

import math

import torch

from . import backend
from .checks import (
    require_cache_pair,
    require_int_in,
    require_positive_finite,
    require_same_device,
    require_tensor,
)

MIN_HEAD_DIM, MAX_HEAD_DIM = 32, 256
MIN_TOKENS_PER_SPLIT = 512  # below this a split's fixed cost (partial write, reduce) dominates
MAX_SPLITS = 32  # the most splits the heuristic picks, and the most a caller may ask for
PROGRAMS_PER_SM = 2  # aim for two waves' worth of programs when splitting


# --------------------------------------------------------------------------- heuristic


def choose_num_splits(num_seqs: int, num_kv_heads: int, context_tokens: int,
                      num_sms: int | None) -> int:
    """How many pieces to split each sequence into (flash-decoding).

    Without splitting the kernel launches one program per (sequence, kv head). When
    that already fills the GPU (``num_seqs * num_kv_heads >= num_sms``) splitting
    only adds work: return 1. Otherwise (few sequences, long context) split so that
    about ``PROGRAMS_PER_SM * num_sms`` programs run, keeping at least
    ``MIN_TOKENS_PER_SPLIT`` tokens per split and at most ``MAX_SPLITS`` splits,
    rounded down to a power of two (the split count is a compile-time constant;
    powers of two bound the number of compiled variants). ``num_sms=None`` (a CPU:
    the interpreter runs programs one after another) means 1.

    ``context_tokens`` is the longest context the block tables allow (width times
    block size), so choosing needs no device-to-host sync.
    """
    if num_sms is None:
        return 1
    programs = num_seqs * num_kv_heads
    if programs >= num_sms:
        return 1
    wanted = math.ceil(PROGRAMS_PER_SM * num_sms / programs)
    by_length = context_tokens // MIN_TOKENS_PER_SPLIT
    splits = max(1, min(wanted, by_length, MAX_SPLITS))
    return 1 << (splits.bit_length() - 1)


def _num_sms(device: torch.device) -> int | None:
    if device.type != "cuda":
        return None
    return torch.cuda.get_device_properties(device).multi_processor_count


# --------------------------------------------------------------------------- checks


def check_attention_inputs(
    q: torch.Tensor,  # [S, H, D]
    k_cache: torch.Tensor,  # [B, BS, KVH, D]
    v_cache: torch.Tensor,  # [B, BS, KVH, D]
    block_tables: torch.Tensor,  # int32 [S, MB]
    seq_lens: torch.Tensor,  # int32 [S]
    backend_name: str,
    check_values: bool = True,
    window_tokens: int | None = None,
) -> None:
    """Raise ``ValueError`` naming the problem if the inputs cannot be attended over
    (with ``window_tokens``, table entries of blocks wholly before the window are not
    read, so they are not checked)."""
    require_tensor("q", q, 3)
    require_cache_pair(k_cache, v_cache)
    require_tensor("block_tables", block_tables, 2)
    require_tensor("seq_lens", seq_lens, 1)
    require_same_device(backend_name, q=q, k_cache=k_cache, v_cache=v_cache,
                        block_tables=block_tables, seq_lens=seq_lens)
    if q.dtype != k_cache.dtype:
        raise ValueError(f"q is {q.dtype} but the caches are {k_cache.dtype}")
    if block_tables.dtype != torch.int32 or seq_lens.dtype != torch.int32:
        raise ValueError(
            f"block_tables and seq_lens must be int32, got {block_tables.dtype}, {seq_lens.dtype}"
        )
    num_seqs, num_heads, head_dim = q.shape
    num_blocks, block_size, num_kv_heads, cache_head_dim = k_cache.shape
    if cache_head_dim != head_dim:
        raise ValueError(f"q has head_dim {head_dim} but the caches have {cache_head_dim}")
    if not (MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM and head_dim & (head_dim - 1) == 0):
        raise ValueError(
            f"head_dim must be a power of two in {MIN_HEAD_DIM}..{MAX_HEAD_DIM}, got {head_dim}"
        )
    if num_kv_heads < 1 or num_heads % num_kv_heads:
        raise ValueError(
            f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})"
        )
    if block_tables.shape[0] != num_seqs or seq_lens.shape[0] != num_seqs:
        raise ValueError(
            f"q has {num_seqs} sequences, block_tables {block_tables.shape[0]} rows, "
            f"seq_lens {seq_lens.shape[0]} entries"
        )
    if num_seqs == 0:
        return
    if block_tables.shape[1] == 0:
        raise ValueError("block_tables has no columns: every sequence needs at least one block")
    if not check_values:
        return
    # One sync: bring lengths and tables to the host and check every address-forming value.
    lens = seq_lens.cpu().long()
    if int(lens.min()) < 1:
        raise ValueError(f"every seq_len must be >= 1, got {lens.tolist()}")
    capacity_tokens = block_tables.shape[1] * block_size
    too_long = (lens > capacity_tokens).nonzero().flatten().tolist()
    if too_long:
        s = too_long[0]
        raise ValueError(
            f"seq_lens[{s}] = {int(lens[s])} is longer than its block table allows "
            f"({block_tables.shape[1]} blocks x {block_size} slots = {capacity_tokens})"
        )
    used_blocks = (lens + block_size - 1) // block_size  # [S] blocks each sequence reads
    first_block = torch.zeros_like(lens) if window_tokens is None else \
        (lens - window_tokens).clamp(min=0) // block_size  # [S] first block in the window
    tables = block_tables.cpu().long()
    col = torch.arange(tables.shape[1])[None, :]
    used = (col < used_blocks[:, None]) & (col >= first_block[:, None])  # [S, MB]
    bad = used & ((tables < 0) | (tables >= num_blocks))
    if bad.any():
        s, b = (int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"block_tables[{s}, {b}] = {int(tables[s, b])} is out of range: the cache has "
            f"{num_blocks} blocks (0..{num_blocks - 1})"
        )


# --------------------------------------------------------------------------- public API


def paged_attention(
    q: torch.Tensor,  # [S, H, D]
    k_cache: torch.Tensor,  # [B, BS, KVH, D]
    v_cache: torch.Tensor,  # [B, BS, KVH, D]
    block_tables: torch.Tensor,  # int32 [S, MB]
    seq_lens: torch.Tensor,  # int32 [S]
    scale: float | None = None,
    *,
    num_splits: int | None = None,
    out: torch.Tensor | None = None,
    backend: str | None = None,
    check_values: bool = True,
    window_tokens: int | None = None,
) -> torch.Tensor:
    """Decode attention for one new query token per sequence over a paged KV cache.

    Args:
        q: the new tokens' queries, ``[num_seqs, num_heads, head_dim]``.
        k_cache, v_cache: ``[num_blocks, block_size, num_kv_heads, head_dim]``, same dtype
            as ``q`` (fp32, fp16 or bf16). ``num_heads`` must be a multiple of
            ``num_kv_heads`` (grouped-query attention).
        block_tables: int32 ``[num_seqs, max_blocks]``; row ``s`` lists sequence ``s``'s
            physical blocks in order. Entries past ``ceil(seq_len / block_size)`` are
            ignored (may be -1).
        seq_lens: int32 ``[num_seqs]``, tokens per sequence (>= 1).
        scale: softmax scale, a finite float > 0; default ``1 / sqrt(head_dim)``.
        num_splits: split each sequence into this many pieces (flash-decoding) and merge
            them with a reduce kernel; an int in ``1..MAX_SPLITS`` (32), default:
            :func:`choose_num_splits`. Triton only (the torch backend checks and
            ignores it).
        out: optional ``[num_seqs, num_heads, head_dim]`` output buffer (same dtype/device).
        backend: ``"triton"`` or ``"torch"``; default :data:`pagedsim.kernels.BACKEND`.
        check_values: check lengths and block ids on the host (one sync). Benchmarks
            turn it off; shapes, dtypes and devices are always checked.
        window_tokens: a sliding window in tokens (an int >= 1): each query attends to
            its sequence's last ``window_tokens`` tokens only, and blocks wholly before
            them are never read (their entries may be -1). None: the whole sequence.

    Returns:
        ``[num_seqs, num_heads, head_dim]`` in ``q``'s dtype.
    """
    name = _resolve(backend)
    if window_tokens is not None:
        window_tokens = require_int_in("window_tokens", window_tokens, 1, 2**30,
                                       "a sliding window in tokens")
    check_attention_inputs(q, k_cache, v_cache, block_tables, seq_lens, name, check_values,
                           window_tokens)
    scale = 1.0 / math.sqrt(q.shape[2]) if scale is None else require_positive_finite(
        "scale", scale)
    if out is None:
        out = torch.empty_like(q)
    elif out.shape != q.shape or out.dtype != q.dtype or out.device != q.device:
        raise ValueError(
            f"out must be {tuple(q.shape)} {q.dtype} on {q.device}, "
            f"got {tuple(out.shape)} {out.dtype} on {out.device}"
        )
    if num_splits is None:  # a window bounds the work per sequence
        context_tokens = min(block_tables.shape[1] * k_cache.shape[1],
                             window_tokens or 2**30)
        num_splits = choose_num_splits(q.shape[0], k_cache.shape[2], context_tokens,
                                       _num_sms(q.device))
    else:
        # Bounded: each split is a program and a row of the partial buffer even when it
        # holds no token, so 2,000 splits of a short context took 32 s in the interpreter.
        num_splits = require_int_in("num_splits", num_splits, 1, MAX_SPLITS,
                                    "the splits per sequence for flash-decoding")
    if q.shape[0] == 0:
        return out
    if name == "torch":
        out.copy_(paged_attention_torch(q, k_cache, v_cache, block_tables, seq_lens, scale,
                                        window_tokens))
        return out
    from . import triton_attention  # imported lazily: only this path needs triton

    triton_attention.launch(out, q, k_cache, v_cache, block_tables, seq_lens, scale, num_splits,
                            window_tokens)
    return out


def _resolve(name: str | None) -> str:
    return backend.resolve(name)


# --------------------------------------------------------------------------- torch backend


def paged_attention_torch(
    q: torch.Tensor,  # [S, H, D]
    k_cache: torch.Tensor,  # [B, BS, KVH, D]
    v_cache: torch.Tensor,  # [B, BS, KVH, D]
    block_tables: torch.Tensor,  # int32 [S, MB]
    seq_lens: torch.Tensor,  # int32 [S]
    scale: float,
    window_tokens: int | None = None,
) -> torch.Tensor:
    """Vectorised torch version: gather every table entry, mask past seq_len (and, with a
    window, before its start), fp32 softmax.

    Memory is ``S * MB * BS * KVH * D`` per cache: fine for a laptop, not for a benchmark.
    """
    num_seqs, num_heads, head_dim = q.shape
    num_blocks, block_size, num_kv_heads, _ = k_cache.shape
    group = num_heads // num_kv_heads
    context = block_tables.shape[1] * block_size
    idx = block_tables.long().clamp(0, num_blocks - 1)  # unused entries may be -1
    k = k_cache[idx].reshape(num_seqs, context, num_kv_heads, head_dim).float()  # [S, T, KVH, D]
    v = v_cache[idx].reshape(num_seqs, context, num_kv_heads, head_dim).float()  # [S, T, KVH, D]
    qg = q.float().reshape(num_seqs, num_kv_heads, group, head_dim)  # [S, KVH, G, D]
    scores = torch.einsum("skgd,stkd->skgt", qg, k) * scale  # [S, KVH, G, T]
    pos = torch.arange(context, device=q.device)[None, :]  # [1, T]
    valid = pos < seq_lens[:, None].long()  # [S, T]
    if window_tokens is not None:  # entries before the window may be -1: clamped, masked
        valid &= pos >= seq_lens[:, None].long() - window_tokens
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    # Slots past seq_len may hold anything, NaN included (0 * NaN = NaN): zero them.
    v = v.masked_fill(~valid[:, :, None, None], 0.0)
    o = torch.einsum("skgt,stkd->skgd", probs, v)  # [S, KVH, G, D]
    return o.reshape(num_seqs, num_heads, head_dim).to(q.dtype)


# --------------------------------------------------------------------------- reference


def paged_attention_reference(
    q: torch.Tensor,  # [S, H, D]
    k_cache: torch.Tensor,  # [B, BS, KVH, D]
    v_cache: torch.Tensor,  # [B, BS, KVH, D]
    block_tables: torch.Tensor,  # int32 [S, MB]
    seq_lens: torch.Tensor,  # int32 [S]
    scale: float | None = None,
    window_tokens: int | None = None,
) -> torch.Tensor:
    """The obviously right version, in fp64: per sequence, look up the slot of each token
    it attends to (the last ``window_tokens`` with a window, else all of them).

    Returns fp64 ``[num_seqs, num_heads, head_dim]``; compare after casting.
    """
    num_seqs, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    out = torch.empty(num_seqs, num_heads, head_dim, dtype=torch.float64)
    for s in range(num_seqs):
        n = int(seq_lens[s])
        first = 0 if window_tokens is None else max(0, n - window_tokens)
        blocks = [int(block_tables[s, t // block_size]) for t in range(first, n)]
        offsets = [t % block_size for t in range(first, n)]
        k = k_cache[blocks, offsets].double().cpu()  # [n, KVH, D]
        v = v_cache[blocks, offsets].double().cpu()  # [n, KVH, D]
        for h in range(num_heads):
            kv_head = h // group  # query heads kv_head*G .. kv_head*G+G-1 share kv_head
            scores = k[:, kv_head] @ q[s, h].double().cpu() * scale  # [n]
            out[s, h] = torch.softmax(scores, dim=0) @ v[:, kv_head]
    return out
