"""Scheduler fuzz harness: random configurations over every registered scheme.

Pools down to a single request, parallel sampling and beam search, both preemption
modes, no swap space, ``max_num_seqs`` 1, tiny token budgets. Every run must end (no
stall), every request must finish exactly once with its output length or be rejected
with a reason the run reports, and the slot categories must partition the pool and the
allocator stay consistent at every step. The ``ci`` profile keeps it to seconds;
``HYPOTHESIS_PROFILE=dev`` runs it for minutes.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import assume, given
from hypothesis import strategies as st

from pagedsim import CostModel, ModelSpec, Request, SchedulerConfig, account, get_gpu, simulate
from pagedsim.memory.schemes import SCHEMES, make_allocator

MAX_MODEL_LEN = 128


def _model(head_dim: int) -> ModelSpec:
    """Rows of ``2 * head_dim`` bytes, so page-sized schemes hold few tokens per page."""
    return ModelSpec("fuzz", num_layers=1, num_heads=1, num_kv_heads=1, head_dim=head_dim,
                     dtype_bytes=2, weights_bytes=0, max_model_len=MAX_MODEL_LEN)


@st.composite
def requests(draw, too_long: bool = False) -> list[Request]:
    """Up to 8 requests; with ``too_long``, some longer than MAX_MODEL_LEN (issue 22:
    they must be rejected with that reason, the others unharmed)."""
    out = []
    for i in range(draw(st.integers(1, 8))):
        prompt = draw(st.integers(1, 60))
        longest = 2 * MAX_MODEL_LEN if too_long and draw(st.booleans()) else MAX_MODEL_LEN
        output = draw(st.integers(1, longest - prompt))
        kind = draw(st.sampled_from(["single", "single", "n", "beam"]))
        width = draw(st.integers(2, 4)) if kind != "single" else 1
        out.append(Request(i, draw(st.sampled_from([0.0, 0.0, 0.01, 0.5])) * i, prompt, output,
                           n=width if kind == "n" else 1,
                           beam_width=width if kind == "beam" else 1))
    return out


@given(
    scheme=st.sampled_from(list(SCHEMES)),
    reqs=st.booleans().flatmap(lambda long: st.tuples(st.just(long), requests(long))),
    capacity=st.integers(8, 1200),
    block_size=st.sampled_from([1, 2, 4, 16, 32]),
    head_dim=st.sampled_from([8192, 65536, 262144]),
    preemption=st.sampled_from(["recompute", "swap"]),
    cpu_swap_slots=st.sampled_from([0, 48, 100_000]),
    max_num_seqs=st.sampled_from([1, 2, 8, 256]),
    max_num_batched_tokens=st.sampled_from([16, 64, 2048]),
    watermark=st.sampled_from([0.0, 0.01, 0.3]),
    policy=st.sampled_from(["v0", "chunked"]),
)
def test_every_request_finishes_once_or_is_rejected(
    scheme, reqs, capacity, block_size, head_dim, preemption, cpu_swap_slots, max_num_seqs,
    max_num_batched_tokens, watermark, policy,
):
    limit, reqs = reqs  # limit: the config names max_model_len (some requests exceed it)
    model = _model(head_dim)
    try:
        alloc = make_allocator(scheme, capacity, block_size, MAX_MODEL_LEN, model=model,
                               max_num_seqs=max_num_seqs)
    except ValueError:  # a pool smaller than one block or page
        assume(False)
    config = SchedulerConfig(max_num_seqs=max_num_seqs,
                             max_num_batched_tokens=max_num_batched_tokens,
                             watermark=watermark, preemption=preemption,
                             cpu_swap_slots=cpu_swap_slots, policy=policy,
                             max_model_len=MAX_MODEL_LEN if limit else None)
    finished: Counter[int] = Counter()

    def check(sched, plan) -> None:
        account(sched.allocator, sched.next_need_slots())  # raises unless a partition
        sched.allocator.check_invariants()
        finished.update(plan.finished)

    cost = CostModel(model, get_gpu("a100-40gb"))
    result = simulate(reqs, alloc, cost, config, scheme=scheme, progress=False, on_step=check)

    reasons = dict(result.rejections)
    outputs = {row[0]: row[9] for row in result.request_rows}  # request_id -> num_output
    for r in reqs:
        rid = r.request_id
        if r.final_len > MAX_MODEL_LEN:
            assert f"more than max_model_len ({MAX_MODEL_LEN})" in reasons.get(rid, ""), rid
        if rid in reasons:
            assert reasons[rid], f"request {rid} rejected without a reason"
            assert finished[rid] == 0, f"request {rid} both finished and rejected"
        else:
            assert finished[rid] == 1, f"request {rid} finished {finished[rid]} times"
            assert outputs[rid] == r.output_len
    assert alloc.num_seqs == 0, "memory left behind after the run"
