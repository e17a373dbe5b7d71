"""The block map: every physical block of a paged KV pool as a cell.

Each cell is split into ``block_size`` sub-cells (one per token slot, filled row by
row): solid in the owning sequence's colour where a token's K/V is, a light tint of it
where the owner will still write (reserved), hatched vermillion where nobody ever will
(internal fragmentation, the unused tail of a last block). Free blocks are plain grey.
A block shared by several sequences (after ``fork``) is one physical block with several
owners, and is drawn as one: in a single colour of its own (:data:`SHARED_COLOR`, not
any owner's), outlined in black, with its reference count written in it (``×3``).
Beside the grid, each sequence's block table lists the physical blocks it maps to, in
order (``*`` marks the shared ones), so the owners can be read off there.

For pools too large to show slot by slot, each block becomes one bar filled left to
right in the same colours.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from ._mpl import NOTEBOOK_WIDTH_IN, axes_or_new, below, legend_patch, rect_collection
from .layout import as_snapshot, category_counts, paged_blocks
from .palette import CATEGORY_COLORS, CATEGORY_HATCHES, SEQ_COLORS, SHARED_COLOR, mix, seq_colors

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: At most this many sequences' block tables are listed beside the grid.
MAX_TABLE_ROWS = 16
#: Above this many slots the map switches from one sub-cell per slot to one bar per block.
MAX_DETAIL_SLOTS = 4096
_INTERNAL_FACE = mix(CATEGORY_COLORS["internal_frag"], amount=0.8)
_RESERVED_TINT = 0.6  # how far a reserved slot's colour moves towards white


def block_shape(block_size: int) -> tuple[int, int]:
    """``(rows, cols)`` of sub-cells a block of ``block_size`` slots is drawn as.

    Small blocks are one row (as in the vLLM paper's figures); larger ones are near
    square so the grid stays readable (16 -> 4 x 4, 32 -> 4 x 8).
    """
    if block_size <= 8:
        return 1, block_size
    if block_size & (block_size - 1) == 0:
        cols = 1 << math.ceil(math.log2(block_size) / 2)
    else:
        cols = math.ceil(math.sqrt(block_size))
    return math.ceil(block_size / cols), cols


def auto_ncols(num_blocks: int, detail: bool = True) -> int:
    """Blocks per grid row: a round number (8, 16, 32, ...) so block ids read off easily.

    With slot sub-cells, the smallest that keeps the grid at least four blocks wide per
    block of height (sub-cells make each block wide); with one bar per block, about
    twice as many columns as rows.
    """
    ratio = 4 if detail else 2
    ncols = 8
    while math.ceil(num_blocks / ncols) > ncols // ratio and ncols < 128:
        ncols *= 2
    return min(ncols, num_blocks)


class Geometry(NamedTuple):
    """Where a block map puts its cells, in sub-cell units (a slot is 1 x 1 in detail)."""

    detail: bool  # one sub-cell per slot (else one bar per block)
    ncols: int  # blocks per row
    nrows: int
    br: float  # a block's height
    bc: float  # a block's width
    gx: float  # gap between blocks in a row
    gy: float  # gap between rows (holds the block ids)
    width: float
    height: float


def grid_geometry(num_blocks: int, block_size: int, ncols: int | None = None,
                  slots: bool | None = None) -> Geometry:
    """The layout :func:`block_map` uses for a pool of ``num_blocks`` x ``block_size`` slots."""
    detail = num_blocks * block_size <= MAX_DETAIL_SLOTS if slots is None else slots
    ncols = ncols or auto_ncols(num_blocks, detail)
    nrows = math.ceil(num_blocks / ncols)
    if detail:
        br, bc = block_shape(block_size)
        gx, gy = max(0.6, 0.15 * bc), max(1.0, 0.3 * br)
    else:
        br, bc, gx, gy = 1.0, 1.6, 0.25, 0.3
    return Geometry(detail, ncols, nrows, br, bc, gx, gy,
                    ncols * (bc + gx) - gx, nrows * (br + gy))


def _table_text(table: list[int], ref_counts: list[int], max_entries: int = 10) -> str:
    items = [f"{b}*" if ref_counts[b] > 1 else str(b) for b in table]
    if len(items) > max_entries:
        items = [*items[: max_entries - 3], "…", *items[-2:]]
    return "[" + ", ".join(items) + "]"


def block_map(
    allocator_or_snapshot: Any,
    ax: Axes | None = None,
    show_tables: bool = True,
    title: str | None = None,
    *,
    ncols: int | None = None,
    slots: bool | None = None,
    legend: bool = True,
    colors: Mapping[Hashable, str] | None = None,
) -> Axes:
    """Draw a paged pool (a ``PagedAllocator`` or its ``snapshot()``) as a grid of blocks.

    ``show_tables`` lists each sequence's block table to the right of the grid
    (``*`` marks a shared block). ``ncols`` is blocks per row (default: 8, 16, 32...).
    ``slots`` draws one sub-cell per token slot (default: when the pool has at most
    ``MAX_DETAIL_SLOTS`` slots). ``colors`` maps sequence ids to colours (default:
    :func:`~pagedsim.plots.palette.seq_colors`). The legend gives each category's count
    in slots.
    Returns the axes.
    """
    snap = as_snapshot(allocator_or_snapshot)
    if snap["view"] != "blocks":
        raise TypeError(f"block_map draws a pool of blocks; this {snap['kind']} pool is a "
                        "linear arena: use arena_map (or pool_map)")
    num_blocks, bs = snap["num_blocks"], snap["block_size"]
    blocks = paged_blocks(snap)
    counts = category_counts(snap)
    color_of = {**seq_colors(snap["seqs"]), **(colors or {})}
    g = grid_geometry(num_blocks, bs, ncols, slots)
    detail, ncols, nrows = g.detail, g.ncols, g.nrows
    br, bc, gx, gy, data_w, data_h = g.br, g.bc, g.gx, g.gy, g.width, g.height

    if ax is None:
        grid_w = 6.2 if show_tables else 9.0
        grid_h = min(9.0, max(0.8, grid_w * data_h / data_w))
        if show_tables:  # tall enough for the block tables' lines (11 pt each)
            grid_h = max(grid_h, (min(len(snap["seqs"]), MAX_TABLE_ROWS) + 3) * 11 / 72)
        fig_h = grid_h + 1.7
        ax = axes_or_new(None, (NOTEBOOK_WIDTH_IN, fig_h))
        ax.figure.subplots_adjust(left=0.02, right=0.02 + grid_w / NOTEBOOK_WIDTH_IN,
                                  top=1 - 0.45 / fig_h, bottom=1.2 / fig_h)

    rects: dict[str, list] = {c: [] for c in ("token", "reserved", "internal_frag", "cached",
                                              "free")}
    faces: dict[str, list] = {c: [] for c in rects}
    outlines, outline_colors, shared_cells = [], [], []
    label_blocks = detail and ncols <= 16
    # Points per data unit (the grid keeps an equal aspect), to size the ref counts.
    pos, (fig_w, fig_h) = ax.get_position(), ax.figure.get_size_inches()
    pt_per_unit = 72 * min(pos.width * fig_w / (data_w + 0.6),
                           pos.height * fig_h / (data_h + 0.4))
    for blk in blocks:
        x0, y0 = (blk.block % ncols) * (bc + gx), (blk.block // ncols) * (br + gy)
        if blk.is_free:
            cat = "cached" if blk.cached else "free"
            rects[cat].append((x0, y0, bc, br))
            faces[cat].append(CATEGORY_COLORS[cat])
            if label_blocks:
                _block_id(ax, blk.block, x0, y0, bc, br, gy)
            continue
        shared = blk.ref_count > 1
        # One physical block, one colour: the owner's, or the shared colour.
        c = SHARED_COLOR if shared else color_of[blk.owners[0]]
        face = {"token": c, "reserved": mix(c, amount=_RESERVED_TINT),
                "internal_frag": _INTERNAL_FACE}
        if detail:
            for o in range(bs):
                cat = ("token" if o < blk.token else
                       "reserved" if o < blk.token + blk.reserved else "internal_frag")
                rects[cat].append((x0 + o % bc, y0 + o // bc, 1, 1))
                faces[cat].append(face[cat])
        else:
            x = x0
            for cat, n in (("token", blk.token), ("reserved", blk.reserved),
                           ("internal_frag", blk.internal_frag)):
                if n:
                    rects[cat].append((x, y0, bc * n / bs, br))
                    faces[cat].append(face[cat])
                    x += bc * n / bs
        outlines.append((x0, y0, bc, br))
        outline_colors.append("black" if shared else c)
        if shared:
            shared_cells.append((x0, y0, bc, br))
            # The reference count in the block, white on the shared colour, as large as
            # the cell allows (3-8 pt; a bold digit is about 0.65 em wide).
            text = f"×{blk.ref_count}"
            size = max(3.0, min(8.0, 0.7 * br * pt_per_unit,
                                0.9 * bc * pt_per_unit / (0.65 * len(text))))
            # In slot detail a light reserved slot may sit under it: give it a backing.
            box = ({"boxstyle": "round,pad=0.1", "fc": SHARED_COLOR, "ec": "none"}
                   if detail else None)
            ax.text(x0 + bc / 2, y0 + br / 2, text, ha="center", va="center",
                    fontsize=size, fontweight="bold", color="white", gid="refcount",
                    clip_on=True, bbox=box)
        if label_blocks:
            _block_id(ax, blk.block, x0, y0, bc, br, gy)

    prefix = "slots:" if detail else "fill:"
    edge = "white" if detail else "none"
    for cat in ("free", "token", "reserved"):
        if rects[cat]:
            ax.add_collection(rect_collection(rects[cat], prefix + cat, faces[cat],
                                              edgecolor=edge if cat != "free" else "#c8c8c8"))
    if rects["cached"]:  # nobody's, K/V kept for a later prefix hit (evictable)
        ax.add_collection(rect_collection(rects["cached"], prefix + "cached", faces["cached"],
                                          edgecolor="#c8c8c8",
                                          hatch=CATEGORY_HATCHES["cached"]))
    if rects["internal_frag"]:
        ax.add_collection(rect_collection(
            rects["internal_frag"], prefix + "internal_frag", faces["internal_frag"],
            edgecolor=CATEGORY_COLORS["internal_frag"], linewidth=0.4, hatch="////"))
    if shared_cells:  # a second, heavier black outline: shared at a glance
        ax.add_collection(rect_collection(shared_cells, "blocks:shared", "none",
                                          edgecolor="black", linewidth=2.0))
    if outlines:
        ax.add_collection(rect_collection(outlines, "blocks:outline", "none",
                                          edgecolor=outline_colors, linewidth=1.4))

    ax.set_xlim(-0.3, data_w + 0.3)
    ax.set_ylim(data_h + 0.1, -0.3)  # row 0 at the top
    ax.set_aspect("equal")
    ax.set_anchor("NW")  # a box taller than the grid keeps the grid at the top
    ax.set_xticks([])
    if label_blocks:
        ax.set_yticks([])
    else:
        # Label every k-th row, so labels stay >= 9 pt apart however many rows there are.
        pos, (fw, fh) = ax.get_position(), ax.figure.get_size_inches()
        pt_per_unit = 72 * min(pos.width * fw / data_w, pos.height * fh / data_h)  # equal aspect
        row_pt = pt_per_unit * (br + gy)
        k = max(1, math.ceil(9 / row_pt))
        rows = range(0, nrows, k)
        ax.set_yticks([r * (br + gy) + br / 2 for r in rows])
        ax.set_yticklabels([f"blocks {r * ncols}–{min(num_blocks, (r + 1) * ncols) - 1}"
                            for r in rows], fontsize=7)
        ax.tick_params(axis="y", length=0)
    for side in ax.spines.values():
        side.set_visible(False)

    used = sum(1 for b in blocks if not b.is_free)
    num_shared = len(shared_cells)
    if title is None:
        title = (f"Paged KV pool: {num_blocks} blocks × {bs} slots = "
                 f"{num_blocks * bs:,} slots · {used} blocks in use, {num_shared} shared")
    ax.set_title(title, loc="left", fontsize=11)

    if legend:
        handles = block_map_key(counts, bs, num_shared)
        if not show_tables:
            handles += [legend_patch(f"seq {s}", color_of[s], edgecolor="none")
                        for s in list(snap["seqs"])[:8]]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(0, 0),
                  bbox_transform=below(ax, 0.05), ncol=2, fontsize=8, frameon=False,
                  handlelength=1.4, columnspacing=1.2)
    if show_tables:
        _draw_tables(ax, snap, color_of)
    return ax


def block_map_key(counts: dict[str, int] | None = None, block_size: int = 1,
                  num_shared: int | None = None) -> list:
    """Legend handles explaining a block map's cells; with ``counts`` (slots per category)
    each label gives its count. Without, the bare key (for a strip of several maps)."""
    owner = SEQ_COLORS[0]  # an example owner (grey would read as shared)
    c = counts or {}

    def n(cat: str) -> str:
        return f": {c[cat]:,} slots" if cat in c else ""

    free = (f": {c['free'] // block_size} blocks = {c['free']:,} slots" if "free" in c else "")
    handles = [
        legend_patch(f"token (filled, in its owner's colour){n('token')}", owner),
        legend_patch(f"reserved (owner will fill){n('reserved')}",
                     mix(owner, amount=_RESERVED_TINT)),
        legend_patch(f"internal frag (never filled){n('internal_frag')}", _INTERNAL_FACE,
                     "////", CATEGORY_COLORS["internal_frag"]),
        legend_patch(f"free block{free}", CATEGORY_COLORS["free"]),
    ]
    if c.get("cached"):  # a prefix cache's blocks that keep reusable K/V
        handles.append(legend_patch(
            f"cached (K/V kept, evictable): {c['cached'] // block_size} blocks",
            CATEGORY_COLORS["cached"], CATEGORY_HATCHES["cached"]))
    if num_shared is None or num_shared:
        shared = f": {num_shared} blocks" if num_shared else ""
        handles.append(legend_patch(f"shared block (×ref count: its owners){shared}",
                                    SHARED_COLOR, edgecolor="black"))
    return handles


def _block_id(ax: Axes, block: int, x0: float, y0: float, bc: float, br: float,
              gy: float) -> None:
    """The physical block id under its cell."""
    ax.text(x0 + bc / 2, y0 + br + gy * 0.12, str(block), ha="center", va="top",
            fontsize=7, color="#555555", gid="block_id")


def _draw_tables(ax: Axes, snap: dict, color_of: Mapping[Hashable, str]) -> None:
    """Each sequence's block table as a line of text right of the grid (fixed 11 pt rows)."""
    # Lines may run down to the figure's bottom edge (the legend sits under the grid).
    top_pt = ax.get_position().y1 * ax.figure.get_figheight() * 72
    max_lines = min(MAX_TABLE_ROWS, max(3, int(top_pt // 11) - 3))
    seqs = list(snap["seqs"].items())
    shown = seqs if len(seqs) <= max_lines else seqs[: max_lines - 1]

    def line(i: int, text: str, color: str = "black", marker: str | None = None) -> None:
        y = -11 * i
        if marker:
            ax.annotate("■", (1.02, 1.0), xycoords="axes fraction", xytext=(0, y),
                        textcoords="offset points", va="top", fontsize=9, color=marker,
                        annotation_clip=False)
        ax.annotate(text, (1.02, 1.0), xycoords="axes fraction", xytext=(11, y),
                    textcoords="offset points", va="top", fontsize=8, color=color,
                    family="monospace", annotation_clip=False, gid="table")

    line(0, "block tables (seq: physical blocks, * shared)", color="#333333")
    for i, (sid, seq) in enumerate(shown, start=1):
        line(i, f"seq {sid}: {_table_text(seq['block_table'], snap['ref_counts'])}"
                f" {seq['num_tokens']} tok", marker=color_of[sid])
    n = len(shown) + 1
    if len(shown) < len(seqs):
        line(n, f"… and {len(seqs) - len(shown)} more sequences", color="#555555")
        n += 1
    free = snap["free_blocks"]
    more = ", …" if len(free) > 4 else ""
    if snap.get("kind") == "prefix-cache":  # one free queue, cached blocks included: head first
        nxt = ", ".join(str(b) for b in free[:4])
        line(n, f"free queue: {len(free)} blocks, {len(snap['cached_blocks'])} cached"
                + (f" (next: {nxt}{more})" if free else ""), color="#555555")
        return
    nxt = ", ".join(str(b) for b in free[::-1][:4])  # the free list is a stack: pops from the end
    in_tree = (f"; {len(snap['cached_blocks'])} cached in the tree" if snap.get("kind") == "radix"
               else "")
    line(n, f"free list: {len(free)} blocks" + (f" (next: {nxt}{more})" if free else "")
            + in_tree, color="#555555")
