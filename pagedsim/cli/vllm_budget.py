"""``pagedsim budget`` in vLLM's terms: the KV memory of one GPU, vLLM v1's KV-cache
groups and block count (:mod:`pagedsim.models.vllm_kv`), one computed step per line, and the two
lines vLLM logs at start-up. Sizes in binary units (GiB = 2**30 bytes)."""

from __future__ import annotations

import argparse
import json
from collections import Counter

from ..models.hf_config import max_model_len_note
from ..models.kv_spec import shard_for_tp
from ..models.specs import ModelSpec, get_gpu
from ..models.vllm_kv import DEFAULT_MAX_NUM_BATCHED_TOKENS, VllmKVCache, vllm_kv_cache
from ..units import GiB, KiB, MiB
from ..validate import check_int
from .base import CliError
from .flag_errors import error_naming_flags

#: Flags that ask for vLLM's sizing (with any of them, or a model that is not uniform
#: full attention, ``pagedsim budget`` prints this report instead of the seed's).
VLLM_FLAGS = ("kv_cache_memory_gb", "tensor_parallel_size", "pipeline_parallel_size",
              "kv_cache_dtype", "max_model_len", "max_num_batched_tokens")

#: Block size vLLM's MLA backends (FlashMLA) use; the default for MLA models here.
MLA_BLOCK_SIZE = 64


def _num(x: float, decimals: int = 2) -> str:
    text = f"{x:.{decimals}f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _size(num_bytes: float) -> str:
    """Bytes in the largest binary unit that keeps the value >= 1."""
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(num_bytes) >= scale:
            return f"{_num(num_bytes / scale, 4 if unit == 'GiB' else 2)} {unit}"
    return f"{_num(num_bytes)} bytes"


def wants_vllm_report(args: argparse.Namespace, spec: ModelSpec) -> bool:
    """Whether ``budget`` prints vLLM's sizing: a vLLM flag is given or the model is
    hybrid, sliding-window or MLA (the seed's formula does not describe it)."""
    return (any(getattr(args, flag) is not None for flag in VLLM_FLAGS)
            or args.disable_hybrid_kv_cache_manager or not spec.is_uniform_full_attention)


def _layer_lines(spec: ModelSpec, tp: int, dtype_bytes: int) -> list[str]:
    """The layers by kind, with their per-GPU shape and bytes per token."""
    lines = []
    counts = Counter(spec.kv_layers)
    for layer, count in counts.items():
        local = shard_for_tp(layer, tp)
        if layer.kind == "mla":
            lines.append(f"{count} MLA layers: one latent of {layer.head_dim} values per token "
                         f"(kv_lora_rank + qk_rope_head_dim, no factor 2), whole on every "
                         f"GPU: {count} x {layer.head_dim} x {dtype_bytes} bytes "
                         f"= {_size(count * local.bytes_per_token(dtype_bytes))} per token")
            continue
        what = ("full-attention" if layer.kind == "full"
                else f"sliding-window ({layer.window_tokens} tokens)" if layer.kind == "sliding"
                else layer.kind)
        heads = (f"{layer.num_kv_heads} KV heads" if tp == 1 else
                 f"{layer.num_kv_heads} KV heads / TP {tp} = {local.num_kv_heads} per GPU"
                 + (" (replicated)" if tp > layer.num_kv_heads else ""))
        lines.append(f"{count} {what} layers: {heads}; 2 (K and V) x {count} x "
                     f"{local.num_kv_heads} x {layer.head_dim} head_dim x {dtype_bytes} bytes "
                     f"= {_size(count * local.bytes_per_token(dtype_bytes))} per token")
    return lines


