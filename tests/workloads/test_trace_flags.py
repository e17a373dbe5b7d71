"""The trace flags of ``pagedsim compare`` / ``pagedsim sweep``, through
:func:`pagedsim.cli.main` on small temporary traces (pagedsim CSV and Azure schema).

``--num-requests N`` takes a trace's first N requests, ``--rate R`` rescales its arrival
gaps to a mean of R requests/s (and the rate sweep rescales to each swept rate), arrivals
start at t = 0 s whatever the file's first timestamp, ``--on-too-long clip|skip|error``
and ``--skip-zero-output`` choose what happens to rows that cannot run as written, and
the trace's one-line report (counts of everything loading changed or left out) is in
the text output, or on stderr with ``--json``.

What the runs simulated is read by a spy on ``run_scheme`` (``--jobs 1`` runs in this
process), not from the report, so report and requests are checked independently.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pagedsim.cli import main
from pagedsim.experiments import runner as runner_module
from pagedsim.workloads.workload import Request, clip_lengths

#: One scheme, one process, nothing written: each run takes well under a second.
QUIET = ["--schemes", "paged", "--jobs", "1", "--no-write", "--quiet"]
#: OPT-13B's context (the default model): longer rows are clipped or skipped.
MAX_MODEL_LEN = 2048
#: Gaps between arrivals in seconds, cycled: bursts and lulls, all dyadic, so that adding
#: and removing an offset is exact in floating point.
GAPS_S = (0.125, 0.125, 0.25, 1.5)
NUM_ROWS = 40
#: 0-based rows longer than MAX_MODEL_LEN in the pagedsim trace, and their lengths.
TOO_LONG = {5: (3000, 100), 17: (1000, 1500)}
#: 0-based rows with 0 output tokens in the Azure trace.
ZERO_OUTPUT = (3, 8, 13)


def _arrivals(n: int = NUM_ROWS) -> list[float]:
    """Arrival times in seconds from 0: cumulative sums of GAPS_S."""
    out, t = [], 0.0
    for i in range(n):
        out.append(t)
        t += GAPS_S[i % len(GAPS_S)]
    return out


def _lengths(i: int) -> tuple[int, int]:
    """(prompt, output) tokens of row ``i``: varied, and short unless in TOO_LONG."""
    return TOO_LONG.get(i, (60 + (37 * i) % 300, 20 + (53 * i) % 150))


def _write_csv(path: Path, offset_s: float = 0.0, too_long: bool = True) -> Path:
    """A pagedsim CSV trace, arrivals shifted by ``offset_s`` seconds."""
    lines = ["arrival_s,prompt_len,output_len"]
    for i, t in enumerate(_arrivals()):
        prompt, output = _lengths(i) if too_long or i not in TOO_LONG else (100, 50)
        lines.append(f"{t + offset_s!r},{prompt},{output}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _write_azure(path: Path, zero_output: Sequence[int] = ZERO_OUTPUT) -> Path:
    """An Azure-schema trace (dates to 100 ns), the short rows of :func:`_write_csv`,
    with 0 output tokens on the rows in ``zero_output``."""
    start = datetime(2023, 11, 16, 18, 15, 46, 500000)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i, t in enumerate(_arrivals()):
        prompt, output = _lengths(i) if i not in TOO_LONG else (100, 50)
        stamp = start + timedelta(seconds=t)
        lines.append(f"{stamp:%Y-%m-%d %H:%M:%S}.{stamp.microsecond:06d}0,{prompt},"
                     f"{0 if i in zero_output else output}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    return _write_csv(tmp_path / "t.csv")


@pytest.fixture
def azure(tmp_path: Path) -> Path:
    return _write_azure(tmp_path / "azure.csv")


@pytest.fixture
def simulated(monkeypatch: pytest.MonkeyPatch) -> list[list[Request]]:
    """The requests of every run started in this process, in order."""
    seen: list[list[Request]] = []
    original = runner_module.run_scheme

    def spy(exp: Any, scheme: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(exp.requests())
        return original(exp, scheme, *args, **kwargs)

    monkeypatch.setattr(runner_module, "run_scheme", spy)
    return seen


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[str, str]:
    """Run ``argv`` (must succeed); return (stdout, stderr)."""
    status = main(argv)
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "Traceback" not in captured.err
    return captured.out, captured.err


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run ``argv`` (must fail as bad input); return its one error line."""
    status = main(argv)
    captured = capsys.readouterr()
    assert status == 2, captured
    assert captured.out == "" and "Traceback" not in captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pagedsim: error: "), captured.err
    return lines[0]


