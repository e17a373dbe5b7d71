"""What the scheduler asks of memory: eleven calls, in vLLM v1's shape.

vLLM v1's scheduler talks to one ``KVCacheManager``: ``get_computed_blocks(request)``
(the cached prefix), ``allocate_slots(request, num_new_tokens)`` (blocks for the next
tokens, or None when they do not fit: admission, prefill chunks and decodes alike) and
``free(request)``, and a request carries its ``block_hashes``, computed once.
:class:`KVCacheManager` is that seam here, over any scheme's
:class:`~pagedsim.memory.base.Allocator`:

==========================  ====================================================
``hashes_of``               a new request's block hashes, made once (None: this
                            scheme caches nothing, so nothing is hashed)
``get_computed_tokens``     tokens of a new sequence the prefix cache holds now
``allocate_slots``          room for the next tokens of a group -> :class:`Grant`,
                            or None (and nothing changed) when it does not fit
``fork``                    a child holds its parent's tokens -> copies
``free``                    release sequences -> the ids released
``swap_out`` / ``swap_in``  to a CPU pool and back -> the group / copies, or None
``num_seqs``                sequences that own memory now (will any be released?)
``facts``                   capacity, slots in use, slots one sequence takes
``host_transfers``          a host tier's copies of the step, once a step
                            (:class:`~.host_tier.HostTransfers`; None: no tier)
``decode_steps``            several decode steps of the same sequences at once ->
                            the pool's usage after each (None: ask step by step)
==========================  ====================================================

A host tier (:mod:`~.host_tier`) reaches the scheduler only through these: the computed
tokens count its hits too (``Grant.host_tokens`` says how many it loaded), and its copies
(loads, write-backs of evicted blocks, write-throughs) come out of ``host_transfers``.

plus ``max_model_len``, the longest sequence the scheme holds (None: no limit), and
``freed_while_running_blocks``, the blocks the scheme gave back to its pool on its own so
far, between the scheduler's frees (the hybrid manager's sliding-window groups, behind the
window; 0 for every other scheme): memory an admission refused before may now find. The
scheduler calls nothing else. Everything scheme-specific (whether forks share or copy,
a watermark, rooms held for forks, what a swap-out costs) stays behind the allocator,
so the scheduler never asks which scheme it drives. The wider
:class:`~pagedsim.memory.base.Allocator` remains what the kernels' caches, the
accounting and the pictures read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

from ..validate import check_int
from ..workloads.block_hashes import BlockHashes
from .base import Allocator, KVCopy, SeqId, SwappedGroup, distinct_ids
from .block_manager import BlockManager
from .decode_runs import StepUsage, append_steps
from .host_tier import HostTransfers

if TYPE_CHECKING:
    from ..workloads.workload import Request


class Grant(NamedTuple):
    """What :meth:`KVCacheManager.allocate_slots` gave."""

    copies: Sequence[KVCopy]  # copy-on-write copies to carry out before writing
    #: One token for each sequence: the slot its K/V goes into, in ``seq_ids`` order.
    #: Empty for a longer chunk and at admission.
    slots: Sequence[int]
    #: At admission: tokens of each sequence served from the prefix cache (their K/V is
    #: there already; only the rest is computed). Empty otherwise.
    computed_tokens: Sequence[int]
    #: At admission with a host tier: of ``computed_tokens``, those loaded from the host
    #: (their copies come out of :meth:`KVCacheManager.host_transfers`). Empty otherwise.
    host_tokens: Sequence[int] = ()


class PoolFacts(NamedTuple):
    """The pool in numbers, for a rejected request's reason (slots)."""

    capacity_slots: int
    used_slots: int
    slots_per_seq: int  # what one sequence of the asked length takes at admission


