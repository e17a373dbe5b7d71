"""What every KV-cache allocator offers: the protocol, and the data-movement records.

An allocator only does bookkeeping: which physical token *slots* of one big pool
each sequence owns. It never touches K/V data. Whenever an operation implies that
K/V data must move (copy-on-write, the copy a contiguous fork needs, swapping), the
operation says so in its result as :class:`KVCopy` records, and whoever owns real
tensors (``pagedsim.kernels.PagedKVCache``) carries them out. The simulator only counts them.

Slots are numbered ``0 .. capacity_slots - 1``. For the paged allocator slot
``s`` is offset ``s % block_size`` of physical block ``s // block_size``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

from ..validate import check_int
from ..workloads.block_hashes import hashes_for

if TYPE_CHECKING:  # the workload module does not import allocators
    from ..workloads.block_hashes import BlockHashes
    from ..workloads.workload import Request

SeqId = Hashable


def distinct_ids(seq_ids: Iterable[SeqId]) -> tuple[SeqId, ...]:
    """``seq_ids`` as a tuple; ``ValueError`` naming them when one repeats or cannot be
    hashed (an id is a dict key in every allocator), so that no caller meets a bare
    ``TypeError`` halfway through a change."""
    seq_ids = tuple(seq_ids)
    try:
        if len(set(seq_ids)) != len(seq_ids):
            raise ValueError(f"duplicate sequence ids in {seq_ids!r}")
    except TypeError:
        raise ValueError(f"sequence ids must be hashable, got {seq_ids!r}") from None
    return seq_ids


def check_new_ids(seq_ids: Sequence[SeqId], is_taken: Callable[[SeqId], bool],
                  is_swapped_out: Callable[[SeqId], bool]) -> None:
    """Refuse ids given twice, ids ``is_taken`` says are in use, and ids of a swapped-out
    group (it must be able to come back): one ``ValueError`` naming them. Every block
    manager's check of a new sequence."""
    seq_ids = distinct_ids(seq_ids)
    clash = [s for s in seq_ids if is_taken(s)]
    if clash:
        raise ValueError(f"{_ids(clash)} already exist{'s' * (len(clash) == 1)}")
    swapped = [s for s in seq_ids if is_swapped_out(s)]
    if swapped:
        raise ValueError(f"{_ids(swapped)} belong{'s' * (len(swapped) == 1)} to a "
                         "swapped-out group")


def check_lengths(num_tokens: int, final_len: int | None) -> int:
    """``num_tokens`` checked: an int >= 0, and <= ``final_len`` when that is given."""
    if type(num_tokens) is not int or num_tokens < 0:
        num_tokens = check_int("num_tokens", num_tokens, minimum=0)
    if final_len is not None:
        if type(final_len) is not int:
            final_len = check_int("final_len", final_len)
        if final_len < num_tokens:
            raise ValueError(f"final_len ({final_len}) must be >= num_tokens "
                             f"({num_tokens})")
    return num_tokens


def checked_admission(seq_ids: Sequence[SeqId], fork_ids: Sequence[SeqId], num_tokens: int,
                      final_len: int | None, block_hashes: object,
                      is_taken: Callable[[SeqId], bool], is_swapped_out: Callable[[SeqId], bool],
                      prefix_block_size: int | None) -> tuple[int, BlockHashes | None]:
    """An admission's arguments checked, as every block manager's ``allocate_group``
    checks them: the ids new (:func:`check_new_ids`), the lengths in order
    (:func:`check_lengths`), and ``block_hashes`` (a request's hashes, or the request) as
    the hashes that name blocks of ``prefix_block_size`` (a request is hashed now; None:
    nothing is cached, ``block_hashes`` only checked). Returns ``num_tokens`` and
    ``block_hashes`` as checked."""
    check_new_ids([*seq_ids, *fork_ids], is_taken, is_swapped_out)
    num_tokens = check_lengths(num_tokens, final_len)
    if block_hashes is not None:
        block_hashes = hashes_for(block_hashes, prefix_block_size)
    return num_tokens, block_hashes


class FromPool:
    """A manager's attribute that is its pool's, read and written through (a manager's
    ``on_release`` hook and ``evicted_blocks`` count live with the pool that releases and
    evicts)."""

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: object, objtype: type | None = None):
        return self if obj is None else getattr(obj.pool, self.name)

    def __set__(self, obj: object, value: object) -> None:
        setattr(obj.pool, self.name, value)


def _ids(seq_ids: list[SeqId]) -> str:
    """``sequence id 'a'``, or ``sequence ids ['a', 'b']``: an error message's subject."""
    return f"sequence id {seq_ids[0]!r}" if len(seq_ids) == 1 else f"sequence ids {seq_ids!r}"


