"""The arena map: a contiguous KV pool as one long bar of slots, wrapped into rows.

Each sequence's region is outlined in black and labelled, and split, left to right,
into its token slots, its reserved slots (which it will still fill) and its internal
fragmentation (slots it owns and never fills: over-reservation, alignment or buddy
rounding). Holes between regions are free, or external fragmentation when they are
smaller than what the next waiting request needs (``next_need_slots``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..memory.accounting import CATEGORIES
from ._mpl import NOTEBOOK_WIDTH_IN, axes_or_new, below, legend_patch, rect_collection
from .layout import arena_segments, as_snapshot, capacity_slots, category_counts
from .palette import CATEGORY_COLORS, CATEGORY_HATCHES, CATEGORY_SHORT, mix

if TYPE_CHECKING:
    from matplotlib.axes import Axes

_ROW_H, _ROW_GAP = 1.0, 0.45  # bar height and gap between wrapped rows (data units)


def auto_row_slots(capacity: int) -> int:
    """Slots per row: the whole arena up to 1024 slots, else up to 8 rows of about equal
    length rounded up to a multiple of 64 (so row starts are round numbers)."""
    if capacity <= 1024:
        return capacity
    nrows = min(8, math.ceil(capacity / 1024))
    return -(-math.ceil(capacity / nrows) // 64) * 64


def _pieces(start: int, size: int, row_slots: int) -> list[tuple[int, int, int]]:
    """``[start, start + size)`` cut at row ends: ``(row, offset_in_row, length)`` slots."""
    out = []
    while size > 0:
        row, off = divmod(start, row_slots)
        n = min(size, row_slots - off)
        out.append((row, off, n))
        start, size = start + n, size - n
    return out


def arena_map(
    allocator_or_snapshot: Any,
    ax: Axes | None = None,
    next_need_slots: int | None = None,
    *,
    row_slots: int | None = None,
    title: str | None = None,
    legend: bool = True,
) -> Axes:
    """Draw a contiguous pool (a ``ContiguousAllocator`` or its ``snapshot()``).

    ``next_need_slots`` is the region size (slots) the next waiting request needs
    (``allocator.slots_needed(prompt_len, final_len)``): holes smaller than it are drawn
    as external fragmentation; without it every hole is free. ``row_slots`` is the arena
    length per row (default: :func:`auto_row_slots`). The legend gives each category's
    count in slots. Returns the axes.
    """
    snap = as_snapshot(allocator_or_snapshot)
    if snap["view"] != "arena":
        raise TypeError(f"arena_map draws a linear arena of regions; this {snap['kind']} "
                        "pool is a pool of blocks: use block_map (or pool_map)")
    cap = capacity_slots(snap)
    row_slots = row_slots or auto_row_slots(cap)
    nrows = math.ceil(cap / row_slots)
    segments = arena_segments(snap, next_need_slots)
    counts = category_counts(snap, next_need_slots)
    if ax is None:
        fig_h = 1.9 + 0.42 * nrows
        ax = axes_or_new(None, (NOTEBOOK_WIDTH_IN, fig_h))
        ax.figure.subplots_adjust(left=0.12, right=0.98, top=1 - 0.5 / fig_h,
                                  bottom=1.35 / fig_h)

    rects: dict[str, list] = {c: [] for c in CATEGORIES}
    for seg in segments:
        for row, off, n in _pieces(seg.start, seg.size, row_slots):
            rects[seg.category].append((off, row * (_ROW_H + _ROW_GAP), n, _ROW_H))
    for cat in CATEGORIES:
        if rects[cat]:
            hatch = CATEGORY_HATCHES[cat]
            face = mix(CATEGORY_COLORS[cat], amount=0.55) if hatch else CATEGORY_COLORS[cat]
            # Hatched waste gets its own colour as edge (the hatch colour); others no edge,
            # so a 1-slot piece still shows its colour.
            ax.add_collection(rect_collection(
                rects[cat], "slots:" + cat, face,
                edgecolor=CATEGORY_COLORS[cat] if hatch else "none",
                linewidth=0.5 if hatch else 0, hatch=hatch or None))

    # Thin grey outlines show where one hole ends and the next begins (buddy holes that
    # are not buddies stay separate, and that is the point).
    holes = [(off, row * (_ROW_H + _ROW_GAP), n, _ROW_H) for start, size in snap["holes"]
             for row, off, n in _pieces(start, size, row_slots)]
    if holes:
        ax.add_collection(rect_collection(holes, "holes", "none", edgecolor="#999999",
                                          linewidth=0.6))
    outlines = []
    for sid, r in snap["seqs"].items():
        pieces = _pieces(r["start"], r["size"], row_slots)
        outlines += [(off, row * (_ROW_H + _ROW_GAP), n, _ROW_H) for row, off, n in pieces]
        for k, (row, off, n) in enumerate(pieces):
            if n >= 0.035 * row_slots:  # label only where it fits
                ax.text(off + n / 2, row * (_ROW_H + _ROW_GAP) + _ROW_H / 2,
                        f"seq {sid}" + (" (cont.)" if k else ""), ha="center", va="center",
                        fontsize=8, gid="seq_label",
                        bbox={"boxstyle": "round,pad=0.12", "fc": "white", "ec": "none",
                              "alpha": 0.8})
    if outlines:
        ax.add_collection(rect_collection(outlines, "regions", "none", edgecolor="black",
                                          linewidth=1.2))

    ax.set_xlim(0, row_slots)
    ax.set_ylim(nrows * (_ROW_H + _ROW_GAP) - _ROW_GAP + 0.05, -0.05)  # row 0 on top
    ax.set_yticks([r * (_ROW_H + _ROW_GAP) + _ROW_H / 2 for r in range(nrows)])
    ax.set_yticklabels([f"slots {r * row_slots:,}–{min(cap, (r + 1) * row_slots) - 1:,}"
                        for r in range(nrows)], fontsize=8)
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel("slot offset within row (slots)" if nrows > 1 else "slot", fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    if title is None:
        title = (f"Contiguous arena: {cap:,} slots · reservation={snap['reservation']} · "
                 f"placement={snap['placement']} · {len(snap['seqs'])} regions")
    ax.set_title(title, loc="left", fontsize=11)

    if legend:
        ax.legend(handles=arena_key(counts, next_need_slots), loc="upper left",
                  bbox_to_anchor=(0, 0), bbox_transform=below(ax, 0.45), ncol=3, fontsize=8,
                  frameon=False, handlelength=1.4, columnspacing=1.2)
    return ax


def arena_key(counts: dict[str, int] | None = None, next_need_slots: int | None = None) -> list:
    """Legend handles for an arena map; with ``counts`` (slots per category) each label
    gives its count. Without, the bare key (for a strip of several maps)."""
    handles = []
    for cat in CATEGORIES:
        hatch = CATEGORY_HATCHES[cat]
        face = mix(CATEGORY_COLORS[cat], amount=0.55) if hatch else CATEGORY_COLORS[cat]
        label = CATEGORY_SHORT[cat] + (f": {counts[cat]:,} slots" if counts else "")
        if cat == "external_frag":
            label += (f" (holes < {next_need_slots:,} slots)" if next_need_slots
                      else " (no waiting request given)" if counts else " (holes too small)")
        handles.append(legend_patch(label, face, hatch,
                                    CATEGORY_COLORS[cat] if hatch else "#888888"))
    handles.append(legend_patch("region (one sequence)", "none", edgecolor="black"))
    return handles
