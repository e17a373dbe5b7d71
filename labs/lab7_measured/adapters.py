"""The only coupling between the lab 7 graders and your ``measure_lab.py``.

The graders call these functions and nothing else, with plain values (tensors, lists,
allocators) in and out. Keep ``measure_lab``'s names working with them; organise the rest
as you like.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import measure_lab
import torch

import pagedsim


def scan(cache: torch.Tensor) -> tuple[torch.Tensor, list[int], int]:
    """Your scan of ``cache``: ``(written bool [B, BS], per-block counts, written slots)``."""
    found = measure_lab.scan(cache)
    return found.written, list(found.per_block), int(found.written_slots)


def live_slots(allocator: pagedsim.PagedAllocator) -> list[int]:
    """Your live slots of ``allocator``, from its block tables."""
    return list(measure_lab.live_slots(allocator))


def make_cache(num_blocks: int, block_size: int, num_kv_heads: int = 1,
               head_dim: int = 4) -> measure_lab.PagedKVTensor:
    """A fresh cache. The graders use its ``allocate(seq, k, v)``, ``append(seq, k, v)``,
    ``fork(parent, child)``, ``free(seq)``, ``read(seq) -> (k, v)`` and its ``k``, ``v``
    tensors and ``allocator``."""
    return measure_lab.PagedKVTensor(num_blocks, block_size, num_kv_heads, head_dim)


def compare(script: Sequence[tuple], account: Callable[[pagedsim.PagedAllocator], int],
            num_blocks: int, block_size: int, seed: int = 0) -> tuple[list[dict], int | None]:
    """Your comparison: one dict per step (``step``, ``measured``, ``accounted``, ``tables``,
    ``stray``, ``missing``) and the first step where measured and accounted differ."""
    result = measure_lab.compare(script, account, num_blocks, block_size, seed)
    rows = [{key: getattr(r, key) for key in ("step", "measured", "accounted", "tables",
                                               "stray", "missing")} for r in result.rows]
    return rows, result.first_mismatch