class KVCopy(NamedTuple):
    """Copy the K/V of ``num_slots`` consecutive slots from ``src_slot`` to ``dst_slot``."""

    src_slot: int
    dst_slot: int
    num_slots: int

    def block_pairs(self, block_size: int) -> list[tuple[int, int]]:
        """The copy as ``(src_block, dst_block)`` pairs of whole blocks of ``block_size`` slots.

        Both ends must start on a block boundary (always true for the paged allocator's
        copy-on-write copies, and for an aligned contiguous arena).
        """
        if self.src_slot % block_size or self.dst_slot % block_size:
            raise ValueError(f"{self} is not aligned to blocks of {block_size} slots")
        n = -(-self.num_slots // block_size)
        s, d = self.src_slot // block_size, self.dst_slot // block_size
        return [(s + i, d + i) for i in range(n)]


#: ``append_slot`` returns ``(slot, copy)``: the physical slot the new token's K/V
#: goes into, and the copy-on-write copy to carry out *before* writing it (or None). A
#: scheme with several KV-cache groups (the hybrid manager) copies the shared last block
#: of each group: a list of copies then, and ``slot`` is the token's slot in group 0.
AppendResult = tuple[int, "KVCopy | list[KVCopy] | None"]


@dataclass(slots=True)
class SwappedGroup:
    """Sequences swapped out to a CPU pool, with enough to bring them back.

    ``out_copies`` move K/V from GPU slots (``src_slot``) to this group's own CPU
    buffer of ``cpu_slots`` slots (``dst_slot`` is an offset into that buffer).
    ``swap_in`` returns the copies back (CPU offset -> new GPU slot).
    """

    seq_ids: tuple[SeqId, ...]
    cpu_slots: int
    out_copies: list[KVCopy]
    # allocator-specific state needed to rebuild the sequences on swap-in
    state: dict = field(default_factory=dict, repr=False)
    owner: object = field(default=None, repr=False, compare=False)  # the allocator's token
    swapped_in: bool = False  # a group comes back once; after that it is stale

    def check_can_return_to(self, owner: object) -> None:
        """Raise ``ValueError`` unless this group may be swapped into the allocator whose
        token is ``owner``: it must come from there and not have come back already."""
        if self.owner is not owner:
            raise ValueError(f"swapped group {self.seq_ids!r} was swapped out of another "
                             "allocator")
        if self.swapped_in:
            raise ValueError(f"swapped group {self.seq_ids!r} was already swapped in "
                             "(a stale group cannot come back twice)")


@dataclass(slots=True)
class SlotUsage:
    """Allocated slots split by what will become of them (see :mod:`pagedsim.memory.accounting`)."""

    token_slots: int  # hold a live token's K/V (a shared physical slot counts once)
    reserved_slots: int  # empty; a live request will still fill them
    internal_frag_slots: int  # empty; will never be filled
    physical_blocks: int  # blocks in use (paged); regions in use (contiguous)
    logical_blocks: int  # as if nothing were shared
    #: Slots of blocks nobody holds whose K/V a prefix cache keeps for reuse (evictable;
    #: not counted in ``num_free_slots``). 0 for schemes without a prefix cache.
    cached_slots: int = 0


@runtime_checkable
class Allocator(Protocol):
    """What every scheme implements: everything the scheduler (through
    :class:`~pagedsim.memory.kv_cache_manager.KVCacheManager`, its eleven calls), the
    accounting and the KV caches call.

    Every scheme-specific decision sits behind it (how many blocks or pages a prompt
    takes, how the watermark applies, whether forked children need room held from
    admission, what a swap-out costs), so the scheduler never asks which scheme it
    drives. Schemes may offer more (``block_table``, ``region``, ``can_allocate``) for
    pictures, notebooks and tests, but nothing below the scheduler relies on it.

    Sequence ids are any hashable values. Lengths are in tokens; sizes in slots.
    """

    capacity_slots: int  # token slots in the pool
    #: Slots the attention kernel reads per block-table lookup; None when it reads each
    #: request's K/V contiguously (the cost model charges block lookups, see pagedsim.engine.cost).
    kernel_block_slots: int | None
    #: The sliding windows (tokens) whose layers the attention kernel reads only within
    #: the window (the hybrid manager's sliding-window groups); empty: every layer reads
    #: the whole context (the cost model charges what is read, see pagedsim.engine.cost).
    kernel_window_tokens: tuple[int, ...]
    #: The block size whose chained hashes name cached content
    #: (:class:`~pagedsim.workloads.block_hashes.BlockHashes`), or None: no prefix cache,
    #: so nobody need hash a request's blocks.
    prefix_block_size: int | None
    #: Called as ``on_release(start_slot, num_slots)`` for memory going back to the free
    #: pool, so a real cache can scrub it.
    on_release: Callable[[int, int], None] | None

    #: Cached blocks evicted so far (a prefix cache reusing them for other content);
    #: 0 for schemes without a prefix cache.
    evicted_blocks: int

    # ------------------------- what KVCacheManager calls for the scheduler
    def allocate_group(self, seq_ids: Sequence[SeqId], num_tokens: int,
                       final_len: int | None = None, fork_ids: Sequence[SeqId] = (),
                       watermark: float = 0.0,
                       block_hashes: BlockHashes | Request | None = None) -> bool:
        """Admit a request: every id in ``seq_ids`` gets room for ``num_tokens`` tokens,
        and room is held for the ids in ``fork_ids`` that will be forked from
        ``seq_ids[0]`` later (schemes that share a fork need none). ``watermark`` is the
        fraction of the pool the scheme keeps free at admission, where it applies one.
        ``block_hashes``: the request's block hashes (or the request, hashed then); a prefix
        cache serves the longest cached prefix of each sequence from it (see
        :meth:`prefix_hit_tokens`) and names the new full blocks by them; other schemes
        ignore it.
        All or nothing: returns False and changes nothing when it does not fit."""

    def lookup_prefix(self, block_hashes: BlockHashes | Request, num_tokens: int,
                      seq_id: SeqId) -> int:
        """Tokens of a new ``num_tokens``-token sequence ``seq_id``, named by
        ``block_hashes``, that the prefix cache holds now (whole blocks, at most
        ``num_tokens - 1``: the last token is always computed). Changes nothing. 0 for
        schemes without a prefix cache."""

    def prefix_hit_tokens(self, seq_id: SeqId) -> int:
        """Tokens of ``seq_id`` whose K/V came from the prefix cache when it was last
        admitted: its prefill computes only the tokens after them. 0 without a cache."""

    def can_append_all(self, seq_ids: Iterable[SeqId]) -> bool:
        """Whether one ``append_slot`` for each of ``seq_ids`` (in order) would all succeed.
        Every id is checked before the answer: an unknown or repeated one is refused
        (``ValueError``) even where an earlier one already makes the answer no."""

    def append_slot(self, seq_id: SeqId) -> AppendResult:
        """Room for one new token: ``(slot, copy_or_None)``."""

    def can_extend(self, seq_id: SeqId, num_tokens: int) -> bool:
        """Whether ``extend(seq_id, num_tokens)`` would succeed."""

    def extend(self, seq_id: SeqId, num_tokens: int) -> list[KVCopy]:
        """Room for ``num_tokens`` more tokens of one sequence (the next chunk of a
        chunked prefill); returns the copies to carry out first. All or nothing."""

    def fork(self, parent_id: SeqId, child_id: SeqId) -> list[KVCopy]:
        """``child_id`` holds the same tokens as ``parent_id`` (using room held for it by
        ``allocate_group``, if any); returns the copies to carry out."""

    def free(self, seq_id: SeqId) -> None:
        """Release a sequence's memory (or the room held for a child never forked)."""

    def swap_out_slots(self, seq_ids: Iterable[SeqId]) -> int:
        """CPU slots a swap-out of ``seq_ids`` would take (shared memory once)."""

    def swap_out(self, seq_ids: Iterable[SeqId]) -> SwappedGroup:
        """Move the sequences to a CPU buffer and release their GPU memory."""

    def can_swap_in(self, group: SwappedGroup, watermark: float = 0.0) -> bool:
        """Whether ``swap_in(group)`` would succeed and leave the watermark free."""

    def swap_in(self, group: SwappedGroup) -> list[KVCopy]:
        """Bring a swapped group back (all or nothing); returns the copies CPU -> GPU."""

    @property
    def num_seqs(self) -> int:
        """Sequences (and held rooms) that own memory now."""

    # ------------------------------------------------------ the accounting's calls
    def usage(self, final_lens: Mapping[SeqId, int] | None = None) -> SlotUsage:
        """Allocated slots split into token / reserved / internal fragmentation."""

    @property
    def num_free_slots(self) -> int: ...

    def external_frag_slots(self, need_slots: int | None) -> int:
        """Free slots in holes too small for an allocation of ``need_slots`` slots."""

    def slots_needed(self, num_tokens: int, final_len: int | None = None) -> int:
        """Slots one allocation of this prompt would take (for external-fragmentation checks)."""

    # ---------------------------------------------------------- the caches' calls
    def allocate(self, seq_id: SeqId, num_tokens: int, final_len: int | None = None) -> None:
        """Room for one new sequence's ``num_tokens``-token prompt; ``final_len`` (prompt
        + output, tokens) is its true final length, for reservation and accounting.
        Raises ``OutOfMemoryError`` (and changes nothing) when there is no room."""

    def seq_len(self, seq_id: SeqId) -> int:
        """Number of tokens the sequence holds."""

    def slot_mapping(self, seq_id: SeqId, start: int = 0, end: int | None = None) -> list[int]:
        """Physical slots of tokens ``start .. end-1`` (default: all of them)."""

    def seq_ids(self) -> Iterator[SeqId]: ...

    def __contains__(self, seq_id: object) -> bool: ...

    def snapshot(self) -> dict:
        """The allocator's whole state as plain data (``view`` says how to draw it)."""

    def check_invariants(self) -> None:
        """Raise ``AssertionError`` if the internal state is inconsistent."""
