"""Summaries of a run (pagedsim.metrics.summary): time weighting, the saturated part, sums to
1."""

from __future__ import annotations

import math

import pytest

from pagedsim.memory.accounting import CATEGORIES
from pagedsim.metrics.sim_result import STEP_COLUMNS, SimResult
from pagedsim.metrics.summary import (
    SUMMARY_KEYS,
    summarize,
    summary_frame,
    time_weighted_shares,
)

CAP = 100


def _step(step: int, time_s: float, dt: float, waiting: int, token: int, reserved: int,
          internal: int, external: int, batched: int = 1, physical: int = 4,
          logical: int = 4) -> tuple:
    free = CAP - token - reserved - internal - external
    row = dict(step=step, time_s=time_s, step_time_s=dt, running=batched,
               batched_requests=batched, waiting=waiting, swapped=0, token=token,
               reserved=reserved, internal_frag=internal, external_frag=external, free=free,
               capacity=CAP, physical_blocks=physical, logical_blocks=logical,
               prefill_tokens=0, decode_seqs=batched, preemptions=0, swaps_out=0,
               swaps_in=0, cow_copies=0, finished=0, cached=0, prefill_tokens_cached=0,
               prefix_query_tokens=0, prefix_hit_tokens=0, evictions=0)
    return tuple(row[c] for c in STEP_COLUMNS)


def _result() -> SimResult:
    """Three steps: 1 s not saturated (token 10), 3 s saturated (token 50), 1 s saturated
    (token 90, sharing 4 physical of 8 logical blocks)."""
    r = SimResult(scheme="hand", capacity_slots=CAP)
    r.step_rows = [
        _step(0, 0.0, 1.0, waiting=0, token=10, reserved=10, internal=0, external=0,
              batched=2),
        _step(1, 1.0, 3.0, waiting=2, token=50, reserved=20, internal=10, external=5,
              batched=4),
        _step(2, 4.0, 1.0, waiting=1, token=90, reserved=5, internal=5, external=0,
              batched=6, physical=4, logical=8),
    ]
    # request_id, arrival_s, prompt_len, output_len, n, beam_width, first_scheduled_s,
    # first_token_s, finish_s, num_output, num_preemptions, cached_prompt_tokens,
    # first_token_end_s
    r.request_rows = [
        (0, 0.0, 10, 10, 1, 1, 0.0, 0.0, 4.0, 10, 0, 0, 1.0),  # latency 4 s -> 0.4 s/token
        (1, 1.0, 10, 20, 2, 1, 1.0, 1.0, 5.0, 20, 0, 0, 4.0),  # latency 4 s -> 0.2 s/token
    ]
    r.num_preemptions, r.num_swaps_out, r.num_cow_copies = 3, 1, 2
    return r


def test_shares_are_time_weighted_and_sum_to_one() -> None:
    s = summarize(_result())
    # token: (10*1 + 50*3 + 90*1) / (100 * 5) = 250 / 500
    assert s["all_token"] == pytest.approx(0.5)
    assert s["all_reserved"] == pytest.approx((10 + 60 + 5) / 500)
    assert s["all_internal_frag"] == pytest.approx((30 + 5) / 500)
    assert s["all_external_frag"] == pytest.approx(15 / 500)
    for part in ("all", "sat"):
        assert sum(s[f"{part}_{c}"] for c in CATEGORIES) == pytest.approx(1.0)


def test_saturated_part_uses_only_steps_with_waiting_requests() -> None:
    s = summarize(_result())
    assert s["sat_token"] == pytest.approx((50 * 3 + 90 * 1) / 400)
    assert s["sat_free"] == pytest.approx((15 * 3 + 0) / 400)
    assert s["saturated_time_fraction"] == pytest.approx(4 / 5)
    assert s["sat_mean_batch_size"] == pytest.approx(5.0)


def test_other_numbers() -> None:
    s = summarize(_result())
    assert s["mean_batch_size"] == pytest.approx(4.0)  # per step, not time-weighted
    assert s["makespan_s"] == pytest.approx(5.0)  # first arrival 0 s, last step ends 5 s
    assert s["generated_tokens"] == 10 + 2 * 20  # every sample counts
    assert s["throughput_tokens_per_s"] == pytest.approx(50 / 5)
    assert s["requests_per_s"] == pytest.approx(2 / 5)
    assert s["p50_normalized_latency_s"] == pytest.approx(0.3)
    # sharing: only the last step shares, 1 - 4/8 = 0.5, weight 1 s of 5 s
    assert s["sharing_saving"] == pytest.approx(0.5 / 5)
    assert (s["preemptions"], s["swaps"], s["cow_copies"], s["num_steps"]) == (3, 1, 2, 3)


