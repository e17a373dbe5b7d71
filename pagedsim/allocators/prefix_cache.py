"""Automatic prefix caching, as vLLM v1 does it: paged blocks that outlive their requests.

A full block is named by its *chained hash*: the hash of its parent block's hash and its
own tokens (:func:`pagedsim.prompts.block_key`), so two blocks with equal hashes hold equal
prefixes. When a request frees its blocks, the full ones keep their K/V and their hash:
they are *cached*. A later request whose prompt starts with the same blocks finds them
through the hash map and shares them (reference count + 1) instead of computing them.

The free queue, the hash map and lazy eviction are the block pool's
(:mod:`pagedsim.allocators.block_pool`, as ``vllm/v1/core/block_pool.py``); this module is
the manager on top (``kv_cache_manager.py``):

* Lookup (:meth:`~PrefixCachingAllocator.lookup_prefix`) walks the prompt's hash chain
  while the map has it: whole blocks only, and at most ``num_tokens - 1`` tokens, since
  the last prompt token must be computed to sample the first output token. A request's
  chain is hashed once and memoized, as vLLM hashes a request's blocks on arrival.
* Admission (:meth:`~PrefixCachingAllocator.allocate_group`) is all or nothing: it counts
  the hits, the new blocks, and the hit blocks that must leave the free queue, before
  touching anything.
* Blocks filled during decode get their hash too, so a preempted request that is
  recomputed, or the next turn of a chat, finds them. ``dedup=True`` makes a block that
  fills with content already cached switch to the cached copy, as vLLM v0 and SGLang do
  (v1 keeps the duplicate).
* :meth:`~PrefixCachingAllocator.free` returns a sequence's blocks *tail first*, so the
  tail of a chain sits nearer the head of the free queue and is evicted before the
  chain's head (evicting a head first would strand its tail: no lookup could reach it).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from ..errors import OutOfMemoryError
from ..prompts import chain_hash
from ..validate import check_int
from ..workload import Request
from .base import AppendResult, KVCopy, SeqId, SwappedGroup
from .block_pool import BlockPool
from .paged import _Seq
from .prefix_chain import block_key_fast, extend_chain, named_tokens
from .prefix_checks import check_prefix_cache

#: How many requests' hash chains are remembered (hashes are computed once per request and
#: sequence, as vLLM computes a request's block hashes once when it arrives).
HASH_MEMO_ENTRIES = 4096


class _CSeq(_Seq):
    """A sequence with what names its blocks: its request, branch and full blocks' hashes."""

    __slots__ = ("content", "branch", "hashes", "hit_tokens")

    def __init__(self, table: list[int], num_tokens: int, final_len: int | None,
                 content: Request | None, branch: int, hashes: list[int],
                 hit_tokens: int = 0) -> None:
        self.table = table  # _Seq's three fields, set here: one call less per admission
        self.num_tokens = num_tokens
        self.final_len = final_len
        self.content = content  # None: content unknown, so its blocks are never cached
        self.branch = branch
        self.hashes = hashes  # hashes of its full blocks, in order (with content only)
        self.hit_tokens = hit_tokens


def _branch(seq_id: SeqId) -> int:
    """The branch of a sequence's generated tokens (its id, as an int for hashing)."""
    return seq_id if type(seq_id) is int else hash(seq_id)


