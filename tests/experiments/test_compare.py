"""`pagedsim compare` (and sweep) through the CLI: JSON rows, shares, errors, determinism."""

from __future__ import annotations

import json

import pytest

from pagedsim.cli import main
from pagedsim.experiments import JSON_KEYS, Experiment, compare
from pagedsim.memory.accounting import CATEGORIES

SMALL = ["--num-requests", "100", "--quiet", "--no-write", "--jobs", "1"]


def _compare_json(capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict]:
    assert main(["compare", "--json", *SMALL, *extra]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def default_rows() -> list[dict]:
    """The four default schemes on 100 requests (run once for the module)."""
    from pagedsim.experiments import json_rows

    return json_rows(compare(Experiment(num_requests=100), jobs=1, progress=False,
                             keep_steps=False))


def test_json_rows_have_the_keys_and_shares_sum_to_one(default_rows: list[dict]) -> None:
    assert [r["scheme"] for r in default_rows] == [
        "contiguous-max", "contiguous-pow2", "contiguous-oracle", "paged"]
    for row in default_rows:
        assert set(JSON_KEYS) <= set(row)
        assert sum(row[c] for c in CATEGORIES) == pytest.approx(1.0)
        assert all(0 <= row[c] <= 1 for c in CATEGORIES)
        assert row["mean_batch_size"] > 0 and row["throughput_tokens_per_s"] > 0
    by = {r["scheme"]: r for r in default_rows}
    assert by["contiguous-max"]["token"] < by["paged"]["token"]
    assert by["contiguous-max"]["mean_batch_size"] < by["paged"]["mean_batch_size"]


def test_cli_json_is_deterministic_and_matches_the_library(
        capsys: pytest.CaptureFixture[str], default_rows: list[dict]) -> None:
    schemes = "contiguous-max,paged"
    a = _compare_json(capsys, "--schemes", schemes)
    b = _compare_json(capsys, "--schemes", schemes)
    assert a == b
    lib = {r["scheme"]: r for r in default_rows}
    assert a == [lib["contiguous-max"], lib["paged"]]


def test_parallel_runs_give_the_serial_results() -> None:
    exp = Experiment(num_requests=60, workload="alpaca", rate_per_s=20.0, n=2)
    schemes = ("contiguous-pow2", "paged")
    serial = compare(exp, schemes, jobs=1, progress=False)
    parallel = compare(exp, schemes, jobs=2, progress=False)
    assert serial.summary.equals(parallel.summary)
    for s in schemes:
        assert serial.steps[s].equals(parallel.steps[s])


def test_table_and_files(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "figs"
    argv = ["compare", "--num-requests", "40", "--quiet", "--jobs", "1", "--schemes",
            "contiguous-max,paged", "--out", str(out), "--max-step-rows", "50"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "contiguous-max" in text and "paper" in text and "20.4" in text  # Fig. 2 beside
    names = sorted(p.name for p in out.iterdir())
    assert names == ["compare_shares.png", "compare_steps.csv", "compare_summary.csv",
                     "compare_timeline_contiguous-max.png", "compare_timeline_paged.png"]
    import pandas as pd

    steps = pd.read_csv(out / "compare_steps.csv")
    assert steps.groupby("scheme").size().max() <= 50
    first = (out / "compare_shares.png").read_bytes()
    assert main(argv) == 0  # same input, byte-identical files
    assert (out / "compare_shares.png").read_bytes() == first


@pytest.mark.parametrize("argv, needle", [
    (["compare", "--schemes", "contiguous-huge"], "unknown scheme"),
    (["compare", "--rate", "-1"], "--rate"),
    (["compare", "--rate", "abc"], "--rate"),
    (["compare", "--workload", "no/such/trace.csv"], "trace file"),
    (["compare", "--num-requests", "0"], "num_requests"),
    (["compare", "--n", "2", "--beam-width", "2"], "cannot both"),
    (["compare", "--preemption", "pause"], "preemption"),
    (["compare", "--model", "gpt-99"], "gpt-99"),
    (["sweep", "nope"], "invalid choice"),
    (["sweep", "block-size", "--values", "0"], "whole numbers"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], needle: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--no-write", "--quiet"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pagedsim: error: ")
    assert needle in lines[0]
    assert captured.out == ""


@pytest.mark.parametrize("workload, longest", [
    ("few-shot", 870), ("multi-turn", 704), ("system-prompt", 902)])
def test_a_sharing_workload_longer_than_max_model_len_is_refused_when_built(
        workload: str, longest: int) -> None:
    """Its prompts are not clipped (that would break what they share): the experiment
    refuses the shape when it is built, not once a run makes its requests."""
    Experiment(workload=workload, num_requests=4, max_model_len_tokens=longest)
    with pytest.raises(ValueError, match=f"longest request is {longest} tokens, over "
                                         f"max_model_len {longest - 1}"):
        Experiment(workload=workload, num_requests=4, max_model_len_tokens=longest - 1)


def test_trace_workload(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n"
                     + "".join(f"{i * 0.1:.1f},{50 + i},{30 + 2 * i}\n" for i in range(30)))
    quiet = ["--quiet", "--no-write", "--jobs", "1"]
    assert main(["compare", "--json", "--workload", str(trace), "--schemes", "paged",
                 *quiet]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["scheme"] == "paged"
    assert main(["compare", "--workload", str(trace), "--rate", "3", "--schemes", "paged",
                 *quiet]) == 0  # once refused; rescaling is tested in test_trace_flags.py
    assert "arrivals rescaled to 3 requests/s" in capsys.readouterr().out


def test_small_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sweep", "sharing", "--num-requests", "40", "--values", "2,4", "--jobs", "1",
            "--quiet", "--no-write"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "parallel" in text and "beam" in text and "6.1" in text  # paper's n=2 beside
