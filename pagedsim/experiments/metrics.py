"""Summaries of one simulated run: where the KV pool went, how big the batches were, how fast.

:func:`summarize` turns a :class:`~pagedsim.engine.simulator.SimResult` into one flat ``dict`` of
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
* ``preemptions``, ``swaps`` (swap-outs), ``cow_copies`` (copy-on-write block copies):
  counts over the run; ``num_steps``: steps that ran something.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from ..memory.accounting import CATEGORIES

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from ..engine.simulator import SimResult

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


def prefix_cache_stats(steps: pd.DataFrame, reqs: pd.DataFrame) -> dict[str, float | int]:
    """Prefix-cache numbers of one run (hit rates NaN when nothing was looked up)."""
    queries = int(steps["prefix_query_tokens"].sum())
    hits = int(steps["prefix_hit_tokens"].sum())
    admitted = reqs.dropna(subset=["first_scheduled_s", "cached_prompt_tokens"])
    recent = admitted.sort_values(["first_scheduled_s", "request_id"]).tail(RECENT_REQUESTS)
    recent_queries = int(recent["prompt_len"].sum())
    return {
        "prefix_queries": queries,
        "prefix_hits": hits,
        "prefix_hit_rate": hits / queries if queries else math.nan,
        "prefix_hit_rate_last_1000": (float(recent["cached_prompt_tokens"].sum())
                                      / recent_queries if recent_queries else math.nan),
        "prefill_tokens_computed": int(steps["prefill_tokens"].sum()),
        "prefill_tokens_cached": int(steps["prefill_tokens_cached"].sum()),
        "evictions": int(steps["evictions"].sum()),
    }


def summarize(result: SimResult, steps: pd.DataFrame | None = None
              ) -> dict[str, float | int | str]:
    """One run's numbers; see the module docstring for each key and its unit.

    ``steps``: ``result.steps()`` if the caller already built it (building the frame of a
    100,000-step run takes a noticeable fraction of a second).
    """
    if steps is None:
        steps = result.steps()
    reqs = result.requests()
    out: dict[str, float | int | str] = {
        "scheme": result.scheme, "capacity_slots": int(result.capacity_slots),
    }
    for c, v in time_weighted_shares(steps).items():
        out[f"all_{c}"] = v
    saturated = steps[steps["waiting"] > 0]
    for c, v in time_weighted_shares(saturated).items():
        out[f"sat_{c}"] = v
    total_time = float(steps["step_time_s"].sum())
    out["saturated_time_fraction"] = (
        float(saturated["step_time_s"].sum()) / total_time if total_time > 0 else math.nan
    )
    ran = steps[steps["batched_requests"] > 0]
    out["mean_batch_size"] = float(ran["batched_requests"].mean()) if len(ran) else math.nan
    sat_ran = saturated[saturated["batched_requests"] > 0]
    out["sat_mean_batch_size"] = (
        float(sat_ran["batched_requests"].mean()) if len(sat_ran) else math.nan
    )

    end_s = float(steps["time_s"].iloc[-1] + steps["step_time_s"].iloc[-1]) if len(steps) else 0.0
    start_s = float(reqs["arrival_s"].min()) if len(reqs) else 0.0
    makespan = end_s - start_s
    # Every sample / beam generates its own tokens (they are separate sequences in the batch).
    width = np.maximum(reqs["n"].to_numpy(), reqs["beam_width"].to_numpy())
    generated = int((reqs["num_output"].to_numpy() * width).sum())
    out["throughput_tokens_per_s"] = generated / makespan if makespan > 0 else math.nan
    out["requests_per_s"] = len(reqs) / makespan if makespan > 0 else math.nan
    lat = reqs["normalized_latency_s"].dropna().to_numpy(dtype=float)  # rejected: no latency
    out["p50_normalized_latency_s"] = float(np.percentile(lat, 50)) if len(lat) else math.nan
    out["p90_normalized_latency_s"] = float(np.percentile(lat, 90)) if len(lat) else math.nan
    out["sharing_saving"] = sharing_saving(steps)
    out.update(prefix_cache_stats(steps, reqs))
    out["preemptions"] = int(result.num_preemptions)
    out["swaps"] = int(result.num_swaps_out)
    out["cow_copies"] = int(result.num_cow_copies)
    out["num_requests"] = int(len(reqs))
    out["generated_tokens"] = generated
    out["num_steps"] = int(len(steps))
    out["makespan_s"] = makespan
    out["sim_time_s"] = end_s
    out["rejected"] = len(result.rejections)
    out["first_rejection"] = result.rejections[0][1] if result.rejections else ""
    return out


def summary_frame(results: Iterable[SimResult | dict]) -> pd.DataFrame:
    """One row per run (:func:`summarize` of each; already-made summaries pass through),
    columns :data:`SUMMARY_KEYS` first, in that order."""
    import pandas as pd

    rows = [r if isinstance(r, dict) else summarize(r) for r in results]
    df = pd.DataFrame.from_records(rows)
    first = [k for k in SUMMARY_KEYS if k in df.columns]
    return df[first + [c for c in df.columns if c not in first]]
