"""Trace loader regressions: each bad file ends in one TraceError line naming file, line and
value; rebasing, head / rate rescaling, too-long and zero-output policies with counts."""

from __future__ import annotations

import gzip
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagedsim.engine.cost import CostModel
from pagedsim.engine.simulator import simulate
from pagedsim.memory.schemes import make_allocator
from pagedsim.metrics.summary import summarize
from pagedsim.models.specs import get_gpu, get_model
from pagedsim.workloads.traces import (
    AUTO_REBASE_FROM_S,
    TraceError,
    load_trace,
    parse_arrival,
    parse_int,
    save_trace,
)
from pagedsim.workloads.workload import Request, WorkloadConfig, generate_workload

HEADER = "arrival_s,prompt_len,output_len\n"
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def trace_error(path: Path, **kwargs: object) -> TraceError:
    """Load ``path`` expecting a TraceError; check the message is one line naming the file."""
    with pytest.raises(TraceError) as info:
        load_trace(path, **kwargs)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: "), message
    assert len(message) < 400, message  # a 140 kB field must not end up in the message
    return info.value


# ---------------------------------------------------------------- 1. csv field limit

def test_field_over_csv_limit_names_file_line_and_value(tmp_path: Path) -> None:
    path = write(tmp_path, "huge.csv", HEADER + "0,1,1\n1,2," + "9" * 140_000 + "\n")
    error = trace_error(path)
    assert error.line == 3
    assert "131,072 characters" in str(error)
    assert "'1,2,999" in str(error) and "140,004 characters" in str(error)
    header = write(tmp_path, "huge_header.csv", "\n" + "x" * 140_000 + ",y\n0,1,1\n")
    assert trace_error(header).line == 2


def test_unclosed_quote_is_blamed_on_the_line_where_it_opens(tmp_path: Path) -> None:
    rows = "".join(f"{i},5,5\n" for i in range(30_000))
    path = write(tmp_path, "quote.csv", HEADER + "0,1,1\n\"1,2,3\n" + rows)
    error = trace_error(path)
    assert error.line == 3, str(error)
    assert "never closed" in str(error) and "(value '\"1,2,3')" in str(error)


# ---------------------------------------------------------------- 2. not UTF-8

def test_latin1_trace_names_line_and_byte_offset(tmp_path: Path) -> None:
    # The bad byte lies past Python's 8 KiB text buffer, where the decoder's own
    # "position" is relative to the buffer, not the file.
    good = HEADER + "".join(f"{i},5,5\n" for i in range(2000))
    path = tmp_path / "latin1.csv"
    path.write_bytes(good.encode() + "2000,7,7,café\n".encode("latin-1"))
    error = trace_error(path)
    assert error.line == 2002
    offset = len(good.encode()) + len(b"2000,7,7,caf")
    assert f"byte 0xe9 at byte offset {offset:,}" in str(error)
    assert "must be UTF-8" in str(error) and "iconv" in str(error)


def test_gzip_and_utf16_files_say_what_they_look_like(tmp_path: Path) -> None:
    gz = tmp_path / "trace.csv.gz"
    gz.write_bytes(gzip.compress((HEADER + "0,1,1\n").encode()))
    assert "gzip" in str(trace_error(gz))
    utf16 = tmp_path / "excel.csv"
    utf16.write_bytes((HEADER + "0,1,1\n").encode("utf-16"))
    error = trace_error(utf16)
    assert error.line == 1 and "UTF-16" in str(error)


def test_utf8_text_in_an_ignored_column_loads(tmp_path: Path) -> None:
    path = tmp_path / "azure_extra.csv"
    path.write_bytes((AZURE_HEADER.strip() + ",Note\n2023-11-16 18:15:46.5,3,4,café 中国\n")
                     .encode())
    assert load_trace(path).requests == [Request(0, 0.0, 3, 4)]


# ---------------------------------------------------------------- 3. plain ASCII numbers

@pytest.mark.parametrize("text", ["١٠", "1_000", "+5", "10.0", "1e3", "\xa010", "1 000", "",
                                  "１０", "9" * 19])
def test_integers_must_be_plain_ascii_digits(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, "ints.csv", HEADER + f"0,{text},5\n")
    error = trace_error(path)
    assert error.line == 2 and error.column == "prompt_len" and error.value == text


