"""The validation table (pagedsim.experiments.validate): its data file, its replay of a
case, its error arithmetic, and its refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pagedsim.experiments import validate
from pagedsim.experiments.validate import CaseResult, case_requests, load_measurements
from pagedsim.models.specs import GPUS, get_model

DATA = load_measurements()
CASES = DATA["cases"]


def test_every_case_is_complete_and_sourced() -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids))
    for case in CASES:
        get_model(case["model"])
        assert case["gpu"] in GPUS
        assert case["source"].startswith("https://")
        assert case["use"] in ("fit", "check")
        assert case["scheduler"] in ("v0", "chunked")
        assert any(v is not None for v in case["measured"].values()), case["id"]
        wl = case["workload"]
        if isinstance(wl, str):
            assert wl in DATA["workloads"]
    for wl in DATA["workloads"].values():
        assert all(s.startswith("https://") for s in wl["sources"])


def test_sharegpt_requests_have_the_published_means_and_limits() -> None:
    case = next(c for c in CASES if c["workload"] == "sharegpt-llama3")
    spec = DATA["workloads"]["sharegpt-llama3"]
    reqs = case_requests({**case, "num_prompts": 20_000, "rate_per_s": 4.0}, DATA["workloads"])
    prompt = np.array([r.prompt_len for r in reqs])
    output = np.array([r.output_len for r in reqs])
    assert prompt.mean() == pytest.approx(spec["mean_input_tokens"], rel=0.03)
    assert output.mean() == pytest.approx(spec["mean_output_tokens"], rel=0.03)
    assert prompt.max() <= spec["max_input_tokens"]
    assert (prompt + output).max() <= spec["max_total_tokens"]
    gaps = np.diff([r.arrival_s for r in reqs])
    assert reqs[0].arrival_s == 0 and gaps.mean() == pytest.approx(0.25, rel=0.03)
    burst = case_requests({**case, "rate_per_s": None}, DATA["workloads"])
    assert {r.arrival_s for r in burst} == {0.0}


def test_random_workload_is_fixed_length() -> None:
    case = {**CASES[0], "workload": {"dataset": "random", "input_tokens": 1024,
                                     "output_tokens": 128}, "num_prompts": 7}
    reqs = case_requests(case, DATA["workloads"])
    assert {(r.prompt_len, r.output_len) for r in reqs} == {(1024, 128)}


def test_a_random_burst_is_below_saturation_only_if_the_first_step_takes_it_whole() -> None:
    case = {"rate_per_s": None, "num_prompts": 2, "max_num_seqs": 256,
            "max_num_batched_tokens": 2048,
            "workload": {"dataset": "random", "input_tokens": 1024, "output_tokens": 8}}
    assert validate.below_saturation(case)
    assert not validate.below_saturation({**case, "num_prompts": 3})


def test_prefix_cached_runs_have_no_ttft_target() -> None:
    measured = {"p50_ttft_ms": 100.0, "p50_tpot_ms": 10.0}
    r = CaseResult({"id": "x", "measured": measured, "rate_per_s": 4.0,
                    "prefix_cached": True}, {"p50_ttft_ms": 100.0, "p50_tpot_ms": 10.0})
    assert r.meets("p50_ttft_ms") is None and r.meets("p50_tpot_ms") is True


def test_a_case_sets_its_pool_and_its_all_reduce_link() -> None:
    """kv_cache_tokens (the pool vLLM logged) bounds the batch; a case's own allreduce_s
    and tp_link_bytes_per_s (GPUs without peer-to-peer access) slow its steps."""
    case = next(c for c in CASES if c["id"] == "v0101-q7b-2xa100-4k-b50")
    profile = validate.get_cost_profile("vllm")
    small = {**case, "num_prompts": 8, "workload": {"dataset": "random",
                                                    "input_tokens": 512,
                                                    "output_tokens": 64}}
    slow = validate.simulate_case(small, None, profile).predicted["p50_tpot_ms"]
    nvlink = {k: v for k, v in small.items() if k not in ("allreduce_s", "tp_link_bytes_per_s")}
    fast = validate.simulate_case(nvlink, None, profile).predicted["p50_tpot_ms"]
    assert slow > fast
    tight = validate.simulate_case({**small, "kv_cache_tokens": 4 * 576}, None, profile)
    loose = validate.simulate_case(small, None, profile)
    assert tight.predicted["output_tokens_per_s"] < loose.predicted["output_tokens_per_s"]


def test_qwen2_7b_preset_matches_what_vllm_logged() -> None:
    """The V1 cases' model: 7,615,616,512 parameters (Hugging Face's 7.62B), and the
    pools vLLM logged in tokens are the GiB it logged at the preset's bytes a token."""
    model = get_model("qwen2-7b")
    assert model.params.total == 7_615_616_512
    logged = {93_872: 5.01, 464_848: 24.83}
    for tokens, gib in logged.items():
        assert tokens * model.bytes_per_token / 2**30 == pytest.approx(gib, abs=0.01)
    pools = {c["kv_cache_tokens"] for c in CASES if c["model"] == "qwen2-7b"
             and c["num_gpus"] == 1}
    assert pools == set(logged)