class KVCacheManager:
    """The scheduler's calls, over ``allocator`` (see the module docstring)."""

    __slots__ = ("allocator", "max_model_len", "_append", "_append_steps", "_holds", "_host",
                 "_gives_back")

    def __init__(self, allocator: Allocator) -> None:
        self.allocator = allocator
        #: The longest sequence the scheme holds (contiguous regions and vAttention's
        #: virtual regions are that long), tokens; None: blocks set no limit.
        self.max_model_len: int | None = getattr(allocator, "max_model_len", None)
        self._append = allocator.append_slot  # (bound once: every decode calls it)
        # Several steps at once (:mod:`.decode_runs`), over a block manager.
        self._append_steps = (partial(append_steps, allocator)
                              if isinstance(allocator, BlockManager) else None)
        self._holds = allocator.__contains__
        self._host = getattr(allocator, "host", None) is not None  # a host tier behind it
        # Whether the scheme gives blocks back on its own (read once: admission asks often).
        self._gives_back = hasattr(allocator, "freed_while_running_blocks")

    def hashes_of(self, request: Request) -> BlockHashes | None:
        """The block hashes of a new request, to keep with it (hashed lazily, once); None
        when the scheme has no prefix cache."""
        block_size = self.allocator.prefix_block_size
        return None if block_size is None else BlockHashes(request, block_size)

    def get_computed_tokens(self, hashes: BlockHashes | None, seq_id: SeqId,
                            num_tokens: int) -> int:
        """Tokens of a new ``num_tokens``-token sequence ``seq_id`` of the request whose
        ``hashes`` these are, whose K/V the prefix cache holds now (whole blocks, at most
        ``num_tokens - 1``). Changes nothing; 0 without a prefix cache."""
        if hashes is None:
            return 0
        return self.allocator.lookup_prefix(hashes, num_tokens, seq_id)

    def allocate_slots(self, seq_ids: Sequence[SeqId], num_new_tokens: int, *,
                       hashes: BlockHashes | None = None, final_len: int | None = None,
                       fork_ids: Sequence[SeqId] = (), watermark: float = 0.0,
                       as_many_as_fit: bool = False) -> Grant | None:
        """Room for ``num_new_tokens`` more tokens of each of ``seq_ids``, or None (and
        nothing changed) when it does not fit.

        * With ``final_len`` (their final length, tokens), new sequences are *admitted*:
          each gets its first ``num_new_tokens`` tokens (cached prefix included: the
          cache serves what it holds of the request whose ``hashes`` these are, and says
          how much in ``computed_tokens``); ``fork_ids`` are the children they will fork,
          for schemes that hold room for them; ``watermark`` is the fraction of the pool
          the scheme keeps free at admission, where it applies one.
        * Without, running sequences grow: one token each (a decode: ``slots`` says
          where), or one sequence a longer chunk of its prefill.
        * ``as_many_as_fit`` (one token each of ``seq_ids``, each its group's only
          sequence): in order, as many as fit, as if asked one by one until one did not
          fit; ``slots`` has one slot for each of those (none, maybe: never None).
        """
        alloc = self.allocator
        if as_many_as_fit:
            if num_new_tokens != 1 or final_len is not None:
                raise ValueError("as_many_as_fit is for one token of each of running "
                                 f"sequences, not {num_new_tokens} (final_len {final_len})")
            return self._as_many_as_fit(list(seq_ids))
        if final_len is not None:
            if not alloc.allocate_group(seq_ids, num_new_tokens, final_len, fork_ids,
                                        watermark, block_hashes=hashes):
                return None
            hits = [alloc.prefix_hit_tokens(s) for s in seq_ids]
            if self._host:
                return Grant([], [], hits, [alloc.host_hit_tokens(s) for s in seq_ids])
            return Grant([], [], hits)
        if num_new_tokens == 1:  # a step's decodes: all or nothing, checked first
            if not alloc.can_append_all(seq_ids):
                return None
            return self._append_each(seq_ids)
        if len(seq_ids) != 1:
            raise ValueError(f"a chunk of {num_new_tokens} tokens goes to one sequence, "
                             f"not {len(seq_ids)} ({tuple(seq_ids)!r})")
        if not alloc.can_extend(seq_ids[0], num_new_tokens):
            return None
        return Grant(alloc.extend(seq_ids[0], num_new_tokens), [], [])

    def _as_many_as_fit(self, seq_ids: list[SeqId]) -> Grant:
        """``allocate_slots(seq_ids, 1, as_many_as_fit=True)``: appends in order while
        each fits the pool the ones before it left. Every id is checked before any
        append, so a bad one changes nothing."""
        for seq_id in distinct_ids(seq_ids):  # refused: a repeat, or an unhashable id
            self.allocator.seq_len(seq_id)  # refused: not a running sequence
        return self._append_each(seq_ids, until_full=True)

    def _append_each(self, seq_ids: Sequence[SeqId], until_full: bool = False) -> Grant:
        """One append for each of ``seq_ids``, in order: all of them (checked to fit
        before), or ``until_full``, up to the first that does not fit."""
        alloc, append = self.allocator, self._append
        copies: list[KVCopy] = []
        slots: list[int] = []
        for seq_id in seq_ids:
            if until_full and not alloc.can_append_all([seq_id]):
                break
            slot, copy = append(seq_id)
            if copy is not None:
                if type(copy) is list:  # the hybrid manager: a copy per KV-cache group
                    copies.extend(copy)
                else:
                    copies.append(copy)
            slots.append(slot)
        return Grant(copies, slots, [])

    def decode_steps(self, seq_ids: list[SeqId], max_steps: int) -> list[StepUsage] | None:
        """Up to ``max_steps`` decode steps of one token for each of ``seq_ids`` (each step
        what ``allocate_slots(seq_ids, 1)`` does), stopping before the first that does not
        fit whole: the pool's usage after each step done (a step's accounting without a
        look at every sequence). None, and nothing changed, where the scheme cannot run
        steps so: then ask step by step."""
        run = self._append_steps
        return None if run is None else run(seq_ids, max_steps)

    def fork(self, parent_id: SeqId, child_id: SeqId) -> list[KVCopy]:
        """``child_id`` holds the same tokens as ``parent_id``; the copies to carry out."""
        return self.allocator.fork(parent_id, child_id)

    def free(self, seq_ids: Iterable[SeqId], only_held: bool = False) -> list[SeqId]:
        """Release ``seq_ids`` (or, ``only_held``, those of them that own memory: rooms
        held for children never forked); returns the ids released. Every id is checked
        first: one unknown, repeated or unhashable is a ``ValueError`` and frees nothing."""
        alloc = self.allocator
        if only_held:
            seq_ids = [s for s in seq_ids if self._holds(s)]
        else:  # all checked before any is freed, so that a bad id frees nothing
            seq_ids = list(distinct_ids(seq_ids))
            unknown = [s for s in seq_ids if s not in alloc]
            if unknown:
                raise ValueError(f"unknown sequence ids {unknown!r} (never allocated, or "
                                 "already freed); nothing was freed")
        for seq_id in seq_ids:
            alloc.free(seq_id)
        return seq_ids

    def swap_out(self, seq_ids: Sequence[SeqId], cpu_free_slots: int) -> SwappedGroup | None:
        """Move the sequences to a CPU pool with ``cpu_free_slots`` free slots and
        release their GPU memory; None (nothing changed) when they need more."""
        cpu_free_slots = check_int("cpu_free_slots", cpu_free_slots, minimum=0)
        if self.allocator.swap_out_slots(seq_ids) > cpu_free_slots:
            return None
        return self.allocator.swap_out(seq_ids)

    def swap_in(self, group: SwappedGroup, watermark: float = 0.0) -> list[KVCopy] | None:
        """Bring a swapped group back, leaving ``watermark`` of the pool free; the copies
        CPU -> GPU, or None (nothing changed) when it does not fit."""
        if not self.allocator.can_swap_in(group, watermark):
            return None
        return self.allocator.swap_in(group)

    def host_transfers(self) -> HostTransfers | None:
        """The host tier's copies since the last call, in the order they must run (see
        :mod:`~.host_tier`), or None without a host tier. Called once at the end of each
        step: a write-through gets its host block then, after the step's other copies."""
        return self.allocator.host_transfers() if self._host else None

    @property
    def freed_while_running_blocks(self) -> int:
        """Blocks the scheme gave back on its own so far, not at a free (a sliding
        window's, behind it); 0 for schemes that never do."""
        return self.allocator.freed_while_running_blocks if self._gives_back else 0

    @property
    def num_seqs(self) -> int:
        """Sequences (and rooms held for forks) that own memory now."""
        return self.allocator.num_seqs

    def facts(self, num_tokens: int, final_len: int | None = None) -> PoolFacts:
        """The pool's capacity and use, and the slots one sequence of ``num_tokens``
        tokens (``final_len`` at the end) takes at admission."""
        alloc = self.allocator
        return PoolFacts(alloc.capacity_slots, alloc.capacity_slots - alloc.num_free_slots,
                         alloc.slots_needed(num_tokens, final_len))
