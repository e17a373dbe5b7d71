"""What a prompt holds, and the chained block hashes that prefix caches key on.

A request's prompt is described compactly by :attr:`Request.prompt_pieces`: ids of
consecutive pieces of ``prompt_piece_tokens`` tokens (Mooncake's ``hash_ids`` of 512-token
blocks). The tokens themselves follow deterministically from the piece id
(:func:`prompt_tokens`), so two prompts hold the same tokens exactly where their pieces
agree. A request without pieces holds tokens nobody else holds.

Prefix caches (vLLM v1's automatic prefix caching, SGLang's radix tree) key a block of
``block_size`` tokens on its content *and everything before it*: block j's hash is the
hash of block j-1's hash and block j's token ids, so equal hashes mean equal prefixes.
Only full blocks are hashed; a prompt's partial last block is never shared.
:func:`block_hashes` computes that chain from the pieces, without materializing tokens:
a block's content is named by the (piece id, offset, length) runs it covers.
"""

from __future__ import annotations

import numpy as np

from .workload import Request

#: Token ids are drawn from this vocabulary (Llama-3's size) when tokens are expanded.
VOCAB_SIZE = 128_256


def block_hashes(request: Request, block_size: int) -> list[int]:
    """Chained hashes of the prompt's full blocks of ``block_size`` tokens, in order
    (``prompt_len // block_size`` of them)."""
    n = request.prompt_len // block_size
    pieces = request.prompt_pieces
    piece_tokens = request.prompt_piece_tokens
    out: list[int] = []
    parent = 0
    for j in range(n):
        start, end = j * block_size, (j + 1) * block_size
        if pieces is None:  # unique content: name it by the request
            key: tuple = (-1, request.request_id, start)  # ints only: a stable hash
        else:
            runs = []
            pos = start
            while pos < end:
                k, off = divmod(pos, piece_tokens)
                take = min(end - pos, piece_tokens - off)
                runs.append((pieces[k], off, take))
                pos += take
            key = tuple(runs)
        parent = hash((parent, key))
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
