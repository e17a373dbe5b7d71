"""Measured versus simulated (issue: the comparison the package exists for).

Runs on the CPU with the torch backend (the Triton interpreter is correct but takes
about a second per step; the kernels' own tests cover it)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

import pagedsim  # noqa: E402
from pagedsim.kernels.measure import MeasureConfig, main, measure_scheme  # noqa: E402


def small(**kw) -> MeasureConfig:
    base = dict(num_requests=10, n=3, num_blocks=40, block_size=4, backend="torch")
    base.update(kw)
    return MeasureConfig(**base)


def test_paged_measured_token_slots_equal_simulated_at_every_step():
    m = measure_scheme(small(), "paged", progress=False)
    f = m.frame
    # The run exercised what could go wrong: sharing, copy-on-write and preemption.
    assert f["cow_copies"].sum() > 0 and f["preemptions"].sum() > 0
    assert (f["meas_token_slots"] == f["sim_token"]).all()
    assert m.max_token_gap_slots == 0


def test_paged_swap_preemption_keeps_measurement_exact():
    m = measure_scheme(small(preemption="swap"), "paged", progress=False)
    assert m.frame["preemptions"].sum() > 0
    assert m.max_token_gap_slots == 0


@pytest.mark.parametrize("scheme", ["contiguous-oracle", "contiguous-max-first-fit"])
def test_contiguous_measured_bytes_equal_simulated_allocated_bytes(scheme):
    m = measure_scheme(small(n=1, num_requests=8), scheme, progress=False)
    f = m.frame
    allocated = f[["sim_token", "sim_reserved", "sim_internal_frag"]].sum(axis=1)
    assert (f["meas_region_bytes"] == allocated * m.bytes_per_slot).all()
    assert (f["meas_token_slots"] == f["sim_token"]).all()


def test_broken_accounting_is_caught():
    """A plausible bug: the empty tail of each sequence's private last block is counted
    as token slots (moved out of reserved/internal, so the five parts still sum to the
    pool). The account looks healthy; the measurement exposes it."""

    def last_block_counted_full(alloc: pagedsim.PagedAllocator) -> None:
        honest = alloc.usage
        bs = alloc.block_size

        def usage(final_lens=None):
            u = honest(final_lens)
            tails = sum((bs - alloc.seq_len(s) % bs) % bs for s in alloc.seq_ids()
                        if alloc.block_table(s)
                        and alloc.ref_count(alloc.block_table(s)[-1]) == 1)
            from_reserved = min(tails, u.reserved_slots)
            return pagedsim.SlotUsage(u.token_slots + tails, u.reserved_slots - from_reserved,
                                      u.internal_frag_slots - (tails - from_reserved),
                                      u.physical_blocks, u.logical_blocks)

        alloc.usage = usage

    m = measure_scheme(small(), "paged", progress=False,
                       corrupt_accounting=last_block_counted_full)
    assert m.max_token_gap_slots > 0
    assert (m.frame["token_gap_slots"] < 0).any()  # the account claims tokens nobody wrote


def test_double_counted_sharing_breaks_the_partition():
    """Counting a shared block once per sharer claims more slots than the pool has."""

    def count_shared_twice(alloc: pagedsim.PagedAllocator) -> None:
        honest = alloc.usage

        def usage(final_lens=None):
            u = honest(final_lens)
            logical = sum(alloc.seq_len(s) for s in alloc.seq_ids())
            return pagedsim.SlotUsage(logical, u.reserved_slots, u.internal_frag_slots,
                                      u.physical_blocks, u.logical_blocks)

        alloc.usage = usage

    with pytest.raises(AssertionError, match="do not partition"):
        measure_scheme(small(), "paged", progress=False, corrupt_accounting=count_shared_twice)


def test_cli_writes_csv_and_figure(tmp_path, capsys):
    rc = main(["--schemes", "paged", "--num-requests", "4", "--backend", "torch",
               "--out", str(tmp_path), "--quiet"])
    assert rc == 0
    assert (tmp_path / "measured_vs_simulated.csv").stat().st_size > 0
    assert (tmp_path / "measured_vs_simulated.png").stat().st_size > 0


def test_cli_bad_input_is_one_line(capsys):
    assert main(["--schemes", "paged,nonsense", "--backend", "torch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nonsense" in err[0]


def test_every_request_rejected_is_reported_not_a_nan_traceback(tmp_path, capsys):
    """Was: 'error: cannot convert float NaN to integer' (no step to take a max over),
    the rejections unreported. A pool of 2 blocks of 4 slots fits no request."""
    rc = main(["--schemes", "paged,contiguous-oracle", "--num-requests", "3", "--num-blocks",
               "2", "--backend", "torch", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.count("3 of 3 requests rejected, e.g. request 0") == 2
    assert "does not fit the empty pool of 8 slots" in out
    m = measure_scheme(small(num_blocks=2, num_requests=3), "paged", progress=False)
    assert len(m.rejections) == 3 and m.max_token_gap_slots == 0


@pytest.mark.parametrize("argv, flag", [
    (["--num-requests", "0"], "--num-requests"),
    (["--num-requests", "abc"], "--num-requests"),
    (["--schemes", "paged,paged"], "--schemes"),
    (["--out", "/proc/pagedsim-no-such/x"], "--out"),
    # Were: the sizes named no flag (--hidden 0: "hidden_size must be ...").
    (["--hidden", "0"], "--hidden"),
    (["--max-batched-tokens", "0"], "--max-batched-tokens"),
    # Were: a traceback (--vocab: a RuntimeError from the allocator, exit 1), the system's
    # out-of-memory kill after 90 s (--num-blocks 10**9: 24 GB), 17 GB and 71 s
    # (--hidden 10**6), a run past minutes (--layers 100000).
    (["--vocab", "1000000000"], "--vocab"),
    (["--num-blocks", "1000000000"], "--num-blocks"),
    (["--hidden", "1000000"], "--hidden"),
    (["--layers", "100000"], "--layers"),
    (["--intermediate", "1000000000"], "--intermediate"),
    (["--vocab", "262144", "--hidden", "16384"], "--vocab"),  # each size allowed, too big
])
def test_cli_errors_are_one_line_naming_the_flag(capsys, argv, flag):
    assert main([*argv, "--backend", "torch"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"error: argument {flag}:" in err[0], err


def test_the_memory_a_run_builds_up_front_is_bounded() -> None:
    """The weights and the KV cache are counted before anything is built."""
    from pagedsim.kernels.measure_config import memory_limit_bytes

    cfg = MeasureConfig(num_blocks=48, block_size=4)
    m = cfg.model  # 2 layers, 2 KV heads of 32, float32: 2 x 2 x 32 x 4 bytes a slot-layer
    assert cfg.kv_cache_bytes() == 48 * 4 * m.num_layers * 2 * m.num_kv_heads * m.head_dim * 4
    parts = m.weights_bytes_by_part()
    assert parts["vocab_size"] == 2 * m.vocab_size * m.hidden_size * 4
    assert parts["intermediate_size"] == m.num_layers * 3 * m.hidden_size * \
        m.intermediate_size * 4
    too_many = memory_limit_bytes("cpu") // (cfg.kv_cache_bytes() // 48) + 1
    with pytest.raises(ValueError, match=f"num_blocks {too_many:,}: the KV cache"):
        MeasureConfig(num_blocks=too_many, block_size=4)
