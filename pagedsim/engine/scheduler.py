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

from ..memory.base import Allocator, SeqId
from ..memory.kv_cache_manager import KVCacheManager
from ..workloads.workload import Request
from .admission import admit
from .beams import BeamModel
from .plan import ForkItem, SequenceGroup, StepPlan
from .preemption import swap_in_all
from .running import LastBatch, run_running
from .scheduler_config import POLICIES, PREEMPTION_MODES, SchedulerConfig
from .scheduler_reasons import too_long_reason
from .waiting_queue import WaitingQueue

# The configuration lives in its own module; these names stay importable from here.
__all__ = ["POLICIES", "PREEMPTION_MODES", "BeamModel", "Scheduler", "SchedulerConfig"]


class Scheduler:
    """FCFS continuous batching over ``allocator``; one :meth:`schedule` call per step.

    It asks memory only through :class:`~pagedsim.memory.kv_cache_manager.KVCacheManager`
    (``self.kv``), the eleven calls of vLLM v1's shape; ``self.allocator`` is kept for
    whoever drives the same allocator's data (the kernels' caches, pictures, tests).
    """

    def __init__(self, allocator: Allocator, config: SchedulerConfig | None = None,
                 windows: tuple[int, ...] = ()) -> None:
        self.allocator = allocator
        self.kv = KVCacheManager(allocator)
        self.config = config or SchedulerConfig()
        self.beams = BeamModel(self.config.beam_decay, self.config.seed)
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
        #: The last step in which every running group decoded in one call (None: unknown).
        self._last_batch: LastBatch | None = None
        #: (head of the queue, its tokens, the slots it takes): the head changes far less
        #: often than a step is accounted.
        self._head_need: tuple[SequenceGroup, int, int] | None = None

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
        if not self.swapped:
            admit(self, plan, now_s, self.config.max_num_batched_tokens)
            if plan.prefills:
                return []
        victims, _ = run_running(self, plan, budget=None)
        if not victims:
            swap_in_all(self, plan)
        return victims

    def _step_chunked(self, plan: StepPlan, now_s: float) -> list[SequenceGroup]:
        """vLLM v1 / Sarathi-Serve: running requests first (one token per decoding
        sequence, the next chunk of a chunked prefill), then new prompts fill what is
        left of the token budget, a long one split across steps."""
        victims, budget = run_running(self, plan, self.config.max_num_batched_tokens)
        if not victims:
            swap_in_all(self, plan)
            if not self.swapped and budget:
                admit(self, plan, now_s, budget, chunked=True)
        return victims

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
