"""The benchmark script runs (smoke mode); its figures are for humans, not asserted."""

import pytest

from pagedsim.bench import main


def test_bench_quick_runs(capsys):
    assert main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "append_slot" in out and "scheduler" in out and "lean list+dict" in out
    scale = next(line for line in out.splitlines() if line.startswith("compare --schemes"))
    assert "1,000 requests" in scale and "requests/s" in scale and "peak memory" in scale


def test_the_scale_figure_measures_a_fresh_process():
    """The scale figure's child runs the command and reports its own peak memory."""
    from pagedsim.bench_scale import bench_scale, compare_argv

    assert compare_argv(50)[:5] == ["compare", "--schemes", "paged", "--num-requests", "50"]
    r = bench_scale(50)
    assert r["requests"] == 50 and r["seconds"] > 0
    assert 20 * 2**20 < r["peak_bytes"] < 2**31  # a Python process with numpy and pandas
    assert r["requests_per_s"] == r["requests"] / r["seconds"]
    # the simulated server's pace: every request finished within the makespan
    assert r["served_per_s"] == pytest.approx(r["requests"] / r["makespan_s"])


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


def test_mixed_stream_free_rate_sets_the_turnover():
    """A higher chance of a free gives more frees and admissions (fewer appends a
    sequence), still a stream the pool replays; the rate is checked, and replay leaves
    garbage collection as it found it."""
    import gc

    from pagedsim.bench_mixed import mixed_stream, replay
    from pagedsim.memory import PagedAllocator

    def allocates(ops):
        return sum(op == 0 for op, _, _ in ops)

    slow, fast = mixed_stream(20_000), mixed_stream(20_000, free_rate=0.02)
    assert allocates(fast) > 2 * allocates(slow)
    paged = PagedAllocator(8192, 16)
    assert gc.isenabled()
    replay(paged, fast)
    assert gc.isenabled()
    paged.check_invariants()
    for bad in (0.0, 0.5, -1.0):
        with pytest.raises(ValueError, match="free_rate must be in"):
            mixed_stream(100, free_rate=bad)
