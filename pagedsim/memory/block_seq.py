"""One sequence of a block manager, as the manager keeps it (nano-vllm's ``Sequence``
owns its block table the same way)."""

from __future__ import annotations


class Seq:
    """One sequence: its block table, its tokens, its true final length (accounting) and,
    in a caching pool, what names its blocks."""

    __slots__ = ("table", "num_tokens", "final_len", "content", "branch", "hashes",
                 "hit_tokens", "host_hit_tokens", "next_slot", "end_slot", "node")

    def __init__(self, table: list[int], num_tokens: int, final_len: int | None,
                 content: object = None, branch: int = 0, hashes: list[int] | None = None,
                 hit_tokens: int = 0) -> None:
        self.table = table
        self.num_tokens = num_tokens
        self.final_len = final_len
        self.content = content  # the request (caching pools only); None: never named
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
