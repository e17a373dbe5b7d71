"""A hybrid model's KV-cache groups over a run: the blocks each group holds, and what the
sliding-window groups gave up behind their windows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._mpl import NOTEBOOK_WIDTH_IN, axes_or_new

if TYPE_CHECKING:
    from matplotlib.axes import Axes

FULL_COLOR = "#4C72B0"
SLIDING_COLOR = "#55A868"
FREED_COLOR = "#C44E52"


def group_blocks(frame: Any, ax: Axes | None = None, title: str | None = None) -> Axes:
    """Blocks per KV-cache group at every step of ``frame``
    (:func:`pagedsim.experiments.hybrid_report.group_timeline`'s rows, one scheme): each
    full group's blocks as a line; the sliding groups' blocks (together) as an area, with
    the entries they gave up behind the window stacked over it, hatched (what they would
    hold more if they kept every block, as all full attention does); on a second axis, the
    blocks given back to the pool so far. The artists carry gids (``line:full:<g>``,
    ``area:sliding:held``, ``area:sliding:null``, ``line:freed``) for tests."""
    need = {"step", "group", "kind", "blocks", "null_entries", "freed_blocks_total"}
    missing = sorted(need - set(frame.columns))
    if missing:
        raise ValueError(f"frame lacks the columns {missing}")
    ax = axes_or_new(ax, (NOTEBOOK_WIDTH_IN, 4.2))
    wide = frame.pivot_table(index="step", columns="group",
                             values=["blocks", "null_entries", "freed_blocks_total"],
                             aggfunc="sum")
    steps = wide.index.to_numpy()
    kinds = frame.drop_duplicates("group").set_index("group")["kind"]
    sliding = [g for g, k in kinds.items() if k == "sliding"]
    for g in (g for g, k in kinds.items() if k != "sliding"):
        (line,) = ax.plot(steps, wide["blocks"][g].to_numpy(), color=FULL_COLOR, lw=1.2,
                          label=f"group {g} ({kinds[g]} attention): blocks held")
        line.set_gid(f"line:full:{g}")
    if sliding:
        held = wide["blocks"][sliding].sum(axis=1).to_numpy()
        null = wide["null_entries"][sliding].sum(axis=1).to_numpy()
        groups = ", ".join(str(g) for g in sliding)
        area = ax.fill_between(steps, 0, held, color=SLIDING_COLOR, alpha=0.8, lw=0,
                               label=f"sliding group{'s' if len(sliding) > 1 else ''} "
                                     f"{groups}: blocks held")
        area.set_gid("area:sliding:held")
        gone = ax.fill_between(steps, held, held + null, facecolor="none",
                               edgecolor=SLIDING_COLOR, hatch="///", lw=0,
                               label="entries given up behind the window (null)")
        gone.set_gid("area:sliding:null")
        twin = ax.twinx()
        freed = wide["freed_blocks_total"][sliding].sum(axis=1).to_numpy()
        (line,) = twin.plot(steps, freed, color=FREED_COLOR, ls="--", lw=1.2,
                            label="blocks given back behind the window, so far (right)")
        line.set_gid("line:freed")
        twin.set_ylabel("blocks given back (cumulative)", color=FREED_COLOR)
        twin.tick_params(axis="y", colors=FREED_COLOR)
        twin.set_ylim(bottom=0)
        handles = ax.get_legend_handles_labels()[0] + [line]
    else:
        handles = ax.get_legend_handles_labels()[0]
    ax.set_xlabel("step")
    ax.set_ylabel("blocks")
    ax.set_ylim(bottom=0)
    ax.set_xlim(steps.min(), steps.max())
    ax.legend(handles=handles, loc="upper left", fontsize=8, framealpha=0.9)
    if title:
        ax.set_title(title, fontsize=9)
    return ax
