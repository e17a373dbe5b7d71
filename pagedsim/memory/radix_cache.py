"""SGLang's RadixAttention policy, composed into the block manager: full pages kept in a
radix tree of token content, lock counts on running paths.

A page is keyed by the chained hash of its tokens and all before it (the same names
``prefix-cache`` gives its blocks, from the request's
:class:`~pagedsim.workloads.block_hashes.BlockHashes`), in a radix tree of pages
(:class:`~.radix_tree.RadixTree`, page size = block size), as
``python/sglang/srt/mem_cache/radix_cache.py`` keeps them; matching walks from the root,
so a chained key matches exactly where the page's own content would. A sequence holds
the pages of its *locked path* (root to the deepest node of its cached prefix;
``lock_ref`` + 1 on each node of it) and no other tree page, so a tree page's reference
count equals its node's ``lock_ref``, and the unlocked pages are exactly the cached ones
(the pool's, :mod:`~.radix_pool`). SGLang's names in brackets:

1. Admission (:meth:`RadixCache.plan`, :meth:`RadixCache.admit`) [``match_prefix``,
   ``inc_lock_ref``]: the longest cached prefix, whole pages only and at most
   ``num_tokens - 1`` tokens (the last prompt token is always computed); the node the
   match ends inside is split; the path is locked, then new blocks are taken. All or
   nothing: a failed admission changes nothing (tree, clock and lock counts included).
   The new full pages go into the tree at once and the lock moves down to them (SGLang
   inserts a prompt after its prefill; our manager sees a prefill only at admission, and
   ``prefix-cache`` names its blocks at admission too, so with both caching schemes a
   request admitted later, even in the same step, hits them).
2. Free (:meth:`freeing`, :meth:`freed`) [``cache_finished_req``]: the full pages below
   the locked path (decode-filled ones, later prefill chunks) are inserted; a page whose
   content the tree holds already is a duplicate: it is freed, the tree's copy kept.
   Insertion stops at a page another sequence still holds (a fork shares pages outside
   the tree; the last holder inserts it). Then the path is unlocked, and the partial last
   page and the pages not kept go to the free list.
3. Eviction [``evict``]: lazily, when the free list cannot serve a new block (the pool's).
   Last use is a logical clock that ticks once per admission and per free with content;
   a split-off lower part keeps its old time (SGLang restamps it), so only pages a
   request used count as used.

4. Host tier (the pool's ``host``, :class:`~.host_tier.HostTier`) [HiCache]: a match
   continues in the host after the tree's pages, by the same chained keys; an admission
   pins those host hits, takes its new blocks (evicting leaves, whose pages are written
   back to the host), loads the hits into the first of them, and they join the tree with
   the pages it computes. With write-through a page is queued for the host when it joins
   the tree. A node's tiers (:meth:`tiers`): the GPU while it is in the tree, the host
   when the host holds all its keys (HiCache keeps an evicted node in the tree with its
   host copy; here the host finds the same pages by key, so no evicted node is kept).

A sequence without ``block_hashes`` never touches the tree. Its ``hashes`` are its full pages'
keys (a forked child starts with its parent's: its pages full at the fork keep the
parent's keys, as ``prefix-cache``'s hashes do).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ..workloads.block_hashes import BlockHashes, branch_of
from .base import SeqId
from .block_seq import Seq
from .radix_pool import RadixPool
from .radix_tree import Node


class RadixCache:
    """The radix policy over a :class:`~.radix_pool.RadixPool` (see the module)."""

    acts_at_free = True  # the manager's free calls freeing and freed

    def __init__(self, pool: RadixPool) -> None:
        self.pool = pool
        self.tree = pool.tree
        self.block_size = pool.block_size
        self.clock = 0  # logical time of last use (one tick per admission or free)

    def lookup(self, mgr, block_hashes: BlockHashes, num_tokens: int, seq_id: SeqId) -> int:
        """Tokens of a new ``num_tokens``-token sequence the tree holds now."""
        most = max(num_tokens - 1, 0) // self.block_size
        host = self.pool.host
        if not most or not (self.tree.root.children or host):
            return 0
        # The whole chain the admission will want, so that it is hashed once.
        keys = block_hashes.chain(branch_of(seq_id), num_tokens // self.block_size)
        m = self.tree.match(keys, most)[3]
        if host is not None:  # the prefix goes on in the host tier
            m += host.run(keys, m, most)
        return m * self.block_size

    # ------------------------------------------------------------- admission
    def plan(self, mgr, seq_ids: Sequence[SeqId], num_tokens: int, block_hashes: BlockHashes):
        """Per sequence (branch, keys, tree hit m, hit with siblings' k, host hits after
        them), and the blocks the admission takes from the free list or the evictable
        pages; no change. Host hits (first sequence only) take new blocks."""
        bs, tree, host = self.block_size, self.tree, self.pool.host
        n, full, most = -(-num_tokens // bs), num_tokens // bs, max(num_tokens - 1, 0) // bs
        plans: list[tuple[int, list, int, int]] = []
        to_lock: dict[Node, int] = {}  # unlocked node -> its pages the hits will lock
        need = 0
        for seq_id in seq_ids:
            branch = branch_of(seq_id)
            keys = block_hashes.chain(branch, full)
            node, child, c, m = tree.match(keys, most)
            if child is not None and not child.lock_ref:
                to_lock[child] = max(to_lock.get(child, 0), c)
            while node.parent is not None and not node.lock_ref:
                to_lock[node] = len(node.keys)
                node = node.parent
            k = m
            kh = host.run(keys, m, most) if host is not None and not plans else 0
            for _, other, _, _, _ in plans:  # pages an earlier sibling will put in the tree
                j = k
                while j < most and keys[j] == other[j]:
                    j += 1
                if j > k and keys[:k] == other[:k]:
                    k = j
            plans.append((branch, keys, m, k, kh))
            need += n - k
        return plans, need + sum(to_lock.values())

    def admit(self, mgr, seq_ids: Sequence[SeqId], num_tokens: int, final_len: int | None,
              block_hashes: BlockHashes, plans) -> None:
        """Carry out a plan that fits (see the module docstring, step 1)."""
        bs, tree, pool, host = self.block_size, self.tree, self.pool, self.pool.host
        n, full = -(-num_tokens // bs), num_tokens // bs
        # Lock every hit before taking blocks, so no eviction takes a page about to be hit.
        stamp = self.clock = self.clock + 1
        nodes = []
        for _, keys, m, _, _ in plans:
            node = tree.descend(keys, m, stamp) if m else tree.root
            tree.lock(node)
            if m:
                tree.hit(node)
            nodes.append(node)
        _, keys0, m0, _, kh0 = plans[0]
        if kh0:  # and the host hits, so no write-back of an evicted page evicts one
            host.pin(keys0[m0:m0 + kh0])
        pool.make_room(sum(n - k for _, _, _, k, _ in plans))
        for seq_id, (branch, keys, m, k, kh), node in zip(seq_ids, plans, nodes,
                                                          strict=True):
            if k > m:  # an earlier sibling's pages: move the lock down onto them
                deeper = tree.descend(keys, k, stamp)
                tree.lock(deeper)
                tree.unlock(node)
                node = deeper
            table = tree.path_blocks(node) if k else []
            mgr.refs.hold(table)
            new = mgr.refs.take(n - k)
            table.extend(new)
            if kh:  # host hits into the first new blocks, before the prefill after them
                host.load(keys[k:k + kh], new[:kh])
            # The new full pages join the tree now (unless the last-token rule left one
            # that the tree holds already: it stays private, a duplicate until freed).
            if full > k and keys[k] not in node.children:
                leaf = tree.add_leaf(node, keys[k:full], new[:full - k], stamp)
                for b in leaf.blocks:
                    pool.in_tree[b] = True
                if host is not None:  # write-through of the pages this prefill computes
                    for j in range(k + kh, full):
                        host.inserted(new[j - k], keys[j])
                tree.lock(leaf)
                tree.unlock(node)
                node = leaf
            seq = mgr.add_seq(seq_id, Seq(table, num_tokens, final_len, block_hashes, branch,
                                           list(keys[:full]), (k + kh) * bs))
            seq.host_hit_tokens = kh * bs
            seq.node = node

    # --------------------------------------------------------------- growing
    def filled(self, mgr, seq: Seq, index: int, h: object = None,
               dedup: bool = False) -> int:
        """Block ``index`` of ``seq`` is full: its key joins the sequence's (the page
        joins the tree when the sequence is freed)."""
        seq.hashes.append(h if h is not None
                          else seq.block_hashes.next_hash(seq.branch, seq.hashes))
        return seq.table[index]

    def forked(self, mgr, parent: Seq, child: Seq) -> None:
        """The child locks its parent's path (its hashes, the parent's keys, are copied)."""
        child.node = parent.node
        if parent.node is not None:
            self.tree.lock(parent.node)

    # --------------------------------------------------------------- release
    def freeing(self, mgr, seq: Seq) -> None:
        """Put the sequence's full pages below its locked path into the tree (duplicates
        are left out, to be freed) and stamp its whole path."""
        if seq.block_hashes is None:
            return
        self.clock += 1
        stamp, tree, ref, table = self.clock, self.tree, mgr.refs.counts, seq.table
        node = seq.node
        full, i = seq.num_tokens // self.block_size, node.depth
        keys = seq.hashes
        while i < full:
            child = node.children.get(keys[i])
            if child is None:  # adopt its pages up to one that someone else holds too
                j = i
                while j < full and ref[table[j]] == 1:
                    j += 1
                if j > i:
                    node = tree.add_leaf(node, keys[i:j], table[i:j], stamp)
                    host = self.pool.host
                    for b, key in zip(node.blocks, node.keys, strict=True):
                        self.pool.in_tree[b] = True
                        if host is not None:
                            host.inserted(b, key)
                break
            ck, c = child.keys, 0
            while c < len(ck) and i < full and ck[c] == keys[i]:
                c += 1  # the tree holds this page already: ours is a duplicate
                i += 1
            node = tree.split(child, c) if c < len(ck) else child
        tree.stamp(node, stamp)

    def freed(self, mgr, seq: Seq) -> None:
        """Its blocks are back: unlock its path."""
        if seq.node is not None:
            self.tree.unlock(seq.node)

    def swapped_in(self, mgr, seq: Seq, hashes: list) -> None:
        """Back from the CPU into fresh blocks, outside the tree: it locks nothing."""
        seq.hashes = list(hashes)
        seq.node = self.tree.root

    # ------------------------------------------------------------- pictures
    def tiers(self, node: Node) -> tuple[str, ...]:
        """Which tiers hold ``node``'s pages: ``"gpu"`` while it is in the tree, and
        ``"host"`` when the host tier holds every one of its keys."""
        host = self.pool.host
        on_gpu = node.parent is not None
        on_host = host is not None and all(k in host for k in node.keys)
        return ("gpu",) * on_gpu + ("host",) * on_host

    def snapshot(self, snap: dict) -> None:
        snap["tree"] = self.tree.describe()
        snap["clock"] = self.clock

    def check(self, mgr) -> None:
        """Tree <-> reference counts, lock counts, locked paths (asserts)."""
        tree, ref, bs = self.tree, mgr.refs.counts, self.block_size
        tree.check()
        node_of: dict[int, Node] = {}
        for node in tree.nodes():
            for b in node.blocks:
                assert b not in node_of, f"block {b} is in the tree twice"
                node_of[b] = node
        for b, node in node_of.items():  # held only by the sequences whose path has it
            assert ref[b] == node.lock_ref, (
                f"tree block {b}: {ref[b]} holders, its node's lock_ref is {node.lock_ref}")
        locks: Counter[int] = Counter()
        for seq_id, seq in mgr.seqs.items():
            locked = x = seq.node or tree.root  # None: admitted without content
            assert x is tree.root or x.parent is not None, f"{seq_id!r} locks an evicted node"
            while x.parent is not None:
                locks[x.id] += 1
                x = x.parent
            d = locked.depth
            assert d <= seq.num_tokens // bs, f"sequence {seq_id!r} locks past its full pages"
            assert seq.table[:d] == tree.path_blocks(locked), (
                f"sequence {seq_id!r}: its first {d} blocks are not its locked path's")
            assert not any(b in node_of for b in seq.table[d:]), (
                f"sequence {seq_id!r} holds a tree page outside its locked path")
            if d:
                assert seq.block_hashes is not None
                assert tree.path_keys(locked) == seq.hashes[:d], (
                    f"sequence {seq_id!r}: its locked path holds other content")
        for node in tree.nodes():
            assert node.lock_ref == locks[node.id], (
                f"{node}: lock_ref {node.lock_ref}, {locks[node.id]} sequences pass")
