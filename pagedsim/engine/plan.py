"""The seam between scheduling and execution: one step's plan.

Each step the :class:`~pagedsim.engine.scheduler.Scheduler` decides what runs and updates
the allocator's bookkeeping; it returns a :class:`StepPlan` that an *executor* carries
out. The simulator's executor only advances the cost model and the accounting; a real
executor (``pagedsim.kernels.executor``) moves K/V data and runs a model. A real executor must
apply the plan's data movements in this order, which is the order in which the
scheduler took and released memory, so that no slot is overwritten before it is read:

1. scrub (if it keeps a sentinel) memory released before this step's forks, that is
   everything released except this step's ``swap_outs`` sources and the GPU blocks that
   ``host_copies`` write back (each is scrubbed once read, unless a load then fills it);
2. ``forks``: copies that give forked sequences their parent's tokens (schemes that do
   not share). The scheduler forks before it preempts, so a fork writes only into
   memory it held before any preemption of this step; a group may fork and then be
   swapped out in the same step, so forks run before the swap-out reads;
3. ``swap_outs``: GPU -> CPU copies of preempted groups (their blocks are already free
   in the allocator and may be handed out again below, so read them now);
3b. ``host_copies``, in list order (a host tier's, :mod:`pagedsim.memory.host_tier`):
   write-backs of evicted cached blocks to the host (read before the block is reused)
   and loads of host hits into the fresh blocks of the prefills that follow them; the
   order matters, since a host block written back may be one an earlier load read;
4. ``cow_copies``: copy-on-write block copies of this step's appends and chunks;
5. ``swap_ins``: CPU -> GPU copies of groups coming back;
6. then run the model: ``prefills`` write their prompt's K/V, ``decodes`` write one
   token each into ``decode_slots`` and attend over their sequence;
7. ``host_writes``: write-through of the blocks the model has just computed to the host.

Sequences in ``frees`` were released before anything else (finished, dropped beams,
preempted by recomputation); their K/V is garbage from now on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..memory.base import KVCopy, SeqId, SwappedGroup
from ..memory.host_tier import HostCopy
from ..workloads.block_hashes import BlockHashes
from ..workloads.workload import Request

if TYPE_CHECKING:
    from ..memory.kv_cache_manager import Grant


@dataclass(slots=True, eq=False)
class SequenceGroup:
    """One request and the sequences it runs as (n samples or beam_width beams).

    All sequences of a group advance in lockstep: after the prefill each holds the
    prompt and ``num_output - 1`` generated tokens' K/V, plus one sampled token whose
    K/V the next decode step writes.
    """

    request: Request
    seq_ids: list[SeqId]
    num_output: int = 0  # tokens sampled so far (the request's output length when done)
    status: str = "waiting"  # waiting | running | swapped | finished | rejected
    #: Tokens of its first sequence whose K/V is in the cache (computed, or served by the
    #: prefix cache); it runs ``prefill_end_tokens`` minus this next (a chunked prefill),
    #: then one token a step.
    num_computed_tokens: int = 0
    #: Where its current prefill ends: the prompt, plus the generated tokens being
    #: recomputed after a preemption (tokens).
    prefill_end_tokens: int = 0
    #: Its block hashes, made once when it arrives, for schemes with a prefix cache.
    block_hashes: BlockHashes | None = field(default=None, repr=False)
    swapped: SwappedGroup | None = None
    pending_frees: list[SeqId] = field(default_factory=list)  # applied at the next step
    pending_forks: list[tuple[SeqId, SeqId]] = field(default_factory=list)
    first_scheduled_s: float | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    num_preemptions: int = 0
    reject_reason: str | None = None  # why the request can never run (status "rejected")
    cached_prompt_tokens: int | None = None  # prompt tokens a prefix cache served, first time

    @property
    def prefill_left(self) -> int:
        """Tokens still to prefill (a chunked prefill's next chunks); 0: decoding."""
        return max(self.prefill_end_tokens - self.num_computed_tokens, 0)

    #: Sequences the group runs as once it is past its prefill (its request's ``n`` or
    #: ``beam_width``; a field, not a property: the scheduler reads it every step).
    width: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.width = max(self.request.n, self.request.beam_width)

    @property
    def kv_final_len(self) -> int:
        """Slots each sequence will hold at most: the last sampled token's K/V is never written."""
        return self.request.prompt_len + self.request.output_len - 1


@dataclass(slots=True)
class PrefillItem:
    """Write the K/V of a sequence's tokens ``start .. start + num_tokens - 1`` (prompt,
    plus generated tokens being recomputed after a preemption) and, if that completes
    its prefill (``last``), sample its next token. ``start > 0`` is a later chunk of a
    chunked prefill: it attends to the ``start`` tokens already in the cache."""

    request_id: int
    seq_id: SeqId
    num_tokens: int
    recompute: bool = False
    start: int = 0
    last: bool = True


@dataclass(slots=True)
class ForkItem:
    parent_id: SeqId
    child_id: SeqId
    copies: list[KVCopy]


@dataclass(slots=True)
class StepPlan:
    """What one step does. See the module docstring for the order of execution."""

    step: int
    frees: list[SeqId] = field(default_factory=list)
    swap_outs: list[SwappedGroup] = field(default_factory=list)
    forks: list[ForkItem] = field(default_factory=list)
    cow_copies: list[KVCopy] = field(default_factory=list)
    swap_ins: list[tuple[SwappedGroup, list[KVCopy]]] = field(default_factory=list)
    host_copies: list[HostCopy] = field(default_factory=list)  # 3b: loads, write-backs
    host_writes: list[HostCopy] = field(default_factory=list)  # 7: write-through
    prefills: list[PrefillItem] = field(default_factory=list)
    decode_seq_ids: list[SeqId] = field(default_factory=list)
    decode_slots: list[int] = field(default_factory=list)  # physical slot per decode
    decode_request_ids: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)  # request ids preempted this step
    finished: list[int] = field(default_factory=list)  # request ids done after this step
    rejected: list[int] = field(default_factory=list)  # request ids that can never run
    # Totals for the cost model (kept here so the executor needs no other state).
    num_prefill_tokens: int = 0  # prompt tokens computed (not served from a prefix cache)
    num_prefill_tokens_cached: int = 0  # prompt tokens a prefix cache served instead
    prefix_query_tokens: int = 0  # tokens of the admitted prompts looked up in the cache
    prefix_hit_tokens: int = 0  # of them, tokens found (as vLLM's prefix_cache_hits)
    prefix_host_hit_tokens: int = 0  # of those, tokens loaded from a host tier
    kv_tokens_read: int = 0  # context tokens the decodes attend over
    num_batched_requests: int = 0
    #: Sliding windows (tokens) whose layers the scheme's kernel reads only within the
    #: window (``Allocator.kernel_window_tokens``), and per window the same sum as
    #: ``kv_tokens_read`` with each context at most the window (pagedsim.engine.cost).
    windows: tuple[int, ...] = ()
    kv_window_tokens_read: list[int] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not (self.prefills or self.decode_seq_ids)

    # -------------------------------------------- what the scheduler records
    def prefill_attn_pairs(self) -> int:
        """(query, key) pairs of this step's prefills beyond ``kv_tokens_read``: a chunk of
        ``n`` tokens after ``start`` cached ones attends causally within itself
        (``n (n + 1) / 2`` pairs) and each of its tokens to the cached ones (``n * start``,
        of which ``start`` are already in ``kv_tokens_read``); for the cost model's
        ``prefill_attention``."""
        return sum(p.num_tokens * (p.num_tokens + 1) // 2 + p.start * (p.num_tokens - 1)
                   for p in self.prefills)

    def add_decode(self, group: SequenceGroup, grant: Grant) -> None:
        """Every sequence of ``group`` writes one token's K/V into ``grant.slots`` and
        attends over its sequence."""
        self.cow_copies.extend(grant.copies)
        self.decode_seq_ids.extend(group.seq_ids)
        self.decode_slots.extend(grant.slots)
        self.decode_request_ids.append(group.request.request_id)
        context = group.request.prompt_len + group.num_output
        self.kv_tokens_read += len(group.seq_ids) * context
        if self.windows:
            self._read_windows(len(group.seq_ids), context)
        self.num_batched_requests += 1

    def add_decodes(self, groups: list[SequenceGroup], seq_ids: list[SeqId],
                    grant: Grant) -> tuple[list[int], int]:
        """:meth:`add_decode` for each of ``groups`` in order, in one call: ``seq_ids`` are
        their sequences, in order, and ``grant`` the slots of one token each. Returns the
        groups' request ids and the context tokens they attend over."""
        rids: list[int] = []
        kv_tokens = 0
        windows = self.windows
        for g in groups:
            r = g.request
            rids.append(r.request_id)
            context = r.prompt_len + g.num_output
            kv_tokens += len(g.seq_ids) * context
            if windows:
                self._read_windows(len(g.seq_ids), context)
        self.add_decode_batch(seq_ids, rids, kv_tokens, grant)
        return rids, kv_tokens

    def add_decode_batch(self, seq_ids: list[SeqId], request_ids: list[int], kv_tokens: int,
                         grant: Grant) -> None:
        """Decodes of ``request_ids``' sequences ``seq_ids`` (one token each, into
        ``grant.slots``), attending over ``kv_tokens`` context tokens in all (what
        :meth:`add_decodes` counts; without sliding windows, whose reads it counts too)."""
        self.cow_copies.extend(grant.copies)
        self.decode_seq_ids.extend(seq_ids)
        self.decode_slots.extend(grant.slots)
        self.decode_request_ids.extend(request_ids)
        self.kv_tokens_read += kv_tokens
        self.num_batched_requests += len(request_ids)

    def _read_windows(self, num_seqs: int, context: int) -> None:
        """``num_seqs`` sequences read ``context`` cached tokens: at most each window."""
        reads = self.kv_window_tokens_read
        for i, window in enumerate(self.windows):
            reads[i] += num_seqs * min(context, window)

    def add_chunk(self, group: SequenceGroup, start: int, num_tokens: int,
                  grant: Grant) -> None:
        """The next ``num_tokens`` tokens of ``group``'s chunked prefill, after the
        ``start`` tokens already cached (which it attends to)."""
        self.cow_copies.extend(grant.copies)
        self.prefills.append(PrefillItem(group.request.request_id, group.seq_ids[0],
                                         num_tokens, group.num_output > 0, start,
                                         not group.prefill_left))
        self.num_prefill_tokens += num_tokens
        self.kv_tokens_read += start
        if self.windows:
            self._read_windows(1, start)
        self.num_batched_requests += 1

    def add_admitted(self, group: SequenceGroup, num_tokens: int, chunk: int,
                     recompute: bool, grant: Grant) -> int:
        """``group`` was admitted with its first ``chunk`` of ``num_tokens`` prefill
        tokens; tokens the prefix cache served (``grant.computed_tokens``) are attended
        to, not computed. Returns the tokens computed."""
        done = 0
        rid = group.request.request_id
        for seq_id, cached in zip(group.seq_ids, grant.computed_tokens, strict=True):
            self.prefills.append(PrefillItem(rid, seq_id, chunk - cached, recompute, cached,
                                             not group.prefill_left))
            done += chunk - cached
            self.num_prefill_tokens_cached += cached
            self.kv_tokens_read += cached
            if self.windows:
                self._read_windows(1, cached)
        self.prefix_query_tokens += num_tokens
        self.prefix_hit_tokens += grant.computed_tokens[0]
        if grant.host_tokens:  # the part of it a host tier loaded
            self.prefix_host_hit_tokens += grant.host_tokens[0]
        self.num_prefill_tokens += done
        self.num_batched_requests += 1
        return done
