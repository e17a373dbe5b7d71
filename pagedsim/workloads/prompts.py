"""What a prompt holds, and the chained block hashes that prefix caches key on.

A request's prompt is described compactly by :attr:`Request.prompt_pieces`: ids of
consecutive pieces of ``prompt_piece_tokens`` tokens (Mooncake's ``hash_ids`` of 512-token
blocks). The tokens themselves follow deterministically from the piece id
(:func:`prompt_tokens`), so two prompts hold the same tokens exactly where their pieces
agree. A request without pieces holds tokens nobody else holds.

Prefix caches (vLLM v1's automatic prefix caching, SGLang's radix tree) key a block of
``block_size`` tokens on its content *and everything before it*: block j's hash is the
hash of block j-1's hash and block j's token ids, so equal hashes mean equal prefixes.
Only full blocks are hashed; a partial last block is never shared.
:func:`block_hashes` computes that chain from the pieces, without materializing tokens:
a block's content is named by the runs it covers (:func:`block_key`): piece runs, the
request's own prompt tokens, and generated tokens (which are the sequence's own unless
``output_in_pieces`` names them).
"""

from __future__ import annotations

import numpy as np

from .workload import Request

#: Token ids are drawn from this vocabulary (Llama-3's size) when tokens are expanded.
VOCAB_SIZE = 128_256


def named_tokens(request: Request) -> int:
    """How many leading tokens of a sequence of ``request`` its pieces name: the prompt's,
    or prompt and output when ``output_in_pieces`` (single-sequence requests only: samples
    and beams differ); 0 without pieces. The one place this rule lives (block keys, the
    allocators' fast hashes and the real executor's token ids all read it)."""
    pieces = request.prompt_pieces
    if pieces is None:
        return 0
    if request.output_in_pieces and request.n == 1 and request.beam_width == 1:
        return min(len(pieces) * request.prompt_piece_tokens,
                   request.prompt_len + request.output_len)
    return request.prompt_len


def block_key(request: Request, block_size: int, index: int, branch: int = 0) -> tuple:
    """What block ``index`` (tokens ``index * block_size`` onwards) of one sequence of
    ``request`` holds, as a tuple of runs of ints: a piece run ``(piece, offset, length)``
    where pieces name the tokens, ``(-1, request_id, position, length)`` for prompt tokens
    nobody else holds, ``(-2, request_id, branch, position, length)`` for generated tokens.

    ``branch`` tells apart the sequences of one request (parallel samples, beams: their
    outputs differ); the scheduler passes the sequence id. Outputs named by pieces
    (``output_in_pieces``, a single-sequence request) ignore it.
    """
    start, end = index * block_size, (index + 1) * block_size
    pieces, pt, plen = request.prompt_pieces, request.prompt_piece_tokens, request.prompt_len
    named = named_tokens(request)
    runs: list[tuple[int, ...]] = []
    pos = start
    while pos < end:
        if pos < named:
            k, off = divmod(pos, pt)
            take = min(end - pos, pt - off, named - pos)
            runs.append((pieces[k], off, take))  # type: ignore[index]
        elif pos < plen:  # a prompt without pieces
            take = min(end, plen) - pos
            runs.append((-1, request.request_id, pos, take))
        else:
            take = end - pos
            runs.append((-2, request.request_id, branch, pos, take))
        pos += take
    return tuple(runs)


def chain_hash(parent: int, key: tuple) -> int:
    """Block hash from its parent block's hash (0 for the first block) and its content."""
    return hash((parent, key))


def block_hashes(request: Request, block_size: int, num_tokens: int | None = None,
                 branch: int = 0) -> list[int]:
    """Chained hashes of the first ``num_tokens`` tokens' full blocks of ``block_size``
    (default: the prompt's, ``prompt_len // block_size`` of them), in order."""
    n = (request.prompt_len if num_tokens is None else num_tokens) // block_size
    out: list[int] = []
    parent = 0
    for j in range(n):
        parent = chain_hash(parent, block_key(request, block_size, j, branch))
        out.append(parent)
    return out


def prompt_tokens(request: Request) -> np.ndarray:
    """The prompt's token ids, int32 ``[prompt_len]``: each piece's tokens come from a
    generator seeded with the piece id (a request without pieces: seeded with its id)."""
    if request.prompt_pieces is None:
        rng = np.random.default_rng((1, request.request_id))
        return rng.integers(0, VOCAB_SIZE, request.prompt_len, dtype=np.int32)
    parts = [np.random.default_rng((0, p)).integers(0, VOCAB_SIZE, request.prompt_piece_tokens,
                                                    dtype=np.int32)
             for p in request.prompt_pieces]
    return np.concatenate(parts)[: request.prompt_len]
