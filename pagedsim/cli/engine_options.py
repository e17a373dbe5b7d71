"""vLLM's engine flags and ``benchmark_serving``'s load flags on ``compare`` and ``sweep``,
under vLLM's own names, and what each turns into in an
:class:`~pagedsim.experiments.Experiment`.

Without any of them a run is what it always was (the paper's vLLM: v0 scheduling, 256
sequences, a budget of ``max(2048, max_model_len)`` tokens, no prefix caching, every
request sent at its arrival). ``--enable-chunked-prefill`` asks for vLLM v1's scheduler
*with v1's defaults* for the GPU (:mod:`pagedsim.engine.vllm_defaults`): those of
``--max-num-batched-tokens`` and ``--max-num-seqs`` that are not given take ``vllm
serve``'s values, as vLLM would.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ..engine.vllm_defaults import SERVE_LARGE_GPU, SERVE_OTHER_GPU, v1_serve_defaults
from ..workloads.random_dataset import (
    DEFAULT_RANDOM_INPUT_LEN,
    DEFAULT_RANDOM_OUTPUT_LEN,
    DEFAULT_RANDOM_RANGE_RATIO,
)
from .argtypes import finite, whole
from .base import CliError

#: Each scheme with vLLM's prefix caching switched on (``--enable-prefix-caching``);
#: schemes missing here have no such version (contiguous and vAttention reserve per
#: request and share nothing; radix and the prefix caches cache already).
PREFIX_CACHING_OF = {"paged": "prefix-cache", "hybrid": "hybrid-prefix-cache"}
#: The default (v0) maximum number of sequences, pagedsim's and vLLM v0's.
V0_MAX_NUM_SEQS = 256
#: Engine flag -> its ``args`` attribute, for "given or not".
ENGINE_FLAGS = {"--max-num-seqs": "max_num_seqs",
                "--max-num-batched-tokens": "max_num_batched_tokens",
                "--max-model-len": "max_model_len",
                "--enable-chunked-prefill": "enable_chunked_prefill",
                "--enable-prefix-caching": "enable_prefix_caching",
                "--max-concurrency": "max_concurrency"}
_RANDOM_FLAGS = (("--random-input-len", "random_input_len"),
                 ("--random-output-len", "random_output_len"),
                 ("--random-range-ratio", "random_range_ratio"))


def add_engine_options(p: argparse.ArgumentParser) -> None:
    """vLLM's engine flags (``vllm serve``'s names) and benchmark_serving's load flags."""
    big_tokens, big_seqs = SERVE_LARGE_GPU
    small_tokens, small_seqs = SERVE_OTHER_GPU
    v1 = ("with --enable-chunked-prefill, vLLM v1's 'vllm serve' default: "
          "{small} ({big} on a GPU of 70 GiB or more that is not an A100: h100-80gb, "
          "h200-141gb)")
    g = p.add_argument_group(
        "vLLM engine flags",
        "vllm serve's names; without them the run is the paper's vLLM (v0 scheduling)")
    g.add_argument("--max-num-seqs", type=whole, default=None, metavar="N",
                   help=f"most sequences in one step (default {V0_MAX_NUM_SEQS}, vLLM "
                        "v0's; " + v1.format(small=small_seqs, big=big_seqs) + ")")
    g.add_argument("--max-num-batched-tokens", type=whole, default=None, metavar="N",
                   help="most tokens (prompt and decode) in one step (default max(2048, "
                        "max_model_len), vLLM v0's without chunked prefill; "
                        + v1.format(small=small_tokens, big=big_tokens) + ")")
    g.add_argument("--max-model-len", type=whole, default=None, metavar="TOKENS",
                   help="longest request in tokens (prompt + output), at most the model's "
                        "context: longer prompts are clipped (a trace: --on-too-long), "
                        "contiguous schemes reserve this much (default: the model's "
                        "context)")
    g.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction,
                   default=None,
                   help="vLLM v1's scheduling (--policy chunked: decodes first, prompts "
                        "split into chunks that fill --max-num-batched-tokens) with v1's "
                        "defaults above; --no-enable-chunked-prefill: v0's (--policy v0). "
                        "Default: --policy's (v0)")
    g.add_argument("--enable-prefix-caching", action="store_true", default=None,
                   help="vLLM's automatic prefix caching: the paged scheme runs as "
                        "prefix-cache (blocks named by hashes, kept after their request "
                        "ends, LRU eviction), hybrid as hybrid-prefix-cache; schemes "
                        "without a prefix-caching version (contiguous, vAttention) run as "
                        "they are (default off, as in the paper's main runs)")
    b = p.add_argument_group(
        "benchmark_serving flags",
        "the load vLLM's benchmark_serving / 'vllm bench serve' sends")
    b.add_argument("--max-concurrency", type=whole, default=None, metavar="N",
                   help="at most N requests in the system at once: a request due while N "
                        "are in is sent when one ends, and its TTFT and latency count "
                        "from then, as benchmark_serving's semaphore (default: no limit)")
    b.add_argument("--random-input-len", type=whole, default=None, metavar="TOKENS",
                   help=f"--workload random: prompt tokens of every request (default "
                        f"{DEFAULT_RANDOM_INPUT_LEN:,}, benchmark_serving's)")
    b.add_argument("--random-output-len", type=whole, default=None, metavar="TOKENS",
                   help=f"--workload random: output tokens of every request (default "
                        f"{DEFAULT_RANDOM_OUTPUT_LEN}, benchmark_serving's)")
    b.add_argument("--random-range-ratio", type=finite, default=None, metavar="R",
                   help="--workload random: draw each length uniformly from the whole "
                        "numbers in [length x (1 - R), length x (1 + R)], R in [0, 1) "
                        f"(default {DEFAULT_RANDOM_RANGE_RATIO:g}: the lengths exactly)")


