"""Named allocation schemes: which allocator, configured how.

``paged`` is PagedAttention's block allocator; ``contiguous-<reservation>`` reserves one
region per request in a linear arena (``max``, ``pow2`` or ``oracle``), placed by a
buddy allocator as the vLLM paper assumes for its Orca baselines; append
``-first-fit`` or ``-best-fit`` to place it otherwise (e.g. ``contiguous-oracle-best-fit``).
"""

from __future__ import annotations

from .allocators.base import Allocator
from .allocators.contiguous import PLACEMENTS, RESERVATIONS, ContiguousAllocator
from .allocators.paged import PagedAllocator
from .validate import check_int

DEFAULT_SCHEMES = ("contiguous-max", "contiguous-pow2", "contiguous-oracle", "paged")
DEFAULT_PLACEMENT = "buddy"


def parse_scheme(name: str) -> tuple[str, str | None, str | None]:
    """``'contiguous-pow2-best-fit'`` -> ``('contiguous', 'pow2', 'best-fit')``;
    ``'paged'`` -> ``('paged', None, None)``."""
    if name == "paged":
        return "paged", None, None
    valid = ", ".join(
        ["paged"] + [f"contiguous-{r}[-{'|'.join(PLACEMENTS)}]" for r in RESERVATIONS]
    )
    head, _, rest = name.partition("-")
    reservation, _, placement = rest.partition("-")
    if head != "contiguous" or reservation not in RESERVATIONS:
        raise ValueError(f"unknown scheme {name!r}; valid: {valid}")
    placement = placement or DEFAULT_PLACEMENT
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r} in scheme {name!r}; valid: {valid}")
    return "contiguous", reservation, placement


def make_allocator(
    scheme: str, capacity_slots: int, block_size: int = 16, max_model_len: int = 2048
) -> Allocator:
    """An empty allocator for ``scheme`` over a pool of ``capacity_slots`` token slots
    (paged: ``capacity_slots // block_size`` blocks)."""
    kind, reservation, placement = parse_scheme(scheme)
    check_int("capacity_slots", capacity_slots, minimum=1)
    check_int("block_size", block_size, minimum=1)
    if kind == "paged":
        num_blocks = capacity_slots // block_size
        if num_blocks < 1:
            raise ValueError(
                f"a pool of {capacity_slots} slots holds no block of {block_size} slots"
            )
        return PagedAllocator(num_blocks, block_size)
    assert reservation is not None and placement is not None
    return ContiguousAllocator(capacity_slots, reservation, placement, max_model_len)
