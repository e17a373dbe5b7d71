"""One palette for every figure: the six slot categories, sequences, and axis labels.

Plain data only (hex strings), so importing it never imports matplotlib.

The category colours carry meaning: blues are memory that holds or will hold tokens
(useful), warm colours are waste (internal and external fragmentation), light grey
is free. The hues follow the Okabe-Ito colour-blind-safe set.
"""

from __future__ import annotations

import zlib
from collections.abc import Hashable, Iterable

from ..memory.accounting import CATEGORIES

#: Fill colour of each slot category (see :mod:`pagedsim.memory.accounting`).
CATEGORY_COLORS: dict[str, str] = {
    "token": "#0072B2",  # strong blue: K/V of tokens that exist now
    "reserved": "#56B4E9",  # sky blue: will hold tokens (a lighter cousin of token)
    "internal_frag": "#D55E00",  # vermillion: owned, never filled
    "cached": "#009E73",  # bluish green: nobody's, K/V kept for reuse (evictable)
    "external_frag": "#E69F00",  # orange: free, but in holes too small to use
    "free": "#E6E6E6",  # light grey
}

#: Hatches that separate the two kinds of waste even in greyscale print.
CATEGORY_HATCHES: dict[str, str] = {
    "token": "",
    "reserved": "",
    "internal_frag": "////",
    "cached": "..",
    "external_frag": "xx",
    "free": "",
}

#: Short names, for bar segments and legends that already say "slots" elsewhere.
CATEGORY_SHORT: dict[str, str] = {
    "token": "token",
    "reserved": "reserved",
    "internal_frag": "internal frag",
    "cached": "cached",
    "external_frag": "external frag",
    "free": "free",
}

#: Human labels with their unit.
CATEGORY_LABELS: dict[str, str] = {
    "token": "token slots",
    "reserved": "reserved slots",
    "internal_frag": "internal-fragmentation slots",
    "cached": "cached slots (evictable)",
    "external_frag": "external-fragmentation slots",
    "free": "free slots",
}

assert tuple(CATEGORY_COLORS) == CATEGORIES  # one palette, same order as the accounting

#: Qualitative cycle for sequences (tab10 without its grey, which free memory uses,
#: plus three darker hues so 12 sequences stay distinct).
SEQ_COLORS: tuple[str, ...] = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    "#e377c2", "#bcbd22", "#17becf", "#393b79", "#637939", "#ad494a",
)

#: Fill of a block shared by several sequences (copy-on-write, before the copy): one
#: dark grey of its own, outside the sequence cycle and the category colours, because a
#: shared block is one physical block whatever number of owners it has.
SHARED_COLOR = "#444444"

#: Axis labels (with units) for the engine's per-step, summary and sweep columns.
COLUMN_LABELS: dict[str, str] = {
    "step": "step (scheduler iterations)",
    "time_s": "time (s)",
    "running": "running requests",
    "waiting": "waiting requests",
    "capacity": "capacity (slots)",
    "physical_blocks": "physical blocks in use",
    "logical_blocks": "logical blocks (as if unshared)",
    "preemptions": "preemptions",
    "cow_copies": "copy-on-write copies (blocks)",
    "block_size": "block size (slots per block)",
    "max_model_len": "max_model_len (tokens)",
    "rate": "request rate (requests/s)",
    "request_rate": "request rate (requests/s)",
    "rate_per_s": "request rate (requests/s)",
    "paper_batch": "paper's mean batch size (requests)",
    "step_time_s": "step time (s)",
    "batched_requests": "batched requests",
    "n": "samples per request (n)",
    "beam_width": "beam width",
    "mean_batch_size": "mean batch size (requests)",
    "throughput_tokens_per_s": "throughput (tokens/s)",
    "sharing_saving": "memory saved by sharing (% of blocks)",
    "paper_saving": "paper's memory saved by sharing (% of blocks)",
    "saturated_time_fraction": "saturated part of the run (% of simulated time)",
    "utilization": "utilization (% of slots holding tokens)",
    "p50_normalized_latency_s": "median normalized latency (s per output token)",
    "p90_normalized_latency_s": "90th-percentile normalized latency (s per output token)",
    "requests_per_s": "finished requests per second (requests/s)",
    "swaps": "swap-outs",
    "preempted_requests": "requests preempted at least once",
    "sat_mean_batch_size": "mean batch size, saturated steps (requests)",
    "makespan_s": "makespan (s)",
    "capacity_slots": "KV pool (slots)",
    "prefix_hit_rate": "prefix-cache hit rate (% of prompt tokens)",
    "host_cache_gb": "host tier (GiB)",
    "mean_ttft_s": "mean time to first token (s)",
    **{c: f"{CATEGORY_SHORT[c]} share of KV pool" for c in CATEGORIES},
}


#: Columns holding fractions (0..1) that figures draw in percent (their labels say %).
PERCENT_COLUMNS = frozenset({"sharing_saving", "paper_saving", "saturated_time_fraction",
                             "utilization", "prefix_hit_rate"})

#: Prefixes of the summary's share columns: ``all_`` over the whole run, ``sat_`` over the
#: saturated steps only (see :mod:`pagedsim.metrics.summary`).
SHARE_PREFIXES = ("all_", "sat_")


def category_of(column: str) -> str | None:
    """The slot category a column holds (``"token"``, ``"sat_token"`` -> ``"token"``), or None."""
    for prefix in ("", *SHARE_PREFIXES):
        if column.startswith(prefix) and column[len(prefix):] in CATEGORIES:
            return column[len(prefix):]
    return None


def column_label(name: str) -> str:
    """Axis label with unit for a frame column (the column's own name if unknown)."""
    if name in COLUMN_LABELS:
        return COLUMN_LABELS[name]
    cat = category_of(name)
    if cat is not None:
        view = "saturated steps" if name.startswith("sat_") else "whole run"
        return f"{CATEGORY_SHORT[cat]} share of KV pool ({view})"
    return name


def seq_color(seq_id: Hashable) -> str:
    """A sequence's colour, stable across steps and pictures.

    Integer ids index the cycle directly (so seqs 0..11 never collide); other ids use a
    CRC of their repr, which, unlike ``hash``, is the same in every Python process.
    """
    if isinstance(seq_id, int) and not isinstance(seq_id, bool):
        i = seq_id
    else:
        i = zlib.crc32(repr(seq_id).encode())
    return SEQ_COLORS[i % len(SEQ_COLORS)]


def seq_colors(seq_ids: Iterable[Hashable]) -> dict[Hashable, str]:
    """Colours for the sequences of one picture (or one recorded run), in first-seen order.

    All-integer ids keep :func:`seq_color` (seq 3 has the same colour in every picture);
    other ids take the cycle in order, so up to 12 of them never share a colour.
    """
    ids = list(dict.fromkeys(seq_ids))
    if all(isinstance(s, int) and not isinstance(s, bool) for s in ids):
        return {s: seq_color(s) for s in ids}
    return {s: SEQ_COLORS[i % len(SEQ_COLORS)] for i, s in enumerate(ids)}


def mix(color: str, with_color: str = "#ffffff", amount: float = 0.6) -> str:
    """``color`` moved ``amount`` (0..1) of the way towards ``with_color`` (hex in, hex out)."""
    a = [int(color[i : i + 2], 16) for i in (1, 3, 5)]
    b = [int(with_color[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * amount):02x}" for x, y in zip(a, b, strict=True))


def text_color_on(color: str) -> str:
    """Black or white, whichever reads better on a ``color`` background (relative luminance)."""
    r, g, b = (int(color[i : i + 2], 16) / 255 for i in (1, 3, 5))
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"
