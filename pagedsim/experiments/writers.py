"""Files from experiments: CSVs and PNGs of a comparison or a sweep, and
:func:`make_figures`, which regenerates everything under ``figures/``.

Deterministic: same data, same bytes (PNGs carry no date and no software version).
matplotlib is imported only when a figure is drawn.
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..memory.accounting import CATEGORIES
from ..metrics.serving_report import SUMMARY_SERVING_KEYS
from ..metrics.summary import CSV_LEFT_OUT, SUMMARY_KEYS
from ..paper import FIGURE2_SHARES, FIGURE13_RATE, paper_key
from ..plots.palette import CATEGORY_SHORT, category_of
from ..wording import count
from .figure12 import figure12
from .report import figures_readme
from .runner import Comparison, compare, shares_frame
from .spec import Experiment
from .sweeps import PAPER_SWEEPS, SWEEPS, run_sweep, sweep_base
from .tables import figure2_mismatches, sweep_table

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
    remain, the last step included (it takes the place of the latest k-th step when
    there are ``max_rows`` of those already). ``max_rows`` 0 keeps all."""
    if max_rows <= 0 or len(steps) <= max_rows:
        return steps
    k = math.ceil(len(steps) / max_rows)
    idx = list(range(0, len(steps), k))
    if idx[-1] != len(steps) - 1:
        if len(idx) < max_rows:
            idx.append(len(steps) - 1)
        else:
            idx[-1] = len(steps) - 1
    return steps.iloc[idx]


def write_compare(cmp: Comparison, out: str | os.PathLike[str], prefix: str = "compare",
                  max_step_rows: int = 2000) -> list[Path]:
    """Write ``<prefix>_summary.csv`` (one row per scheme: every summary number),
    ``<prefix>_steps.csv`` (per-step records of every scheme, thinned to ``max_step_rows``
    rows per scheme, see :func:`thin_steps`; 0 = all), ``<prefix>_shares.png`` (stacked
    share bars, the paper's Figure 2 beside them) and ``<prefix>_timeline_<scheme>.png``
    (the pool over time, from the steps the run kept; its title says when they are a
    sample) into ``out``; returns the paths written. The summary CSV leaves out
    :data:`~pagedsim.metrics.summary.CSV_LEFT_OUT` (the request latencies)."""
    import pandas as pd

    from ..plots.shares import share_bars
    from ..plots.timeline import memory_timeline

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    df = shares_frame(cmp.summary, cmp.part)
    cols = [*[k for k in SUMMARY_KEYS if k in df.columns], "part", *CATEGORIES]
    cols += [c for c in df.columns if c not in cols and c not in CSV_LEFT_OUT]
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
    # The paper's bars only beside a run in the paper's setting.
    mismatches = figure2_mismatches(cmp.experiment)
    paper = {} if mismatches else {
        s: {c: v for c, v in FIGURE2_SHARES[paper_key(s)].items() if not math.isnan(v)}
        for s in df["scheme"] if paper_key(s) in FIGURE2_SHARES}
    fig, ax = plt.subplots(figsize=(10, 4.8))
    part = "saturated part" if cmp.part == "saturated" else "whole run"
    share_bars(df, ax=ax, paper=paper, paper_label="vLLM paper Fig. 2",
               title=f"Where the KV pool goes ({part}, time-weighted)")
    footer = f"Setting: {cmp.experiment.label()}"
    if mismatches:
        footer += ("; the vLLM paper's Fig. 2 bars are not drawn: this is not the paper's "
                   f"setting ({'; '.join(mismatches)})")
    ax.text(0, -0.14, "\n".join(textwrap.wrap(footer, 180)), transform=ax.transAxes,
            fontsize=7, va="top", gid="footer")
    path = out / f"{prefix}_shares.png"
    _savefig(fig, path)
    paths.append(path)
    totals = dict(zip(cmp.summary["scheme"], cmp.summary["num_steps"], strict=True))
    for name, s in cmp.steps.items():
        fig, ax = plt.subplots(figsize=(10, 6.2))  # the pool, then running and waiting
        title = f"KV pool over time: {name}"
        total = int(totals.get(name, len(s)))
        if len(s) < total:  # the run kept a sample of its steps: say so on the figure
            title += f" (a sample: {len(s):,} of its {total:,} steps, each drawn as it was)"
        memory_timeline(s, ax=ax, title=title)
        path = out / f"{prefix}_timeline_{name}.png"
        _savefig(fig, path)
        paths.append(path)
    return paths


