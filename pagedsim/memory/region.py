"""One sequence of a contiguous allocator: its region of the arena."""

from __future__ import annotations


class Region:
    """``size`` slots from ``start``, of which the sequence's ``num_tokens`` are filled."""

    __slots__ = ("start", "size", "num_tokens", "final_len")

    def __init__(self, start: int, size: int, num_tokens: int, final_len: int | None) -> None:
        self.start = start  # first slot
        self.size = size  # slots owned, after policy, alignment and placement rounding
        self.num_tokens = num_tokens
        self.final_len = final_len  # true final length (tokens), for the accounting
