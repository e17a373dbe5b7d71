"""The radix tree of a ``radix`` pool (SGLang's RadixAttention), drawn top down.

Each node of the tree is a run of whole pages (one page = one block of ``block_size``
tokens); it is drawn as a row of cells, one per page, labelled with the physical block
that holds the page. A node some running sequence's path passes through (``lock_ref`` > 0)
is in the palette's ``token`` colour: its pages are held, not evictable. An unlocked node
is in the ``cached`` colour and hatch: its pages keep reusable K/V and may be evicted,
leaves first, least recently used first. Under each node: its lock count and its time of
last use (the allocator's logical clock).

The picture reads the snapshot's ``"tree"`` list
(:meth:`pagedsim.memory.radix_tree.RadixTree.describe`: parents before children,
each with ``parent`` index, ``blocks``, ``lock_ref``, ``last_access``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._mpl import NOTEBOOK_WIDTH_IN, axes_or_new, legend_patch, rect_collection
from .layout import as_snapshot
from .palette import CATEGORY_COLORS, CATEGORY_HATCHES, text_color_on

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: Page cell size and the gaps between sibling subtrees and between levels (data units).
_CELL, _SIB_GAP, _LEVEL = 1.0, 0.6, 2.2
#: Room a node takes in the layout at least (its label is about this wide).
_LABEL_W = 2.6
#: The x axis spans at least this many cells, so small trees keep readable cells.
_MIN_SPAN = 26.0


def tree_nodes(allocator_or_snapshot: Any) -> list[dict]:
    """The snapshot's tree (a list of node dicts, parents first); TypeError without one."""
    snap = as_snapshot(allocator_or_snapshot)
    if "tree" not in snap:
        raise TypeError(f"a {snap.get('kind', 'pool')!r} snapshot has no radix tree: draw a "
                        "radix allocator (scheme radix)")
    return list(snap["tree"])


def tree_layout(nodes: Sequence[Mapping]) -> list[tuple[float, int]]:
    """``(x, level)`` of each node: ``x`` is its left edge, ``level`` 1 under the root.

    A subtree is as wide as the wider of its node and its children side by side; a node
    is centred over its children, so no two subtrees overlap.
    """
    children: dict[int, list[int]] = {i: [] for i in range(-1, len(nodes))}
    for i, n in enumerate(nodes):
        children[n["parent"]].append(i)

    def own(i: int) -> float:
        return len(nodes[i]["blocks"]) * _CELL

    width: dict[int, float] = {}
    for i in reversed(range(len(nodes))):  # children come after their parent
        kids = sum(width[k] for k in children[i]) + _SIB_GAP * max(len(children[i]) - 1, 0)
        width[i] = max(own(i), _LABEL_W, kids)
    out: list[tuple[float, int]] = [(0.0, 0)] * len(nodes)

    def place(i: int, left: float, level: int) -> None:
        kids = children[i]
        span = sum(width[k] for k in kids) + _SIB_GAP * max(len(kids) - 1, 0)
        if i >= 0:
            out[i] = (left + (width[i] - own(i)) / 2, level)
        x = left + ((width[i] if i >= 0 else span) - span) / 2
        for k in kids:
            place(k, x, level + 1)
            x += width[k] + _SIB_GAP

    place(-1, 0.0, 0)
    return out


def radix_tree(allocator_or_snapshot: Any, ax: Axes | None = None, title: str | None = None,
               legend: bool = True) -> Axes:
    """Draw a ``radix`` pool's tree (see the module docstring); returns the axes."""
    snap = as_snapshot(allocator_or_snapshot)
    nodes = tree_nodes(snap)
    pos = tree_layout(nodes)
    levels = max((lv for _, lv in pos), default=0)
    right = max((x + len(n["blocks"]) * _CELL for (x, _), n in zip(pos, nodes, strict=True)),
                default=_CELL)
    span = max(right, _MIN_SPAN) + 1.0
    height = (levels + 1) * _LEVEL + 0.4
    ax = axes_or_new(ax, (NOTEBOOK_WIDTH_IN, NOTEBOOK_WIDTH_IN * height / span + 0.5))
    root_x = (sum(x + len(n["blocks"]) * _CELL / 2 for (x, lv), n in zip(pos, nodes, strict=True)
                  if lv == 1) / max(sum(1 for _, lv in pos if lv == 1), 1)) if nodes else 0.0

    def centre_top(i: int) -> tuple[float, float]:
        x, lv = pos[i]
        return x + len(nodes[i]["blocks"]) * _CELL / 2, -lv * _LEVEL

    edges = []
    for i, n in enumerate(nodes):
        cx, top = centre_top(i)
        if n["parent"] < 0:
            px, py = root_x, -0.25
        else:
            px, ptop = centre_top(n["parent"])
            py = ptop - _CELL - 0.55  # below the parent's label
        edges.append([(px, py), (cx, top)])
    if edges:
        from matplotlib.collections import LineCollection

        lines = LineCollection(edges, colors="#777777", linewidths=0.9, zorder=0)
        lines.set_gid("tree:edges")
        ax.add_collection(lines)
    ax.plot([root_x], [0.0], marker="o", color="black", ms=6, gid="tree:root")
    ax.text(root_x + 0.3, 0.0, "root", fontsize=8, va="center")

    cells: dict[str, list[tuple[float, float, float, float]]] = {"token": [], "cached": []}
    for i, n in enumerate(nodes):
        x, lv = pos[i]
        cat = "token" if n["lock_ref"] else "cached"
        y = -lv * _LEVEL - _CELL
        face = CATEGORY_COLORS[cat]
        for j, b in enumerate(n["blocks"]):
            cells[cat].append((x + j * _CELL, y, _CELL, _CELL))
            ax.text(x + (j + 0.5) * _CELL, y + _CELL / 2, str(b), ha="center", va="center",
                    fontsize=8, color=text_color_on(face),
                    bbox={"boxstyle": "round,pad=0.1", "fc": face, "ec": "none"})
        ax.text(x + len(n["blocks"]) * _CELL / 2, y - 0.15,
                f"lock {n['lock_ref']}, t{n['last_access']}", ha="center", va="top",
                fontsize=7, color="#333333", gid="tree:label")
    for cat, rects in cells.items():
        if rects:
            ax.add_collection(rect_collection(rects, gid=f"tree:{cat}",
                                              facecolors=CATEGORY_COLORS[cat],
                                              edgecolor="#333333", linewidth=0.6,
                                              hatch=CATEGORY_HATCHES[cat] or None))
    ax.set_xlim(-0.5, span - 0.5)
    ax.set_ylim(-height + 0.8, 0.8)
    ax.set_aspect("equal")
    ax.set_anchor("W")
    ax.axis("off")
    pages = sum(len(n["blocks"]) for n in nodes)
    cached = sum(len(n["blocks"]) for n in nodes if not n["lock_ref"])
    if title is None:
        title = f"Radix tree: {len(nodes)} nodes, {pages} pages ({cached} cached)"
    ax.set_title(title, loc="left", fontsize=9)
    if legend:
        ax.legend(handles=[legend_patch("locked: on a running request's path",
                                        CATEGORY_COLORS["token"]),
                           legend_patch("unlocked: cached, evictable",
                                        CATEGORY_COLORS["cached"], CATEGORY_HATCHES["cached"])],
                  title="cells: pages (block ids); lock n, tk: requests\nthrough the node, "
                        "last use (clock)",
                  title_fontsize=7, loc="upper right", fontsize=7, frameon=False)
    return ax
