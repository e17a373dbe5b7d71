"""The free queue of a prefix-caching pool, drawn as a row of blocks in queue order.

vLLM v1's automatic prefix caching keeps *one* queue of blocks nobody holds: blocks never
used (or released without content worth keeping) and *cached* blocks, whose K/V a later
request may still find by hash. New blocks come from the head (left); a freed block joins
the tail (right); a cache hit takes a cached block out of the middle. A cached block that
reaches the head and is handed out is *evicted*: its hash is forgotten.

Each cell is one block, labelled with its id: cached blocks in the palette's ``cached``
colour and hatch, the others in the ``free`` grey. The blocks that sequences hold are
not in the queue; the title line under the row counts them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._mpl import NOTEBOOK_WIDTH_IN, axes_or_new, legend_patch, rect_collection
from .layout import as_snapshot
from .palette import CATEGORY_COLORS, CATEGORY_HATCHES, text_color_on

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: Cell width and height, in data units (one block = one cell plus a gap).
_CELL, _GAP = 1.0, 0.12


def queue_order(allocator_or_snapshot: Any) -> list[tuple[int, bool]]:
    """The free queue, head (next block handed out) first, as ``(block, cached)`` pairs.

    Needs a snapshot with ``free_blocks`` in queue order and ``cached_blocks``
    (:meth:`pagedsim.memory.prefix_cache.PrefixCachingAllocator.snapshot`).
    """
    snap = as_snapshot(allocator_or_snapshot)
    if snap.get("kind") != "prefix-cache":  # radix keeps cached pages in its tree instead
        raise TypeError(f"a {snap.get('kind', 'pool')!r} snapshot has no free queue of cached "
                        "blocks: draw a prefix-cache allocator (scheme prefix-cache)")
    cached = set(snap["cached_blocks"])
    return [(b, b in cached) for b in snap["free_blocks"]]


def free_queue(allocator_or_snapshot: Any, ax: Axes | None = None, title: str | None = None,
               legend: bool = True) -> Axes:
    """Draw a prefix-caching pool's free queue, head left; returns the axes.

    Cells are blocks in queue order (see the module docstring); the label under the row
    says how many blocks sequences hold and how many of the queue's are cached.
    """
    snap = as_snapshot(allocator_or_snapshot)
    order = queue_order(snap)
    num_blocks = snap["num_blocks"]
    ax = axes_or_new(ax, (NOTEBOOK_WIDTH_IN, 1.3))
    rects: dict[str, list[tuple[float, float, float, float]]] = {"cached": [], "free": []}
    for i, (_, cached) in enumerate(order):
        rects["cached" if cached else "free"].append((i * (_CELL + _GAP), 0.0, _CELL, _CELL))
    for cat, cells in rects.items():
        if cells:
            ax.add_collection(rect_collection(cells, gid=f"queue-{cat}",
                                              facecolors=CATEGORY_COLORS[cat],
                                              edgecolor="#555555", linewidth=0.6,
                                              hatch=CATEGORY_HATCHES[cat] or None))
    for i, (b, cached) in enumerate(order):
        face = CATEGORY_COLORS["cached" if cached else "free"]
        ax.text(i * (_CELL + _GAP) + _CELL / 2, _CELL / 2, str(b), ha="center", va="center",
                fontsize=8, color=text_color_on(face),
                bbox=None if not cached else {"boxstyle": "round,pad=0.1", "fc": face,
                                              "ec": "none"})
    # The axis always spans the whole pool, so rows of several steps line up.
    width = max(num_blocks, 1) * (_CELL + _GAP)
    ax.set_xlim(-1.6, width + 1.6)
    ax.set_ylim(-0.75, _CELL + 0.35)
    ax.text(-0.2, _CELL / 2, "head", ha="right", va="center", fontsize=8, color="#333333")
    end = len(order) * (_CELL + _GAP) - _GAP
    ax.text(end + 0.2, _CELL / 2, "tail", ha="left", va="center", fontsize=8, color="#333333")
    held = num_blocks - len(order)
    num_cached = sum(c for _, c in order)
    ax.text(0, -0.4, f"{len(order)} blocks in the queue ({num_cached} cached, "
            f"{len(order) - num_cached} free); {held} held by sequences",
            ha="left", va="center", fontsize=8, color="#333333")
    ax.set_aspect("equal")
    ax.axis("off")
    if title:
        ax.set_title(title, loc="left", fontsize=9)
    if legend:
        ax.legend(handles=[legend_patch("cached (K/V kept, evictable)", CATEGORY_COLORS["cached"],
                                        CATEGORY_HATCHES["cached"]),
                           legend_patch("free (never used, or no content to keep)",
                                        CATEGORY_COLORS["free"])],
                  loc="lower right", bbox_to_anchor=(1.0, -0.25), fontsize=7, frameon=False,
                  ncol=2)
    return ax
