"""Argument types: they turn a flag's text into a value, or raise naming the flag's text.

argparse reports an ``ArgumentTypeError`` as ``argument --flag: <message>``, so every
message here names the flag. Ranges that the library checks (block size >= 1,
utilization in (0, 1]) are left to it, so each rule lives in one place.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from ..units import GiB


def gib_to_bytes(text: str) -> int:
    """A size in GiB (``"40"``, ``"12.5"``) -> bytes (int); finite and >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of GiB: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite size >= 0 GiB, got {text!r}")
    return round(value * GiB)


def rate(text: str) -> float:
    """A request rate in requests/s: a number > 0, or ``inf`` (all at t = 0)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a rate in requests/s: {text!r}") from None
    if math.isnan(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0 requests/s (or inf), got {text!r}")
    return value


def csv_list(kind: Callable[[str], object]) -> Callable[[str], list]:
    """An argument type for comma-separated values, each converted by ``kind``."""

    def parse(text: str) -> list:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
        try:
            return [kind(t) for t in items]
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad value in list {text!r}") from None

    return parse
