"""Figures that read true (issue 13): checked from the drawn artists, not from pixels.

- a timeline gives the running requests an axis of their own, so ~30 running requests
  are not a flat line at the bottom of a 0..16,000-slot axis or under ~700 waiting ones;
- a block shared by copy-on-write is one block: one face colour, not its owners' colours
  in turn, with its reference count written in it;
- sweep figures start their y axes at 0, label axes in words (never a raw column name),
  say whether shares cover the whole run or its saturated steps, and carry a footer with
  the setting, as compare's figure does;
- compare's figure puts the paper's Figure 2 bars beside ours only in the paper's setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

from pagedsim import CATEGORIES, PagedAllocator, account  # noqa: E402
from pagedsim.experiments import (  # noqa: E402
    Experiment,
    compare,
    run_sweep_on,
    sweep_base,
    write_compare,
    write_sweep,
)
from pagedsim.experiments import writers as writers_module  # noqa: E402
from pagedsim.experiments.sweeps import SWEEPS  # noqa: E402
from pagedsim.memory.block_manager import BlockManager  # noqa: E402
from pagedsim.plots import block_map, memory_timeline, sweep_curves  # noqa: E402
from pagedsim.plots.block_map import grid_geometry  # noqa: E402
from pagedsim.plots.palette import SHARED_COLOR, seq_colors  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# --------------------------------------------------------------------------------------
# Timeline: the running line on its own axes


def _busy_steps(n: int = 200) -> pd.DataFrame:
    """A saturated run's steps: a full pool, ~30 running requests, up to ~700 waiting."""
    rng = np.random.default_rng(0)
    cap = 15_728
    token = rng.integers(14_000, 15_500, n)
    rows = {"time_s": np.arange(n) * 0.5, "token": token, "reserved": cap - token - 100,
            "internal_frag": np.zeros(n, int), "external_frag": np.zeros(n, int),
            "free": np.full(n, 100), "capacity": np.full(n, cap),
            "running": rng.integers(20, 40, n),
            "waiting": (700 * np.sin(np.linspace(0, np.pi, n))).astype(int)}
    return pd.DataFrame(rows)


def _line(fig: Any, gid: str) -> Any:
    found = [(ax, ln) for ax in fig.axes for ln in ax.get_lines() if ln.get_gid() == gid]
    assert len(found) == 1, f"{gid}: {len(found)} lines"
    return found[0]


@pytest.mark.parametrize("fractions", [False, True])
def test_timeline_running_requests_have_their_own_axes(fractions: bool) -> None:
    steps = _busy_steps()
    pool = memory_timeline(steps, fractions=fractions)
    fig = pool.figure
    stack = [c for c in pool.collections if (c.get_gid() or "").startswith("area:")]
    assert len(stack) == len(CATEGORIES)  # the slot stack is on the returned axes
    run_ax, running = _line(fig, "line:running")
    wait_ax, waiting = _line(fig, "line:waiting")
    assert run_ax is not pool and wait_ax is not pool and run_ax is not wait_ax
    assert list(running.get_ydata()) == list(steps["running"])
    assert list(waiting.get_ydata()) == list(steps["waiting"])
    # Readable: the running requests fill most of their axis (on the pool's axis or the
    # waiting one they were a flat line near 0), and the axis starts at 0 requests.
    lo, hi = run_ax.get_ylim()
    assert lo == 0 and steps["running"].max() / hi > 0.8
    lo, hi = wait_ax.get_ylim()
    assert lo == 0 and steps["waiting"].max() / hi > 0.8
    # One time axis for all three panels, labelled once, at the bottom.
    assert run_ax.get_shared_x_axes().joined(pool, run_ax)
    assert wait_ax.get_shared_x_axes().joined(pool, wait_ax)
    assert wait_ax.get_xlabel() == "time (s)" and pool.get_xlabel() == ""


