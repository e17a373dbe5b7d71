"""Fit a cost profile's constants to measured ``benchmark_serving`` results.

``pagedsim calibrate RESULTS.json ... --model M --gpu G`` reads result files that vLLM's
``benchmarks/benchmark_serving.py --save-result`` or ``vllm bench serve --save-result
--save-detailed`` wrote, turns each into a validation case
(:mod:`pagedsim.experiments.validate`: the same replay), fits the constants of a cost
profile (:mod:`pagedsim.models.cost_profiles`) to them, and writes the fitted profile, to
be used with ``--cost-profile FILE``.

What a result file must hold (its field names as those scripts write them):
``input_lens`` and ``output_lens`` (each request's tokens; the replay sends the same
requests), ``request_rate`` (a number, or ``"inf"``: all at once; the replay draws
Poisson arrivals at that rate, seeded, as the benchmark does) and at least one of
``median_ttft_ms``, ``median_tpot_ms`` and ``output_throughput``. Runs with
``max_concurrency`` set are refused (the replay has no client-side cap).

The fit (:func:`fit_profile`) minimises the mean squared log error of the predictions
(output throughput and median TPOT, and median TTFT at a quarter of the weight where the
run is below saturation) by coordinate descent: each constant in turn is multiplied by a
factor above and below 1 while that lowers the loss (at most ``max_sweeps`` passes a
factor), and the factors shrink from 1.3 to 1.03. The constants fitted: the HBM and
FLOP/s fractions of each GPU the runs used, the fixed and per-sequence step overheads,
and the all-reduce latency when a run used tensor parallelism. The per-layer overhead and
the all-reduce link's bandwidth are kept as the start profile has them: on one model the
per-layer and the fixed overhead cannot be told apart, and the link's bandwidth shows
only in the prefill chunks of tensor-parallel runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..models.cost_profiles import CostProfile
from ..user_files import JsonFileError, NotRegularFileError, read_json_file
from ..validate import shown_value
from .validate import CaseResult, simulate_case

#: Weight of median TTFT in the loss, against throughput and TPOT.
TTFT_WEIGHT = 0.25
#: The factors each coordinate-descent round tries (above and below 1).
STEP_FACTORS = (1.3, 1.1, 1.03)
#: A constant at 0 is tried at this value first (seconds), then moved by the factors.
ZERO_START_S = 1e-6
#: Bytes a result file may have (``--save-detailed`` adds every request's token times:
#: about 6 MB for 1,000 requests of 256 output tokens).
MAX_RESULT_BYTES = 256 * 2**20
#: How deep a result file's JSON may nest (its lists of token times are two deep).
MAX_RESULT_DEPTH = 16
#: Requests in all the result files of one fit. The fit replays every file up to
#: 1 + 3 factors x 4 passes x 2 tries x the constants times (97 with 4 constants: one GPU,
#: no tensor parallelism); a fit of one 10,000-request file took 275 s on 2 cores
#: (llama-3.1-8b on a100-80gb), so this bounds a fit to about 10 minutes there.
MAX_FIT_REQUESTS = 20_000


class ResultFileError(ValueError):
    """A result file that cannot be replayed (named, with what is missing)."""


def case_from_result(path: str | Path, settings: dict[str, Any]) -> dict[str, Any]:
    """A validation case from one ``benchmark_serving`` result file; ``settings`` holds
    the server's: ``model``, ``gpu``, ``num_gpus``, ``scheduler``, ``max_model_len``,
    ``max_num_batched_tokens``, ``max_num_seqs``, ``num_scheduler_steps`` (and
    optionally ``gpu_memory_utilization``)."""
    where = str(path)
    try:
        data = read_json_file(path, MAX_RESULT_BYTES, MAX_RESULT_DEPTH)
    except NotRegularFileError as err:
        raise ResultFileError(f"{where}: not a readable JSON result file (it is "
                              f"{err.kind}, not a regular file)") from None
    except (OSError, JsonFileError) as err:
        raise ResultFileError(f"{where}: not a readable JSON result file ({err})") from None
    if not isinstance(data, dict):
        raise ResultFileError(f"{where}: a result file is a JSON object")
    if data.get("max_concurrency") not in (None, "None"):
        raise ResultFileError(f"{where}: max_concurrency {data['max_concurrency']!r} is set; "
                              "runs with a client-side concurrency cap are not replayed")
    for key in ("input_lens", "output_lens"):
        lens = data.get(key)
        if not isinstance(lens, list) or not lens or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in lens):
            raise ResultFileError(f"{where}: needs {key}, a list of token counts (save it "
                                  "with --save-result, and --save-detailed in vllm bench "
                                  "serve)")
    if len(data["input_lens"]) != len(data["output_lens"]):
        raise ResultFileError(f"{where}: input_lens and output_lens differ in length")
    if len(data["input_lens"]) > MAX_FIT_REQUESTS:
        raise ResultFileError(f"{where}: {len(data['input_lens']):,} requests, more than the "
                              f"{MAX_FIT_REQUESTS:,} a fit replays (it replays every file up "
                              "to about 100 times); benchmark with fewer prompts")
    max_len = settings["max_model_len"]
    for i, (prompt, output) in enumerate(zip(data["input_lens"], data["output_lens"],
                                             strict=True)):
        if prompt + output > max_len:  # the server would have refused it
            raise ResultFileError(
                f"{where}: request {i} has {shown_value(prompt)} prompt + "
                f"{shown_value(output)} output tokens, more than max_model_len {max_len:,}; "
                "give the server's --max-model-len")
    rate = data.get("request_rate", "inf")
    if rate in ("inf", None) or (isinstance(rate, float) and math.isinf(rate)):
        rate = None
    elif isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
        raise ResultFileError(f"{where}: request_rate must be a number > 0 or \"inf\", "
                              f"got {rate!r}")
    measured = {"p50_ttft_ms": data.get("median_ttft_ms"),
                "p50_tpot_ms": data.get("median_tpot_ms"),
                "output_tokens_per_s": data.get("output_throughput")}
    for key, value in measured.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not value > 0):
            raise ResultFileError(f"{where}: {key} must be a number > 0, got {value!r}")
    if all(v is None for v in measured.values()):
        raise ResultFileError(f"{where}: holds none of median_ttft_ms, median_tpot_ms, "
                              "output_throughput")
    return {**settings, "id": Path(path).name, "use": "fit", "source": where,
            "workload": {"dataset": "recorded", "input_lens": data["input_lens"],
                         "output_lens": data["output_lens"]},
            "num_prompts": len(data["input_lens"]), "rate_per_s": rate,
            "measured": {k: (float(v) if v is not None else None)
                         for k, v in measured.items()}}


def check_fit_size(cases: Sequence[dict[str, Any]]) -> int:
    """The requests of ``cases`` in all; raises :class:`ResultFileError` over
    :data:`MAX_FIT_REQUESTS` (the fit would run for hours)."""
    total = sum(c["num_prompts"] for c in cases)
    if total > MAX_FIT_REQUESTS:
        raise ResultFileError(f"{len(cases)} result files hold {total:,} requests in all, more "
                              f"than the {MAX_FIT_REQUESTS:,} a fit replays (it replays every "
                              "file up to about 100 times); give fewer files")
    return total


def case_loss(result: CaseResult) -> tuple[float, float]:
    """(weighted sum of squared log errors, sum of weights) of one replayed case."""
    total = weight = 0.0
    for metric in ("output_tokens_per_s", "p50_tpot_ms", "p50_ttft_ms"):
        err = result.error(metric)
        if err is None:
            continue
        w = 1.0
        if metric == "p50_ttft_ms":
            if result.meets(metric) is None:  # saturated: TTFT is queueing, left out
                continue
            w = TTFT_WEIGHT
        if math.isnan(err) or err <= -1:
            return math.inf, 1.0
        total += w * math.log1p(err) ** 2
        weight += w
    return total, weight


def profile_loss(profile: CostProfile, cases: Sequence[dict[str, Any]]) -> float:
    """The mean weighted squared log error of ``profile``'s predictions over ``cases``."""
    total = weight = 0.0
    for case in cases:
        t, w = case_loss(simulate_case(case, None, profile))
        total += t
        weight += w
    return total / weight if weight else math.nan


