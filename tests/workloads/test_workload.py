"""Workload generation: determinism, length distributions, bounds, Poisson arrivals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagedsim.workloads.workload import (
    PAPER_MEAN_LENS,
    Request,
    WorkloadConfig,
    clip_lengths,
    generate_workload,
    summarize_workload,
)


def lens(requests: list[Request]) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([r.prompt_len for r in requests]),
            np.array([r.output_len for r in requests]))


# ---------------------------------------------------------------- Request

def test_request_final_len_and_defaults() -> None:
    r = Request(0, 0.5, 10, 20)
    assert r.final_len == 30
    assert (r.n, r.beam_width, r.prefix_id) == (1, 1, None)


def test_request_coerces_numpy_scalars() -> None:
    r = Request(np.int64(3), np.float32(1.5), np.int32(7), np.int64(8), prefix_id=np.int64(2))
    assert type(r.request_id) is int and type(r.prompt_len) is int
    assert type(r.arrival_s) is float and type(r.prefix_id) is int


@pytest.mark.parametrize("kwargs, match", [
    ({"prompt_len": 0}, "prompt_len"),
    ({"output_len": 0}, "output_len"),
    ({"n": 0}, "n"),
    ({"arrival_s": -1.0}, "arrival_s"),
    ({"arrival_s": math.nan}, "arrival_s"),
    ({"n": 2, "beam_width": 2}, "beam_width"),
    ({"prefix_id": -1}, "prefix_id"),
])
def test_request_rejects_bad_values(kwargs: dict, match: str) -> None:
    args = {"request_id": 0, "arrival_s": 0.0, "prompt_len": 1, "output_len": 1} | kwargs
    with pytest.raises(ValueError, match=match):
        Request(**args)


def test_request_rejects_non_integers() -> None:
    with pytest.raises(TypeError):
        Request(0, 0.0, 1.5, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Request(0, 0.0, True, 1)  # type: ignore[arg-type]


# ---------------------------------------------------------------- config validation

@pytest.mark.parametrize("kwargs", [
    {"kind": "lmsys"},
    {"num_requests": 0},
    {"rate_per_s": 0.0},
    {"rate_per_s": -1.0},
    {"rate_per_s": math.nan},
    {"max_model_len": 1},
    {"n": 2, "beam_width": 3},
    {"kind": "fixed", "prompt_len": 2000, "output_len": 100},
    {"kind": "uniform", "prompt_len_range": (10, 5)},
    {"kind": "uniform", "prompt_len_range": (0, 5)},
    {"kind": "uniform", "prompt_len_range": (1, 2000), "output_len_range": (1, 100)},
])
def test_config_rejects_bad_values(kwargs: dict) -> None:
    with pytest.raises((ValueError, TypeError)):
        WorkloadConfig(**kwargs)


# ---------------------------------------------------------------- determinism

def test_same_seed_same_workload_and_different_seed_differs() -> None:
    config = WorkloadConfig(num_requests=500, rate_per_s=3.0, seed=7)
    assert generate_workload(config) == generate_workload(WorkloadConfig(
        num_requests=500, rate_per_s=3.0, seed=7))
    assert generate_workload(config) != generate_workload(WorkloadConfig(
        num_requests=500, rate_per_s=3.0, seed=8))


def test_rate_does_not_change_lengths() -> None:
    slow = generate_workload(WorkloadConfig(num_requests=300, rate_per_s=1.0, seed=3))
    fast = generate_workload(WorkloadConfig(num_requests=300, rate_per_s=50.0, seed=3))
    assert [(r.prompt_len, r.output_len) for r in slow] == \
        [(r.prompt_len, r.output_len) for r in fast]
    assert [r.arrival_s for r in slow] != [r.arrival_s for r in fast]


# ---------------------------------------------------------------- distributions

@pytest.mark.parametrize("kind", ["sharegpt", "alpaca"])
@pytest.mark.parametrize("seed", [0, 1])
def test_means_close_to_paper(kind: str, seed: int) -> None:
    requests = generate_workload(WorkloadConfig(kind=kind, num_requests=100_000, seed=seed,
                                                max_model_len=2048))
    prompt, output = lens(requests)
    target_in, target_out = PAPER_MEAN_LENS[kind]
    # 1.5% is >= 3.5 standard errors of the mean at 100k draws for all four means.
    assert prompt.mean() == pytest.approx(target_in, rel=0.015)
    assert output.mean() == pytest.approx(target_out, rel=0.015)


def test_documented_measured_means() -> None:
    """The module docstring quotes the means of seed 0, 100k requests; keep it honest."""
    documented = {"sharegpt": (160.42, 338.99), "alpaca": (19.26, 58.63)}
    for kind, (mean_in, mean_out) in documented.items():
        summary = summarize_workload(generate_workload(
            WorkloadConfig(kind=kind, num_requests=100_000, seed=0, max_model_len=2048)))
        assert summary["mean_prompt_len"] == pytest.approx(mean_in, abs=0.01)
        assert summary["mean_output_len"] == pytest.approx(mean_out, abs=0.01)


def test_sharegpt_is_heavy_tailed() -> None:
    """Right-skewed: the mean sits well above the median, and the p99 far above both."""
    summary = summarize_workload(generate_workload(WorkloadConfig(num_requests=20_000)))
    for name in ("prompt_len", "output_len"):
        assert summary[f"mean_{name}"] > 1.2 * summary[f"p50_{name}"]
        assert summary[f"p99_{name}"] > 3 * summary[f"mean_{name}"]


@given(
    kind=st.sampled_from(["sharegpt", "alpaca", "fixed", "uniform"]),
    max_model_len=st.integers(2, 4096),
    seed=st.integers(0, 2**32),
    num_requests=st.integers(1, 300),
)
def test_every_request_fits_max_model_len(kind: str, max_model_len: int, seed: int,
                                          num_requests: int) -> None:
    half = max_model_len // 2
    config = WorkloadConfig(kind=kind, num_requests=num_requests, seed=seed,
                            max_model_len=max_model_len, prompt_len=half, output_len=half,
                            prompt_len_range=(1, half), output_len_range=(1, half))
    requests = generate_workload(config)
    assert len(requests) == num_requests
    assert [r.request_id for r in requests] == list(range(num_requests))
    for r in requests:
        assert r.prompt_len >= 1 and r.output_len >= 1
        assert r.final_len <= max_model_len
        if kind == "fixed":
            assert (r.prompt_len, r.output_len) == (half, half)
        if kind == "uniform":
            assert 1 <= r.prompt_len <= half and 1 <= r.output_len <= half


def test_uniform_covers_its_inclusive_range() -> None:
    requests = generate_workload(WorkloadConfig(kind="uniform", num_requests=2000,
                                                prompt_len_range=(3, 6),
                                                output_len_range=(1, 2)))
    prompt, output = lens(requests)
    assert set(prompt.tolist()) == {3, 4, 5, 6}
    assert set(output.tolist()) == {1, 2}


@given(st.integers(1, 10_000), st.integers(1, 10_000), st.integers(2, 4096))
def test_clip_lengths(prompt_len: int, output_len: int, max_model_len: int) -> None:
    p, o = clip_lengths(prompt_len, output_len, max_model_len)
    assert 1 <= p <= prompt_len and 1 <= o <= output_len
    assert p + o <= max_model_len
    if prompt_len + output_len <= max_model_len:
        assert (p, o) == (prompt_len, output_len)


def test_n_and_beam_width_reach_every_request() -> None:
    assert all(r.n == 4 for r in generate_workload(WorkloadConfig(num_requests=10, n=4)))
    assert all(r.beam_width == 3
               for r in generate_workload(WorkloadConfig(num_requests=10, beam_width=3)))


# ---------------------------------------------------------------- arrivals

@pytest.mark.parametrize("rate_per_s", [0.5, 2.0, 30.0])
def test_poisson_interarrival_mean_is_one_over_rate(rate_per_s: float) -> None:
    requests = generate_workload(WorkloadConfig(num_requests=20_000, rate_per_s=rate_per_s,
                                                seed=11))
    arrivals = np.array([r.arrival_s for r in requests])
    assert np.all(np.diff(arrivals) >= 0) and arrivals[0] > 0
    gaps = np.diff(np.concatenate([[0.0], arrivals]))
    # Standard error of the mean gap is 1/rate/sqrt(20000), about 0.7%.
    assert gaps.mean() == pytest.approx(1 / rate_per_s, rel=0.03)
    # Exponential gaps: standard deviation equals the mean.
    assert gaps.std() == pytest.approx(1 / rate_per_s, rel=0.05)


def test_infinite_rate_puts_everything_at_zero() -> None:
    requests = generate_workload(WorkloadConfig(num_requests=50, rate_per_s=math.inf))
    assert all(r.arrival_s == 0.0 for r in requests)


# ---------------------------------------------------------------- summary

def test_summary_of_a_small_known_workload() -> None:
    requests = [Request(0, 0.0, 10, 1), Request(1, 1.0, 20, 3), Request(2, 4.0, 30, 5)]
    s = summarize_workload(requests)
    assert s["num_requests"] == 3
    assert s["mean_prompt_len"] == 20 and s["p50_prompt_len"] == 20
    assert s["mean_output_len"] == 3 and s["max_output_len"] == 5
    assert s["max_final_len"] == 35
    assert s["duration_s"] == 4.0 and s["mean_interarrival_s"] == 2.0
    assert math.isnan(summarize_workload(requests[:1])["mean_interarrival_s"])
    with pytest.raises(ValueError):
        summarize_workload([])


def test_workload_config_refuses_more_requests_than_a_run_simulates():
    """Issue 22: 2**53 requests asked numpy for 64 PiB before any check."""
    from pagedsim.workloads.workload import MAX_NUM_REQUESTS, MIN_RATE_PER_S, WorkloadConfig

    with pytest.raises(ValueError, match="num_requests must be <= 10,000,000"):
        WorkloadConfig(num_requests=2**53)
    with pytest.raises(ValueError, match=r"rate_per_s must be >= 1e-06 requests/s"):
        WorkloadConfig(rate_per_s=5e-324)
    assert WorkloadConfig(num_requests=MAX_NUM_REQUESTS, rate_per_s=MIN_RATE_PER_S)