def test_ttft_and_tpot_as_vllm_benchmark_serving_defines_them() -> None:
    """TTFT: arrival to the end of the step that sampled the first token; TPOT: (latency -
    TTFT) / (output_len - 1) per request; requests of one output token have no TPOT."""
    s = summarize(_result())
    ttft = [1.0 - 0.0, 4.0 - 1.0]
    tpot = [(4.0 - 1.0) / 9, (4.0 - 3.0) / 19]
    assert s["mean_ttft_s"] == pytest.approx(2.0)
    assert s["p50_ttft_s"] == pytest.approx(2.0)
    assert s["p90_ttft_s"] == pytest.approx(ttft[0] + 0.9 * (ttft[1] - ttft[0]))
    assert s["p99_ttft_s"] == pytest.approx(ttft[0] + 0.99 * (ttft[1] - ttft[0]))
    assert s["p50_tpot_s"] == pytest.approx(sum(tpot) / 2)
    assert s["p90_tpot_s"] == pytest.approx(tpot[1] + 0.9 * (tpot[0] - tpot[1]))
    r = _result()
    r.request_rows = [(0, 0.0, 10, 1, 1, 1, 0.0, 0.0, 2.0, 1, 0, 0, 2.0)]
    s = summarize(r)
    assert s["p50_ttft_s"] == pytest.approx(2.0) and math.isnan(s["p50_tpot_s"])
    df = r.requests()
    assert df["ttft_s"].tolist() == [2.0] and math.isnan(df["tpot_s"].iloc[0])


def test_ttft_of_a_lone_request_is_its_prefill_step_and_tpot_its_decode_steps() -> None:
    """One request alone: its first token comes out when its prefill step ends, and every
    later token one decode step later."""
    from pagedsim.engine.cost import CostModel
    from pagedsim.engine.simulator import simulate
    from pagedsim.memory.schemes import make_allocator
    from pagedsim.models.specs import get_gpu, get_model
    from pagedsim.workloads.workload import Request

    cost = CostModel(get_model("opt-13b"), get_gpu("a100-40gb"))
    r = simulate([Request(0, 2.0, 100, 5)], make_allocator("paged", 4096), cost,
                 scheme="paged", progress=False)
    steps = r.steps()
    assert len(steps) == 5  # one prefill, four decodes
    s = summarize(r)
    assert s["p50_ttft_s"] == pytest.approx(steps["step_time_s"].iloc[0])
    assert s["p50_tpot_s"] == pytest.approx(steps["step_time_s"].iloc[1:].mean())
    row = r.requests().iloc[0]
    assert row["ttft_s"] + 4 * row["tpot_s"] == pytest.approx(row["latency_s"])


def test_no_saturated_step_gives_nan() -> None:
    r = _result()
    r.step_rows = r.step_rows[:1]
    s = summarize(r)
    assert all(math.isnan(s[f"sat_{c}"]) for c in CATEGORIES)
    assert math.isnan(s["sat_mean_batch_size"])
    assert s["all_token"] == pytest.approx(0.1)


def test_zero_length_steps_are_weighted_equally() -> None:
    import pandas as pd

    df = pd.DataFrame.from_records([_step(0, 0, 0.0, 0, 10, 0, 0, 0),
                                    _step(1, 0, 0.0, 0, 30, 0, 0, 0)],
                                   columns=list(STEP_COLUMNS))
    assert time_weighted_shares(df)["token"] == pytest.approx(0.2)


def test_summary_frame_and_a_real_run() -> None:
    from pagedsim.engine.cost import CostModel
    from pagedsim.engine.simulator import simulate
    from pagedsim.memory.schemes import make_allocator
    from pagedsim.models.specs import get_gpu, get_model
    from pagedsim.workloads.workload import WorkloadConfig, generate_workload

    reqs = generate_workload(WorkloadConfig("alpaca", 60, 50.0, seed=1, n=2))
    cost = CostModel(get_model("opt-13b"), get_gpu("a100-40gb"))
    results = [simulate(reqs, make_allocator(s, 4096), cost, scheme=s, progress=False)
               for s in ("contiguous-max", "paged")]
    df = summary_frame(results)
    assert list(df.columns[: len(SUMMARY_KEYS)]) == list(SUMMARY_KEYS)
    assert list(df["scheme"]) == ["contiguous-max", "paged"]
    for _, row in df.iterrows():
        assert sum(row[f"all_{c}"] for c in CATEGORIES) == pytest.approx(1.0)
    paged = df.set_index("scheme").loc["paged"]
    assert paged["sharing_saving"] > 0  # n = 2 shares the prompt's full blocks
    assert paged["generated_tokens"] == sum(2 * r.output_len for r in reqs)