@pytest.mark.parametrize("text", ["1_0.5", "nan", "inf", "infinity", "١.٥", "0x10", "1e999"])
def test_arrivals_must_be_plain_finite_decimals(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, "arrivals.csv", HEADER + f"{text},5,5\n")
    error = trace_error(path)
    assert error.line == 2 and error.column == "arrival_s" and error.value == text


def test_ascii_spaces_and_tabs_around_fields_are_ignored(tmp_path: Path) -> None:
    path = write(tmp_path, "spaces.csv", "arrival_s, prompt_len, output_len, prefix_id\n"
                 " 0.5 , 10 ,\t5\t, 3 \n1.5 ,.5e1,5,\n")
    # ".5e1" is a number but not an integer: the second row fails on prompt_len.
    error = trace_error(path)
    assert error.line == 3 and error.column == "prompt_len"
    path.write_text("arrival_s, prompt_len, output_len, prefix_id\n 0.5 , 10 ,\t5\t, 3 \n"
                    "3. ,7,5, \n", encoding="utf-8")
    assert load_trace(path).requests == [Request(0, 0.5, 10, 5, prefix_id=3),
                                         Request(1, 3.0, 7, 5)]


def test_jsonl_nan_arrival_and_azure_unicode_digits_are_rejected(tmp_path: Path) -> None:
    jsonl = write(tmp_path, "nan.jsonl", '{"arrival_s": NaN, "prompt_len": 1, "output_len": 1}\n')
    assert trace_error(jsonl).column == "arrival_s"
    azure = write(tmp_path, "azure.csv", AZURE_HEADER + "٢٠٢٣-11-16 18:15:46.5,3,4\n")
    assert trace_error(azure).column == "TIMESTAMP"
    huge = write(tmp_path, "huge.jsonl",
                 '{"arrival_s": 0, "prompt_len": ' + "9" * 5000 + ', "output_len": 1}\n')
    assert "JSON" in str(trace_error(huge))


@given(st.one_of(st.text(max_size=8),
                 st.text(alphabet="0123456789-+_. \t\xa0\n١٣e", max_size=21)))
def test_parse_int_accepts_exactly_padded_ascii_integers(text: str) -> None:
    core = text.strip(" \t")
    plain = re.fullmatch(r"-?[0-9]{1,18}", core) is not None
    try:
        value = parse_int(text)
    except ValueError:
        assert not plain
    else:
        assert plain and value == int(core)


@given(st.text(alphabet="0123456789.eE+-_ \t\xa0٣nai", max_size=8))
def test_parse_arrival_never_returns_nan_inf_or_negative(text: str) -> None:
    try:
        value = parse_arrival(text)
    except ValueError:
        return
    assert math.isfinite(value) and value >= 0
    assert "_" not in text and "\xa0" not in text and "٣" not in text


# ---------------------------------------------------------------- 4. not a trace at all

def test_directory_empty_and_header_only_files(tmp_path: Path) -> None:
    error = trace_error(tmp_path)
    assert error.line is None and "directory" in str(error)
    assert "empty file" in str(trace_error(write(tmp_path, "empty.csv", "")))
    assert trace_error(write(tmp_path, "blank.csv", "\n \n")).line == 3
    for name, header in (("header.csv", HEADER), ("azure_header.csv", "\n" + AZURE_HEADER)):
        error = trace_error(write(tmp_path, name, header + "\n"))
        assert "no data rows" in str(error)
        assert error.line == header.count("\n"), str(error)


def test_a_trace_whose_every_row_is_skipped_loads_empty_and_says_why(tmp_path: Path) -> None:
    path = write(tmp_path, "long.csv", HEADER + "0,3000,10\n")
    trace = load_trace(path, max_model_len=2048, on_too_long="skip")
    assert trace.requests == [] and "1 longer than max_model_len 2048 skipped" in trace.report()


# ---------------------------------------------------------------- 5. rebasing

