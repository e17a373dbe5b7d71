"""Lab 7: measured versus simulated KV memory, and a planted accounting bug.

Read ``README.md`` beside this file first. You write the bodies marked ``TODO lab 7.k``;
the rest is given.

The simulator says how many token slots hold K/V by *accounting*: a function of the
allocator's state. Here you *measure* it instead. A real K/V cache tensor starts filled
with a sentinel (NaN) that no real key or value holds; writing a token replaces its slot's
sentinel, and releasing a block puts the sentinel back. Scanning the tensor for
non-sentinel slots then counts what really holds data, and that count can be held against
the accounting after every step of a run: where they disagree, one of them is wrong.

Given infrastructure: ``pagedsim.PagedAllocator`` (blocks, block tables, reference counts,
copy-on-write) decides where every token goes; this module mirrors its decisions on
tensors. Tensors are ``[num_blocks, block_size, num_kv_heads, head_dim]``; slot ``s`` is
offset ``s % block_size`` of block ``s // block_size``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import torch

import pagedsim

SENTINEL = float("nan")  # what an empty slot holds; no real key or value is NaN
SeqId = Hashable
#: One step of a script: ("allocate", seq, num_tokens), ("append", seq),
#: ("fork", parent, child) or ("free", seq).
Op = tuple
OPS = ("allocate", "append", "fork", "free")


# --------------------------------------------------------------------------- task 7.1


@dataclass(frozen=True, slots=True)
class Scan:
    """What a scan of one cache tensor found."""

    written: torch.Tensor  # bool [num_blocks, block_size]: the slot holds data
    per_block: list[int]  # slots holding data, per block

    @property
    def written_slots(self) -> int:
        """Slots holding data in the whole tensor."""
        return sum(self.per_block)


def scan(cache: torch.Tensor) -> Scan:
    """Scan ``cache`` (``[num_blocks, block_size, ...]``, at least 3-d): a slot holds data
    unless every element of it is the NaN sentinel."""
    if not isinstance(cache, torch.Tensor) or cache.ndim < 3:
        got = tuple(cache.shape) if isinstance(cache, torch.Tensor) else type(cache).__name__
        raise ValueError(f"cache must be a tensor [num_blocks, block_size, ...] of 3 or more "
                         f"dimensions, got {got}")
    # BEGIN SOLUTION lab 7.1: slots not entirely NaN, then how many per block
    written = ~cache.isnan().flatten(2).all(dim=2)  # [B, BS]
    per_block = written.sum(dim=1)
    return Scan(written=written, per_block=[int(n) for n in per_block])
    # END SOLUTION


# --------------------------------------------------------------------------- task 7.2


def live_slots(allocator: pagedsim.PagedAllocator) -> list[int]:
    """The slots that hold a live token according to the allocator's block tables, sorted:
    every token of every sequence, a physical slot shared by several sequences once."""
    # BEGIN SOLUTION lab 7.2: each token's slot (slot_mapping), each slot once
    return sorted({slot for seq in allocator.seq_ids() for slot in allocator.slot_mapping(seq)})
    # END SOLUTION


# --------------------------------------------------------------------------- task 7.3


class PagedKVTensor:
    """A K and a V cache tensor, filled with the sentinel, whose slots a
    ``pagedsim.PagedAllocator`` hands out. Every operation goes through the allocator first;
    this class then moves the data the allocator's answer implies."""

    def __init__(self, num_blocks: int, block_size: int, num_kv_heads: int = 1,
                 head_dim: int = 4) -> None:
        for name, value in (("num_blocks", num_blocks), ("block_size", block_size),
                            ("num_kv_heads", num_kv_heads), ("head_dim", head_dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.allocator = pagedsim.PagedAllocator(num_blocks, block_size)
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        self.k = torch.full(shape, SENTINEL)
        self.v = torch.full(shape, SENTINEL)
        # The allocator calls this for every block that goes back to its free list.
        self.allocator.on_release = self._scrub

    def _rows(self, cache: torch.Tensor) -> torch.Tensor:
        """``cache`` as ``[num_slots, num_kv_heads, head_dim]`` (a view: writes go through)."""
        return cache.view(-1, cache.shape[2], cache.shape[3])

    def _scrub(self, start_slot: int, num_slots: int) -> None:
        """Slots ``start_slot .. start_slot + num_slots - 1`` were released."""
        # BEGIN SOLUTION lab 7.3: released slots hold the sentinel again, in K and V
        for cache in (self.k, self.v):
            self._rows(cache)[start_slot:start_slot + num_slots] = SENTINEL
        # END SOLUTION

    def allocate(self, seq_id: SeqId, k: torch.Tensor, v: torch.Tensor) -> None:
        """A new sequence whose prompt's K and V are ``k``, ``v`` (``[n, KVH, D]``)."""
        self.allocator.allocate(seq_id, len(k))
        # BEGIN SOLUTION lab 7.3: write the prompt's rows into its slots
        slots = torch.tensor(self.allocator.slot_mapping(seq_id), dtype=torch.int64)
        self._rows(self.k)[slots] = k
        self._rows(self.v)[slots] = v
        # END SOLUTION

    def append(self, seq_id: SeqId, k: torch.Tensor, v: torch.Tensor) -> None:
        """One new token (``k``, ``v``: ``[KVH, D]``) at the end of a sequence."""
        slot, copy = self.allocator.append_slot(seq_id)
        # BEGIN SOLUTION lab 7.3: copy-on-write copy first, then write the token
        for cache in (self.k, self.v):
            rows = self._rows(cache)
            if copy is not None:  # the last block was shared: this sequence got a copy
                rows[copy.dst_slot:copy.dst_slot + copy.num_slots] = (
                    rows[copy.src_slot:copy.src_slot + copy.num_slots].clone())
        self._rows(self.k)[slot] = k
        self._rows(self.v)[slot] = v
        # END SOLUTION

    def fork(self, parent_id: SeqId, child_id: SeqId) -> None:
        """``child_id`` shares every block of ``parent_id`` (nothing moves)."""
        self.allocator.fork(parent_id, child_id)

    def free(self, seq_id: SeqId) -> None:
        """Drop a sequence; blocks nobody else holds are released (and scrubbed)."""
        self.allocator.free(seq_id)

    def read(self, seq_id: SeqId) -> tuple[torch.Tensor, torch.Tensor]:
        """The sequence's K and V, ``[seq_len, KVH, D]`` each, through its slots."""
        slots = torch.tensor(self.allocator.slot_mapping(seq_id), dtype=torch.int64)
        return self._rows(self.k)[slots], self._rows(self.v)[slots]


def apply_op(cache: PagedKVTensor, op: Op, gen: torch.Generator) -> None:
    """Carry out one script step on ``cache``; new tokens get random K/V from ``gen``."""
    kvh, d = cache.k.shape[2], cache.k.shape[3]
    kind = op[0] if isinstance(op, tuple) and op else None
    if kind == "allocate" and len(op) == 3:
        n = op[2]
        cache.allocate(op[1], torch.randn(n, kvh, d, generator=gen),
                       torch.randn(n, kvh, d, generator=gen))
    elif kind == "append" and len(op) == 2:
        cache.append(op[1], torch.randn(kvh, d, generator=gen), torch.randn(kvh, d, generator=gen))
    elif kind == "fork" and len(op) == 3:
        cache.fork(op[1], op[2])
    elif kind == "free" and len(op) == 2:
        cache.free(op[1])
    else:
        raise ValueError(f"unknown step {op!r}; valid: ('allocate', seq, num_tokens), "
                         "('append', seq), ('fork', parent, child), ('free', seq)")


# --------------------------------------------------------------------------- task 7.4


@dataclass(frozen=True, slots=True)
class StepRow:
    """The three views of one step, in token slots."""

    step: int  # index of the op in the script
    op: Op
    measured: int  # slots holding data in the K tensor (the scan)
    accounted: int  # what the accounting function under test says
    tables: int  # live slots according to the block tables
    stray: int  # slots holding data that no block table names (a missed scrub)
    missing: int  # slots the block tables name that hold no data (a lost write)


@dataclass(frozen=True, slots=True)
class Comparison:
    rows: list[StepRow]
    first_mismatch: int | None  # first step where measured != accounted; None if none

    @property
    def mismatches(self) -> list[int]:
        """Every step where the measurement and the accounting disagree."""
        return [r.step for r in self.rows if r.measured != r.accounted]


def compare(script: Sequence[Op], account: Callable[[pagedsim.PagedAllocator], int],
            num_blocks: int, block_size: int, seed: int = 0) -> Comparison:
    """Replay ``script`` on a fresh :class:`PagedKVTensor` (one KV head, head_dim 4); after
    every step scan its K tensor, ask ``account(allocator)`` for its token slots, and
    compare, together with what the block tables say."""
    cache = PagedKVTensor(num_blocks, block_size)
    gen = torch.Generator().manual_seed(seed)
    rows: list[StepRow] = []
    for step, op in enumerate(script):
        apply_op(cache, op, gen)
        # BEGIN SOLUTION lab 7.4: scan, account, tables, stray, missing after the step
        found = scan(cache.k)
        live = live_slots(cache.allocator)
        written = set(found.written.flatten().nonzero().flatten().tolist())
        rows.append(StepRow(step=step, op=op, measured=found.written_slots,
                            accounted=int(account(cache.allocator)), tables=len(live),
                            stray=len(written - set(live)), missing=len(set(live) - written)))
        # END SOLUTION
    # BEGIN SOLUTION lab 7.4: the first step where measured != accounted
    first = next((r.step for r in rows if r.measured != r.accounted), None)
    # END SOLUTION
    return Comparison(rows=rows, first_mismatch=first)
