"""Step through a run: keep allocator snapshots, then draw any step, a strip, or a slider."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..memory.accounting import SlotAccount, account
from ._mpl import NOTEBOOK_WIDTH_IN, legend_patch
from .arena_map import arena_key, arena_map
from .block_map import block_map, block_map_key, grid_geometry
from .layout import as_snapshot
from .palette import seq_colors

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Frame:
    """One captured step: the allocator's state and where its slots went."""

    snapshot: dict  # a private deep copy: later changes to the allocator do not reach it
    label: str
    next_need_slots: int | None
    account: SlotAccount


class Recorder:
    """Snapshots of one allocator, step by step, for pictures after the run.

    >>> rec = Recorder()
    >>> rec.capture(allocator, label="after prefill")    # doctest: +SKIP
    >>> rec.strip()                                       # doctest: +SKIP
    """

    def __init__(self) -> None:
        self.frames: list[Frame] = []

    def __len__(self) -> int:
        return len(self.frames)

    def __getitem__(self, i: int) -> Frame:
        return self.frames[i]

    def capture(self, allocator: Any, label: str | None = None,
                next_need_slots: int | None = None) -> int:
        """Record ``allocator``'s state now; returns the frame's index.

        ``next_need_slots`` (slots the next waiting request needs) makes contiguous
        holes too small for it count, and show, as external fragmentation.
        """
        frame = Frame(as_snapshot(allocator), label if label is not None else f"step {len(self)}",
                      next_need_slots, account(allocator, next_need_slots))
        self.frames.append(frame)
        return len(self.frames) - 1

    def _title(self, i: int) -> str:
        f = self.frames[i]
        a = f.account
        return (f"[{i}] {f.label}: token {a.token:,} · reserved {a.reserved:,} · "
                f"internal {a.internal_frag:,} · external {a.external_frag:,} · "
                f"free {a.free:,} slots")

    def show(self, i: int, ax: Axes | None = None, **kw: Any) -> Axes:
        """Draw frame ``i``: a block map (paged) or an arena map (contiguous).

        Extra keywords go to :func:`block_map` / :func:`arena_map`. Returns the axes.
        """
        f = self.frames[i]
        if f.snapshot["view"] == "blocks":
            kw.setdefault("colors", self.colors())
            return block_map(f.snapshot, ax=ax, title=self._title(i), **kw)
        return arena_map(f.snapshot, ax=ax, next_need_slots=f.next_need_slots,
                         title=self._title(i), **kw)

    def colors(self) -> dict:
        """One colour per sequence seen in any frame, so a sequence keeps its colour
        from step to step (see :func:`~pagedsim.plots.palette.seq_colors`)."""
        return seq_colors(s for f in self.frames for s in f.snapshot["seqs"])

    def pick(self, steps: Sequence[int] | None = None, max_panels: int = 4) -> list[int]:
        """``steps``, or ``max_panels`` frame indices spread evenly from first to last."""
        if steps is not None:
            return [range(len(self))[s] for s in steps]  # validates, allows negatives
        n = len(self)
        if n <= max_panels:
            return list(range(n))
        return sorted({round(k * (n - 1) / (max_panels - 1)) for k in range(max_panels)})

    def strip(self, steps: Sequence[int] | None = None, max_panels: int = 4) -> Figure:
        """A static figure of a few frames, one above the other (so an executed notebook,
        or a printed page, still shows the run). Returns the figure."""
        if not self.frames:
            raise ValueError("nothing captured yet: call capture() first")
        import matplotlib.pyplot as plt

        idx = self.pick(steps, max_panels)
        paged = self.frames[idx[0]].snapshot["view"] == "blocks"
        # Panels carry no legends of their own (their titles give the counts); one key
        # for the whole strip sits at the bottom. Paged maps drop their block tables:
        # the strip is about the pool filling up.
        first = self.frames[idx[0]].snapshot
        if paged:  # the grid's own height at full width (equal aspect), plus the title
            g = grid_geometry(first["num_blocks"], first["block_size"])
            per = 0.5 + min(3.5, (NOTEBOOK_WIDTH_IN - 0.4) * g.height / g.width)
        else:
            per = 1.1 + 0.42 * _arena_rows(first)
        key_h = 0.6
        fig, axes = plt.subplots(len(idx), 1, squeeze=False,
                                 figsize=(NOTEBOOK_WIDTH_IN, per * len(idx) + key_h))
        for ax, i in zip(axes[:, 0], idx, strict=True):
            if paged:
                self.show(i, ax=ax, show_tables=False, legend=False)
            else:
                self.show(i, ax=ax, legend=False)
            ax.title.set_fontsize(9)
        if paged:
            colors = self.colors()
            seen = dict.fromkeys(s for i in idx for s in self.frames[i].snapshot["seqs"])
            handles = block_map_key() + [legend_patch(f"seq {s}", colors[s], edgecolor="none")
                                         for s in list(seen)[:12]]
        else:
            handles = arena_key()
        fig.legend(handles=handles, loc="lower left", ncol=4, fontsize=8, frameon=False,
                   handlelength=1.4, columnspacing=1.2)
        fig.tight_layout(rect=(0, key_h / fig.get_figheight(), 1, 1))
        return fig

    def widget(self, max_panels: int = 4) -> Any:
        """An ipywidgets slider over the frames when a live Jupyter kernel and ipywidgets
        are available; else prints one line saying why and returns :meth:`strip`."""
        reason = _no_widget_reason()
        if reason:
            print(f"Recorder.widget: {reason}; showing a static strip instead.")
            return self.strip(max_panels=max_panels)
        import ipywidgets
        import matplotlib.pyplot as plt

        def draw(step: int) -> None:
            ax = self.show(step)
            plt.show()
            # The inline backend has rendered it: close it, or every slider move would
            # keep one more figure alive. (ipympl's live canvases must stay open.)
            backend = plt.get_backend().lower()
            if "ipympl" not in backend and "widget" not in backend:
                plt.close(ax.figure)

        slider = ipywidgets.IntSlider(value=0, min=0, max=max(0, len(self) - 1),
                                      description="step", continuous_update=False)
        return ipywidgets.interactive(draw, step=slider)


def _arena_rows(snap: dict) -> int:
    from .arena_map import auto_row_slots

    cap = snap["capacity_slots"]
    return math.ceil(cap / auto_row_slots(cap))


def _no_widget_reason() -> str | None:
    """None if a slider can work here, else a short reason."""
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return "ipywidgets is not installed (pip install 'pagedsim[notebooks]')"
    try:
        from IPython import get_ipython
    except ImportError:
        return "IPython is not installed"
    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        return "no live Jupyter kernel"
    return None
