"""vLLM v1's scheduling defaults for ``vllm serve``, per GPU.

vLLM v1 always schedules with chunked prefill (decodes first, prompt chunks fill a token
budget). When ``--max-num-batched-tokens`` and ``--max-num-seqs`` are not given, its
``EngineArgs.get_batch_defaults`` picks them from the GPU and the usage context (the API
server, ``vllm serve``, or the offline ``LLM`` class). For the API server, which
``benchmark_serving`` / ``vllm bench serve`` measure:

    GPU                                           max_num_batched_tokens  max_num_seqs
    >= 70 GiB of memory and not an A100           8192                    1024
    (H100, H200, MI300x)
    any other (A100-40GB, A100-80GB, ...)         2048                    256

(the offline ``LLM`` class gets 16384 / 8192 tokens; vLLM keeps A100s on the small
budget because a larger one lowered their throughput, its PR #17885). Read in vLLM's
``vllm/engine/arg_utils.py`` (``get_batch_defaults``) of its recent v1 releases; which
release raised the large GPUs' sequences from 256 to 1024 was not pinned down here,
and earlier v1 releases used 256 sequences on every GPU. vLLM v0 without chunked prefill batched
``max(max_model_len, 2048)`` tokens and 256 sequences, which is what pagedsim's default
(the paper's) run uses.
"""

from __future__ import annotations

from ..models.specs import GpuSpec, get_gpu
from ..units import GiB

#: GPUs with at least this much memory get the large budget, unless they are A100s.
LARGE_GPU_BYTES = 70 * GiB
#: ``(max_num_batched_tokens, max_num_seqs)`` of ``vllm serve`` on a large and on any
#: other GPU (the module docstring has the rule and its source).
SERVE_LARGE_GPU = (8192, 1024)
SERVE_OTHER_GPU = (2048, 256)


def v1_serve_defaults(gpu: GpuSpec | str) -> tuple[int, int]:
    """``(max_num_batched_tokens, max_num_seqs)`` that ``vllm serve`` (vLLM v1) uses on
    ``gpu`` when neither is given."""
    spec = get_gpu(gpu) if isinstance(gpu, str) else gpu
    large = spec.memory_bytes >= LARGE_GPU_BYTES and "a100" not in spec.name.lower()
    return SERVE_LARGE_GPU if large else SERVE_OTHER_GPU
