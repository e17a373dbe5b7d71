"""How much a contiguous region reserves up front, by policy (the vLLM paper's Orca
baselines, §6.1):

- ``max``: ``max_model_len`` slots for everyone (the output length is unknown);
- ``pow2``: the prompt plus the next power of two of the true output length, capped at
  ``max_model_len`` ("if the true output length is 25, it reserves 32 positions for
  outputs": an over-reservation of at most 2x);
- ``oracle``: exactly the true final length (an upper bound on what any reservation
  scheme could do).
"""

from __future__ import annotations

from ..validate import check_int
from .placement import next_pow2

RESERVATIONS = ("max", "pow2", "oracle")


def reserve_slots(reservation: str, num_tokens: int, final_len: int | None,
                  max_model_len: int) -> int:
    """Slots ``reservation`` asks for a ``num_tokens``-token prompt whose request ends at
    ``final_len`` tokens (before alignment and placement), at most ``max_model_len``."""
    num_tokens = check_int("num_tokens", num_tokens, minimum=0)
    if num_tokens > max_model_len:
        raise ValueError(
            f"num_tokens ({num_tokens}) exceeds max_model_len ({max_model_len})"
        )
    if final_len is None:
        if reservation != "max":
            raise ValueError(
                f"reservation {reservation!r} needs the request's final_len "
                "(prompt + output tokens); pass final_len="
            )
        final = num_tokens
    else:
        final = check_int("final_len", final_len, minimum=0)
        if final < num_tokens:
            raise ValueError(f"final_len ({final}) must be >= num_tokens ({num_tokens})")
        if final > max_model_len:
            raise ValueError(
                f"final_len ({final}) exceeds max_model_len ({max_model_len})"
            )
    if reservation == "max":
        want = max_model_len
    elif reservation == "pow2":  # what is still to come is over-reserved, <= 2x
        want = min(num_tokens + next_pow2(final - num_tokens), max_model_len)
    else:
        want = final
    return max(want, 1)
