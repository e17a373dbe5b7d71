"""The only coupling between the lab 6 graders and your ``paged_attention_lab.py``.

The graders call the functions below and nothing else. Three of them run your Triton
helpers (:func:`token_slots`, :func:`load_rows`, :func:`load_group_queries`) inside small
test kernels defined here, so each task is checked on its own; :func:`paged_attention`
calls your wrapper. Keep those names and signatures in your module; structure the rest as
you like.

Without a CUDA GPU every kernel runs in Triton's CPU interpreter: ``TRITON_INTERPRET=1``
is set here, before your module (and with it ``triton``) is imported. With a GPU the
kernels run on it, and the tensors the graders build live there (``DEVICE``).
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before anything imports triton

import paged_attention_lab as lab  # noqa: E402  (after the interpreter switch)
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

#: Where the graders put their tensors: the GPU if there is one, else the CPU.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
_STUDENT_FILE = Path(lab.__file__).name


class KernelError(RuntimeError):
    """A kernel (or the wrapper) raised: the error and where in your module it happened."""


def _run(launch: Callable[[], object]) -> object:
    """Run ``launch()``; if it raises, raise one :class:`KernelError` line instead.

    The interpreter's traceback runs through dozens of Triton frames, and formatting it
    for every failing test made a failing grader run take minutes. The line keeps what
    you need: the original error and the lines of your module it passed through (run the
    kernel yourself for the full traceback).
    """
    try:
        return launch()
    except Exception as exc:  # noqa: BLE001  (any failure of student code fails the test)
        root, where = exc, []
        while root.__cause__ is not None:  # the interpreter wraps the real error
            root = root.__cause__
        for err in (exc, root):
            where += [f"{Path(f.filename).name}:{f.lineno} in {f.name}"
                      for f in traceback.extract_tb(err.__traceback__)
                      if Path(f.filename).name == _STUDENT_FILE]
        at = f" (at {', '.join(dict.fromkeys(where))})" if where else ""
        raise KernelError(f"{type(root).__name__}: {root}{at}") from None


@triton.jit
def _slots_harness(out_ptr, block_tables_ptr, seq_lens_ptr, max_blocks, width,
                   BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr):
    # One program per (sequence, tile): every token's slot, -1 past the sequence's end.
    seq = tl.program_id(0)
    t = tl.program_id(1) * TILE_N + tl.arange(0, TILE_N)
    t_mask = t < tl.load(seq_lens_ptr + seq)
    slots = lab.token_slots(block_tables_ptr, seq, t, t_mask, max_blocks, BLOCK_SIZE)
    tl.store(out_ptr + seq * width + t, tl.where(t_mask, slots, -1), mask=t < width)


@triton.jit
def _rows_harness(out_ptr, cache_ptr, slots_ptr, seq_lens_ptr, num_kv_heads, width,
                  HEAD_DIM: tl.constexpr, TILE_N: tl.constexpr):
    # One program per (sequence, tile, kv head): the rows load_rows returns, stored for every
    # token of the table's width (rows past the sequence's end included).
    seq = tl.program_id(0)
    kv_head = tl.program_id(2)
    t = tl.program_id(1) * TILE_N + tl.arange(0, TILE_N)
    in_table = t < width
    slots = tl.load(slots_ptr + seq * width + t, mask=in_table, other=0)
    t_mask = t < tl.load(seq_lens_ptr + seq)
    rows = lab.load_rows(cache_ptr, slots, t_mask, kv_head, num_kv_heads, HEAD_DIM)
    d = tl.arange(0, HEAD_DIM)
    dst = ((seq * width + t[:, None]) * num_kv_heads + kv_head) * HEAD_DIM + d[None, :]
    tl.store(out_ptr + dst, rows, mask=in_table[:, None])


@triton.jit
def _queries_harness(q_out_ptr, heads_out_ptr, valid_out_ptr, q_ptr, num_heads, num_kv_heads,
                     GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr):
    # One program per (sequence, kv head): the group's query tile, head ids and valid flags.
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    q, heads, valid = lab.load_group_queries(q_ptr, seq, kv_head, num_heads, GROUP, GROUP_PAD,
                                             HEAD_DIM)
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, HEAD_DIM)
    tile = (seq * num_kv_heads + kv_head) * GROUP_PAD
    tl.store(q_out_ptr + (tile + g[:, None]) * HEAD_DIM + d[None, :], q)
    tl.store(heads_out_ptr + kv_head * GROUP_PAD + g, heads.to(tl.int64))
    tl.store(valid_out_ptr + kv_head * GROUP_PAD + g, valid.to(tl.int8))


def token_slots(block_tables: torch.Tensor, seq_lens: torch.Tensor, block_size: int,
                tile_n: int = 8) -> torch.Tensor:
    """int64 ``[S, MB * block_size]``: the slot of token ``t`` of sequence ``s`` (-1 past its
    end), as your ``token_slots`` computes it."""
    num_seqs, max_blocks = block_tables.shape
    width = max_blocks * block_size
    out = torch.full((num_seqs, width), -2, dtype=torch.int64, device=block_tables.device)
    grid = (num_seqs, triton.cdiv(width, tile_n))
    _run(lambda: _slots_harness[grid](out, block_tables, seq_lens, max_blocks, width,
                                      BLOCK_SIZE=block_size, TILE_N=tile_n))
    return out


def load_rows(cache: torch.Tensor, slots: torch.Tensor, seq_lens: torch.Tensor,
              tile_n: int = 8) -> torch.Tensor:
    """``[S, W, KVH, D]``: row ``[s, t, j]`` is what your ``load_rows`` returns for token ``t``
    of sequence ``s`` in KV head ``j``, given its slot ``slots[s, t]`` (int64 ``[S, W]``;
    tokens ``t >= seq_lens[s]`` are past the end, their slots are what the table's padding
    would give)."""
    num_seqs, width = slots.shape
    num_kv_heads, head_dim = cache.shape[2], cache.shape[3]
    out = torch.full((num_seqs, width, num_kv_heads, head_dim), -7.0, dtype=torch.float32,
                     device=cache.device)
    grid = (num_seqs, triton.cdiv(width, tile_n), num_kv_heads)
    _run(lambda: _rows_harness[grid](out, cache, slots, seq_lens, num_kv_heads, width,
                                     HEAD_DIM=head_dim, TILE_N=tile_n))
    return out


def load_group_queries(q: torch.Tensor, num_kv_heads: int
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What your ``load_group_queries`` returns for every (sequence, KV head) program:
    ``(q_tiles [S, KVH, GP, D], heads [KVH, GP] int64, valid [KVH, GP] bool)`` with
    ``GP`` = the group size rounded up to a power of two."""
    num_seqs, num_heads, head_dim = q.shape
    group = num_heads // num_kv_heads
    group_pad = triton.next_power_of_2(group)
    q_tiles = torch.full((num_seqs, num_kv_heads, group_pad, head_dim), -7.0,
                         dtype=torch.float32, device=q.device)
    heads = torch.full((num_kv_heads, group_pad), -2, dtype=torch.int64, device=q.device)
    valid = torch.full((num_kv_heads, group_pad), -2, dtype=torch.int8, device=q.device)
    _run(lambda: _queries_harness[(num_seqs, num_kv_heads)](
        q_tiles, heads, valid, q, num_heads, num_kv_heads, GROUP=group, GROUP_PAD=group_pad,
        HEAD_DIM=head_dim))
    if not bool(((valid == 0) | (valid == 1)).all()):
        raise AssertionError(f"valid must hold booleans, got {valid.tolist()}")
    return q_tiles, heads, valid.bool()


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    block_tables: torch.Tensor, seq_lens: torch.Tensor,
                    scale: float | None = None, num_splits: int = 1,
                    tile_n: int = 8) -> torch.Tensor:
    """Your ``paged_attention`` (``[S, H, D]``)."""
    return _run(lambda: lab.paged_attention(q, k_cache, v_cache, block_tables, seq_lens, scale,
                                            num_splits=num_splits, tile_n=tile_n))
