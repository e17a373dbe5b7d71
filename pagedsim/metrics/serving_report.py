"""What vLLM's ``benchmark_serving`` (``vllm bench serve``) reports, for a simulated run.

The block it prints after a benchmark, and the fields of the result JSON it saves, under
the same names (so that a simulated run and a measured one can be read side by side, by
eye or by a script written for vLLM's files):

* ``completed``: requests that finished (a rejected request counts as a failed one);
* ``duration``: seconds from the first request sent to the last response's end (here:
  from the first arrival to the end of the last step);
* ``total_input_tokens`` / ``total_output_tokens``: prompt and generated tokens of the
  finished requests (every sample of ``n`` and beam counted, as the simulator's
  throughput does; one stream each in benchmark_serving, where n is 1);
* ``request_throughput`` (req/s), ``output_throughput`` and ``total_token_throughput``
  (tok/s): those over ``duration``;
* for each of ``ttft`` (time to first token: from the request sent to the end of the step
  that sampled its first token), ``tpot`` (time per output token after the first:
  ``(e2el - ttft) / (output_len - 1)`` per request, one-token outputs left out),
  ``itl`` (inter-token latency: every gap between two consecutive tokens of a request,
  pooled over requests, :mod:`.token_gaps`) and ``e2el`` (end-to-end
  latency: from sent to finished), ``mean_<m>_ms``, ``median_<m>_ms``, ``std_<m>_ms``
  and ``p99_<m>_ms`` in milliseconds: numpy's mean, median, population standard
  deviation and 99th percentile (linear interpolation), as benchmark_serving takes them.

A request's clock starts when it is sent: its arrival, or, under ``--max-concurrency``,
when a permit came free (:mod:`pagedsim.engine.concurrency`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from .request_log import RequestLog
    from .token_gaps import TokenGaps

#: The latencies benchmark_serving reports, and the statistics of each.
METRICS = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "median", "std", "p99")
#: The result fields, under benchmark_serving's names (the module docstring has units).
SERVING_KEYS: tuple[str, ...] = (
    "completed", "duration", "total_input_tokens", "total_output_tokens",
    "request_throughput", "output_throughput", "total_token_throughput",
    *(f"{s}_{m}_ms" for m in METRICS for s in STATS),
)
#: A summary holds them with this prefix (``serving_mean_ttft_ms``), apart from its own.
PREFIX = "serving_"
SUMMARY_SERVING_KEYS: tuple[str, ...] = tuple(PREFIX + k for k in SERVING_KEYS)
#: Each metric's section title in the printed block.
_TITLES = {"ttft": "Time to First Token", "tpot": "Time per Output Token (excl. 1st token)",
           "itl": "Inter-token Latency", "e2el": "End-to-end Latency"}
_WIDTH = 50


def _stats_ms(values_s: np.ndarray) -> dict[str, float]:
    if not len(values_s):
        return dict.fromkeys(STATS, math.nan)
    ms = values_s * 1000
    return {"mean": float(ms.mean()), "median": float(np.median(ms)),
            "std": float(ms.std()), "p99": float(np.percentile(ms, 99))}


def serving_metrics(log: RequestLog, gaps: TokenGaps | None, end_s: float
                    ) -> dict[str, float | int]:
    """:data:`SERVING_KEYS` of one run: its per-request rows, its inter-token gaps (None:
    the ITL fields NaN) and the end of its last step (simulated seconds)."""
    finish = log.column("finish_s")
    done = ~np.isnan(finish)
    sent = log.column("arrival_s")
    duration = end_s - float(sent.min()) if len(sent) else 0.0
    sent = sent[done]
    width = np.maximum(log.column("n"), log.column("beam_width"))[done].astype(np.int64)
    out_tokens = int((log.column("num_output")[done].astype(np.int64) * width).sum())
    in_tokens = int(log.column("prompt_len")[done].astype(np.int64).sum())
    completed = int(done.sum())
    ttft = log.column("first_token_end_s")[done] - sent
    e2el = finish[done] - sent
    out_len = log.column("output_len")[done]
    many = out_len > 1
    tpot = (e2el - ttft)[many] / (out_len[many] - 1)

    def per_s(x: float) -> float:
        return x / duration if duration > 0 else math.nan

    out: dict[str, float | int] = {
        "completed": completed, "duration": duration,
        "total_input_tokens": in_tokens, "total_output_tokens": out_tokens,
        "request_throughput": per_s(completed), "output_throughput": per_s(out_tokens),
        "total_token_throughput": per_s(in_tokens + out_tokens),
    }
    itl = dict.fromkeys(STATS, math.nan)
    if gaps is not None:
        st = gaps.stats((50, 99))
        itl = {"mean": st["mean_s"] * 1000, "median": st["p50_s"] * 1000,
               "std": st["std_s"] * 1000, "p99": st["p99_s"] * 1000}
    for name, stats in (("ttft", _stats_ms(ttft)), ("tpot", _stats_ms(tpot)),
                        ("itl", itl), ("e2el", _stats_ms(e2el))):
        for s in STATS:
            out[f"{s}_{name}_ms"] = stats[s]
    return out


def serving_fields(summary: Mapping[str, Any]) -> dict[str, Any]:
    """A summary's (or summary row's) :data:`SERVING_KEYS`, without the prefix."""
    return {k: summary[PREFIX + k] for k in SERVING_KEYS}


def _line(label: str, value: object) -> str:
    if isinstance(value, float):
        value = "nan" if math.isnan(value) else f"{value:.2f}"
    return f"{label:<40} {value}"


def serving_block(fields: Mapping[str, Any], scheme: str,
                  max_concurrency: int | None = None, rate_per_s: float | None = None) -> str:
    """The block benchmark_serving prints, for one scheme's :func:`serving_metrics`
    (the scheme named in its title line; the rate and concurrency limit as it prints
    them, where given)."""
    title = f" Serving Benchmark Result: {scheme} "
    lines = [f"{title:=^{_WIDTH}}"]
    if rate_per_s is not None:
        lines.append(_line("Traffic request rate:", "inf" if math.isinf(rate_per_s)
                           else float(rate_per_s)))
    if max_concurrency is not None:
        lines.append(_line("Maximum request concurrency:", max_concurrency))
    lines += [
        _line("Successful requests:", int(fields["completed"])),
        _line("Benchmark duration (s):", float(fields["duration"])),
        _line("Total input tokens:", int(fields["total_input_tokens"])),
        _line("Total generated tokens:", int(fields["total_output_tokens"])),
        _line("Request throughput (req/s):", float(fields["request_throughput"])),
        _line("Output token throughput (tok/s):", float(fields["output_throughput"])),
        _line("Total Token throughput (tok/s):", float(fields["total_token_throughput"])),
    ]
    for m in METRICS:
        lines.append(f"{_TITLES[m]:-^{_WIDTH}}")
        label = m.upper()
        for s, word in (("mean", "Mean"), ("median", "Median"), ("p99", "P99")):
            lines.append(_line(f"{word} {label} (ms):", float(fields[f"{s}_{m}_ms"])))
    lines.append("=" * _WIDTH)
    return "\n".join(lines)
