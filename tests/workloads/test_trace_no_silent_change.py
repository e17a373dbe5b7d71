"""Issue 22, part 5: nothing loaded is changed silently: overrides of a trace's columns,
duplicate keys and surplus hash ids are errors or counted on the trace's report line."""

from __future__ import annotations

from pathlib import Path

import pytest

from pagedsim.cli import main
from pagedsim.experiments import Experiment
from pagedsim.workloads.traces import TraceError, load_trace


@pytest.fixture
def n_trace(tmp_path: Path) -> Path:
    path = tmp_path / "n.csv"
    path.write_text("arrival_s,prompt_len,output_len,n\n0,10,10,4\n1,10,10,1\n2,10,10,2\n")
    return path


@pytest.mark.parametrize("flags, given, replaced", [
    ({"beam_width": 2}, "beam_width 2", 2),  # was: the n=4 row became n=1, unsaid
    ({"n": 2}, "n 2", 1),  # the n=2 row keeps its value: not counted as replaced
    ({"n": 4}, "n 4", 1),
])
def test_n_and_beam_width_overrides_are_counted(n_trace: Path, flags, given, replaced):
    exp = Experiment(workload=str(n_trace), **flags)
    reqs = exp.requests()
    assert {(r.n, r.beam_width) for r in reqs} == {(flags.get("n", 1),
                                                    flags.get("beam_width", 1))}
    report = exp.trace_report()
    assert f"{given} given to every request" in report
    assert f"replacing the trace's own n / beam_width in {replaced} rows" in report


def test_no_override_keeps_each_rows_n_and_says_nothing(n_trace: Path):
    exp = Experiment(workload=str(n_trace))
    assert [r.n for r in exp.requests()] == [4, 1, 2]
    assert "given to every request" not in exp.trace_report()


def test_cli_report_line_says_beam_width_replaced_n(n_trace: Path, capsys):
    assert main(["compare", "--workload", str(n_trace), "--beam-width", "2", "--no-write",
                 "--jobs", "1", "--quiet", "--schemes", "paged"]) == 0
    out = capsys.readouterr().out
    assert ("beam_width 2 given to every request, replacing the trace's own n / beam_width "
            "in 2 rows") in out


def test_duplicate_key_in_pagedsim_jsonl_is_an_error(tmp_path: Path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"arrival_s": 0, "prompt_len": 5, "output_len": 5, "prompt_len": 9}\n')
    with pytest.raises(TraceError, match="line 1: column 'prompt_len': key 'prompt_len' "
                                         "given twice"):
        load_trace(path)


def test_duplicate_csv_column_is_an_error(tmp_path: Path):
    path = tmp_path / "d.csv"
    path.write_text("arrival_s,prompt_len,output_len,prompt_len\n0,5,5,9\n")
    with pytest.raises(TraceError, match="duplicate column"):
        load_trace(path)


def test_surplus_hash_ids_are_counted_on_the_report_line(tmp_path: Path):
    """Was: ids past the prompt dropped without a word (too few was already an error)."""
    path = tmp_path / "m.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": [1, 2, 3]}\n'
        '{"timestamp": 1, "input_length": 600, "output_length": 10, "hash_ids": [1, 2]}\n'
        '{"timestamp": 2, "input_length": 1, "output_length": 10, "hash_ids": [7, 8]}\n')
    trace = load_trace(path)
    assert [r.prompt_pieces for r in trace.requests] == [(1,), (1, 2), (7,)]
    assert trace.surplus_id_lines == (1, 3) and trace.surplus_ids == 3
    assert ("2 with more hash_ids than input_length needs (lines 1, 3): 3 ids past the "
            "prompt dropped") in trace.report()
    exact = tmp_path / "e.jsonl"
    exact.write_text('{"timestamp": 0, "input_length": 512, "output_length": 1, '
                     '"hash_ids": [1]}\n')
    assert "more hash_ids" not in load_trace(exact).report()


def test_azure_columns_not_read_are_named_on_the_report_line(tmp_path: Path):
    """Was: ignored without a word. The three columns are read; the others are named."""
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens,Region,\n"
                    "2023-11-16 18:15:46.6805900,10,5,west,\n")
    trace = load_trace(path)
    assert trace.ignored_columns == ("Region", "")
    assert "column(s) 'Region', (empty) not read" in trace.report()
    plain = tmp_path / "plain.csv"
    plain.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,5\n")
    assert "not read" not in load_trace(plain).report()
