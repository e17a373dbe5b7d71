"""Steady decode steps run at once (pagedsim.engine.steady) make the same run as steps one
by one: the same summary and every step's row, whether the runs engage or not."""

from __future__ import annotations

import pytest

import pagedsim.engine.simulator as simulator
from pagedsim.engine.cost import CostModel
from pagedsim.engine.steady import run_steady
from pagedsim.experiments.run_one import run_scheme
from pagedsim.experiments.spec import Experiment
from pagedsim.memory.schemes import make_allocator
from pagedsim.models.specs import get_gpu, get_model
from pagedsim.workloads.workload import Request

# (scheme, experiment settings, whether steady runs engage: True for most steps, None
# for some, False never)
SETTINGS = [
    ("paged", dict(rate_per_s=5.0), True),  # overloaded: the head waits, refused
    ("paged", dict(rate_per_s=0.5), True),  # light: arrivals at an empty queue end runs
    ("paged", dict(rate_per_s=60.0, capacity_tokens=6000), True),  # preemptions
    ("paged", dict(rate_per_s=5.0, block_size=1), True),
    ("paged", dict(rate_per_s=5.0, block_size=2), True),
    # max_num_seqs holds the head back, not memory: runs only while nobody waits
    ("paged", dict(rate_per_s=5.0, max_num_seqs=8), None),
    ("paged", dict(n=2, rate_per_s=3.0), False),  # samples fork: never steady
    ("paged", dict(beam_width=2, rate_per_s=3.0), False),
    ("paged", dict(policy="chunked"), False),
    ("paged", dict(order="lpm", workload="multi-turn"), True),  # lpm: only an empty queue
    ("paged", dict(preemption="swap", rate_per_s=60.0, capacity_tokens=6000), True),
    ("prefix-cache", dict(), False),  # a cache names blocks as they fill: step by step
    ("contiguous-max", dict(), False),
    ("vattention", dict(), False),
]


@pytest.mark.parametrize(("scheme", "kw", "engages"), SETTINGS)
def test_steady_runs_make_the_same_run(monkeypatch, scheme, kw, engages):
    exp = Experiment(num_requests=400, **kw)
    steady_steps = []

    def counted(*args):
        run = run_steady(*args)
        if run is not None:
            steady_steps.append(len(run.usages))
        return run

    monkeypatch.setattr(simulator, "run_steady", counted)
    summary, steps = run_scheme(exp, scheme, keep_steps=True)
    monkeypatch.setattr(simulator, "run_steady", lambda *args: None)
    one_by_one, one_steps = run_scheme(exp, scheme, keep_steps=True)
    assert summary == one_by_one
    assert steps.equals(one_steps)
    if engages:  # most steps ran in runs, so the comparison means something
        assert sum(steady_steps) > 0.3 * len(steps), (sum(steady_steps), len(steps))
    elif engages is None:
        assert steady_steps
    else:
        assert not steady_steps


def test_simulate_asked_step_by_step_runs_no_steady_steps(monkeypatch):
    calls = []
    monkeypatch.setattr(simulator, "run_steady", lambda *a: calls.append(a))
    reqs = [Request(i, 0.1 * i, 100, 50) for i in range(30)]
    cost = CostModel(get_model("opt-13b"), get_gpu("a100-40gb"))
    simulator.simulate(reqs, make_allocator("paged", 16 * 400, 16), cost, progress=False,
                       steady_runs=False)
    assert not calls
    simulator.simulate(reqs, make_allocator("paged", 16 * 400, 16), cost, progress=False)
    assert calls
