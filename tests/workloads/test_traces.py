"""Trace loading: both schemas, round trips, too-long handling, and every bad-input error."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedsim.bench_traces import bench_load_trace
from pagedsim.workloads.traces import AUTO_REBASE_FROM_S, Trace, TraceError, load_trace, save_trace
from pagedsim.workloads.workload import Request, WorkloadConfig, generate_workload

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------- Azure schema

def test_azure_seven_digit_fractions_are_exact(tmp_path: Path) -> None:
    path = write(tmp_path, "azure.csv", AZURE_HEADER
                 + "2023-11-16 18:15:46.6805900,4808,10\n"
                 + "2023-11-16 18:15:50.9951690,3180,8\n"
                 + "2023-11-16 18:15:50.9951691,110,27\n"
                 + "2023-11-17 00:00:00.0000000,7,1\n")
    trace = load_trace(path)
    assert trace.schema == "azure"
    arrivals = [r.arrival_s for r in trace.requests]
    assert arrivals[0] == 0.0
    assert arrivals[1] == pytest.approx(4.314579, abs=1e-9)
    assert arrivals[2] - arrivals[1] == pytest.approx(1e-7, abs=1e-9)  # the 7th digit counts
    # Across midnight: 5 h 44 min 13.31941 s after the first row.
    assert arrivals[3] == pytest.approx(5 * 3600 + 44 * 60 + 13.31941, abs=1e-9)
    assert [(r.prompt_len, r.output_len) for r in trace.requests] == \
        [(4808, 10), (3180, 8), (110, 27), (7, 1)]
    assert [r.request_id for r in trace.requests] == [0, 1, 2, 3]


def test_azure_accepts_fewer_fraction_digits_and_extra_columns(tmp_path: Path) -> None:
    path = write(tmp_path, "azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens,Extra\n"
                 "2023-11-16 18:15:46,1,2,a\n2023-11-16 18:15:46.5,3,4,b\n")
    assert [r.arrival_s for r in load_trace(path).requests] == [0.0, 0.5]


# ---------------------------------------------------------------- pagedsim schema

def test_pagedsim_csv_and_jsonl(tmp_path: Path) -> None:
    csv_path = write(tmp_path, "t.csv", "arrival_s,prompt_len,output_len,n\n"
                     "0.0,161,338,1\n0.25,20,58,4\n")
    jsonl_path = write(tmp_path, "t.jsonl",
                       '{"arrival_s": 0.0, "prompt_len": 161, "output_len": 338}\n'
                       '{"arrival_s": 0.25, "prompt_len": 20, "output_len": 58, "n": 4}\n')
    expected = [Request(0, 0.0, 161, 338), Request(1, 0.25, 20, 58, n=4)]
    assert load_trace(csv_path).requests == expected
    assert load_trace(jsonl_path).requests == expected
    assert load_trace(csv_path).schema == "pagedsim-csv"
    assert load_trace(jsonl_path).schema == "pagedsim-jsonl"


requests_strategy = st.lists(
    st.tuples(
        # below the first arrival a file is rebased from (it would load as 0 s)
        st.floats(0, AUTO_REBASE_FROM_S, allow_nan=False, exclude_max=True),
        st.integers(1, 5000), st.integers(1, 5000),
        st.sampled_from([(1, 1), (3, 1), (1, 4)]),
        st.one_of(st.none(), st.integers(0, 100)),
    ),
    min_size=1, max_size=30,
).map(lambda rows: [
    Request(i, a, p, o, n=nb[0], beam_width=nb[1], prefix_id=pre)
    for i, (a, p, o, nb, pre) in enumerate(sorted(rows, key=lambda row: row[0]))
])


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requests=requests_strategy, suffix=st.sampled_from([".csv", ".jsonl"]))
def test_save_load_round_trip(tmp_path: Path, requests: list[Request], suffix: str) -> None:
    path = tmp_path / f"trace{suffix}"
    save_trace(requests, path)
    assert load_trace(path).requests == requests


def test_round_trip_of_a_generated_workload(tmp_path: Path) -> None:
    requests = generate_workload(WorkloadConfig(num_requests=1000, n=2, seed=5))
    save_trace(requests, tmp_path / "w.csv")
    assert load_trace(tmp_path / "w.csv").requests == requests


def test_save_rejects_unsorted(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sorted"):
        save_trace([Request(0, 2.0, 1, 1), Request(1, 1.0, 1, 1)], tmp_path / "x.csv")


# ---------------------------------------------------------------- too long

def test_too_long_error_clip_skip(tmp_path: Path) -> None:
    path = write(tmp_path, "long.csv", "arrival_s,prompt_len,output_len\n"
                 "0,100,100\n1,3000,10\n2,100,100\n3,1000,1049\n")
    with pytest.raises(TraceError, match=r"long\.csv: line 3.*max_model_len 2048"):
        load_trace(path, max_model_len=2048)

    clipped = load_trace(path, max_model_len=2048, on_too_long="clip")
    assert clipped.too_long_lines == (3, 5) and clipped.num_too_long == 2
    assert [(r.prompt_len, r.output_len) for r in clipped.requests] == \
        [(100, 100), (2047, 1), (100, 100), (1000, 1048)]
    assert "2 longer than max_model_len 2048 clipped (lines 3, 5)" in clipped.report()

    skipped = load_trace(path, max_model_len=2048, on_too_long="skip")
    assert skipped.too_long_lines == (3, 5)
    assert [r.arrival_s for r in skipped.requests] == [0.0, 2.0]
    assert [r.request_id for r in skipped.requests] == [0, 1]

    assert load_trace(path).num_too_long == 0  # no max_model_len: nothing checked


def test_bad_arguments(tmp_path: Path) -> None:
    path = write(tmp_path, "ok.csv", "arrival_s,prompt_len,output_len\n0,1,1\n")
    with pytest.raises(ValueError, match="on_too_long"):
        load_trace(path, on_too_long="truncate")
    with pytest.raises(ValueError, match="max_model_len"):
        load_trace(path, max_model_len=1)


# ---------------------------------------------------------------- bad input

BAD_INPUTS = [
    # (file name, content, line number the error must name, text the message must contain)
    ("missing_col_header.csv", "arrival_s,prompt_len\n0,1\n", 1, "output_len"),
    ("neither_schema.csv", "time,in,out\n0,1,1\n", 1, "missing column"),
    ("unknown_col.csv", "arrival_s,prompt_len,output_len,colour\n0,1,1,red\n", 1, "colour"),
    ("duplicate_col.csv", "arrival_s,prompt_len,output_len,n,n\n0,1,1,1,1\n", 1, "duplicate"),
    ("short_row.csv", "arrival_s,prompt_len,output_len\n0,1,1\n1,2\n", 3, "output_len"),
    ("long_row.csv", "arrival_s,prompt_len,output_len\n0,1,1,9\n", 2, "extra"),
    ("non_numeric.csv", "arrival_s,prompt_len,output_len\n0,1,1\n1,abc,1\n", 3, "'abc'"),
    ("float_len.csv", "arrival_s,prompt_len,output_len\n0,1.5,1\n", 2, "'1.5'"),
    ("zero_len.csv", "arrival_s,prompt_len,output_len\n0,1,0\n", 2, "output_len"),
    ("negative_len.csv", "arrival_s,prompt_len,output_len\n0,-4,1\n", 2, "'-4'"),
    ("negative_arrival.csv", "arrival_s,prompt_len,output_len\n-1,1,1\n", 2, "'-1'"),
    ("nan_arrival.csv", "arrival_s,prompt_len,output_len\nnan,1,1\n", 2, "arrival_s"),
    ("bad_arrival.csv", "arrival_s,prompt_len,output_len\nsoon,1,1\n", 2, "'soon'"),
    ("unsorted.csv", "arrival_s,prompt_len,output_len\n0,1,1\n5,1,1\n4,1,1\n", 4, "line 3"),
    ("bad_n.csv", "arrival_s,prompt_len,output_len,n\n0,1,1,0\n", 2, "'n'"),
    ("bad_prefix.csv", "arrival_s,prompt_len,output_len,prefix_id\n0,1,1,x\n", 2, "prefix_id"),
    ("n_and_beam.csv", "arrival_s,prompt_len,output_len,n,beam_width\n0,1,1,2,2\n", 2, "beam"),
    ("blank_lines.csv", "\n\narrival_s,prompt_len,output_len\n\n0,1,1\n0,x,1\n", 6, "'x'"),
    ("empty.csv", "", 1, "empty"),
    ("azure_unsorted.csv", AZURE_HEADER + "2023-11-16 18:15:46.6805900,1,1\n"
     "2023-11-16 18:15:46.6805899,1,1\n", 3, "TIMESTAMP"),
    ("azure_bad_stamp.csv", AZURE_HEADER + "16/11/2023 18:15,1,1\n", 2, "'16/11/2023 18:15'"),
    ("azure_bad_date.csv", AZURE_HEADER + "2023-02-30 18:15:46.1,1,1\n", 2, "date"),
    ("azure_bad_time.csv", AZURE_HEADER + "2023-11-16 25:15:46.1,1,1\n", 2, "time"),
    ("azure_zero_output.csv", AZURE_HEADER + "2023-11-16 18:15:46.1,5,0\n", 2,
     "GeneratedTokens"),
    ("azure_missing.csv", AZURE_HEADER + "2023-11-16 18:15:46.1,5\n", 2, "GeneratedTokens"),
    ("bad_json.jsonl", '{"arrival_s": 0, "prompt_len": 1, "output_len": 1}\n{"arr', 2, "JSON"),
    ("json_list.jsonl", '{"arrival_s": 0, "prompt_len": 1, "output_len": 1}\n[1]\n', 2,
     "object"),
    ("json_missing.jsonl", '{"arrival_s": 0, "prompt_len": 1}\n', 1, "output_len"),
    ("json_unknown.jsonl", '{"arrival_s": 0, "prompt_len": 1, "output_len": 1, "x": 1}\n',
     1, "x"),
    ("json_string.jsonl", '{"arrival_s": 0, "prompt_len": "12", "output_len": 1}\n', 1,
     "'12'"),
    ("json_bool.jsonl", '{"arrival_s": 0, "prompt_len": 1, "output_len": true}\n', 1, "True"),
    ("json_float_len.jsonl", '{"arrival_s": 0, "prompt_len": 2.0, "output_len": 1}\n', 1,
     "2.0"),
    ("json_unsorted.jsonl", '{"arrival_s": 3, "prompt_len": 1, "output_len": 1}\n\n'
     '{"arrival_s": 2, "prompt_len": 1, "output_len": 1}\n', 3, "arrival_s"),
]


@pytest.mark.parametrize("name, content, line, needle", BAD_INPUTS,
                         ids=[case[0] for case in BAD_INPUTS])
def test_bad_input_names_file_and_line(tmp_path: Path, name: str, content: str, line: int,
                                       needle: str) -> None:
    path = write(tmp_path, name, content)
    with pytest.raises(ValueError) as info:
        load_trace(path)
    message = str(info.value)
    assert isinstance(info.value, TraceError)
    assert name in message and f"line {line}:" in message, message
    assert needle in message, message
    assert "\n" not in message  # one line, for CLIs
    assert info.value.line == line


def test_excel_bom_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "bom.csv"
    path.write_bytes("\ufeffarrival_s,prompt_len,output_len\n0,3,4\n".encode())
    assert load_trace(path).requests == [Request(0, 0.0, 3, 4)]


def test_trace_report_without_too_long(tmp_path: Path) -> None:
    path = write(tmp_path, "ok.csv", "arrival_s,prompt_len,output_len\n0,1,1\n")
    trace = load_trace(path, max_model_len=16)
    assert isinstance(trace, Trace)
    assert trace.report() == f"{path}: 1 requests (pagedsim-csv)"


# ---------------------------------------------------------------- speed

@pytest.mark.slow
def test_the_load_benchmark_runs_every_schema() -> None:
    # The speed target (20,000 rows in under a second) is the benchmark's to report
    # (python -m pagedsim.bench_traces); a timed assertion here would fail on a loaded
    # machine without anything being wrong.
    times = bench_load_trace(2_000, repeats=1)
    assert set(times) == {"azure-csv", "pagedsim-csv", "pagedsim-jsonl"}
    assert all(t > 0 for t in times.values()), times