def vllm_text(r: VllmKVCache, spec: ModelSpec, memory_line: str) -> str:
    """The report, one computed step per line, then vLLM's two lines."""
    block, page = r.block_size, r.page_size_bytes
    note = max_model_len_note(spec) if r.max_model_len == spec.max_model_len else None
    lines = [
        f"KV-cache sizing as vLLM v1 does it: {r.model}, TP {r.tensor_parallel_size} x PP "
        f"{r.pipeline_parallel_size}, kv_cache_dtype {r.kv_cache_dtype} ({r.dtype_bytes} "
        f"byte{'s' if r.dtype_bytes > 1 else ''} per value), block_size {block} "
        "(1 GiB = 2**30 bytes)",
        "",
        memory_line,
        *([f"{note}; --max-model-len sets another"] if note else []),
        *_layer_lines(spec, r.tensor_parallel_size, r.dtype_bytes),
    ]
    if r.pipeline_parallel_size > 1:
        lines[-1] += " (these are the whole model's layers; each stage holds its share)"
    if r.pipeline_parallel_size > 1:
        lines.append(f"pipeline stages hold {', '.join(map(str, r.stage_layers))} layers "
                     "(vLLM's split: the remainder on the stages before the last)")
    fullest = ", fullest stage" if r.pipeline_parallel_size > 1 else ""
    lines.append(f"bytes per token on one GPU = {_size(r.bytes_per_token)} "
                 f"({r.bytes_per_token} bytes{fullest})")
    if (spec.num_heads != spec.num_kv_heads or spec.layers) and not any(
            layer.kind == "mla" for layer in spec.kv_layers):
        seed = 2 * spec.num_layers * spec.num_heads * spec.head_dim * r.dtype_bytes
        lines.append(f"(the seed's formula with attention heads, 2 x {spec.num_layers} x "
                     f"{spec.num_heads} x {spec.head_dim} x {r.dtype_bytes}, would say "
                     f"{_size(seed)} on one GPU)")
    lines.append(f"page (one layer's block) = {_size(page)}")
    if len(r.groups) == 1:
        g = r.groups[0]
        lines.append(f"KV-cache groups: 1 ({len(g.layer_indices)} {g.kind} layers)")
    else:
        sizes = Counter((g.kind, g.window_tokens) for g in r.groups)
        parts = [f"{n} {kind}" + (f" ({w}-token window)" if w else "")
                 for (kind, w), n in sizes.items()]
        lines.append(f"KV-cache groups: {len(r.groups)} ({', '.join(parts)}) of up to "
                     f"{r.group_size} layers, sharing one pool: {r.group_size} tensors, each "
                     "holding one layer of every group")
    if r.pipeline_parallel_size == 1:
        divisor = (f"({_size(page)} x {r.group_size} layers)" if len(r.groups) > 1 else
                   f"{_size(r.bytes_per_token * block)} per block of every layer")
        lines.append(f"num_blocks = {_size(r.stage_memory_bytes[0])} // {divisor} = "
                     f"{r.num_blocks:,} blocks")
    else:
        for stage, (memory, blocks) in enumerate(zip(r.stage_memory_bytes,
                                                     r.stage_num_blocks, strict=True)):
            lines.append(f"stage {stage}: {_size(memory)} // its blocks of "
                         f"{r.stage_layers[stage]} layers = {blocks:,} blocks")
        lines.append(f"num_blocks = the smallest stage's = {r.num_blocks:,} blocks")
    lines.append(f"GPU KV cache size = {r.num_blocks:,} // {len(r.groups)} group"
                 f"{'s' if len(r.groups) > 1 else ''} x {block} = "
                 f"{r.gpu_kv_cache_size_tokens:,} tokens")
    need = (" + ".join(f"{g.blocks_per_request:,}" for g in r.groups) + " = "
            if 1 < len(r.groups) < 5 else "")
    sliding = any(g.kind == "sliding" for g in r.groups)
    lines.append(f"one request of {r.max_model_len:,} tokens needs {need}"
                 f"{r.blocks_per_request:,} blocks" + (
                     f" (a sliding group: window - 1 + max_num_batched_tokens "
                     f"{r.max_num_batched_tokens:,}, + 1)" if sliding else ""))
    lines.append(f"maximum concurrency = {r.num_blocks:,} / {r.blocks_per_request:,} = "
                 f"{r.max_concurrency:.2f}")
    if not r.fits_max_model_len:
        lines.append(f"warning: vLLM refuses to start: one request of max_model_len "
                     f"{r.max_model_len:,} needs {r.max_model_len_bytes / GiB:.2f} GiB of KV "
                     f"cache, more than the {min(r.stage_memory_bytes) / GiB:.2f} GiB there "
                     f"is; the longest request that fits (vLLM's estimated maximum model "
                     f"length) is {r.estimated_max_model_len:,} tokens: lower --max-model-len")
    lines += ["", "vLLM logs:", *r.log_lines()]
    if any(layer.kind == "sliding" for layer in spec.kv_layers):
        lines += ["", f"note: 'pagedsim compare' and 'simulate' still size {spec.name} as all "
                      f"full attention ({_size(spec.bytes_per_token)} per token, every token "
                      "of every layer kept; issue 24)"]
    return "\n".join(lines)