class PrefixCachingAllocator(BlockPool):
    """A paged pool whose freed full blocks stay reusable until their memory is needed."""

    def __init__(self, num_blocks: int, block_size: int = 16, dedup: bool = False) -> None:
        super().__init__(num_blocks, block_size)
        if not isinstance(dedup, bool):
            raise ValueError(f"dedup must be True or False, got {dedup!r}")
        self.dedup = dedup
        self._memo: OrderedDict[tuple[int, int], tuple[Request, list[int]]] = OrderedDict()

    # ------------------------------------------------------------ hash chains

    def _chain(self, content: Request, branch: int, num_blocks: int) -> list[int]:
        """The first ``num_blocks`` chained hashes of one sequence (memoized per request)."""
        key = (content.request_id, branch)
        memo = self._memo
        entry = memo.get(key)
        if entry is None or entry[0] is not content:  # same id, other request: start over
            entry = memo[key] = (content, [])
            if len(memo) > HASH_MEMO_ENTRIES:
                memo.popitem(last=False)
        else:
            memo.move_to_end(key)
        hashes = entry[1]
        if len(hashes) < num_blocks:
            extend_chain(content, self.block_size, branch, hashes, num_blocks)
        return hashes if len(hashes) == num_blocks else hashes[:num_blocks]

    def lookup_prefix(self, content: Request, num_tokens: int, seq_id: SeqId) -> int:
        """Tokens of a new ``num_tokens``-token sequence that the cache holds now (whole
        blocks, at most ``num_tokens - 1``). Changes nothing but the hash memo."""
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        bs = self.block_size
        most = max(num_tokens - 1, 0) // bs
        if not most or not self._cached:
            return 0
        # The whole chain the admission will want, so that it is hashed once.
        return len(self._hits(self._chain(content, _branch(seq_id), num_tokens // bs),
                              most)) * bs

    def prefix_hit_tokens(self, seq_id: SeqId) -> int:
        seq = self._get(seq_id)
        return seq.hit_tokens if isinstance(seq, _CSeq) else 0

    # ------------------------------------------------------------- naming

    def _filled(self, seq: _CSeq, index: int, h: int | None = None,
                dedup: bool = False) -> int:
        """Block ``index`` of ``seq`` is full: name it by its hash ``h`` (computed when not
        given). With ``dedup``, a private block whose content is cached already is given
        back and the cached copy used instead; returns the block the table now holds."""
        hashes = seq.hashes
        if h is None:
            parent = hashes[-1] if hashes else 0
            h = chain_hash(parent, block_key_fast(seq.content, self.block_size, index,
                                                  seq.branch, named_tokens(seq.content)))
        hashes.append(h)
        b = seq.table[index]
        if self._hash[b] is not None:  # a hit, or shared with a sibling: named already
            return b
        other = self._cached.get(h)
        if other is not None and dedup and self._ref[b] == 1:
            self._touch(other)
            seq.table[index] = other
            self._ref[b] = 0
            self._free[b] = None
            if self.on_release is not None:
                self.on_release(b * self.block_size, self.block_size)
            return other
        self._name(b, h)
        return b

    # -------------------------------------------------------------- admission

    def allocate_group(self, seq_ids: Sequence[SeqId], num_tokens: int,
                       final_len: int | None = None, fork_ids: Sequence[SeqId] = (),
                       watermark: float = 0.0, content: Request | None = None) -> bool:
        """Blocks for each of ``seq_ids`` (``num_tokens`` tokens each), the cached prefix
        of each served from the cache, keeping ``watermark`` of the blocks free (cached
        blocks count as free). False, and nothing changed, when they do not fit.

        The sequences of one admission (a recomputed group) share the blocks their
        common prefix fills, as if each found the earlier one's blocks in the cache.
        """
        if (content is not None and not fork_ids and type(seq_ids) is list
                and len(seq_ids) == 1 and type(num_tokens) is int and num_tokens > 0
                and type(final_len) is int and final_len >= num_tokens
                and type(watermark) is float and seq_ids[0] not in self._seqs):
            return self._admit_one(seq_ids[0], num_tokens, final_len, watermark, content)
        self._check_new_ids([*seq_ids, *fork_ids])
        if type(num_tokens) is not int or num_tokens < 0:
            num_tokens = check_int("num_tokens", num_tokens, minimum=0)
        if final_len is not None:
            final_len = check_int("final_len", final_len)
            if final_len < num_tokens:
                raise ValueError(f"final_len ({final_len}) must be >= num_tokens ({num_tokens})")
        bs = self.block_size
        n = -(-num_tokens // bs)
        plans: list[tuple[list[int], int, list[int]]] = []  # (hit blocks, shared, chain)
        from_queue = 0  # blocks that leave the free queue: new ones, and hits it holds
        if content is None:
            plans = [([], 0, []) for _ in seq_ids]
            from_queue = n * len(seq_ids)
        else:
            most = max(num_tokens - 1, 0) // bs
            touched: set[int] = set()
            earlier: set[int] = set()  # hashes of blocks earlier sequences here will fill
            for seq_id in seq_ids:
                chain = self._chain(content, _branch(seq_id), num_tokens // bs)
                hit = self._hits(chain, most)
                k = len(hit)
                while k < most and chain[k] in earlier:
                    k += 1
                for b in hit:
                    if self._ref[b] == 0 and b not in touched:
                        touched.add(b)
                        from_queue += 1
                from_queue += n - k
                earlier.update(chain[len(hit):])
                plans.append((hit, k, chain))
        if len(self._free) - from_queue < self.watermark_blocks(watermark):
            return False
        for hit, _, _ in plans:  # hits leave the free queue first: no new block evicts them
            for b in hit:
                self._touch(b)
        siblings: dict[int, int] = {}  # hash -> block, of this admission's earlier sequences
        names, cached = self._hash, self._cached
        for seq_id, (hit, shared, chain) in zip(seq_ids, plans, strict=True):
            table = list(hit)
            for j in range(len(hit), shared):
                b = siblings[chain[j]]
                self._touch(b)
                table.append(b)
            if shared < n:
                table += self._take_many(n - shared)
            self._seqs[seq_id] = _CSeq(table, num_tokens, final_len, content,
                                       _branch(seq_id), list(chain), shared * bs)
            self._num_logical_blocks += n
            # Name the full blocks this sequence fills (hits and siblings' are named):
            # the body of _filled without dedup, inlined (the admission hot path).
            for j in range(shared, len(chain)):
                b, h = table[j], chain[j]
                names[b] = h
                if cached.setdefault(h, b) != b:
                    self._dups.setdefault(h, []).append(b)
            if len(seq_ids) > 1:
                siblings.update(zip(chain, table[:len(chain)], strict=True))
        return True

    def _admit_one(self, seq_id: SeqId, num_tokens: int, final_len: int, watermark: float,
                   content: Request) -> bool:
        """:meth:`allocate_group` of one new sequence with content, its arguments checked
        already: the simulator's and the benchmark's hot path, written out flat."""
        bs = self.block_size
        n = -(-num_tokens // bs)
        branch = _branch(seq_id)
        chain = self._chain(content, branch, num_tokens // bs)
        ref, free, cached = self._ref, self._free, self._cached
        hit = []
        held = 0  # hits some running sequence holds: they do not leave the free queue
        get = cached.get
        for h in chain[:(num_tokens - 1) // bs]:  # the last-token rule
            b = get(h)
            if b is None:
                break
            hit.append(b)
            if ref[b]:
                held += 1
        if len(free) - (n - held) < self.watermark_blocks(watermark):
            return False
        k = len(hit)
        for b in hit:  # hits leave the free queue first: no new block evicts them
            r = ref[b]
            if r == 0:
                del free[b]
            elif r == 1:
                self._num_shared_blocks += 1
            ref[b] = r + 1
        self._num_cached_free -= k - held
        table = hit
        nfull = len(chain)
        if k < n:
            # _take_many and the naming of _name in one pass over the new blocks (the
            # admission hot path): each comes off the head of the free queue, loses the
            # content it held (evicted), and is named by its hash if it will be full.
            popitem, names, hook, dups = free.popitem, self._hash, self.on_release, self._dups
            evicted = 0
            for j in range(k, n):
                b = popitem(last=False)[0]
                old = names[b]
                if old is not None:
                    if cached[old] == b and old not in dups:
                        del cached[old]
                        names[b] = None
                    else:
                        self._drop_hash(b, old)
                    evicted += 1
                    if hook is not None:
                        hook(b * bs, bs)
                ref[b] = 1
                table.append(b)
                if j < nfull:
                    h = chain[j]
                    names[b] = h
                    if cached.setdefault(h, b) != b:
                        dups.setdefault(h, []).append(b)
            self._num_cached_free -= evicted
            self.evicted_blocks += evicted
        self._seqs[seq_id] = _CSeq(table, num_tokens, final_len, content, branch,
                                   list(chain), k * bs)
        self._num_logical_blocks += n
        return True

    def allocate(self, seq_id: SeqId, num_tokens: int, final_len: int | None = None,
                 content: Request | None = None) -> None:
        """Blocks for one new sequence (its cached prefix from the cache when ``content``
        is given); ``OutOfMemoryError`` and nothing changed when they do not fit."""
        if seq_id in self._seqs:
            raise ValueError(f"sequence id {seq_id!r} already exists")
        if not self.allocate_group([seq_id], num_tokens, final_len, content=content):
            raise OutOfMemoryError(
                f"sequence {seq_id!r} needs {self.blocks_needed(num_tokens)} blocks for "
                f"{num_tokens} tokens, {len(self._free)} free or cached")

    # --------------------------------------------------------------- growing

    def can_append_all(self, seq_ids: Iterable[SeqId]) -> bool:
        """As the paged pool's; a lone sequence (every decode of a request without
        samples or beams) is answered without building the sharers' count."""
        if type(seq_ids) is list and len(seq_ids) == 1:
            try:
                seq = self._seqs[seq_ids[0]]
            except (KeyError, TypeError):
                raise ValueError(f"unknown sequence id {seq_ids[0]!r}") from None
            if seq.num_tokens % self.block_size and self._ref[seq.table[-1]] == 1:
                return True  # room in its private last block
            return bool(self._free)
        return super().can_append_all(seq_ids)

    def append_slot(self, seq_id: SeqId) -> AppendResult:
        """Room for one new token (copy-on-write of a shared partial last block); a block
        that becomes full is named by its hash and so becomes reusable."""
        try:
            seq = self._seqs[seq_id]
        except (KeyError, TypeError):
            raise ValueError(f"unknown sequence id {seq_id!r}") from None
        n = seq.num_tokens
        bs = self.block_size
        offset = n % bs
        copy = None
        if offset == 0:
            if not self._free:
                raise OutOfMemoryError(f"no free block for sequence {seq_id!r}")
            block = self._take()
            self._ref[block] = 1
            seq.table.append(block)
            self._num_logical_blocks += 1
            slot = block * bs
        else:
            block = seq.table[-1]
            if self._ref[block] == 1:
                slot = block * bs + offset
            else:
                if not self._free:
                    raise OutOfMemoryError(
                        f"no free block for the copy-on-write of sequence {seq_id!r}")
                new = self._take()
                self._ref[new] = 1
                self._ref[block] -= 1
                if self._ref[block] == 1:
                    self._num_shared_blocks -= 1
                seq.table[-1] = new
                slot = new * bs + offset
                copy = KVCopy(block * bs, new * bs, offset)
        seq.num_tokens = n + 1
        if offset == bs - 1 and seq.content is not None:
            # dedup only without a copy: a copied-into block must not go back this step
            kept = self._filled(seq, n // bs, dedup=self.dedup and copy is None)
            if kept != slot // bs:  # deduplicated: the same token's K/V goes to the copy
                slot = kept * bs + offset
        return slot, copy

    def fork(self, parent_id: SeqId, child_id: SeqId) -> list[KVCopy]:
        """``child_id`` shares every block of ``parent_id``; nothing is copied now."""
        parent = self._get(parent_id)
        if child_id in self._seqs:
            raise ValueError(f"sequence id {child_id!r} already exists")
        for b in parent.table:
            self._touch(b)
        self._seqs[child_id] = _CSeq(list(parent.table), parent.num_tokens, parent.final_len,
                                     parent.content, _branch(child_id), list(parent.hashes))
        self._num_logical_blocks += len(parent.table)
        return []

    # --------------------------------------------------------------- release

    def free(self, seq_id: SeqId) -> None:
        """Drop the sequence, tail first: blocks no one else holds join the free queue;
        full ones keep their hash (cached), the others are released at once."""
        seq = self._pop_seq(seq_id)
        ref, free, hashes = self._ref, self._free, self._hash
        hook, bs = self.on_release, self.block_size
        table = seq.table
        cached = unshared = 0
        for b in reversed(table):
            r = ref[b] - 1
            ref[b] = r
            if r == 0:
                free[b] = None
                if hashes[b] is not None:
                    cached += 1
                elif hook is not None:
                    hook(b * bs, bs)
            elif r == 1:
                unshared += 1
        self._num_cached_free += cached
        self._num_shared_blocks -= unshared
        self._num_logical_blocks -= len(table)

    # --------------------------------------------------------------- swapping

    def swap_out(self, seq_ids: Iterable[SeqId]) -> SwappedGroup:
        seq_ids = tuple(seq_ids)
        named = {s: (self._get(s).content, self._get(s).hashes) for s in seq_ids
                 if isinstance(self._get(s), _CSeq)}
        group = super().swap_out(seq_ids)
        group.state["content"] = named
        return group

    def swap_in(self, group: SwappedGroup) -> list[KVCopy]:
        """Bring a swapped group back into blocks from the free queue (all or nothing)."""
        n = self._check_swap_in(group)
        if n > len(self._free):
            raise OutOfMemoryError(f"swap-in needs {n} blocks, {len(self._free)} free")
        new_blocks = [self._take() for _ in range(n)]
        for b in new_blocks:
            self._ref[b] = 0
        named = group.state.get("content", {})
        for seq_id, table, (num_tokens, final_len) in zip(
            group.seq_ids, group.state["tables"], group.state["meta"], strict=True
        ):
            phys = [new_blocks[i] for i in table]
            for b in phys:
                self._ref[b] += 1
                if self._ref[b] == 2:
                    self._num_shared_blocks += 1
            content, hashes = named.get(seq_id, (None, []))
            seq = _CSeq(phys, num_tokens, final_len, content, _branch(seq_id), [])
            self._seqs[seq_id] = seq
            self._num_logical_blocks += len(phys)
            for j, h in enumerate(hashes):
                self._filled(seq, j, h)
        group.swapped_in = True
        bs = self.block_size
        return [KVCopy(i * bs, b * bs, bs) for i, b in enumerate(new_blocks)]

    # ------------------------------------------------------------- checks

    def check_invariants(self) -> None:
        super().check_invariants()
        check_prefix_cache(self)
