"""Summaries of one simulated run: where the KV pool went, how big the batches were, how fast.

:func:`summarize` turns a :class:`~.sim_result.SimResult` into one flat ``dict`` of
numbers; :func:`summary_frame` stacks several into a pandas DataFrame (one row per run).

Time weighting
--------------
Steps differ in length (a step that prefills 2,000 prompt tokens lasts longer than one
that decodes 7 sequences), and memory is held for as long as a step lasts. So every
per-step quantity is averaged with weights ``step_time_s`` (simulated seconds): the share
of the pool in category ``c`` is ::

    share_c = sum_steps(c_slots * step_time_s) / sum_steps(capacity * step_time_s)

which is the fraction of slot-seconds spent in ``c``. The six shares sum to 1 because
the six categories partition the pool at every step. (If every step had zero length,
e.g. a cost model with no per-step overhead and no work, the steps are weighted equally.)

Two views are reported, with the prefixes ``all_`` and ``sat_``:

* ``all_<category>``: over the whole run, including the ramp-up at the start and the
  drain at the end, when the pool is mostly free whatever the scheme;
* ``sat_<category>``: over the *saturated* part only, the steps after which requests
  were still waiting (``waiting > 0``): there the scheme, not the load, decides how much
  of the pool holds tokens. This is the view comparable with the vLLM paper's Figure 2,
  measured on a server under load. NaN when no step was saturated.

Other numbers (units in the key names)
--------------------------------------
* ``mean_batch_size``: mean of ``batched_requests`` (requests that ran in the step,
  prefilling or decoding) over the steps that ran anything; a plain (not time-weighted)
  mean over iterations, as the vLLM paper's Figure 13 counts "batched requests" per
  iteration. ``sat_mean_batch_size``: the same over saturated steps.
* ``makespan_s``: from the first arrival to the end of the last step (simulated seconds).
  ``sim_time_s``: the simulated clock at the end of the last step (it starts at 0).
* ``throughput_tokens_per_s``: generated tokens / makespan, counting every sample of a
  parallel-sampling request and every beam of a beam search (``output_len x max(n,
  beam_width)`` per request; tokens regenerated after a preemption count once).
  ``requests_per_s``: finished requests / makespan.
* ``p50_normalized_latency_s``, ``p90_normalized_latency_s``: percentiles over requests of
  end-to-end latency / output length (seconds per output token, as in the paper).
* Request latencies as vLLM's ``benchmark_serving`` reports them, over finished requests
  (:data:`LATENCY_KEYS`): ``mean_ttft_s``, ``p50_ttft_s``, ``p90_ttft_s``, ``p99_ttft_s``:
  time to first token, from arrival to the end of the step that sampled it;
  ``mean_tpot_s``, ``p50_tpot_s``, ``p90_tpot_s``: time per output token after the first,
  ``(latency - ttft) / (output_len - 1)`` per request, requests of one output token left
  out. Percentiles are exact (numpy's linear interpolation over every request: the
  per-request rows are kept, 76 bytes each).
* ``serving_<field>``: the fields of vLLM's ``benchmark_serving`` result under its own
  names (``serving_mean_ttft_ms``, ``serving_p99_itl_ms``, ``serving_duration``, ...;
  :mod:`.serving_report` lists them with their units), inter-token latencies from what
  the run recorded (:mod:`.token_gaps`; NaN for a result built by hand).
* ``sharing_saving``: time-weighted ``1 - physical_blocks / logical_blocks`` over steps
  with ``logical_blocks > 0`` (the paper's section 6.3 memory saving; 0 without sharing).
* ``prefix_queries`` / ``prefix_hits``: tokens of admitted prompts (recomputations
  included) looked up in a prefix cache, and found there (vLLM's ``prefix_cache_queries``
  and ``prefix_cache_hits``); ``prefix_hit_rate`` = hits / queries (0 for a scheme
  without a cache, whose lookups find nothing; NaN only when nothing was admitted);
  ``prefix_hit_rate_last_1000``: prompt tokens served from the cache over prompt tokens,
  for the last 1,000 requests admitted (first admissions only).
  ``prefill_tokens_computed`` / ``prefill_tokens_cached``: prompt tokens the model
  computed, and those a prefix cache served instead. ``evictions``: cached blocks reused
  for other content.
* With a host tier only (:data:`.host_stats.HOST_KEYS`): the hits per tier
  in tokens (``prefix_hits_gpu`` + ``prefix_hits_host`` = ``prefix_hits``) and their
  rates, blocks and bytes moved each way (``host_loaded_bytes`` host -> GPU,
  ``host_offloaded_bytes`` GPU -> host), the tier's time-weighted and largest occupancy
  in blocks, its evictions, and the seconds its copies added to steps.
* ``preemptions``, ``swaps`` (swap-outs), ``cow_copies`` (copy-on-write block copies):
  counts over the run; ``num_steps``: steps that ran something.

Every per-step number comes from sums kept as the run went
(:class:`.step_stats.StepStats`), never from kept steps, so a summary is
the same whether a run kept all its steps, a sample or none; ``step_stats`` says how its
float sums are formed (for runs of up to 131,072 steps: exactly the pairwise sums over
the whole run's frame that :func:`time_weighted_shares` computes).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from ..memory.accounting import CATEGORIES
from .request_log import RequestLog
from .serving_report import PREFIX as SERVING_PREFIX
from .serving_report import SUMMARY_SERVING_KEYS, serving_metrics
from .sim_result import STEP_COLUMNS, SimResult
from .step_stats import PartSums

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: The summary's keys in a stable order (summary_frame's columns).
SUMMARY_KEYS: tuple[str, ...] = (
    "scheme",
    "capacity_slots",
    *(f"all_{c}" for c in CATEGORIES),
    *(f"sat_{c}" for c in CATEGORIES),
    "saturated_time_fraction",
    "mean_batch_size",
    "sat_mean_batch_size",
    "throughput_tokens_per_s",
    "requests_per_s",
    "p50_normalized_latency_s",
    "p90_normalized_latency_s",
    "sharing_saving",
    "prefix_hit_rate",
    "prefix_hit_rate_last_1000",
    "prefill_tokens_computed",
    "prefill_tokens_cached",
    "evictions",
    "preemptions",
    "swaps",
    "cow_copies",
    "num_requests",
    "generated_tokens",
    "num_steps",
    "makespan_s",
    "sim_time_s",
)


def _weights(step_time_s: np.ndarray) -> np.ndarray:
    """Step lengths as weights; equal weights if every step lasted 0 s."""
    w = np.asarray(step_time_s, dtype=float)
    return w if w.sum() > 0 else np.ones_like(w)


def time_weighted_shares(steps: pd.DataFrame) -> dict[str, float]:
    """The six categories' shares of slot-seconds over the rows of ``steps`` (fractions
    summing to 1; NaN for every category if ``steps`` is empty)."""
    if len(steps) == 0:
        return {c: math.nan for c in CATEGORIES}
    w = _weights(steps["step_time_s"].to_numpy())
    total = float((steps["capacity"].to_numpy() * w).sum())
    return {c: float((steps[c].to_numpy() * w).sum()) / total for c in CATEGORIES}


def sharing_saving(steps: pd.DataFrame) -> float:
    """Time-weighted ``1 - physical_blocks / logical_blocks`` over the steps that hold any
    block (0.0 if none does)."""
    used = steps[steps["logical_blocks"] > 0]
    if len(used) == 0:
        return 0.0
    w = _weights(used["step_time_s"].to_numpy())
    ratio = used["physical_blocks"].to_numpy() / used["logical_blocks"].to_numpy()
    return float(((1.0 - ratio) * w).sum() / w.sum())


#: Requests in the "recent" prefix-cache hit rate (vLLM reports one over the last 1,000).
RECENT_REQUESTS = 1000


#: Request-latency keys of a summary (vLLM ``benchmark_serving``'s TTFT and TPOT), in
#: seconds. The committed CSVs predate them and leave them out (:data:`CSV_LEFT_OUT`).
LATENCY_KEYS: tuple[str, ...] = ("mean_ttft_s", "p50_ttft_s", "p90_ttft_s", "p99_ttft_s",
                                 "mean_tpot_s", "p50_tpot_s", "p90_tpot_s")
#: Summary keys the summary CSVs do not write, so that every committed CSV stays byte for
#: byte what it was; ``compare --json`` and the summary frames carry them (the request
#: latencies, and benchmark_serving's fields: :mod:`.serving_report`).
CSV_LEFT_OUT: tuple[str, ...] = LATENCY_KEYS + SUMMARY_SERVING_KEYS


def _shares(part: PartSums) -> dict[str, float]:
    """The six categories' shares of slot-seconds (equal weights if every step lasted
    0 s; NaN for a part without steps), as :func:`time_weighted_shares` of its frame."""
    if part.steps == 0:
        return {c: math.nan for c in CATEGORIES}
    sums = part.weighted if part.time_s > 0 else part.plain
    total = sums["capacity"]
    return {c: sums[c] / total for c in CATEGORIES}


def _percentile(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else math.nan


def latency_stats(log: RequestLog) -> dict[str, float]:
    """:data:`LATENCY_KEYS` of one run's requests (seconds; NaN without a finished one)."""
    finish = log.column("finish_s")
    done = ~np.isnan(finish)
    arrival = log.column("arrival_s")[done]
    ttft = log.column("first_token_end_s")[done] - arrival
    out_len = log.column("output_len")[done]
    many = out_len > 1
    tpot = ((finish[done] - arrival - ttft)[many] / (out_len[many] - 1))
    return {
        "mean_ttft_s": float(ttft.mean()) if len(ttft) else math.nan,
        "p50_ttft_s": _percentile(ttft, 50), "p90_ttft_s": _percentile(ttft, 90),
        "p99_ttft_s": _percentile(ttft, 99),
        "mean_tpot_s": float(tpot.mean()) if len(tpot) else math.nan,
        "p50_tpot_s": _percentile(tpot, 50), "p90_tpot_s": _percentile(tpot, 90),
    }


