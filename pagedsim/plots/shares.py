"""Stacked share bars in the style of the vLLM paper's Figure 2: where the KV pool went.

One bar per scheme, 0-100 % of the pool, stacked bottom-up as token, reserved,
internal fragmentation, external fragmentation, free; each segment big enough is
labelled with its percentage. Reference numbers (e.g. the paper's) can be drawn as a
thin hatched bar beside each of ours.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..memory.accounting import CATEGORIES
from ._mpl import NOTEBOOK_WIDTH_IN, axes_or_new, legend_patch
from .palette import CATEGORY_COLORS, CATEGORY_SHORT, text_color_on

if TYPE_CHECKING:
    from matplotlib.axes import Axes

_TOL = 1e-6  # shares are fractions of one pool; rounding error only


def share_bars(
    summary_df: Any,
    ax: Axes | None = None,
    paper: Mapping[str, Mapping[str, float]] | None = None,
    *,
    scheme_col: str = "scheme",
    prefix: str = "",
    min_label: float = 0.03,
    paper_label: str = "paper",
    title: str | None = "Where the KV pool goes",
) -> Axes:
    """Stacked bars of the six shares (fractions of capacity, summing to 1) per scheme.

    ``summary_df`` has one row per scheme: ``scheme_col`` plus one column per category
    of :data:`pagedsim.CATEGORIES`, named ``prefix + category``: the engine's summary
    has ``all_`` (whole run) and ``sat_`` (saturated steps only, the view comparable
    with the paper's Figure 2) shares. A scheme whose shares are all NaN (e.g. never
    saturated) gets an empty bar marked "no data".

    ``paper`` maps some of those schemes to reference shares ``{category: fraction}``
    (e.g. :data:`pagedsim.paper.FIGURE2_SHARES`); categories it lacks or gives as NaN
    are left blank (the source did not give them). Each is drawn as a thin hatched bar
    right of ours. Segments of at least ``min_label`` (fraction) are labelled in
    percent. Returns the axes.
    """
    cols = [prefix + c for c in CATEGORIES]
    missing = [c for c in (scheme_col, *cols) if c not in summary_df.columns]
    if missing:
        hint = ("; the engine's summary names them all_<category> and sat_<category>: "
                "pass prefix='sat_' or prefix='all_'" if not prefix else "")
        raise ValueError(f"share_bars needs columns {missing} in the summary frame{hint}")
    schemes = [str(s) for s in summary_df[scheme_col]]
    rows = summary_df[cols].to_numpy(dtype=float)
    for s, row in zip(schemes, rows, strict=True):
        if np.isnan(row).all():
            continue
        if np.isnan(row).any() or (row < -_TOL).any() or abs(row.sum() - 1) > _TOL:
            raise ValueError(f"shares of {s!r} must be non-negative and sum to 1, got "
                             f"{dict(zip(CATEGORIES, row.round(6), strict=True))}")
    paper = {s: {c: v for c, v in ref.items() if not math.isnan(v)}
             for s, ref in (paper or {}).items()}
    unknown = sorted(set(paper) - set(schemes))
    if unknown:
        raise ValueError(f"paper gives schemes {unknown} that are not in the summary "
                         f"({schemes}); key it by the summary's scheme names")
    for s, ref in paper.items():
        bad = set(ref) - set(CATEGORIES)
        if bad or sum(ref.values()) > 1 + 1e-3 or min(ref.values(), default=0) < 0:
            raise ValueError(f"paper[{s!r}] must map categories {CATEGORIES} to "
                             f"non-negative fractions summing to at most 1, got {dict(ref)}")

    ax = axes_or_new(ax, (NOTEBOOK_WIDTH_IN, 4.8))
    width = 0.56 if paper else 0.66
    for i, (s, row) in enumerate(zip(schemes, rows, strict=True)):
        x = i - 0.12 if paper else i
        if np.isnan(row).all():
            ax.bar(x, 100, width, color="none", edgecolor="#999999", linewidth=0.6,
                   linestyle="--")
            ax.text(x, 50, "no data", ha="center", va="center", fontsize=8, rotation=90,
                    color="#555555")
        bottom = 0.0
        for cat, v in zip(CATEGORIES, row, strict=True):
            if not v > 0:  # zero, or NaN (no data)
                continue
            ax.bar(x, 100 * v, width, bottom=bottom, color=CATEGORY_COLORS[cat],
                   edgecolor="white", linewidth=0.6, gid=f"share:{s}:{cat}")
            if v >= min_label:
                ax.text(x, bottom + 50 * v, f"{100 * v:.1f}%", ha="center", va="center",
                        fontsize=8, color=text_color_on(CATEGORY_COLORS[cat]))
            bottom += 100 * v
        if s in paper:
            _paper_bar(ax, i + 0.3, paper[s])

    ax.set_xticks(range(len(schemes)))
    ax.set_xticklabels(schemes, fontsize=9)
    ax.set_xlim(-0.6, len(schemes) - 0.4)
    ax.set_ylim(0, 100)
    ax.set_ylabel("share of KV pool (% of slots)")
    ax.spines[["top", "right"]].set_visible(False)
    if title:
        ax.set_title(title, loc="left", fontsize=11)
    handles = [legend_patch(CATEGORY_SHORT[c], CATEGORY_COLORS[c], edgecolor="none")
               for c in reversed(CATEGORIES)]  # same top-to-bottom order as the stack
    if paper:
        handles.append(legend_patch(f"{paper_label} (thin, hatched)", "white", "///", "#555555"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8,
              frameon=False)
    return ax


def _paper_bar(ax: Axes, x: float, ref: Mapping[str, float]) -> None:
    """A thin hatched bar of reference shares; an outline marks the full 100 %."""
    ax.bar(x, 100, 0.16, color="none", edgecolor="#999999", linewidth=0.6)
    bottom = 0.0
    for cat in CATEGORIES:
        v = ref.get(cat, 0.0)
        if v <= 0:
            continue
        ax.bar(x, 100 * v, 0.16, bottom=bottom, color=CATEGORY_COLORS[cat], alpha=0.75,
               hatch="///", edgecolor="white", linewidth=0.4, gid=f"paper:{cat}")
        if v >= 0.08:  # a thin bar only fits big numbers, written sideways
            ax.text(x, bottom + 50 * v, f"{100 * v:.1f}", ha="center", va="center",
                    rotation=90, fontsize=7, color=text_color_on(CATEGORY_COLORS[cat]))
        bottom += 100 * v
