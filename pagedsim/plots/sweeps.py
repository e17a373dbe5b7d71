"""Curves from parameter sweeps: a share, batch size or throughput against what was swept."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._mpl import NOTEBOOK_WIDTH_IN, axes_or_new
from .palette import (
    CATEGORY_COLORS,
    CATEGORY_SHORT,
    PERCENT_COLUMNS,
    SEQ_COLORS,
    category_of,
    column_label,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes

_STYLES = ("-", "--", ":", "-.")


def sweep_curves(
    df: Any,
    x: str,
    ys: str | Sequence[str],
    ax: Axes | None = None,
    logx: bool = False,
    *,
    by: str | None = None,
    title: str | None = None,
) -> Axes:
    """One line per column of ``ys`` against the swept column ``x`` (e.g. internal-frag
    share vs ``block_size``, ``mean_batch_size`` vs request ``rate``).

    ``by`` (e.g. ``"scheme"``) draws one line per group and y: colour per group, line
    style per y. Share columns (a category, plain or ``all_``/``sat_`` prefixed) use the
    category colours and percent of the pool (the frame holds fractions), and the y label
    says whether they cover the whole run (``all_``) or its saturated steps (``sat_``);
    the fractions of :data:`~pagedsim.plots.palette.PERCENT_COLUMNS` are drawn in
    percent too; other columns as they are. Axis labels come from
    :func:`~pagedsim.plots.palette.column_label`. The y axis starts at 0 (a curve of
    values far from 0 is not magnified into a cliff). ``logx`` uses a base-2 log axis
    (block sizes, lengths). Returns the axes.
    """
    ys = [ys] if isinstance(ys, str) else list(ys)
    missing = [c for c in (x, *ys, *([by] if by else [])) if c not in df.columns]
    if missing:
        raise ValueError(f"sweep_curves needs columns {missing} in the sweep frame")
    cats = {y: category_of(y) for y in ys}  # share columns, plain or all_/sat_ prefixed
    all_shares = all(cats.values())
    ax = axes_or_new(ax, (NOTEBOOK_WIDTH_IN, 4.2))
    numeric_x = df[x].dtype.kind in "iuf"
    groups = list(df.groupby(by, sort=False)) if by else [(None, df)]
    for gi, (name, g) in enumerate(groups):
        g = g.sort_values(x) if numeric_x else g  # categories keep the frame's order
        for yi, y in enumerate(ys):
            values = g[y].to_numpy(dtype=float) * percent_scale(y)
            if by:
                color, style = SEQ_COLORS[gi % len(SEQ_COLORS)], _STYLES[yi % len(_STYLES)]
                label = f"{name}" if len(ys) == 1 else f"{name}: {_y_name(y)}"
            else:
                color = CATEGORY_COLORS[cats[y]] if cats[y] else SEQ_COLORS[yi % 12]
                # Two views of one category (all_ and sat_) share a colour: dash the second.
                style = "--" if cats[y] and list(cats.values()).index(cats[y]) < yi else "-"
                label = _y_name(y)
            ax.plot(g[x].to_numpy(), values, style, color=color, marker="o", markersize=4,
                    linewidth=1.6, label=label, gid=f"curve:{name}:{y}")
    if logx:
        ax.set_xscale("log", base=2)
    xvals = sorted(df[x].unique()) if numeric_x else []
    if 0 < len(xvals) <= 12:  # few swept values: tick exactly those, in plain numbers
        ax.set_xticks(xvals)
        ax.set_xticklabels([_tick(v) for v in xvals])
        ax.minorticks_off()
    ax.set_xlabel(column_label(x))
    if all_shares:
        views = {_view(y) for y in ys}
        view = f", {views.pop()}" if len(views) == 1 and None not in views else ""
        ax.set_ylabel(f"share of KV pool{view} (% of slots)")
    elif len(set(map(column_label, ys))) == 1:
        ax.set_ylabel(column_label(ys[0]))
    # From 0: a truncated axis would make small differences look large. 0 joins the data
    # limits as a sticky edge (no margin below it), and the axis keeps autoscaling, so
    # what is drawn later (reference marks) still fits.
    ax.update_datalim([(0.0, 0.0)], updatex=False)
    for line in ax.get_lines():
        line.sticky_edges.y.append(0.0)
    ax.autoscale_view()
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False, loc="best")
    if title:
        ax.set_title(title, loc="left", fontsize=11)
    return ax


def _tick(value: float) -> str:
    """A swept value as a tick label: ``16``, ``2.5``, ``65,536``, ``1.01M`` (millions to
    three significant digits, so that pool sizes in tokens stay short)."""
    if value >= 1e6 and float(value).is_integer():
        return f"{value / 1e6:.3g}M"
    if value >= 1e3 and float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:g}"


def percent_scale(column: str) -> float:
    """100 for a column of fractions drawn in percent (shares, :data:`PERCENT_COLUMNS`),
    else 1."""
    return 100.0 if category_of(column) or column in PERCENT_COLUMNS else 1.0


def _view(y: str) -> str | None:
    """Which part of the run a share column covers, in words (None if it does not say)."""
    return {"all_": "whole run", "sat_": "saturated steps"}.get(y[:4])


def _y_name(y: str) -> str:
    cat = category_of(y)
    if cat is None:
        return column_label(y)
    return CATEGORY_SHORT[cat] + (" (saturated)" if y.startswith("sat_") else "")
