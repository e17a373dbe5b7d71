"""vLLM v1's prefix-cache policy, composed into the block manager: chained hashes name
full blocks, a lookup walks a prompt's chain through the pool's hash map.

The block pool (:class:`~.block_pool.BlockPool`) holds the free queue and the map from
hashes to blocks; this policy decides, for the manager, which blocks a new sequence starts
with and which content its blocks hold:

* **Lookup** (:meth:`HashCache.lookup`): the longest prefix of the prompt's chain the map
  holds, whole blocks only and at most ``num_tokens - 1`` tokens (the last prompt token is
  always computed, to sample the first output token). A request's chain comes with it
  (:class:`~pagedsim.workloads.block_hashes.BlockHashes`, hashed once, as vLLM hashes a
  request's blocks when it arrives).
* **Admission** (:meth:`plan`, then :meth:`admit`): all or nothing. The plan counts the
  hits, the new blocks, and the hit blocks that must leave the free queue before anything
  changes; the sequences of one admission (a recomputed group) share the full blocks
  their common prefix fills, as if each found the earlier one's blocks in the cache.
  Hits are held before new blocks are taken, so no eviction takes a block about to be hit.
* **Host tier** (the pool's ``host``, a :class:`~.host_tier.HostTier`, or None): a lookup
  continues the prompt's chain there after the GPU's hits; an admission loads those host
  hits into fresh blocks (the first of its new ones, pinned in the host until loaded),
  and with write-through every block it computes is queued for the host (the first
  sequence of a group only: its siblings share its blocks).
* **Naming** (:meth:`filled`): a block that becomes full during decode gets its hash too,
  so a recomputed request or the next turn of a chat finds it. With ``dedup`` a private
  block whose content is cached already goes back and the cached copy is used instead,
  as vLLM v0 and SGLang do (v1 keeps the duplicate).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..workloads.block_hashes import BlockHashes, branch_of
from .base import SeqId
from .block_pool import BlockPool
from .block_seq import Seq


class HashCache:
    """The prefix-cache policy over a :class:`~.block_pool.BlockPool` (see the module)."""

    def __init__(self, pool: BlockPool) -> None:
        self.pool = pool
        self.block_size = pool.block_size

    def lookup(self, mgr, block_hashes: BlockHashes, num_tokens: int, seq_id: SeqId) -> int:
        """Tokens of a new ``num_tokens``-token sequence the cache holds now."""
        bs, pool = self.block_size, self.pool
        most = max(num_tokens - 1, 0) // bs
        if not most or not (pool.cached or pool.host):
            return 0
        # The whole chain the admission will want (hashed once: the request keeps it).
        chain = block_hashes.chain(branch_of(seq_id), num_tokens // bs)
        k = len(self._hits(chain, most))
        if pool.host is not None:  # the prefix goes on in the host tier
            k += pool.host.run(chain, k, most)
        return k * bs

    def plan(self, mgr, seq_ids: Sequence[SeqId], num_tokens: int, block_hashes: BlockHashes):
        """Per sequence (its hit blocks, its hit count with siblings', its chain, its host
        hits after them), and the blocks that would leave the free queue: the hits
        nobody holds, and the new ones. Changes nothing (but hashes ``block_hashes``). Host
        hits take new blocks like computed ones; only the first sequence of a group
        looks in the host (its siblings share its blocks)."""
        bs, ref, host = self.block_size, mgr.refs.counts, self.pool.host
        n, most = -(-num_tokens // bs), max(num_tokens - 1, 0) // bs  # the last-token rule
        plans, from_queue, touched, earlier = [], 0, set(), set()
        for seq_id in seq_ids:
            chain = block_hashes.chain(branch_of(seq_id), num_tokens // bs)
            hit = self._hits(chain, most)
            k = len(hit)
            kh = host.run(chain, k, most) if host is not None and not plans else 0
            while k < most and chain[k] in earlier:  # an earlier sibling fills it
                k += 1
            for b in hit:
                if ref[b] == 0 and b not in touched:  # nobody holds it: it leaves the queue
                    touched.add(b)
                    from_queue += 1
            from_queue += n - k
            earlier.update(chain[len(hit):])
            plans.append((hit, k, chain, kh))
        return plans, from_queue

    def _hits(self, chain: list[int], most: int) -> list[int]:
        """The blocks the map holds for the longest prefix of ``chain[:most]``."""
        hit, get = [], self.pool.cached.get
        for h in chain[:most]:
            b = get(h)
            if b is None:
                break
            hit.append(b)
        return hit

    def admit(self, mgr, seq_ids: Sequence[SeqId], num_tokens: int, final_len: int | None,
              block_hashes: BlockHashes, plans) -> None:
        """Carry out a plan that fits: hits first, then siblings' blocks, then new ones,
        and name every full block a sequence fills."""
        bs, pool, host = self.block_size, self.pool, self.pool.host
        n = -(-num_tokens // bs)
        for hit, _, _, _ in plans:  # hits leave the queue first: no new block evicts one
            mgr.refs.hold(hit)
        _, k0, chain0, kh0 = plans[0]
        if kh0:  # the host hits stay in the host while the new blocks' evictions write back
            host.pin(chain0[k0:k0 + kh0])
        siblings: dict[int, int] = {}  # hash -> block, of this admission's earlier sequences
        for seq_id, (hit, k, chain, kh) in zip(seq_ids, plans, strict=True):
            table = list(hit)
            for j in range(len(hit), k):
                b = siblings[chain[j]]
                mgr.refs.hold([b])
                table.append(b)
            new = mgr.refs.take(n - k)
            table += new
            seq = mgr.add_seq(seq_id, Seq(table, num_tokens, final_len, block_hashes,
                                           branch_of(seq_id), list(chain), (k + kh) * bs))
            for j in range(k, len(chain)):  # name the full blocks this sequence fills
                pool.cache_block(table[j], chain[j])
            if host is not None and seq_id == seq_ids[0]:
                self._host_admit(seq, chain, k, kh, new)
            siblings.update(zip(chain, table[:len(chain)], strict=True))

    def _host_admit(self, seq: Seq, chain: list[int], k: int, kh: int,
                    new: list[int]) -> None:
        """The host's side of an admission whose new blocks are ``new`` (after ``k``
        hits): load the ``kh`` host hits into the first of them, queue the blocks it
        computes for write-through."""
        host = self.pool.host
        if kh:
            host.load(chain[k:k + kh], new[:kh])
            seq.host_hit_tokens = kh * self.block_size
        if host.write_through:
            for j in range(k + kh, len(chain)):
                host.inserted(new[j - k], chain[j])

    def filled(self, mgr, seq: Seq, index: int, h: int | None = None,
               dedup: bool = False) -> int:
        """Block ``index`` of ``seq`` is full: name it by its hash ``h`` (computed when not
        given). With ``dedup``, a private block whose content is cached already goes back
        and the cached copy is used instead; returns the block the table now holds."""
        pool = self.pool
        if h is None:
            h = seq.block_hashes.next_hash(seq.branch, seq.hashes)
        seq.hashes.append(h)
        b = seq.table[index]
        if pool.hashes[b] is not None:  # a hit, or shared with a sibling: named already
            return b
        other = pool.get_cached_block(h)
        if other is not None and dedup and mgr.refs.counts[b] == 1:
            mgr.refs.hold([other])
            seq.table[index] = other
            mgr.refs.release([b])
            return other
        pool.cache_block(b, h)
        if pool.host is not None:
            pool.host.inserted(b, h)
        return b

    # The radix policy's hooks, which this policy does not need (so the manager's free
    # does not call them).
    acts_at_free = False

    def freeing(self, mgr, seq: Seq) -> None:
        pass

    def freed(self, mgr, seq: Seq) -> None:
        pass

    def forked(self, mgr, parent: Seq, child: Seq) -> None:
        pass

    def swapped_in(self, mgr, seq: Seq, hashes: list) -> None:
        """A sequence back from the CPU: its full blocks are named again."""
        for j, h in enumerate(hashes):
            self.filled(mgr, seq, j, h)

    def snapshot(self, snap: dict) -> None:
        pass

    def check(self, mgr) -> None:
        """Every full block of a sequence with content is named by its hash."""
        hashes = self.pool.hashes
        for seq_id, seq in mgr.seqs.items():
            if seq.block_hashes is None:
                continue
            for j, h in enumerate(seq.hashes):
                b = seq.table[j]
                assert hashes[b] == h, (f"sequence {seq_id!r}: full block {j} (block {b}) "
                                        f"is named {hashes[b]}, not {h}")
