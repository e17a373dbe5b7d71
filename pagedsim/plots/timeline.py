"""Memory over time: the six slot categories as a stacked area, step by step, and the
request queue (running and waiting requests) in panels of their own underneath."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..memory.accounting import CATEGORIES
from ._mpl import NOTEBOOK_WIDTH_IN, axes_or_new
from .palette import CATEGORY_COLORS, CATEGORY_HATCHES, CATEGORY_LABELS, column_label

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: The request-queue panels under the pool: (column, colour, line style, y label).
QUEUE_PANELS: tuple[tuple[str, str, str, str], ...] = (
    ("running", "black", "-", "running\nrequests"),
    ("waiting", "#555555", "-", "waiting\nrequests"),
)
#: Height of the pool panel and of each queue panel, in inches, on a new figure.
POOL_PANEL_IN = 3.0
QUEUE_PANEL_IN = 1.0
#: Above this many steps a queue panel draws its per-step values faintly and, over them,
#: their time-weighted mean in :data:`QUEUE_BINS` equal spans of the x axis: under v0
#: scheduling the running count alternates step by step between a prefill's few
#: requests and the decode batch, which thousands of steps draw as a solid block.
QUEUE_MAX_RAW_STEPS = 1000
QUEUE_BINS = 250


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

    ``steps_df`` is the engine's per-step frame (columns ``x``, the six categories in
    slots and ``capacity``; ``running`` and ``waiting`` requests for ``queue``).
    ``fractions`` plots percent of capacity instead of slots. ``queue`` adds two panels
    under the pool, sharing its x axis, each with its own y axis in requests: the
    running requests (the batch, tens) and the waiting ones (the queue, up to
    hundreds), so neither is flattened by the other's scale. The panels are carved out
    of ``ax``'s own area (nothing else in its figure moves) and carry the gids
    ``"panel:running"`` and ``"panel:waiting"``. With more than
    :data:`QUEUE_MAX_RAW_STEPS` steps a panel draws every step faintly (gid
    ``"line:<column>:steps"``) and, as its line (gid ``"line:<column>"``), the mean over
    each of :data:`QUEUE_BINS` equal spans of ``x``, weighted by ``step_time_s`` where the
    frame has it; the panel says so. Returns the pool's axes.
    """
    if "cached" not in steps_df.columns:  # a frame from before prefix caching: none cached
        steps_df = steps_df.assign(cached=0)
    need = [x, *CATEGORIES, "capacity"] + [c for c, *_ in QUEUE_PANELS if queue]
    missing = [c for c in need if c not in steps_df.columns]
    if missing:
        raise ValueError(f"memory_timeline needs columns {missing} in the steps frame")
    height = POOL_PANEL_IN + (len(QUEUE_PANELS) * QUEUE_PANEL_IN if queue else 0) + 1.2
    ax = axes_or_new(ax, (NOTEBOOK_WIDTH_IN, height))
    ax.set_gid("panel:pool")
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
    ax.set_ylabel("share of KV pool\n(% of slots)" if fractions else "KV pool (slots)")
    if len(xs) > 1:
        ax.set_xlim(xs.min(), xs.max())
    ax.set_ylim(0, 100 if fractions else cap.max() * 1.02)
    handles, labels = ax.get_legend_handles_labels()
    bottom = ax
    if queue:
        bottom, extra = _queue_panels(ax, steps_df, xs, x)
        handles, labels = handles + extra, labels + [h.get_label() for h in extra]
    bottom.set_xlabel(column_label(x))
    # Legend under the lowest panel, so it never hides the data.
    bottom.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.45 if queue
                  else -0.16), ncol=3, fontsize=8, frameon=False)
    if title:
        ax.set_title(title, loc="left", fontsize=11)
    return ax


def _queue_panels(ax: Axes, steps_df: Any, xs: Any, x: str) -> tuple[Axes, list]:
    """One panel per :data:`QUEUE_PANELS` entry under ``ax`` (shared x, own y axis in
    requests); returns the lowest one and legend handles explaining the lines (none when
    every step is drawn as it is)."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator
    from mpl_toolkits.axes_grid1 import make_axes_locatable

    divider = make_axes_locatable(ax)
    # The pool keeps about 3/5 of the height; each queue panel gets 1/5 of it.
    size = f"{100 * QUEUE_PANEL_IN / POOL_PANEL_IN:.0f}%"
    weights = (steps_df["step_time_s"].to_numpy(dtype=float) if "step_time_s" in steps_df
               else np.ones(len(xs)))
    panel = ax
    for column, color, style, ylabel in QUEUE_PANELS:
        panel.tick_params(axis="x", labelbottom=False)
        panel = divider.append_axes("bottom", size=size, pad=0.12, sharex=ax)
        panel.set_gid(f"panel:{column}")
        values = steps_df[column].to_numpy(dtype=float)
        if len(xs) > QUEUE_MAX_RAW_STEPS:
            panel.plot(xs, values, style, color=color, linewidth=0.4, alpha=0.2,
                       gid=f"line:{column}:steps")
            mx, mean = binned_mean(xs, values, weights, QUEUE_BINS)
            panel.plot(mx, mean, style, color=color, linewidth=1.3, gid=f"line:{column}")
        else:
            panel.plot(xs, values, style, color=color, linewidth=1.1, gid=f"line:{column}")
        panel.set_ylabel(ylabel, fontsize=9)
        top = max(1.0, float(values.max()) if len(values) else 1.0)
        panel.set_ylim(0, top * 1.1)
        panel.yaxis.set_major_locator(MaxNLocator(nbins=3, integer=True))  # whole requests
        panel.grid(axis="y", alpha=0.3)
        panel.spines[["top", "right"]].set_visible(False)
    if len(xs) <= QUEUE_MAX_RAW_STEPS:
        return panel, []
    span = (xs.max() - xs.min()) / QUEUE_BINS
    return panel, [
        Line2D([], [], color="black", linewidth=1.3,
               label=f"requests: mean per {span:.3g} {_unit(x)}"),
        Line2D([], [], color="black", linewidth=0.6, alpha=0.3,
               label="requests: every step"),
    ]


def binned_mean(xs: Any, values: Any, weights: Any, bins: int) -> tuple[Any, Any]:
    """The ``weights``-weighted mean of ``values`` in each of ``bins`` equal spans of
    ``xs``, at the spans' centres; empty spans are left out (nothing to average)."""
    edges = np.linspace(float(xs.min()), float(xs.max()), bins + 1)
    idx = np.clip(np.searchsorted(edges, xs, side="right") - 1, 0, bins - 1)
    w = np.where(np.asarray(weights, dtype=float) > 0, weights, 0.0)
    if not w.any():
        w = np.ones(len(xs))
    total = np.bincount(idx, weights=w, minlength=bins)
    summed = np.bincount(idx, weights=w * values, minlength=bins)
    keep = total > 0
    centres = (edges[:-1] + edges[1:]) / 2
    return centres[keep], summed[keep] / total[keep]


def _unit(x: str) -> str:
    """The unit of the x column for the queue note: ``"time_s"`` -> ``"s"``."""
    return "s" if x.endswith("_s") else f"{x}s" if x == "step" else x
