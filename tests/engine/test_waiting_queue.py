"""The waiting queue keeps a bounded front of groups (pagedsim.engine.waiting_queue): a
run with a tiny front is the same run, and a long queue holds few groups."""

from __future__ import annotations

import pytest

import pagedsim.engine.waiting_queue as waiting_queue
from pagedsim.engine.plan import SequenceGroup
from pagedsim.engine.scheduler import Scheduler, SchedulerConfig
from pagedsim.engine.waiting_queue import LPM_MAX_WAITING, WaitingQueue
from pagedsim.experiments.run_one import run_scheme
from pagedsim.experiments.spec import Experiment
from pagedsim.memory.schemes import make_allocator
from pagedsim.workloads.workload import Request

# Overloaded settings (hundreds wait), over every kind of group and policy the queue sees.
SETTINGS = [
    ("paged", dict()),
    ("paged", dict(policy="chunked")),
    ("prefix-cache", dict(workload="multi-turn", order="lpm")),
    ("radix", dict(workload="system-prompt", policy="chunked", order="lpm")),
    ("paged", dict(n=3, preemption="swap")),
    ("paged", dict(beam_width=3)),
    ("contiguous-max", dict()),
]


@pytest.mark.parametrize(("scheme", "kw"), SETTINGS)
def test_a_run_with_the_smallest_front_is_the_same_run(monkeypatch, scheme, kw):
    exp = Experiment(num_requests=600, rate_per_s=100.0, **kw)
    summary, steps = run_scheme(exp, scheme, keep_steps=True)
    front = LPM_MAX_WAITING + 1  # the smallest front the queue takes
    assert steps["waiting"].max() > front + 100  # the queue grew far past it
    monkeypatch.setattr(waiting_queue, "FRONT_GROUPS", front)
    small_summary, small_steps = run_scheme(exp, scheme, keep_steps=True)
    assert small_summary == summary
    assert small_steps.equals(steps)


def _req(i: int) -> Request:
    return Request(request_id=i, arrival_s=float(i), prompt_len=32, output_len=4)


def test_arrivals_behind_the_front_are_groups_only_when_they_move_up():
    sched = Scheduler(make_allocator("paged", 16 * 64, 16), SchedulerConfig())
    front = LPM_MAX_WAITING + 1
    sched.waiting = WaitingQueue(sched._make_group, front_groups=front)
    made = [sched.add_request(_req(i)) for i in range(front + 70)]
    assert [g is not None for g in made] == [True] * front + [False] * 70
    assert len(sched.waiting) == front + 70 and sched.waiting.num_behind == 70
    assert sorted(sched.groups) == list(range(front))  # the rest are not groups yet
    order = []
    while sched.waiting:
        group = sched.waiting.popleft()
        order.append((group.request.request_id, group.seq_ids))
        assert len(sched.waiting.front) == min(front, len(sched.waiting))
    # FIFO, and each keeps the sequence id it got on arrival
    assert order == [(i, [i + 1]) for i in range(front + 70)]


def test_a_group_that_cannot_be_made_leaves_the_queue_as_it_was():
    def refuse(request: Request, seq_id: int) -> SequenceGroup:
        raise ValueError(f"request id {request.request_id} added twice")

    front = LPM_MAX_WAITING + 1
    queue = WaitingQueue(refuse, front_groups=front)
    for i in range(front):
        queue.append(SequenceGroup(_req(i), [i + 1]))
    queue.append_arrival(_req(front), front + 1)
    with pytest.raises(ValueError, match="added twice"):
        queue.popleft()
    assert len(queue) == front + 1 and queue[0].request.request_id == 0
    assert queue.num_behind == 1


@pytest.mark.parametrize("bad", [0, -1, LPM_MAX_WAITING, 2000.0, "2000", True])
def test_a_bad_front_size_is_refused(bad):
    with pytest.raises(ValueError, match="front_groups must be an integer above LPM_MAX_WAITING"):
        WaitingQueue(lambda r, s: SequenceGroup(r, [s]), front_groups=bad)


def test_arrivals_behind_come_back_equal_in_order_however_many():
    """Plain requests are kept as numbers, others as they came; both come back equal,
    in arrival order, and the numbers' arrays are trimmed as they are taken."""
    front = LPM_MAX_WAITING + 1
    queue = WaitingQueue(lambda r, s: SequenceGroup(r, [s]), front_groups=front)
    arrivals = []
    for i in range(20_000):
        kind = i % 7
        extra = ({"n": 2} if kind == 1 else {"prefix_id": 3} if kind == 2
                 else {"prompt_pieces": (5, 6)} if kind == 3 else {})
        r = Request(request_id=i, arrival_s=i * 0.1 + 1e-9, prompt_len=600 + i % 5,
                    output_len=1 + i % 300, **extra)
        arrivals.append((r, 10 * i))
        if queue.wants_group():
            queue.append(SequenceGroup(r, [10 * i]))
        else:
            queue.append_arrival(r, 10 * i)
    assert queue.num_behind == 20_000 - front
    out = []
    while queue:
        group = queue.popleft()
        out.append((group.request, group.seq_ids[0]))
        assert len(queue._rest.ids) <= 2 * (len(queue) + 4096)  # taken ones are dropped
    assert out == arrivals
