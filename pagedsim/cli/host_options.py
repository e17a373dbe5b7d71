"""The host tier's options of ``pagedsim compare`` and ``pagedsim sweep``: how much host
memory sits behind a prefix cache's GPU pool, its write policy and whether its copies
overlap the compute (:mod:`pagedsim.memory.host_tier`, :mod:`pagedsim.engine.cost`)."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

from .argtypes import MAX_GIB, shown
from .base import CliError


def host_gib(text: str) -> float:
    """A host tier's size in GiB (``"1000"``, ``"0.5"``): finite, from 0 to 2**20."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of GiB: {shown(text)}") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_GIB:
        raise argparse.ArgumentTypeError(
            f"must be a finite size from 0 to {MAX_GIB:.0f} GiB (2**20), got {shown(text)}")
    return value


def add_host_options(p: argparse.ArgumentParser, swept: tuple[str, ...] = ()) -> None:
    """``--host-cache-gb``, ``--host-write-through`` and ``--no-host-overlap`` (the first
    refused where a sweep sets it per run: ``swept`` names it)."""
    size = ("set per run by the host-cache sweep, so refused here: give its sizes with "
            "--values" if "--host-cache-gb" in swept else
            "GiB of host memory behind the GPU pool of a prefix cache (schemes "
            "prefix-cache, radix and their variants; the others ignore it): a block the GPU "
            "evicts is written back to it, a lookup continues its prefix there, and hits are "
            "loaded over the GPU's host link (PCIe 4.0 x16 for the A100, 5.0 x16 for the "
            "H100 and H200) before the prefill (default 0: no host tier)")
    p.add_argument("--host-cache-gb", type=host_gib, default=None, metavar="GIB", help=size)
    p.add_argument("--host-write-through", action="store_true",
                   help="write every block to the host tier when it is first named, not "
                        "only when the GPU evicts it (SGLang HiCache's write_through)")
    p.add_argument("--no-host-overlap", action="store_true",
                   help="charge the host tier's copies before each step's compute instead "
                        "of overlapping them with it layer by layer (as HiCache and LMCache "
                        "do; the default)")


def host_fields(args: argparse.Namespace) -> dict[str, object]:
    """The host tier's fields of an :class:`~pagedsim.experiments.Experiment` from the
    options; ``CliError`` for a policy flag without a tier to apply to."""
    gib = getattr(args, "host_cache_gb", None) or 0.0
    swept = getattr(args, "name", None) in ("host-cache", "all")
    for flag in ("host_write_through", "no_host_overlap"):
        if getattr(args, flag, False) and not gib and not swept:
            raise CliError(f"argument --{flag.replace('_', '-')}: applies to a host tier; "
                           "give its size with --host-cache-gb")
    return {"host_cache_gb": float(gib),
            "host_write_through": bool(getattr(args, "host_write_through", False)),
            "host_overlap": not getattr(args, "no_host_overlap", False)}


def ignores_host_tier(scheme: str, model: object) -> bool:
    """Whether ``scheme`` runs without the host tier a pool spec asks for: built once on a
    small pool with a one-block tier, it holds none (only the prefix caches that name
    blocks by content have one; the registry says it, so a new scheme is covered)."""
    from ..memory.schemes import make_allocator

    try:
        alloc = make_allocator(scheme, 1 << 16, 16, model=model,  # type: ignore[arg-type]
                               host_cache_blocks=1)
    except ValueError:  # cannot be built here: the run will say why, not this check
        return False
    return getattr(alloc, "host", None) is None


def warn_ignored_host_tier(args: argparse.Namespace, schemes: Sequence[str], model: object,
                           swept: bool = False) -> list[str]:
    """One stderr line naming ``--host-cache-gb`` (or the host-cache sweep's sizes, when
    ``swept``) and the schemes among ``schemes`` that run without a host tier, so that a
    title saying "host tier N GiB" is not read as applying to them; returns those
    schemes ([] and no line without a tier or when every scheme has one)."""
    if not swept and not getattr(args, "host_cache_gb", None):
        return []
    ignored = [s for s in schemes if ignores_host_tier(s, model)]
    if ignored:
        what = ("the host-cache sweep's sizes" if swept else
                f"--host-cache-gb {args.host_cache_gb:g}")
        print(f"warning: {what} ignored by {', '.join(ignored)}: only schemes with a prefix "
              "cache (prefix-cache, radix and their variants) have a host tier; these run "
              "without one", file=sys.stderr, flush=True)
    return ignored
