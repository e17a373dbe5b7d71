"""vLLM 0.6's multi-step scheduling (``num_scheduler_steps``): decodes run in blocks of k
steps and waiting prompts are admitted only between blocks."""

from __future__ import annotations

import pytest

from pagedsim.engine.cost import CostModel
from pagedsim.engine.scheduler_config import SchedulerConfig
from pagedsim.engine.simulator import simulate
from pagedsim.memory.schemes import make_allocator
from pagedsim.models.specs import get_gpu, get_model
from pagedsim.workloads.workload import Request


def _kinds(k: int, arrivals: list[float]) -> list[str]:
    """Per step: 'P' once per prompt it prefilled, or 'D' (it only decoded)."""
    model = get_model("llama-3.1-8b")
    config = SchedulerConfig(max_model_len=4096, num_scheduler_steps=k)
    alloc = make_allocator("paged", 16 * 1024, 16, 4096, model=model)
    cost = CostModel(model, get_gpu("a100-80gb"))
    reqs = [Request(i, a, 100, 40) for i, a in enumerate(arrivals)]
    kinds: list[str] = []
    simulate(reqs, alloc, cost, config, on_step=lambda s, plan: kinds.append(
        "P" * len(plan.prefills) or "D"))
    return kinds


@pytest.mark.parametrize("k", [1, 4, 10])
def test_admission_waits_for_the_end_of_a_block(k: int) -> None:
    # Requests arrive while the first decodes; each is admitted at the first step that
    # starts a block: k decode steps after the last prefill (every step when k = 1).
    arrivals = [0.0, 0.02, 0.05, 0.11, 0.2]
    kinds = _kinds(k, arrivals)
    assert "".join(kinds).count("P") == len(arrivals)
    run = 0
    for kind in kinds:
        if "P" in kind:
            assert run % k == 0, (k, kinds)
            run = 0
        else:
            run += 1
    if k > 1:  # some request did wait for a block to end
        assert _kinds(1, arrivals) != kinds


def test_multi_step_needs_v0() -> None:
    with pytest.raises(ValueError, match="num_scheduler_steps 4 needs policy 'v0'"):
        SchedulerConfig(policy="chunked", num_scheduler_steps=4)
    with pytest.raises(ValueError, match="num_scheduler_steps must be >= 1"):
        SchedulerConfig(num_scheduler_steps=0)