def _report(text: str) -> str:
    """The 'workload: ...' line of a compare/sweep output (exactly one)."""
    lines = [line for line in text.splitlines() if line.startswith("workload: ")]
    assert len(lines) == 1, text
    return lines[0]


def _mean_rate(requests: Sequence[Request]) -> float:
    """(N - 1) / (last - first arrival), requests/s."""
    return (len(requests) - 1) / (requests[-1].arrival_s - requests[0].arrival_s)


def _gaps(requests: Sequence[Request]) -> list[float]:
    return [b.arrival_s - a.arrival_s for a, b in zip(requests, requests[1:], strict=False)]


# --------------------------------------------------------------------------------------
# --num-requests


def test_num_requests_takes_the_first_n(capsys: pytest.CaptureFixture[str], trace: Path,
                                        simulated: list[list[Request]]) -> None:
    out, _ = _run(capsys, ["compare", "--workload", str(trace), "--num-requests", "7",
                           *QUIET])
    (reqs,) = simulated
    assert len(reqs) == 7
    assert [(r.prompt_len, r.output_len) for r in reqs] == [
        clip_lengths(*_lengths(i), MAX_MODEL_LEN) for i in range(7)]  # row 5 is too long
    assert [r.arrival_s for r in reqs] == _arrivals(7)  # not rescaled: as recorded
    report = _report(out)
    assert "t.csv: 7 requests" in report and "first 7 requests read" in report
    # Counts cover the rows read: row 5 (line 7) was clipped, row 17 was never read.
    assert "1 longer than max_model_len 2048 clipped (lines 7)" in report
    assert "trace t.csv, first 7 requests" in out.splitlines()[0]


def test_num_requests_beyond_the_trace_takes_all_and_says_so(
        capsys: pytest.CaptureFixture[str], trace: Path,
        simulated: list[list[Request]]) -> None:
    out, _ = _run(capsys, ["compare", "--workload", str(trace), "--num-requests", "500",
                           *QUIET])
    assert len(simulated[0]) == NUM_ROWS
    assert f"num_requests 500 asked for, the trace holds {NUM_ROWS}: all taken" in _report(out)


def test_without_flags_the_whole_trace_runs_as_recorded(
        capsys: pytest.CaptureFixture[str], trace: Path,
        simulated: list[list[Request]]) -> None:
    out, _ = _run(capsys, ["compare", "--workload", str(trace), *QUIET])
    (reqs,) = simulated
    assert len(reqs) == NUM_ROWS  # not compare's default 2,000 requests
    assert [r.arrival_s for r in reqs] == _arrivals()  # nor its default 5 req/s
    assert "rescaled" not in out


# --------------------------------------------------------------------------------------
# --rate


