"""``benchmark_serving``'s ``random`` dataset: prompts and outputs of fixed lengths.

vLLM's ``benchmark_serving --dataset-name random`` (and ``vllm bench serve``) sends
prompts of ``--random-input-len`` tokens (default 1,024) and asks for exactly
``--random-output-len`` tokens (default 128) with the end-of-sequence token ignored.
``--random-range-ratio r`` (default 0, in [0, 1)) draws each length instead, uniformly
among the integers from ``floor(length * (1 - r))`` to ``ceil(length * (1 + r))``
(inclusive; never below 1 token here). Only the lengths matter to the simulator, so the
workload is a :class:`~pagedsim.workloads.workload.WorkloadConfig` of kind ``fixed`` (r = 0)
or ``uniform`` on those ranges, with Poisson arrivals as every synthetic workload.
"""

from __future__ import annotations

import math
from numbers import Real

from ..validate import check_int
from .workload import WorkloadConfig

#: benchmark_serving's defaults for the random dataset (tokens).
DEFAULT_RANDOM_INPUT_LEN = 1024
DEFAULT_RANDOM_OUTPUT_LEN = 128
DEFAULT_RANDOM_RANGE_RATIO = 0.0


def check_range_ratio(value: object, name: str = "random_range_ratio") -> float:
    """A range ratio: a number in [0, 1), as vLLM requires."""
    if isinstance(value, bool) or not isinstance(value, Real) \
            or not (0 <= float(value) < 1):
        raise ValueError(f"{name} must be a number in [0, 1), got {value!r}")
    return float(value)


def length_range(length: int, range_ratio: float) -> tuple[int, int]:
    """The inclusive range of token counts ``length`` is drawn from under ``range_ratio``
    (both ends ``length`` when it is 0; the low end at least 1)."""
    low = max(1, math.floor(length * (1 - range_ratio)))
    return low, max(low, math.ceil(length * (1 + range_ratio)))


def random_workload_config(input_len: int, output_len: int, range_ratio: float,
                           **common: object) -> WorkloadConfig:
    """The :class:`WorkloadConfig` of the random dataset; ``common`` holds the other
    fields (``num_requests``, ``rate_per_s``, ``seed``, ``max_model_len``, ``n``,
    ``beam_width``). A length range that does not fit ``max_model_len`` is an error
    (WorkloadConfig's), not clipped: the lengths are what the user asked for."""
    check_int("random_input_len", input_len, minimum=1)
    check_int("random_output_len", output_len, minimum=1)
    ratio = check_range_ratio(range_ratio)
    if ratio == 0:
        return WorkloadConfig(kind="fixed", prompt_len=input_len, output_len=output_len,
                              **common)  # type: ignore[arg-type]
    return WorkloadConfig(kind="uniform", prompt_len_range=length_range(input_len, ratio),
                          output_len_range=length_range(output_len, ratio),
                          **common)  # type: ignore[arg-type]
