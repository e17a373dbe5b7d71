"""pagedsim calibrate: result files become replayable cases, bad ones are refused with one
line, and a fit to the simulator's own output recovers the constants it ran with."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from pagedsim.cli import main
from pagedsim.experiments.calibrate import (
    MAX_FIT_REQUESTS,
    ResultFileError,
    case_from_result,
    fit_profile,
    profile_loss,
)
from pagedsim.experiments.validate import simulate_case
from pagedsim.models.cost_profiles import CostProfile, get_cost_profile

SETTINGS = {"model": "llama-3.1-8b", "gpu": "a100-80gb", "num_gpus": 1, "scheduler": "v0",
            "max_model_len": 4096, "max_num_batched_tokens": 4096, "max_num_seqs": 256,
            "num_scheduler_steps": 1}
#: The constants the synthetic "measurements" are made with; the per-layer overhead, which
#: calibrate keeps as the start profile has it, is the vllm profile's.
TRUTH = CostProfile("truth", {"a100-80gb": 0.6}, {"a100-80gb": 0.45}, 0.003, 2e-5, 0.0,
                    layer_overhead_s=get_cost_profile("vllm").layer_overhead_s)
#: Three runs that pin different constants: one sequence decoding (bandwidth and the fixed
#: overhead), 128 decoding (the per-sequence overhead), long prompts (FLOP/s).
RUNS = {"single": ([100], [300]), "wide": ([40] * 128, [200] * 128),
        "prefill": ([3000] * 12, [4] * 12)}


def _write_result(tmp_path, name: str, profile: CostProfile, **extra) -> str:
    """A benchmark_serving-style result file of ``profile``'s predictions for RUNS[name]."""
    inputs, outputs = RUNS[name]
    case = case_from_result(_raw(tmp_path, name, inputs, outputs), SETTINGS)
    pred = simulate_case(case, None, profile).predicted
    data = {"request_rate": "inf", "num_prompts": len(inputs), "input_lens": inputs,
            "output_lens": outputs, "median_ttft_ms": pred["p50_ttft_ms"],
            "median_tpot_ms": pred["p50_tpot_ms"],
            "output_throughput": pred["output_tokens_per_s"], **extra}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return str(path)


def _raw(tmp_path, name, inputs, outputs) -> str:
    path = tmp_path / f"{name}-raw.json"
    path.write_text(json.dumps({"input_lens": inputs, "output_lens": outputs,
                                "request_rate": "inf", "output_throughput": 1.0}))
    return str(path)


@pytest.mark.slow
def test_fit_recovers_the_constants_the_simulator_ran_with(tmp_path) -> None:
    files = [_write_result(tmp_path, name, TRUTH) for name in RUNS]
    cases = [case_from_result(f, SETTINGS) for f in files]
    # On one model a step's fixed overhead trades off against both fractions (every step is
    # bytes / bandwidth + overhead, or flops / FLOP/s + overhead), and coordinate descent is
    # local: the start's fixed overhead is put at 2 ms, the side of the truth it is fitted
    # from (from the vllm profile's 0.5 ms it settles at HBM 0.49 and 0.06 ms, loss 4e-5).
    start = replace(get_cost_profile("vllm"), step_overhead_s=0.002)
    assert profile_loss(start, cases) > 0.01  # the start is far from the truth
    said: list[str] = []
    fitted, loss = fit_profile(cases, start, name="mine", log=said.append)
    assert loss < 2e-3
    # A long fit shows it is moving: a line as each pass starts, with replays and seconds.
    assert said[0].startswith("factor 1.3, pass 1: loss ") and " after 1 replays " in said[0]
    hbm, flops = fitted.efficiencies("a100-80gb")
    assert hbm == pytest.approx(0.6, rel=0.08)
    assert flops == pytest.approx(0.45, rel=0.1)
    assert fitted.step_overhead_s == pytest.approx(0.003, rel=0.15)
    assert fitted.name == "mine" and "fitted by pagedsim calibrate" in fitted.sources[
        "hbm_efficiency"]


def test_result_files_are_checked(tmp_path) -> None:
    good = _raw(tmp_path, "x", [10, 20], [5, 6])
    case = case_from_result(good, SETTINGS)
    assert case["rate_per_s"] is None and case["num_prompts"] == 2
    assert case["measured"] == {"p50_ttft_ms": None, "p50_tpot_ms": None,
                                "output_tokens_per_s": 1.0}
    bad = tmp_path / "bad.json"
    for data, message in (
            ({"output_lens": [1], "output_throughput": 1.0}, "needs input_lens"),
            ({"input_lens": [1, 2], "output_lens": [1], "output_throughput": 1.0}, "differ"),
            ({"input_lens": [1], "output_lens": [1], "output_throughput": 1.0,
              "max_concurrency": 8}, "max_concurrency 8"),
            ({"input_lens": [1], "output_lens": [1], "output_throughput": 1.0,
              "request_rate": -2}, "request_rate"),
            ({"input_lens": [1], "output_lens": [1]}, "holds none of"),
            ({"input_lens": [1], "output_lens": [1], "median_tpot_ms": "fast"},
             "p50_tpot_ms must be a number")):
        bad.write_text(json.dumps(data))
        with pytest.raises(ResultFileError, match=message):
            case_from_result(bad, SETTINGS)
    bad.write_text("{nope")
    with pytest.raises(ResultFileError, match="not a readable JSON"):
        case_from_result(bad, SETTINGS)


