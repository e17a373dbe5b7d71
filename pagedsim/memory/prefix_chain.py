"""Chained block hashes, fast: the same values as :func:`pagedsim.workloads.prompts.block_hashes`.

:func:`pagedsim.workloads.prompts.block_key` names a block's content as runs of ints and handles
every case (blocks across piece boundaries, prompts without pieces, generated tokens,
outputs named by pieces). A Mooncake prompt of 12,000 tokens at block size 16 has 750
blocks, almost all of them inside one 512-token piece; for those (and for blocks wholly
inside a prompt without pieces, or wholly inside the generated tokens) the single run is
written down here directly, which is several times faster than the general walk. Any
other block goes through ``block_key``. The values are identical: a test checks them
against ``block_hashes`` on every shape.
"""

from __future__ import annotations

from collections import OrderedDict

from ..workloads.prompts import block_key, chain_hash, named_tokens
from ..workloads.workload import Request


def block_key_fast(content: Request, block_size: int, index: int, branch: int,
                   named: int) -> tuple:
    """``block_key(content, block_size, index, branch)``, skipping the general walk when
    block ``index`` is one run; ``named`` is :func:`named_tokens` of ``content``."""
    start = index * block_size
    end = start + block_size
    plen = content.prompt_len
    if end <= named:
        pt = content.prompt_piece_tokens
        k, off = divmod(start, pt)
        if off + block_size <= pt:
            return ((content.prompt_pieces[k], off, block_size),)  # type: ignore[index]
    elif start >= named and start >= plen:
        return ((-2, content.request_id, branch, start, block_size),)
    elif named == 0 and end <= plen and content.prompt_pieces is None:
        return ((-1, content.request_id, start, block_size),)
    return block_key(content, block_size, index, branch)


def extend_chain(content: Request, block_size: int, branch: int, hashes: list[int],
                 num_blocks: int) -> None:
    """Append to ``hashes`` (the chain's first ``len(hashes)`` hashes) the chained hashes
    of blocks ``len(hashes)`` .. ``num_blocks - 1`` of one sequence of ``content``:
    ``hash((parent, key))``, as :func:`pagedsim.workloads.prompts.chain_hash` computes it."""
    j = len(hashes)
    if j >= num_blocks:
        return
    parent = hashes[-1] if hashes else 0
    append = hashes.append
    named = named_tokens(content)
    pieces = content.prompt_pieces
    if pieces is not None:
        # The common case in one tight loop: blocks inside one piece of the named tokens.
        pt = content.prompt_piece_tokens
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
        parent = hash((parent, block_key_fast(content, block_size, j, branch, named)))
        append(parent)
        j += 1


def branch_of(seq_id: object) -> int:
    """The branch of a sequence's generated tokens (its id, as an int for hashing)."""
    return seq_id if type(seq_id) is int else hash(seq_id)


#: How many requests' hash chains are remembered (hashes are computed once per request and
#: sequence, as vLLM computes a request's block hashes once when it arrives).
HASH_MEMO_ENTRIES = 4096


class ChainMemo:
    """The chained block hashes of recent requests' sequences, each computed once."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._memo: OrderedDict[tuple[int, int], tuple[Request, list[int]]] = OrderedDict()

    def chain(self, content: Request, branch: int, num_blocks: int) -> list[int]:
        """The first ``num_blocks`` chained hashes of one sequence of ``content`` (do not
        modify the list returned)."""
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

    def next_hash(self, content: Request, branch: int, hashes: list[int]) -> int:
        """The hash of the block after ``hashes`` (a sequence's full blocks so far)."""
        parent = hashes[-1] if hashes else 0
        key = block_key_fast(content, self.block_size, len(hashes), branch,
                             named_tokens(content))
        return chain_hash(parent, key)
