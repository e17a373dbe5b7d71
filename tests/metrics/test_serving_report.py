"""benchmark_serving's report of a simulated run (:mod:`pagedsim.metrics.serving_report`):
each number against the same metric computed here from the run's request rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pagedsim.engine.simulator import simulate
from pagedsim.experiments.spec import Experiment
from pagedsim.memory.schemes import make_allocator
from pagedsim.metrics.serving_report import (
    SERVING_KEYS,
    SUMMARY_SERVING_KEYS,
    serving_block,
    serving_fields,
    serving_metrics,
)
from pagedsim.metrics.summary import CSV_LEFT_OUT, summarize
from pagedsim.metrics.token_gaps import TokenGaps


def _run(exp: Experiment, scheme: str):
    sched = exp.scheduler_config()
    alloc = make_allocator(scheme, exp.capacity_slots(), exp.block_size, exp.max_model_len,
                           model=exp.model, max_num_seqs=sched.max_num_seqs)
    return simulate(exp.iter_requests(), alloc, exp.cost_model(), sched, scheme=scheme,
                    progress=False, token_gaps=TokenGaps(),
                    max_concurrency=exp.max_concurrency)


def _expected(result) -> dict[str, float]:
    """The report's numbers, from the request rows as benchmark_serving defines them."""
    df = result.requests()
    ok = df[df["finish_s"].notna()]
    steps = result.steps()
    end_s = float((steps["time_s"] + steps["step_time_s"]).max())
    duration = end_s - df["arrival_s"].min()
    e2el = (ok["finish_s"] - ok["arrival_s"]) * 1000
    ttft = (ok["first_token_end_s"] - ok["arrival_s"]) * 1000
    many = ok["output_len"] > 1
    tpot = (e2el - ttft)[many] / (ok["output_len"][many] - 1)
    itl = result.token_gaps.values() * 1000
    out = {"completed": len(ok), "duration": duration,
           "total_input_tokens": int(ok["prompt_len"].sum()),
           "total_output_tokens": int(ok["output_len"].sum()),
           "request_throughput": len(ok) / duration,
           "output_throughput": ok["output_len"].sum() / duration,
           "total_token_throughput": (ok["prompt_len"].sum() + ok["output_len"].sum())
           / duration}
    for name, v in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el)):
        v = np.asarray(v, dtype=float)
        out.update({f"mean_{name}_ms": v.mean(), f"median_{name}_ms": np.median(v),
                    f"std_{name}_ms": v.std(), f"p99_{name}_ms": np.percentile(v, 99)})
    return out


@pytest.mark.parametrize(("scheme", "kw"), [
    ("paged", dict(rate_per_s=5.0)),
    ("contiguous-oracle", dict(rate_per_s=math.inf, workload="random", random_input_len=300,
                               random_output_len=60, max_concurrency=8)),
    ("paged", dict(policy="chunked", max_num_batched_tokens=512, rate_per_s=12.0)),
])
def test_report_equals_the_metrics_from_the_request_rows(scheme: str, kw: dict) -> None:
    exp = Experiment(num_requests=300, **kw)
    result = _run(exp, scheme)
    want = _expected(result)
    got = serving_metrics(result.request_log, result.token_gaps,
                          float(want["duration"] + result.request_log.column("arrival_s").min()))
    assert set(got) == set(SERVING_KEYS)
    for key in SERVING_KEYS:
        assert got[key] == pytest.approx(want[key], rel=1e-9), key
    # The summary carries them, prefixed, and the committed CSVs leave them out.
    summary = summarize(result)
    assert serving_fields(summary) == pytest.approx(got, rel=1e-12)
    assert set(SUMMARY_SERVING_KEYS) <= set(CSV_LEFT_OUT)


def test_block_prints_the_fields() -> None:
    exp = Experiment(num_requests=100, workload="random", random_input_len=200,
                     random_output_len=20, rate_per_s=math.inf)
    fields = serving_fields(summarize(_run(exp, "paged")))
    text = serving_block(fields, "paged", max_concurrency=4, rate_per_s=math.inf)
    lines = text.splitlines()
    assert lines[0].startswith("=") and "Serving Benchmark Result: paged" in lines[0]
    assert lines[-1] == "=" * 50
    values = {line[:40].strip(): line[41:] for line in lines if ":" in line[:40]}
    assert values["Traffic request rate:"] == "inf"
    assert values["Maximum request concurrency:"] == "4"
    assert values["Successful requests:"] == "100"
    assert values["Total input tokens:"] == "20000"
    assert values["Total generated tokens:"] == "2000"
    for label, key in (("Benchmark duration (s):", "duration"),
                       ("Output token throughput (tok/s):", "output_throughput"),
                       ("Mean TTFT (ms):", "mean_ttft_ms"),
                       ("Median TPOT (ms):", "median_tpot_ms"),
                       ("P99 ITL (ms):", "p99_itl_ms"),
                       ("Mean E2EL (ms):", "mean_e2el_ms")):
        assert values[label] == f"{fields[key]:.2f}"
