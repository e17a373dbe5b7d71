"""Files from experiments: CSVs and PNGs of a comparison or a sweep, and
:func:`make_figures`, which regenerates everything under ``figures/``.

Deterministic: same data, same bytes (PNGs carry no date and no software version).
matplotlib is imported only when a figure is drawn.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..accounting import CATEGORIES
from ..metrics import SUMMARY_KEYS
from ..paper import FIGURE2_SHARES, FIGURE13_RATE, paper_key
from .report import figures_readme
from .runner import Comparison, compare, shares_frame
from .spec import Experiment
from .sweeps import SWEEPS, run_sweep
from .tables import sweep_table

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


def _savefig(fig: Any, path: Path) -> None:
    """Save a PNG without the matplotlib version in its metadata, so the same data gives
    byte-identical files whatever matplotlib wrote them (PNGs carry no date by default)."""
    fig.savefig(path, dpi=100, metadata={"Software": None}, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)


def _pyplot() -> Any:
    """pyplot on the non-interactive Agg backend (no display needed, deterministic)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def thin_steps(steps: pd.DataFrame, max_rows: int) -> pd.DataFrame:
    """Every k-th step (exact rows, not averages), k chosen so that at most ``max_rows``
    remain; the last step is always kept. ``max_rows`` 0 keeps all."""
    if max_rows <= 0 or len(steps) <= max_rows:
        return steps
    k = math.ceil(len(steps) / max_rows)
    idx = list(range(0, len(steps), k))
    if idx[-1] != len(steps) - 1:
        idx.append(len(steps) - 1)
    return steps.iloc[idx]


def write_compare(cmp: Comparison, out: str | os.PathLike[str], prefix: str = "compare",
                  max_step_rows: int = 2000) -> list[Path]:
    """Write ``<prefix>_summary.csv`` (one row per scheme: every summary number),
    ``<prefix>_steps.csv`` (per-step records of every scheme, thinned to ``max_step_rows``
    rows per scheme, see :func:`thin_steps`; 0 = all), ``<prefix>_shares.png`` (stacked
    share bars, the paper's Figure 2 beside them) and ``<prefix>_timeline_<scheme>.png``
    (the pool over time) into ``out``; returns the paths written."""
    import pandas as pd

    from ..plots.shares import share_bars
    from ..plots.timeline import memory_timeline

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    df = shares_frame(cmp.summary, cmp.part)
    cols = [*[k for k in SUMMARY_KEYS if k in df.columns], "part", *CATEGORIES]
    cols += [c for c in df.columns if c not in cols]
    path = out / f"{prefix}_summary.csv"
    df[cols].to_csv(path, index=False)
    paths.append(path)
    if cmp.steps:
        frames = [thin_steps(s, max_step_rows).assign(scheme=name)
                  for name, s in cmp.steps.items()]
        steps = pd.concat(frames, ignore_index=True)
        steps = steps[["scheme", *[c for c in steps.columns if c != "scheme"]]]
        path = out / f"{prefix}_steps.csv"
        steps.to_csv(path, index=False)
        paths.append(path)

    plt = _pyplot()
    paper = {s: {c: v for c, v in FIGURE2_SHARES[paper_key(s)].items() if not math.isnan(v)}
             for s in df["scheme"] if paper_key(s) in FIGURE2_SHARES}
    fig, ax = plt.subplots(figsize=(10, 4.8))
    part = "saturated part" if cmp.part == "saturated" else "whole run"
    share_bars(df, ax=ax, paper=paper, paper_label="vLLM paper Fig. 2",
               title=f"Where the KV pool goes ({part}, time-weighted)")
    ax.text(0, -0.14, cmp.experiment.label(), transform=ax.transAxes, fontsize=7,
            va="top", wrap=True)
    path = out / f"{prefix}_shares.png"
    _savefig(fig, path)
    paths.append(path)
    for name, s in cmp.steps.items():
        fig, ax = plt.subplots(figsize=(10, 4.2))
        memory_timeline(s, ax=ax, title=f"KV pool over time: {name}")
        path = out / f"{prefix}_timeline_{name}.png"
        _savefig(fig, path)
        paths.append(path)
    return paths