@pytest.mark.parametrize("rate", [0.5, 3.0, 40.0])
def test_rate_rescales_the_arrivals(capsys: pytest.CaptureFixture[str], trace: Path,
                                    simulated: list[list[Request]], rate: float) -> None:
    out, _ = _run(capsys, ["compare", "--workload", str(trace), "--rate", f"{rate:g}",
                           *QUIET])
    (reqs,) = simulated
    assert len(reqs) == NUM_ROWS
    assert _mean_rate(reqs) == pytest.approx(rate, rel=0.01)
    # One factor for every gap: bursts and lulls keep their shape.
    factor = _gaps(reqs)[0] / _gaps_of_file()[0]
    assert _gaps(reqs) == pytest.approx([g * factor for g in _gaps_of_file()], rel=1e-9)
    assert reqs[0].arrival_s == 0.0
    assert f"arrivals rescaled to {rate:g} requests/s" in _report(out)
    assert f"arrivals rescaled to {rate:g} req/s" in out.splitlines()[0]


def _gaps_of_file() -> list[float]:
    arrivals = _arrivals()
    return [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]


def test_rate_applies_to_the_first_n(capsys: pytest.CaptureFixture[str], trace: Path,
                                     simulated: list[list[Request]]) -> None:
    _run(capsys, ["compare", "--workload", str(trace), "--num-requests", "10", "--rate", "2",
                  *QUIET])
    (reqs,) = simulated
    assert len(reqs) == 10 and _mean_rate(reqs) == pytest.approx(2.0, rel=0.01)


def test_rate_the_trace_cannot_take(capsys: pytest.CaptureFixture[str], trace: Path,
                                    simulated: list[list[Request]]) -> None:
    line = _error(capsys, ["compare", "--workload", str(trace), "--num-requests", "1",
                           "--rate", "3", *QUIET])
    assert "argument --rate:" in line and "at least 2 arrivals" in line
    assert simulated == []  # refused before any run


def test_rate_sweep_on_a_trace_sweeps_rescaled_rates(
        capsys: pytest.CaptureFixture[str], trace: Path,
        simulated: list[list[Request]]) -> None:
    out, _ = _run(capsys, ["sweep", "rate", "--workload", str(trace), "--values", "1,4,16",
                           *QUIET])
    assert [round(_mean_rate(reqs), 6) for reqs in simulated] == [1.0, 4.0, 16.0]
    assert "arrivals rescaled to each swept rate" in _report(out)
    assert f"{NUM_ROWS} requests (pagedsim-csv)" in _report(out)
    assert "sweep rate (trace t.csv" in out
    rows = [line.split() for line in out.splitlines() if re.match(r"\d+\.\d+\s+paged", line)]
    assert [row[0] for row in rows] == ["1.00", "4.00", "16.00"]
    batches = [float(row[2]) for row in rows]
    assert len(set(batches)) == 3 and batches == sorted(batches)  # more load, bigger batch


# --------------------------------------------------------------------------------------
# Arrivals start at t = 0 s


@pytest.mark.parametrize("offset_s", [1000.0, 1.7e9])
def test_an_offset_trace_simulates_like_the_rebased_one(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, offset_s: float) -> None:
    rows = []
    for name, offset in (("zero", 0.0), ("offset", offset_s)):
        path = _write_csv(tmp_path / f"{name}.csv", offset)
        out, err = _run(capsys, ["compare", "--json", "--workload", str(path), *QUIET])
        rows.append(json.loads(out))
        if offset:
            assert "arrivals rebased" in err or f"shifted by -{offset:g} s" in err
    assert rows[0] == rows[1]


