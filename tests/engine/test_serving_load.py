"""benchmark_serving's load and timing in the simulator: at most N requests in the system
(``max_concurrency``, :mod:`pagedsim.engine.concurrency`) and every request's inter-token
gaps (:mod:`pagedsim.metrics.token_gaps`), each checked against the run's own records."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from pagedsim.engine.concurrency import ConcurrencyGate
from pagedsim.engine.simulator import simulate
from pagedsim.experiments.spec import Experiment
from pagedsim.memory.schemes import make_allocator
from pagedsim.metrics.token_gaps import TokenGaps
from pagedsim.workloads.workload import Request


def _run(exp: Experiment, scheme: str = "paged", **kw):
    sched = exp.scheduler_config()
    alloc = make_allocator(scheme, exp.capacity_slots(), exp.block_size, exp.max_model_len,
                           model=exp.model, max_num_seqs=sched.max_num_seqs)
    return simulate(exp.iter_requests(), alloc, exp.cost_model(), sched, scheme=scheme,
                    progress=False, **kw)


def _most_in_system(log) -> int:
    """The most requests in the system at once, from the request rows alone: at each
    arrival, those arrived by then and not yet finished (a request that finishes at the
    very moment another is sent has left)."""
    arrival, finish = log.column("arrival_s"), log.column("finish_s")
    return max(int(((arrival <= t) & (finish > t)).sum()) for t in arrival)


# --------------------------------------------------------------------------------------
# max_concurrency


@pytest.mark.parametrize("rate", [math.inf, 20.0])
@pytest.mark.parametrize("scheme", ["paged", "contiguous-oracle"])
def test_max_concurrency_is_never_exceeded(rate: float, scheme: str) -> None:
    exp = Experiment(num_requests=150, rate_per_s=rate)
    free = _run(exp, scheme).request_log
    assert _most_in_system(free) > 5  # without the cap, more than 5 at once
    capped = _run(exp, scheme, max_concurrency=5).request_log
    assert len(capped) == 150 and not np.isnan(capped.column("finish_s")).any()
    assert _most_in_system(capped) == 5  # reached, never passed
    # A request is sent no earlier than it was due, in the same order.
    due = {r.request_id: r.arrival_s for r in exp.requests()}
    sent = dict(zip(capped.column("request_id").tolist(),
                    capped.column("arrival_s").tolist(), strict=True))
    assert all(sent[i] >= due[i] for i in due)
    order = sorted(due, key=lambda i: (sent[i], i))
    assert order == sorted(due, key=lambda i: (due[i], i))


def test_a_waiting_request_is_sent_when_one_finishes() -> None:
    """Cap 1 at rate inf: each request is sent the moment the one before it finishes,
    so its TTFT counts from then, not from t = 0."""
    exp = Experiment(num_requests=6, rate_per_s=math.inf)
    log = _run(exp, max_concurrency=1).request_log
    arrival, finish = log.column("arrival_s"), log.column("finish_s")
    assert arrival[0] == 0.0
    assert list(arrival[1:]) == list(finish[:-1])


def test_gate_without_cap_passes_requests_through() -> None:
    reqs = [Request(i, 0.5 * i, 10, 5) for i in range(4)]
    gate = ConcurrencyGate(reqs)
    assert [gate.next(100.0) for _ in range(5)] == [*reqs, None]


def test_gate_counts_and_refuses() -> None:
    reqs = [Request(i, 0.0, 10, 5) for i in range(3)]
    gate = ConcurrencyGate(reqs, 2)
    a, b = gate.next(0.0), gate.next(0.0)
    assert (a, b) == (reqs[0], reqs[1]) and gate.next(0.0) is None
    gate.release(1)
    c = gate.next(3.0)
    assert c == replace(reqs[2], arrival_s=3.0) and gate.in_system == 2
    with pytest.raises(ValueError, match="3 requests released, 2 in the system"):
        gate.release(3)
    with pytest.raises(ValueError, match="max_concurrency"):
        ConcurrencyGate(reqs, 0)


# --------------------------------------------------------------------------------------
# token gaps (ITL)


def _gaps_by_hand(exp: Experiment, scheme: str) -> np.ndarray:
    """Every request's gaps between consecutive tokens, from the plans and the step rows
    of a run step by step: a request samples a token in a step where it decodes or ends
    a prefill, and the token is out when that step ends."""
    sampled: dict[int, list[int]] = {}

    def on_step(sched, plan) -> None:
        rids = set(plan.decode_request_ids) | {p.request_id for p in plan.prefills if p.last}
        sampled[plan.step] = sorted(rids)

    result = _run(exp, scheme, on_step=on_step)
    steps = result.steps()
    ends = dict(zip(steps["step"], steps["time_s"] + steps["step_time_s"], strict=True))
    times: dict[int, list[float]] = {}
    for step, rids in sampled.items():
        for rid in rids:
            times.setdefault(rid, []).append(ends[step])
    return np.concatenate([np.diff(t) for t in times.values()])


@pytest.mark.parametrize(("scheme", "kw"), [
    ("paged", dict(rate_per_s=8.0)),
    ("paged", dict(rate_per_s=60.0, capacity_tokens=6000)),  # preemptions: recomputes
    ("paged", dict(policy="chunked", max_num_batched_tokens=256)),
    ("contiguous-pow2", dict(rate_per_s=8.0)),
])
def test_token_gaps_match_the_steps(scheme: str, kw: dict) -> None:
    exp = Experiment(num_requests=200, **kw)
    want = _gaps_by_hand(exp, scheme)
    gaps = TokenGaps()
    result = _run(exp, scheme, token_gaps=gaps)  # steady runs on, where they engage
    assert result.token_gaps is gaps
    np.testing.assert_allclose(np.sort(gaps.values()), np.sort(want), rtol=1e-12)
    # One gap per token after a request's first, summing to its time after the first.
    log = result.request_log
    assert gaps.count == int((log.column("output_len") - 1).sum())
    after_first = log.column("finish_s") - log.column("first_token_end_s")
    assert gaps.values().sum() == pytest.approx(after_first.sum(), rel=1e-12)
    stats = gaps.stats((50, 90, 99))
    assert stats["mean_s"] == pytest.approx(want.mean(), rel=1e-12)
    assert stats["std_s"] == pytest.approx(want.std(), rel=1e-9)
    for q in (50, 90, 99):
        assert stats[f"p{q}_s"] == pytest.approx(np.percentile(want, q), rel=1e-12)


def test_token_gap_stats_are_numpys() -> None:
    gaps = TokenGaps()
    rng = np.random.default_rng(3)
    clock = 0.0
    for _ in range(300):  # random groups of requests sampling at random step ends
        clock += float(rng.exponential(0.02))
        gaps.step(rng.choice(40, size=int(rng.integers(1, 40)), replace=False).tolist(),
                  clock)
    values = gaps.values()
    stats = gaps.stats((0, 1, 50, 99, 100))
    for q in (0, 1, 50, 99, 100):
        assert stats[f"p{q}_s"] == pytest.approx(np.percentile(values, q), rel=1e-12)
    assert TokenGaps().stats()["p99_s"] != TokenGaps().stats()["p99_s"]  # NaN when empty
