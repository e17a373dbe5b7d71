"""paged_attention against the fp64 reference, over shapes hypothesis picks."""

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
from pagedsim.kernels.attention import MAX_SPLITS, MIN_TOKENS_PER_SPLIT, choose_num_splits

BLOCK_SIZES = (1, 2, 4, 8, 16, 32)
GROUPS = (1, 2, 4, 8)


@st.composite
def seq_lens_for(draw, block_size: int) -> list[int]:
    """1-4 lengths, mixing 1, exact multiples of the block size, and anything up to 40."""
    one_len = st.one_of(
        st.just(1),
        st.integers(1, max(1, 40 // block_size)).map(lambda k: k * block_size),
        st.integers(1, 40),
    )
    return draw(st.lists(one_len, min_size=1, max_size=4))


@st.composite
def attention_case(draw):
    block_size = draw(st.sampled_from(BLOCK_SIZES))
    return dict(
        seq_lens=draw(seq_lens_for(block_size)),
        num_kv_heads=draw(st.sampled_from((1, 2))),
        group=draw(st.sampled_from(GROUPS)),
        head_dim=draw(st.sampled_from((32, 64))),
        block_size=block_size,
        dtype=draw(st.sampled_from(DTYPES)),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


def run_and_compare(case: dict, backend_name: str, num_splits: int | None = None) -> float:
    batch = make_paged_batch(**case, device=device_for(backend_name))
    out = torch.full_like(batch.q, float("nan"))  # poisoned: any element left unwritten fails
    kernels.paged_attention(
        batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens,
        out=out, num_splits=num_splits, backend=backend_name,
    )
    ref = kernels.paged_attention_reference(
        batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens
    )
    assert not out.isnan().any(), "the kernel left output elements unwritten"
    return rel_err(out, ref)


@pytest.mark.parametrize("backend_name", BACKENDS)
@kernel_settings(25)
@given(case=attention_case(), num_splits=st.sampled_from((None, 1, 2, 3, 4)))
def test_matches_reference(backend_name: str, case: dict, num_splits: int | None) -> None:
    err = run_and_compare(case, backend_name, num_splits)
    assert err < REL_TOL[case["dtype"]], (case, num_splits, err)


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize(
    ("head_dim", "block_size", "seq_lens"),
    [
        (128, 16, [1, 33]),
        (256, 8, [17, 2]),
        (32, 256, [256, 3]),  # the largest block size, one full block
        (32, 3, [1, 7, 9]),  # a block size that is not a power of two
        (64, 1, [50]),  # one slot per block: every token in a different block
    ],
)
def test_edge_shapes(backend_name: str, head_dim: int, block_size: int, seq_lens) -> None:
    for dtype in DTYPES:
        case = dict(seq_lens=seq_lens, num_kv_heads=2, group=4, head_dim=head_dim,
                    block_size=block_size, dtype=dtype, seed=7)
        assert run_and_compare(case, backend_name) < REL_TOL[dtype]


@pytest.mark.skipif("triton" not in BACKENDS, reason="triton is not installed")
@pytest.mark.parametrize("num_splits", [2, 3, 5, 8])
def test_splits_cover_long_sequences(num_splits: int) -> None:
    # 150 tokens over several splits of several tiles each, with sequences of very
    # different lengths, so that some splits are empty for the short one.
    case = dict(seq_lens=[150, 5], num_kv_heads=2, group=2, head_dim=32, block_size=4,
                dtype=torch.float32, seed=num_splits)
    assert run_and_compare(case, "triton", num_splits) < REL_TOL[torch.float32]


def test_split_and_unsplit_agree_closely() -> None:
    if "triton" not in BACKENDS:
        pytest.skip("triton is not installed")
    batch = make_paged_batch([97, 31], 1, 4, 32, 8, torch.float32, seed=3)
    args = (batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens)
    one = kernels.paged_attention(*args, num_splits=1, backend="triton")
    four = kernels.paged_attention(*args, num_splits=4, backend="triton")
    assert rel_err(four, one) < 1e-6


def test_custom_scale() -> None:
    batch = make_paged_batch([9, 20], 2, 2, 32, 4, torch.float32, seed=11)
    args = (batch.q, batch.k_cache, batch.v_cache, batch.block_tables, batch.seq_lens)
    ref = kernels.paged_attention_reference(*args, scale=0.3)
    for name in BACKENDS:
        assert rel_err(kernels.paged_attention(*args, scale=0.3, backend=name), ref) < 1e-5
    # and the scale really matters (the check above could not pass with the default)
    assert rel_err(kernels.paged_attention_reference(*args), ref) > 1e-3


class TestSplitHeuristic:
    def test_cpu_never_splits(self) -> None:
        assert choose_num_splits(1, 1, 1 << 20, num_sms=None) == 1

    def test_full_gpu_does_not_split(self) -> None:
        assert choose_num_splits(64, 8, 32768, num_sms=132) == 1

    def test_few_long_sequences_split(self) -> None:
        n = choose_num_splits(1, 8, 32768, num_sms=132)
        assert 1 < n <= MAX_SPLITS and n & (n - 1) == 0
        assert 32768 // n >= MIN_TOKENS_PER_SPLIT

    def test_short_context_does_not_split(self) -> None:
        assert choose_num_splits(1, 8, MIN_TOKENS_PER_SPLIT, num_sms=132) == 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_offsets_past_2_to_the_31() -> None:
    # A cache of more than 2^31 elements; the sequence's blocks are at the far end, so
    # 32-bit offset arithmetic would wrap and read the wrong memory.
    block_size, kv_heads, head_dim = 16, 8, 128
    per_block = block_size * kv_heads * head_dim
    num_blocks = (1 << 31) // per_block + 64
    free_bytes, _ = torch.cuda.mem_get_info()
    if 2 * num_blocks * per_block * 2 > 0.8 * free_bytes:
        pytest.skip("not enough GPU memory for a 2^31-element cache")
    k_cache = torch.randn(num_blocks, block_size, kv_heads, head_dim, dtype=torch.float16,
                          device="cuda")
    v_cache = torch.randn_like(k_cache)
    tables = torch.arange(num_blocks - 8, num_blocks, dtype=torch.int32, device="cuda")[None]
    seq_lens = torch.tensor([8 * block_size], dtype=torch.int32, device="cuda")
    q = torch.randn(1, kv_heads * 4, head_dim, dtype=torch.float16, device="cuda")
    out = kernels.paged_attention(q, k_cache, v_cache, tables, seq_lens)
    ref = kernels.paged_attention_reference(q, k_cache, v_cache, tables, seq_lens)
    assert rel_err(out, ref) < REL_TOL[torch.float16]