def test_an_azure_trace_simulates_like_the_same_pagedsim_trace(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    azure = _write_azure(tmp_path / "azure.csv", zero_output=())
    plain = _write_csv(tmp_path / "plain.csv", too_long=False)
    out_azure, err = _run(capsys, ["compare", "--json", "--workload", str(azure), *QUIET])
    assert "arrivals rebased: t = 0 s is the first row's (2023-11-16 18:15:46.5000000)" in err
    out_plain, _ = _run(capsys, ["compare", "--json", "--workload", str(plain), *QUIET])
    assert json.loads(out_azure) == json.loads(out_plain)


# --------------------------------------------------------------------------------------
# --on-too-long


def test_too_long_rows_are_clipped_by_default_and_counted(
        capsys: pytest.CaptureFixture[str], trace: Path,
        simulated: list[list[Request]]) -> None:
    out, _ = _run(capsys, ["compare", "--workload", str(trace), *QUIET])
    (reqs,) = simulated
    assert len(reqs) == NUM_ROWS
    assert all(r.prompt_len + r.output_len <= MAX_MODEL_LEN for r in reqs)
    cut = sum(p + o for p, o in TOO_LONG.values()) - 2 * MAX_MODEL_LEN
    lines = ", ".join(str(i + 2) for i in sorted(TOO_LONG))  # 1-based, after the header
    assert (f"2 longer than max_model_len {MAX_MODEL_LEN} clipped (lines {lines}), "
            f"{cut:,} tokens cut") in _report(out)


def test_on_too_long_skip(capsys: pytest.CaptureFixture[str], trace: Path,
                          simulated: list[list[Request]]) -> None:
    out, _ = _run(capsys, ["compare", "--workload", str(trace), "--on-too-long", "skip",
                           *QUIET])
    (reqs,) = simulated
    assert len(reqs) == NUM_ROWS - len(TOO_LONG)
    kept = [_lengths(i) for i in range(NUM_ROWS) if i not in TOO_LONG]
    assert [(r.prompt_len, r.output_len) for r in reqs] == kept
    assert f"{NUM_ROWS - 2} requests" in _report(out)
    assert f"2 longer than max_model_len {MAX_MODEL_LEN} skipped" in _report(out)


def test_on_too_long_error(capsys: pytest.CaptureFixture[str], trace: Path,
                           simulated: list[list[Request]]) -> None:
    line = _error(capsys, ["compare", "--workload", str(trace), "--on-too-long", "error",
                           *QUIET])
    first = min(TOO_LONG)
    assert "argument --workload:" in line and f"line {first + 2}:" in line
    assert "--on-too-long clip or skip" in line  # the flag, not the library's parameter
    assert simulated == []


def test_on_too_long_clip_is_the_default(capsys: pytest.CaptureFixture[str], trace: Path
                                         ) -> None:
    default, _ = _run(capsys, ["compare", "--json", "--workload", str(trace), *QUIET])
    clip, _ = _run(capsys, ["compare", "--json", "--workload", str(trace),
                            "--on-too-long", "clip", *QUIET])
    skip, _ = _run(capsys, ["compare", "--json", "--workload", str(trace),
                            "--on-too-long", "skip", *QUIET])
    assert json.loads(default) == json.loads(clip) != json.loads(skip)


# --------------------------------------------------------------------------------------
# --skip-zero-output (Azure rows with GeneratedTokens = 0)


def test_zero_output_rows_stop_the_run_without_the_flag(
        capsys: pytest.CaptureFixture[str], azure: Path,
        simulated: list[list[Request]]) -> None:
    line = _error(capsys, ["compare", "--workload", str(azure), *QUIET])
    assert f"line {ZERO_OUTPUT[0] + 2}:" in line and "'GeneratedTokens'" in line
    assert "--skip-zero-output" in line
    assert simulated == []


def test_skip_zero_output(capsys: pytest.CaptureFixture[str], azure: Path,
                          simulated: list[list[Request]]) -> None:
    out, _ = _run(capsys, ["compare", "--workload", str(azure), "--skip-zero-output",
                           *QUIET])
    (reqs,) = simulated
    assert len(reqs) == NUM_ROWS - len(ZERO_OUTPUT)
    assert all(r.output_len >= 1 for r in reqs)
    lines = ", ".join(str(i + 2) for i in ZERO_OUTPUT)
    assert f"{len(ZERO_OUTPUT)} with 0 output tokens skipped (lines {lines})" in _report(out)
    assert f"azure.csv: {NUM_ROWS - 3} requests (azure)" in _report(out)


def test_all_flags_together_on_azure(capsys: pytest.CaptureFixture[str], azure: Path,
                                     simulated: list[list[Request]]) -> None:
    _, err = _run(capsys, ["compare", "--json", "--workload", str(azure),
                           "--skip-zero-output", "--num-requests", "20", "--rate", "8",
                           *QUIET])
    (reqs,) = simulated
    assert len(reqs) == 20 and _mean_rate(reqs) == pytest.approx(8.0, rel=0.01)
    report = _report(err)
    assert "with 0 output tokens skipped" in report and "first 20 requests read" in report
    assert "arrivals rescaled to 8 requests/s" in report


@pytest.mark.parametrize("flag", [["--skip-zero-output"], ["--on-too-long", "skip"]])
def test_trace_flags_refused_for_a_synthetic_workload(
        capsys: pytest.CaptureFixture[str], simulated: list[list[Request]],
        flag: list[str]) -> None:
    line = _error(capsys, ["compare", "--workload", "sharegpt", *flag, *QUIET])
    assert f"argument {flag[0]}:" in line and "trace" in line
    assert simulated == []


# --------------------------------------------------------------------------------------
# Where the report goes


def test_json_stays_a_list_and_the_report_goes_to_stderr(
        capsys: pytest.CaptureFixture[str], trace: Path) -> None:
    out, err = _run(capsys, ["compare", "--json", "--workload", str(trace), *QUIET])
    rows = json.loads(out)  # stdout is nothing but the JSON list
    assert isinstance(rows, list) and rows[0]["scheme"] == "paged"
    assert err.splitlines() == [_report(err)]
    assert "t.csv: 40 requests (pagedsim-csv); 2 longer than" in err


def test_the_text_report_sits_under_the_title(capsys: pytest.CaptureFixture[str],
                                              trace: Path) -> None:
    out, err = _run(capsys, ["compare", "--workload", str(trace), *QUIET])
    assert out.splitlines()[1] == _report(out) and err == ""


def test_no_report_for_a_synthetic_workload(capsys: pytest.CaptureFixture[str]) -> None:
    out, err = _run(capsys, ["compare", "--num-requests", "5", *QUIET])
    assert "workload: " not in out + err


def test_the_sweep_reports_the_trace(capsys: pytest.CaptureFixture[str], trace: Path,
                                     simulated: list[list[Request]]) -> None:
    out, _ = _run(capsys, ["sweep", "block-size", "--workload", str(trace), "--values",
                           "16,32", "--on-too-long", "skip", "--jobs", "1", "--no-write",
                           "--quiet"])
    assert [len(reqs) for reqs in simulated] == [NUM_ROWS - 2] * 2
    assert "2 longer than max_model_len 2048 skipped" in _report(out)
    # A trace runs as recorded: not at the sweep's default 5 req/s.
    assert _mean_rate(simulated[0]) == pytest.approx(_mean_rate_of_kept(), rel=1e-9)


def _mean_rate_of_kept() -> float:
    kept = [t for i, t in enumerate(_arrivals()) if i not in TOO_LONG]
    return (len(kept) - 1) / (kept[-1] - kept[0])


def test_arrival_rate_in_the_summary(capsys: pytest.CaptureFixture[str], trace: Path) -> None:
    """The summary's rate_per_s is the rate the run used: the trace's own, or --rate."""
    from pagedsim.experiments import Experiment, run_scheme

    recorded, _ = run_scheme(Experiment(workload=str(trace)), "paged", keep_steps=False)
    arrivals = _arrivals()
    assert recorded["rate_per_s"] == pytest.approx((NUM_ROWS - 1) / arrivals[-1], rel=1e-12)
    rescaled, _ = run_scheme(Experiment(workload=str(trace), rate_per_s=3.0), "paged",
                             keep_steps=False)
    assert rescaled["rate_per_s"] == 3.0
    assert not math.isnan(recorded["rate_per_s"])
