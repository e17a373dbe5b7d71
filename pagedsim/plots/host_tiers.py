"""The prefix cache's hit rate per tier (GPU, host) against a host tier's size, beside the
scheduler-free replay at the same total capacity (``pagedsim sweep host-cache``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ._mpl import NOTEBOOK_WIDTH_IN, axes_or_new
from .palette import SEQ_COLORS

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def host_tier_bars(df: Any, replay_row: str, ax: Axes | None = None,
                   title: str | None = None) -> Axes:
    """Per scheme, one stacked bar per host tier size (``host_cache_gb``): the share of
    prompt tokens the GPU tier served (``prefix_hit_rate_gpu``) and the host tier's on top
    (``prefix_hit_rate_host``), in percent; the rows whose ``scheme`` is ``replay_row``
    as a black line (the same prompts with no scheduler at the same total capacity).
    Returns the axes."""
    ax = axes_or_new(ax, (NOTEBOOK_WIDTH_IN, 4.4))
    runs = df[df["scheme"] != replay_row]
    schemes = list(dict.fromkeys(runs["scheme"]))
    gbs = sorted(set(runs["host_cache_gb"]))
    width = 0.8 / max(len(schemes), 1)
    for i, scheme in enumerate(schemes):
        g = runs[runs["scheme"] == scheme].set_index("host_cache_gb").loc[gbs]
        xs = [j + (i - (len(schemes) - 1) / 2) * width for j in range(len(gbs))]
        gpu = 100 * g["prefix_hit_rate_gpu"].to_numpy(dtype=float)
        host = 100 * g["prefix_hit_rate_host"].to_numpy(dtype=float)
        color = SEQ_COLORS[i % len(SEQ_COLORS)]
        ax.bar(xs, gpu, width, color=color, label=f"{scheme}: GPU tier", gid=f"gpu:{scheme}")
        ax.bar(xs, host, width, bottom=gpu, color=color, alpha=0.45, hatch="//",
               label=f"{scheme}: host tier", gid=f"host:{scheme}")
    rep = df[df["scheme"] == replay_row].set_index("host_cache_gb")
    if len(rep):
        ax.plot(range(len(gbs)), 100 * rep.loc[gbs, "prefix_hit_rate"].to_numpy(dtype=float),
                "k-o", label="no scheduler, same total capacity", gid="replay")
    ax.set_xticks(range(len(gbs)), [f"{g:g}" for g in gbs])
    ax.set_xlabel("host tier (GiB)")
    ax.set_ylabel("prompt tokens served from the cache (%)")
    ax.set_ylim(0, max(5.0, math.ceil(ax.get_ylim()[1] / 5) * 5))
    ax.set_title(title or "Hit rate per tier against the host tier's size")
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1))
    return ax