def _check_at_least_one(args: argparse.Namespace) -> None:
    """Counts that must be at least 1, refused before any work."""
    for flag, dest in (("--max-num-seqs", "max_num_seqs"),
                       ("--max-num-batched-tokens", "max_num_batched_tokens"),
                       ("--max-concurrency", "max_concurrency"),
                       ("--random-input-len", "random_input_len"),
                       ("--random-output-len", "random_output_len")):
        value = getattr(args, dest, None)
        if value is not None and value < 1:
            raise CliError(f"argument {flag}: must be >= 1, got {value}")
    ratio = getattr(args, "random_range_ratio", None)
    if ratio is not None and not 0 <= ratio < 1:
        raise CliError(f"argument --random-range-ratio: must be in [0, 1), got {ratio:g}")
    length = getattr(args, "max_model_len", None)
    if length is not None and length < 2:
        raise CliError(f"argument --max-model-len: must be >= 2 tokens (one prompt and "
                       f"one output token), got {length}")


def engine_fields(args: argparse.Namespace, gpu: str, workload: str) -> dict[str, object]:
    """The :class:`~pagedsim.experiments.Experiment` fields the flags set (only those
    given, and the v1 defaults ``--enable-chunked-prefill`` brings); ``gpu`` and
    ``workload`` are the run's. Raises :class:`CliError` naming the flag for a value
    that cannot be used."""
    _check_at_least_one(args)
    fields: dict[str, object] = {}
    chunked = getattr(args, "enable_chunked_prefill", None)
    if chunked is not None:
        policy = "chunked" if chunked else "v0"
        if args.policy != "v0" and args.policy != policy:  # --policy given, the other way
            flag = "--enable-chunked-prefill" if chunked else "--no-enable-chunked-prefill"
            raise CliError(f"argument {flag}: contradicts --policy {args.policy}; give "
                           "one of them")
        fields["policy"] = policy
    if chunked:
        tokens, seqs = v1_serve_defaults(gpu)
        fields["max_num_batched_tokens"] = tokens
        fields["max_num_seqs"] = seqs
    if args.max_num_seqs is not None:
        fields["max_num_seqs"] = args.max_num_seqs
    if args.max_num_batched_tokens is not None:
        fields["max_num_batched_tokens"] = args.max_num_batched_tokens
    if args.max_model_len is not None:
        fields["max_model_len_tokens"] = args.max_model_len
    if args.max_concurrency is not None:
        fields["max_concurrency"] = args.max_concurrency
    for flag, dest in _RANDOM_FLAGS:
        value = getattr(args, dest)
        if value is None:
            continue
        if workload != "random":
            raise CliError(f"argument {flag}: applies to --workload random, not "
                           f"{workload!r}")
        fields[dest] = value
    return fields


def prefix_caching_schemes(schemes: Sequence[str], flag_given: bool) -> tuple[str, ...]:
    """``schemes`` with ``--enable-prefix-caching`` applied (:data:`PREFIX_CACHING_OF`;
    unchanged without the flag); a list none of which has a prefix-caching version, or
    that would then name a scheme twice, is refused."""
    if not flag_given:
        return tuple(schemes)
    mapped = tuple(PREFIX_CACHING_OF.get(s, s) for s in schemes)
    if not any(s in PREFIX_CACHING_OF for s in schemes):
        raise CliError(f"argument --enable-prefix-caching: none of the schemes "
                       f"{', '.join(schemes)} has a prefix-caching version (those that "
                       f"have: {', '.join(PREFIX_CACHING_OF)})")
    twice = sorted({s for s in mapped if mapped.count(s) > 1})
    if twice:
        raise CliError(f"argument --enable-prefix-caching: with it, --schemes names "
                       f"{', '.join(twice)} twice")
    return mapped
