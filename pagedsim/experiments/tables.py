"""The plain-text tables ``pagedsim compare`` and ``pagedsim sweep`` print (and
``figures/README.md`` holds): ours beside the vLLM paper's numbers, fractions as %.

The column layout itself is :func:`pagedsim.textfmt.format_table`.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from typing import TYPE_CHECKING

from ..memory.accounting import CATEGORIES
from ..models.budget import PAPER_OPT_13B
from ..paper import (
    DEFAULT_BLOCK_SIZE,
    FIGURE13_BATCH,
    FIGURE13_RATE,
    figure2_share,
    figure13_batch,
)
from ..textfmt import format_table
from ..units import GiB
from ..wording import count
from .fill_hint import fill_hint_lines
from .runner import Comparison, shares_frame
from .spec import WORKLOAD_NAMES, Experiment

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


def _pct(x: float) -> str:
    """A fraction as a percentage with one decimal (``0.936 -> '93.6'``); '-' for NaN."""
    return "-" if x is None or math.isnan(x) else f"{100 * x:.1f}"


def _fmt(x: float, spec: str) -> str:
    """``format(x, spec)``, or '-' for a missing number."""
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def figure2_mismatches(exp: Experiment) -> list[str]:
    """How ``exp`` differs from the setting of the vLLM paper's Figure 2 (and Figure
    13): OPT-13B on one A100-40GB with 12 GiB of KV cache (preset
    :data:`~pagedsim.models.budget.PAPER_OPT_13B`), ShareGPT-like requests of one sequence,
    blocks of 16, v0 scheduling. Empty when it is that setting (the paper's numbers may
    then stand beside ours)."""
    out = []
    if exp.preset != PAPER_OPT_13B.name:
        out.append(f"memory setting {exp.model} on {exp.num_gpus} x {exp.gpu}, "
                   f"{exp.capacity_slots():,} slots (not preset {PAPER_OPT_13B.name})")
    if exp.workload != "sharegpt":
        out.append(f"workload {os.path.basename(exp.workload)}")
    if exp.n > 1:
        out.append(f"n = {exp.n}")
    if exp.beam_width > 1:
        out.append(f"beam width {exp.beam_width}")
    if exp.block_size != DEFAULT_BLOCK_SIZE:
        out.append(f"block size {exp.block_size}")
    if exp.policy != "v0":
        out.append(f"{exp.policy} scheduling")
    if exp.order != "fcfs":
        out.append(f"{exp.order} order")
    return out


def figure13_workload(exp: Experiment) -> str | None:
    """The workload of the vLLM paper's Figure 13 panel whose setting ``exp`` is (the
    Figure 2 setting with ShareGPT- or Alpaca-like requests), or None. The paper
    measured it at one rate (:data:`~pagedsim.paper.FIGURE13_RATE`), which the caller
    states beside the numbers."""
    if exp.workload not in FIGURE13_BATCH:
        return None
    as_sharegpt = replace(exp, workload="sharegpt")
    return exp.workload if not figure2_mismatches(as_sharegpt) else None


_HEADER = {"token": "token%", "reserved": "reserved%", "internal_frag": "internal%",
           "cached": "cached%", "external_frag": "external%", "free": "free%"}


def compare_table(cmp: Comparison, workload_report: str | None = None) -> str:
    """The plain-text table ``pagedsim compare`` prints: ours, then the paper's where the
    setting is the paper's (:func:`figure2_mismatches`, :func:`figure13_workload`).

    For a trace, the line under the title is ``workload_report`` (one line: what loading
    the trace changed or left out), or, if not given, the experiment's
    :meth:`~pagedsim.experiments.Experiment.trace_report` (which reads the file again).
    """
    df = shares_frame(cmp.summary, cmp.part)
    exp = cmp.experiment
    if workload_report is None and exp.is_trace:
        workload_report = exp.trace_report()
    mismatches = figure2_mismatches(exp)
    fig2 = not mismatches
    workload = figure13_workload(exp)
    # The cached share only where a prefix cache ran (it is 0 for every other scheme).
    cats = [c for c in CATEGORIES if c != "cached" or (df["cached"].fillna(0) > 0).any()]
    headers = ["scheme", *(_HEADER[c] for c in cats), "batch", "tokens/s", "preempt"]
    if fig2 or workload:
        headers += ["| paper:"]
    if fig2:
        headers += ["token%", "reserved%", "internal%", "ext+other%"]
    if workload:
        headers += ["batch"]
    rows = []
    for rec in df.to_dict("records"):
        s = rec["scheme"]
        mark = "" if rec["part"] == cmp.part else " *"
        row = [s + mark, *(_pct(rec[c]) for c in cats),
               _fmt(rec["mean_batch_size"], ".2f"),
               _fmt(rec["throughput_tokens_per_s"], ",.0f"), rec["preemptions"]]
        if fig2 or workload:
            row.append("|")
        if fig2:
            row += [_pct(figure2_share(s, c))
                    for c in ("token", "reserved", "internal_frag", "external_frag")]
        if workload:
            row.append(_fmt(figure13_batch(s, workload), ".2f"))
        rows.append(row)
    sat = ", ".join(f"{r['scheme']} {100 * r['saturated_time_fraction']:.0f}%"
                    for r in df.to_dict("records"))
    part_text = ("the saturated part of the run (steps after which requests were waiting; "
                 f"share of simulated time: {sat})" if cmp.part == "saturated"
                 else "the whole run")
    lines = [
        f"KV-cache memory by scheme: {exp.label()}",
        *([f"workload: {workload_report}"] if workload_report else []),
        f"shares: time-weighted % of the pool over {part_text}",
        "batch: mean requests per step over steps that ran anything; tokens/s: generated "
        "tokens / makespan (simulated, roofline cost model)",
        *preemption_lines(cmp),
        "",
        format_table(headers, rows),
        "",
    ]
    if fig2:
        lines.append("paper: vLLM paper (Kwon et al., SOSP 2023) Fig. 2 shares (OPT-13B, "
                     "A100-40GB, ShareGPT, buddy-placed Orca baselines, matched by "
                     "reservation; '-' = not given)")
    if workload:
        rate = FIGURE13_RATE[workload]
        ours = exp.rate_per_s
        differs = ("" if ours is None or ours == rate else
                   f"; this run: {ours:g} req/s, which saturates every scheme of our "
                   "faster cost model as the paper's rate did its system: see "
                   "pagedsim.experiments")
        lines.append(f"{'       and' if fig2 else 'paper:'} vLLM paper Fig. 13 mean batch "
                     f"size ({workload} at {rate:g} req/s{differs})")
    if not fig2:
        what = ("Fig. 2 shares" + ("" if workload else " and Fig. 13 batch sizes"))
        lines.append(f"paper: the vLLM paper's {what} are not printed: this run is not "
                     f"their setting ({'; '.join(mismatches)})")
    if (df["part"] != cmp.part).any():
        lines.append("* never saturated (no request ever waited): shares over the whole run")
    lines.extend(fill_hint_lines(cmp))
    lines.extend(rejection_lines(cmp.summary))
    lines.extend(host_tier_lines(cmp.summary))
    return "\n".join(lines)


def host_tier_lines(summary: pd.DataFrame) -> list[str]:
    """One line per run with a host tier: the prompt tokens each tier served, the bytes
    its copies moved each way and the time they added (none without a host tier)."""
    if "prefix_hits_host" not in summary:
        return []
    lines = []
    for r in summary.to_dict("records"):
        if r.get("host_cache_blocks") != r.get("host_cache_blocks"):  # NaN: no host tier
            continue
        lines.append(
            f"host tier ({r['scheme']}, {int(r['host_cache_blocks']):,} blocks): served "
            f"{_pct(r['prefix_hit_rate'])}% of the prompt tokens looked up, "
            f"{_pct(r['prefix_hit_rate_gpu'])}% from the GPU and "
            f"{_pct(r['prefix_hit_rate_host'])}% from the host; loaded "
            f"{r['host_loaded_bytes'] / GiB:,.1f} GiB, offloaded "
            f"{r['host_offloaded_bytes'] / GiB:,.1f} GiB, the copies adding "
            f"{r['host_transfer_s']:,.2f} s to the steps")
    return lines


def preemption_lines(cmp: Comparison) -> list[str]:
    """What the ``preempt`` column counts, with the requests preempted at least once per
    scheme, and, for requests of several sequences, how they were preempted."""
    exp = cmp.experiment
    recs = cmp.summary.to_dict("records")
    lines = ["preempt: preemption events; one request can be preempted several times"]
    if recs and "preempted_requests" in recs[0]:
        lines[0] += (" (requests preempted at least once: "
                     + ", ".join(f"{r['scheme']} {r['preempted_requests']:,}" for r in recs)
                     + f", of {recs[0]['num_requests']:,})")
    if exp.multi_sequence:
        swaps = ", ".join(f"{r['scheme']} {r['swaps']:,}" for r in recs)
        if exp.preemption == "recompute":
            how = ("a preempted request of several sequences is swapped to the CPU, "
                   "not recomputed, as vLLM v0 does (it keeps its sharing), and restarts "
                   "only when the swap space is full")
        else:
            how = "a preempted request is swapped to the CPU"
        lines.append(f"        {how}; swap-outs: {swaps}")
    return lines


def rejection_lines(summary: pd.DataFrame) -> list[str]:
    """One line per scheme that rejected requests (they can never run), with the first
    reason; nothing when every request ran."""
    if "rejected" not in summary:
        return []
    return [f"{r['scheme']}: {r['rejected']:,} of {r['num_requests']:,} requests rejected, "
            f"e.g. {r['first_rejection']}"
            for r in summary.to_dict("records") if r["rejected"]]


#: Columns each sweep's table prints (after the swept ones).
_SWEEP_TABLE: dict[str, tuple[str, ...]] = {
    "block-size": ("block_size", "capacity_slots", "all_internal_frag", "sat_internal_frag",
                   "all_reserved", "all_token", "mean_batch_size", "throughput_tokens_per_s",
                   "preemptions"),
    "rate": ("rate_per_s", "scheme", "mean_batch_size", "paper_batch",
             "saturated_time_fraction", "throughput_tokens_per_s", "preemptions"),
    "sharing": ("mode", "width", "sharing_saving", "paper_saving", "mean_batch_size",
                "throughput_tokens_per_s", "cow_copies", "preemptions"),
    "preemption": ("preemption", "block_size", "throughput_tokens_per_s",
                   "p50_normalized_latency_s", "p90_normalized_latency_s", "preemptions",
                   "swaps"),
    "cache-size": ("capacity_slots", "scheme", "prefix_hit_rate", "prefill_tokens_computed",
                   "evictions", "preemptions", "mean_batch_size"),
    "host-cache": ("host_cache_gb", "scheme", "total_capacity_slots", "prefix_hit_rate",
                   "prefix_hit_rate_gpu", "prefix_hit_rate_host", "mean_ttft_s", "p90_ttft_s"),
}
#: Columns holding fractions, printed as percentages.
_PERCENT = {"all_internal_frag", "sat_internal_frag", "all_reserved", "all_token", "sharing_saving",
            "paper_saving", "saturated_time_fraction", "prefix_hit_rate",
            "prefix_hit_rate_gpu", "prefix_hit_rate_host"}
#: What each sweep's caption says after its workload.
_SWEEP_NOTES = {
    "block-size": "shares: time-weighted % of the pool over the whole run (all_) or the "
                  "saturated part (sat_)",
    "rate": f"paper_batch: vLLM paper Fig. 13, measured at {FIGURE13_RATE['sharegpt']:g} "
            f"req/s (ShareGPT) / {FIGURE13_RATE['alpaca']:g} (Alpaca)",
    "sharing": "saving: time-weighted 1 - physical/logical blocks; paper: vLLM paper "
               "section 6.3 (Alpaca)",
    "preemption": "normalized latency in s per output token",
    "cache-size": "hit rate: % of prompt tokens served from the cache; capacity and "
                  "prefill in tokens, evictions in blocks; cache-replay: no scheduler, "
                  "prompt blocks only",
    "host-cache": "hit rate: % of prompt tokens served from the cache, by the GPU and by "
                  "the host tier; TTFT in s; cache-replay: no scheduler, at the GPU pool "
                  "plus the host tier's capacity",
}


def sweep_table(name: str, df: pd.DataFrame, workload_report: str | None = None) -> str:
    """The plain-text table ``pagedsim sweep`` prints (fractions shown as %), with
    ``workload_report`` (a trace's one-line report) under its caption when given."""
    cols = _SWEEP_TABLE[name]
    headers = [c + (" %" if c in _PERCENT else "") for c in cols]
    rows = []
    for rec in df.to_dict("records"):
        row = []
        for c in cols:
            v = rec[c]
            if c in _PERCENT:
                row.append(_pct(v))
            elif isinstance(v, float):
                row.append(_fmt(v, ",.4g" if "latency" in c or "ttft" in c else ",.2f"))
            else:
                row.append(v)
        rows.append(row)
    first = df.iloc[0]
    workload = str(first["workload"])
    kind = (f"{workload}-like" if workload in WORKLOAD_NAMES
            else f"trace {os.path.basename(workload)}")
    about = (f"{kind}, {count(int(first['num_requests']), 'request')}"
             + (f" at {first['rate_per_s']:.4g} req/s" if name != "rate" else ""))
    return "\n".join([f"sweep {name} ({about}); {_SWEEP_NOTES[name]}",
                      *([f"workload: {workload_report}"] if workload_report else []),
                      format_table(headers, rows)])