#: What each sweep's figures call it (their titles start with it).
SWEEP_TITLES = {"block-size": "Block size", "rate": "Request rate",
                "sharing": "Sharing (parallel sampling, beam search)",
                "preemption": "Swap vs recompute", "cache-size": "Cache size",
                "host-cache": "Host tier"}
#: Characters per line of a figure's setting footer (7 pt text under an 8-inch figure).
FOOTER_CHARS = 150


def sweep_footer(name: str, df: pd.DataFrame, experiment: Experiment | None,
                 columns: Sequence[str]) -> str:
    """The setting under a sweep figure: what was simulated (the experiment's label, the
    swept fields named as swept), which schemes, and over which part of the run shares
    and means are taken."""
    from .sweeps import REPLAY_ROW, SWEPT_FIELDS_OF

    if experiment is not None:
        setting = experiment.label(swept=SWEPT_FIELDS_OF[name])
    else:  # only the frame: say what it holds
        first = df.iloc[0]
        setting = f"{first['workload']}, {count(int(first['num_requests']), 'request')}"
    schemes = ", ".join(dict.fromkeys(str(s) for s in df["scheme"] if s != REPLAY_ROW)) \
        if "scheme" in df else "?"
    notes = [f"Setting: {setting}; scheme{'s' if ',' in schemes else ''} {schemes}."]
    views = {c[:4] for c in columns if category_of(c)}
    if views == {"all_"}:
        notes.append("Shares: time-weighted over the whole run (every step).")
    elif views == {"sat_"}:
        notes.append("Shares: time-weighted over the saturated steps only (requests "
                     "waiting).")
    if "mean_batch_size" in columns:
        notes.append("Mean batch: over every step that ran anything (whole run).")
    if any("latency" in c for c in columns):
        notes.append("Normalized latency: a request's end-to-end latency / its output "
                     "tokens; median over requests.")
    if "sharing_saving" in columns:
        notes.append("Saving: 1 - physical / logical blocks, time-weighted over the run.")
    if "mean_ttft_s" in columns:
        notes.append("TTFT: from a request's arrival to the end of the step that sampled its "
                     "first token; mean over finished requests.")
    if "prefix_hit_rate" in columns:
        notes.append("Hit rate: prompt tokens served from the cache / prompt tokens looked "
                     "up, over every admission (recomputations too). cache-replay: the same "
                     "prompts in arrival order through an LRU cache of that many tokens, no "
                     "scheduler, prompt blocks only (pagedsim cache-replay); the schedulers' "
                     "caches also keep the blocks decoding fills.")
    return "\n".join(textwrap.wrap(" ".join(notes), FOOTER_CHARS))


def _footer(ax: Any, text: str, below_pt: float = 34) -> None:
    """``text`` under ``ax``'s x label, left-aligned, in 7 pt (gid ``"footer"``)."""
    ax.annotate(text, (0, 0), xycoords="axes fraction", xytext=(0, -below_pt),
                textcoords="offset points", va="top", ha="left", fontsize=7,
                color="#333333", gid="footer", annotation_clip=False)


