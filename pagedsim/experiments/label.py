"""An experiment in words: the one line that says what was simulated.

Tables, figure footers and the reports print it (``Setting: ...``): the model on its
GPUs and memory preset, the KV pool, the host tier, the workload, the seed, how a
preempted request is handled, the scheduling, and the step-time constants where they are
not the paper's roofline. A sweep names the fields it varies, and
the line says "swept" for them instead of one value. :meth:`Experiment.label
<pagedsim.experiments.spec.Experiment.label>` is :func:`experiment_label`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..models.budget import kv_budget
from ..units import GiB
from ..wording import count

if TYPE_CHECKING:
    from .spec import Experiment

#: Fields :func:`experiment_label` can name as swept.
SWEPT_FIELDS = ("block_size", "rate_per_s", "n", "beam_width", "preemption",
                "capacity_tokens", "host_cache_gb")


def preemption_text(exp: Experiment) -> str:
    """How a preempted request is handled, in words. Under ``recompute``, groups of
    several sequences are swapped to the CPU pool, as vLLM v0 does (and restarted
    only when it has no room; see :mod:`pagedsim.engine.scheduler`)."""
    if exp.preemption == "recompute" and exp.multi_sequence:
        if exp.swap_bytes == 0:
            return ("preemption by recompute (multi-sequence groups restart: no "
                    "swap space)")
        return "preemption by recompute (multi-sequence groups swap, as in vLLM v0)"
    return f"preemption by {exp.preemption}"


def experiment_label(exp: Experiment, swept: Sequence[str] = ()) -> str:
    """One line saying what ``exp`` simulates, for table and figure captions.

    ``swept`` names fields that vary across a sweep run from this experiment
    (``block_size``, ``rate_per_s``, ``n``, ``beam_width``, ``preemption``,
    ``capacity_tokens``, ``host_cache_gb``): the line says "swept" for them instead of
    this experiment's one value.
    """
    unknown = set(swept) - set(SWEPT_FIELDS)
    if unknown:
        raise ValueError(f"swept: unknown field(s) {sorted(unknown)}; "
                         f"valid: {', '.join(SWEPT_FIELDS)}")
    if exp.is_trace:
        wl = f"trace {os.path.basename(exp.workload)}"
        if exp.num_requests is not None:
            wl += f", first {count(exp.num_requests, 'request')}"
        if "rate_per_s" in swept:
            wl += ", arrivals rescaled to each swept rate"
        elif exp.rate_per_s is not None:
            wl += f", arrivals rescaled to {exp.rate_per_s:g} req/s"
    else:
        at = "swept rates" if "rate_per_s" in swept else f"{exp.rate_per_s:g} req/s"
        wl = f"{exp.workload}-like, {count(exp.num_requests, 'request')} at {at}"
        if exp.workload == "random":  # benchmark_serving's dataset: say its lengths
            spread = (f" (range ratio {exp.random_range_ratio:g})"
                      if exp.random_range_ratio else "")
            wl = (f"random {exp.random_input_len} in / {exp.random_output_len} out tokens"
                  f"{spread}, {count(exp.num_requests, 'request')} at {at}")
    if exp.max_concurrency is not None:
        wl += f", at most {exp.max_concurrency} at once"
    if {"n", "beam_width"} & set(swept):
        extra = ", n or beam width swept"
    else:
        extra = (f", n={exp.n}" if exp.n > 1 else "") + (
            f", beam width {exp.beam_width}" if exp.beam_width > 1 else "")
    gpus = f"{exp.num_gpus} x {exp.gpu}" if exp.num_gpus > 1 else exp.gpu
    preset = f" (preset {exp.preset})" if exp.preset else ""
    if "capacity_tokens" in swept:
        pool = f"KV pool size swept (block {exp.block_size})"
    elif "block_size" in swept:
        kv = kv_budget(exp.model, exp.gpu, weights_bytes=exp.weights_bytes,
                       gpu_memory_utilization=exp.gpu_memory_utilization,
                       activation_bytes=exp.activation_bytes, block_size=1,
                       num_gpus=exp.num_gpus).kv_cache_bytes
        pool = f"{kv / GiB:.4g} GiB of KV cache (block size swept)"
    else:
        pool = f"{exp.capacity_slots():,} KV slots (block {exp.block_size})"
    pre = ("preemption swept (recompute, swap)" if "preemption" in swept
           else preemption_text(exp))
    host = ""
    if "host_cache_gb" in swept:
        host = ", host tier swept"
    elif exp.host_cache_gb:
        host = (f", host tier {exp.host_cache_gb:g} GiB ("
                f"{'write-through' if exp.host_write_through else 'write-back'}, "
                f"{'overlapped' if exp.host_overlap else 'not overlapped'})")
    return (f"{exp.model} on {gpus}{preset}, {pool}{host}, {wl}{extra}, seed {exp.seed}, "
            f"{pre}, {exp.policy} scheduling"
            + (f", {exp.order} order" if exp.order != "fcfs" else "") + _engine_text(exp)
            + (f", step times: cost profile {os.path.basename(exp.cost_profile)}"
               if exp.cost_profile != "paper" else ""))


def _engine_text(exp: Experiment) -> str:
    """vLLM's engine limits where they differ from the paper's run's (nothing else)."""
    parts = []
    if exp.max_num_seqs != 256:
        parts.append(f"max_num_seqs {exp.max_num_seqs}")
    if exp.max_num_batched_tokens is not None:
        parts.append(f"max_num_batched_tokens {exp.max_num_batched_tokens}")
    if exp.max_model_len_tokens is not None:
        parts.append(f"max_model_len {exp.max_model_len_tokens}")
    return "".join(f", {p}" for p in parts)
