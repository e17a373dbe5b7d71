"""Iteration-level continuous batching (as Orca and vLLM do it), over any allocator.

Every step the scheduler:

1. applies what the previous step decided: frees finished requests and dropped beams,
   forks new samples/beams (children share the parent's blocks when the scheme shares);
2. runs what its policy allows (``SchedulerConfig.policy``):

   * ``v0`` (the default, vLLM v0 as in the paper): if nothing is swapped out, admit
     waiting requests in queue order (``SchedulerConfig.order``: FCFS, or ``lpm``'s
     longest cached prefix first) and prefill them with the whole token budget; a step
     that prefills does not decode. Otherwise decode one token for every running
     sequence, oldest request first, and if nothing was preempted bring swapped requests
     back, oldest first;
   * ``chunked`` (vLLM v1, Sarathi-Serve): decode every running sequence and give
     partly prefilled requests their next chunk, oldest first; bring swapped requests
     back; then admit waiting requests into what is left of the token budget, a long
     single-sequence prompt split into chunks across steps;

   when an append or a chunk cannot get memory it preempts whole requests, newest first
   (``recompute``: free and requeue at the front of the queue; ``swap``: move its blocks
   to a CPU pool). Admission holds memory, ``max_num_seqs`` and ``max_num_batched_tokens``
   to their limits; the allocator decides whether a request fits, keeping a watermark
   free where its scheme applies one, as vLLM's block manager does;
3. counts the sampled token of every group that ran (a chunked prefill samples after its
   last chunk) and decides what happens next step (finish, fork samples after a
   prefill, which beams survive).

It returns a :class:`~pagedsim.engine.plan.StepPlan`; it never touches K/V data.

Parallel sampling (``n`` > 1): the prompt is prefilled once, then forked n-1 times;
paged allocation shares the prompt's blocks and copies only the last, partly filled
one when the samples diverge. Schemes that cannot share (contiguous regions,
vAttention) hold room for every sample from admission, so the fork cannot fail, and
copy the prompt into it. The scheduler only names the children; the allocator decides.

Beam search (``beam_width`` k): after every step, k survivors are chosen among the
beams' continuations by :class:`BeamModel`: survivor j's parent is beam i with
probability proportional to ``decay ** i`` (beam 0 is the best so far). Parents with
several survivors are forked, parents with none are dropped.

Preempting a group of several sequences swaps it even in ``recompute`` mode, as vLLM
v0 does, when the CPU pool has room: recomputing each sequence's prompt and generated
tokens separately would lose the group's sharing. Without room (e.g.
``cpu_swap_slots=0``) the group restarts instead: its sequences are dropped, and it is
admitted again like a new request (the prompt prefilled once, the samples or beams
forked again), so it regains its sharing and its outputs are generated again.

A request that can never run is rejected, with a reason the run reports
(``SequenceGroup.reject_reason``, ``StepPlan.rejected``; :mod:`pagedsim.engine.scheduler_reasons`):
one longer than ``max_model_len``, one wider than ``max_num_seqs``, a prompt longer than
``max_num_batched_tokens`` under ``v0``, one that does not fit the pool while nothing
else holds memory, and one that outgrows the whole pool while running alone. Nothing
else is ever dropped. A swapped group comes back past the watermark when nothing runs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from ..memory.base import Allocator, KVCopy, SeqId
from ..memory.kv_cache_manager import Grant, KVCacheManager
from ..workloads.workload import Request
from .beams import BeamModel
from .decode_batch import LastBatch, decode_lone_front, decode_running
from .plan import ForkItem, SequenceGroup, StepPlan
from .scheduler_config import POLICIES, PREEMPTION_MODES, SchedulerConfig
from .scheduler_reasons import describe, no_fit_reason, outgrows_reason, too_long_reason
from .waiting_queue import WaitingQueue, order_waiting

# The configuration lives in its own module; these names stay importable from here.
__all__ = ["POLICIES", "PREEMPTION_MODES", "BeamModel", "Scheduler", "SchedulerConfig"]


class Scheduler:
    """FCFS continuous batching over ``allocator``; one :meth:`schedule` call per step.

    It asks memory only through :class:`~pagedsim.memory.kv_cache_manager.KVCacheManager`
    (``self.kv``), the eleven calls of vLLM v1's shape; ``self.allocator`` is kept for
    whoever drives the same allocator's data (the kernels' caches, pictures, tests).
    """

    def __init__(self, allocator: Allocator, config: SchedulerConfig | None = None,
                 windows: tuple[int, ...] = (), batch_decodes: bool = True) -> None:
        self.allocator = allocator
        self.kv = KVCacheManager(allocator)
        self.config = config or SchedulerConfig()
        # Beam search's seeded stand-in for scores, made at the first beam search: no
        # other draw comes from it, so a run without beams never needs it.
        self.beams: BeamModel | None = None
        self.waiting = WaitingQueue(self._make_group)
        self.running: list[SequenceGroup] = []
        self.swapped: deque[SequenceGroup] = deque()
        self.groups: dict[int, SequenceGroup] = {}  # every group made and not forgotten
        self.cpu_used_slots = 0
        self.step_index = 0
        self._next_seq = 0
        self._to_free: list[SeqId] = []  # released at the start of the next step
        self._children: dict[int, list[SeqId]] = {}  # request id -> samples to fork
        self.num_preemptions = self.num_rejected = 0
        # Memory only comes back when the scheduler releases some: count releases, and
        # skip re-trying an admission that failed since the last one (the simulator's hot
        # path: a saturated run tries the head of the queue at every step).
        self._releases = 0
        self._blocked: tuple[SequenceGroup, int, int] | None = None  # group, chunk, epoch
        self.num_swaps_out = self.num_swaps_in = self.num_cow_copies = 0
        # The longest request the model runs (tokens): the config's, else the allocator's
        # (contiguous regions and vAttention's virtual regions are that long); None: no limit.
        limits = [m for m in (self.config.max_model_len, self.kv.max_model_len)
                  if m is not None]
        self.max_model_len: int | None = min(limits) if limits else None
        self._too_long: list[SequenceGroup] = []  # rejected at the start of the next step
        # For the cost model, not memory: the sliding windows whose reads each plan
        # counts (StepPlan.kv_window_tokens_read; the simulator passes its cost model's).
        self._windows: tuple[int, ...] = tuple(windows)
        self._decoded: list[SequenceGroup] = []  # groups that decoded this step, in order
        self._pending = False  # whether a running group may have pending forks or frees
        #: Whether a step's decodes go to memory in one call (:mod:`.decode_batch`: the
        #: same run, faster); the plain path asks group by group.
        self.batch_decodes = batch_decodes
        #: The last step in which every running group decoded in one call (None: unknown).
        self._last_batch: LastBatch | None = None
        #: (head of the queue, its tokens, the slots it takes): the head changes far less
        #: often than a step is accounted.
        self._head_need: tuple[SequenceGroup, int, int] | None = None
        #: Decode steps since the last prefill step (multi-step blocks, num_scheduler_steps).
        self._block_steps = 0

    # ---------------------------------------------------------------- requests
    def add_request(self, request: Request) -> SequenceGroup | None:
        """A new arrival joins the waiting queue; its group, or None while it waits behind
        the queue's front (:mod:`.waiting_queue`: made a group when it moves up)."""
        if request.request_id in self.groups:
            raise ValueError(f"request id {request.request_id} added twice")
        seq_id = self._new_seq_id()  # on arrival, wherever it waits: the same ids
        limit = self.max_model_len
        too_long = limit is not None and request.prompt_len + request.output_len > limit
        if not too_long and not self.waiting.wants_group():
            self.waiting.append_arrival(request, seq_id)
            return None
        group = self._make_group(request, seq_id)
        if too_long:
            self._too_long.append(group)  # never queued: no allocator is asked about it
        else:
            self.waiting.append(group)
        return group

    def _make_group(self, request: Request, seq_id: SeqId) -> SequenceGroup:
        if request.request_id in self.groups:
            raise ValueError(f"request id {request.request_id} added twice")
        group = SequenceGroup(request, [seq_id])
        self.groups[request.request_id] = group
        group.block_hashes = self.kv.hashes_of(request)  # hashed lazily, once
        return group

    def add_requests(self, requests: Iterable[Request]) -> None:
        for r in requests:
            self.add_request(r)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running or self.swapped or self._to_free
                    or self._too_long)

    def _new_seq_id(self) -> int:
        self._next_seq += 1
        return self._next_seq

    def next_need_slots(self) -> int | None:
        """Slots the head of the waiting queue would take (external-fragmentation test)."""
        if not self.waiting:
            return None
        g = self.waiting[0]
        num_tokens = g.request.prompt_len + g.num_output
        memo = self._head_need
        if memo is None or memo[0] is not g or memo[1] != num_tokens:
            memo = self._head_need = (
                g, num_tokens, self.kv.facts(num_tokens, g.kv_final_len).slots_per_seq)
        return memo[2]

    # -------------------------------------------------------------------- step
    def schedule(self, now_s: float = 0.0) -> StepPlan:
        """Decide one step and update the allocator; see the module docstring."""
        self.step_index += 1
        plan = StepPlan(step=self.step_index, windows=self._windows,
                        kv_window_tokens_read=[0] * len(self._windows))
        kv = self.kv

        # 1. What the previous step decided (rooms held for samples never forked, too).
        self._release(self._to_free, plan, only_held=True)
        self._to_free = []
        for group in self._too_long:
            assert self.max_model_len is not None
            self._reject(group, plan, too_long_reason(group, self.max_model_len))
        self._too_long = []
        for group in self.running if self._pending else ():
            if group.pending_frees:
                self._release(group.pending_frees, plan)
                group.pending_frees = []
            if group.pending_forks:
                self._releases += 1  # a fork into held room may move it (a new hole layout)
                for parent, child in group.pending_forks:
                    plan.forks.append(ForkItem(parent, child, kv.fork(parent, child)))
                group.pending_forks = []
        self._pending = False

        # 2-4. Run what the policy allows: prefills and/or decodes, swap-ins.
        if self.config.policy == "v0":
            victims = self._step_v0(plan, now_s)
        else:
            victims = self._step_chunked(plan, now_s)
        # Recompute victims go back to the front of the queue, oldest first.
        if victims:
            for victim in sorted(victims, key=lambda g: g.request.arrival_s, reverse=True):
                if victim.status == "waiting":
                    self.waiting.appendleft(victim)

        # 5. Count the sampled tokens and decide what the next step does.
        self._after_sampling(plan, now_s)
        moved = kv.host_transfers()  # a host tier's copies, once the step's are all made
        if moved is not None:
            plan.host_copies, plan.host_writes = moved
        return plan

    # ---------------------------------------------------------------- policies
    def _step_v0(self, plan: StepPlan, now_s: float) -> list[SequenceGroup]:
        """vLLM v0 (the paper's vLLM): a step prefills or decodes, never both. New prompts
        get the whole token budget, so a long prompt never waits behind running decodes
        (no head-of-line drain); when nothing can be admitted, everyone running decodes,
        and swapped requests come back if nothing was preempted."""
        steps = self.config.num_scheduler_steps
        # Multi-step (vLLM 0.6): a block of decode steps is not interrupted by admission.
        if not self.swapped and (steps == 1 or not self.running
                                 or self._block_steps % steps == 0):
            self._admit(plan, now_s, self.config.max_num_batched_tokens)
            if plan.prefills:
                self._block_steps = 0
                return []
        self._block_steps += 1
        victims, _ = self._run_running(plan, budget=None)
        if not victims:
            self._swap_in_all(plan)
        return victims

    def _step_chunked(self, plan: StepPlan, now_s: float) -> list[SequenceGroup]:
        """vLLM v1 / Sarathi-Serve: running requests first (one token per decoding
        sequence, the next chunk of a chunked prefill), then new prompts fill what is
        left of the token budget, a long one split across steps."""
        victims, budget = self._run_running(plan, self.config.max_num_batched_tokens)
        if not victims:
            self._swap_in_all(plan)
            if not self.swapped and budget:
                self._admit(plan, now_s, budget, chunked=True)
        return victims

    # --------------------------------------------------------------- admission
    def _admit(self, plan: StepPlan, now_s: float, budget: int,
              chunked: bool = False) -> None:
        """Admit waiting requests in queue order (``order``) within ``budget`` prefill tokens.

        ``chunked``: a single-sequence request whose prefill exceeds what is left of the
        budget starts with a chunk (the rest follows in later steps); otherwise a prompt
        larger than the whole budget is rejected (v0), and a recomputation larger than it
        (a preempted request's prompt plus its generated tokens) runs alone.
        """
        cfg = self.config
        order_waiting(self.waiting.front, self.kv, cfg.order)  # the rest is behind, in order
        if not chunked and self.head_is_blocked():
            # The loop below would stop at the head (a saturated run's every step; unchunked,
            # it asks for the same tokens).
            return
        num_seqs = self._num_running_seqs()
        while self.waiting:
            group = self.waiting[0]
            recompute = group.num_output > 0
            width = len(group.seq_ids) if recompute else group.width
            num_tokens = group.request.prompt_len + group.num_output
            if width > cfg.max_num_seqs:
                self._reject(self.waiting.popleft(), plan,
                             f"it runs {width} sequences at once, more than max_num_seqs "
                             f"({cfg.max_num_seqs})")
                continue
            can_chunk = chunked and width == 1
            # A prefix cache serves the first ``hit`` tokens: only the rest is computed.
            hit = self.kv.get_computed_tokens(group.block_hashes, group.seq_ids[0], num_tokens)
            prefill_tokens = (num_tokens - hit) * (len(group.seq_ids) if recompute else 1)
            if not can_chunk and not recompute and num_tokens > cfg.max_num_batched_tokens:
                self._reject(self.waiting.popleft(), plan,
                             f"{describe(group)}: its prompt is longer than "
                             f"max_num_batched_tokens ({cfg.max_num_batched_tokens}), the "
                             "most one step prefills (the chunked policy would split it)")
                continue
            if num_seqs + width > cfg.max_num_seqs:
                break
            chunk = hit + min(num_tokens - hit, budget) if can_chunk else num_tokens
            if chunk == hit:
                break
            # A recomputation larger than the whole token budget would wait forever: it
            # runs alone.
            alone = not plan.prefills and not plan.decode_seq_ids
            if prefill_tokens > budget and not can_chunk and not alone:
                break
            blocked = self._blocked
            # Memory comes back when the scheduler releases some, or when the scheme gives
            # blocks back on its own (a sliding window's): either is a new epoch.
            epoch = self._releases + self.kv.freed_while_running_blocks
            if (blocked is not None and blocked[0] is group and chunk >= blocked[1]
                    and blocked[2] == epoch):
                break  # it did not fit, and nothing was released since
            grant = self._allocate_group(group, chunk, recompute)
            if grant is None:
                if self.kv.num_seqs or self.running:
                    self._blocked = (group, chunk, epoch)
                    break  # memory will be released: wait
                # Nothing else holds memory. The watermark keeps room for running requests'
                # growth; with none running it must not keep a request out for good.
                grant = self._allocate_group(group, chunk, recompute, watermark=0.0)
                if grant is None:
                    facts = self.kv.facts(chunk, group.kv_final_len)
                    self._reject(self.waiting.popleft(), plan,
                                 no_fit_reason(facts, group, chunk, recompute))
                    continue
            self.waiting.popleft()
            group.status = "running"
            group.prefill_end_tokens = num_tokens
            group.num_computed_tokens = chunk
            if group.first_scheduled_s is None:
                group.first_scheduled_s = now_s
            if group.cached_prompt_tokens is None:
                group.cached_prompt_tokens = min(grant.computed_tokens[0], group.request.prompt_len)
            done = plan.add_admitted(group, num_tokens, chunk, recompute, grant)
            self.running.append(group)
            num_seqs += width
            budget -= done

    def head_is_blocked(self) -> bool:
        """Whether the head of the waiting queue did not fit, and no memory came back since
        (the scheduler released none, nor did the scheme on its own)."""
        blocked = self._blocked
        return (blocked is not None and bool(self.waiting) and blocked[0] is self.waiting[0]
                and blocked[2] == self._releases + self.kv.freed_while_running_blocks)


    def _allocate_group(self, group: SequenceGroup, num_tokens: int, recompute: bool,
                        watermark: float | None = None) -> Grant | None:
        """All the memory the group needs now, or nothing (returns None).

        A recomputed group re-prefills every sequence; a new one prefills its first
        sequence and names the samples it will fork after the first token, so that the
        allocator can hold room for them if its scheme needs any.
        """
        watermark = self.config.watermark if watermark is None else watermark
        allocate = self.kv.allocate_slots
        if recompute:
            return allocate(group.seq_ids, num_tokens, hashes=group.block_hashes,
                            final_len=group.kv_final_len, watermark=watermark)
        # The children's ids are only taken when the admission succeeds.
        children = [self._next_seq + 1 + i for i in range(group.width - 1)]
        grant = allocate(group.seq_ids[:1], num_tokens, hashes=group.block_hashes,
                         final_len=group.kv_final_len, fork_ids=children, watermark=watermark)
        if grant is not None:
            self._next_seq += len(children)
            self._children[group.request.request_id] = children
        return grant

    # ----------------------------------------------------------------- running
    def _run_running(self, plan: StepPlan, budget: int | None
                    ) -> tuple[list[SequenceGroup], int | None]:
        """Give every running group its next tokens, oldest first, preempting the newest
        requests when memory runs out. ``budget`` (tokens) limits the step, or None.
        Returns the preempted groups and the budget left."""
        allocate = self.kv.allocate_slots
        decoded = self._decoded = []
        running = self.running
        start = 0  # groups at the front of ``running`` that have run already
        batch = self.batch_decodes  # whether to try the front of the queue in one call
        if batch and running:
            # The common step, every running group decoding: one call (:mod:`.decode_batch`).
            done = decode_running(running, self.kv, plan, budget, self._last_batch)
            start, budget, self._last_batch = done.num_groups, done.budget, done.last
            decoded.extend(running[:start])
            if start == len(running):
                return [], budget
            batch = not done.next_alone  # the next one did not fit: it goes alone
        queue = deque(running[start:] if start else running)
        self.running = running[:start]
        victims: list[SequenceGroup] = []
        while queue:
            if batch and len(queue) > 1 and budget != 0:  # a front of lone decodes at once
                ran, budget = decode_lone_front(queue, self.kv, plan, budget)
                for _ in ran:
                    queue.popleft()
                decoded.extend(ran)
                self.running.extend(ran)
                if not queue:
                    break
            batch = self.batch_decodes
            group = queue.popleft()
            chunk = group.prefill_left  # > 0: the next chunk of a chunked prefill
            if chunk > 0:
                want = chunk if budget is None else min(chunk, budget)
            else:
                want = len(group.seq_ids)
            if budget is not None and (want == 0 or want > budget):
                self.running.append(group)  # no budget left this step: it waits
                continue
            # A chunk: ``want`` tokens of its one sequence; a decode: one token each.
            while (grant := allocate(group.seq_ids, want if chunk > 0 else 1)) is None:
                if not queue and not self.running:  # alone, and still no room: never will be
                    self._reject(group, plan, outgrows_reason(self.kv.facts(0), group))
                    break
                victim = queue.pop() if queue else group
                self._preempt(victim, plan)
                victims.append(victim)
                if victim is group:
                    break
            else:
                if chunk > 0:
                    start = group.num_computed_tokens
                    group.num_computed_tokens += want
                    plan.add_chunk(group, start, want, grant)
                else:  # its token is counted computed with the sample (_after_sampling)
                    plan.add_decode(group, grant)
                    decoded.append(group)
                self.running.append(group)
                if budget is not None:
                    budget -= want
        return victims, budget


    # -------------------------------------------------------------- preemption
    def _preempt(self, group: SequenceGroup, plan: StepPlan) -> None:
        """Take ``group``'s memory back: swap it out (``swap`` mode, or a group of several
        sequences while the CPU pool has room) or free it to be recomputed from the front
        of the waiting queue (the scheduler puts it there)."""
        self.num_preemptions += 1
        self._releases += 1
        group.num_preemptions += 1
        plan.preempted.append(group.request.request_id)
        # Swap when asked to, and (as vLLM v0 does) for groups of several sequences even
        # under recompute, because recomputing them separately would lose their sharing;
        # recompute whenever the CPU pool has no room.
        cfg = self.config
        wants_swap = cfg.preemption == "swap" or len(group.seq_ids) > 1
        swapped = (self.kv.swap_out(group.seq_ids, cfg.cpu_swap_slots - self.cpu_used_slots)
                   if wants_swap else None)
        if swapped is not None:
            self.cpu_used_slots += swapped.cpu_slots
            group.swapped = swapped
            group.status = "swapped"
            plan.swap_outs.append(swapped)
            self.swapped.append(group)
            self.num_swaps_out += 1
        else:  # recompute (also when the CPU pool is full)
            plan.frees.extend(self.kv.free(group.seq_ids))
            group.status = "waiting"
            group.num_computed_tokens = 0  # a recomputation starts its prefill over
            if len(group.seq_ids) > 1:  # restart: prefill once and fork again (sharing back)
                group.seq_ids = [self._new_seq_id()]
                group.num_output = 0
                group.pending_forks = []
                group.pending_frees = []


    def _swap_in_all(self, plan: StepPlan) -> None:
        """Swapped requests come back first, oldest first. With nothing running, the oldest
        comes back even into the watermark (as admission does): the watermark keeps room for
        running requests' growth, and nothing else could ever free it."""
        cfg = self.config
        while self.swapped:
            group = self.swapped[0]
            assert group.swapped is not None
            if self._num_running_seqs() + len(group.seq_ids) > cfg.max_num_seqs:
                return
            copies = self.kv.swap_in(group.swapped, cfg.watermark)
            if copies is None and not self.running:
                copies = self.kv.swap_in(group.swapped, watermark=0.0)
            if copies is None:
                return
            self.swapped.popleft()
            self._swapped_in(group, copies, plan)


    def _swapped_in(self, group: SequenceGroup, copies: list[KVCopy],
                    plan: StepPlan) -> None:
        """``group`` is back on the GPU (``copies``: CPU -> GPU): it runs again."""
        assert group.swapped is not None
        plan.swap_ins.append((group.swapped, copies))
        self.cpu_used_slots -= group.swapped.cpu_slots
        group.swapped = None
        group.status = "running"
        self.running.append(group)
        self.num_swaps_in += 1

    # ------------------------------------------------------------- steady runs
    def steady_decodes(self) -> tuple[list[SeqId], list[int], int, int] | None:
        """When the next step would be the last one again, one token on (every running
        group decodes its one sequence; nothing to release, reject, fork or swap in;
        admission would stop at once: :mod:`.steady` says why each matters), the decodes
        it would make: ``(seq_ids, request_ids, kv_tokens, steps_left)``, where
        ``kv_tokens`` is the context the last such step attended over and ``steps_left``
        the steps until the first group finishes. None otherwise. Changes nothing."""
        running = self.running
        if (not running or self._pending or self._to_free or self._too_long or self.swapped
                or self.config.policy != "v0" or self._windows
                or self.config.num_scheduler_steps > 1):  # blocks counted step by step
            return None
        if self.waiting and (self.config.order != "fcfs" or not self.head_is_blocked()):
            return None
        steps_left = min(g.request.output_len - g.num_output for g in running)
        last = self._last_batch
        if (last is not None and last.running is running and last.num_running == len(running)
                and last.lone):
            return last.seq_ids, last.request_ids, last.kv_tokens, steps_left
        seq_ids, rids, kv_tokens = [], [], 0  # gathered as _run_running and add_decodes do
        for group in running:
            if (group.prefill_end_tokens > group.num_computed_tokens
                    or len(group.seq_ids) != 1 or group.width != 1):
                return None  # a chunk to prefill, or samples or beams to fork and choose
            seq_ids += group.seq_ids
            rids.append(group.request.request_id)
            kv_tokens += group.request.prompt_len + group.num_output
        # As if it were the last step's: a token short each.
        return seq_ids, rids, kv_tokens - len(seq_ids), steps_left

    def advance_decodes(self, num_steps: int, seq_ids: list[SeqId], request_ids: list[int],
                        kv_tokens: int) -> list[int]:
        """Count ``num_steps`` steps of the decodes :meth:`steady_decodes` gave (memory
        has made them already, :meth:`~.KVCacheManager.decode_steps`): every running
        group sampled ``num_steps`` tokens. Returns the request ids that finished, in
        running order (in the last step)."""
        running = self.running
        self.step_index += num_steps
        finished: list[int] = []
        for group in running:  # every group sampled num_steps tokens (_after_sampling's)
            group.num_computed_tokens += num_steps
            group.num_output += num_steps
            if group.num_output >= group.request.output_len:
                self._finish(group, finished)
        self._last_batch = LastBatch(running, len(running), seq_ids, request_ids,
                                     kv_tokens + num_steps * len(seq_ids), True)
        if finished:  # a new running list, as after any finish
            self.running = [g for g in running if g.status != "finished"]
        return finished

    # ------------------------------------------------------------ after a step
    def _release(self, seq_ids: list[SeqId], plan: StepPlan, only_held: bool = False) -> None:
        """Free ``seq_ids`` (``only_held``: those that own memory), one release event when
        there are any, and say so in the plan."""
        freed = self.kv.free(seq_ids, only_held)
        self._releases += bool(freed)
        plan.frees.extend(freed)

    def _after_sampling(self, plan: StepPlan, now_s: float) -> None:
        """Every group that ran this step sampled one more token (all its sequences)."""
        groups = self.groups
        any_finished = False
        # Groups whose prefill ended this step: their first token, or a recomputation's.
        last = dict.fromkeys(p.request_id for p in plan.prefills if p.last) \
            if plan.prefills else ()  # most steps only decode
        for rid in last:
            group = groups[rid]
            group.num_output += 1
            if group.first_token_s is None:
                group.first_token_s = now_s
            if group.num_output >= group.request.output_len:
                self._finish(group, plan.finished)
                any_finished = True
            elif group.width > 1:
                self._widen(group)
        # Decoding groups (the hot loop: a decoding group has sampled before, and has all
        # its samples or beams; a group prefills or decodes in a step, never both).
        for group in self._decoded:
            group.num_computed_tokens += 1  # the token this step's decode wrote
            group.num_output += 1
            if group.num_output >= group.request.output_len:
                self._finish(group, plan.finished)
                any_finished = True
            elif group.width > 1:
                self._widen(group)
        self._decoded = []
        if any_finished:
            self.running = [g for g in self.running if g.status != "finished"]

    def _widen(self, group: SequenceGroup) -> None:
        """After a sampled token of a group of several samples or beams: fork the samples
        its prompt's first token starts, or choose which beams survive."""
        self._pending = True  # forks and frees for the next step
        self._last_batch = None  # its sequences change
        if len(group.seq_ids) < group.width:  # the prompt's first sampled tokens
            parent = group.seq_ids[0]
            for child in self._children.pop(group.request.request_id):
                group.pending_forks.append((parent, child))
                group.seq_ids.append(child)
        elif group.request.beam_width > 1:
            self._select_beams(group)

    def _select_beams(self, group: SequenceGroup) -> None:
        if self.beams is None:
            self.beams = BeamModel(self.config.beam_decay, self.config.seed)
        survivors, forks, dropped = self.beams.select(group.seq_ids, self._new_seq_id)
        group.pending_frees.extend(dropped)
        group.pending_forks.extend(forks)
        group.seq_ids = survivors

    def _finish(self, group: SequenceGroup, finished: list[int]) -> None:
        """``group`` sampled its last token: its memory goes at the next step, and its
        request id joins ``finished`` (the step's)."""
        group.status = "finished"
        group.block_hashes = None  # its blocks keep what names them; the run keeps the group
        self._to_free.extend(group.seq_ids)
        # Samples never forked (a one-token output) give back any room held for them
        # (released only where the scheme held some).
        self._to_free.extend(self._children.pop(group.request.request_id, []))
        finished.append(group.request.request_id)

    def _num_running_seqs(self) -> int:
        return sum([len(g.seq_ids) for g in self.running])

    # --------------------------------------------------------------- rejection
    def _reject(self, group: SequenceGroup, plan: StepPlan, reason: str) -> None:
        """The request can never run: release what it holds and say why."""
        rid = group.request.request_id
        self._releases += 1
        owned = self.kv.free([*group.seq_ids, *self._children.pop(rid, [])], only_held=True)
        plan.frees.extend(owned)
        group.status = "rejected"
        group.block_hashes = None
        group.reject_reason = reason
        group.pending_forks, group.pending_frees = [], []
        plan.rejected.append(rid)
        self.num_rejected += 1
