"""The simulator's executor: replay a workload through scheduler + allocator + cost model.

Time is simulated: each step lasts what :class:`~pagedsim.engine.cost.CostModel` says
(plus the PCIe time of any swap); when nothing can run the clock jumps to the next
arrival. Every step records the six-way slot account of the pool *during* that step
(after the scheduler took and released memory for it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..memory.accounting import account
from ..memory.base import Allocator
from ..workloads.workload import Request
from .cost import CostModel
from .plan import StepPlan
from .scheduler import Scheduler, SchedulerConfig

STEP_COLUMNS = (
    "step", "time_s", "step_time_s", "running", "batched_requests", "waiting", "swapped",
    "token", "reserved", "internal_frag", "cached", "external_frag", "free", "capacity",
    "physical_blocks", "logical_blocks", "prefill_tokens", "decode_seqs",
    "preemptions", "swaps_out", "swaps_in", "cow_copies", "finished",
    "prefill_tokens_cached", "prefix_query_tokens", "prefix_hit_tokens", "evictions",
)  # fmt: skip
REQUEST_COLUMNS = (
    "request_id", "arrival_s", "prompt_len", "output_len", "n", "beam_width",
    "first_scheduled_s", "first_token_s", "finish_s", "num_output", "num_preemptions",
    "cached_prompt_tokens",
)  # fmt: skip


@dataclass(slots=True)
class SimResult:
    """Raw records of one run; :mod:`pagedsim.experiments.metrics` turns them into frames and
    summaries."""

    scheme: str
    capacity_slots: int
    step_rows: list[tuple] = field(default_factory=list)  # one tuple per step, STEP_COLUMNS
    request_rows: list[tuple] = field(default_factory=list)  # REQUEST_COLUMNS
    num_preemptions: int = 0
    num_swaps_out: int = 0
    num_cow_copies: int = 0
    #: Requests that can never run, with the scheduler's reason: ``(request_id, reason)``.
    rejections: list[tuple[int, str]] = field(default_factory=list)

    def steps(self):
        """Per-step records as a pandas DataFrame (slot columns in token slots)."""
        import pandas as pd

        return pd.DataFrame.from_records(self.step_rows, columns=list(STEP_COLUMNS))

    def requests(self):
        """Per-request records as a pandas DataFrame (times in simulated seconds)."""
        import pandas as pd

        df = pd.DataFrame.from_records(self.request_rows, columns=list(REQUEST_COLUMNS))
        df["latency_s"] = df["finish_s"] - df["arrival_s"]
        df["normalized_latency_s"] = df["latency_s"] / df["output_len"]
        return df


def _swap_time_s(cost: CostModel, plan: StepPlan) -> float:
    """PCIe time of the step's swaps: one copy per record, per layer, for K and for V."""
    copies = [c for g in plan.swap_outs for c in g.out_copies]
    copies += [c for _, cs in plan.swap_ins for c in cs]
    if not copies:
        return 0.0
    slots = sum(c.num_slots for c in copies)
    calls = len(copies) * 2 * cost.model.num_layers
    return cost.swap_time_s(slots * cost.model.bytes_per_token, calls)


