"""One sequence of a block manager, as the manager keeps it (nano-vllm's ``Sequence``
owns its block table the same way).

Why a record of its own, beside the engine's :class:`~pagedsim.engine.plan.SequenceGroup`:
the engine's record is a *request* (its samples or beams, its queue status, its times),
memory's is one *sequence* (its block table and where its next token goes); a request of
n samples has n of these. Data flows one way, engine to memory, so memory may not import
the engine's types: the two meet by sequence id, as vLLM v1's ``KVCacheManager`` keeps its
blocks by request id while the scheduler keeps the ``Request``. What names the blocks is
shared, not copied: ``block_hashes`` is the very :class:`BlockHashes` object the scheduler
made once for the request (vLLM's ``request.block_hashes``); ``hashes`` is this sequence's
own chain through it (a sample's generated blocks differ from its siblings').
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for the annotation only
    from ..workloads.block_hashes import BlockHashes


class Seq:
    """One sequence: its block table, its tokens, its true final length (accounting) and,
    in a caching pool, what names its blocks."""

    __slots__ = ("table", "num_tokens", "final_len", "block_hashes", "branch", "hashes",
                 "hit_tokens", "host_hit_tokens", "next_slot", "end_slot", "node")

    def __init__(self, table: list[int], num_tokens: int, final_len: int | None,
                 block_hashes: BlockHashes | None = None, branch: int = 0,
                 hashes: list[int] | None = None,
                 hit_tokens: int = 0) -> None:
        self.table = table
        self.num_tokens = num_tokens
        self.final_len = final_len
        # The request's block hashes (caching pools only; the scheduler's object, shared,
        # hashed once); None: its blocks are never named.
        self.block_hashes = block_hashes
        self.branch = branch  # tells apart the generated tokens of one request's sequences
        self.hashes = hashes if hashes is not None else []  # of its full blocks, in order
        self.hit_tokens = hit_tokens  # tokens served from the cache at admission
        self.host_hit_tokens = 0  # of them, tokens loaded from a host tier
        # The manager's fast path: appends may write straight to ``next_slot``, then the
        # next, while below ``end_slot``: free slots of a private last block before its
        # last one (filling a block may name it, so that append takes the general path).
        # Both 0 when unsure: the general path then looks and sets them again.
        self.next_slot = 0
        self.end_slot = 0
        self.node = None  # the radix policy's: the deepest tree node it has locked