def run_vllm_budget(args: argparse.Namespace, spec: ModelSpec, chosen: object) -> int:
    """``pagedsim budget`` with vLLM's sizing (see :func:`wants_vllm_report`)."""
    # `is None`, not `or`: a 0 given on the command line must reach the checks, not
    # silently become the default.
    tp = check_int("tensor_parallel_size", 1 if args.tensor_parallel_size is None
                   else args.tensor_parallel_size, minimum=1)
    pp = check_int("pipeline_parallel_size", 1 if args.pipeline_parallel_size is None
                   else args.pipeline_parallel_size, minimum=1)
    if args.kv_cache_memory_gb is not None:
        for flag, value in (("--gpu-memory-utilization", args.gpu_memory_utilization),
                            ("--weights-gb", args.weights_gb),
                            ("--activation-gb", args.activation_gb), ("--preset", args.preset)):
            if value is not None:
                raise CliError(f"argument {flag}: not with --kv-cache-memory-gb, which gives "
                               "the KV memory of one GPU directly")
        memory = args.kv_cache_memory_gb
        if len(memory) not in (1, pp):
            raise CliError(f"argument --kv-cache-memory-gb: {len(memory)} figures for {pp} "
                           "pipeline stages (--pipeline-parallel-size); give one, or one per "
                           "stage")
        if any(m <= 0 for m in memory):
            raise CliError("argument --kv-cache-memory-gb: must be more than 0 GiB on every "
                           f"stage (vLLM does not start without KV memory), got "
                           f"{', '.join(f'{m / GiB:g}' for m in memory)}")
        shown = " / ".join(_size(m) for m in memory)
        per = " (per pipeline stage)" if len(memory) > 1 else ""
        memory_line = (f"KV memory per GPU = {shown}{per} (--kv-cache-memory-gb: vLLM's "
                       "kv_cache_memory_bytes, or the 'Available KV cache memory' it logged)")
    else:
        memory, memory_line = _memory_from_gpu(args, spec, chosen, tp * pp)
    block = args.block_size if args.block_size is not None else (
        MLA_BLOCK_SIZE if any(x.kind == "mla" for x in spec.kv_layers) else 16)
    r = vllm_kv_cache(spec, memory, tensor_parallel_size=tp, pipeline_parallel_size=pp,
                      kv_cache_dtype="auto" if args.kv_cache_dtype is None
                      else args.kv_cache_dtype, block_size=block,
                      max_model_len=args.max_model_len,
                      max_num_batched_tokens=(DEFAULT_MAX_NUM_BATCHED_TOKENS
                                              if args.max_num_batched_tokens is None
                                              else args.max_num_batched_tokens),
                      hybrid=not args.disable_hybrid_kv_cache_manager)
    if args.json:
        print(json.dumps({**r.to_dict(), "simulator_bytes_per_token": spec.bytes_per_token,
                          "source": spec.source,
                          "max_model_len_from": spec.max_model_len_from or None}, indent=2))
    else:
        print(vllm_text(r, spec, memory_line))
    return 0


def _memory_from_gpu(args: argparse.Namespace, spec: ModelSpec, chosen: object,
                     num_gpus: int) -> tuple[int, str]:
    """One GPU's KV memory from the GPU, utilization, weights and activations (the
    weights and activations spread evenly over the TP x PP GPUs)."""
    gpu_name = args.gpu or (chosen.gpu if chosen is not None else None)  # type: ignore[attr-defined]
    if gpu_name is None:
        raise CliError("argument --gpu: required without --kv-cache-memory-gb or --preset")
    if args.num_gpus is not None and args.num_gpus != num_gpus:
        raise CliError(f"argument --num-gpus: {args.num_gpus} is not --tensor-parallel-size x "
                       f"--pipeline-parallel-size = {num_gpus}")
    gpu = get_gpu(gpu_name)
    utilization = args.gpu_memory_utilization
    if utilization is None:
        utilization = chosen.gpu_memory_utilization if chosen is not None else 0.9  # type: ignore[attr-defined]
    if not 0 < utilization <= 1:
        raise CliError(f"argument --gpu-memory-utilization: must be in (0, 1], got "
                       f"{utilization!r}")
    weights = args.weights_gb if args.weights_gb is not None else spec.weights_bytes
    if weights == 0 and args.weights_gb is None:
        why = spec.weights_from.removeprefix("unknown: ") or "its size is not known"
        raise CliError(f"argument --weights-gb: the weights of {spec.name} are unknown (no "
                       f"model.safetensors.index.json beside the config, and {why}); give "
                       "--weights-gb or --kv-cache-memory-gb")
    activation = args.activation_gb if args.activation_gb is not None else (
        chosen.activation_bytes if chosen is not None else 0)  # type: ignore[attr-defined]
    usable = int(gpu.memory_bytes * utilization)
    memory = usable - weights // num_gpus - activation // num_gpus
    if memory <= 0:
        raise error_naming_flags(ValueError(
            f"no room for a KV cache: {spec.name}'s weights ({_size(weights)}) and "
            f"activations over {num_gpus} x {gpu.name} leave {_size(memory)} per GPU; use "
            "more GPUs (--tensor-parallel-size, --pipeline-parallel-size) or "
            "--kv-cache-memory-gb"), args)
    line = (f"KV memory per GPU = {_size(gpu.memory_bytes)} x {utilization:g} - "
            f"{_size(weights)} weights / {num_gpus} - {_size(activation)} activations / "
            f"{num_gpus} = {_size(memory)} (vLLM measures this at start-up; "
            "--kv-cache-memory-gb takes the figure it logged)")
    return memory, line