def simulate(
    requests: Sequence[Request],
    allocator: Allocator,
    cost: CostModel,
    config: SchedulerConfig | None = None,
    scheme: str = "",
    progress: bool | None = None,
    on_step: Callable[[Scheduler, StepPlan], None] | None = None,
) -> SimResult:
    """Run every request to completion; returns the per-step and per-request records.

    ``progress``: a tqdm bar on stderr (None: only when stderr is a terminal).
    ``on_step(scheduler, plan)`` is called after each step is scheduled, e.g. to
    capture allocator snapshots for a step-through picture.
    """
    # The attention kernel of this scheme: block-table lookups cost extra (pagedsim.engine.cost).
    cost = cost.with_block_size(allocator.kernel_block_slots)
    sched = Scheduler(allocator, config)
    reqs = sorted(requests, key=lambda r: (r.arrival_s, r.request_id))
    result = SimResult(scheme=scheme, capacity_slots=allocator.capacity_slots)
    rows = result.step_rows
    if progress is None:
        progress = sys.stderr.isatty()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(reqs), desc=scheme or "simulate", unit="req", leave=False,
                   file=sys.stderr, delay=1.0)  # only runs longer than a second show it
    now = 0.0
    i, n = 0, len(reqs)
    stalls = 0
    step_time = cost.step_time_s
    evicted = allocator.evicted_blocks
    while i < n or sched.has_unfinished():
        while i < n and reqs[i].arrival_s <= now:
            sched.add_request(reqs[i])
            i += 1
        if not sched.has_unfinished():
            now = reqs[i].arrival_s
            continue
        plan = sched.schedule(now)
        if plan.is_empty:  # nothing ran: memory was only released, or all must wait
            if on_step is not None and (plan.swap_ins or plan.swap_outs or plan.forks
                                        or plan.cow_copies):
                on_step(sched, plan)  # but K/V moved (a swap-in alone): executors must see it
            stalls = 0 if plan.rejected else stalls + 1  # a rejection is progress too
            if not (plan.frees or plan.preempted) and i < n:
                now = max(now, reqs[i].arrival_s)  # idle until the next arrival
            elif stalls > 3:  # a scheduler bug: every request runs or is rejected
                raise RuntimeError(
                    f"simulation stalled at step {plan.step}: {len(sched.waiting)} waiting, "
                    f"{len(sched.swapped)} swapped, {len(sched.running)} running, "
                    "nothing can run"
                )
            if bar is not None and plan.rejected:
                bar.update(len(plan.rejected))
            continue
        stalls = 0
        acct = account(allocator, sched.next_need_slots())
        dt = step_time(plan.num_prefill_tokens, len(plan.decode_seq_ids), plan.kv_tokens_read)
        if plan.swap_outs or plan.swap_ins:
            dt += _swap_time_s(cost, plan)
        rows.append((
            plan.step, now, dt, len(plan.decode_seq_ids) + len(plan.prefills),
            plan.num_batched_requests, len(sched.waiting), len(sched.swapped),
            acct.token, acct.reserved, acct.internal_frag, acct.cached, acct.external_frag,
            acct.free, acct.capacity, acct.physical_blocks, acct.logical_blocks,
            plan.num_prefill_tokens, len(plan.decode_seq_ids), len(plan.preempted),
            len(plan.swap_outs), len(plan.swap_ins), len(plan.cow_copies), len(plan.finished),
            plan.num_prefill_tokens_cached, plan.prefix_query_tokens, plan.prefix_hit_tokens,
            allocator.evicted_blocks - evicted,
        ))  # fmt: skip
        evicted = allocator.evicted_blocks
        if on_step is not None:
            on_step(sched, plan)
        now += dt
        for rid in plan.finished:
            sched.groups[rid].finish_s = now
        if bar is not None and (plan.finished or plan.rejected):
            bar.update(len(plan.finished) + len(plan.rejected))
    if bar is not None:
        bar.close()
    for g in sched.groups.values():
        r = g.request
        result.request_rows.append((
            r.request_id, r.arrival_s, r.prompt_len, r.output_len, r.n, r.beam_width,
            g.first_scheduled_s, g.first_token_s, g.finish_s, g.num_output, g.num_preemptions,
            g.cached_prompt_tokens,
        ))  # fmt: skip
    result.rejections = [(g.request.request_id, g.reject_reason) for g in sched.groups.values()
                         if g.reject_reason is not None]
    result.num_preemptions = sched.num_preemptions
    result.num_swaps_out = sched.num_swaps_out
    cow = STEP_COLUMNS.index("cow_copies")
    result.num_cow_copies = sum(r[cow] for r in rows)
    return result
