"""Shared helpers for the prefix-caching tests (tests/memory/test_prefix_cache.py,
test_radix.py): requests whose prompts are named blocks, and their admission.

Not a conftest: the project's tests/conftest.py registers the hypothesis profiles.
"""

from __future__ import annotations

from pagedsim.memory.block_manager import BlockManager
from pagedsim.workloads.workload import Request

#: Tokens per block (vLLM's default), and per prompt piece.
BS = 16


def req(rid: int, pieces: tuple[int, ...], prompt_len: int | None = None,
        output_len: int = 8) -> Request:
    """A request whose prompt is ``pieces`` of one block each (the last may be cut)."""
    return Request(rid, 0.0, prompt_len or len(pieces) * BS, output_len,
                   prompt_pieces=pieces, prompt_piece_tokens=BS)


def admit(a: BlockManager, seq_id: int, r: Request) -> bool:
    """Admit ``r``'s whole prompt as sequence ``seq_id``, room for its output reserved."""
    return a.allocate_group([seq_id], r.prompt_len, r.prompt_len + r.output_len, block_hashes=r)
