"""Draw any scheme's pool: the adapter its snapshot's ``view`` names.

A scheme's registry entry (:mod:`pagedsim.memory.schemes`) says how it is drawn; its
allocator's snapshot carries the same word as ``view``: ``"blocks"`` pools (paged
blocks, vAttention pages) are drawn by :func:`block_map`, ``"arena"`` pools
(contiguous regions) by :func:`arena_map`.
"""

from __future__ import annotations

from typing import Any

from .arena_map import arena_map
from .block_map import block_map
from .layout import as_snapshot


def pool_map(allocator_or_snapshot: Any, ax: Any = None, next_need_slots: int | None = None,
             **kw: Any) -> Any:
    """Draw an allocator (or its snapshot) with its view's picture; returns the axes.

    ``next_need_slots`` (arena views) marks holes too small for the next request as
    external fragmentation; other keywords go to the picture function.
    """
    snap = as_snapshot(allocator_or_snapshot)
    if snap["view"] == "blocks":
        return block_map(snap, ax=ax, **kw)
    return arena_map(snap, ax=ax, next_need_slots=next_need_slots, **kw)
