"""A step's decodes in one call (pagedsim.engine.decode_batch) make the same run as the
scheduler's plain path, group by group: the same summary and every step's row, on every
registered scheme (issue 33: speed apart from the reading path, proven identical)."""

from __future__ import annotations

import pytest

import pagedsim.engine.scheduler as scheduler_module
import pagedsim.engine.simulator as simulator
from pagedsim.engine.decode_batch import decode_lone_front, decode_running
from pagedsim.experiments.run_one import run_scheme
from pagedsim.experiments.spec import Experiment
from pagedsim.memory.schemes import SCHEMES

# Overloaded with preemptions (v0, samples and swapping among them), and chunked prefill
# with a token budget: whole batches, partial ones (as many as fit) and lone fronts.
SETTINGS = {
    "v0-preempting": dict(num_requests=50, rate_per_s=40.0, capacity_tokens=5000),
    "v0-samples-swap": dict(num_requests=30, rate_per_s=20.0, capacity_tokens=5000, n=2,
                            preemption="swap"),
    "chunked": dict(num_requests=50, rate_per_s=40.0, capacity_tokens=5000,
                    policy="chunked", max_num_batched_tokens=64),
}


def _run(monkeypatch, exp: Experiment, scheme: str, batch: bool, seen: list[str]):
    real = scheduler_module.Scheduler

    def make(allocator, config=None, windows=(), batch_decodes=True):
        return real(allocator, config, windows, batch_decodes=batch)

    def whole(*args):
        done = decode_running(*args)
        seen.append("whole" if done.num_groups and not done.next_alone
                    else "partial" if done.num_groups else "none")
        return done

    def front(*args):
        ran, budget = decode_lone_front(*args)
        seen.append("front" if ran else "none")
        return ran, budget

    monkeypatch.setattr(simulator, "Scheduler", make)
    monkeypatch.setattr(scheduler_module, "decode_running", whole)
    monkeypatch.setattr(scheduler_module, "decode_lone_front", front)
    return run_scheme(exp, scheme, keep_steps=True)


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_decodes_in_one_call_make_the_same_run(monkeypatch, scheme, setting):
    exp = Experiment(**SETTINGS[setting])
    seen: list[str] = []
    summary, steps = _run(monkeypatch, exp, scheme, True, seen)
    plain_seen: list[str] = []
    plain_summary, plain_steps = _run(monkeypatch, exp, scheme, False, plain_seen)
    assert not plain_seen  # the plain path never calls the shortcut
    assert "whole" in seen  # the comparison means something
    assert summary == plain_summary
    assert steps.equals(plain_steps)


def test_the_settings_reach_partial_batches_and_lone_fronts(monkeypatch):
    """The shortcut's two other branches run in these settings too (on paged)."""
    seen: list[str] = []
    for setting in SETTINGS.values():
        _run(monkeypatch, Experiment(**setting), "paged", True, seen)
    assert {"whole", "partial", "front"} <= set(seen), set(seen)
