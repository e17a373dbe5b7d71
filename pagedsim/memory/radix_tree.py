"""The radix tree behind the ``radix`` scheme (SGLang's RadixAttention), without the pool.

A path from the root spells a token sequence one *page* (one block of ``block_size``
tokens) at a time. A node holds a run of whole pages: their content keys (``keys``, one
:func:`pagedsim.workloads.prompts.block_key` per page; the path above a node gives the rest of
their identity, so keys need not be chained hashes) and the physical blocks holding their
K/V (``blocks``). Children are found by the key of their first page.

* :meth:`RadixTree.match` finds how many leading pages of a key sequence the tree holds,
  changing nothing; :meth:`RadixTree.descend` does the same but splits the node the match
  ends inside (so the matched pages form whole nodes) and stamps the path as used.
* ``lock_ref`` counts the running sequences whose path passes through a node. A sequence
  locks the deepest node of its cached prefix (:meth:`lock` adds one along the whole path
  to the root), so a locked node's ancestors are locked too, and an unlocked node's whole
  subtree is unlocked: every unlocked page can be evicted, leaves first.
* Eviction takes the unlocked leaf that the tree's *eviction policy* ranks first
  (:meth:`pop_leaf`). A policy is a function from a node to a priority, smallest evicted
  first: :func:`lru` (the time of last use, a logical clock the caller passes in as
  ``stamp``; SGLang's default) or another module's (``radix-lfu``'s hit count, then
  the time of last use). A min-heap of ``(priority, node id)`` entries, validated when
  popped, finds that leaf in O(log n). Entries go stale when a leaf gets a child, is
  locked, is restamped, is hit or leaves the tree; :meth:`_offer` pushes a fresh one
  whenever a node becomes an unlocked leaf or its priority may have changed.
* ``hit_count`` counts the admissions whose cached prefix reached into a node (a policy
  may rank by it; the LRU policy ignores it).

The pool (free list, evictable pages) is :mod:`pagedsim.memory.radix_pool`; the
policy that matches, locks and inserts for the block manager is
:mod:`pagedsim.memory.radix_cache`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterator, Sequence


class Node:
    """A run of whole pages: their keys and blocks, in token order."""

    __slots__ = ("parent", "children", "keys", "blocks", "lock_ref", "last_access", "id",
                 "depth", "hit_count")

    def __init__(self, parent: Node | None, keys: list, blocks: list[int], last_access: int,
                 node_id: int) -> None:
        self.parent = parent  # None for the root, and for a node evicted from the tree
        self.children: dict[Hashable, Node] = {}  # first page's key -> child
        self.keys = keys
        self.blocks = blocks
        self.lock_ref = 0  # running sequences whose path passes through this node
        self.last_access = last_access  # logical clock of the last use
        self.id = node_id  # creation order: breaks LRU ties deterministically
        self.depth = (parent.depth if parent is not None else 0) + len(keys)  # pages to here
        self.hit_count = 0  # admissions whose cached prefix reached into this node

    def __lt__(self, other: Node) -> bool:  # heap entries of one node may tie on the rest
        return self.id < other.id

    def __repr__(self) -> str:
        return (f"Node(id={self.id}, blocks={self.blocks}, lock_ref={self.lock_ref}, "
                f"last_access={self.last_access})")


def lru(node: Node) -> tuple:
    """SGLang's default eviction priority: the least recently used leaf goes first."""
    return (node.last_access,)


#: A node's eviction priority; the unlocked leaf with the smallest goes first.
Priority = Callable[[Node], tuple]


