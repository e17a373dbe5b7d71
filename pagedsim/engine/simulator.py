"""The simulator's executor: replay a workload through scheduler + allocator + cost model.

Time is simulated: each step lasts what :class:`~pagedsim.engine.cost.CostModel` says
(plus the PCIe time of any swap); when nothing can run the clock jumps to the next
arrival. Every step records the six-way slot account of the pool *during* that step
(after the scheduler took and released memory for it).

What a run keeps is the metrics layer's (:mod:`pagedsim.metrics`), handed back as a
:class:`~pagedsim.metrics.sim_result.SimResult`: the sums its summary needs, as it goes
(:mod:`~pagedsim.metrics.step_stats`); one compact row per request
(:mod:`~pagedsim.metrics.request_log`); and the per-step rows ``keep_steps`` asks for
(:mod:`~pagedsim.metrics.step_keep`: all by default, or none, a sample, one per span of
simulated time). Requests may come from any iterable in arrival
order, so a generator or a trace read lazily never sits in memory whole; finished and
rejected requests are forgotten as soon as their row is written.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable

from ..memory.accounting import account
from ..memory.base import Allocator
from ..metrics.host_stats import HostStats
from ..metrics.request_log import RequestLog
from ..metrics.sim_result import STEP_COLUMNS, SimResult
from ..metrics.step_keep import KeepSteps, StepKeeper
from ..metrics.step_stats import StepStats
from ..metrics.token_gaps import TokenGaps
from ..workloads.workload import Request
from .concurrency import ConcurrencyGate
from .cost import CostModel
from .plan import StepPlan
from .scheduler import Scheduler, SchedulerConfig
from .steady import run_steady

__all__ = ["simulate"]

#: Rows handed to the sums and the keeper at a time (one numpy conversion per chunk).
CHUNK_STEPS = 4096


def _swap_time_s(cost: CostModel, plan: StepPlan) -> float:
    """PCIe time of the step's swaps: one copy per record, per layer, for K and for V."""
    copies = [c for g in plan.swap_outs for c in g.out_copies]
    copies += [c for _, cs in plan.swap_ins for c in cs]
    if not copies:
        return 0.0
    slots = sum(c.num_slots for c in copies)
    calls = len(copies) * 2 * cost.model.num_layers
    return cost.swap_time_s(slots * cost.model.bytes_per_token, calls)


def _in_order(requests: Iterable[Request]) -> Iterable[Request]:
    """A list or tuple sorted by (arrival, id) as the simulator always did; any other
    iterable is read lazily and must come in that order already."""
    if isinstance(requests, (list, tuple)):
        # Finished requests leave the scheduler's table, which then cannot tell a
        # repeated id from a new one: a list is checked whole, here.
        seen: set[int] = set()
        for r in requests:
            if r.request_id in seen:
                raise ValueError(f"request id {r.request_id} added twice")
            seen.add(r.request_id)
        return sorted(requests, key=lambda r: (r.arrival_s, r.request_id))
    return _checked_order(requests)


def _checked_order(requests: Iterable[Request]) -> Iterable[Request]:
    """``requests`` as they come, each checked to come after the one before (arrival,
    then id, strictly: so no id comes twice in a row of equal arrivals)."""
    prev = None
    for r in requests:
        key = (r.arrival_s, r.request_id)
        if prev is not None and key == prev:
            raise ValueError(f"request id {r.request_id} added twice")
        if prev is not None and key < prev:
            raise ValueError(f"request {r.request_id} (arrival {r.arrival_s} s) comes after "
                             f"request {prev[1]} (arrival {prev[0]} s): an iterator of "
                             "requests must be in order of arrival, then id (a list is "
                             "sorted)")
        prev = key
        yield r


def _check_unique_ids(log: RequestLog) -> None:
    """An iterator's request ids were checked against the live requests only (finished
    ones are forgotten): check them all once, at the end."""
    import numpy as np

    ids = np.sort(log.column("request_id"))
    same = ids[1:][ids[1:] == ids[:-1]]
    if len(same):
        raise ValueError(f"request id {int(same[0])} added twice")