def test_cli_refusals_are_one_line(tmp_path, capsys) -> None:
    out = str(tmp_path / "p.json")
    missing = str(tmp_path / "missing.json")
    assert main(["calibrate", missing, "--model", "llama-3.1-8b", "--gpu", "a100-80gb",
                 "--out", out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a readable JSON result file" in err[0]
    good = _raw(tmp_path, "g", [10], [5])
    assert main(["calibrate", good, "--model", "llama-3.1-8b", "--gpu", "a100-80gb",
                 "--num-scheduler-steps", "4", "--out", out]) == 2
    assert "--num-scheduler-steps: needs --policy v0" in capsys.readouterr().err
    assert main(["calibrate", good, "--model", "llama-3.1-8b", "--gpu", "a100-80gb",
                 "--start", "nope", "--out", out]) == 2
    assert "--start" in capsys.readouterr().err


def _result_file(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _fields(inputs: list[int], outputs: list[int]) -> str:
    return (f'"input_lens": {json.dumps(inputs)}, "output_lens": {json.dumps(outputs)}, '
            '"request_rate": "inf", "output_throughput": 1.0')


def test_result_files_are_read_strictly_and_bounded(tmp_path, capsys) -> None:
    """Were: a file nested 100,000 deep, or a token count of 10**30, ended in a traceback
    (exit 1); a key given twice kept its last value; a FIFO or /dev/zero was opened; a
    prompt longer than max_model_len was fitted to (every request rejected: loss inf, a
    profile written anyway); 2,000,000 requests ran for hours without a word."""
    many = MAX_FIT_REQUESTS + 1
    files = {
        "deep": (_result_file(tmp_path, "deep.json", "[" * 100_000 + "]" * 100_000),
                 "JSON nested 100,000 deep, more than the 16"),
        "twice": (_result_file(tmp_path, "twice.json",
                               '{"input_lens": [9], ' + _fields([10], [5]) + "}"),
                  "key 'input_lens' given twice"),
        "huge": (_result_file(tmp_path, "huge.json", "{" + _fields([10**30], [5]) + "}"),
                 "request 0 has a 31-digit number prompt + 5 output tokens, more than "
                 "max_model_len 131,072; give the server's --max-model-len"),
        "long": (_result_file(tmp_path, "long.json", "{" + _fields([8, 200_000], [5, 5]) + "}"),
                 "request 1 has 200000 prompt + 5 output tokens"),
        "many": (_result_file(tmp_path, "many.json", "{" + _fields([10] * many, [5] * many)
                              + "}"),
                 f"{many:,} requests, more than the {MAX_FIT_REQUESTS:,} a fit replays"),
        "zero": ("/dev/zero", "it is a character device, not a regular file"),
    }
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo.json")
        files["fifo"] = (str(tmp_path / "fifo.json"), "it is a FIFO")
    half = MAX_FIT_REQUESTS // 2 + 1  # two files each within the cap, over it together
    halves = [_result_file(tmp_path, f"half{i}.json", "{" + _fields([10] * half, [5] * half)
                           + "}") for i in range(2)]
    cases = [([path], needle) for path, needle in files.values()]
    cases.append((halves, f"2 result files hold {2 * half:,} requests in all"))
    for paths, needle in cases:
        out = tmp_path / "fitted.json"
        assert main(["calibrate", *paths, "--model", "llama-3.1-8b", "--gpu", "a100-80gb",
                     "--out", str(out)]) == 2
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            "pagedsim: error: argument RESULTS.json: "), captured.err
        assert needle in lines[0], lines[0]
        assert captured.out == "" and not out.exists()


def test_the_request_limit_is_what_the_help_and_the_readme_say(capsys) -> None:
    from pathlib import Path

    assert main(["calibrate", "--help"]) == 0
    limit = f"at most {MAX_FIT_REQUESTS:,} requests in all"
    assert limit in " ".join(capsys.readouterr().out.split())
    readme = Path(__file__).resolve().parents[2] / "README.md"
    assert limit in " ".join(readme.read_text(encoding="utf-8").split())