def write_sweep(name: str, df: pd.DataFrame, out: str | os.PathLike[str],
                prefix: str = "sweep", experiment: Experiment | None = None) -> list[Path]:
    """Write ``<prefix>_<name>.csv`` and one PNG per plotted column,
    ``<prefix>_<name>_<column>.png``; returns the paths written. ``experiment`` is the
    sweep's base experiment (:func:`~pagedsim.experiments.sweep_base`): the figures'
    footer states its setting (without it, what the frame holds)."""
    from ..plots.palette import column_label
    from ..plots.sweeps import sweep_curves

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _, ys, x, logx, by = SWEEPS[name]
    path = out / f"{prefix}_{name.replace('-', '_')}.csv"
    # The host-cache CSV came with TTFT (its point); benchmark_serving's fields came later.
    left_out = SUMMARY_SERVING_KEYS if name == "host-cache" else CSV_LEFT_OUT
    df.drop(columns=[c for c in left_out if c in df.columns]).to_csv(path, index=False)
    paths = [path]
    plt = _pyplot()
    for y in ys:
        fig, ax = plt.subplots(figsize=(8, 4.2))
        cols = [y] if isinstance(y, str) else list(y)
        names = []
        for col in cols:
            cat = category_of(col)
            names.append(CATEGORY_SHORT[cat] if cat else column_label(col).split(" (")[0])
        part = {"all_": " (whole run)", "sat_": " (saturated steps)"}.get(cols[0][:4], "")
        title = f"{SWEEP_TITLES[name]}: {' and '.join(names)}{part}"
        sweep_curves(df, x, cols, ax=ax, logx=logx, by=by, title=title)
        if by is not None:
            _mark_paper(ax, name, df, x, by, cols[0])
        if name == "sharing":
            ax.set_xlabel("samples per request n (parallel) or beam width (beam)")
        footer = sweep_footer(name, df, experiment, cols)
        twins = _twins_note(df, x, by, cols[0]) if by is not None else ""
        _footer(ax, footer + (f"\n{twins}" if twins else ""))
        # The file keeps its name: the plotted columns without their all_/sat_ prefix.
        stem = "_".join(CATEGORY_KEY.get(c, c) for c in cols)
        path = out / f"{prefix}_{name.replace('-', '_')}_{stem}.png"
        _savefig(fig, path)
        paths.append(path)
    if name == "host-cache":  # and the hits per tier beside the replay at the same capacity
        from ..plots.host_tiers import host_tier_bars
        from .sweeps import REPLAY_ROW

        fig, ax = plt.subplots(figsize=(8, 4.4))
        host_tier_bars(df, REPLAY_ROW, ax=ax)
        _footer(ax, sweep_footer(name, df, experiment, ["prefix_hit_rate"]))
        path = out / f"{prefix}_host_cache_tiers.png"
        _savefig(fig, path)
        paths.append(path)
    return paths


def write_figure12(df: pd.DataFrame, out: str | os.PathLike[str]) -> list[Path]:
    """The paper's Figure 12 (:mod:`pagedsim.experiments.figure12`): ``figure12.csv``
    (the runs, as a sweep's CSV) and ``figure12_normalized_latency.png`` (normalized
    latency against the rate per scheme, each scheme's sustained rate marked, the ratios
    beside the paper's under it); returns the paths written."""
    from ..plots.palette import SEQ_COLORS
    from ..plots.sweeps import sweep_curves
    from .figure12 import (
        LATENCY_COLUMN,
        LATENCY_FACTOR,
        figure12_base,
        ratio_lines,
        sustained_rates,
    )

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "figure12.csv"
    df.drop(columns=[c for c in CSV_LEFT_OUT if c in df.columns]).to_csv(path, index=False)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.6))
    sweep_curves(df, "rate_per_s", [LATENCY_COLUMN], ax=ax, by="scheme",
                 title="Figure 12: normalized latency against the request rate")
    for i, (scheme, (rate, _)) in enumerate(sustained_rates(df).items()):
        # sweep_curves colours the groups by SEQ_COLORS in order of appearance.
        first = df[df["scheme"] == scheme].sort_values("rate_per_s")[LATENCY_COLUMN].iloc[0]
        ax.plot([rate], [LATENCY_FACTOR * first], marker="v", markersize=8, linestyle="",
                color=SEQ_COLORS[i % len(SEQ_COLORS)], gid=f"sustained-{scheme}")
    setting = figure12_base().label(swept=("rate_per_s",))
    footer = [f"Setting: {setting}. Median over requests of end-to-end latency / output "
              f"tokens. Triangles: the rate each scheme sustains (its latency reaches "
              f"{LATENCY_FACTOR:g}x its value at the lowest rate)."] + ratio_lines(df)[1:]
    _footer(ax, "\n".join(textwrap.fill(line, FOOTER_CHARS) for line in footer))
    png = out / "figure12_normalized_latency.png"
    _savefig(fig, png)
    return [path, png]