class RadixTree:
    """Pages of token content in a radix tree, with lock counts and a heap of leaves
    ordered by an eviction policy (``priority``, :func:`lru` by default)."""

    def __init__(self, priority: Priority = lru) -> None:
        self.root = Node(None, [], [], 0, 0)
        self.priority = priority
        self._next_id = 1
        self._heap: list[tuple[tuple, int, Node]] = []  # (priority, id, leaf), lazily valid
        self.num_pages = 0  # pages in the tree (root excluded)
        self.num_evictable = 0  # pages of unlocked nodes: evictable, leaves first

    # ------------------------------------------------------------------ lookups
    def match(self, keys: Sequence, limit: int) -> tuple[Node, Node | None, int, int]:
        """How far the first ``limit`` of ``keys`` go down the tree, changing nothing.

        Returns ``(node, child, c, m)``: ``m`` pages matched; ``node`` is the deepest node
        matched whole; ``child`` (or None) the node the match ends inside, after its
        first ``c`` pages."""
        node, i = self.root, 0
        while i < limit:
            child = node.children.get(keys[i])
            if child is None:
                break
            ck, c = child.keys, 1
            i += 1
            n = len(ck)
            while c < n and i < limit and ck[c] == keys[i]:
                c += 1
                i += 1
            if c < n:
                return node, child, c, i
            node = child
        return node, None, 0, i

    def descend(self, keys: Sequence, num_pages: int, stamp: int) -> Node:
        """The node that ends exactly after the first ``num_pages`` of ``keys`` (which the
        tree must hold), splitting the node the match ends inside; the path is stamped."""
        node, child, c, m = self.match(keys, num_pages)
        assert m == num_pages, f"the tree holds {m} of the {num_pages} pages to descend"
        if child is not None:
            node = self.split(child, c)
        self.stamp(node, stamp)
        return node

    def path_blocks(self, node: Node) -> list[int]:
        """The blocks from the root down to ``node`` (its last page included), in order."""
        runs = []
        while node.parent is not None:
            runs.append(node.blocks)
            node = node.parent
        return [b for run in reversed(runs) for b in run]

    def path_keys(self, node: Node) -> list:
        """The page keys from the root down to ``node``, in order."""
        runs = []
        while node.parent is not None:
            runs.append(node.keys)
            node = node.parent
        return [k for run in reversed(runs) for k in run]

    def nodes(self) -> Iterator[Node]:
        """Every node but the root, parents before children (children in insertion order)."""
        stack = list(reversed(self.root.children.values()))
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children.values()))

    # ---------------------------------------------------------------- mutations
    def split(self, child: Node, c: int) -> Node:
        """Cut ``child`` after its first ``c`` pages; returns the new upper node (which
        inherits the lock count and the time of last use: it is on the same paths)."""
        parent = child.parent
        assert parent is not None and 0 < c < len(child.keys)
        upper = Node(parent, child.keys[:c], child.blocks[:c], child.last_access, self._new_id())
        upper.lock_ref = child.lock_ref
        upper.hit_count = child.hit_count
        parent.children[child.keys[0]] = upper
        child.keys, child.blocks = child.keys[c:], child.blocks[c:]
        child.parent = upper
        upper.children[child.keys[0]] = child
        return upper

    def add_leaf(self, parent: Node, keys: list, blocks: list[int], stamp: int) -> Node:
        """A new unlocked leaf under ``parent`` (its first key must be new there)."""
        assert keys and len(keys) == len(blocks) and keys[0] not in parent.children
        leaf = Node(parent, keys, blocks, stamp, self._new_id())
        parent.children[keys[0]] = leaf
        self.num_pages += len(keys)
        self.num_evictable += len(keys)
        self._offer(leaf)
        return leaf

    def stamp(self, node: Node, stamp: int) -> None:
        """Mark the path from the root to ``node`` as used at time ``stamp``."""
        x = node
        while x.parent is not None:
            x.last_access = stamp
            x = x.parent
        self._offer(node)

    def hit(self, node: Node) -> None:
        """An admission's cached prefix reaches ``node``: one more hit along its path."""
        x = node
        while x.parent is not None:
            x.hit_count += 1
            x = x.parent
        self._offer(node)

    def lock(self, node: Node) -> None:
        """One more running sequence uses the path to ``node``: nothing on it is evictable."""
        x = node
        while x.parent is not None:
            if x.lock_ref == 0:
                self.num_evictable -= len(x.keys)
            x.lock_ref += 1
            x = x.parent

    def unlock(self, node: Node) -> None:
        """One running sequence fewer on the path to ``node``."""
        x = node
        while x.parent is not None:
            x.lock_ref -= 1
            assert x.lock_ref >= 0, f"{x} unlocked more often than locked"
            if x.lock_ref == 0:
                self.num_evictable += len(x.keys)
                self._offer(x)
            x = x.parent

    def pop_leaf(self) -> Node | None:
        """Remove the unlocked leaf the eviction policy ranks first from the tree and
        return it (its blocks are the caller's to free), or None when every page is
        locked."""
        heap, priority = self._heap, self.priority
        while heap:
            rank, _, node = heapq.heappop(heap)
            if (node.parent is None or node.lock_ref or node.children
                    or priority(node) != rank):
                continue  # a stale entry
            parent = node.parent
            del parent.children[node.keys[0]]
            node.parent = None
            self.num_pages -= len(node.keys)
            self.num_evictable -= len(node.keys)
            self._offer(parent)  # it may be a leaf now
            return node
        return None

    # ------------------------------------------------------------------ helpers
    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def _offer(self, node: Node) -> None:
        """Push a heap entry for ``node`` if it is an unlocked leaf (not the root)."""
        if node.parent is not None and not node.lock_ref and not node.children:
            heap, priority = self._heap, self.priority
            heapq.heappush(heap, (priority(node), node.id, node))
            if len(heap) > 4 * self.num_pages + 64:  # mostly stale entries: rebuild
                self._heap = [e for e in heap if e[2].parent is not None and not e[2].lock_ref
                              and not e[2].children and priority(e[2]) == e[0]]
                heapq.heapify(self._heap)

    def describe(self) -> list[dict]:
        """The tree as plain data, parents before children: each node's parent index (-1:
        the root), blocks, lock count, last use and depth in pages."""
        index: dict[int, int] = {}
        out = []
        for node in self.nodes():
            index[node.id] = len(out)
            parent = node.parent
            out.append({"parent": -1 if parent is self.root else index[parent.id],  # type: ignore[union-attr]
                        "blocks": list(node.blocks), "lock_ref": node.lock_ref,
                        "last_access": node.last_access, "depth": node.depth})
        return out

    def check(self) -> None:
        """Assert the tree's own consistency (structure, counts, the LRU heap)."""
        pages = evictable = 0
        valid = {(e[2].id, e[0]) for e in self._heap}
        priority = self.priority
        for node in self.nodes():
            parent = node.parent
            assert parent is not None and parent.children.get(node.keys[0]) is node, (
                f"{node} is not its parent's child under its first key")
            assert node.keys and len(node.keys) == len(node.blocks), f"{node}: bad page run"
            assert node.depth == parent.depth + len(node.keys), f"{node}: wrong depth"
            assert node.lock_ref >= 0 and (parent is self.root
                                           or node.lock_ref <= parent.lock_ref), (
                f"{node} is locked more than its parent")
            pages += len(node.keys)
            if not node.lock_ref:
                evictable += len(node.keys)
                if not node.children:
                    assert (node.id, priority(node)) in valid, (
                        f"unlocked leaf {node} is missing from the eviction heap")
        assert pages == self.num_pages, f"{self.num_pages} pages counted, {pages} in the tree"
        assert evictable == self.num_evictable, (
            f"{self.num_evictable} evictable pages counted, {evictable} in the tree")
