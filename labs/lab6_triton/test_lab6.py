"""Graders for lab 6 (the Triton paged-attention decode kernel).

Triton-Puzzles style: every check runs your kernel (in Triton's CPU interpreter without a
GPU) on fresh inputs and compares it with a torch spec written below, in fp64. The inputs
are built to expose the classic bugs: block tables in scrambled order and padded with -1,
context lengths that end inside a block, and NaN in every slot no sequence owns (the
unused blocks, the tails of last blocks, and guard memory on both sides of the cache), so
that reading a slot you should not read, or a wrong block, shows up as NaN or a wrong
number. Tests import only ``adapters``.
"""

from __future__ import annotations

import math

import adapters
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

DEVICE = adapters.DEVICE
NAN = float("nan")
# fp32 kernel against an fp64 spec: the sums here are over at most ~100 terms.
ATOL, RTOL = 2e-5, 1e-5
# Few examples, the same ones every run (a grade must not depend on luck), and no
# shrinking: a failing kernel would be rerun dozens of times in the interpreter.
SETTINGS = settings(max_examples=4, deadline=None, derandomize=True, database=None,
                    phases=(Phase.explicit, Phase.generate),
                    suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------- inputs


def _guarded(shape: tuple[int, ...], fill: float) -> torch.Tensor:
    """A contiguous tensor of ``shape`` lying inside a larger NaN-filled buffer: reads a
    little before or after it (a -1 block, a wrong stride) find NaN, not random memory."""
    n = math.prod(shape)
    guard = n  # at least a block: a -1 block id reads guard NaN
    buf = torch.full((guard + n + guard,), NAN, dtype=torch.float32, device=DEVICE)
    view = buf[guard:guard + n].view(shape)
    view.fill_(fill)
    return view


def make_case(seed: int, seq_lens: list[int], block_size: int, num_kv_heads: int,
              group: int, head_dim: int = 16, spare_blocks: int = 2,
              spare_columns: int = 1) -> dict:
    """A paged cache holding ``len(seq_lens)`` sequences in scrambled blocks.

    Every slot no token owns is NaN; each table row is padded with -1 up to the longest
    sequence's blocks plus ``spare_columns``; ``spare_blocks`` blocks belong to nobody.
    """
    gen = torch.Generator().manual_seed(seed)
    blocks_per_seq = [-(-n // block_size) for n in seq_lens]
    num_blocks = sum(blocks_per_seq) + spare_blocks
    width = max(blocks_per_seq) + spare_columns
    order = torch.randperm(num_blocks, generator=gen).tolist()  # scrambled physical blocks
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache, v_cache = _guarded(shape, NAN), _guarded(shape, NAN)
    tables = torch.full((len(seq_lens), width), -1, dtype=torch.int32)
    for s, (n, nb) in enumerate(zip(seq_lens, blocks_per_seq, strict=True)):
        row, order = order[:nb], order[nb:]
        tables[s, :nb] = torch.tensor(row, dtype=torch.int32)
        t = torch.arange(n)
        blocks, offsets = torch.tensor(row)[t // block_size], t % block_size
        k_cache[blocks, offsets] = torch.randn(n, num_kv_heads, head_dim, generator=gen
                                               ).to(DEVICE)
        v_cache[blocks, offsets] = torch.randn(n, num_kv_heads, head_dim, generator=gen
                                               ).to(DEVICE)
    q = torch.randn(len(seq_lens), num_kv_heads * group, head_dim, generator=gen).to(DEVICE)
    return {"q": q, "k_cache": k_cache, "v_cache": v_cache,
            "block_tables": tables.to(DEVICE),
            "seq_lens": torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)}


# --------------------------------------------------------------------------- torch specs


def spec_slots(block_tables: torch.Tensor, seq_lens: torch.Tensor, block_size: int
               ) -> torch.Tensor:
    """int64 ``[S, MB * BS]``: token t's slot ``table[s, t // BS] * BS + t % BS``, -1 past the
    end."""
    tables = block_tables.cpu().long()
    t = torch.arange(tables.shape[1] * block_size)
    slots = tables[:, t // block_size] * block_size + t % block_size
    return torch.where(t[None, :] < seq_lens.cpu().long()[:, None], slots, -1)


def padded_slots(block_tables: torch.Tensor, block_size: int) -> torch.Tensor:
    """The slot every table position names, padding included (-1 entries give negative
    slots): what an unmasked lookup would read."""
    tables = block_tables.cpu().long()
    t = torch.arange(tables.shape[1] * block_size)
    return tables[:, t // block_size] * block_size + t % block_size


def spec_attention(q, k_cache, v_cache, block_tables, seq_lens, scale=None) -> torch.Tensor:
    """fp64 ``[S, H, D]``: per sequence and query head h, softmax over the sequence's tokens
    of KV head h // G, looked up one token at a time."""
    q, k_cache, v_cache = q.double().cpu(), k_cache.double().cpu(), v_cache.double().cpu()
    num_seqs, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    scale = 1 / math.sqrt(head_dim) if scale is None else scale
    out = torch.empty(num_seqs, num_heads, head_dim, dtype=torch.float64)
    for s in range(num_seqs):
        t = torch.arange(int(seq_lens[s]))
        blocks = block_tables[s].cpu().long()[t // block_size]
        k, v = k_cache[blocks, t % block_size], v_cache[blocks, t % block_size]  # [n, KVH, D]
        for h in range(num_heads):
            weights = torch.softmax(k[:, h // group] @ q[s, h] * scale, dim=0)
            out[s, h] = weights @ v[:, h // group]
    return out


def assert_close(got: torch.Tensor, want: torch.Tensor) -> None:
    got = got.double().cpu()
    assert not got.isnan().any(), f"NaN in the output at {got.isnan().nonzero()[:4].tolist()}"
    err = (got - want).abs().max().item()
    assert torch.allclose(got, want, atol=ATOL, rtol=RTOL), f"max abs error {err:.3g}"


def run_attention(case: dict, **kw) -> torch.Tensor:
    return adapters.paged_attention(case["q"], case["k_cache"], case["v_cache"],
                                    case["block_tables"], case["seq_lens"], **kw)


def check_attention(case: dict, scale=None, **kw) -> None:
    want = spec_attention(case["q"], case["k_cache"], case["v_cache"], case["block_tables"],
                          case["seq_lens"], scale)
    assert_close(run_attention(case, scale=scale, **kw), want)


configs = st.fixed_dictionaries({
    "seed": st.integers(0, 2**16),
    "seq_lens": st.lists(st.integers(1, 23), min_size=1, max_size=3),
    "block_size": st.sampled_from([1, 3, 4, 5, 8]),
    "num_kv_heads": st.integers(1, 2),
    "group": st.integers(1, 3),
})


# --------------------------------------------------------------------------- 6.1


@pytest.mark.lab6_1
def test_slots_worked_example():
    # Sequence 0: 10 tokens in blocks 5, 2, 7 (the third one holds 2 tokens); sequence 1:
    # 5 tokens in blocks 1, 3. Block size 4: slot = block * 4 + offset.
    tables = torch.tensor([[5, 2, 7, -1], [1, 3, -1, -1]], dtype=torch.int32, device=DEVICE)
    lens = torch.tensor([10, 5], dtype=torch.int32, device=DEVICE)
    got = adapters.token_slots(tables, lens, block_size=4).cpu().tolist()
    pad = [-1] * 6
    assert got[0] == [20, 21, 22, 23, 8, 9, 10, 11, 28, 29] + pad
    assert got[1] == [4, 5, 6, 7, 12] + pad + [-1] * 5


@pytest.mark.lab6_1
def test_slots_block_size_three():
    # Blocks of 3 (no power of two): token 4 is offset 1 of logical block 1 -> block 0.
    tables = torch.tensor([[6, 0, 2]], dtype=torch.int32, device=DEVICE)
    lens = torch.tensor([8], dtype=torch.int32, device=DEVICE)
    got = adapters.token_slots(tables, lens, block_size=3, tile_n=4).cpu().tolist()
    assert got == [[18, 19, 20, 0, 1, 2, 6, 7, -1]]


@pytest.mark.lab6_1
@SETTINGS
@given(cfg=configs, tile_n=st.sampled_from([4, 8, 16]))
def test_slots_match_spec_on_scrambled_tables(cfg, tile_n):
    case = make_case(**cfg)
    got = adapters.token_slots(case["block_tables"], case["seq_lens"], cfg["block_size"],
                               tile_n=tile_n)
    want = spec_slots(case["block_tables"], case["seq_lens"], cfg["block_size"])
    assert got.cpu().tolist() == want.tolist()


# --------------------------------------------------------------------------- 6.2


@pytest.mark.lab6_2
def test_rows_worked_example():
    # Two blocks of 2 slots, 2 kv heads, D = 4; element [b, o, j, d] = 1000b + 100o + 10j + d.
    b, o, j, d = torch.meshgrid(*(torch.arange(n) for n in (2, 2, 2, 4)), indexing="ij")
    cache = _guarded((2, 2, 2, 4), 0.0)
    cache.copy_((1000 * b + 100 * o + 10 * j + d).float())
    cache[0, 1] = NAN  # the last block's unwritten tail
    # One sequence of 3 tokens: block 1 then block 0; token 3 (past the end) would be slot 1.
    slots = torch.tensor([[2, 3, 0, 1]], dtype=torch.int64, device=DEVICE)
    lens = torch.tensor([3], dtype=torch.int32, device=DEVICE)
    got = adapters.load_rows(cache, slots, lens, tile_n=4).cpu()
    assert got[0, 0, 1].tolist() == [1010.0, 1011.0, 1012.0, 1013.0]  # slot 2 = block 1, 0
    assert got[0, 1, 0].tolist() == [1100.0, 1101.0, 1102.0, 1103.0]  # slot 3 = block 1, 1
    assert got[0, 2, 1].tolist() == [10.0, 11.0, 12.0, 13.0]  # slot 0 = block 0, 0
    assert got[0, 3].tolist() == [[0.0] * 4] * 2, "a token past the end must read as 0.0"


@pytest.mark.lab6_2
@SETTINGS
@given(cfg=configs)
def test_rows_copy_owned_slots_and_zero_the_rest(cfg):
    case = make_case(**cfg)
    bs = cfg["block_size"]
    slots = padded_slots(case["block_tables"], bs)  # padding -> negative slots -> guard NaN
    for name in ("k_cache", "v_cache"):
        cache = case[name]
        got = adapters.load_rows(cache, slots.to(DEVICE), case["seq_lens"]).cpu()
        assert not got.isnan().any(), "read a slot past the end of a sequence (NaN)"
        flat = cache.reshape(-1, cache.shape[2], cache.shape[3]).cpu()
        for s, n in enumerate(case["seq_lens"].tolist()):
            assert torch.equal(got[s, :n], flat[slots[s, :n]]), f"sequence {s}: wrong rows"
            assert not got[s, n:].any(), f"sequence {s}: rows past its end are not 0.0"


# --------------------------------------------------------------------------- 6.3


@pytest.mark.lab6_3
def test_group_queries_worked_example():
    # 6 query heads on 2 KV heads: G = 3, padded to 4. KV head 1 serves query heads 3, 4, 5.
    q = torch.arange(2 * 6 * 16, dtype=torch.float32, device=DEVICE).reshape(2, 6, 16)
    tiles, heads, valid = adapters.load_group_queries(q, num_kv_heads=2)
    assert heads[:, :3].cpu().tolist() == [[0, 1, 2], [3, 4, 5]]
    assert valid.cpu().tolist() == [[True, True, True, False], [True, True, True, False]]
    assert torch.equal(tiles[1, 1, :3].cpu(), q[1, 3:6].cpu())
    assert not tiles[:, :, 3].any(), "padding rows must be 0.0"


@pytest.mark.lab6_3
@pytest.mark.parametrize("num_heads, num_kv_heads", [(4, 4), (4, 1), (8, 2), (6, 3)])
def test_group_queries_every_layout(num_heads, num_kv_heads):
    group = num_heads // num_kv_heads
    q = torch.randn(3, num_heads, 32, generator=torch.Generator().manual_seed(group)).to(DEVICE)
    tiles, heads, valid = adapters.load_group_queries(q, num_kv_heads)
    for j in range(num_kv_heads):
        real = valid[j].cpu()
        assert real.sum() == group, f"KV head {j}: {int(real.sum())} real rows, want {group}"
        assert heads[j][real].cpu().tolist() == [h for h in range(num_heads)
                                                 if h // group == j], f"KV head {j}"
        assert torch.equal(tiles[:, j, :group].cpu(), q[:, j * group:(j + 1) * group].cpu())


# --------------------------------------------------------------------------- 6.4


def _ramp_case(seq_len: int, c: float) -> dict:
    """One sequence, one head, D = 16, blocks of 4 in scrambled order: key t has first
    coordinate t (others 0), value t is t in every coordinate, q = c * e_0."""
    case = make_case(0, [seq_len], block_size=4, num_kv_heads=1, group=1, spare_blocks=3)
    bs, tables = 4, case["block_tables"].cpu().long()
    for t in range(seq_len):
        block, offset = int(tables[0, t // bs]), t % bs
        case["k_cache"][block, offset, 0] = 0.0
        case["k_cache"][block, offset, 0, 0] = float(t)
        case["v_cache"][block, offset, 0] = float(t)
    case["q"].zero_()
    case["q"][0, 0, 0] = c
    return case


@pytest.mark.lab6_4
@pytest.mark.parametrize("c", [0.0, 0.5, 3.0])
def test_attention_closed_form(c):
    # Scores c * t with scale 1: the softmax weights are exp(c t) / sum, so every output
    # coordinate is sum t exp(c t) / sum exp(c t) (the plain mean, 6.5, when c = 0).
    n = 14
    got = run_attention(_ramp_case(n, c), scale=1.0).cpu()
    w = [math.exp(c * t - c * (n - 1)) for t in range(n)]
    want = sum(t * x for t, x in enumerate(w)) / sum(w)
    assert torch.allclose(got[0, 0].double(), torch.full((16,), want, dtype=torch.float64),
                          atol=ATOL, rtol=RTOL), f"got {got[0, 0, 0].item()}, want {want}"


@pytest.mark.lab6_4
@pytest.mark.parametrize("kw", [
    dict(seq_lens=[13, 1, 7], block_size=4, num_kv_heads=2, group=1),  # MHA
    dict(seq_lens=[30, 9], block_size=5, num_kv_heads=2, group=3),  # GQA, G padded to 4
    dict(seq_lens=[17, 32], block_size=1, num_kv_heads=1, group=4),  # MQA, a block per token
    dict(seq_lens=[40], block_size=8, num_kv_heads=2, group=2, head_dim=32),
], ids=["mha", "gqa-3", "mqa-bs1", "d32"])
def test_attention_matches_spec(kw):
    check_attention(make_case(1, **kw))


@pytest.mark.lab6_4
def test_attention_online_softmax_rising_scores():
    # Scores rise token after token (up to ~400 in log2 units: exp2 of that overflows fp32
    # without the running max), so the max grows in every tile and what was summed before
    # must be rescaled each time.
    case = make_case(2, [29, 21], block_size=4, num_kv_heads=1, group=2)
    tables = case["block_tables"].cpu().long()
    for s, n in enumerate([29, 21]):
        for t in range(n):
            case["k_cache"][int(tables[s, t // 4]), t % 4, 0, 0] = 10.0 * t
    case["q"][:, :, 0] = torch.tensor([[1.0, 0.3], [1.0, 0.1]], device=DEVICE)
    check_attention(case, scale=1.0)


@pytest.mark.lab6_4
@SETTINGS
@given(cfg=configs, tile_n=st.sampled_from([2, 4, 8]))
def test_attention_matches_spec_random(cfg, tile_n):
    check_attention(make_case(**cfg), tile_n=tile_n)


# --------------------------------------------------------------------------- 6.5

SPLIT_K_CONCEPT = ("split-K: each split's partial output must be weighted by 2 ** (its lse - "
                   "the largest lse), its share of the softmax sum, before the merge divides by "
                   "the weights' total; an average of the splits' outputs, or an empty split "
                   "given weight, mixes them wrongly")


def check_split_k(case: dict, **kw) -> None:
    """check_attention with several splits, naming the merge when only the merge is wrong
    (the same case with one split matches the spec)."""
    try:
        check_attention(case, **kw)
    except AssertionError as err:
        if kw.get("num_splits", 1) > 1:
            try:
                check_attention(case, **{**kw, "num_splits": 1})
            except AssertionError:
                raise err from None  # one split is wrong too: not the merge (task 6.4)
            raise AssertionError(f"{err}; one split matches the spec, so the merge is "
                                 f"wrong: {SPLIT_K_CONCEPT}") from None
        raise


@pytest.mark.lab6_5
@pytest.mark.parametrize("num_splits", [2, 3])
def test_split_k_matches_spec(num_splits):
    check_split_k(make_case(3, [37, 12, 25], block_size=4, num_kv_heads=2, group=2),
                  num_splits=num_splits)


@pytest.mark.lab6_5
def test_split_k_with_empty_splits():
    # A table 5 blocks x 8 = 40 tokens wide, 8 splits of two 4-token tiles each: the 3-token
    # sequence leaves 7 of its splits empty, and the 30-token one the last 4.
    case = make_case(4, [30, 3], block_size=8, num_kv_heads=1, group=2)
    check_split_k(case, num_splits=8, tile_n=4)
    one = run_attention(case, num_splits=1, tile_n=4).cpu()
    assert torch.allclose(run_attention(case, num_splits=8, tile_n=4).cpu(), one, atol=ATOL)
