"""The library's errors said back in the flags' words: ``a KV cache of 12 GiB is smaller
than one block of 10000001 tokens ...; lower block_size`` is reported as ``argument
--block-size: ...``, an error about the pool as a whole (the weights do not fit) with the
memory flags the user typed. Used by ``compare`` and ``sweep`` (the Experiment's errors)
and by ``budget`` (the budget's)."""

from __future__ import annotations

import argparse
import re

from ..units import GiB
from .base import CliError

#: Library parameter names -> the flag that sets them, for the library's errors
#: (``a KV cache of 12 GiB is smaller than one block ...; lower block_size``).
_PARAM_FLAGS = {
    "workload": "--workload", "block_size": "--block-size", "num_gpus": "--num-gpus",
    "n": "--n", "beam_width": "--beam-width", "rate": "--rate", "rate_per_s": "--rate",
    "num_requests": "--num-requests", "seed": "--seed", "swap_bytes": "--swap-gb",
    "weights_bytes": "--weights-gb", "activation_bytes": "--activation-gb",
    "gpu_memory_utilization": "--gpu-memory-utilization", "preemption": "--preemption",
    "policy": "--policy", "order": "--order", "on_too_long": "--on-too-long",
    "cost_profile": "--cost-profile",
    "max_num_seqs": "--max-num-seqs", "max_num_batched_tokens": "--max-num-batched-tokens",
    "max_model_len_tokens": "--max-model-len", "max_model_len": "--max-model-len",
    "max_concurrency": "--max-concurrency",
    "random_input_len": "--random-input-len", "random_output_len": "--random-output-len",
    "random_range_ratio": "--random-range-ratio",
}
#: The memory setting's flags (None unless given): named when an error is about the pool
#: as a whole ("the weights do not fit").
_MEMORY_FLAGS = (("preset", "--preset"), ("model", "--model"), ("gpu", "--gpu"),
                 ("num_gpus", "--num-gpus"),
                 ("gpu_memory_utilization", "--gpu-memory-utilization"),
                 ("activation_gb", "--activation-gb"), ("weights_gb", "--weights-gb"))


#: Defaults of the shared options that are not None (the others are None unless given).
_SET_DEFAULTS = {"block_size": 16, "n": 1, "beam_width": 1, "seed": 0, "swap_gb": 4 * GiB,
                 "policy": "v0", "order": "fcfs"}


def _given(args: argparse.Namespace, flag: str) -> bool:
    """Whether ``flag`` was given a value other than its default."""
    dest = _dest(flag)
    return getattr(args, dest, None) not in (None, _SET_DEFAULTS.get(dest))


def _dest(flag: str) -> str:
    """Where argparse stores ``flag`` (``--max-model-len`` -> ``max_model_len``)."""
    return flag.lstrip("-").replace("-", "_")


def error_naming_flags(exc: Exception, args: argparse.Namespace) -> CliError:
    """The library's error as one line naming the flags it is about: the parameters it
    names, and for an error of the pool (no parameter, or a memory one, named) the memory
    flags given too (``--activation-gb 16`` when the message suggests a larger
    gpu_memory_utilization)."""
    message = " ".join(str(exc).split())
    found = {}  # flag -> where the message first names its parameter
    for name, flag in _PARAM_FLAGS.items():
        match = re.search(rf"(?<![\w./-]){name}(?![\w./-])", message)
        if match is not None:
            found[flag] = min(found.get(flag, match.start()), match.start())
    # Only the flags this command has (budget has no --rate), the first place named first.
    flags = [f for f in sorted(found, key=found.__getitem__) if hasattr(args, _dest(f))]
    typed = [flag for flag in flags if _given(args, flag)]
    flags = typed or flags  # the flags the user typed, when the message names any
    memory = {flag for _, flag in _MEMORY_FLAGS} | {"--block-size"}
    if not typed and set(flags) <= memory:
        flags += [flag for dest, flag in _MEMORY_FLAGS if getattr(args, dest, None) is not None]
    if not flags:  # about defaults only: no flag the user typed
        return CliError(message)
    return CliError(f"argument {' / '.join(dict.fromkeys(flags))}: {message}")