def _recent_hit_rate(log: RequestLog) -> float:
    """Prompt tokens served from the cache / prompt tokens, over the last
    :data:`RECENT_REQUESTS` requests admitted (NaN if none was)."""
    first = log.column("first_scheduled_s")
    cached = log.column("cached_prompt_tokens")
    admitted = ~np.isnan(first) & (cached >= 0)
    ids = log.column("request_id")[admitted]
    order = np.lexsort((ids, first[admitted]))[-RECENT_REQUESTS:]
    queries = int(log.column("prompt_len")[admitted][order].sum())
    hits = float(cached[admitted][order].sum())
    return hits / queries if queries else math.nan


def summarize(result: SimResult, steps: pd.DataFrame | None = None
              ) -> dict[str, float | int | str]:
    """One run's numbers; see the module docstring for each key and its unit.

    Computed from the run's sums (``result.step_stats()``) and per-request rows, whatever
    steps it kept. ``steps`` is accepted for callers of earlier versions and not read.
    """
    stats = result.step_stats()
    log = result.request_log
    out: dict[str, float | int | str] = {
        "scheme": result.scheme, "capacity_slots": int(result.capacity_slots),
    }
    for c, v in _shares(stats.all).items():
        out[f"all_{c}"] = v
    for c, v in _shares(stats.sat).items():
        out[f"sat_{c}"] = v
    total_time = stats.all.time_s
    out["saturated_time_fraction"] = (
        stats.sat.time_s / total_time if total_time > 0 else math.nan
    )
    out["mean_batch_size"] = stats.all.batched / stats.all.ran if stats.all.ran else math.nan
    out["sat_mean_batch_size"] = (
        stats.sat.batched / stats.sat.ran if stats.sat.ran else math.nan
    )
    last = stats.last_row
    end_s = float(last[STEP_COLUMNS.index("time_s")] + last[STEP_COLUMNS.index("step_time_s")]
                  ) if last is not None else 0.0
    num_requests = len(log)
    start_s = float(log.column("arrival_s").min()) if num_requests else 0.0
    makespan = end_s - start_s
    # Every sample / beam generates its own tokens (they are separate sequences in the batch).
    width = np.maximum(log.column("n"), log.column("beam_width")).astype(np.int64)
    generated = int((log.column("num_output").astype(np.int64) * width).sum())
    out["throughput_tokens_per_s"] = generated / makespan if makespan > 0 else math.nan
    out["requests_per_s"] = num_requests / makespan if makespan > 0 else math.nan
    finish = log.column("finish_s")
    lat = ((finish - log.column("arrival_s")) / log.column("output_len"))
    lat = lat[~np.isnan(lat)]  # rejected: no latency
    out["p50_normalized_latency_s"] = _percentile(lat, 50)
    out["p90_normalized_latency_s"] = _percentile(lat, 90)
    if stats.used_steps == 0:
        out["sharing_saving"] = 0.0
    elif stats.used_time_s > 0:
        out["sharing_saving"] = stats.used_saving / stats.used_time_s
    else:
        out["sharing_saving"] = stats.used_saving_plain / stats.used_steps
    counts = stats.counts
    queries, hits = counts["prefix_query_tokens"], counts["prefix_hit_tokens"]
    out.update({
        "prefix_queries": queries,
        "prefix_hits": hits,
        "prefix_hit_rate": hits / queries if queries else math.nan,
        "prefix_hit_rate_last_1000": _recent_hit_rate(log),
        "prefill_tokens_computed": counts["prefill_tokens"],
        "prefill_tokens_cached": counts["prefill_tokens_cached"],
        "evictions": counts["evictions"],
    })
    if result.host is not None:  # a host tier: hits per tier, bytes each way, occupancy
        out.update(result.host.summary(queries, hits))
    out["preemptions"] = int(result.num_preemptions)
    out["swaps"] = int(result.num_swaps_out)
    out["cow_copies"] = int(result.num_cow_copies)
    out["num_requests"] = int(num_requests)
    out["generated_tokens"] = generated
    out["num_steps"] = int(stats.num_steps)
    out["makespan_s"] = makespan
    out["sim_time_s"] = end_s
    out["rejected"] = len(result.rejections)
    out["first_rejection"] = result.rejections[0][1] if result.rejections else ""
    out.update(latency_stats(log))
    for key, value in serving_metrics(log, result.token_gaps, end_s).items():
        out[SERVING_PREFIX + key] = value
    return out


def summary_frame(results: Iterable[SimResult | dict]) -> pd.DataFrame:
    """One row per run (:func:`summarize` of each; already-made summaries pass through),
    columns :data:`SUMMARY_KEYS` first, in that order."""
    import pandas as pd

    rows = [r if isinstance(r, dict) else summarize(r) for r in results]
    df = pd.DataFrame.from_records(rows)
    first = [k for k in SUMMARY_KEYS if k in df.columns]
    return df[first + [c for c in df.columns if c not in first]]
