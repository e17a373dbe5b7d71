"""Small matplotlib helpers shared by the pictures; matplotlib is imported lazily.

``import pagedsim`` must stay free of matplotlib (it is slow to import and the CLI does
not need it), so every import of it happens inside a function.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.collections import PolyCollection

#: Figure width (inches) that fills a Jupyter notebook's output column.
NOTEBOOK_WIDTH_IN = 10.0


def axes_or_new(ax: Axes | None, figsize: tuple[float, float]) -> Axes:
    """``ax`` itself, or the axes of a new pyplot figure of ``figsize`` (inches)."""
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _, new = plt.subplots(figsize=figsize)
    return new


def rect_collection(
    rects: Sequence[tuple[float, float, float, float]],
    gid: str,
    facecolors: Sequence[str] | str,
    edgecolor: str = "white",
    linewidth: float = 0.5,
    hatch: str | None = None,
    **kw: Any,
) -> PolyCollection:
    """One collection of axis-aligned ``(x, y, width, height)`` rectangles.

    A collection instead of one patch per rectangle keeps a 4096-slot map fast to draw;
    ``gid`` names what the rectangles are, so tests can count them.
    """
    from matplotlib.collections import PolyCollection

    verts = [[(x, y), (x + w, y), (x + w, y + h), (x, y + h)] for x, y, w, h in rects]
    coll = PolyCollection(verts, facecolors=facecolors, edgecolors=edgecolor,
                          linewidths=linewidth, **kw)
    if hatch:
        coll.set_hatch(hatch)
    coll.set_gid(gid)
    return coll


def legend_patch(label: str, facecolor: str, hatch: str = "", edgecolor: str = "#555555") -> Any:
    """A legend handle: a small filled (optionally hatched) square."""
    from matplotlib.patches import Patch

    return Patch(facecolor=facecolor, edgecolor=edgecolor, hatch=hatch, linewidth=0.6,
                 label=label)


def below(ax: Axes, inches: float) -> Any:
    """A transform: ``ax``'s axes fraction, moved down ``inches``. Anchoring a legend with
    it keeps a fixed gap under the axes, even after ``tight_layout`` resizes them."""
    from matplotlib.transforms import offset_copy

    return offset_copy(ax.transAxes, fig=ax.figure, x=0, y=-inches, units="inches")


def fmt_slots(n: int) -> str:
    """``1234`` -> ``'1,234 slots'`` (``'1 slot'``)."""
    return f"{n:,} slot" + ("" if n == 1 else "s")
