"""Pictures (pagedsim.plots): they draw without error, and what they draw is the account.

Each picture tags its rectangles with a gid ("slots:token", "share:<scheme>:<category>",
...), so these tests count what was drawn and compare it with ``pagedsim.account``,
instead of comparing pixels. Set ``PAGEDSIM_PLOT_DIR`` to keep the figures as PNGs.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from pagedsim import CATEGORIES, ContiguousAllocator, PagedAllocator, account  # noqa: E402
from pagedsim.memory import PrefixCachingAllocator  # noqa: E402
from pagedsim.memory.block_manager import BlockManager  # noqa: E402
from pagedsim.plots import (  # noqa: E402
    CATEGORY_COLORS,
    Recorder,
    arena_map,
    block_map,
    category_counts,
    memory_timeline,
    seq_color,
    seq_colors,
    share_bars,
    sweep_curves,
)
from pagedsim.workloads.workload import Request  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _save(fig, name: str) -> None:
    out = os.environ.get("PAGEDSIM_PLOT_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        fig.savefig(Path(out) / f"{name}.png", dpi=90, bbox_inches="tight")


# ------------------------------------------------------------------ allocators
def paged_forked() -> BlockManager:
    """Parallel sampling, n = 3: a 10-token prompt (blocks of 4) forked twice, one child
    then writes into the shared last block (copy-on-write) and one more token."""
    a = PagedAllocator(num_blocks=16, block_size=4)
    a.allocate("A", 6, final_len=11)
    a.allocate("B", 3, final_len=3)
    a.allocate(0, 10, final_len=20)
    a.fork(0, 1)
    a.fork(0, 2)
    _, copy = a.append_slot(1)
    assert copy is not None  # the CoW really happened
    a.append_slot(1)
    return a


def paged_plain(num_blocks: int = 64, block_size: int = 16) -> BlockManager:
    a = PagedAllocator(num_blocks, block_size)
    for i in range(5):
        a.allocate(i, 20 + 37 * i, final_len=40 + 50 * i)
    return a


def contiguous(reservation: str = "max", placement: str = "first-fit") -> ContiguousAllocator:
    """A few regions, two freed, so holes of different sizes sit between live regions."""
    a = ContiguousAllocator(2048, reservation, placement, max_model_len=256)
    for i, (n, f) in enumerate([(20, 60), (30, 100), (10, 30), (50, 200), (5, 9), (40, 90)]):
        a.allocate(i, n, final_len=f)
    a.free(0)
    a.free(2)
    for _ in range(7):
        a.append_slot(3)
    return a


def _count(ax, gid: str) -> int:
    return sum(len(c.get_paths()) for c in ax.collections if c.get_gid() == gid)


def _widths(ax, gid: str) -> float:
    total = 0.0
    for c in ax.collections:
        if c.get_gid() == gid:
            for p in c.get_paths():
                xs = p.vertices[:, 0]
                total += xs.max() - xs.min()
    return total


# ------------------------------------------------------------------ the rules
def _random_run(alloc, rng: random.Random, steps: int = 60):
    """Random allocate / fork / append / free; yields after every step."""
    live: list[int] = []
    for step in range(steps):
        op = rng.random()
        try:
            if op < 0.3 or not live:
                n = rng.randint(0, 40)
                alloc.allocate(step, n, final_len=n + rng.randint(0, 60))
            elif op < 0.4:
                alloc.fork(rng.choice(live), step)
            elif op < 0.85:
                alloc.append_slot(rng.choice(live))
            else:
                alloc.free(rng.choice(live))
        except Exception:  # out of memory: skip the op
            pass
        live = list(alloc.seq_ids())
        yield


class _WithContent:
    """A prefix cache whose random allocations carry content: prompts of 0..2 pieces
    drawn from 3 (so they share prefixes) then their own tokens."""

    def __init__(self, alloc: BlockManager) -> None:
        self.alloc = alloc

    def allocate(self, seq_id: int, n: int, final_len: int) -> None:
        bs = self.alloc.block_size
        pieces = tuple(range(seq_id % 3 + 1)) + (1000 + seq_id,) * (n // bs + 1)
        r = Request(seq_id, 0.0, max(n, 1), final_len - n + 1, prompt_pieces=pieces,
                    prompt_piece_tokens=bs)
        self.alloc.allocate(seq_id, n, final_len, block_hashes=r)

    def __getattr__(self, name: str):
        return getattr(self.alloc, name)


def test_category_counts_equal_account_through_random_runs() -> None:
    """The pictures' colouring rules (layout.py) give exactly the account, step by step,
    through allocation, fork, copy-on-write, append and free."""
    rng = random.Random(7)
    seen = dict.fromkeys(CATEGORIES, 0) | {"shared": 0}
    for _ in range(20):
        for alloc in (PagedAllocator(24, rng.choice([1, 2, 4, 16])),
                      _WithContent(PrefixCachingAllocator(24, rng.choice([1, 2, 4, 16]))),
                      ContiguousAllocator(1024, rng.choice(["max", "pow2", "oracle"]),
                                          rng.choice(["first-fit", "best-fit", "buddy"]),
                                          max_model_len=256)):
            for _ in _random_run(alloc, rng):
                need = rng.choice([None, 16, 100])
                acc = account(getattr(alloc, "alloc", alloc), next_need_slots=need)
                got = category_counts(alloc.snapshot(), next_need_slots=need)
                assert got == {k: getattr(acc, k) for k in CATEGORIES}
                for k in CATEGORIES:
                    seen[k] += got[k] > 0
                seen["shared"] += acc.physical_blocks < acc.logical_blocks
    assert all(seen.values()), seen  # every category, and sharing, really occurred


# ------------------------------------------------------------------ block map
def test_block_map_draws_one_cell_per_slot_coloured_as_the_account() -> None:
    a = paged_forked()
    acc = account(a)
    ax = block_map(a)
    _save(ax.figure, "block_map_forked")
    assert acc.token and acc.reserved and acc.internal_frag  # all three are really drawn
    for cat in ("token", "reserved", "internal_frag"):
        assert _count(ax, f"slots:{cat}") == getattr(acc, cat), cat
    assert _count(ax, "slots:free") * a.block_size == acc.free  # free blocks: one plain cell
    assert _count(ax, "blocks:outline") == a.num_used_blocks


def test_block_map_marks_shared_blocks_with_their_ref_count() -> None:
    a = paged_forked()
    shared = {b: r for b, r in enumerate(a.snapshot()["ref_counts"]) if r > 1}
    assert sorted(shared.values()) == [2, 3, 3]  # two prompt blocks x3, the old last block x2
    ax = block_map(a)
    labels = sorted(t.get_text() for t in ax.texts if t.get_gid() == "refcount")
    assert labels == sorted(f"×{r}" for r in shared.values())
    assert _count(ax, "blocks:shared") == len(shared)


def test_block_map_tables_list_each_sequence_with_shared_blocks_starred() -> None:
    a = paged_forked()
    ax = block_map(a, show_tables=True)
    lines = [t.get_text() for t in ax.texts if t.get_gid() == "table"]
    for sid in a.seq_ids():
        entries = [f"{b}*" if a.ref_count(b) > 1 else str(b) for b in a.block_table(sid)]
        assert any(line.startswith(f"seq {sid}: [{', '.join(entries)}]") for line in lines)
    assert any(line.startswith(f"free list: {a.num_free_blocks} blocks") for line in lines)
    ax2 = block_map(a, show_tables=False)
    assert not [t for t in ax2.texts if t.get_gid() == "table"]


def test_block_map_16_slot_blocks_and_big_pools() -> None:
    a = paged_plain()
    a.fork(4, 9)
    ax = block_map(a)
    _save(ax.figure, "block_map_16")
    assert _count(ax, "slots:token") == account(a).token
    big = paged_plain(num_blocks=1500)  # too many slots for sub-cells: one bar per block
    acc = account(big)
    ax = block_map(big)
    _save(ax.figure, "block_map_big")
    assert _count(ax, "slots:token") == 0
    cell_w = 1.6  # a bar's width in data units, block_map's coarse geometry
    assert _widths(ax, "fill:token") / cell_w * big.block_size == pytest.approx(acc.token)
    assert _widths(ax, "fill:reserved") / cell_w * big.block_size == pytest.approx(acc.reserved)


def test_block_map_takes_a_snapshot_and_an_axes_and_refuses_the_other_kind() -> None:
    a = paged_forked()
    fig, ax = plt.subplots()
    assert block_map(a.snapshot(), ax=ax, title="mine") is ax
    assert ax.get_title(loc="left") == "mine"
    with pytest.raises(TypeError, match="arena_map"):
        block_map(contiguous())
    with pytest.raises(TypeError, match="block_map"):
        arena_map(a)
    with pytest.raises(TypeError, match="snapshot"):
        block_map({"kind": "something"})


# ------------------------------------------------------------------ arena map
@pytest.mark.parametrize(("reservation", "placement"),
                         [("max", "first-fit"), ("pow2", "best-fit"), ("oracle", "buddy")])
def test_arena_map_widths_are_the_account(reservation: str, placement: str) -> None:
    a = contiguous(reservation, placement)
    need = a.slots_needed(40, 100)
    acc = account(a, next_need_slots=need)
    ax = arena_map(a, next_need_slots=need)
    _save(ax.figure, f"arena_{reservation}_{placement}")
    for cat in CATEGORIES:
        assert _widths(ax, f"slots:{cat}") == pytest.approx(getattr(acc, cat)), cat
    assert acc.token and acc.reserved and acc.internal_frag
    seq_labels = {t.get_text() for t in ax.texts if t.get_gid() == "seq_label"}
    assert seq_labels and seq_labels <= {f"seq {s}" for s in a.seq_ids()}


def test_arena_map_shows_external_fragmentation_only_for_a_waiting_request() -> None:
    a = contiguous("oracle", "first-fit")
    need = a.slots_needed(100, 250)
    acc = account(a, next_need_slots=need)
    assert acc.external_frag > 0
    ax = arena_map(a, next_need_slots=need)
    assert _widths(ax, "slots:external_frag") == acc.external_frag
    ax = arena_map(a)  # nobody waits: every hole is free
    assert _widths(ax, "slots:external_frag") == 0
    assert _widths(ax, "slots:free") == account(a).free


def test_arena_map_wraps_a_long_arena_into_rows() -> None:
    a = ContiguousAllocator(8192, "max", max_model_len=2048)
    for i in range(3):
        a.allocate(i, 100 * (i + 1), final_len=300 * (i + 1))
    ax = arena_map(a)
    _save(ax.figure, "arena_wrapped")
    assert len(ax.get_yticks()) == 8  # rows of 1024 slots
    assert sum(_widths(ax, f"slots:{c}") for c in CATEGORIES) == 8192
    assert _count(ax, "regions") == 6  # each 2048-slot region spans two rows
    labels = sorted(t.get_text() for t in ax.texts if t.get_gid() == "seq_label")
    assert labels == ["seq 0", "seq 0 (cont.)", "seq 1", "seq 1 (cont.)", "seq 2",
                      "seq 2 (cont.)"]


# ------------------------------------------------------------------ share bars
def _summary() -> pd.DataFrame:
    """Shares measured from our own small allocators (one row per scheme)."""
    rows = []
    for name, alloc in [("max", contiguous("max")), ("pow2", contiguous("pow2")),
                        ("oracle", contiguous("oracle")), ("paged", paged_plain())]:
        rows.append({"scheme": name, **account(alloc).shares()})
    return pd.DataFrame(rows)


def test_share_bars_stack_to_100_percent_per_scheme() -> None:
    df = _summary()
    paper = {"max": {"token": 0.204, "reserved": 0.133, "internal_frag": 0.573,
                     "external_frag": 0.089},
             "paged": {"token": 0.963}}
    ax = share_bars(df, paper=paper)
    _save(ax.figure, "share_bars")
    for s in df["scheme"]:
        heights = [p.get_height() for p in ax.patches
                   if (p.get_gid() or "").startswith(f"share:{s}:")]
        assert sum(heights) == pytest.approx(100)
    paper_parts = [p.get_height() for p in ax.patches if (p.get_gid() or "").startswith("paper:")]
    assert sum(paper_parts) == pytest.approx(100 * (0.204 + 0.133 + 0.573 + 0.089 + 0.963))
    texts = {t.get_text() for t in ax.texts}
    token_max = df.set_index("scheme").loc["max", "token"]
    assert f"{100 * token_max:.1f}%" in texts
    assert [t.get_text() for t in ax.get_xticklabels()] == list(df["scheme"])


def test_share_bars_reads_the_engine_summary_views_and_skips_what_is_not_given() -> None:
    """The engine's summary names shares all_<category> / sat_<category>; a scheme never
    saturated has NaN sat_ shares; a reference gives NaN for parts it does not report."""
    df = _summary()
    eng = df[["scheme"]].copy()
    for c in CATEGORIES:
        eng[f"all_{c}"] = df[c]
        eng[f"sat_{c}"] = df[c].where(df["scheme"] != "oracle")  # oracle: no saturated steps
    with pytest.raises(ValueError, match="prefix='sat_'"):
        share_bars(eng)
    nan = float("nan")
    ax = share_bars(eng, prefix="sat_", paper={"paged": {"token": 0.963, "reserved": nan}})
    _save(ax.figure, "share_bars_sat")
    assert "no data" in {t.get_text() for t in ax.texts}
    assert not [p for p in ax.patches if (p.get_gid() or "").startswith("share:oracle:")]
    paper_parts = [p.get_height() for p in ax.patches if (p.get_gid() or "").startswith("paper:")]
    assert paper_parts == [pytest.approx(96.3)]
    ax = sweep_curves(eng, "scheme", ["all_internal_frag", "sat_internal_frag"])
    solid, dashed = ax.get_lines()
    assert solid.get_color() == dashed.get_color() == CATEGORY_COLORS["internal_frag"]
    assert (solid.get_linestyle(), dashed.get_linestyle()) == ("-", "--")
    assert ax.get_ylabel() == "share of KV pool (% of slots)"


def test_share_bars_refuses_shares_that_do_not_add_up() -> None:
    df = _summary()
    bad = df.copy()
    bad.loc[0, "free"] += 0.1
    with pytest.raises(ValueError, match="sum to 1"):
        share_bars(bad)
    with pytest.raises(ValueError, match="not in the summary"):
        share_bars(df, paper={"Orca-Max": {"token": 0.2}})
    with pytest.raises(ValueError, match="columns"):
        share_bars(df.drop(columns="free"))


# ------------------------------------------------------------------ timeline and sweeps
def _steps() -> pd.DataFrame:
    """A real per-step frame: three requests decoding in a paged pool, accounted each step."""
    a = PagedAllocator(32, 4)
    rows = []
    finals = {0: 30, 1: 50, 2: 24}
    for step in range(45):
        if step in (0, 5, 10):
            sid = step // 5
            a.allocate(sid, 8, final_len=finals[sid])
        for sid in list(a.seq_ids()):
            if a.seq_len(sid) >= finals[sid]:
                a.free(sid)
            elif a.can_append(sid):
                a.append_slot(sid)
        acc = account(a)
        rows.append({"step": step, "time_s": 0.02 * step, "running": a.num_seqs,
                     "waiting": int(step < 10) * (2 - step // 5), **acc.to_dict()})
    return pd.DataFrame(rows)


def test_memory_timeline_stacks_the_five_categories_to_capacity() -> None:
    steps = _steps()
    ax = memory_timeline(steps)
    _save(ax.figure, "timeline")
    polys = {c.get_gid(): c for c in ax.collections if (c.get_gid() or "").startswith("area:")}
    assert set(polys) == {f"area:{c}" for c in CATEGORIES}
    top = max(p.vertices[:, 1].max() for p in polys["area:free"].get_paths())
    assert top == pytest.approx(steps["capacity"].max())
    # The queue: one panel each for running and waiting requests, under the pool.
    assert [a.get_gid() for a in ax.figure.axes] == ["panel:pool", "panel:running",
                                                     "panel:waiting"]
    ax = memory_timeline(steps, x="step", fractions=True, queue=False)
    top = max(p.vertices[:, 1].max() for c in ax.collections
              if c.get_gid() == "area:free" for p in c.get_paths())
    assert top == pytest.approx(100)
    assert ax.get_xlabel() == "step (scheduler iterations)"


def test_sweep_curves_one_line_per_group_and_column_in_percent() -> None:
    rows = []
    for bs in (1, 2, 4, 8, 16, 32):
        a = PagedAllocator(4096 // bs, bs)
        c = ContiguousAllocator(4096, "pow2", max_model_len=512, align_slots=bs)
        for i in range(6):  # requests near their end: little left to reserve
            a.allocate(i, 17 + 23 * i, final_len=19 + 23 * i)
            c.allocate(i, 17 + 23 * i, final_len=19 + 23 * i)
        rows.append({"block_size": bs, "scheme": "paged", **account(a).shares()})
        rows.append({"block_size": bs, "scheme": "pow2", **account(c).shares()})
    df = pd.DataFrame(rows)
    ax = sweep_curves(df, "block_size", ["internal_frag", "reserved"], logx=True, by="scheme")
    _save(ax.figure, "sweep")
    lines = [ln for ln in ax.get_lines() if (ln.get_gid() or "").startswith("curve:")]
    assert len(lines) == 4
    paged = next(ln for ln in lines if ln.get_gid() == "curve:paged:internal_frag")
    expected = df[df.scheme == "paged"].sort_values("block_size")["internal_frag"] * 100
    assert list(paged.get_ydata()) == pytest.approx(list(expected))
    assert ax.get_xlabel() == "block size (slots per block)"
    assert ax.get_ylabel() == "share of KV pool (% of slots)"
    ax = sweep_curves(df[df.scheme == "paged"], "block_size", "internal_frag")
    (line,) = ax.get_lines()
    assert line.get_color() == CATEGORY_COLORS["internal_frag"]


# ------------------------------------------------------------------ recorder
def test_recorder_keeps_independent_copies_and_draws_each_kind() -> None:
    a = PagedAllocator(16, 4)
    rec = Recorder()
    a.allocate(0, 5, final_len=9)
    rec.capture(a, label="prefill")
    before = json.dumps(rec[0].snapshot, sort_keys=True, default=str)
    a.fork(0, 1)
    a.append_slot(1)
    rec.capture(a, label="fork + CoW")
    assert json.dumps(rec[0].snapshot, sort_keys=True, default=str) == before
    assert rec[0].snapshot["seqs"][0]["block_table"] == [0, 1]
    # 5 tokens in two blocks of 4; the request will reach 9 tokens, 8 of them in these blocks
    assert (rec[0].account.token, rec[0].account.reserved, rec[0].account.internal_frag) == (
        5, 3, 0)
    assert rec[1].account == account(a)
    a.free(0)
    rec.capture(a)
    assert rec[2].label == "step 2"
    assert rec.show(1).get_title(loc="left").startswith("[1] fork + CoW")
    fig = rec.strip()
    _save(fig, "recorder_strip_paged")
    assert len(fig.axes) == 3

    c = ContiguousAllocator(1024, "pow2", max_model_len=256)
    crec = Recorder()
    for i in range(6):
        c.allocate(i, 10 + 7 * i, final_len=30 + 20 * i)
        crec.capture(c, label=f"admit {i}", next_need_slots=c.slots_needed(10, 60))
    assert crec.show(5).get_title(loc="left").startswith("[5] admit 5")
    fig = crec.strip(max_panels=3)
    _save(fig, "recorder_strip_contiguous")
    assert len(fig.axes) == 3
    assert crec.pick(max_panels=3) == [0, 2, 5]  # first, middle (rounded), last
    assert crec.pick(steps=[-1]) == [5]


def test_recorder_widget_falls_back_to_a_strip_without_a_live_kernel(capsys) -> None:
    a = PagedAllocator(8, 4)
    rec = Recorder()
    a.allocate(0, 3, final_len=6)
    rec.capture(a)
    out = rec.widget()
    assert out.__class__.__name__ == "Figure"
    line = capsys.readouterr().out.strip()
    assert line.startswith("Recorder.widget:") and "static strip" in line
    with pytest.raises(ValueError, match="capture"):
        Recorder().strip()


def test_recorder_widget_is_a_step_slider_with_a_live_kernel(monkeypatch) -> None:
    pytest.importorskip("ipywidgets")
    import pagedsim.plots.recorder as recorder_module

    monkeypatch.setattr(recorder_module, "_no_widget_reason", lambda: None)
    a = PagedAllocator(8, 4)
    rec = Recorder()
    a.allocate(0, 3, final_len=6)
    rec.capture(a)
    a.append_slot(0)
    rec.capture(a)
    w = rec.widget()
    slider = w.children[0]
    assert (slider.min, slider.max, slider.description) == (0, 1, "step")
    slider.value = 1  # redraws step 1 without error, and leaves no figure behind
    assert plt.get_fignums() == []


# ------------------------------------------------------------------ palette and imports
def test_one_palette_and_stable_sequence_colours() -> None:
    assert tuple(CATEGORY_COLORS) == CATEGORIES
    assert len(set(CATEGORY_COLORS.values())) == len(CATEGORIES)
    assert seq_color(3) == seq_color(3) and seq_color(3) != seq_color(4)
    assert seq_color("beam-1") == seq_color("beam-1")
    assert matplotlib.colors.is_color_like(seq_color(("x", 1)))
    assert seq_colors([5, 2]) == {5: seq_color(5), 2: seq_color(2)}  # ints: by value
    mixed = seq_colors(["A", "B", 0, 1, 2])  # anything else: distinct, in order
    assert len(set(mixed.values())) == 5


def test_a_sequence_keeps_its_colour_in_every_frame_of_a_recording() -> None:
    a = PagedAllocator(16, 4)
    rec = Recorder()
    a.allocate("prompt", 4, final_len=8)
    rec.capture(a)
    a.allocate("other", 4, final_len=4)
    rec.capture(a)
    colors = rec.colors()
    for i in range(2):
        ax = rec.show(i, show_tables=False)
        token_faces = [tuple(f) for c in ax.collections if c.get_gid() == "slots:token"
                       for f in c.get_facecolors()]
        assert matplotlib.colors.to_rgba(colors["prompt"]) in token_faces


def test_importing_the_plots_package_leaves_matplotlib_out() -> None:
    code = ("import sys, pagedsim.plots; "
            "print('matplotlib' in sys.modules, 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False"]
