"""``pagedsim sweep host-cache``: the prefix cache's hit rate per tier and the time to
first token against the size of a host tier behind the GPU pool.

One run per (host capacity in GiB, scheme), the GPU pool the experiment's
(:attr:`~pagedsim.experiments.spec.Experiment.host_cache_gb` set per run), then per
capacity one row ``scheme`` = :data:`~pagedsim.experiments.cache_replay.REPLAY_ROW`: the same
prompts through :func:`~pagedsim.experiments.cache_replay.replay` at the *total*
capacity, the GPU pool's slots plus the host tier's, with no scheduler (what a cache of
that size could serve at best, were every block of it free for caching). Runs without a
host tier get ``prefix_hits_gpu`` = ``prefix_hits`` and 0 from the host, so that every
row has both tiers. :func:`pagedsim.plots.host_tiers.host_tier_bars` draws the hits per
tier beside that curve.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .cache_replay import REPLAY_ROW, check_replay_size, replay
from .runner import run_many
from .spec import Experiment, check_host_cache_gb, check_schemes

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: Host tiers of the sweep by default (GiB): none, then from a third of the default
#: pool's 12 GiB to five times it.
SWEEP_HOST_GB = (0.0, 4.0, 8.0, 16.0, 32.0, 64.0)
#: The sweep's schemes by default: the two that cache across requests.
HOST_SCHEMES = ("prefix-cache", "radix")


def sweep_host_cache(exp: Experiment, host_gbs: Sequence[float] = SWEEP_HOST_GB,
                     schemes: Sequence[str] = HOST_SCHEMES, jobs: int | None = None,
                     progress: bool | None = None) -> pd.DataFrame:
    """One run per (host tier in GiB, scheme), then the scheduler-free replay at each
    total capacity (see the module docstring); ``host_cache_gb`` and
    ``total_capacity_slots`` (GPU pool plus host tier, token slots) on every row."""
    schemes = check_schemes(schemes)
    gbs = [check_host_cache_gb(g) for g in host_gbs]
    return host_cache_frame(exp, [(g, s) for g in gbs for s in schemes], jobs, progress)


def host_cache_frame(exp: Experiment, runs: Sequence[tuple[float, str] | tuple[float, str, bool]],
                     jobs: int | None = None, progress: bool | None = None,
                     known: pd.DataFrame | None = None) -> pd.DataFrame:
    """:func:`sweep_host_cache`'s frame for the runs ``(host GiB, scheme)`` or ``(host
    GiB, scheme, write-through?)`` (made in one batch), after the summary rows ``known``
    of runs made already (taken as 0 GiB: no host tier), with one replay row per host
    size; ``host_write_through`` on every row of a run."""
    import pandas as pd

    check_schemes(list(dict.fromkeys(r[1] for r in runs)) or ["prefix-cache"])
    requests = exp.requests()
    bs = exp.block_size
    check_replay_size(requests, bs)  # before the runs: the replay must not fail after them
    exps = [replace(exp, host_cache_gb=check_host_cache_gb(r[0]),
                    host_write_through=bool(r[2:] and r[2])) for r in runs]
    results: list[Any] = list(run_many([(e, r[1]) for e, r in zip(exps, runs, strict=True)],
                                       jobs, progress, "host tiers x schemes"))
    kept = [i for i, r in enumerate(results) if r is not None]  # None: failed on Dask
    df = pd.DataFrame.from_records([results[i][0] for i in kept])
    df["host_cache_gb"] = [exps[i].host_cache_gb for i in kept]
    df["host_write_through"] = [exps[i].host_write_through for i in kept]
    if known is not None and len(known):
        df = pd.concat([known.assign(host_cache_gb=0.0, host_write_through=False), df],
                       ignore_index=True)
    gbs = sorted(set(df["host_cache_gb"]))
    total = {g: exp.capacity_slots() + replace(exp, host_cache_gb=g).host_cache_blocks() * bs
             for g in gbs}
    df["total_capacity_slots"] = [total[g] for g in df["host_cache_gb"]]
    for col, fill in (("prefix_hits_gpu", df["prefix_hits"]), ("prefix_hits_host", 0),
                      ("prefix_hit_rate_gpu", df["prefix_hit_rate"]),
                      ("prefix_hit_rate_host", 0.0)):
        df[col] = df[col].fillna(fill) if col in df else fill
    rows = []
    for g in gbs:
        r = replay(requests, bs, total[g])
        rows.append({"scheme": REPLAY_ROW, "capacity_slots": exp.capacity_slots(),
                     "prefix_hit_rate": r.hit_rate, "prefix_queries": r.queries,
                     "prefix_hits": r.hits, "num_requests": r.num_requests,
                     "block_size": bs, "workload": exp.workload, "seed": exp.seed,
                     "host_cache_gb": g, "total_capacity_slots": total[g]})
    return pd.concat([df, pd.DataFrame.from_records(rows)], ignore_index=True)
