"""The benchmark script runs (smoke mode); its figures are for humans, not asserted."""

from pagedsim.bench import main


def test_bench_quick_runs(capsys):
    assert main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "append_slot" in out and "scheduler" in out and "lean list+dict" in out


def test_mixed_stream_is_one_stream_every_allocator_can_replay():
    """The stream never frees an unknown id nor runs a 8,192-block pool dry, and the lean
    baseline and the paged manager end in the same place (same tables)."""
    from pagedsim.bench_mixed import LeanAllocator, mixed_stream, replay
    from pagedsim.memory import PagedAllocator

    ops = mixed_stream(20_000)
    kinds = {op for op, _, _ in ops}
    assert kinds == {0, 1, 2} and len(ops) == 20_000
    lean, paged = LeanAllocator(8192, 16), PagedAllocator(8192, 16)
    replay(lean, ops)
    replay(paged, ops)
    paged.check_invariants()
    assert {s: paged.block_table(s) for s in paged.seq_ids()} == lean.tables