def test_timeline_many_steps_draw_a_mean_over_the_faint_steps() -> None:
    """v0 scheduling alternates prefill steps (few running) and decode steps (the batch):
    thousands of such steps draw a solid block, so the panel draws their time-weighted
    mean per span of the x axis over the faint per-step line."""
    from pagedsim.plots.timeline import QUEUE_BINS, QUEUE_MAX_RAW_STEPS

    n = 3 * QUEUE_MAX_RAW_STEPS
    steps = _busy_steps(n)
    prefill = np.arange(n) % 3 == 0
    steps["running"] = np.where(prefill, 2, 30)
    steps["step_time_s"] = np.where(prefill, 0.1, 0.02)
    steps["time_s"] = np.concatenate([[0.0], np.cumsum(steps["step_time_s"])[:-1]])
    pool = memory_timeline(steps)
    fig = pool.figure
    _, raw = _line(fig, "line:running:steps")
    assert list(raw.get_ydata()) == list(steps["running"])
    run_ax, mean = _line(fig, "line:running")
    # Independently: the step-time-weighted mean in each of QUEUE_BINS equal time spans.
    t = steps["time_s"].to_numpy()
    span = (t.max() - t.min()) / QUEUE_BINS
    b = np.minimum(((t - t.min()) / span).astype(int), QUEUE_BINS - 1)
    w = steps["step_time_s"].to_numpy()
    frame = pd.DataFrame({"b": b, "wy": w * steps["running"], "w": w})
    sums = frame.groupby("b").sum()
    assert list(mean.get_ydata()) == pytest.approx(list(sums["wy"] / sums["w"]))
    assert min(mean.get_ydata()) > 2 and max(mean.get_ydata()) < 30  # neither extreme
    # The axis spans the per-step extremes (30), and the mean (10) still reads off it.
    assert run_ax.get_ylim()[1] == pytest.approx(33)
    key = [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]
    assert any(k.startswith("requests: mean per ") for k in key)
    assert "requests: every step" in key


