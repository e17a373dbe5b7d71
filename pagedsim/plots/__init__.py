"""Pictures of KV-cache memory: block maps, arena maps, share bars, timelines, sweeps.

Importing this package does not import matplotlib; each drawing function does, when
called. Every drawing function takes an optional ``ax`` and returns the axes it drew
on (``Recorder.strip`` returns a figure). One palette (:mod:`.palette`) colours the six
slot categories in every figure.
"""

from .arena_map import arena_map
from .block_map import block_map
from .layout import arena_segments, category_counts, paged_blocks
from .palette import (
    CATEGORY_COLORS,
    CATEGORY_LABELS,
    CATEGORY_SHORT,
    COLUMN_LABELS,
    SEQ_COLORS,
    column_label,
    seq_color,
    seq_colors,
)
from .pool_map import pool_map
from .recorder import Frame, Recorder
from .shares import share_bars
from .sweeps import sweep_curves
from .timeline import memory_timeline

__all__ = [
    "CATEGORY_COLORS",
    "CATEGORY_LABELS",
    "CATEGORY_SHORT",
    "COLUMN_LABELS",
    "SEQ_COLORS",
    "Frame",
    "Recorder",
    "arena_map",
    "arena_segments",
    "block_map",
    "category_counts",
    "column_label",
    "memory_timeline",
    "paged_blocks",
    "pool_map",
    "seq_color",
    "seq_colors",
    "share_bars",
    "sweep_curves",
]