def test_readme_counts_the_committed_cases() -> None:
    """The README's case counts are the data file's (fast; the slow test below recomputes
    its rows)."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    words = {"Six": 6, "Seven": 7, "Eight": 8, "Nine": 9, "Ten": 10, "Eleven": 11,
             "Twelve": 12}
    total = re.search(r"prints predicted beside measured\. (\d+)\s+cases:", readme)
    fits = re.search(r"(\w+) cases were used to fit the\s+`vllm` profile \(marked `fit`\), "
                     r"the other (\d+) only check it", readme)
    assert total and fits
    n_fit = sum(c["use"] == "fit" for c in CASES)
    assert int(total.group(1)) == len(CASES)
    assert words[fits.group(1)] == n_fit and int(fits.group(2)) == len(CASES) - n_fit


def _result(measured: dict, predicted: dict, rate: float | None = 4.0) -> CaseResult:
    return CaseResult({"id": "x", "measured": measured, "rate_per_s": rate}, predicted)


def test_errors_and_targets() -> None:
    r = _result({"output_tokens_per_s": 1000.0, "p50_tpot_ms": 10.0, "p50_ttft_ms": 100.0},
                {"output_tokens_per_s": 1190.0, "p50_tpot_ms": 7.9, "p50_ttft_ms": 49.0})
    assert r.error("output_tokens_per_s") == pytest.approx(0.19)
    assert r.meets("output_tokens_per_s") is True
    assert r.meets("p50_tpot_ms") is False  # -21%
    assert r.meets("p50_ttft_ms") is False  # 0.49x: more than 2x off
    assert _result({"p50_ttft_ms": 100.0}, {"p50_ttft_ms": 199.0}).meets("p50_ttft_ms")
    saturated = _result({"p50_ttft_ms": 100.0}, {"p50_ttft_ms": 1.0}, rate=None)
    assert saturated.meets("p50_ttft_ms") is None  # no TTFT target at saturation
    assert _result({}, {"p50_tpot_ms": 3.0}).error("p50_tpot_ms") is None
    assert _result({"p50_tpot_ms": 3.0}, {"p50_tpot_ms": math.nan}).meets("p50_tpot_ms") \
        is False
    med = validate.median_abs_errors([r, _result({"p50_tpot_ms": 10.0}, {"p50_tpot_ms": 13.0})])
    assert med["p50_tpot_ms"] == pytest.approx((0.21 + 0.3) / 2)
    assert math.isnan(validate.median_abs_errors([])["p50_tpot_ms"])


def test_one_case_replays_and_prints() -> None:
    results = validate.run_cases(validate.get_cost_profile("vllm"), ["vllm060-8b-a100-r4"])
    (r,) = results
    assert r.predicted["p50_tpot_ms"] > 0 and r.predicted["p50_ttft_ms"] > 0
    text = validate.format_table(results, "vllm")
    assert "vllm060-8b-a100-r4" in text and "median |error|" in text


def test_cli_refusals(capsys) -> None:
    assert validate.main(["--cost-profile", "nope"]) == 2
    assert "--cost-profile" in capsys.readouterr().err
    assert validate.main(["--case", "nope"]) == 2
    assert "--case 'nope' is not a committed case" in capsys.readouterr().err


@pytest.mark.slow
def test_readme_quotes_what_the_validation_computes() -> None:
    """The README's validation rows are the module's own output, for both profiles."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    for name in ("paper", "vllm"):
        results = validate.run_cases(validate.get_cost_profile(name))
        row = validate.summary_row(results, name)
        assert row in readme, row
