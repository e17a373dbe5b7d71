"""Pictures of a prefix cache: the free queue, and cached blocks in the block map."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from pagedsim import PagedAllocator, Request  # noqa: E402
from pagedsim.memory.block_manager import BlockManager
from pagedsim.memory.prefix_cache import PrefixCachingAllocator  # noqa: E402
from pagedsim.plots import CATEGORY_COLORS, block_map  # noqa: E402
from pagedsim.plots.free_queue import free_queue, queue_order  # noqa: E402


def _req(rid: int, pieces: tuple[int, ...], prompt_len: int) -> Request:
    return Request(rid, 0.0, prompt_len, 2, prompt_pieces=pieces, prompt_piece_tokens=4)


def _pool_with_cache() -> BlockManager:
    """8 blocks of 4: A (10 tokens, 2 full blocks) freed, then C holds 2 new blocks."""
    pool = PrefixCachingAllocator(8, 4)
    pool.allocate("A", 10, final_len=12, block_hashes=_req(0, (1, 2, 3), 10))
    pool.free("A")
    pool.allocate("C", 5, final_len=8)
    return pool


def _cells(ax, gid: str) -> int:
    return sum(len(c.get_paths()) for c in ax.collections if c.get_gid() == gid)


def test_queue_order_is_the_allocators_queue_head_first_with_cached_flags() -> None:
    pool = _pool_with_cache()
    order = queue_order(pool)
    snap = pool.snapshot()
    assert [b for b, _ in order] == snap["free_blocks"]
    assert {b for b, c in order if c} == set(snap["cached_blocks"]) == {0, 1}
    # A was freed tail first (2, 1, 0), after the never-used blocks; C took 3 and 4.
    assert [b for b, _ in order] == [5, 6, 7, 2, 1, 0]


def test_free_queue_draws_one_cell_per_queued_block_coloured_by_kind() -> None:
    pool = _pool_with_cache()
    ax = free_queue(pool, title="t")
    assert _cells(ax, "queue-cached") == 2
    assert _cells(ax, "queue-free") == 4
    cached = next(c for c in ax.collections if c.get_gid() == "queue-cached")
    assert matplotlib.colors.to_hex(cached.get_facecolor()[0]) == CATEGORY_COLORS["cached"].lower()
    labels = [t.get_text() for t in ax.texts]
    assert "6 blocks in the queue (2 cached, 4 free); 2 held by sequences" in labels
    plt.close("all")


def test_free_queue_refuses_a_pool_without_a_prefix_cache() -> None:
    with pytest.raises(TypeError, match="prefix-cache"):
        free_queue(PagedAllocator(4, 4))


def test_block_map_draws_cached_blocks_and_names_the_free_queue() -> None:
    pool = _pool_with_cache()
    ax = block_map(pool)
    assert _cells(ax, "slots:cached") == 2
    assert _cells(ax, "slots:free") == 4
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "cached (K/V kept, evictable): 2 blocks" in legend
    tables = [t.get_text() for t in ax.texts if t.get_gid() == "table"]
    assert tables[-1] == "free queue: 6 blocks, 2 cached (next: 5, 6, 7, 2, …)"
    plt.close("all")
