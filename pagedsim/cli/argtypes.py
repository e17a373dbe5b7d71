"""Argument types: they turn a flag's text into a value, or raise naming what is valid.

argparse reports an ``ArgumentTypeError`` as ``argument --flag: <message>``, so every
error here names the flag and, through :func:`shown`, the text given. Semantic ranges
that the library checks (block size >= 1, utilization in (0, 1], at most 10 million
requests) are left to it, so each rule lives in one place; what is checked here is what
the library cannot see or must never receive: syntax, NaN and infinities, empty text,
and sizes so large that arithmetic on them overflows.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Mapping

from ..metrics.step_keep import KeepSteps, parse_keep_steps
from ..units import GiB
from ..workloads.workload import MIN_RATE_PER_S

#: Largest size flag in GiB: 2**20 GiB = 1 PiB, far above any GPU pool, and small enough
#: that the size in bytes (an int) and float arithmetic on it stay exact and finite.
MAX_GIB = float(1 << 20)
#: Largest whole number a flag takes: 2**53, the largest integer a float holds exactly,
#: so byte counts computed from it (bytes per token x tokens, GPUs x memory) never
#: overflow a float. Tighter limits (requests, pool size) are the library's.
MAX_WHOLE = 1 << 53
#: Longest piece of the user's text an error message repeats.
_SHOWN_CHARS = 40


def shown(text: str) -> str:
    """``text`` quoted for an error message, cut short if long (a 300-digit number is
    reported by its first digits and its length, so the message stays one short line)."""
    if len(text) <= _SHOWN_CHARS:
        return repr(text)
    return f"{text[:_SHOWN_CHARS]!r}... ({len(text)} characters)"


def gib_to_bytes(text: str) -> int:
    """A size in GiB (``"40"``, ``"12.5"``) -> bytes (int); finite, >= 0, <= 2**20 GiB."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of GiB: {shown(text)}") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_GIB:
        raise argparse.ArgumentTypeError(
            f"must be a finite size from 0 to {MAX_GIB:.0f} GiB (2**20), got {shown(text)}")
    return round(value * GiB)


def rate(text: str) -> float:
    """A request rate in requests/s: at least :data:`pagedsim.workloads.workload.MIN_RATE_PER_S`
    (one request per 11.6 days), or ``inf`` (all at t = 0)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a rate in requests/s: {shown(text)}") from None
    if math.isnan(value) or value < MIN_RATE_PER_S:
        raise argparse.ArgumentTypeError(
            f"must be >= {MIN_RATE_PER_S:g} requests/s (one per 11.6 days) or inf, "
            f"got {shown(text)}")
    return value


def keep_steps(text: str) -> KeepSteps:
    """``--keep-steps``: ``all``, ``none``, N (a sample of at most N steps) or ``SECONDSs``
    (one step per span of simulated time); :func:`pagedsim.metrics.step_keep.parse_keep_steps`."""
    try:
        return parse_keep_steps(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{shown(text)}: {exc}") from None


def whole(text: str) -> int:
    """A whole number written in digits (``"16"``, ``"-1"``), at most 2**53 in size;
    its range (>= 1, ...) is checked where it is used."""
    try:
        value = int(text.strip())
    except ValueError:  # also a number too long for int() to parse
        raise argparse.ArgumentTypeError(
            f"not a whole number: {shown(text)} (write digits, e.g. 16)") from None
    if abs(value) > MAX_WHOLE:
        raise argparse.ArgumentTypeError(
            f"must be at most 2**53 = {MAX_WHOLE:,} in size, got {shown(text)}")
    return value


def jobs(text: str) -> int:
    """Worker processes: -1 (every CPU) or a number >= 1."""
    value = whole(text)
    if value != -1 and value < 1:
        raise argparse.ArgumentTypeError(
            f"must be -1 (every CPU) or a number of processes >= 1, got {shown(text)}")
    return value


def finite(text: str) -> float:
    """A finite number (no NaN, no infinity)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {shown(text)}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {shown(text)}")
    return value


def nonempty(what: str) -> Callable[[str], str]:
    """Text that is not empty or blank (an empty ``--workload`` or ``--out`` would
    otherwise silently mean the default, or the current folder)."""

    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"empty; expected {what}")
        return text

    return parse


def preset(kind: str, presets: Mapping[str, object]) -> Callable[[str], str]:
    """A preset name, matched case-insensitively (``A100-80GB`` -> ``a100-80gb``);
    the error lists the valid names."""

    def parse(text: str) -> str:
        by_lower = {name.lower(): name for name in presets}
        name = by_lower.get(text.strip().lower())
        if name is None:
            raise argparse.ArgumentTypeError(
                f"unknown {kind} {shown(text)}; valid: {', '.join(presets)}")
        return name

    return parse


#: Most items a list flag takes (``--values``, ``--schemes``, ``--capacity-tokens``): each
#: is a run or more, and 64 sweeps' worth is far past any figure; 2,000 values ran for
#: minutes before anything was said.
MAX_LIST_ITEMS = 64


def csv_list(kind: Callable[[str], object], what: str = "values",
             max_items: int = MAX_LIST_ITEMS, unique: bool = True) -> Callable[[str], list]:
    """An argument type for comma-separated values, each converted by ``kind`` (whose
    ``ArgumentTypeError`` is passed on, naming the bad item): at most ``max_items`` of
    them, none given twice (a repeated value would only repeat its rows) unless
    ``unique`` is False (a list of one figure per position, where two may be equal)."""

    def parse(text: str) -> list:
        # Count the commas before splitting: a 10 MB list is refused without building it.
        if text.count(",") >= max_items:
            raise argparse.ArgumentTypeError(
                f"at most {max_items} {what}, got {text.count(',') + 1:,} ({shown(text)})")
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list, got {shown(text)}")
        try:
            values = [kind(t) for t in items]
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad value in list {shown(text)}") from None
        seen: dict[object, str] = {}
        for item, value in zip(items, values, strict=True) if unique else ():
            if value in seen:
                again = (f"{seen[value]!r} and {item!r} are the same value" if
                         seen[value] != item else f"{item!r} is given twice")
                raise argparse.ArgumentTypeError(
                    f"{again}; give each of the {what} once")
            seen[value] = item
        return values

    return parse


#: A Dask scheduler address ``[tcp|tls|ws|wss|ucx://]HOST:PORT``: a host name, IPv4
#: address or bracketed IPv6 address, and a port.
_DASK_ADDRESS = re.compile(
    r"(?:(?:tcp|tls|ws|wss|ucx)://)?"
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])"
    r":(?P<port>[0-9]{1,5})")


def dask_address(text: str) -> str:
    """``local`` (a LocalCluster for the run) or a Dask scheduler address with its port
    (``tcp://10.0.0.5:8786``, ``scheduler:8786``). Only the form is checked here, so a
    bad value fails at once without trying to connect."""
    value = text.strip()
    if value.lower() == "local":
        return "local"
    match = _DASK_ADDRESS.fullmatch(value)
    if match is None or not 1 <= int(match.group("port")) <= 65535:
        raise argparse.ArgumentTypeError(
            f"expected 'local' or a Dask scheduler address HOST:PORT or "
            f"tcp://HOST:PORT, got {shown(text)}")
    return value
