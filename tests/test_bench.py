"""The benchmark script runs (smoke mode); its figures are for humans, not asserted."""

from pagedsim.bench import main


def test_bench_quick_runs(capsys):
    assert main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "append_slot" in out and "scheduler" in out
