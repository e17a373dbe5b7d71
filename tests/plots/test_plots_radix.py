"""The radix-tree picture: one cell per page, coloured by lock, subtrees side by side."""

from __future__ import annotations

import random

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from pagedsim import PagedAllocator, Request  # noqa: E402
from pagedsim.memory.block_manager import BlockManager
from pagedsim.memory.radix import RadixAllocator  # noqa: E402
from pagedsim.plots import CATEGORY_COLORS  # noqa: E402
from pagedsim.plots.radix_tree import radix_tree, tree_layout, tree_nodes  # noqa: E402


def _req(rid: int, pieces: tuple[int, ...], prompt_len: int) -> Request:
    return Request(rid, 0.0, prompt_len, 2, prompt_pieces=pieces, prompt_piece_tokens=4)


def _pool() -> BlockManager:
    """A's 3 pages cached, B (sharing A's first 2) and C (sharing 1) running."""
    pool = RadixAllocator(16, 4)
    pool.allocate("A", 15, final_len=17, block_hashes=_req(0, (10, 11, 12, 13), 15))
    pool.free("A")
    pool.allocate("B", 14, final_len=16, block_hashes=_req(1, (10, 11, 20, 21), 14))
    pool.allocate("C", 15, final_len=17, block_hashes=_req(2, (10, 99, 12, 13), 15))
    return pool


def _cells(ax, gid: str) -> int:
    return sum(len(c.get_paths()) for c in ax.collections if c.get_gid() == gid)


def test_radix_tree_draws_every_page_coloured_by_its_nodes_lock() -> None:
    pool = _pool()
    nodes = tree_nodes(pool)
    ax = radix_tree(pool)
    locked = sum(len(n["blocks"]) for n in nodes if n["lock_ref"])
    unlocked = sum(len(n["blocks"]) for n in nodes if not n["lock_ref"])
    assert locked and unlocked
    assert _cells(ax, "tree:token") == locked
    assert _cells(ax, "tree:cached") == unlocked == len(pool.snapshot()["cached_blocks"])
    cached = next(c for c in ax.collections if c.get_gid() == "tree:cached")
    assert matplotlib.colors.to_hex(cached.get_facecolor()[0]) == CATEGORY_COLORS["cached"].lower()
    edges = next(c for c in ax.collections if c.get_gid() == "tree:edges")
    assert len(edges.get_segments()) == len(nodes)  # one edge into every node
    labels = [t.get_text() for t in ax.texts if t.get_gid() == "tree:label"]
    assert labels == [f"lock {n['lock_ref']}, t{n['last_access']}" for n in nodes]
    plt.close("all")


def _random_tree(rng: random.Random, size: int) -> list[dict]:
    nodes: list[dict] = []
    for _ in range(size):
        nodes.append({"parent": rng.randrange(-1, len(nodes)),
                      "blocks": list(range(rng.randint(1, 5))), "lock_ref": 0,
                      "last_access": 0})
    return nodes


@pytest.mark.parametrize("seed", range(20))
def test_tree_layout_puts_children_under_parents_and_never_overlaps(seed: int) -> None:
    rng = random.Random(seed)
    nodes = _random_tree(rng, rng.randint(1, 25))
    pos = tree_layout(nodes)
    for i, n in enumerate(nodes):
        parent_level = 0 if n["parent"] < 0 else pos[n["parent"]][1]
        assert pos[i][1] == parent_level + 1
    by_level: dict[int, list[tuple[float, float]]] = {}
    for (x, level), n in zip(pos, nodes, strict=True):
        by_level.setdefault(level, []).append((x, x + len(n["blocks"])))
    for spans in by_level.values():
        spans.sort()
        for (_, right), (left, _) in zip(spans, spans[1:], strict=False):
            assert right <= left, f"nodes overlap at one level: {spans}"


def test_radix_tree_refuses_a_pool_without_a_tree() -> None:
    with pytest.raises(TypeError, match="radix"):
        radix_tree(PagedAllocator(4, 4))


def test_block_map_of_a_radix_pool_draws_cached_pages_and_names_its_free_list() -> None:
    from pagedsim.plots import block_map
    from pagedsim.plots.free_queue import free_queue

    pool = _pool()
    pool.free("C")
    snap = pool.snapshot()
    ax = block_map(pool)
    assert _cells(ax, "slots:cached") == len(snap["cached_blocks"]) > 0
    tables = [t.get_text() for t in ax.texts if t.get_gid() == "table"]
    assert tables[-1].startswith(f"free list: {len(snap['free_blocks'])} blocks")
    assert tables[-1].endswith(f"; {len(snap['cached_blocks'])} cached in the tree")
    with pytest.raises(TypeError, match="prefix-cache"):  # its free list is no queue
        free_queue(pool)
    plt.close("all")