#: A prefixed share column -> its plain category (file names of the sweep figures).
CATEGORY_KEY = {f"{p}{c}": c for p in ("all_", "sat_") for c in CATEGORIES}


def _mark_paper(ax: Any, name: str, df: pd.DataFrame, x: str, by: str, col: str) -> None:
    """On a grouped sweep figure: the paper's numbers as crosses in the colour of the
    matching curve, labelled with the figure or section they come from."""
    # sweep_curves colours groups by SEQ_COLORS in order of appearance.
    from ..plots.palette import SEQ_COLORS
    from ..plots.sweeps import percent_scale

    ref_col = {"sharing": "paper_saving", "rate": "paper_batch"}.get(name)
    if ref_col is None:
        return
    source = {"sharing": "paper §6.3", "rate": "paper Fig. 13"}[name]
    scale = percent_scale(col)
    handles, _ = ax.get_legend_handles_labels()  # the curves
    where = ""
    for gi, (group, g) in enumerate(df.groupby(by, sort=False)):
        if not g[ref_col].notna().any():
            continue
        if name == "rate":  # the paper measured one rate per workload
            workload = str(g["workload"].iloc[0])
            rate = FIGURE13_RATE.get(workload, math.nan)
            xs, refs = [rate], [g[ref_col].iloc[0]]
            where = f"{WORKLOAD_TITLES.get(workload, workload)}, {rate:g} req/s"
        else:
            xs, refs = list(g[x]), list(g[ref_col])
            where = "Alpaca"
        ax.plot(xs, [r * scale for r in refs], "x", markersize=9, mew=2,
                color=SEQ_COLORS[gi % 12], label=f"{source} ({where}): {group}",
                gid=f"paper:{group}")
    if where:  # one key entry for the marks: they take their curve's colour
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], marker="x", markersize=8, mew=2, linestyle="none",
                              color="#555555",
                              label=f"{source} ({where}), in its curve's colour"))
    ax.legend(handles=handles, fontsize=8, frameon=False, loc="upper left",
              bbox_to_anchor=(1.01, 1))


#: Workload names as figures write them.
WORKLOAD_TITLES = {"sharegpt": "ShareGPT", "alpaca": "Alpaca"}


def _twins_note(df: pd.DataFrame, x: str, by: str, col: str) -> str:
    """A note naming curves that coincide (one would hide the other), or ''."""
    groups = list(df.groupby(by, sort=False))
    curves = {group: tuple(g.sort_values(x)[col].round(9)) for group, g in groups}
    same = [(a, b) for i, a in enumerate(curves) for b in list(curves)[i + 1:]
            if curves[a] == curves[b]]
    return "; ".join(f"{a} = {b} (identical runs)" for a, b in same)


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
    for name in PAPER_SWEEPS:
        say(f"figures: sweep {name}")

        def make(workload: str, num_requests: int, rate: float,
                 preemption: str) -> Experiment:
            return Experiment(workload=workload, num_requests=num_requests, rate_per_s=rate,
                              preemption=preemption)

        df = run_sweep(name, make, jobs=jobs, progress=progress)
        tables[name] = sweep_table(name, df)
        frames[name] = df
        paths += write_sweep(name, df, out, experiment=sweep_base(name, make))
    say("figures: Figure 12")
    fig12 = figure12(jobs=jobs, progress=progress)
    paths += write_figure12(fig12, out)
    path = Path(out) / "README.md"
    path.write_text(figures_readme(cmp, tables, frames.get("sharing"),
                                   frames.get("block-size"), fig12), encoding="utf-8")
    paths.append(path)
    return paths
