"""The prefix-cache benchmark measures what it says: half of every prompt cached, one
hash chain per request (its speed is printed by ``python -m pagedsim.bench``, never
asserted here)."""

from __future__ import annotations

import pytest

from pagedsim.bench import bench_prefix_allocate_free, prefix_report


@pytest.mark.parametrize("fresh", [False, True])
def test_half_of_every_prompt_hits(fresh: bool) -> None:
    rate, hit = bench_prefix_allocate_free(600, repeats=1, num_requests=512, fresh=fresh)
    assert rate > 0
    # Cycling requests: every pair hits its 8 shared blocks and none of its own.
    # Fresh requests: the same, except the very first, which finds nothing cached.
    assert hit == (0.5 if not fresh else (0.5 * 600 - 0.5) / 600)


def test_a_cycle_longer_than_the_old_hash_memo_works() -> None:
    # Hashes are kept with each request now, not in a memo of 4,096 entries.
    _, hit = bench_prefix_allocate_free(10, repeats=1, num_requests=5000)
    assert hit == 0.5


def test_the_printout_says_how_chains_are_hashed() -> None:
    out = prefix_report(300)
    assert "PrefixCaching lookup+alloc+free" in out and "50% of its tokens cached" in out
    assert "hash chains are computed once per request" in out