def test_timeline_panels_stay_inside_the_given_axes() -> None:
    """Given an axes in a grid, the queue panels are carved out of it: the neighbour
    does not move and nothing overlaps it."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    before = right.get_position().bounds
    memory_timeline(_busy_steps(), ax=left)
    fig.canvas.draw()
    assert right.get_position().bounds == pytest.approx(before)
    for ax in fig.axes:
        if ax is not right:
            assert ax.get_position().x1 <= right.get_position().x0


def test_timeline_without_queue_has_no_panels() -> None:
    ax = memory_timeline(_busy_steps(), queue=False)
    assert ax.figure.axes == [ax]


# --------------------------------------------------------------------------------------
# Block map: a shared block is one colour with its ref count in it


def _forked(num_blocks: int = 16, block_size: int = 4) -> BlockManager:
    """n = 3 parallel sampling: a 10-token prompt forked twice; one child then writes
    (copy-on-write of the last block)."""
    a = PagedAllocator(num_blocks=num_blocks, block_size=block_size)
    a.allocate("A", 6, final_len=11)
    a.allocate(0, 10, final_len=20)
    a.fork(0, 1)
    a.fork(0, 2)
    a.append_slot(1)
    return a


def _rect_faces(ax: Any, prefix: str) -> list[tuple[tuple[float, float], str]]:
    """(lower-left corner, face colour) of every rectangle in collections ``prefix*``."""
    out = []
    for coll in ax.collections:
        if not (coll.get_gid() or "").startswith(prefix):
            continue
        faces = coll.get_facecolors()
        for i, path in enumerate(coll.get_paths()):
            corner = tuple(path.vertices.min(axis=0))
            out.append((corner, to_hex(faces[i % len(faces)])))
    return out


def _inside(xy: tuple[float, float], x0: float, y0: float, w: float, h: float) -> bool:
    return x0 <= xy[0] <= x0 + w and y0 <= xy[1] <= y0 + h


@pytest.mark.parametrize("slots", [True, False], ids=["slot-cells", "bars"])
def test_a_shared_block_is_one_colour_with_its_ref_count(slots: bool) -> None:
    a = _forked()
    snap = a.snapshot()
    ax = block_map(a, slots=slots)
    g = grid_geometry(a.num_blocks, a.block_size, slots=slots)
    owners = seq_colors(snap["seqs"])
    token_faces = _rect_faces(ax, ("slots:token" if slots else "fill:token"))
    texts = [t for t in ax.texts if t.get_gid() == "refcount"]
    shared = {b: r for b, r in enumerate(snap["ref_counts"]) if r > 1}
    assert shared  # the fixture really shares blocks
    for b, ref in shared.items():
        x0, y0 = (b % g.ncols) * (g.bc + g.gx), (b // g.ncols) * (g.br + g.gy)
        faces = {c for xy, c in token_faces if _inside(xy, x0, y0, g.bc - 1e-9, g.br - 1e-9)}
        assert faces == {SHARED_COLOR}, f"block {b}: {faces}"
        assert not faces & {to_hex(c) for c in owners.values()}  # no owner's colour
        inside = [t.get_text() for t in texts
                  if _inside(t.get_position(), x0, y0, g.bc, g.br)]
        assert inside == [f"×{ref}"], f"block {b}: {inside}"
    # An unshared block keeps its owner's colour, and has no count.
    own = next(b for b, r in enumerate(snap["ref_counts"]) if r == 1)
    x0, y0 = (own % g.ncols) * (g.bc + g.gx), (own // g.ncols) * (g.br + g.gy)
    owner = next(s for s, seq in snap["seqs"].items() if own in seq["block_table"])
    faces = {c for xy, c in token_faces if _inside(xy, x0, y0, g.bc - 1e-9, g.br - 1e-9)}
    assert faces == {to_hex(owners[owner])}
    assert len(texts) == len(shared)


def test_shared_blocks_still_account_every_slot() -> None:
    """Drawing sharing as one colour keeps the picture equal to the account."""
    a = _forked()
    acc = account(a)
    ax = block_map(a)
    for cat in ("token", "reserved", "internal_frag"):
        assert len(_rect_faces(ax, f"slots:{cat}")) == getattr(acc, cat), cat


# --------------------------------------------------------------------------------------
# Sweep curves: y from 0, words for labels, whole run or saturated said


def test_sweep_y_axis_starts_at_zero_and_labels_are_words() -> None:
    df = pd.DataFrame({"block_size": [8, 16, 32, 64],
                       "throughput_tokens_per_s": [890.0, 920.0, 935.0, 925.0],
                       "p50_normalized_latency_s": [0.3, 0.25, 0.22, 0.23]})
    for y in ("throughput_tokens_per_s", "p50_normalized_latency_s"):
        ax = sweep_curves(df, "block_size", y, logx=True)
        assert ax.get_ylim()[0] == 0
        assert "_" not in ax.get_ylabel() and ax.get_ylabel() != y
        assert "_" not in ax.get_xlabel()
    assert sweep_curves(df, "block_size", "p50_normalized_latency_s").get_ylabel() == \
        "median normalized latency (s per output token)"


@pytest.mark.parametrize(("prefix", "words"), [("all_", "whole run"),
                                                ("sat_", "saturated steps")])
def test_sweep_shares_say_which_part_of_the_run(prefix: str, words: str) -> None:
    df = pd.DataFrame({"block_size": [16, 32], f"{prefix}internal_frag": [0.01, 0.02],
                       f"{prefix}reserved": [0.02, 0.04]})
    ax = sweep_curves(df, "block_size", [f"{prefix}reserved", f"{prefix}internal_frag"])
    assert ax.get_ylabel() == f"share of KV pool, {words} (% of slots)"
    (line, _) = ax.get_lines()
    assert list(line.get_ydata()) == pytest.approx([2.0, 4.0])  # percent of the pool


def test_sweep_fractions_are_drawn_in_percent() -> None:
    df = pd.DataFrame({"width": [2, 4], "sharing_saving": [0.04, 0.068],
                       "mode": ["parallel", "parallel"]})
    ax = sweep_curves(df, "width", "sharing_saving", by="mode")
    assert list(ax.get_lines()[0].get_ydata()) == pytest.approx([4.0, 6.8])
    assert "%" in ax.get_ylabel() and ax.get_ylim()[0] == 0


# --------------------------------------------------------------------------------------
# The written figures: footer, titles, labels, paper marks


@pytest.fixture
def saved(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Figures the writers save, by file name, kept open for inspection."""
    figs: dict[str, Any] = {}

    def keep(fig: Any, path: Path) -> None:
        figs[Path(path).name] = fig

    monkeypatch.setattr(writers_module, "_savefig", keep)
    return figs


def _small(name: str) -> tuple[Experiment, list[float]]:
    """A sweep's base experiment, shrunk to a few requests, and two values to sweep."""
    def make(workload: str, num_requests: int, rate: float, preemption: str) -> Experiment:
        return Experiment(workload=workload, num_requests=24, rate_per_s=rate,
                          preemption=preemption)

    values = {"block-size": [8, 32], "rate": [2.0, 8.0], "sharing": [2, 4],
              "preemption": [8, 32], "cache-size": [512, 2048],
              "host-cache": [0.001, 0.01]}[name]
    return sweep_base(name, make), values


