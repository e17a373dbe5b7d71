"""Sweeps: one run per value of a knob (block size, request rate, n / beam width, swap vs
recompute, the KV pool's size for prefix caching, a host tier's size:
:mod:`.host_sweep`), each returning a pandas frame with one row per run.

:data:`SWEEPS` registers them by the name ``pagedsim sweep`` takes, with what their
figures plot; :func:`run_sweep` runs one by name with its defaults.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..engine.scheduler import PREEMPTION_MODES
from ..memory.schemes import DEFAULT_SCHEMES
from ..paper import SHARING_SAVINGS_ALPACA, figure13_batch
from ..validate import check_choice
from ..workloads.workload import MIN_RATE_PER_S
from .cache_replay import REPLAY_ROW, check_replay_size, replay
from .host_sweep import HOST_SCHEMES, SWEEP_HOST_GB, sweep_host_cache
from .runner import run_many
from .spec import MAX_POOL_BLOCKS, Experiment, check_host_cache_gb, check_schemes

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: Block sizes of the block-size sweep (slots per block), 1..256 as in the paper's Fig. 18.
SWEEP_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Request rates (requests/s) of the rate sweep.
SWEEP_RATES = (1.0, 2.0, 3.0, 4.0, 6.0)
#: Parallel samples and beam widths of the sharing sweep (paper section 6.3).
SWEEP_NS = (2, 4, 6)
SWEEP_BEAM_WIDTHS = (2, 4, 6)
#: Block sizes of the swap-versus-recompute sweep (paper Fig. 19).
SWEEP_PREEMPTION_BLOCK_SIZES = (1, 4, 16, 64, 256)
#: KV pool sizes (token slots) of the cache-size sweep: from a pool that holds about the
#: running batch of the default multi-turn load to one that keeps most finished turns.
SWEEP_CACHE_TOKENS = (2048, 4096, 8192, 16384, 32768, 65536)
#: The schemes of the cache-size sweep by default: the two that cache across requests.
CACHE_SCHEMES = ("prefix-cache", "radix")


def _frame(results: Iterable[tuple[dict[str, Any], Any] | None], **extra: Sequence[Any]
           ) -> pd.DataFrame:
    """One row per run's summary plus the ``extra`` columns (one value per run). A run
    that failed on a Dask cluster (None; its runner lists it) has no row."""
    import pandas as pd

    results = list(results)
    kept = [i for i, r in enumerate(results) if r is not None]
    df = pd.DataFrame.from_records([results[i][0] for i in kept])
    for k, v in extra.items():
        values = list(v)
        df[k] = [values[i] for i in kept]
    return df


def sweep_block_size(exp: Experiment, block_sizes: Sequence[int] = SWEEP_BLOCK_SIZES,
                     scheme: str = "paged", jobs: int | None = None,
                     progress: bool | None = None) -> pd.DataFrame:
    """One run per block size (``scheme`` paged by default): internal fragmentation
    (``all_internal_frag``, ``sat_internal_frag``), throughput, batch, preemptions."""
    tasks = [(replace(exp, block_size=b), scheme) for b in block_sizes]
    return _frame(run_many(tasks, jobs, progress, "block sizes"))


def sweep_rate(exp: Experiment, rates: Sequence[float] = SWEEP_RATES,
               schemes: Sequence[str] = DEFAULT_SCHEMES, jobs: int | None = None,
               progress: bool | None = None) -> pd.DataFrame:
    """One run per (rate, scheme): mean batch size per scheme against the request rate
    (the paper's Figure 13); the paper's batch at its rate is in ``paper_batch``.
    A trace's arrival gaps are rescaled to each rate (:meth:`Experiment.trace`: the same
    requests, bursts and lulls keep their shape)."""
    schemes = check_schemes(schemes)
    tasks = [(replace(exp, rate_per_s=float(r)), s) for r in rates for s in schemes]
    df = _frame(run_many(tasks, jobs, progress, "rates x schemes"))
    df["paper_batch"] = [figure13_batch(s, exp.workload) for s in df.get("scheme", ())]
    return df


def sweep_sharing(exp: Experiment, ns: Sequence[int] = SWEEP_NS,
                  beam_widths: Sequence[int] = SWEEP_BEAM_WIDTHS, scheme: str = "paged",
                  jobs: int | None = None, progress: bool | None = None) -> pd.DataFrame:
    """Sharing savings (``1 - physical / logical`` blocks, time-weighted) for parallel
    sampling at each ``n`` and beam search at each width; ``mode`` is ``parallel`` or
    ``beam``, ``width`` the n or beam width, ``paper_saving`` the paper's section 6.3
    number (Alpaca) where it has one."""
    tasks = [(replace(exp, n=k, beam_width=1), scheme) for k in ns]
    tasks += [(replace(exp, n=1, beam_width=k), scheme) for k in beam_widths]
    modes = ["parallel"] * len(ns) + ["beam"] * len(beam_widths)
    widths = [*ns, *beam_widths]
    paper = [SHARING_SAVINGS_ALPACA[m].get(w, math.nan) if exp.workload == "alpaca"
             else math.nan for m, w in zip(modes, widths, strict=True)]
    return _frame(run_many(tasks, jobs, progress, "sharing"), mode=modes, width=widths,
                  paper_saving=paper)


def sweep_preemption(exp: Experiment,
                     block_sizes: Sequence[int] = SWEEP_PREEMPTION_BLOCK_SIZES,
                     scheme: str = "paged", jobs: int | None = None,
                     progress: bool | None = None) -> pd.DataFrame:
    """Swap versus recompute across block sizes: throughput, normalized latency,
    preemptions and swaps per (preemption mode, block size)."""
    tasks = [(replace(exp, block_size=b, preemption=p), scheme)
             for p in PREEMPTION_MODES for b in block_sizes]
    return _frame(run_many(tasks, jobs, progress, "preemption x block sizes"))


def sweep_cache_size(exp: Experiment, capacities: Sequence[int] = SWEEP_CACHE_TOKENS,
                     schemes: Sequence[str] = CACHE_SCHEMES, jobs: int | None = None,
                     progress: bool | None = None) -> pd.DataFrame:
    """Prefix-cache hit rate against the size of the KV pool: one run per (capacity in
    token slots, scheme), the pool set by ``capacity_tokens``; then, per capacity, one
    row ``scheme`` = :data:`REPLAY_ROW`: the same requests through
    :func:`pagedsim.experiments.cache_replay.replay` (arrival order, no scheduler, prompt blocks
    only, an LRU cache of that many tokens at the experiment's block size), the curve
    the scheduler's runs are compared with. Its ``prefix_queries`` / ``prefix_hits``
    are prompt tokens, ``evictions`` blocks; columns it has no value for are NaN."""
    import pandas as pd

    schemes = check_schemes(schemes)
    requests = exp.requests()
    bs = exp.block_size
    check_replay_size(requests, bs)  # before the runs: the replay must not fail after them
    tasks = [(replace(exp, capacity_tokens=int(c)), s) for c in capacities for s in schemes]
    df = _frame(run_many(tasks, jobs, progress, "capacities x schemes"),
                capacity_tokens=[int(c) for c in capacities for _ in schemes])
    rows = []
    for c in capacities:
        r = replay(requests, bs, int(c) // bs * bs)
        rows.append({"scheme": REPLAY_ROW, "capacity_slots": int(c) // bs * bs,
                     "prefix_hit_rate": r.hit_rate, "prefix_queries": r.queries,
                     "prefix_hits": r.hits, "prefill_tokens_computed": r.queries - r.hits,
                     "prefill_tokens_cached": r.hits, "evictions": r.evictions,
                     "num_requests": r.num_requests, "block_size": bs,
                     "workload": exp.workload, "seed": exp.seed,
                     "rate_per_s": exp.arrival_rate_per_s(requests),
                     "capacity_tokens": int(c)})
    return pd.concat([df, pd.DataFrame.from_records(rows)], ignore_index=True)


#: name -> (function, the columns each of its figures plots (a tuple: several in one
#: figure), x column, log x?, group column)
SWEEPS: dict[str, tuple[Callable[..., Any], tuple[str | tuple[str, ...], ...], str, bool,
                        str | None]] = {
    "block-size": (sweep_block_size, (("all_reserved", "all_internal_frag"),
                                      "throughput_tokens_per_s"), "block_size", True, None),
    "rate": (sweep_rate, ("mean_batch_size",), "rate_per_s", False, "scheme"),
    "sharing": (sweep_sharing, ("sharing_saving",), "width", False, "mode"),
    "preemption": (sweep_preemption, ("throughput_tokens_per_s", "p50_normalized_latency_s"),
                   "block_size", True, "preemption"),
    "cache-size": (sweep_cache_size, ("prefix_hit_rate",), "capacity_slots", True, "scheme"),
    "host-cache": (sweep_host_cache, ("prefix_hit_rate", "mean_ttft_s"), "host_cache_gb",
                   False, "scheme"),
}
#: The sweeps behind the vLLM paper's figures, which ``pagedsim figures`` regenerates.
PAPER_SWEEPS = ("block-size", "rate", "sharing", "preemption")

#: The workload each sweep uses by default (sharing: Alpaca-like, as the paper's 6.3).
SWEEP_DEFAULT_WORKLOAD = {"block-size": "sharegpt", "rate": "sharegpt", "sharing": "alpaca",
                          "preemption": "sharegpt", "cache-size": "multi-turn",
                          "host-cache": "multi-turn"}
#: Requests per run of each sweep by default: fewer than compare's 2,000 so that a sweep
#: of 9-20 runs takes about a minute or less on a 2-core laptop.
SWEEP_NUM_REQUESTS: dict[str, int] = {"block-size": 1000, "rate": 800, "sharing": 1000,
                                      "preemption": 1000, "cache-size": 1000,
                                      "host-cache": 1000}
#: Arrival rate (requests/s) of each sweep by default (the rate sweep varies it): 5 req/s
#: saturates the ShareGPT-like load (see :mod:`pagedsim.experiments`); the sharing sweep
#: uses the Alpaca-like load at the paper's Figure 13 Alpaca rate, 30 req/s.
SWEEP_RATE: dict[str, float] = {"block-size": 5.0, "rate": 5.0, "sharing": 30.0,
                                "preemption": 5.0, "cache-size": 5.0, "host-cache": 5.0}
#: Preemption mode of each sweep by default (the preemption sweep varies it). The
#: sharing sweep swaps: vLLM v0 preempts multi-sequence groups (parallel samples, beams)
#: by swapping, and our scheduler's recompute re-prefills each sequence of a preempted
#: group on its own, so recompute would undo the very sharing the sweep measures
#: (measured, Alpaca-like at 30 req/s: n = 2/4/6 saves 4.0/3.2/2.6% with recompute,
#: 4.0/6.3/7.8% with swap).
SWEEP_PREEMPTION: dict[str, str] = {"block-size": "recompute", "rate": "recompute",
                                    "sharing": "swap", "preemption": "recompute",
                                    "cache-size": "recompute", "host-cache": "recompute"}


#: What each sweep shows, in one sentence (``pagedsim sweep NAME --help``).
SWEEP_ABOUT: dict[str, str] = {
    "block-size": "internal fragmentation, reservation and throughput of paged allocation "
                  "against the block size (the paper's section 7.2, Fig. 18)",
    "rate": "mean batch size of each scheme against the request rate (the paper's "
            "Fig. 13)",
    "sharing": "memory saved by sharing blocks, for parallel sampling (n samples) and beam "
               "search (beam width) (the paper's section 6.3)",
    "preemption": "swap versus recompute across block sizes: throughput and median "
                  "normalized latency (the paper's section 7.3, Fig. 19)",
    "cache-size": "prefix-cache hit rate of the caching schemes against the size of the KV "
                  "pool, beside the scheduler-free replay of the same prompts (the Mooncake "
                  "paper's Fig. 9)",
    "host-cache": "prefix-cache hit rate per tier (GPU, host) and time to first token "
                  "against the size of a host tier behind the GPU pool, beside the "
                  "scheduler-free replay at the same total capacity",
}
#: The :class:`Experiment` fields each sweep sets per run (what its ``--values`` gives).
SWEPT_FIELDS_OF: dict[str, tuple[str, ...]] = {
    "block-size": ("block_size",),
    "rate": ("rate_per_s",),
    "sharing": ("n", "beam_width"),
    "preemption": ("preemption", "block_size"),
    "cache-size": ("capacity_tokens",),
    "host-cache": ("host_cache_gb",),
}


def default_values_text(name: str) -> str:
    """The values sweep ``name`` runs by default, in words (for help and captions)."""
    check_choice("sweep", name, tuple(SWEEPS))
    if name == "block-size":
        return "block sizes " + ", ".join(map(str, SWEEP_BLOCK_SIZES)) + " slots"
    if name == "rate":
        return ("rates " + ", ".join(f"{r:g}" for r in SWEEP_RATES) + " requests/s, for "
                + ", ".join(DEFAULT_SCHEMES))
    if name == "sharing":
        return (f"n = {', '.join(map(str, SWEEP_NS))} and beam widths "
                f"{', '.join(map(str, SWEEP_BEAM_WIDTHS))}")
    if name == "cache-size":
        return ("KV pools of " + ", ".join(f"{c:,}" for c in SWEEP_CACHE_TOKENS)
                + " token slots, for " + ", ".join(CACHE_SCHEMES))
    if name == "host-cache":
        return ("host tiers of " + ", ".join(f"{g:g}" for g in SWEEP_HOST_GB)
                + " GiB, for " + ", ".join(HOST_SCHEMES))
    return ("recompute and swap, at block sizes "
            + ", ".join(map(str, SWEEP_PREEMPTION_BLOCK_SIZES)) + " slots")


def num_runs(name: str, values: Sequence[Any] | None = None,
             schemes: Sequence[str] | None = None) -> int:
    """How many runs sweep ``name`` makes with these ``values`` (None: its defaults)
    and, for the rate and cache-size sweeps, ``schemes`` (None: their defaults)."""
    check_choice("sweep", name, tuple(SWEEPS))
    if name == "block-size":
        return len(values or SWEEP_BLOCK_SIZES)
    if name == "rate":
        return len(values or SWEEP_RATES) * len(schemes or DEFAULT_SCHEMES)
    if name == "sharing":
        return len(values or SWEEP_NS) + len(values or SWEEP_BEAM_WIDTHS)
    if name == "cache-size":
        return len(values or SWEEP_CACHE_TOKENS) * len(schemes or CACHE_SCHEMES)
    if name == "host-cache":
        return len(values or SWEEP_HOST_GB) * len(schemes or HOST_SCHEMES)
    return len(PREEMPTION_MODES) * len(values or SWEEP_PREEMPTION_BLOCK_SIZES)


#: Largest block size a sweep takes (slots): 2**16, far above any preset's context of at
#: most 8,192 tokens (a larger block could never fill), and small enough to report.
MAX_SWEEP_BLOCK_SIZE = 1 << 16


def sweep_base(name: str, make_experiment: Callable[..., Experiment]) -> Experiment:
    """The base experiment of the sweep called ``name``: ``make_experiment(workload=...,
    num_requests=..., rate=..., preemption=...)`` called with the sweep's defaults (the
    CLI lets its flags override them, and gives a trace neither the default number of
    requests nor the default rate: it runs as recorded unless told)."""
    check_choice("sweep", name, tuple(SWEEPS))
    return make_experiment(workload=SWEEP_DEFAULT_WORKLOAD[name],
                           num_requests=SWEEP_NUM_REQUESTS[name], rate=SWEEP_RATE[name],
                           preemption=SWEEP_PREEMPTION[name])


def check_values(name: str, values: Sequence[float], exp: Experiment) -> list[Any]:
    """The swept values of sweep ``name`` checked against its base experiment ``exp``:
    rates (requests/s) > 0 as floats; block sizes (slots) or n / beam widths as ints from
    1 up to :data:`MAX_SWEEP_BLOCK_SIZE` or ``exp.max_num_seqs``, each block size leaving
    at least one block in the pool. Raises ``ValueError`` naming the first bad value."""
    check_choice("sweep", name, tuple(SWEEPS))
    if not values:
        raise ValueError(f"sweep {name}: no values given")
    twice = sorted({v for v in values if list(values).count(v) > 1})
    if twice:  # each would only repeat its rows
        raise ValueError(f"sweep {name}: value(s) given twice: "
                         f"{', '.join(f'{v:g}' for v in twice)}")
    if name == "rate":
        for v in values:
            if not v >= MIN_RATE_PER_S:  # NaN fails too
                raise ValueError(f"sweep rate: rates must be >= {MIN_RATE_PER_S:g} "
                                 f"requests/s (one per 11.6 days), got {v:g}")
        return [float(v) for v in values]
    if name == "sharing":
        maximum, what = exp.max_num_seqs, "n / beam widths up to max_num_seqs"
    elif name == "cache-size":
        maximum = MAX_POOL_BLOCKS * exp.block_size
        what = f"KV pool sizes in token slots, at least one block of {exp.block_size}"
        for v in values:
            if not (math.isfinite(v) and exp.block_size <= v <= maximum and v == int(v)):
                raise ValueError(f"sweep cache-size: values must be whole numbers from "
                                 f"{exp.block_size} to {maximum:,} ({what}), got {v:g}")
        return [int(v) for v in values]
    elif name == "host-cache":
        try:
            return [check_host_cache_gb(v) for v in values]
        except ValueError as exc:
            raise ValueError(f"sweep host-cache: {exc}") from None
    else:
        maximum, what = MAX_SWEEP_BLOCK_SIZE, "block sizes in slots"
    out = []
    for v in values:
        # Compare as floats first: int() of an infinity raises, and of 1e300 makes a
        # 301-digit number that would then be printed.
        if not (math.isfinite(v) and 1 <= v <= maximum and v == int(v)):
            raise ValueError(f"sweep {name}: values must be whole numbers from 1 to "
                             f"{maximum:,} ({what}), got {v:g}")
        out.append(int(v))
    if name != "sharing":
        for b in out:
            try:
                replace(exp, block_size=b)
            except ValueError as exc:
                raise ValueError(f"sweep {name}: block size {b}: {exc}") from None
    return out


def run_sweep_on(name: str, exp: Experiment, values: Sequence[float] | None = None,
                 schemes: Sequence[str] | None = None, jobs: int | None = None,
                 progress: bool | None = None) -> pd.DataFrame:
    """Run the sweep called ``name`` on the base experiment ``exp`` (see
    :func:`sweep_base`); ``values`` replaces the swept values (block sizes, rates, or the
    n / beam widths, or pool sizes; checked by :func:`check_values`), ``schemes`` the rate
    and cache-size sweeps'."""
    check_choice("sweep", name, tuple(SWEEPS))
    if schemes is not None and name not in ("rate", "cache-size", "host-cache"):
        raise ValueError(f"--schemes applies to the rate, cache-size and host-cache sweeps, "
                         f"not {name}")
    vals = check_values(name, values, exp) if values is not None else None
    if name == "block-size":
        return sweep_block_size(exp, vals or SWEEP_BLOCK_SIZES, jobs=jobs, progress=progress)
    if name == "rate":
        return sweep_rate(exp, vals or SWEEP_RATES, schemes or DEFAULT_SCHEMES, jobs=jobs,
                          progress=progress)
    if name == "sharing":
        return sweep_sharing(exp, vals or SWEEP_NS, vals or SWEEP_BEAM_WIDTHS, jobs=jobs,
                             progress=progress)
    if name == "cache-size":
        return sweep_cache_size(exp, vals or SWEEP_CACHE_TOKENS, schemes or CACHE_SCHEMES,
                                jobs=jobs, progress=progress)
    if name == "host-cache":
        return sweep_host_cache(exp, vals or SWEEP_HOST_GB, schemes or HOST_SCHEMES,
                                jobs=jobs, progress=progress)
    return sweep_preemption(exp, vals or SWEEP_PREEMPTION_BLOCK_SIZES, jobs=jobs,
                            progress=progress)


def run_sweep(name: str, make_experiment: Callable[..., Experiment],
              values: Sequence[float] | None = None, schemes: Sequence[str] | None = None,
              jobs: int | None = None, progress: bool | None = None) -> pd.DataFrame:
    """Run the sweep called ``name`` (a key of :data:`SWEEPS`).

    ``make_experiment(workload=..., num_requests=..., rate=..., preemption=...)`` builds
    the base experiment from the sweep's defaults (:func:`sweep_base`; the CLI lets its
    flags override them); ``values`` replaces the swept values (block sizes, rates, or
    the n / beam widths).
    """
    return run_sweep_on(name, sweep_base(name, make_experiment), values, schemes, jobs,
                        progress)
