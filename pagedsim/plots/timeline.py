"""Memory over time: the five slot categories as a stacked area, step by step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..accounting import CATEGORIES
from ._mpl import NOTEBOOK_WIDTH_IN, axes_or_new
from .palette import CATEGORY_COLORS, CATEGORY_HATCHES, CATEGORY_LABELS, column_label

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def memory_timeline(
    steps_df: Any,
    ax: Axes | None = None,
    x: str = "time_s",
    *,
    fractions: bool = False,
    queue: bool = True,
    title: str | None = "KV pool over time",
) -> Axes:
    """Stacked area of token / reserved / internal / external / free slots per step.

    ``steps_df`` is the engine's per-step frame (columns ``x``, the five categories in
    slots and ``capacity``; ``running`` and ``waiting`` requests for ``queue``).
    ``fractions`` plots percent of capacity instead of slots. ``queue`` draws the
    running and waiting request counts on a second y axis. Returns the main axes.
    """
    need = [x, *CATEGORIES, "capacity"] + (["running", "waiting"] if queue else [])
    missing = [c for c in need if c not in steps_df.columns]
    if missing:
        raise ValueError(f"memory_timeline needs columns {missing} in the steps frame")
    ax = axes_or_new(ax, (NOTEBOOK_WIDTH_IN, 4.2))
    xs = steps_df[x].to_numpy(dtype=float)
    cap = steps_df["capacity"].to_numpy(dtype=float)
    scale = 100 / cap if fractions else 1.0
    ys = [steps_df[c].to_numpy(dtype=float) * scale for c in CATEGORIES]
    polys = ax.stackplot(xs, *ys, colors=[CATEGORY_COLORS[c] for c in CATEGORIES],
                         labels=[CATEGORY_LABELS[c] for c in CATEGORIES], linewidth=0)
    for poly, cat in zip(polys, CATEGORIES, strict=True):
        poly.set_gid(f"area:{cat}")
        if CATEGORY_HATCHES[cat]:
            poly.set_hatch(CATEGORY_HATCHES[cat])
            poly.set_edgecolor("white")
    if not fractions:
        ax.plot(xs, cap, color="black", linestyle="--", linewidth=1, label="capacity")
    ax.set_xlabel(column_label(x))
    ax.set_ylabel("share of KV pool (% of slots)" if fractions else "KV pool (slots)")
    if len(xs) > 1:
        ax.set_xlim(xs.min(), xs.max())
    ax.set_ylim(0, 100 if fractions else cap.max() * 1.02)
    handles, labels = ax.get_legend_handles_labels()
    if queue:
        tw = ax.twinx()
        tw.plot(xs, steps_df["running"], color="black", linewidth=1.4, label="running requests")
        tw.plot(xs, steps_df["waiting"], color="#555555", linewidth=1.2, linestyle=":",
                label="waiting requests")
        tw.set_ylabel("requests")
        tw.set_ylim(bottom=0)
        from matplotlib.ticker import MaxNLocator

        tw.yaxis.set_major_locator(MaxNLocator(integer=True))  # requests come whole
        h2, l2 = tw.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    # Legend under the plot, so it never hides the data.
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4,
              fontsize=8, frameon=False)
    if title:
        ax.set_title(title, loc="left", fontsize=11)
    return ax
