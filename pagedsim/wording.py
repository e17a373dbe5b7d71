"""Numbers in sentences: counts with the right noun form, and ratios that read at 1x.

Reports and notebooks build sentences from a run's numbers, and a run can make any of
them 0 or 1: "1 requests", "block(s)", "1x less", "at most 0 requests waited". These
helpers write such phrases so they read well at every value.
"""

from __future__ import annotations

import math


def count(n: float, noun: str, plural: str | None = None, *, digits: str = ",") -> str:
    """``n`` and ``noun`` in agreement: ``count(1, "request")`` is "1 request",
    ``count(2_000, "request")`` "2,000 requests", ``count(1, "copy", "copies")`` "1 copy".
    ``plural`` defaults to ``noun + "s"``; ``digits`` is the number's format spec."""
    word = noun if n == 1 else (plural if plural is not None else noun + "s")
    return f"{n:{digits}} {word}"


def no_or_count(n: float, noun: str, plural: str | None = None) -> str:
    """Like :func:`count`, but 0 reads "no request" ("no request waited", not "0 requests
    waited")."""
    return f"no {noun}" if n == 0 else count(n, noun, plural)


def compared(ratio: float, than: str, *, fewer: str = "less", digits: str = ".1f") -> str:
    """``than`` compared by ``ratio`` (how many times smaller the thing said is):
    ``compared(3.2, "the real model's")`` is "3.2x less than the real model's",
    ``compared(1, ...)`` "as much as the real model's" (any ratio that rounds to 1x), and
    ``compared(0.5, ...)`` "2.0x more than ...". ``fewer`` is the word for a smaller amount
    ("less", "fewer" or "smaller"); ``digits`` the ratio's format spec."""
    if not math.isfinite(ratio) or ratio <= 0:
        raise ValueError(f"ratio must be a positive finite number, got {ratio!r}")
    same, more = _SAME_MORE[fewer]
    if f"{ratio:{digits}}" == f"{1:{digits}}":  # "1.0x less" says nothing: say "as much as"
        return f"{same} as {than}"
    if ratio > 1:
        return f"{ratio:{digits}}x {fewer} than {than}"
    return f"{1 / ratio:{digits}}x {more} than {than}"


_SAME_MORE = {"less": ("as much", "more"), "fewer": ("as many", "more"),
              "smaller": ("as large", "larger")}
