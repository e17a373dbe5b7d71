"""A request's block hashes, computed once and kept with it (vLLM's ``request.block_hashes``).

A full block of ``block_size`` tokens is named by a chained hash: its parent block's hash
and its own tokens (:func:`pagedsim.workloads.prompts.chain_hash` of
:func:`~pagedsim.workloads.prompts.block_key`). The scheduler makes one
:class:`BlockHashes` per request when it arrives, for schemes with a prefix cache, and
keeps it with the request; the memory layer receives it and never the request itself: it
asks only for hashes (a sequence's first ``k``, or the next one after a sequence's own).

The chains are hashed lazily and fast. :func:`~pagedsim.workloads.prompts.block_key`
names a block's content as runs of ints and handles every case (blocks across piece
boundaries, prompts without pieces, generated tokens, outputs named by pieces). A Mooncake
prompt of 12,000 tokens at block size 16 has 750 blocks, almost all of them inside one
512-token piece; for those (and for blocks wholly inside a prompt without pieces, or
wholly inside the generated tokens) the single run is written down here directly, which
is several times faster than the general walk. Any other block goes through
``block_key``. The values are identical: a test checks them against
:func:`~pagedsim.workloads.prompts.block_hashes` on every shape.
"""

from __future__ import annotations

from ..validate import check_int
from .prompts import block_key, chain_hash, named_tokens
from .workload import Request


def block_key_fast(request: Request, block_size: int, index: int, branch: int,
                   named: int) -> tuple:
    """``block_key(request, block_size, index, branch)``, skipping the general walk when
    block ``index`` is one run; ``named`` is :func:`named_tokens` of ``request``."""
    start = index * block_size
    end = start + block_size
    plen = request.prompt_len
    if end <= named:
        pt = request.prompt_piece_tokens
        k, off = divmod(start, pt)
        if off + block_size <= pt:
            return ((request.prompt_pieces[k], off, block_size),)  # type: ignore[index]
    elif start >= named and start >= plen:
        return ((-2, request.request_id, branch, start, block_size),)
    elif named == 0 and end <= plen and request.prompt_pieces is None:
        return ((-1, request.request_id, start, block_size),)
    return block_key(request, block_size, index, branch)


def extend_chain(request: Request, block_size: int, branch: int, hashes: list[int],
                 num_blocks: int) -> None:
    """Append to ``hashes`` (the chain's first ``len(hashes)`` hashes) the chained hashes
    of blocks ``len(hashes)`` .. ``num_blocks - 1`` of one sequence of ``request``:
    ``hash((parent, key))``, as :func:`pagedsim.workloads.prompts.chain_hash` computes it."""
    j = len(hashes)
    if j >= num_blocks:
        return
    parent = hashes[-1] if hashes else 0
    append = hashes.append
    named = named_tokens(request)
    pieces = request.prompt_pieces
    if pieces is not None:
        # The common case in one tight loop: blocks inside one piece of the named tokens.
        pt = request.prompt_piece_tokens
        stop = min(num_blocks, named // block_size)
        if pt % block_size == 0:  # no block spans two pieces: walk piece by piece
            per_piece = pt // block_size
            while j < stop:
                k, first = divmod(j, per_piece)
                piece = pieces[k]
                last = min(per_piece, stop - k * per_piece)
                for off in range(first * block_size, last * block_size, block_size):
                    parent = hash((parent, ((piece, off, block_size),)))
                    append(parent)
                j = k * per_piece + last
        while j < stop:
            k, off = divmod(j * block_size, pt)
            if off + block_size > pt:
                break  # this block spans two pieces: the general path below
            parent = hash((parent, ((pieces[k], off, block_size),)))
            append(parent)
            j += 1
    while j < num_blocks:
        parent = hash((parent, block_key_fast(request, block_size, j, branch, named)))
        append(parent)
        j += 1


def branch_of(seq_id: object) -> int:
    """The branch of a sequence's generated tokens (its id, as an int for hashing)."""
    return seq_id if type(seq_id) is int else hash(seq_id)


def is_request(value: object) -> bool:
    """Whether ``value`` can name a sequence's tokens: a request, or its hashes."""
    return isinstance(value, BlockHashes) or hasattr(value, "request_id")


def not_a_request(value: object) -> ValueError:
    """The error for a ``block_hashes`` argument that is neither a request nor its hashes."""
    return ValueError(f"block_hashes must be a request's BlockHashes or the request "
                      f"itself, got {value!r:.80}")


def hashes_for(block_hashes: object, block_size: int | None) -> BlockHashes | None:
    """What an allocator was given as ``block_hashes`` (a request's hashes, or the request
    itself) as the hashes that name blocks of ``block_size`` (hashed from now on unless it
    is those already); None when ``block_size`` is None (no prefix cache: nothing is
    hashed, ``block_hashes`` only checked). ``ValueError`` for anything that is not a
    request or its hashes."""
    if type(block_hashes) is BlockHashes and block_hashes.block_size == block_size:
        return block_hashes  # the hot path: the scheduler's hashes
    if block_size is None:
        if not is_request(block_hashes):
            raise not_a_request(block_hashes)
        return None
    return BlockHashes.of(block_hashes, block_size)


class BlockHashes:
    """The chained block hashes of one request's sequences, each hashed once, lazily.

    ``branch`` tells apart the generated tokens of one request's sequences (parallel
    samples, beams); prompt blocks hash the same on every branch.
    """

    __slots__ = ("_request", "block_size", "_chains")

    def __init__(self, request: Request, block_size: int) -> None:
        if not hasattr(request, "request_id"):
            raise not_a_request(request)
        self._request = request
        self.block_size = check_int("block_size", block_size, minimum=1)
        self._chains: dict[int, list[int]] = {}  # branch -> its hashes so far

    @classmethod
    def of(cls, source: object, block_size: int) -> BlockHashes:
        """``source`` (a request, or hashes of one) as hashes for blocks of ``block_size``:
        itself when it is those already, else the request's, hashed from now on."""
        if type(source) is cls and source.block_size == block_size:  # type: ignore[union-attr]
            return source  # type: ignore[return-value]
        if isinstance(source, BlockHashes):
            source = source._request  # another block size: hash anew
        return cls(source, block_size)  # type: ignore[arg-type]

    def chain(self, branch: int, num_blocks: int) -> list[int]:
        """The first ``num_blocks`` chained hashes of the sequence on ``branch`` (do not
        modify the list returned)."""
        hashes = self._chains.get(branch)
        if hashes is None:
            hashes = self._chains[branch] = []
        if len(hashes) < num_blocks:
            extend_chain(self._request, self.block_size, branch, hashes, num_blocks)
        return hashes if len(hashes) == num_blocks else hashes[:num_blocks]

    def next_hash(self, branch: int, hashes: list[int]) -> int:
        """The hash of the block after ``hashes`` (a sequence's full blocks so far, which a
        forked sequence inherits from its parent's branch) on ``branch``."""
        parent = hashes[-1] if hashes else 0
        req = self._request
        key = block_key_fast(req, self.block_size, len(hashes), branch, named_tokens(req))
        return chain_hash(parent, key)

    def __repr__(self) -> str:
        return (f"BlockHashes(request {self._request.request_id}, block_size "
                f"{self.block_size})")
