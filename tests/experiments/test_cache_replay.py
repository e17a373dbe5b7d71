"""Prompt content, chained block hashes, the Mooncake loader and the cache replay."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from pagedsim import Request, load_trace
from pagedsim.cli import main
from pagedsim.experiments.cache_replay import replay
from pagedsim.workloads.prompts import block_hashes, prompt_tokens

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "mooncake_sample.jsonl"
FULL = Path(__file__).resolve().parents[3] / "shared" / "data" / "mooncake" / \
    "conversation_trace.jsonl"


def req(rid: int, pieces: tuple[int, ...], prompt_len: int, piece_tokens: int = 4) -> Request:
    return Request(rid, float(rid), prompt_len, 1, prompt_pieces=pieces,
                   prompt_piece_tokens=piece_tokens)


def test_equal_pieces_mean_equal_tokens_and_equal_hash_prefixes():
    a, b = req(0, (7, 8, 9), 12), req(1, (7, 8, 5), 11)
    ta, tb = prompt_tokens(a), prompt_tokens(b)
    assert (ta[:8] == tb[:8]).all() and not (ta[8:11] == tb[8:11]).all()
    ha, hb = block_hashes(a, 2), block_hashes(b, 2)
    assert len(ha) == 6 and len(hb) == 5  # full blocks only
    assert ha[:4] == hb[:4] and ha[4] != hb[4]  # the chain splits where the content does
    # A block that straddles pieces, and a chain that depends on everything before it.
    assert block_hashes(req(2, (1, 2), 8), 3)[1] != block_hashes(req(3, (9, 2), 8), 3)[1]
    assert block_hashes(req(4, (1, 2), 8), 8) == block_hashes(req(5, (1, 2), 8), 8)


def test_prompts_without_pieces_share_nothing():
    assert not set(block_hashes(Request(0, 0.0, 64, 1), 16)) & set(
        block_hashes(Request(1, 0.0, 64, 1), 16))


def test_replay_hits_whole_blocks_and_keeps_the_last_token_rule():
    reqs = [req(0, (1, 2, 3), 12), req(1, (1, 2, 4), 12), req(2, (1, 2), 8)]
    r = replay(reqs, block_size=4)
    # Request 1 hits pieces 1 and 2 (8 tokens); request 2's prompt is exactly 2 cached
    # blocks, but its last token must be computed: it hits only the first block.
    assert (r.queries, r.hits) == (32, 8 + 4)
    assert r.hit_rate == pytest.approx(12 / 32)


def test_lru_evicts_a_chain_from_its_tail():
    reqs = [req(0, (1, 2, 3), 12), req(1, (5,), 4), req(2, (1, 2, 6), 12)]
    # Room for 4 blocks: after request 1, the oldest block is request 0's tail (piece 3),
    # which goes; its head (1, 2) stays reachable for request 2.
    r = replay(reqs, block_size=4, capacity_tokens=16)
    assert r.evictions >= 1 and r.hits == 8


@pytest.mark.parametrize("bad", [-1, math.nan, "10", True])
def test_bad_capacity_is_named(bad):
    with pytest.raises(ValueError, match="capacity_tokens"):
        replay([], 16, bad)


def test_mooncake_sample_loads_with_pieces_in_seconds():
    trace = load_trace(SAMPLE)
    assert trace.schema == "mooncake" and len(trace.requests) == 300
    first = trace.requests[0]
    assert first.prompt_pieces[:3] == (0, 1, 2) and first.prompt_piece_tokens == 512
    raw = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    assert [r.arrival_s for r in trace.requests] == [o["timestamp"] / 1000 for o in raw]
    assert [r.prompt_len for r in trace.requests] == [o["input_length"] for o in raw]


def test_cache_replay_cli_json(capsys):
    assert main(["cache-replay", str(SAMPLE), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["queries"] == sum(r.prompt_len for r in load_trace(SAMPLE).requests)
    assert 0 < out["hit_rate"] < 1 and out["hits"] % 512 == 0


@pytest.mark.skipif(not FULL.exists(), reason=f"the full Mooncake trace is not at {FULL}")
def test_full_mooncake_trace_matches_the_paper_shape():
    """Table 2: a cache ratio of about 40%; Figure 9: well under half of it at 3M tokens
    of capacity, nearly all of it at 50M."""
    requests = load_trace(FULL).requests
    rates = {cap: replay(requests, 512, cap).hit_rate for cap in (math.inf, 3e6, 10e6, 50e6)}
    unbounded = rates[math.inf]
    assert 0.30 <= unbounded <= 0.45
    assert rates[3e6] < unbounded / 2
    assert rates[50e6] >= 0.95 * unbounded
    # The README quotes these numbers: they must be the ones this code computes.
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    quoted = re.search(r"hit rate of ([\d.]+)% with unbounded capacity.*?([\d.]+)% at 3M "
                       r"tokens, ([\d.]+)% at 10M and ([\d.]+)% at 50M", readme, re.S)
    assert quoted, "README's cache-replay sentence changed shape"
    assert [float(x) for x in quoted.groups()] == [
        round(100 * rates[c], 1) for c in (math.inf, 3e6, 10e6, 50e6)]
