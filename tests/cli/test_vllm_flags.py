"""vLLM's engine flags and benchmark_serving's load flags on ``compare`` and ``sweep``
(:mod:`pagedsim.cli.engine_options`): each reaches the run and changes its result, bad
values are refused in one line before any simulation, and ``compare --latency`` prints
benchmark_serving's block with the numbers ``--json`` carries."""

from __future__ import annotations

import json
import math

import pytest
from cli_helpers import error_line as _error_line

from pagedsim.cli import build_parser, main
from pagedsim.cli.experiment_options import experiment
from pagedsim.experiments.run_one import run_scheme

SMALL = ["compare", "--jobs", "1", "--no-write", "--quiet", "--num-requests", "60"]


def _rows(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, dict]:
    assert main([*SMALL, "--json", *extra]) == 0
    return {row["scheme"]: row for row in json.loads(capsys.readouterr().out)}


def _exp(*argv: str):
    return experiment(build_parser().parse_args(["compare", *argv]))


# --------------------------------------------------------------------------------------
# each flag reaches the scheduler, and the result changes with it


def test_max_num_seqs_caps_the_batch(capsys: pytest.CaptureFixture[str]) -> None:
    free = _rows(capsys, "--schemes", "paged", "--rate", "inf")["paged"]
    capped = _rows(capsys, "--schemes", "paged", "--rate", "inf", "--max-num-seqs", "4")["paged"]
    assert free["mean_batch_size"] > 4
    assert capped["mean_batch_size"] <= 4
    assert _exp("--max-num-seqs", "4").scheduler_config().max_num_seqs == 4


def test_max_num_batched_tokens_bounds_each_step() -> None:
    exp = _exp("--enable-chunked-prefill", "--max-num-batched-tokens", "48",
               "--num-requests", "40", "--rate", "inf")
    assert exp.scheduler_config().max_num_batched_tokens == 48
    _, steps = run_scheme(exp, "paged")
    assert steps is not None
    assert (steps["prefill_tokens"] + steps["decode_seqs"]).max() <= 48
    wide = _exp("--enable-chunked-prefill", "--num-requests", "40", "--rate", "inf")
    _, wide_steps = run_scheme(wide, "paged")
    assert wide_steps is not None and (wide_steps["prefill_tokens"]).max() > 48


def test_max_model_len_clips_and_reserves(capsys: pytest.CaptureFixture[str]) -> None:
    exp = _exp("--max-model-len", "300")
    assert exp.max_model_len == 300 and exp.scheduler_config().max_model_len == 300
    assert max(r.prompt_len + r.output_len for r in exp.requests()) <= 300
    full = _rows(capsys, "--schemes", "contiguous-max", "--rate", "inf")["contiguous-max"]
    short = _rows(capsys, "--schemes", "contiguous-max", "--rate", "inf",
                  "--max-model-len", "300")["contiguous-max"]
    # contiguous-max reserves max_model_len a request: far more fit at 300 than at 2,048.
    assert short["mean_batch_size"] > 2 * full["mean_batch_size"]


@pytest.mark.parametrize(("gpu", "tokens", "seqs"), [
    ("a100-40gb", 2048, 256), ("a100-80gb", 2048, 256),
    ("h100-80gb", 8192, 1024), ("h200-141gb", 8192, 1024)])
def test_chunked_prefill_brings_vllm_v1_defaults(gpu: str, tokens: int, seqs: int) -> None:
    cfg = _exp("--gpu", gpu, "--enable-chunked-prefill").scheduler_config()
    assert (cfg.policy, cfg.max_num_batched_tokens, cfg.max_num_seqs) == ("chunked", tokens,
                                                                           seqs)
    given = _exp("--gpu", gpu, "--enable-chunked-prefill", "--max-num-seqs", "7",
                 "--max-num-batched-tokens", "100").scheduler_config()
    assert (given.max_num_batched_tokens, given.max_num_seqs) == (100, 7)
    v0 = _exp("--gpu", gpu, "--no-enable-chunked-prefill").scheduler_config()
    assert (v0.policy, v0.max_num_seqs) == ("v0", 256)


def test_default_run_is_unchanged() -> None:
    """No flag: the paper's vLLM, as before (v0, 256 sequences, max(2048, 2048) tokens)."""
    exp = _exp()
    cfg = exp.scheduler_config()
    assert (cfg.policy, cfg.max_num_seqs, cfg.max_num_batched_tokens) == ("v0", 256, 2048)
    assert (exp.max_concurrency, exp.max_model_len_tokens, exp.workload) == (None, None,
                                                                             "sharegpt")


def test_chunked_prefill_changes_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    v0 = _rows(capsys, "--schemes", "paged")["paged"]
    v1 = _rows(capsys, "--schemes", "paged", "--enable-chunked-prefill")["paged"]
    assert v1["num_steps"] != v0["num_steps"]