def _texts(fig: Any) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


@pytest.mark.parametrize("name", list(SWEEPS))
def test_sweep_figures_have_a_setting_footer_words_and_y_from_zero(
        name: str, tmp_path: Path, saved: dict[str, Any]) -> None:
    exp, values = _small(name)
    df = run_sweep_on(name, exp, values, jobs=1, progress=False)
    write_sweep(name, df, tmp_path, experiment=exp)
    assert saved, "no figure written"
    for fname, fig in saved.items():
        (ax,) = fig.axes
        footers = [t for t in ax.texts if t.get_gid() == "footer"]
        assert len(footers) == 1, fname
        footer = footers[0].get_text().replace("\n", " ")
        assert "Setting: opt-13b on a100-40gb (preset paper-opt-13b)" in footer
        assert "24 requests" in footer and "seed 0" in footer
        # The swept field is named as swept, not given one value.
        swept = {"block-size": "block size swept", "rate": "swept rates",
                 "sharing": "n or beam width swept", "preemption": "preemption swept",
                 "cache-size": "KV pool size swept", "host-cache": "host tier swept"}
        assert swept[name] in footer, footer
        assert ax.get_ylim()[0] == 0, fname
        title = ax.get_title(loc="left") or ax.get_title()  # the tiers figure centres its own
        for label in (ax.get_xlabel(), ax.get_ylabel(), title):
            assert label and "_" not in label, (fname, label)
        if "reserved" in fname:  # block-size shares: whole-run shares, said so
            assert "whole run" in ax.get_ylabel() and "whole run" in footer


def test_rate_and_sharing_figures_name_the_papers_figure(tmp_path: Path,
                                                         saved: dict[str, Any]) -> None:
    for name in ("rate", "sharing"):
        exp, values = _small(name)
        if name == "sharing":
            values = [2, 4]
        df = run_sweep_on(name, exp, values, jobs=1, progress=False)
        write_sweep(name, df, tmp_path, experiment=exp)
    rate_fig = saved["sweep_rate_mean_batch_size.png"]
    labels = [ln.get_label() for ln in rate_fig.axes[0].get_lines()
              if (ln.get_gid() or "").startswith("paper:")]
    assert labels and all(lb.startswith("paper Fig. 13 (ShareGPT, 2 req/s)") for lb in labels)
    key = [t.get_text() for t in rate_fig.axes[0].get_legend().get_texts()]
    assert "paper Fig. 13 (ShareGPT, 2 req/s), in its curve's colour" in key
    share_fig = saved["sweep_sharing_sharing_saving.png"]
    ax = share_fig.axes[0]
    marks = [ln for ln in ax.get_lines() if (ln.get_gid() or "").startswith("paper:")]
    assert {ln.get_label() for ln in marks} == {"paper §6.3 (Alpaca): parallel",
                                                "paper §6.3 (Alpaca): beam"}
    parallel = next(ln for ln in marks if ln.get_gid() == "paper:parallel")
    assert list(parallel.get_ydata()) == pytest.approx([6.09, 8.53])  # percent, as ours


def test_compare_figure_shows_the_paper_only_in_its_setting(tmp_path: Path,
                                                            saved: dict[str, Any]) -> None:
    schemes = ("contiguous-max", "paged")
    for exp, expect_paper in ((Experiment(num_requests=24), True),
                              (Experiment(workload="alpaca", n=2, num_requests=24), False)):
        saved.clear()
        cmp = compare(exp, schemes, jobs=1, progress=False)
        write_compare(cmp, tmp_path)
        ax = saved["compare_shares.png"].axes[0]
        paper = [p for p in ax.patches if (p.get_gid() or "").startswith("paper:")]
        assert bool(paper) == expect_paper
        footer = " ".join(_texts(saved["compare_shares.png"])).replace("\n", " ")
        assert exp.label() in footer
        if not expect_paper:
            assert "not the paper's setting" in footer
        timeline = saved["compare_timeline_paged.png"]
        assert {a.get_gid() for a in timeline.axes} == {"panel:pool", "panel:running",
                                                        "panel:waiting"}
