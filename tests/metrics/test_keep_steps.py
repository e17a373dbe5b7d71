"""Which per-step rows a run keeps (pagedsim.metrics.step_keep) and ``--keep-steps``."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagedsim.cli import main
from pagedsim.metrics.step_keep import KeepSteps, StepKeeper, parse_keep_steps


def _rows(n: int, dt: float = 0.25) -> list[tuple]:
    """Rows (index, time_s) of ``n`` steps of ``dt`` seconds each."""
    return [(i, i * dt) for i in range(n)]


def _keep(keep: KeepSteps, rows: list[tuple], chunk: int) -> list[tuple]:
    keeper = StepKeeper(keep)
    for start in range(0, len(rows), chunk):
        keeper.add_rows(rows[start:start + chunk], time_index=1)
    return keeper.finish()


@given(n=st.integers(0, 3000), most=st.integers(1, 400), chunk=st.integers(1, 500))
def test_a_sample_is_every_kth_step_at_most_n_and_the_last(n, most, chunk):
    rows = _rows(n)
    keeper = StepKeeper(KeepSteps.sample(most))
    for start in range(0, n, chunk):
        keeper.add_rows(rows[start:start + chunk], time_index=1)
    k = keeper.every_k
    sample = [r for r in rows if r[0] % k == 0]
    assert keeper.rows == sample and k & (k - 1) == 0  # every k-th, k a power of two
    assert len(sample) <= most
    if n > most:
        assert len(sample) >= most / 2  # thinned no more than needed
    else:
        assert k == 1  # a run that fits keeps every step
    kept = keeper.finish()
    if not rows or sample[-1] == rows[-1]:
        assert kept == sample
    elif len(sample) < most:
        assert kept == sample + [rows[-1]]
    else:  # a full sample: the last step in place of the latest kept one
        assert kept == sample[:-1] + [rows[-1]]
    assert len(kept) <= most


@pytest.mark.parametrize("most", [1, 2, 3])
def test_a_sample_of_n_is_at_most_n_rows_the_last_step_included(most):
    for n in range(1, 40):
        kept = _keep(KeepSteps.sample(most), _rows(n), 7)
        assert len(kept) <= most and kept[-1] == (n - 1, (n - 1) * 0.25), (n, kept)


@pytest.mark.parametrize("most", [1, 2, 3, 1000])
def test_thinned_steps_csv_is_at_most_n_rows_the_last_step_included(most):
    import pandas as pd

    from pagedsim.experiments.writers import thin_steps

    for n in (1, 2, 3, 5, 10, 99, 1001, 98_946):
        steps = pd.DataFrame({"step": range(n)})
        thinned = thin_steps(steps, most)
        assert len(thinned) <= most and thinned["step"].iloc[-1] == n - 1, (n, most)
        assert list(thinned["step"]) == sorted(set(thinned["step"]))


@given(n=st.integers(1, 2000), span=st.sampled_from([0.125, 0.25, 0.375, 1.0, 7.5]),
       chunk=st.integers(1, 300))
def test_a_time_resolution_keeps_the_first_step_of_each_span(n, span, chunk):
    rows = _rows(n, dt=0.125)  # times and spans exact in binary: no rounding at the edges
    kept = _keep(KeepSteps.every(span), rows, chunk)
    firsts = {}
    for i, t in rows:
        firsts.setdefault(math.floor(t / span), (i, t))
    expected = list(firsts.values())
    if expected[-1] != rows[-1]:
        expected.append(rows[-1])
    assert kept == expected


def test_all_and_none():
    rows = _rows(10)
    assert _keep(KeepSteps.all(), rows, 3) == rows
    assert _keep(KeepSteps.none(), rows, 3) == []


@pytest.mark.parametrize("text,expected", [
    ("all", KeepSteps.all()), ("NONE", KeepSteps.none()), ("5000", KeepSteps.sample(5000)),
    ("10s", KeepSteps.every(10.0)), ("0.5s", KeepSteps.every(0.5)),
    ("1e3s", KeepSteps.every(1000.0)),
])
def test_parse(text, expected):
    assert parse_keep_steps(text) == expected


@pytest.mark.parametrize("text,says", [
    ("0", "1 to 10,000,000 rows"), ("20000000", "1 to 10,000,000 rows"),
    ("0s", "> 0"), ("1e999s", "finite"), ("-3", "not one of"), ("ten", "not one of"),
    ("nans", "not one of"), ("infs", "not one of"), ("1_000", "not one of"),
    ("٣", "not one of"), ("10 s", "not one of"), ("", "not one of"), ("9" * 5000, "not one of"),
])
def test_bad_values_are_refused_saying_what_is_valid(text, says):
    with pytest.raises(ValueError, match=says):
        parse_keep_steps(text)


@pytest.mark.parametrize("value", ["0", "ten", "1e999s", "9" * 300])
def test_cli_refuses_a_bad_keep_steps_in_one_line_before_running(value, capsys):
    assert main(["compare", "--keep-steps", value, "--num-requests", "50", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pagedsim: error: argument --keep-steps: ")
    assert "Traceback" not in err[0] and len(err[0]) < 400


def test_cli_refuses_keep_steps_with_no_write(capsys):
    assert main(["compare", "--keep-steps", "all", "--no-write", "--num-requests", "50",
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("pagedsim: error: argument --keep-steps: --no-write writes no file, so no "
                   "step is kept; drop --keep-steps or --no-write")


def test_compare_writes_a_sample_and_says_so_on_the_timeline(tmp_path):
    """A kept sample: the steps CSV holds the sample, the timeline's title says it is one,
    and the summary is the run's whole."""
    from pagedsim.experiments import Experiment, compare

    out = tmp_path / "out"
    assert main(["compare", "--schemes", "paged", "--num-requests", "120", "--keep-steps",
                 "100", "--max-step-rows", "0", "--out", str(out), "--quiet",
                 "--jobs", "1"]) == 0
    import pandas as pd

    steps = pd.read_csv(out / "compare_steps.csv")
    summary = pd.read_csv(out / "compare_summary.csv")
    total = int(summary["num_steps"].iloc[0])
    assert 50 <= len(steps) <= 100 < total
    full = compare(Experiment(num_requests=120), ["paged"], jobs=1, progress=False)
    assert int(full.summary["num_steps"].iloc[0]) == total
    # The timeline is drawn from the sample and its title says so.
    from pagedsim.experiments.writers import write_compare

    cmp = compare(Experiment(num_requests=120), ["paged"], jobs=1, progress=False,
                  keep_steps=KeepSteps.sample(100))
    import matplotlib

    matplotlib.use("Agg")
    titles = []
    import pagedsim.plots.timeline as timeline

    real = timeline.memory_timeline

    def spy(steps_df, **kw):
        titles.append(kw.get("title"))
        return real(steps_df, **kw)

    timeline.memory_timeline = spy
    try:
        write_compare(cmp, tmp_path / "again")
    finally:
        timeline.memory_timeline = real
    assert titles == [f"KV pool over time: paged (a sample: {len(cmp.steps['paged']):,} of "
                      f"its {total:,} steps, each drawn as it was)"]


def test_help_names_the_flag():
    out = subprocess.run([sys.executable, "-m", "pagedsim", "compare", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "--keep-steps" in out and "200,000" in out


@pytest.mark.parametrize(("flags", "most"), [
    (["--keep-steps", "1", "--max-step-rows", "0"], 1),
    (["--keep-steps", "2", "--max-step-rows", "0"], 2),
    (["--keep-steps", "all", "--max-step-rows", "1"], 1),
    (["--keep-steps", "all", "--max-step-rows", "2"], 2),
])
def test_compare_writes_at_most_n_step_rows_per_scheme(tmp_path, flags, most):
    """The help says "at most N": N + 1 rows were written for N = 1 and 2."""
    import pandas as pd

    out = tmp_path / "out"
    assert main(["compare", "--schemes", "paged", "--num-requests", "20", *flags,
                 "--out", str(out), "--quiet", "--jobs", "1"]) == 0
    steps = pd.read_csv(out / "compare_steps.csv")
    total = int(pd.read_csv(out / "compare_summary.csv")["num_steps"].iloc[0])
    assert total > most and len(steps) == most
    assert steps["time_s"].iloc[-1] == steps["time_s"].max()  # the run's last step kept
