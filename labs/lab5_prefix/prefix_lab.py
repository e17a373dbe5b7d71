"""Lab 5: automatic prefix caching, as vLLM v1 does it: chained block hashes, one LRU queue.

A paged KV pool (lab 3) frees a request's blocks the moment it finishes, and the next
request with the same system prompt computes the same K/V again. A prefix cache keeps
those blocks: a **full** block is named by a *chained hash*, the hash of its parent block's
hash and its own token ids, so two blocks with the same hash hold the same tokens *and the
same prefix before them* (K/V depend on the whole prefix). A freed full block keeps its
K/V and its hash; a later prompt that starts with the same blocks finds them by hash and
shares them (reference count + 1) instead of computing them again.

Where the pieces live (names as in vLLM's ``vllm/v1/core/block_pool.py``):

* the **free queue**: every block nobody holds (reference count 0), never-used blocks and
  cached blocks together, *least recently freed first*. New blocks come from its head; a
  block found by a lookup leaves it from wherever it sits (so: O(1) remove and append);
* the **hash map** ``cached``: hash -> the blocks named by that hash, in the order they were
  named (usually one; two requests can fill equal blocks, and vLLM keeps both so that
  block tables never change under a running request). A lookup uses the first;
* **eviction is lazy**: a cached block keeps its hash in the free queue; only when the
  queue's head hands it out for new content does its hash leave the map.

Units: lengths in tokens; blocks are numbered ``0 .. num_blocks - 1``; token ``i`` of a
sequence lives in slot ``block_table[i // block_size] * block_size + i % block_size``.
Token ids are plain ints. Errors: ``OutOfMemoryError`` when the free queue cannot supply
the blocks asked for, ``ValueError`` for bad input (an unknown or duplicate sequence id, an
empty prompt); a failed call changes nothing. Do not import ``pagedsim.memory``,
``pagedsim.workloads.prompts``, ``pagedsim.workloads.block_hashes`` or
``pagedsim.experiments.cache_replay`` (the grader refuses a file that does).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Iterator, Sequence

from pagedsim.errors import OutOfMemoryError

#: The parent hash of a sequence's first block (it has no parent block).
ROOT_HASH = 0


def hash_block(parent: int, block_tokens: Sequence[int]) -> int:
    """The hash of one full block: its parent block's hash and its own token ids.
    (vLLM hashes the same pair, with sha256 when asked; Python's tuple hash will do here.)"""
    return hash((parent, tuple(block_tokens)))


# ---------------------------------------------------------- 5.1 chained block hashes
def block_hashes(tokens: Sequence[int], block_size: int) -> list[int]:
    """The chained hashes of the **full** blocks of ``tokens``, in order: block ``j`` holds
    ``tokens[j * block_size:(j + 1) * block_size]`` and its hash is
    ``hash_block(hash of block j - 1, those tokens)`` (block 0's parent is ``ROOT_HASH``).
    A partial last block has no hash: its content is not final yet."""
    # BEGIN SOLUTION lab 5.1: each full block's hash chains its parent's hash
    out: list[int] = []
    parent = ROOT_HASH
    for j in range(len(tokens) // block_size):
        parent = hash_block(parent, tokens[j * block_size:(j + 1) * block_size])
        out.append(parent)
    return out
    # END SOLUTION


# ---------------------------------------------------------------- 5.2 the free queue
class FreeQueue:
    """The blocks nobody holds, least recently freed first (the head is taken next).

    ``popleft``, ``append`` and ``remove`` must each take O(1) time, whatever the queue's
    length: a lookup hit takes a cached block out of the middle of a queue of thousands.
    (vLLM links the blocks in a doubly linked list; an ``OrderedDict`` does the same.)
    """

    def __init__(self, blocks: Iterable[int]) -> None:
        """A queue holding ``blocks`` in the order given (the first is the head)."""
        # BEGIN SOLUTION lab 5.2: an OrderedDict keyed by block: ordered, O(1) remove
        self._queue: OrderedDict[int, None] = OrderedDict.fromkeys(blocks)
        # END SOLUTION

    def __len__(self) -> int:
        # BEGIN SOLUTION lab 5.2: how many blocks the queue holds
        return len(self._queue)
        # END SOLUTION

    def __iter__(self) -> Iterator[int]:
        """The blocks, head (next taken) first."""
        # BEGIN SOLUTION lab 5.2: head first
        return iter(list(self._queue))
        # END SOLUTION

    def __contains__(self, block: object) -> bool:
        # BEGIN SOLUTION lab 5.2: membership in O(1)
        return block in self._queue
        # END SOLUTION

    def popleft(self) -> int:
        """Take the head; ``OutOfMemoryError`` when the queue is empty."""
        # BEGIN SOLUTION lab 5.2: the head, least recently freed
        if not self._queue:
            raise OutOfMemoryError("no free block")
        return self._queue.popitem(last=False)[0]
        # END SOLUTION

    def append(self, block: int) -> None:
        """Put ``block`` at the tail (it was freed just now)."""
        # BEGIN SOLUTION lab 5.2: at the tail
        self._queue[block] = None
        # END SOLUTION

    def remove(self, block: int) -> None:
        """Take ``block`` out from wherever it sits (a lookup hit it)."""
        # BEGIN SOLUTION lab 5.2: out of the middle, in O(1)
        del self._queue[block]
        # END SOLUTION


class PrefixCacheLab:
    """A pool of ``num_blocks`` blocks of ``block_size`` token slots whose freed full
    blocks stay reusable until the free queue hands them out again.

    State (keep these attributes: the graders read them through ``adapters.py``):

    - ``free_queue``: a :class:`FreeQueue`, at the start blocks 0, 1, 2, ... (0 at the head);
    - ``ref_counts``: ``ref_counts[b]`` = number of block tables that hold block ``b``;
    - ``block_hash``: ``block_hash[b]`` = the hash naming block ``b``'s content, or None;
    - ``cached``: ``{hash: [block, ...]}``, the blocks named by each hash, oldest first;
    - ``block_tables``: ``{seq_id: [physical block, ...]}`` in token order;
    - ``seq_tokens``: ``{seq_id: [token id, ...]}``, the tokens each sequence holds;
    - ``seq_hashes``: ``{seq_id: [hash, ...]}``, the hashes of its full blocks, in order;
    - ``evictions``: how many cached blocks were evicted so far.
    """

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        for name, value in (("num_blocks", num_blocks), ("block_size", block_size)):
            if type(value) is not int or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.free_queue = FreeQueue(range(num_blocks))
        self.ref_counts: list[int] = [0] * num_blocks
        self.block_hash: list[int | None] = [None] * num_blocks
        self.cached: dict[int, list[int]] = {}
        self.block_tables: dict[Hashable, list[int]] = {}
        self.seq_tokens: dict[Hashable, list[int]] = {}
        self.seq_hashes: dict[Hashable, list[int]] = {}
        self.evictions = 0

    @property
    def num_free_blocks(self) -> int:
        """Blocks a new request could take: never-used and cached alike."""
        return len(self.free_queue)

    @property
    def num_cached_blocks(self) -> int:
        """Blocks in the free queue that still hold reusable K/V (they have a hash)."""
        return sum(self.block_hash[b] is not None for b in self.free_queue)

    def name_block(self, block: int, h: int) -> None:
        """Block ``block`` is full and holds the content hashed ``h``: it joins the map
        (after any block already named ``h``; vLLM does not deduplicate)."""
        self.block_hash[block] = h
        self.cached.setdefault(h, []).append(block)

    # ------------------------------------------------ 5.2 taking and reusing blocks
    def evict(self, block: int) -> None:
        """``block`` (cached, in no block table) is about to hold new content: its hash
        leaves the map (the hash's entry goes when its last block does); count it."""
        # BEGIN SOLUTION lab 5.2: drop the block from the map, forget its hash, count
        h = self.block_hash[block]
        blocks = self.cached[h]
        blocks.remove(block)
        if not blocks:
            del self.cached[h]
        self.block_hash[block] = None
        self.evictions += 1
        # END SOLUTION

    def take_block(self) -> int:
        """The free queue's head, for new content (reference count 1); a cached block is
        evicted now. ``OutOfMemoryError`` (nothing changed) when the queue is empty."""
        # BEGIN SOLUTION lab 5.2: pop the head; evict it if it has a hash
        block = self.free_queue.popleft()
        if self.block_hash[block] is not None:
            self.evict(block)
        self.ref_counts[block] = 1
        return block
        # END SOLUTION

    def reuse_block(self, block: int) -> None:
        """A lookup hit ``block``: one more reference; if nobody held it, it leaves the
        free queue (with its hash: it is not evicted, it is used)."""
        # BEGIN SOLUTION lab 5.2: leave the queue if nobody held it; one more reference
        if self.ref_counts[block] == 0:
            self.free_queue.remove(block)
        self.ref_counts[block] += 1
        # END SOLUTION

    # ------------------------------------------------------ 5.3 lookup and admission
    def lookup(self, tokens: Sequence[int]) -> list[int]:
        """The cached blocks a new prompt ``tokens`` would reuse: the first block named by
        each of its hashes, while the map has them. Whole blocks only, and at most
        ``len(tokens) - 1`` tokens: the last prompt token is always computed (its logits
        give the first output token). Changes nothing."""
        # BEGIN SOLUTION lab 5.3: follow the chain through the map; last token computed
        most = max(len(tokens) - 1, 0) // self.block_size
        hits: list[int] = []
        for h in block_hashes(tokens, self.block_size)[:most]:
            blocks = self.cached.get(h)
            if not blocks:
                break
            hits.append(blocks[0])
        return hits
        # END SOLUTION

    def allocate(self, seq_id: Hashable, tokens: Sequence[int]) -> int:
        """Admit a new sequence whose prompt is ``tokens`` (at least one token); returns
        how many of its tokens were found in the cache. Its table starts with the hit
        blocks (:meth:`reuse_block`, in order), then new blocks from the queue's head
        (:meth:`take_block`); every new *full* block is named (:meth:`name_block`).

        All or nothing: count what the queue must supply (the new blocks, and the hit
        blocks that sit in it) before changing anything; ``OutOfMemoryError`` and nothing
        changed (no reference count either) when it cannot."""
        # BEGIN SOLUTION lab 5.3: check; count hits and new blocks; reuse, take, name
        if seq_id in self.block_tables:
            raise ValueError(f"sequence id {seq_id!r} already exists")
        if not tokens:
            raise ValueError(f"sequence {seq_id!r}: a prompt needs at least one token")
        bs = self.block_size
        hashes = block_hashes(tokens, bs)
        hits = self.lookup(tokens)
        new = -(-len(tokens) // bs) - len(hits)
        from_queue = new + sum(1 for b in hits if self.ref_counts[b] == 0)
        if from_queue > len(self.free_queue):
            raise OutOfMemoryError(f"sequence {seq_id!r} needs {from_queue} blocks from the "
                                   f"free queue, which holds {len(self.free_queue)}")
        for b in hits:  # hits leave the queue first, so no new block can evict them
            self.reuse_block(b)
        table = hits + [self.take_block() for _ in range(new)]
        for j in range(len(hits), len(hashes)):
            self.name_block(table[j], hashes[j])
        self.block_tables[seq_id] = table
        self.seq_tokens[seq_id] = list(tokens)
        self.seq_hashes[seq_id] = hashes
        return len(hits) * bs
        # END SOLUTION

    # ------------------------------------------------- 5.4 decode and free, tail first
    def append_token(self, seq_id: Hashable, token: int) -> int:
        """The sequence generated ``token``: room for it (a new block from the queue when
        the last one is full), returns the slot its K/V go to. A block this token fills
        is named by its chained hash, so it is cached once freed.
        ``OutOfMemoryError`` (nothing changed) when a block is needed and none is free."""
        # BEGIN SOLUTION lab 5.4: a new block when full; name the block this token fills
        table, toks = self._table(seq_id), self.seq_tokens[seq_id]
        bs, n = self.block_size, len(self.seq_tokens[seq_id])
        if n % bs == 0:
            table.append(self.take_block())
        toks.append(token)
        if (n + 1) % bs == 0:
            hashes = self.seq_hashes[seq_id]
            h = hash_block(hashes[-1] if hashes else ROOT_HASH, toks[n + 1 - bs:])
            hashes.append(h)
            self.name_block(table[-1], h)
        return table[n // bs] * bs + n % bs
        # END SOLUTION

    def free(self, seq_id: Hashable) -> None:
        """Drop the sequence. Each of its blocks loses one reference; a block left with
        none joins the free queue's tail, named or not. Walk the table from its **last**
        block to its first: a chain's tail then sits nearer the head and is evicted
        before the chain's head (a head evicted first would strand its tail, which no
        lookup could reach)."""
        # BEGIN SOLUTION lab 5.4: one reference less per block, last block first
        table = self._table(seq_id)
        del self.block_tables[seq_id], self.seq_tokens[seq_id], self.seq_hashes[seq_id]
        for block in reversed(table):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free_queue.append(block)
        # END SOLUTION

    def _table(self, seq_id: Hashable) -> list[int]:
        try:
            return self.block_tables[seq_id]
        except (KeyError, TypeError):
            raise ValueError(f"unknown sequence id {seq_id!r}") from None
