"""Summaries computed as the run goes (pagedsim.metrics.step_stats) equal the summaries of
every kept step, to the last digit, whatever a run keeps."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pagedsim.metrics.step_stats as step_stats
from pagedsim.experiments import Experiment, run_scheme
from pagedsim.memory.accounting import CATEGORIES
from pagedsim.metrics.sim_result import STEP_COLUMNS, SimResult
from pagedsim.metrics.step_keep import KeepSteps
from pagedsim.metrics.step_stats import StepStats
from pagedsim.metrics.summary import sharing_saving, summarize, time_weighted_shares


def _frame_numbers(steps: pd.DataFrame) -> dict[str, float]:
    """The per-step part of a summary from the whole frame, as summaries were computed
    before they were kept as the run goes (numpy over every step at once)."""
    out = {f"all_{c}": v for c, v in time_weighted_shares(steps).items()}
    sat = steps[steps["waiting"] > 0]
    out.update({f"sat_{c}": v for c, v in time_weighted_shares(sat).items()})
    total = float(steps["step_time_s"].sum())
    out["saturated_time_fraction"] = (float(sat["step_time_s"].sum()) / total if total > 0
                                      else math.nan)
    ran = steps[steps["batched_requests"] > 0]
    out["mean_batch_size"] = float(ran["batched_requests"].mean()) if len(ran) else math.nan
    sat_ran = sat[sat["batched_requests"] > 0]
    out["sat_mean_batch_size"] = (float(sat_ran["batched_requests"].mean()) if len(sat_ran)
                                  else math.nan)
    out["sharing_saving"] = sharing_saving(steps)
    for c in ("prefill_tokens", "prefill_tokens_cached", "evictions"):
        out[c] = int(steps[c].sum())
    out["num_steps"] = len(steps)
    return out


def _summary_numbers(rows: list[tuple]) -> dict[str, float]:
    r = SimResult(scheme="x", capacity_slots=1)
    r.step_rows = rows
    r.request_rows = []
    s = summarize(r)
    s["prefill_tokens"] = s["prefill_tokens_computed"]
    return {k: s[k] for k in _frame_numbers(pd.DataFrame(columns=list(STEP_COLUMNS)))}


def _same(a: dict, b: dict) -> list:
    """Keys whose values differ (NaN equals NaN); exact comparison, no tolerance."""
    return [(k, a[k], b[k]) for k in b
            if not (a[k] == b[k] or (isinstance(a[k], float) and math.isnan(a[k])
                                     and isinstance(b[k], float) and math.isnan(b[k])))]


@st.composite
def step_rows(draw) -> list[tuple]:
    """Random per-step rows: slot categories partitioning a capacity, step times with
    zeros among them (an all-zero run falls back to equal weights), waiting or not,
    blocks shared or none held."""
    cap = draw(st.integers(1, 50_000))
    n = draw(st.integers(0, 60))
    times = st.one_of(st.just(0.0), st.floats(1e-6, 5.0, allow_nan=False))
    rows = []
    t = 0.0
    for i in range(n):
        cuts = sorted(draw(st.lists(st.integers(0, cap), min_size=5, max_size=5)))
        parts = [b - a for a, b in zip([0, *cuts], [*cuts, cap], strict=True)]
        logical = draw(st.integers(0, 40))
        dt = draw(times)
        row = dict(step=i + 1, time_s=t, step_time_s=dt,
                   running=draw(st.integers(0, 9)), batched_requests=draw(st.integers(0, 9)),
                   waiting=draw(st.integers(0, 3)), swapped=0, capacity=cap,
                   physical_blocks=draw(st.integers(0, logical)), logical_blocks=logical,
                   prefill_tokens=draw(st.integers(0, 3000)), decode_seqs=0, preemptions=0,
                   swaps_out=0, swaps_in=0, cow_copies=draw(st.integers(0, 2)), finished=0,
                   prefill_tokens_cached=draw(st.integers(0, 500)), prefix_query_tokens=0,
                   prefix_hit_tokens=0, evictions=draw(st.integers(0, 5)),
                   **dict(zip(CATEGORIES, parts, strict=True)))
        rows.append(tuple(row[c] for c in STEP_COLUMNS))
        t += dt
    return rows


@settings(max_examples=60, deadline=None)
@given(rows=step_rows(), cuts=st.lists(st.integers(0, 60), max_size=4))
def test_sums_kept_as_the_run_goes_equal_the_whole_frames_to_the_last_digit(rows, cuts):
    frame = pd.DataFrame.from_records(rows, columns=list(STEP_COLUMNS))
    expected = _frame_numbers(frame)
    assert _same(_summary_numbers(rows), expected) == []
    # Fed in chunks of any size, the sums are the same.
    stats = StepStats(STEP_COLUMNS)
    bounds = sorted({0, len(rows), *[c for c in cuts if c <= len(rows)]})
    for a, b in zip(bounds, bounds[1:], strict=False):
        stats.add_rows(rows[a:b])
    stats.finish()
    whole = StepStats.from_rows(rows, STEP_COLUMNS)
    for part in ("all", "sat"):
        assert getattr(stats, part) == getattr(whole, part)
    assert (stats.counts, stats.used_saving, stats.num_steps) == (
        whole.counts, whole.used_saving, whole.num_steps)


def _summaries(exp: Experiment, scheme: str) -> dict[str, dict]:
    return {kind: run_scheme(exp, scheme, keep_steps=keep)
            for kind, keep in (("all", True), ("none", False),
                               ("sample", KeepSteps.sample(50)),
                               ("every", KeepSteps.every(2.0)))}


@pytest.mark.parametrize("exp,scheme", [
    (Experiment(num_requests=150), "contiguous-pow2"),
    (Experiment(num_requests=150, n=3), "paged"),
    (Experiment(workload="system-prompt", num_requests=150), "prefix-cache"),
])
def test_a_run_has_one_summary_whatever_steps_it_keeps(exp, scheme):
    runs = _summaries(exp, scheme)
    summary, steps = runs["all"]
    for kind in ("none", "sample", "every"):
        assert _same(runs[kind][0], summary) == [], kind
    assert runs["none"][1] is None
    assert 25 <= len(runs["sample"][1]) <= 50 < len(steps) == summary["num_steps"]
    # And what it keeps of every step gives, through the old frame formulas, the same.
    frame = _frame_numbers(steps)
    frame["prefill_tokens_computed"] = frame.pop("prefill_tokens")
    assert _same(summary, frame) == []


def test_runs_longer_than_a_block_agree_kept_or_not_and_stay_within_rounding(monkeypatch):
    """Past BLOCK_STEPS steps, block sums are added in order: summaries with and without
    kept steps still agree to the last digit, and they differ from a whole-run pairwise
    sum by rounding only."""
    monkeypatch.setattr(step_stats, "BLOCK_STEPS", 64)
    exp = Experiment(num_requests=120)
    kept, steps = run_scheme(exp, "paged", keep_steps=True)
    unkept, _ = run_scheme(exp, "paged", keep_steps=False)
    assert kept["num_steps"] > 10 * 64
    assert _same(unkept, kept) == []
    whole = _frame_numbers(steps)
    for key in (*[f"{p}_{c}" for p in ("all", "sat") for c in CATEGORIES],
                "saturated_time_fraction", "mean_batch_size"):
        assert kept[key] == pytest.approx(whole[key], rel=1e-12, abs=1e-15), key


def test_block_sums_are_numpys_pairwise_sums():
    """Within a block, a float sum is numpy's of the block's column: the numbers of every
    run of up to BLOCK_STEPS steps are those of its whole frame."""
    rng = np.random.default_rng(3)
    w = rng.random(5000) * 0.05
    token = rng.integers(0, 15_000, 5000)
    rows = [tuple({"step_time_s": float(a), "token": int(b), "capacity": 15_728,
                   "free": 15_728 - int(b)}.get(c, 0) for c in STEP_COLUMNS)
            for a, b in zip(w, token, strict=True)]
    stats = StepStats.from_rows(rows, STEP_COLUMNS)
    assert stats.all.weighted["token"] == float((token * w).sum())
    assert stats.all.time_s == float(w.sum())