def _params(profile: CostProfile, cases: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """The constants to fit: (field, GPU or '') pairs."""
    gpus = sorted({c["gpu"] for c in cases})
    out = [(f, g) for g in gpus for f in ("hbm_efficiency", "flops_efficiency")]
    out += [("step_overhead_s", ""), ("step_overhead_per_seq_s", "")]
    if any(c["num_gpus"] > 1 for c in cases):
        out.append(("allreduce_s", ""))
    return out


def _get(profile: CostProfile, field: str, gpu: str) -> float:
    if gpu:
        return profile.efficiencies(gpu)[0 if field == "hbm_efficiency" else 1]
    return getattr(profile, field)


def _set(profile: CostProfile, field: str, gpu: str, value: float) -> CostProfile:
    if gpu:
        table = dict(getattr(profile, field))
        table[gpu] = min(value, 1.0)
        return replace(profile, **{field: table})
    return replace(profile, **{field: value})


def fit_profile(cases: Sequence[dict[str, Any]], start: CostProfile, name: str = "fitted",
                log: Callable[[str], None] | None = None, max_sweeps: int = 4
                ) -> tuple[CostProfile, float]:
    """Fit ``start``'s constants to ``cases`` (the module docstring; at most
    ``max_sweeps`` passes over the constants per factor); returns the fitted profile
    (named ``name``, its sources naming the cases) and its loss."""
    if not cases:
        raise ValueError("fit_profile needs at least one case")
    check_fit_size(cases)
    best = replace(start, name=name)
    for gpu in sorted({c["gpu"] for c in cases}):  # every GPU named, at start's values
        hbm, flops = best.efficiencies(gpu)
        best = _set(_set(best, "hbm_efficiency", gpu, hbm), "flops_efficiency", gpu, flops)
    best_loss = profile_loss(best, cases)
    replays, began_s = 1, time.monotonic()
    for factor in STEP_FACTORS:
        improved, sweeps = True, 0
        while improved and sweeps < max_sweeps:
            improved, sweeps = False, sweeps + 1
            if log is not None:  # a long fit shows it is moving
                log(f"factor {factor:g}, pass {sweeps}: loss {best_loss:.5f} after {replays} "
                    f"replays of the cases, {time.monotonic() - began_s:.0f} s")
            for field, gpu in _params(best, cases):
                value = _get(best, field, gpu)
                tries = ([ZERO_START_S] if value == 0 else
                         [value * factor, value / factor])
                for candidate in tries:
                    if gpu and candidate > 1.0 and value >= 1.0:
                        continue
                    trial = _set(best, field, gpu, candidate)
                    loss = profile_loss(trial, cases)
                    replays += 1
                    if loss < best_loss - 1e-12:
                        best, best_loss, improved = trial, loss, True
                        if log is not None:
                            log(f"  {field}{'[' + gpu + ']' if gpu else ''} = "
                                f"{_get(best, field, gpu):.4g}: loss {best_loss:.5f}")
                        break
    ids = ", ".join(c["id"] for c in cases)
    fitted = {f: f"fitted by pagedsim calibrate to {ids}" for f in
              ("hbm_efficiency", "flops_efficiency", "step_overhead_s",
               "step_overhead_per_seq_s", "allreduce_s")}
    return replace(best, sources={**start.sources, **fitted}), best_loss