def test_wall_clock_arrivals_are_rebased_and_simulate_like_the_original(tmp_path: Path) -> None:
    requests = generate_workload(WorkloadConfig(num_requests=60, rate_per_s=5, seed=1))
    # 1.7e15 s: a Unix time in microseconds read as seconds. float64 spacing there is
    # 0.25 s, so write arrivals on that grid: rebasing then loses nothing.
    epoch = [replace(r, arrival_s=1.7e15 + round(r.arrival_s * 4) / 4) for r in requests]
    save_trace(epoch, tmp_path / "epoch.csv")
    rebased = load_trace(tmp_path / "epoch.csv")
    kept = load_trace(tmp_path / "epoch.csv", rebase=False)
    assert rebased.requests[0].arrival_s == 0.0
    assert [r.arrival_s for r in rebased.requests] == \
        [e.arrival_s - epoch[0].arrival_s for e in epoch]
    assert "arrivals rebased: t = 0 s is the first row's (arrival_s 17000" in rebased.report()
    assert kept.requests == epoch and kept.rebased_from is None

    cost = CostModel(get_model("opt-13b"), get_gpu("a100-40gb"))

    def makespan_s(reqs: list[Request]) -> float:
        result = simulate(reqs, make_allocator("paged", 15_728), cost, progress=False)
        return summarize(result)["makespan_s"]

    reference = makespan_s([replace(r, arrival_s=e.arrival_s - epoch[0].arrival_s)
                            for r, e in zip(requests, epoch, strict=True)])
    assert makespan_s(rebased.requests) == pytest.approx(reference, rel=1e-9)
    # Without rebasing, steps of milliseconds vanish in the 0.25 s float spacing.
    assert makespan_s(kept.requests) != pytest.approx(reference, rel=1e-3)


def test_rebase_defaults_and_explicit_choices(tmp_path: Path) -> None:
    small = write(tmp_path, "small.csv", HEADER + "5.0,1,1\n7.0,1,1\n")
    assert [r.arrival_s for r in load_trace(small).requests] == [5.0, 7.0]  # kept as written
    assert [r.arrival_s for r in load_trace(small, rebase=True).requests] == [0.0, 2.0]
    edge = write(tmp_path, "edge.csv", HEADER + f"{AUTO_REBASE_FROM_S!r},1,1\n")
    assert load_trace(edge).requests[0].arrival_s == 0.0
    azure = write(tmp_path, "azure.csv", AZURE_HEADER + "2023-11-16 18:15:46.5,3,4\n")
    assert load_trace(azure).rebased_from == "2023-11-16 18:15:46.5"
    assert "rebase=False" in str(trace_error(azure, rebase=False))
    with pytest.raises(TypeError, match="rebase"):
        load_trace(small, rebase="yes")


# ---------------------------------------------------------------- 6. head and rate

def test_head_and_max_requests(tmp_path: Path) -> None:
    path = write(tmp_path, "five.csv", HEADER + "".join(f"{i},{i + 1},1\n" for i in range(5))
                 + "9,not-a-number,1\n")
    # max_requests stops reading: the bad last row is never reached.
    trace = load_trace(path, max_requests=5)
    assert [r.prompt_len for r in trace.requests] == [1, 2, 3, 4, 5]
    assert trace.report().endswith("; first 5 requests read (stopped at line 6)")
    two = trace.head(2)
    assert [r.request_id for r in two.requests] == [0, 1] and len(trace.requests) == 5
    assert two.report().endswith("; first 2 of 5 requests kept")
    same = trace.head(10)
    assert same.requests == trace.requests and same.requests is not trace.requests
    assert same.report() == trace.report()
    with pytest.raises(ValueError, match="n must be >= 1"):
        trace.head(0)
    with pytest.raises(ValueError, match="max_requests"):
        load_trace(path, max_requests=0)


