"""Sliding-window decode attention (issue 24, part 3): each query reads its sequence's last
``W`` tokens; blocks wholly before them are never loaded (their table entries are -1, as
the hybrid manager leaves them, and their K/V NaN), the tokens before the window in the
first block read are masked. Checked against the fp64 reference, which loops over the
window's tokens only, on both backends and with splits (flash-decoding)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from kernels_helpers import (
    BACKENDS,
    DTYPES,
    REL_TOL,
    device_for,
    kernel_settings,
    make_paged_batch,
    rel_err,
)

from pagedsim import kernels
from pagedsim.kernels.attention import paged_attention_reference


def windowed_batch(case: dict, window: int, device: str):
    """A batch whose blocks wholly before each sequence's window are given back: table
    entry -1, K/V NaN (a kernel that loads them fails)."""
    batch = make_paged_batch(**case, device=device)
    bs = case["block_size"]
    tables = batch.block_tables.cpu()
    for s, n in enumerate(case["seq_lens"]):
        for b in range(max(n - window, 0) // bs):
            block = int(tables[s, b])
            batch.k_cache[block] = float("nan")
            batch.v_cache[block] = float("nan")
            tables[s, b] = -1
    batch.block_tables = tables.to(device)
    return batch


def run_windowed(case: dict, window: int, backend_name: str, num_splits: int | None = None):
    batch = windowed_batch(case, window, device_for(backend_name))
    out = torch.full_like(batch.q, float("nan"))
    kernels.paged_attention(batch.q, batch.k_cache, batch.v_cache, batch.block_tables,
                            batch.seq_lens, out=out, num_splits=num_splits,
                            backend=backend_name, window_tokens=window)
    ref = paged_attention_reference(batch.q, batch.k_cache, batch.v_cache,
                                    batch.block_tables, batch.seq_lens, window_tokens=window)
    return rel_err(out, ref)


@st.composite
def windowed_case(draw):
    block_size = draw(st.sampled_from((1, 2, 4, 16)))
    return dict(
        seq_lens=draw(st.lists(st.integers(1, 60), min_size=1, max_size=3)),
        num_kv_heads=draw(st.sampled_from((1, 2))),
        group=draw(st.sampled_from((1, 4))),
        head_dim=32,
        block_size=block_size,
        dtype=draw(st.sampled_from(DTYPES)),
        seed=draw(st.integers(0, 2**31 - 1)),
    ), draw(st.sampled_from((1, 3, 5, 16, 17, 40)))


@pytest.mark.parametrize("backend_name", BACKENDS)
@kernel_settings(12)
@given(data=windowed_case(), splits=st.sampled_from((None, 1, 2, 4)))
def test_sliding_window_matches_the_fp64_reference(backend_name, data, splits):
    case, window = data
    assert run_windowed(case, window, backend_name, splits) <= REL_TOL[case["dtype"]]


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_a_window_reads_only_its_tokens_at_every_boundary(backend_name):
    """Lengths around the window and block edges, fp32: the window's first token in the
    middle of a block, on its edge, and the whole sequence inside the window."""
    for n in (1, 8, 9, 15, 16, 17, 24, 33):
        case = dict(seq_lens=[n, n + 1, max(n - 1, 1)], num_kv_heads=2, group=2, head_dim=32,
                    block_size=4, dtype=torch.float32, seed=n)
        assert run_windowed(case, 9, backend_name) <= REL_TOL[torch.float32], n


def test_the_reference_with_a_window_is_attention_over_the_last_tokens():
    """The reference against plain attention over a contiguous copy of the last W tokens:
    the window means what it says."""
    case = dict(seq_lens=[21], num_kv_heads=1, group=2, head_dim=32, block_size=4,
                dtype=torch.float32, seed=3)
    batch = make_paged_batch(**case, device="cpu")
    table = batch.block_tables[0].tolist()
    rows = [(table[t // 4], t % 4) for t in range(21 - 7, 21)]
    k = torch.stack([batch.k_cache[b, o, 0] for b, o in rows]).double()  # [7, D]
    v = torch.stack([batch.v_cache[b, o, 0] for b, o in rows]).double()
    q = batch.q[0].double()  # [H, D]
    want = torch.softmax(q @ k.T / 32 ** 0.5, dim=-1) @ v  # [H, D]
    got = paged_attention_reference(batch.q, batch.k_cache, batch.v_cache, batch.block_tables,
                                    batch.seq_lens, window_tokens=7)[0]
    assert torch.allclose(got, want, atol=1e-12)
    full = paged_attention_reference(batch.q, batch.k_cache, batch.v_cache,
                                     batch.block_tables, batch.seq_lens)[0]
    assert not torch.allclose(full, want, atol=1e-3)  # the window changes the answer


def test_a_bad_window_is_refused_in_one_line():
    case = dict(seq_lens=[5], num_kv_heads=1, group=1, head_dim=32, block_size=4,
                dtype=torch.float32, seed=0)
    batch = make_paged_batch(**case, device="cpu")
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="window_tokens"):
            kernels.paged_attention(batch.q, batch.k_cache, batch.v_cache, batch.block_tables,
                                    batch.seq_lens, backend="torch", window_tokens=bad)
    # An entry of -1 inside the window is still an error: only blocks behind it may be.
    batch.block_tables[0, 1] = -1
    with pytest.raises(ValueError, match="out of range"):
        kernels.paged_attention(batch.q, batch.k_cache, batch.v_cache, batch.block_tables,
                                batch.seq_lens, backend="torch", window_tokens=3)