def simulate(
    requests: Iterable[Request],
    allocator: Allocator,
    cost: CostModel,
    config: SchedulerConfig | None = None,
    scheme: str = "",
    progress: bool | None = None,
    on_step: Callable[[Scheduler, StepPlan], None] | None = None,
    keep_steps: KeepSteps | None = None,
    num_requests: int | None = None,
    on_done: Callable[[int, float], None] | None = None,
    steady_runs: bool = True,
    batch_decodes: bool = True,
    max_concurrency: int | None = None,
    token_gaps: TokenGaps | None = None,
) -> SimResult:
    """Run every request to completion; returns the run's sums and records.

    ``requests``: a list (sorted here) or any iterable in order of arrival, then id (read
    lazily). ``progress``: a tqdm bar on stderr (None: only when stderr is a terminal),
    over ``num_requests`` (default ``len(requests)`` when it has one) with the simulated
    time beside it. ``on_step(scheduler, plan)`` is called after each step is
    scheduled, e.g. to capture allocator snapshots for a step-through picture.
    ``keep_steps``: which per-step rows to keep (default all; the summary never needs
    them). ``on_done(done, simulated_s)``: called whenever requests finish or are
    rejected, with how many are done so far and the simulated clock (seconds).
    ``steady_runs``: run steady decode steps at once where the scheme can (:mod:`.steady`;
    the same rows and results as step by step, which False asks for). Never with
    ``on_step`` or a host tier, which look at every step. ``batch_decodes``: a step's
    decodes go to memory in one call (:mod:`.decode_batch`; the same run, which False
    asks for group by group). ``max_concurrency``: at most
    that many requests in the system at once, the next sent when one ends
    (:mod:`.concurrency`; its record then arrives when it was sent). ``token_gaps``: the
    :class:`TokenGaps` every request's inter-token latencies are recorded in (default a
    new one; the result keeps it), so that a run's summary is the same however it was
    started.
    """
    # The attention kernel of this scheme: block-table lookups cost extra (pagedsim.engine.cost).
    # And its sliding layers read only their windows where the kernel knows them (hybrid).
    cost = cost.with_block_size(allocator.kernel_block_slots).with_windows(
        allocator.kernel_window_tokens)
    sched = Scheduler(allocator, config, cost.window_tokens, batch_decodes)
    keep = keep_steps or KeepSteps.all()
    if num_requests is None and hasattr(requests, "__len__"):
        num_requests = len(requests)  # type: ignore[arg-type]
    gate = ConcurrencyGate(_in_order(requests), max_concurrency)
    gaps = TokenGaps() if token_gaps is None else token_gaps
    stats = StepStats(STEP_COLUMNS)
    keeper = StepKeeper(keep)
    log = RequestLog()
    if progress is None:
        progress = sys.stderr.isatty()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=num_requests, desc=scheme or "simulate", unit="req", leave=False,
                   file=sys.stderr, delay=1.0)  # only runs longer than a second show it
    time_index = STEP_COLUMNS.index("time_s")
    chunk: list[tuple] = []
    rejected: list[tuple[float, int, str]] = []  # (arrival, id, reason)
    groups = sched.groups
    first_end: dict[int, float] = {}  # request id -> end of the step of its first token

    def forget(rids: list[int], finish_s: float | None) -> None:
        """Write the rows of requests done for good and drop them from the scheduler's
        table, so that memory holds only the requests still in the system."""
        nonlocal nxt
        if on_done is not None:
            on_done(len(log) + len(rids), now)
        gate.release(len(rids))
        gaps.forget(rids)
        for rid in rids:
            g = groups.pop(rid)
            r = g.request
            end = first_end.pop(rid, None)
            if g.reject_reason is not None:
                rejected.append((r.arrival_s, rid, g.reject_reason))
                finish = None
            else:
                finish = finish_s
            log.add((rid, r.arrival_s, r.prompt_len, r.output_len, r.n, r.beam_width,
                     g.first_scheduled_s, g.first_token_s, finish, g.num_output,
                     g.num_preemptions, g.cached_prompt_tokens, end))
        if nxt is None:  # a permit came free (--max-concurrency): the next may be sent
            nxt = gate.next(now)

    def show(num_done: int, shown_s: float) -> float:
        """``num_done`` more requests on the bar, and the simulated clock at most once a
        simulated second; returns when the clock was last shown."""
        if bar is not None:
            bar.update(num_done)
            if now - shown_s >= 1.0:
                bar.set_postfix_str(f"simulated {now:,.0f} s", refresh=False)
                return now
        return shown_s

    now = 0.0
    nxt = gate.next(now)
    stalls = 0
    step_time = cost.step_time_s
    evicted = allocator.evicted_blocks
    tier = getattr(allocator, "host", None)  # a host tier behind a prefix cache, or None
    host = None if tier is None else HostStats(  # its copies cost link time
        tier, tier.block_size * cost.model.bytes_per_token, cost.host_transfer_s)
    last_shown = 0.0
    steady = steady_runs and on_step is None and host is None
    while nxt is not None or sched.has_unfinished():
        while nxt is not None and nxt.arrival_s <= now:
            sched.add_request(nxt)
            nxt = gate.next(now)
        if not sched.has_unfinished():
            now = nxt.arrival_s  # type: ignore[union-attr]
            continue
        if steady and (run := run_steady(sched, cost, now,
                                         None if nxt is None else nxt.arrival_s)):
            # Each step of the run recorded as an ordinary one: its row, then the clock,
            # then the arrivals before the next step.
            external = allocator.external_frag_slots(sched.next_need_slots())
            capacity, b = allocator.capacity_slots, run.num_seqs
            last = len(run.usages) - 1
            ends, end = [], now  # every running request sampled in every step of the run
            for dt in run.step_times_s:
                end += dt  # as the clock below adds them
                ends.append(end)
            gaps.steps(run.request_ids, ends)
            for i, (dt, u) in enumerate(zip(run.step_times_s, run.usages, strict=True)):
                chunk.append((
                    run.first_step + i, now, dt, b, b, len(sched.waiting), 0,
                    u.token_slots, u.reserved_slots, u.internal_frag_slots, u.cached_slots,
                    external, u.free_slots - external, capacity, u.physical_blocks,
                    u.logical_blocks, 0, b, 0, 0, 0, 0,
                    len(run.finished) if i == last else 0, 0, 0, 0, 0,
                ))  # fmt: skip
                if len(chunk) >= CHUNK_STEPS:
                    stats.add_rows(chunk)
                    keeper.add_rows(chunk, time_index)
                    chunk = []
                now += dt
                if i == last and run.finished:
                    forget(run.finished, now)
                    last_shown = show(len(run.finished), last_shown)
                while nxt is not None and nxt.arrival_s <= now:
                    sched.add_request(nxt)
                    nxt = gate.next(now)
            stalls = 0
            continue
        plan = sched.schedule(now)
        if plan.is_empty:  # nothing ran: memory was only released, or all must wait
            if on_step is not None and (plan.swap_ins or plan.swap_outs or plan.forks
                                        or plan.cow_copies or plan.host_copies
                                        or plan.host_writes):
                on_step(sched, plan)  # but K/V moved (a swap-in alone): executors must see it
            if host is not None:  # counted; the clock does not move in a step that ran nothing
                host.step(plan.host_copies, plan.host_writes, plan.prefix_host_hit_tokens,
                          0.0, charge=False)
            stalls = 0 if plan.rejected else stalls + 1  # a rejection is progress too
            if not (plan.frees or plan.preempted) and nxt is not None:
                now = max(now, nxt.arrival_s)  # idle until the next arrival
            elif stalls > 3:  # a scheduler bug: every request runs or is rejected
                raise RuntimeError(
                    f"simulation stalled at step {plan.step}: {len(sched.waiting)} waiting, "
                    f"{len(sched.swapped)} swapped, {len(sched.running)} running, "
                    "nothing can run"
                )
            if plan.rejected:
                forget(plan.rejected, None)
                if bar is not None:
                    bar.update(len(plan.rejected))
            continue
        stalls = 0
        acct = account(allocator, sched.next_need_slots())
        dt = step_time(plan.num_prefill_tokens, len(plan.decode_seq_ids), plan.kv_tokens_read,
                       plan.prefill_attn_pairs() if cost.prefill_attention else 0,
                       plan.kv_window_tokens_read)
        if plan.swap_outs or plan.swap_ins:
            dt += _swap_time_s(cost, plan)
        if host is not None:
            dt += host.step(plan.host_copies, plan.host_writes, plan.prefix_host_hit_tokens,
                            dt)
        chunk.append((
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
        if len(chunk) >= CHUNK_STEPS:
            stats.add_rows(chunk)
            keeper.add_rows(chunk, time_index)
            chunk = []
        if on_step is not None:
            on_step(sched, plan)
        # The first token of a request is out when the step that sampled it ends (a
        # prefill's last chunk samples it; the scheduler stamps the step's start).
        starts = [p.request_id for p in plan.prefills
                  if p.last and p.request_id not in first_end
                  and groups[p.request_id].first_token_s == now]
        now += dt
        for rid in starts:
            first_end[rid] = now
        # Who sampled a token in this step: the decodes and the prefills that ended.
        sampled = plan.decode_request_ids
        if plan.prefills:
            sampled = [*sampled, *dict.fromkeys(p.request_id for p in plan.prefills if p.last)]
        gaps.step(sampled, now)
        if plan.finished or plan.rejected:
            if plan.finished:
                forget(plan.finished, now)
            if plan.rejected:
                forget(plan.rejected, None)
            last_shown = show(len(plan.finished) + len(plan.rejected), last_shown)
    stats.add_rows(chunk)
    keeper.add_rows(chunk, time_index)
    stats.finish()
    forget(list(groups), None)  # none is left once every request finished or was rejected
    if not isinstance(requests, (list, tuple)):
        _check_unique_ids(log)
    if bar is not None:
        bar.close()
    return SimResult(scheme=scheme, capacity_slots=allocator.capacity_slots,
                     _step_rows=keeper.finish(), request_log=log, stats=stats,
                     keep_steps=keep,
                     rejections=[(rid, reason) for _, rid, reason in sorted(rejected)],
                     num_preemptions=sched.num_preemptions, num_swaps_out=sched.num_swaps_out,
                     num_cow_copies=stats.counts["cow_copies"], host=host,
                     token_gaps=gaps)
