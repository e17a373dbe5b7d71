"""Traces read lazily (pagedsim.workloads.traces, pagedsim.experiments.trace_replay):
the same requests and the same report line as a trace loaded whole, clipped and skipped
rows counted, and rows read only as the run reaches them."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedsim.experiments import Experiment, run_scheme
from pagedsim.workloads.traces import LINES_KEPT, TraceError, load_trace, open_trace

MAX_LEN = 2048  # OPT-13B's max_model_len, the default experiment's


@st.composite
def trace_rows(draw) -> list[tuple[float, int, int, int]]:
    """(arrival_s, prompt_len, output_len, n) rows in arrival order: some longer than
    max_model_len, some with 0 output tokens, repeated arrivals, a late start."""
    n = draw(st.integers(1, 40))
    t = draw(st.sampled_from([0.0, 0.5, 3600.0]))
    rows = []
    for _ in range(n):
        t += draw(st.sampled_from([0.0, 0.125, 0.3, 2.0]))
        prompt = draw(st.sampled_from([1, 30, 700, 2047, 2500]))
        output = draw(st.sampled_from([0, 1, 5, 300, 1900]))
        rows.append((t, prompt, output, draw(st.sampled_from([1, 1, 3]))))
    return rows


def _write(path: Path, rows: list[tuple]) -> Path:
    path.write_text("arrival_s,prompt_len,output_len,n\n"
                    + "".join(f"{a!r},{p},{o},{k}\n" for a, p, o, k in rows))
    return path


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=trace_rows(), on_too_long=st.sampled_from(["clip", "skip"]),
       num_requests=st.sampled_from([None, 1, 7, 100]),
       rate=st.sampled_from([None, 2.0, math.inf]), n=st.sampled_from([1, 2]))
def test_lazy_reading_gives_the_requests_and_report_of_a_whole_load(
        tmp_path: Path, rows, on_too_long, num_requests, rate, n):
    path = _write(tmp_path / "t.csv", rows)
    exp = Experiment(workload=str(path), on_too_long=on_too_long, skip_zero_output=True,
                     num_requests=num_requests, rate_per_s=rate, n=n)
    try:
        whole = exp.trace()
    except (TraceError, ValueError) as exc:  # no request left, or a rate it cannot take
        with pytest.raises(type(exc), match=re.escape(str(exc))):
            list(exp.iter_requests())
        return
    assert list(exp.iter_requests()) == whole.requests
    assert exp.trace_report() == whole.report()
    scan = exp.trace_scan()
    assert scan.num_requests == len(whole.requests)
    assert scan.counts.num_too_long == whole.num_too_long
    assert scan.counts.num_zero_output == whole.num_zero_output


def test_counts_keep_every_clipped_and_skipped_row_but_only_the_first_lines(tmp_path: Path):
    rows = [(float(i), 2500 if i % 3 == 0 else 10, 0 if i % 5 == 0 else 5, 1)
            for i in range(1, 61)]
    path = _write(tmp_path / "t.csv", rows)
    counts, requests = open_trace(path, MAX_LEN, "clip", skip_zero_output=True)
    got = list(requests)
    zero = [i for i in range(1, 61) if i % 5 == 0]
    long_ = [i for i in range(1, 61) if i % 3 == 0 and i % 5]
    assert counts.num_zero_output == len(zero) and counts.num_too_long == len(long_)
    assert counts.zero_output_lines == [i + 1 for i in zero][:LINES_KEPT]  # + header line
    assert counts.too_long_lines == [i + 1 for i in long_][:LINES_KEPT]
    assert counts.clipped_tokens == sum(2500 + 5 - MAX_LEN for _ in long_)
    assert len(got) == counts.num_requests == 60 - len(zero)
    whole = load_trace(path, MAX_LEN, "clip", skip_zero_output=True)
    assert got == whole.requests and whole.num_too_long == len(long_)
    assert f"{len(long_)} longer than max_model_len {MAX_LEN} clipped" in whole.report()


def test_rows_are_read_only_as_the_iterator_reaches_them(tmp_path: Path):
    """A bad row near the end is not seen before the requests ahead of it are taken: the
    file is never read whole up front."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_len,output_len\n"
                    + "".join(f"{i},10,5\n" for i in range(1000)) + "999,ten,5\n")
    counts, requests = open_trace(path, MAX_LEN)
    first = [next(requests) for _ in range(3)]
    assert [r.request_id for r in first] == [0, 1, 2] and counts.num_requests == 3
    with pytest.raises(TraceError, match="line 1002: column 'prompt_len'"):
        list(requests)


def test_a_run_of_a_trace_equals_a_run_of_its_requests(tmp_path: Path):
    """run_scheme reads the trace lazily; the summary is the one of the whole list."""
    from pagedsim.engine.simulator import simulate
    from pagedsim.memory.schemes import make_allocator
    from pagedsim.metrics.summary import summarize

    rows = [(0.2 * i, 50 + 37 * (i % 9), 20 + 11 * (i % 7), 1) for i in range(120)]
    exp = Experiment(workload=str(_write(tmp_path / "t.csv", rows)), rate_per_s=4.0)
    lazy, _ = run_scheme(exp, "paged", keep_steps=False)
    cfg = exp.scheduler_config()
    alloc = make_allocator("paged", exp.capacity_slots(), exp.block_size, exp.max_model_len,
                           model=exp.model, max_num_seqs=cfg.max_num_seqs)
    whole = summarize(simulate(exp.trace().requests, alloc, exp.cost_model(), cfg,
                               scheme="paged", progress=False))
    assert {k: lazy[k] for k in whole} == whole
