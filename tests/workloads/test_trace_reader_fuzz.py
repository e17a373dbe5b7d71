"""Issue 22, part 7: a fuzz test of the trace readers.

Whatever a file holds (random bytes; rows built from edge values: huge and negative
numbers, 1e999, digits of other scripts, NaN, quotes; JSON nested deep, with duplicate
keys, huge integers), :func:`pagedsim.workloads.traces.load_trace` returns a trace or raises
:class:`~pagedsim.workloads.traces.TraceError` (a ``ValueError`` whose one line names the file),
never anything else, and fast; ``pagedsim cache-replay`` on the same file exits 0 or 2
with one line. Special files (FIFO, devices, directory, dangling link) are refused at
once. The case counts are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedsim.cli import main
from pagedsim.workloads.traces import TraceError, load_trace

RAN = {"bytes": 0, "rows": 0, "json": 0, "loaded": 0, "refused": 0}
#: Slowest a single load may be, seconds (the files here are at most a few hundred kB).
LIMIT_S = 5.0

HEADERS = ["arrival_s,prompt_len,output_len", "arrival_s,prompt_len,output_len,n",
           "TIMESTAMP,ContextTokens,GeneratedTokens", "arrival_s,prompt_len,output_len,",
           "arrival_s,prompt_len", ""]
FIELDS = ["0", "1", "16", "-1", "0.5", "1e999", "nan", "inf", "1" * 19, "9" * 5000,
          "١٠", "1_000", " 7 ", "\t3", '"5"', '"', "", "2023-11-16 18:15:46.6805900",
          "1e-3", "00000000000000000001", "\x00", "\u00a0"]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["arrival_s", "prompt_len", "output_len", "n",
                                       "timestamp", "input_length", "output_length",
                                       "hash_ids", "x"]), inner, max_size=5),
    max_leaves=20)


def _load(path: Path) -> str:
    """Load ``path``: ``"loaded"`` or ``"refused"``; anything else fails the test."""
    start = time.perf_counter()
    try:
        load_trace(path)
        outcome = "loaded"
    except TraceError as exc:
        text = str(exc)
        assert "\n" not in text and str(path) in text, text
        outcome = "refused"
    elapsed = time.perf_counter() - start
    assert elapsed < LIMIT_S, f"{elapsed:.1f} s"
    RAN[outcome] += 1
    return outcome


def _cli(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["cache-replay", str(path), "--json"])
    captured = capsys.readouterr()
    assert status in (0, 2), status
    if status == 2:
        lines = captured.err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("pagedsim: error: argument TRACE"), \
            captured.err


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=3000), header=st.sampled_from(HEADERS))
def test_random_bytes(tmp_path: Path, data: bytes, header: str) -> None:
    path = tmp_path / "f.csv"
    path.write_bytes((header + "\n").encode() + data if header else data)
    RAN["bytes"] += 1
    _load(path)


#: A good pagedsim row (arrival, prompt, output), so that some files load.
GOOD_ROW = st.tuples(st.integers(0, 10), st.integers(1, 5000), st.integers(1, 5000)).map(
    lambda t: [str(v) for v in t])
#: A good Mooncake or pagedsim JSON object.
GOOD_OBJECT = st.one_of(
    st.fixed_dictionaries({"arrival_s": st.integers(0, 5), "prompt_len": st.integers(1, 900),
                           "output_len": st.integers(1, 900)}),
    st.integers(1, 2000).map(lambda n: {"timestamp": 0, "input_length": n,
                                        "output_length": 3,
                                        "hash_ids": list(range(-(-n // 512)))}))


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=st.sampled_from(HEADERS),
       rows=st.lists(GOOD_ROW | st.lists(st.sampled_from(FIELDS), min_size=1, max_size=5),
                     max_size=6),
       blank_lines=st.booleans())
def test_rows_of_edge_values(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                             header: str, rows: list[list[str]], blank_lines: bool) -> None:
    sep = "\n\n" if blank_lines else "\n"
    path = tmp_path / "f.csv"
    path.write_text(header + "\n" + sep.join(",".join(r) for r in rows) + "\n",
                    encoding="utf-8")
    RAN["rows"] += 1
    _load(path)
    _cli(path, capsys)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(objects=st.lists(GOOD_OBJECT | JSON_VALUES, min_size=1, max_size=4),
       depth=st.sampled_from([0, 0, 0, 9, 300, 5000]), duplicate=st.booleans(),
       digits=st.sampled_from([0, 0, 19, 5000]))
def test_json_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str], objects: list,
                    depth: int, duplicate: bool, digits: int) -> None:
    lines = [json.dumps(o) for o in objects]
    if digits:  # past 18 digits, and past the 4,300 that json itself refuses
        lines.append('{"arrival_s": 0, "prompt_len": ' + "7" * digits + ', "output_len": 1}')
    if depth:  # nested past the limit, or not: a row of its own
        lines.insert(0, '{"arrival_s": ' + "[" * depth + "1" + "]" * depth + "}")
    if duplicate:
        lines.append('{"arrival_s": 0, "prompt_len": 5, "output_len": 5, "prompt_len": 6}')
    path = tmp_path / "f.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    RAN["json"] += 1
    outcome = _load(path)
    if depth > 8 or duplicate or digits:
        assert outcome == "refused"
    _cli(path, capsys)


def _special(tmp_path: Path, kind: str) -> Path:
    if kind == "fifo":
        os.mkfifo(tmp_path / "fifo")
        return tmp_path / "fifo"
    if kind == "dangling":
        (tmp_path / "link").symlink_to(tmp_path / "nowhere")
        return tmp_path / "link"
    if kind == "dir":
        return tmp_path
    return Path(kind)


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "/dev/null", "/dev/urandom", "dir",
                                  "dangling"])
def test_special_files_are_refused_at_once(tmp_path: Path, kind: str) -> None:
    if kind == "fifo" and not hasattr(os, "mkfifo") or kind.startswith("/dev/") \
            and not os.path.exists(kind):
        pytest.skip(f"no {kind} here")
    path = _special(tmp_path, kind)
    outcome: list[BaseException | None] = []

    def load() -> None:
        try:
            load_trace(path)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - judged below
            outcome.append(exc)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(LIMIT_S)
    if not outcome:
        if kind == "fifo":  # let the blocked reader go, then fail
            with open(path, "w"):
                pass
        pytest.fail(f"load_trace({kind}) still running after {LIMIT_S} s")
    error = outcome[0]
    expected = FileNotFoundError if kind == "dangling" else TraceError
    assert isinstance(error, expected), repr(error)


def test_report_case_counts() -> None:
    print(f"\nreader fuzz: {RAN['bytes']} random-byte files, {RAN['rows']} CSV files of "
          f"edge values, {RAN['json']} JSONL files; {RAN['loaded']} loaded, "
          f"{RAN['refused']} refused with one line")
    if RAN["bytes"] + RAN["rows"] + RAN["json"]:
        assert RAN["loaded"] > 0 and RAN["refused"] > 0
