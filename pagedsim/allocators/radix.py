"""SGLang's RadixAttention: paged blocks kept in a radix tree of token content.

A paged pool (:class:`~pagedsim.allocators.paged.PagedAllocator`: block tables,
reference counts, copy-on-write) whose full pages also live in a radix tree
(:class:`~pagedsim.allocators.radix_tree.RadixTree`, page size = block size), as
``python/sglang/srt/mem_cache/radix_cache.py`` keeps them. A page is named by
:func:`pagedsim.prompts.block_key` of its tokens, its place in the tree by all before it.
Every block is *free* (on the free list, a stack), *held* (in running sequences' block
tables; reference count = table entries) or *cached* (in the tree, held by nobody:
evictable, its K/V kept until eviction hands the block out again). A sequence holds the
pages of its *locked path* (root to the deepest node of its cached prefix; ``lock_ref``
+ 1 on each node of it) and no other tree page, so a tree page's reference count equals
its node's ``lock_ref``, and the unlocked pages are exactly the cached ones.

What happens when (SGLang's names in brackets):

1. Admission (:meth:`allocate_group`) [``match_prefix``, ``inc_lock_ref``]: the
   longest cached prefix, whole pages only and at most ``num_tokens - 1`` tokens (the
   last prompt token is always computed); the node the match ends inside is split; the
   path is locked, then new blocks are taken. All or nothing: a failed admission changes
   nothing (tree, clock and lock counts included). The new full pages go into the tree
   at once and the lock moves down to them. SGLang inserts a prompt after its prefill
   (``cache_unfinished_req``); our allocator sees a prefill only at admission, and
   ``prefix-cache`` names its blocks at admission too, so with both caching schemes a
   request admitted later (even in the same step) hits them.
2. Free (:meth:`free`) [``cache_finished_req``]: the full pages below the locked path
   (decode-filled ones, later prefill chunks) are inserted; a page whose content the
   tree holds already is a duplicate: it is freed, the tree's copy kept. Insertion stops
   at a page another sequence still holds (a fork shares pages outside the tree; the
   last holder inserts it). Then the path is unlocked, and the partial last page and the
   pages not kept go to the free list (``on_release``).
3. Eviction [``evict``]: lazily, when the free list cannot serve a new block, the least
   recently used unlocked leaf leaves the tree with all its pages (SGLang evicts whole
   nodes); ``on_release`` reports them then. Last use is a logical clock that ticks once
   per admission and per free with content; a split-off lower part keeps its old time
   (SGLang restamps it), so only pages a request used count as used.

Admission counts free and cached blocks as available (SGLang adds ``evictable_size``);
the accounting's ``cached`` category is the cached blocks. A sequence without
``content`` never touches the tree. Swapping out frees the sequences (inserting their
pages); swapping in takes fresh blocks. A forked child locks its parent's path, and its
pages full at the fork keep the parent's keys, as ``prefix-cache``'s hashes do.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, Sequence

from ..errors import OutOfMemoryError
from ..prompts import block_key
from ..validate import check_int
from ..workload import Request
from .base import AppendResult, KVCopy, SeqId, SlotUsage, SwappedGroup
from .fast_usage import usage_by_last_blocks
from .paged import PagedAllocator, _Seq
from .prefix_chain import HASH_MEMO_ENTRIES
from .prefix_chain import branch_of as _branch
from .radix_tree import Node, RadixTree


class _RSeq(_Seq):
    """A sequence with its content and the deepest tree node it has locked."""

    __slots__ = ("content", "branch", "node", "inherited", "hit_tokens")

    def __init__(self, table: list[int], num_tokens: int, final_len: int | None,
                 content: Request | None, branch: int, node: Node, hit_tokens: int = 0,
                 inherited: list | None = None) -> None:
        super().__init__(table, num_tokens, final_len)
        self.content = content  # None: content unknown, never in the tree
        self.branch = branch  # names its generated tokens (block_key's branch)
        self.node = node  # its locked path ends here (the tree's root: nothing locked)
        self.hit_tokens = hit_tokens  # tokens served from the tree at its admission
        self.inherited = inherited or []  # a forked child: its parent's page keys


class RadixAllocator(PagedAllocator):
    """A paged pool whose full pages stay in a radix tree until their memory is needed."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self.tree = RadixTree()
        self._in_tree = [False] * self.num_blocks
        self._clock = 0  # logical time of last use (one tick per admission or free)
        self._memo: OrderedDict[tuple[int, int], tuple[Request, list]] = OrderedDict()
        self.evicted_blocks = 0

    # ---------------------------------------------------------------- page keys
    def _keys(self, content: Request, branch: int, num_pages: int) -> list:
        """At least ``num_pages`` page keys of one sequence (memoized per request and
        branch); callers index only the first ``num_pages``."""
        memo_key = (content.request_id, branch)
        entry = self._memo.get(memo_key)
        if entry is None or entry[0] is not content:  # same id, other request: start over
            entry = self._memo[memo_key] = (content, [])
            if len(self._memo) > HASH_MEMO_ENTRIES:
                self._memo.popitem(last=False)
        else:
            self._memo.move_to_end(memo_key)
        keys, bs = entry[1], self.block_size
        while len(keys) < num_pages:
            keys.append(block_key(content, bs, len(keys), branch))
        return keys

    def _seq_keys(self, seq: _RSeq, num_pages: int) -> list:
        """The first ``num_pages`` page keys of a sequence with content (a forked child's
        start with its parent's)."""
        assert seq.content is not None
        own = self._keys(seq.content, seq.branch, num_pages)
        inh = seq.inherited
        if not inh:
            return own[:num_pages]
        return (inh + own[len(inh):num_pages])[:num_pages]

    def lookup_prefix(self, content: Request, num_tokens: int, seq_id: SeqId) -> int:
        """Tokens of a new ``num_tokens``-token sequence that the tree holds now (whole
        pages, at most ``num_tokens - 1``). Changes nothing but the key memo."""
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        most = max(num_tokens - 1, 0) // self.block_size
        if not most or not self.tree.root.children:
            return 0
        return self.tree.match(self._keys(content, _branch(seq_id), most), most)[3] \
            * self.block_size

    def prefix_hit_tokens(self, seq_id: SeqId) -> int:
        seq = self._get(seq_id)
        return seq.hit_tokens if isinstance(seq, _RSeq) else 0

    # ------------------------------------------------------------ the free list
    def _available(self) -> int:
        """Blocks a new allocation may take: free ones, and cached ones (by eviction)."""
        return len(self._free) + self.tree.num_evictable

    def _make_room(self, num_blocks: int) -> None:
        """Evict least recently used unlocked leaves until ``num_blocks`` blocks are free."""
        free, hook, bs = self._free, self.on_release, self.block_size
        while len(free) < num_blocks:
            node = self.tree.pop_lru_leaf()
            if node is None:
                raise OutOfMemoryError(f"need {num_blocks} free blocks, {len(free)} free and "
                                       "nothing evictable")
            for b in reversed(node.blocks):  # the stack then hands out its head first
                self._in_tree[b] = False
                free.append(b)
                if hook is not None:
                    hook(b * bs, bs)
            self.evicted_blocks += len(node.blocks)

    def _take(self) -> int:
        """A block for new content (evicting if the free list is empty)."""
        if not self._free:
            self._make_room(1)
        return self._free.pop()

    def _hold(self, blocks: Iterable[int]) -> None:
        """One more block-table reference to each of ``blocks``."""
        ref = self._ref
        for b in blocks:
            ref[b] += 1
            if ref[b] == 2:
                self._num_shared_blocks += 1

    # ------------------------------------------------------------- admission
    def allocate_group(self, seq_ids: Sequence[SeqId], num_tokens: int,
                       final_len: int | None = None, fork_ids: Sequence[SeqId] = (),
                       watermark: float = 0.0, content: Request | None = None) -> bool:
        """Blocks for each of ``seq_ids`` (``num_tokens`` tokens each), the cached prefix
        of each served from the tree, keeping ``watermark`` of the blocks free or cached.
        False, and nothing changed, when they do not fit.

        The sequences of one admission (a recomputed group) share the full pages their
        common prefix fills, as if each found the earlier ones' pages in the tree."""
        self._check_new_ids([*seq_ids, *fork_ids])
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        if final_len is not None:
            final_len = check_int("final_len", final_len)
            if final_len < num_tokens:
                raise ValueError(f"final_len ({final_len}) must be >= num_tokens ({num_tokens})")
        bs, tree = self.block_size, self.tree
        n, full = -(-num_tokens // bs), num_tokens // bs
        most = max(num_tokens - 1, 0) // bs
        # Plan first (nothing changes): per sequence its keys, tree hit m and total hit k.
        plans: list[tuple[int, list, int, int]] = []
        to_lock: dict[Node, int] = {}  # unlocked node -> its pages the hits will lock
        need = 0
        for seq_id in seq_ids:
            branch = _branch(seq_id)
            if content is None:
                plans.append((branch, [], 0, 0))
                need += n
                continue
            keys = self._keys(content, branch, full)
            node, child, c, m = tree.match(keys, most)
            if child is not None and not child.lock_ref:
                to_lock[child] = max(to_lock.get(child, 0), c)
            while node.parent is not None and not node.lock_ref:
                to_lock[node] = len(node.keys)
                node = node.parent
            k = m
            for _, other, _, _ in plans:  # pages an earlier sibling will put in the tree
                j = k
                while j < most and keys[j] == other[j]:
                    j += 1
                if j > k and keys[:k] == other[:k]:
                    k = j
            plans.append((branch, keys, m, k))
            need += n - k
        if self._available() - sum(to_lock.values()) - need < self.watermark_blocks(watermark):
            return False
        # Lock every hit before taking blocks, so no eviction takes a page about to be hit.
        stamp = self._clock + 1 if content is not None else self._clock
        self._clock = stamp
        nodes = []
        for _, keys, m, _ in plans:
            node = tree.descend(keys, m, stamp) if m else tree.root
            tree.lock(node)
            nodes.append(node)
        self._make_room(need)
        for seq_id, (branch, keys, m, k), node in zip(seq_ids, plans, nodes, strict=True):
            if k > m:  # an earlier sibling's pages: move the lock down onto them
                deeper = tree.descend(keys, k, stamp)
                tree.lock(deeper)
                tree.unlock(node)
                node = deeper
            table = tree.path_blocks(node) if k else []
            self._hold(table)
            new = [self._free.pop() for _ in range(n - k)]
            for b in new:
                self._ref[b] = 1
            table.extend(new)
            # The new full pages join the tree now (unless the last-token rule left one
            # that the tree holds already: it stays private, a duplicate until freed).
            if content is not None and full > k and keys[k] not in node.children:
                leaf = tree.add_leaf(node, keys[k:full], new[:full - k], stamp)
                for b in leaf.blocks:
                    self._in_tree[b] = True
                tree.lock(leaf)
                tree.unlock(node)
                node = leaf
            self._seqs[seq_id] = _RSeq(table, num_tokens, final_len, content, branch, node,
                                       k * bs)
            self._num_logical_blocks += n
        return True

    def allocate(self, seq_id: SeqId, num_tokens: int, final_len: int | None = None,
                 content: Request | None = None) -> None:
        """Blocks for one new sequence (its cached prefix from the tree when ``content``
        is given); ``OutOfMemoryError`` and nothing changed when they do not fit."""
        if seq_id in self._seqs:
            raise ValueError(f"sequence id {seq_id!r} already exists")
        if not self.allocate_group([seq_id], num_tokens, final_len, content=content):
            raise OutOfMemoryError(
                f"sequence {seq_id!r} needs {self.blocks_needed(num_tokens)} blocks for "
                f"{num_tokens} tokens, {len(self._free)} free and "
                f"{self.tree.num_evictable} cached")

    def can_allocate(self, num_tokens: int, final_len: int | None = None) -> bool:
        return self.blocks_needed(num_tokens) <= self._available()

    # --------------------------------------------------------------- growing
    def can_append(self, seq_id: SeqId) -> bool:
        seq = self._get(seq_id)
        if seq.num_tokens % self.block_size and self._ref[seq.table[-1]] == 1:
            return True
        return self._available() > 0

    def can_append_all(self, seq_ids: Iterable[SeqId]) -> bool:
        return self.append_blocks_needed(seq_ids) <= self._available()

    def can_extend(self, seq_id: SeqId, num_tokens: int) -> bool:
        """Whether ``num_tokens`` more tokens fit (a shared partial last block is copied)."""
        seq = self._get(seq_id)
        num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        n, bs = seq.num_tokens, self.block_size
        need = -(-(n + num_tokens) // bs) - len(seq.table)
        if num_tokens and n % bs and self._ref[seq.table[-1]] > 1:
            need += 1  # copy-on-write of the shared last block
        return need <= self._available()

    def append_slot(self, seq_id: SeqId) -> AppendResult:
        """Room for one new token (copy-on-write of a shared partial last block), evicting
        a cached leaf when no block is free."""
        try:
            seq = self._seqs[seq_id]
        except (KeyError, TypeError):
            raise ValueError(f"unknown sequence id {seq_id!r}") from None
        n, bs = seq.num_tokens, self.block_size
        offset = n % bs
        ref = self._ref
        if offset == 0 or ref[seq.table[-1]] > 1:
            if not self._free and not self.tree.num_evictable:
                what = "block" if offset == 0 else "block for the copy-on-write"
                raise OutOfMemoryError(f"no free {what} of sequence {seq_id!r}")
            new = self._take()
            ref[new] = 1
            seq.num_tokens = n + 1
            if offset == 0:  # last block full (or no block yet)
                seq.table.append(new)
                self._num_logical_blocks += 1
                return new * bs, None
            old = seq.table[-1]  # a shared partial block (never a tree page): copy it
            ref[old] -= 1
            if ref[old] == 1:
                self._num_shared_blocks -= 1
            seq.table[-1] = new
            return new * bs + offset, KVCopy(old * bs, new * bs, offset)
        seq.num_tokens = n + 1
        return seq.table[-1] * bs + offset, None

    def fork(self, parent_id: SeqId, child_id: SeqId) -> list[KVCopy]:
        """``child_id`` shares every block of ``parent_id`` and locks its path."""
        parent: _RSeq = self._get(parent_id)  # type: ignore[assignment]
        if child_id in self._seqs:
            raise ValueError(f"sequence id {child_id!r} already exists")
        self._hold(parent.table)
        inherited = (self._seq_keys(parent, parent.num_tokens // self.block_size)
                     if parent.content is not None else [])
        self._seqs[child_id] = _RSeq(list(parent.table), parent.num_tokens, parent.final_len,
                                     parent.content, _branch(child_id), parent.node, 0,
                                     inherited)
        self.tree.lock(parent.node)
        self._num_logical_blocks += len(parent.table)
        return []

    # --------------------------------------------------------------- release
    def free(self, seq_id: SeqId) -> None:
        """Insert the sequence's full pages, then drop it (see the module docstring)."""
        seq = self._pop_seq(seq_id)
        tree, ref, table = self.tree, self._ref, seq.table
        if seq.content is not None:
            self._clock += 1
            self._insert(seq, self._clock)
        free, in_tree, hook, bs = self._free, self._in_tree, self.on_release, self.block_size
        for i in range(len(table) - 1, -1, -1):  # tail first, as the paged pool does
            b = table[i]
            r = ref[b] - 1
            ref[b] = r
            if r == 0:
                if not in_tree[b]:
                    free.append(b)
                    if hook is not None:
                        hook(b * bs, bs)
            elif r == 1:
                self._num_shared_blocks -= 1
        tree.unlock(seq.node)
        self._num_logical_blocks -= len(table)

    def _insert(self, seq: _RSeq, stamp: int) -> None:
        """Put ``seq``'s full pages below its locked path into the tree (duplicates are
        left out, to be freed) and stamp its whole path."""
        tree, ref, table = self.tree, self._ref, seq.table
        node = seq.node
        full, i = seq.num_tokens // self.block_size, seq.node.depth
        keys = self._seq_keys(seq, full) if full > i else []
        while i < full:
            child = node.children.get(keys[i])
            if child is None:  # adopt its pages up to one that someone else holds too
                j = i
                while j < full and ref[table[j]] == 1:
                    j += 1
                if j > i:
                    node = tree.add_leaf(node, keys[i:j], table[i:j], stamp)
                    for b in node.blocks:
                        self._in_tree[b] = True
                break
            ck, c = child.keys, 0
            while c < len(ck) and i < full and ck[c] == keys[i]:
                c += 1  # the tree holds this page already: ours is a duplicate
                i += 1
            node = tree.split(child, c) if c < len(ck) else child
        tree.stamp(node, stamp)

    # --------------------------------------------------------------- swapping
    def swap_out(self, seq_ids: Iterable[SeqId]) -> SwappedGroup:
        """As the paged pool's; freeing the sequences inserts their pages into the tree."""
        seq_ids = tuple(seq_ids)
        seqs: dict[SeqId, _RSeq] = {s: self._get(s) for s in seq_ids}  # type: ignore[misc]
        named = {s: (q.content, q.branch, q.inherited) for s, q in seqs.items()}
        group = super().swap_out(seq_ids)
        group.state["content"] = named
        return group

    def can_swap_in(self, group: SwappedGroup, watermark: float = 0.0) -> bool:
        group.check_can_return_to(self._swap_token)
        need = group.state["num_blocks"]
        return self._available() - need >= self.watermark_blocks(watermark)

    def swap_in(self, group: SwappedGroup) -> list[KVCopy]:
        """Bring a swapped group back into fresh blocks (all or nothing)."""
        n = self._check_swap_in(group)
        if n > self._available():
            raise OutOfMemoryError(f"swap-in needs {n} blocks, {len(self._free)} free and "
                                   f"{self.tree.num_evictable} cached")
        self._make_room(n)
        new_blocks = [self._free.pop() for _ in range(n)]
        for b in new_blocks:
            self._ref[b] = 0
        named = group.state["content"]
        for seq_id, table, (num_tokens, final_len) in zip(
            group.seq_ids, group.state["tables"], group.state["meta"], strict=True
        ):
            phys = [new_blocks[i] for i in table]
            self._hold(phys)
            content, branch, inherited = named[seq_id]
            self._seqs[seq_id] = _RSeq(phys, num_tokens, final_len, content, branch,
                                       self.tree.root, 0, inherited)
            self._num_logical_blocks += len(phys)
        group.swapped_in = True
        bs = self.block_size
        return [KVCopy(i * bs, b * bs, bs) for i, b in enumerate(new_blocks)]

    # ------------------------------------------------------------- accounting
    @property
    def num_cached_blocks(self) -> int:
        """Blocks in the tree that no running sequence holds (evictable)."""
        return self.tree.num_evictable

    @property
    def num_used_blocks(self) -> int:
        """Blocks running sequences hold (free + cached + used = the pool)."""
        return self.num_blocks - len(self._free) - self.tree.num_evictable

    def usage(self, final_lens: Mapping[SeqId, int] | None = None) -> SlotUsage:
        """As the paged pool's (computed in one visit per sequence: nearly every block is
        shared in a caching pool), with the cached blocks apart from the used ones."""
        c = self.tree.num_evictable
        return usage_by_last_blocks(self._seqs, self._ref, self.block_size,
                                    self.num_blocks - len(self._free) - c,
                                    self._num_logical_blocks, final_lens, c * self.block_size)

    def snapshot(self) -> dict:
        snap = super().snapshot()
        snap["kind"] = "radix"
        snap["cached_blocks"] = sorted(b for node in self.tree.nodes() if not node.lock_ref
                                       for b in node.blocks)
        snap["tree"] = self.tree.describe()
        snap["clock"] = self._clock
        return snap

    def check_invariants(self) -> None:
        """Tree <-> reference counts <-> free list, lock counts, locked paths (asserts)."""
        tree, ref, bs = self.tree, self._ref, self.block_size
        tree.check()
        free = self._free
        assert len(set(free)) == len(free), "a block is on the free list twice"
        counts = Counter(b for seq in self._seqs.values() for b in seq.table)
        node_of: dict[int, Node] = {}
        for node in tree.nodes():
            for b in node.blocks:
                assert b not in node_of, f"block {b} is in the tree twice"
                node_of[b] = node
        free_set = set(free)
        for b in range(self.num_blocks):
            assert ref[b] == counts[b], f"block {b}: ref count {ref[b]} != {counts[b]} tables"
            assert self._in_tree[b] == (b in node_of), f"block {b}: tree flag is wrong"
            if b in free_set:
                assert b not in node_of and not counts[b], f"free block {b} is in use"
            elif b in node_of:  # held only by the sequences whose locked path has it
                assert ref[b] == node_of[b].lock_ref, (
                    f"tree block {b}: {ref[b]} holders, its node's lock_ref is "
                    f"{node_of[b].lock_ref}")
            else:
                assert counts[b], f"block {b} is neither free, cached nor held"
        assert self._num_shared_blocks == sum(1 for c in counts.values() if c > 1)
        assert self._num_logical_blocks == sum(len(s.table) for s in self._seqs.values())
        locks: Counter[int] = Counter()
        for seq_id, seq in self._seqs.items():
            assert isinstance(seq, _RSeq) and len(seq.table) == -(-seq.num_tokens // bs), (
                f"sequence {seq_id!r}: {len(seq.table)} blocks for {seq.num_tokens} tokens")
            x = seq.node
            assert x is tree.root or x.parent is not None, f"{seq_id!r} locks an evicted node"
            while x.parent is not None:
                locks[x.id] += 1
                x = x.parent
            d = seq.node.depth
            assert d <= seq.num_tokens // bs, f"sequence {seq_id!r} locks past its full pages"
            assert seq.table[:d] == tree.path_blocks(seq.node), (
                f"sequence {seq_id!r}: its first {d} blocks are not its locked path's")
            assert not any(b in node_of for b in seq.table[d:]), (
                f"sequence {seq_id!r} holds a tree page outside its locked path")
            if d:
                assert seq.content is not None
                assert tree.path_keys(seq.node) == self._seq_keys(seq, d), (
                    f"sequence {seq_id!r}: its locked path holds other content")
        for node in tree.nodes():
            assert node.lock_ref == locks[node.id], (
                f"{node}: lock_ref {node.lock_ref}, {locks[node.id]} sequences pass")
