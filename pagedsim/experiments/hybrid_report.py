"""A hybrid model's KV-cache groups over a run: what ``pagedsim compare`` adds when a
scheme of the hybrid manager (``hybrid``, ``hybrid-prefix-cache``) runs a model with
sliding-window layers.

:func:`group_timeline` replays the experiment once more under that scheme (seeded, so
the same run as the comparison's) and records, at every step, the blocks each KV-cache
group holds, the table entries live sequences hold as null (blocks a sliding group gave
up behind its window: what it would hold more if it kept every block, as the all-full
variant does) and the blocks given back so far. :func:`write_hybrid_groups` writes them
as ``compare_hybrid_groups.csv`` (every step's row per group, thinned) and one
``compare_hybrid_groups_<scheme>.png`` per scheme (:func:`pagedsim.plots.hybrid.group_blocks`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..engine.simulator import simulate
from ..memory.hybrid_groups import describe_groups, hybrid_layout
from ..memory.schemes import get_scheme, make_allocator
from ..metrics.step_keep import KeepSteps
from ..models.specs import get_model
from .spec import Experiment

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: Columns of :func:`group_timeline`'s frame (one row per step and group).
GROUP_COLUMNS = ("scheme", "step", "group", "kind", "window_tokens", "blocks",
                 "null_entries", "freed_blocks_total", "dropped_entries_total")


def has_window_groups(exp: Experiment, scheme: str) -> bool:
    """Whether ``scheme`` is the hybrid manager and ``exp``'s model gives it a sliding-window
    group (so blocks fall behind a window)."""
    if get_scheme(scheme).family != "hybrid" or scheme == "all-full":
        return False
    layout = hybrid_layout(get_model(exp.model), exp.capacity_slots()
                           * get_model(exp.model).bytes_per_token, exp.block_size)
    return any(g.window is not None for g in layout.groups)


def group_timeline(exp: Experiment, scheme: str) -> pd.DataFrame:
    """Per step and group of ``scheme`` on ``exp``: ``blocks`` held, ``null_entries`` (live
    sequences' entries given up behind the window), and since the start the blocks given
    back to the pool (``freed_blocks_total``) and the entries given up
    (``dropped_entries_total``; a block two sequences share is one block, two entries)."""
    import pandas as pd

    sched = exp.scheduler_config()
    alloc = make_allocator(scheme, exp.capacity_slots(), exp.block_size, exp.max_model_len,
                           model=exp.model, max_num_seqs=sched.max_num_seqs)
    rows: list[tuple] = []
    specs = alloc.groups

    def on_step(_sched: object, plan: object) -> None:
        nulls = alloc.window_null_entries()
        for g, spec in enumerate(specs):
            rows.append((scheme, plan.step, g, spec.kind, spec.window_tokens,  # type: ignore[attr-defined]
                         alloc.group_blocks[g], nulls[g], alloc.window_freed_blocks[g],
                         alloc.window_dropped_entries[g]))

    simulate(exp.iter_requests(), alloc, exp.cost_model(), sched, scheme=scheme,
             progress=False, on_step=on_step, keep_steps=KeepSteps.none(),
             num_requests=None if exp.is_trace else exp.num_requests,
             max_concurrency=exp.max_concurrency)
    frame = pd.DataFrame.from_records(rows, columns=list(GROUP_COLUMNS))
    # The pool in words, for a figure's title: the groups and the blocks they share.
    frame.attrs["pool"] = (f"{describe_groups(alloc.groups)}; {alloc.num_blocks:,} blocks of "
                           f"{alloc.block_size}")
    return frame


def thin_groups(frame: pd.DataFrame, max_steps: int) -> pd.DataFrame:
    """Every k-th step of ``frame`` (all of its groups' rows), so that at most
    ``max_steps`` steps remain; the last step is kept. 0 keeps all."""
    steps = frame["step"].drop_duplicates()
    if max_steps <= 0 or len(steps) <= max_steps:
        return frame
    k = -(-len(steps) // max_steps)
    keep = set(steps.iloc[::k]) | {steps.iloc[-1]}
    return frame[frame["step"].isin(keep)]


def write_hybrid_groups(exp: Experiment, schemes: Sequence[str],
                        out: str | os.PathLike[str], max_steps: int = 1000,
                        prefix: str = "compare") -> tuple[list[Path], list[str]]:
    """For each of ``schemes`` with window groups (:func:`has_window_groups`): its
    :func:`group_timeline`, all in ``<prefix>_hybrid_groups.csv`` (at most ``max_steps``
    steps per scheme) and one ``<prefix>_hybrid_groups_<scheme>.png``. Returns the paths
    written and one line per scheme for the table (blocks given back behind the window)."""
    import pandas as pd

    from ..plots.hybrid import group_blocks
    from .writers import _pyplot, _savefig

    chosen = [s for s in schemes if has_window_groups(exp, s)]
    if not chosen:
        return [], []
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plt = _pyplot()
    frames, paths, lines = [], [], []
    for scheme in chosen:
        frame = group_timeline(exp, scheme)
        frames.append(thin_groups(frame, max_steps))
        last = frame[frame["step"] == frame["step"].max()]
        sliding = last[last["kind"] == "sliding"]
        peak = frame[frame["kind"] == "sliding"].groupby("step")["null_entries"].sum().max()
        freed, dropped = (int(sliding[c].sum()) for c in ("freed_blocks_total",
                                                           "dropped_entries_total"))
        lines.append(f"{scheme}: its sliding-window groups gave {freed:,} blocks back behind "
                     f"the window ({dropped:,} table entries; at most {int(peak):,} null "
                     "entries at once)")
        fig, ax = plt.subplots(figsize=(10, 4.2))
        group_blocks(frame, ax=ax, title=f"{scheme}: blocks per KV-cache group "
                                         f"({frame.attrs['pool']})\n{exp.label()}")
        path = out / f"{prefix}_hybrid_groups_{scheme}.png"
        _savefig(fig, path)
        paths.append(path)
    path = out / f"{prefix}_hybrid_groups.csv"
    pd.concat(frames, ignore_index=True).to_csv(path, index=False)
    return [path, *paths], lines
