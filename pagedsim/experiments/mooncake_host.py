"""The host tier on the Mooncake trace (``figures/mooncake/``, part of
:mod:`pagedsim.experiments.mooncake`): the same requests with host memory behind the GPU
pool, beside the GPU-only runs that the comparison made.

``prefix-cache`` runs with host tiers of :data:`HOST_GB` GiB (write-back at eviction,
copies overlapped with compute layer by layer, over the H200's PCIe 5.0 x16 link:
:mod:`pagedsim.engine.cost`), and with the largest also ``radix`` and ``prefix-cache``
writing through; the GPU-only rows are the comparison's own. :func:`host_section`
writes the README's section from the results: hits per tier against the scheduler-free
replay at the same total capacity, time to first token, bytes moved each way, and when
loading a block costs more than recomputing it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..engine.cost import CostModel
from ..units import GiB
from .cache_replay import REPLAY_ROW
from .host_sweep import host_cache_frame
from .spec import Experiment
from .tables import _pct

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from .runner import Comparison

#: Host tiers of ``prefix-cache`` (GiB): 1,000 GiB holds about 8 times the H200's pool.
HOST_GB = (125.0, 250.0, 500.0, 1000.0)
#: The schemes run with the largest tier (the others with ``prefix-cache`` only).
LARGEST_SCHEMES = ("prefix-cache", "radix")
#: Prefix lengths (tokens) of the load-or-recompute table.
PREFIX_TOKENS = (16, 64, 256, 1024, 4096, 16384)


def host_runs(exp: Experiment, cmp: Comparison, jobs: int | None = None,
              progress: bool | None = None) -> pd.DataFrame:
    """The host-tier runs on ``exp`` in one batch, after the comparison's GPU-only rows of
    the caching schemes, with the replay at each total capacity
    (:func:`~pagedsim.experiments.host_sweep.host_cache_frame`)."""
    runs: list[tuple[float, str, bool]] = [(g, "prefix-cache", False) for g in HOST_GB]
    runs += [(HOST_GB[-1], "radix", False), (HOST_GB[-1], "prefix-cache", True)]
    known = cmp.summary[cmp.summary["scheme"].isin(LARGEST_SCHEMES)]
    return host_cache_frame(exp, runs, jobs, progress, known=known)


def write_host(df: pd.DataFrame, out: str | os.PathLike[str]) -> list[Path]:
    """``mooncake_host_tiers.csv`` (every row and number, TTFT and TPOT included) and
    ``mooncake_host_tiers.png`` (prefix-cache's hits per tier against the host tier's
    size, beside the replay) in ``out``."""
    from ..plots.host_tiers import host_tier_bars
    from .writers import _pyplot, _savefig

    out = Path(out)
    path = out / "mooncake_host_tiers.csv"
    df.to_csv(path, index=False)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.4))
    write_back = df["host_write_through"].fillna(False) == False  # noqa: E712 (NaN: replay)
    host_tier_bars(df[df["scheme"].isin(("prefix-cache", REPLAY_ROW)) & write_back],
                   REPLAY_ROW, ax=ax,
                   title="Mooncake conversation trace: hits per tier against the host tier")
    png = out / "mooncake_host_tiers.png"
    _savefig(fig, png)
    return [path, png]


def _row(df: pd.DataFrame, scheme: str, gb: float, write_through: bool = False
         ) -> pd.Series:
    sel = (df["scheme"] == scheme) & (df["host_cache_gb"] == gb)
    if scheme != REPLAY_ROW:
        sel &= df["host_write_through"] == write_through
    return df[sel].iloc[0]


def host_section(df: pd.DataFrame, exp: Experiment, out: str | os.PathLike[str]) -> str:
    """The README's section on the host tier, every number from ``df`` (:func:`host_runs`)
    and the experiment's cost model; ``out`` as the commands write it."""
    cost = exp.cost_model()
    gbs = sorted(set(df["host_cache_gb"]))
    big = gbs[-1]
    table = ["| host tier (GiB) | scheme | total capacity (slots) | hit rate | GPU tier | "
             "host tier | no scheduler | mean TTFT (s) | p90 TTFT (s) | loaded (GiB) | "
             "offloaded (GiB) | link time (s) |", "|---" * 12 + "|"]
    runs = df[df["scheme"] != REPLAY_ROW]
    for r in runs.sort_values(["host_cache_gb", "host_write_through"], kind="stable"
                              ).to_dict("records"):
        g = r["host_cache_gb"]
        rep = _row(df, REPLAY_ROW, g)
        moved = [r.get(k, 0) for k in ("host_loaded_bytes", "host_offloaded_bytes",
                                       "host_transfer_s")]
        moved = [0 if v != v else v for v in moved]  # NaN: no tier, nothing moved
        scheme = r["scheme"] + (", write-through" if r["host_write_through"] else "")
        table.append(
                f"| {g:,.0f} | {scheme} | {int(r['total_capacity_slots']):,} | "
                f"{_pct(r['prefix_hit_rate'])}% | {_pct(r['prefix_hit_rate_gpu'])}% | "
                f"{_pct(r['prefix_hit_rate_host'])}% | {_pct(rep['prefix_hit_rate'])}% | "
                f"{r['mean_ttft_s']:.1f} | {r['p90_ttft_s']:.1f} | {moved[0] / GiB:,.0f} | "
                f"{moved[1] / GiB:,.0f} | {moved[2]:.1f} |")
    pc0, pc = _row(df, "prefix-cache", 0.0), _row(df, "prefix-cache", big)
    wt, rep = _row(df, "prefix-cache", big, True), _row(df, REPLAY_ROW, big)
    gap = 100 * (rep["prefix_hit_rate"] - pc["prefix_hit_rate"])
    link = cost.host_link_bytes_per_s or cost.pcie_bytes_per_s
    block_mib = exp.block_size * cost.model.bytes_per_token / 2**20
    common = (f"--workload PATH/{os.path.basename(exp.workload)} --num-requests "
              f"{exp.num_requests} --preset paper-opt-13b --model {exp.model} --gpu {exp.gpu}")
    cmds = "\n".join([
        f"pagedsim sweep host-cache {common} --values {','.join(f'{g:g}' for g in gbs[1:])} "
        f"--schemes prefix-cache --out {out}",
        f"pagedsim compare {common} --schemes radix --host-cache-gb {big:g} --out {out}",
        f"pagedsim compare {common} --schemes prefix-cache --host-cache-gb {big:g} "
        f"--host-write-through --out {out}"])
    return f"""## A host tier behind the GPU pool

`mooncake_host_tiers.png`, `mooncake_host_tiers.csv`: the same requests with host memory
behind the GPU pool (`--host-cache-gb`; `pagedsim.memory.host_tier`), prefix-cache with
{", ".join(f"{g:,.0f}" for g in gbs[1:])} GiB, and with {big:,.0f} GiB radix and
prefix-cache writing through (`--host-write-through`); the 0 GiB rows are the runs above.
The same runs as

```
{cmds}
```

A block the GPU evicts is written back to the host (unless the host holds it), the host
evicts least recently used, and a lookup continues its prefix in the host after the GPU's
hits; host hits are loaded into fresh GPU blocks before the prefill. A block is
{block_mib:g} MiB; copies go over the H200's host link, PCIe 5.0 x16 at {link / 1e9:g} GB/s
each way, one batched copy per layer and direction per step, overlapped with the prefill
layer by layer (as HiCache and LMCache do; `--no-host-overlap` charges them before the
compute instead). "no scheduler": the same prompts through an LRU cache of
the GPU pool plus the host tier's slots (`pagedsim cache-replay`).

{chr(10).join(table)}

With {big:,.0f} GiB of host memory prefix-cache serves {_pct(pc['prefix_hit_rate'])}% of the
prompt tokens looked up: {_pct(pc['prefix_hit_rate_gpu'])}% from the GPU tier and
{_pct(pc['prefix_hit_rate_host'])}% from the host tier ({int(pc['prefix_hits_host']):,} tokens),
against {_pct(pc0['prefix_hit_rate'])}% without it; the scheduler-free replay at the same total
capacity ({int(rep['total_capacity_slots']):,} slots) hits {_pct(rep['prefix_hit_rate'])}%,
{abs(gap):.1f} points {"more" if gap >= 0 else "less"}. Mean time to first token falls from
{pc0['mean_ttft_s']:.1f} s to {pc['mean_ttft_s']:.1f} s and its 90th percentile from
{pc0['p90_ttft_s']:.1f} s to {pc['p90_ttft_s']:.1f} s: the prefills compute fewer tokens, so
the queue drains faster. The GPU pool is split into the same six categories (a loaded
block is an ordinary block of the request that loaded it): over the saturated part its
token share is {_pct(pc['sat_token'])}% and cached blocks keep {_pct(pc['sat_cached'])}%
({_pct(pc0['sat_token'])}% and {_pct(pc0['sat_cached'])}% without a host tier). The host tier held
{pc['host_mean_used_blocks'] / pc['host_cache_blocks']:.0%} of its {int(pc['host_cache_blocks']):,}
blocks on average (time-weighted); its copies added {pc['host_transfer_s']:.1f} s to the
steps in all. Writing every block through as it is named (HiCache's `write_through`)
serves {_pct(wt['prefix_hit_rate'])}% ({_pct(wt['prefix_hit_rate_host'])}% from the
host) at a mean TTFT of {wt['mean_ttft_s']:.1f} s, and offloads
{wt['host_offloaded_bytes'] / GiB:,.0f} GiB against write-back's
{pc['host_offloaded_bytes'] / GiB:,.0f}.

{load_or_recompute_text(cost)}
"""