def test_prefix_caching_runs_the_prefix_cache(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows(capsys, "--workload", "system-prompt", "--schemes", "paged,contiguous-max",
                 "--enable-prefix-caching")
    assert list(rows) == ["prefix-cache", "contiguous-max"]
    assert rows["prefix-cache"]["prefix_hit_rate"] > 0.5
    plain = _rows(capsys, "--workload", "system-prompt", "--schemes", "paged")["paged"]
    assert plain["prefix_hit_rate"] == 0


def test_rate_inf_sends_everything_at_zero() -> None:
    exp = _exp("--rate", "inf", "--num-requests", "50")
    assert {r.arrival_s for r in exp.requests()} == {0.0}


def test_random_workload_lengths_are_exact() -> None:
    exp = _exp("--workload", "random", "--random-input-len", "321", "--random-output-len",
               "45", "--num-requests", "80")
    assert {(r.prompt_len, r.output_len) for r in exp.requests()} == {(321, 45)}
    default = _exp("--workload", "random", "--num-requests", "5")
    assert {(r.prompt_len, r.output_len) for r in default.requests()} == {(1024, 128)}
    spread = _exp("--workload", "random", "--random-input-len", "400",
                  "--random-output-len", "100", "--random-range-ratio", "0.5",
                  "--num-requests", "400")
    prompts = {r.prompt_len for r in spread.requests()}
    outputs = {r.output_len for r in spread.requests()}
    assert min(prompts) >= 200 and max(prompts) <= 600 and len(prompts) > 100
    assert min(outputs) >= 50 and max(outputs) <= 150


def test_max_concurrency_reaches_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    free = _rows(capsys, "--schemes", "paged", "--rate", "inf")["paged"]
    capped = _rows(capsys, "--schemes", "paged", "--rate", "inf", "--max-concurrency", "3")
    bs = capped["paged"]["benchmark_serving"]
    assert capped["paged"]["mean_batch_size"] <= 3 < free["mean_batch_size"]
    assert bs["max_concurrency"] == 3 and bs["request_rate"] == "inf"
    # TTFT counts from when a request was sent, so waiting for a permit is not in it.
    assert bs["mean_ttft_ms"] < free["benchmark_serving"]["mean_ttft_ms"]


def test_sweep_rate_takes_the_flags(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    assert main(["sweep", "rate", "--values", "2", "--num-requests", "30", "--jobs", "1",
                 "--quiet", "--no-write", "--schemes", "paged", "--enable-prefix-caching",
                 "--workload", "system-prompt", "--max-concurrency", "4"]) == 0
    assert "prefix-cache" in capsys.readouterr().out
    args = build_parser().parse_args(["sweep", "rate", "--max-concurrency", "4",
                                      "--max-num-seqs", "9", "--max-model-len", "500"])
    exp = experiment(args)
    assert (exp.max_concurrency, exp.max_num_seqs, exp.max_model_len) == (4, 9, 500)
    assert "at most 4 at once" in exp.label() and "max_num_seqs 9" in exp.label()


def test_sharing_sweep_names_max_num_seqs(capsys: pytest.CaptureFixture[str],
                                          no_simulation: None) -> None:
    """The sharing sweep runs n up to 6 by default: a smaller --max-num-seqs is named
    (it was "argument --n", a flag not given)."""
    line = _error_line(capsys, ["sweep", "sharing", "--max-num-seqs", "1", "--jobs", "1",
                                "--quiet", "--no-write"])
    assert line.startswith("pagedsim: error: argument --max-num-seqs:") and "--values" in line


# --------------------------------------------------------------------------------------
# compare --latency and --json


def test_latency_block_matches_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--schemes", "paged,contiguous-oracle", "--workload", "random",
            "--random-input-len", "200", "--random-output-len", "30", "--rate", "inf",
            "--max-concurrency", "8"]
    rows = _rows(capsys, *argv)
    assert main([*SMALL, "--latency", *argv]) == 0
    text = capsys.readouterr().out
    blocks = text.split("Serving Benchmark Result: ")[1:]
    assert [b.split()[0] for b in blocks] == ["paged", "contiguous-oracle"]
    for block in blocks:
        bs = rows[block.split()[0]]["benchmark_serving"]
        values = {line[:40].strip(): line[41:].strip() for line in block.splitlines()
                  if line[:40].strip().endswith(":")}
        assert values["Successful requests:"] == str(bs["completed"]) == "60"
        assert values["Maximum request concurrency:"] == "8"
        for metric in ("TTFT", "TPOT", "ITL", "E2EL"):
            key = metric.lower()
            for word, stat in (("Mean", "mean"), ("Median", "median"), ("P99", "p99")):
                assert values[f"{word} {metric} (ms):"] == f"{bs[f'{stat}_{key}_ms']:.2f}"
        assert values["Request throughput (req/s):"] == f"{bs['request_throughput']:.2f}"
        assert bs["total_input_tokens"] == 60 * 200 and bs["total_output_tokens"] == 60 * 30
        assert math.isclose(bs["output_throughput"] * bs["duration"], 60 * 30)


# --------------------------------------------------------------------------------------
# bad values: one line, exit 2, before any run


@pytest.mark.parametrize(("argv", "words"), [
    (["--max-num-seqs", "0"], ["--max-num-seqs", "must be >= 1", "0"]),
    (["--max-num-seqs", "many"], ["--max-num-seqs", "many"]),
    (["--max-num-batched-tokens", "-5"], ["--max-num-batched-tokens", ">= 1", "-5"]),
    (["--max-model-len", "1"], ["--max-model-len", ">= 2", "1"]),
    (["--max-model-len", "4096"], ["--max-model-len", "2,048", "4,096"]),
    (["--max-concurrency", "0"], ["--max-concurrency", ">= 1", "0"]),
    (["--random-input-len", "100"], ["--random-input-len", "--workload random",
                                     "sharegpt"]),
    (["--workload", "random", "--random-range-ratio", "1"],
     ["--random-range-ratio", "[0, 1)", "1"]),
    (["--workload", "random", "--random-input-len", "2000"],
     ["--random-input-len", "2,048", "2,000 + 128"]),
    (["--workload", "random", "--max-model-len", "1000"],
     ["--max-model-len", "1,000", "1,024 + 128"]),
    (["--enable-prefix-caching", "--schemes", "contiguous-max"],
     ["--enable-prefix-caching", "contiguous-max", "paged"]),
    (["--enable-prefix-caching", "--schemes", "paged,prefix-cache"],
     ["--enable-prefix-caching", "prefix-cache", "twice"]),
    (["--enable-chunked-prefill", "--policy", "v0"], []),  # agrees: not an error
    (["--no-enable-chunked-prefill", "--policy", "chunked"],
     ["--no-enable-chunked-prefill", "--policy chunked"]),
])
def test_bad_values_are_one_line(capsys: pytest.CaptureFixture[str], no_simulation: None,
                                 argv: list[str], words: list[str]) -> None:
    if not words:
        return
    line = _error_line(capsys, [*SMALL, *argv])
    for word in words:
        assert word in line, line


def test_sweep_refuses_prefix_caching_where_it_has_no_schemes(
        capsys: pytest.CaptureFixture[str], no_simulation: None) -> None:
    line = _error_line(capsys, ["sweep", "block-size", "--enable-prefix-caching",
                                "--no-write", "--quiet", "--jobs", "1"])
    assert "--enable-prefix-caching" in line and "block-size" in line


def test_help_says_each_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for phrase in ("--max-num-seqs N most sequences in one step (default 256",
                   "(default max(2048, max_model_len)", "default: the model's context",
                   "--no-enable-chunked-prefill", "default off", "(default: no limit)",
                   "(default 1,024, benchmark_serving's)", "(default 128,",
                   "inf: every request at t = 0", "--latency"):
        assert phrase in text, phrase


@pytest.mark.parametrize(("argv", "profile"), [
    ((), "paper"),  # the paper's setting
    (("--model", "llama-3.1-8b", "--gpu", "a100-80gb"), "vllm"),  # a deployment
    (("--gpu", "h100-80gb"), "vllm"),
    (("--preset", "paper-opt-13b", "--model", "opt-13b"), "paper"),  # a preset: its own
    (("--model", "llama-3.1-8b", "--cost-profile", "paper"), "paper"),  # the flag wins
    (("--cost-profile", "vllm"), "vllm"),
])
def test_the_cost_profile_follows_the_memory_setting(argv, profile) -> None:
    """vLLM's memory defaults and vLLM's timing come together: --model or --gpu without
    --preset time steps with the profile fitted to public vLLM runs; the paper's setting
    keeps the paper's roofline; --cost-profile overrides both. The label says so."""
    exp = _exp(*argv)
    assert exp.cost_profile == profile
    assert ("cost profile vllm" in exp.label()) == (profile == "vllm")


def test_a_deployment_is_timed_by_the_fitted_profile(capsys) -> None:
    """The same flags give slower, vLLM-like steps than the roofline at peak."""
    base = ("--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--num-requests", "40",
            "--rate", "4")
    fitted = _rows(capsys, *base)["paged"]["benchmark_serving"]["median_tpot_ms"]
    roofline = _rows(capsys, *base, "--cost-profile", "paper")["paged"]["benchmark_serving"][
        "median_tpot_ms"]
    assert fitted > 1.1 * roofline