def test_rescale_rate_scales_every_gap_and_records_it(tmp_path: Path) -> None:
    path = write(tmp_path, "bursty.csv", HEADER + "10,1,1\n10,1,1\n11,1,1\n14,1,1\n18,1,1\n")
    trace = load_trace(path)
    assert trace.mean_rate_per_s == pytest.approx(4 / 8)
    fast = trace.rescale_rate(2.0)
    assert [r.arrival_s for r in fast.requests] == pytest.approx([10, 10, 10.25, 11, 12])
    assert fast.mean_rate_per_s == pytest.approx(2.0)
    assert "arrivals rescaled to 2 requests/s (from 0.5; every gap x0.25)" in fast.report()
    assert [r.arrival_s for r in trace.requests] == [10, 10, 11, 14, 18]  # unchanged
    batch = trace.rescale_rate(math.inf)
    assert {r.arrival_s for r in batch.requests} == {10.0}
    assert batch.mean_rate_per_s == math.inf
    assert [(r.request_id, r.prompt_len) for r in batch.requests] == \
        [(r.request_id, r.prompt_len) for r in trace.requests]
    for bad in (0, -1.0, math.nan):
        with pytest.raises(ValueError, match="rate_per_s"):
            trace.rescale_rate(bad)
    with pytest.raises(TypeError):
        trace.rescale_rate("5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least 2"):
        trace.head(1).rescale_rate(1.0)
    with pytest.raises(ValueError, match="no gap"):
        trace.head(2).rescale_rate(1.0)


def test_head_then_rescale_matches_a_poisson_rate(tmp_path: Path) -> None:
    requests = generate_workload(WorkloadConfig(num_requests=2000, rate_per_s=2, seed=3))
    save_trace(requests, tmp_path / "w.jsonl")
    trace = load_trace(tmp_path / "w.jsonl").head(500).rescale_rate(5.0)
    assert len(trace.requests) == 500 and trace.mean_rate_per_s == pytest.approx(5.0)
    arrivals = [r.arrival_s for r in trace.requests]
    assert arrivals == sorted(arrivals)
    assert trace.transforms[0] == "first 500 of 2000 requests kept"
    assert trace.transforms[1].startswith("arrivals rescaled to 5 requests/s (from ")
    assert trace.report().endswith("; ".join(trace.transforms))


# ---------------------------------------------------------------- 7. too long

def test_too_long_policies_report_counts_and_tokens(tmp_path: Path) -> None:
    path = write(tmp_path, "long.csv", HEADER + "0,100,100\n1,3000,10\n2,1000,1049\n")
    clipped = load_trace(path, max_model_len=2048, on_too_long="clip")
    # 3010 -> 2047 + 1 (962 cut); 2049 -> 1000 + 1048 (1 cut).
    assert clipped.clipped_tokens == 963
    assert clipped.report().endswith(
        "2 longer than max_model_len 2048 clipped (lines 3, 4), 963 tokens cut")
    skipped = load_trace(path, max_model_len=2048, on_too_long="skip")
    assert skipped.num_too_long == 2 and skipped.clipped_tokens == 0
    assert skipped.report().endswith("2 longer than max_model_len 2048 skipped (lines 3, 4)")
    assert len(skipped.requests) == 1


# ---------------------------------------------------------------- 8. zero output tokens

def test_azure_zero_output_rows_can_be_skipped_and_are_counted(tmp_path: Path) -> None:
    path = write(tmp_path, "azure0.csv", AZURE_HEADER
                 + "2023-11-16 18:15:46.0,5,0\n2023-11-16 18:15:47.0,6,2\n"
                 + "2023-11-16 18:15:48.0,7,0\n2023-11-16 18:15:49.5,8,3\n")
    error = trace_error(path)
    assert error.line == 2 and "skip_zero_output=True" in str(error)
    trace = load_trace(path, skip_zero_output=True)
    assert trace.zero_output_lines == (2, 4) and trace.num_zero_output == 2
    # Arrivals still count from the first row, skipped or not (as for too-long rows).
    assert trace.requests == [Request(0, 1.0, 6, 2), Request(1, 3.5, 8, 3)]
    assert "; 2 with 0 output tokens skipped (lines 2, 4)" in trace.report()
    jsonl = write(tmp_path, "zero.jsonl", '{"arrival_s": 0, "prompt_len": 1, "output_len": 0}\n'
                  '{"arrival_s": 1, "prompt_len": 1, "output_len": 1}\n')
    assert load_trace(jsonl, skip_zero_output=True).requests == [Request(0, 1.0, 1, 1)]
    negative = write(tmp_path, "neg.csv", HEADER + "0,1,-1\n")
    assert "skip_zero_output" not in str(trace_error(negative, skip_zero_output=True))