def load_or_recompute_text(cost: CostModel) -> str:
    """When loading a cached prefix costs more than recomputing it, in numbers: a step
    that serves a prefix of each of :data:`PREFIX_TOKENS` tokens and computes one token
    after it (:meth:`~pagedsim.engine.cost.CostModel.load_or_recompute_s`), with the
    copies overlapped and not."""
    from dataclasses import replace

    serial = replace(cost, host_overlap=False)
    rows = ["| prefix (tokens) | loaded, overlapped (ms) | loaded, not overlapped (ms) | "
            "recomputed (ms) |", "|---|---|---|---|"]
    cheaper: dict[bool, list[str]] = {True: [], False: []}  # overlapped? -> lengths
    for n in PREFIX_TOKENS:
        lo, rc = cost.load_or_recompute_s(n)
        ls, _ = serial.load_or_recompute_s(n)
        rows.append(f"| {n:,} | {1e3 * lo:.2f} | {1e3 * ls:.2f} | {1e3 * rc:.2f} |")
        for overlapped, loaded in ((True, lo), (False, ls)):
            if rc < loaded:
                cheaper[overlapped].append(f"{n:,}")
    when = "; ".join(
        f"{how}, recomputing is cheaper for prefixes of {', '.join(cheaper[o])} tokens"
        if cheaper[o] else f"{how}, loading is cheaper at every length here"
        for o, how in ((True, "With the copies overlapped"), (False, "without overlap")))
    return (f"Loading is not free. A step that serves a cached prefix and computes one token "
            f"after it ({cost.model.name} on {cost.gpu.name}):\n\n" + "\n".join(rows)
            + f"\n\n{when}: a prefill that short is memory-bound "
            "(the step streams the weights once whatever it computes), so its tokens cost "
            "almost nothing to recompute, while their copy costs the link's time and one copy "
            "call per layer. Past a few hundred tokens the prefill is compute-bound and "
            "loading wins by the ratio of a token's flops to its bytes over the link.")