def write_sweep(name: str, df: pd.DataFrame, out: str | os.PathLike[str],
                prefix: str = "sweep") -> list[Path]:
    """Write ``<prefix>_<name>.csv`` and one PNG per plotted column,
    ``<prefix>_<name>_<column>.png``; returns the paths written."""
    from ..plots.sweeps import sweep_curves

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _, ys, x, logx, by = SWEEPS[name]
    path = out / f"{prefix}_{name.replace('-', '_')}.csv"
    df.to_csv(path, index=False)
    paths = [path]
    plt = _pyplot()
    for y in ys:
        fig, ax = plt.subplots(figsize=(8, 4.2))
        cols = [y] if isinstance(y, str) else list(y)
        plot_df = df
        for i, col in enumerate(cols):
            if col.startswith(("all_", "sat_")):
                # sweep_curves draws the five categories in percent and in their colours;
                # give it the plain category names.
                cat = col.split("_", 1)[1]
                plot_df = plot_df.assign(**{cat: df[col]})
                cols[i] = cat
        y = "_".join(cols)
        sweep_curves(plot_df, x, cols, ax=ax, logx=logx, by=by,
                     title=f"sweep {name}: {', '.join(c.replace('_', ' ') for c in cols)}")
        if by is not None:
            _mark_paper_and_twins(ax, name, df, x, by, cols[0])
        if name == "sharing":
            ax.set_xlabel("samples per request n (parallel) or beam width (beam)")
        path = out / f"{prefix}_{name.replace('-', '_')}_{y}.png"
        _savefig(fig, path)
        paths.append(path)
    return paths


def _mark_paper_and_twins(ax: Any, name: str, df: pd.DataFrame, x: str, by: str,
                          col: str) -> None:
    """On a grouped sweep figure: the paper's numbers as crosses in the colour of the
    matching curve, and a note naming curves that coincide (one would hide the other)."""
    # sweep_curves colours groups by SEQ_COLORS in order of appearance.
    from ..plots.palette import SEQ_COLORS

    ref_col = {"sharing": "paper_saving", "rate": "paper_batch"}.get(name)
    groups = list(df.groupby(by, sort=False))
    for gi, (group, g) in enumerate(groups):
        if ref_col is None or not g[ref_col].notna().any():
            continue
        if name == "rate":  # the paper measured one rate per workload
            rate = FIGURE13_RATE.get(str(g["workload"].iloc[0]), math.nan)
            xs, refs = [rate], [g[ref_col].iloc[0]]
        else:
            xs, refs = list(g[x]), list(g[ref_col])
        ax.plot(xs, refs, "x", markersize=9, mew=2, color=SEQ_COLORS[gi % 12],
                label=f"paper: {group}")
    if ref_col is not None:
        ax.legend(fontsize=8, frameon=False)
    # Identical curves hide one another; say so instead of letting one vanish.
    curves = {group: tuple(g.sort_values(x)[col].round(9)) for group, g in groups}
    same = [(a, b) for i, a in enumerate(curves) for b in list(curves)[i + 1:]
            if curves[a] == curves[b]]
    if same:
        text = "; ".join(f"{a} = {b} (identical runs)" for a, b in same)
        ax.text(0.01, -0.16, text, transform=ax.transAxes, fontsize=7, va="top")


def make_figures(out: str | os.PathLike[str] = "figures", jobs: int | None = None,
                 progress: bool | None = None, log: Any = None) -> list[Path]:
    """Regenerate every committed figure and CSV: ``compare`` with its defaults, every
    sweep with its defaults, and ``README.md`` (tables and reproduction checks).
    Deterministic: same code, same bytes. ``log``: a stream for one line per stage
    (None: silent)."""
    def say(text: str) -> None:
        if log is not None:
            print(text, file=log, flush=True)

    paths: list[Path] = []
    say("figures: compare (defaults)")
    cmp = compare(Experiment(), jobs=jobs, progress=progress)
    paths += write_compare(cmp, out, max_step_rows=1000)
    tables: dict[str, str] = {}
    frames: dict[str, Any] = {}
    for name in SWEEPS:
        say(f"figures: sweep {name}")

        def make(workload: str, num_requests: int, rate: float,
                 preemption: str) -> Experiment:
            return Experiment(workload=workload, num_requests=num_requests, rate_per_s=rate,
                              preemption=preemption)

        df = run_sweep(name, make, jobs=jobs, progress=progress)
        tables[name] = sweep_table(name, df)
        frames[name] = df
        paths += write_sweep(name, df, out)
    path = Path(out) / "README.md"
    path.write_text(figures_readme(cmp, tables, frames.get("sharing"),
                                   frames.get("block-size")), encoding="utf-8")
    paths.append(path)
    return paths
