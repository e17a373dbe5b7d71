"""A roofline cost model of one serving step, and of moving KV blocks over the host link
(swapping; a host tier's loads and offloads).

One step of iteration-level batching runs the model once over every token it processes:
the prompt tokens being prefilled and one new token per decoding sequence. Its time is
bounded below both by arithmetic and by memory traffic, so (the roofline)::

    step_time_s = max(flops / (peak_flops_per_s * num_gpus),
                      bytes  / (hbm_bytes_per_s * num_gpus)) + step_overhead_s

with, for ``tokens = num_prefill_tokens + num_decode_seqs``, ``L`` layers and hidden size
``h`` (= num_heads x head_dim, the width of the queries):

* ``flops = 2 * active_params * tokens + 4 * L * h * (kv_tokens_read + prefill_attn_pairs)``.
  A token passing through a weight matrix costs a multiply and an add per weight, hence
  2 x params per token (embeddings are counted too: a slight over-estimate). The
  parameters are the architecture's count (:mod:`pagedsim.models.param_count`, for
  presets and config.json alike; a MoE token passes through only its
  ``num_experts_per_tok`` experts, ``ModelSpec.active_params``), or, for a model
  without one (the hand-written presets, OPT), ``weights_bytes / dtype_bytes``. Attention
  costs, per layer, per query token and per key it attends to, ``2h`` for ``q . k`` and
  ``2h`` for weighting ``v``: ``4 L h`` per (query, key) pair. For decode, the pairs are
  the context tokens read from the cache (``kv_tokens_read``); a prefilled prompt's
  causal self-attention adds ``P (P + 1) / 2`` pairs per prompt of ``P`` tokens
  (``prefill_attn_pairs``; the simulator passes them when ``prefill_attention`` is set,
  :meth:`StepPlan.prefill_attn_pairs <pagedsim.engine.plan.StepPlan.prefill_attn_pairs>`,
  and 0 otherwise, which leaves it out: for OPT-13B it equals the
  2 x params term only at ~34K-token prompts; at 2048 tokens it adds about 3%).
* ``bytes = weights_read(tokens) + (kv_tokens_read * (1 + kv_block_overhead_tokens /
  block_size) + tokens) * bytes_per_token``: every step streams the weights from HBM once
  (whatever the batch: that is why batching pays), reads the cached K/V it attends to,
  and writes one K/V slot per processed token. Activations are left out (they are small
  and mostly stay on chip). A dense model's ``weights_read`` is all of ``weights_bytes``
  (the preset's, the safetensors index's, the architecture's count x dtype bytes, or
  ``--weights-gb``'s). A MoE model streams its dense weights and only the experts its
  tokens route to: ``weights_bytes x (dense + moe_layers x expert x touched(tokens)) /
  total params``, with ``touched(t) = E x (1 - (1 - k/E) ** t)`` distinct experts a layer
  expected under uniform routing (:meth:`ParamCount.streamed_fraction
  <pagedsim.models.param_count.ParamCount.streamed_fraction>`): ``k`` of them at one
  token, all ``E`` at large batches. Bytes per parameter are taken as uniform
  (``weights_bytes / total``), so a checkpoint quantized unevenly (gpt-oss: MXFP4
  experts, bf16 attention) is approximated.
* The paged attention kernel looks every block up in a block table and gathers it
  separately, so it reads K/V less efficiently than a kernel streaming one contiguous
  region, and the smaller the blocks the worse: each block read costs as much as
  ``kv_block_overhead_tokens`` more tokens of K/V. ``block_size`` is None for schemes
  whose kernel reads each request contiguously (contiguous regions, vAttention's virtual
  tensors): no such cost. The default, 3.68 tokens, is calibrated on the vLLM paper's
  kernel microbenchmark (§7.1, Fig. 18a): at blocks of 16 its paged attention kernel has
  20-26% higher latency than FasterTransformer's contiguous one, and 16 x 0.23 = 3.68.
  It makes K/V reads 4.7x slower at blocks of 1, 1.92x at 4, 1.46x at 8, 1.23x at 16,
  1.12x at 32 and 1.06x at 64 (a model of the paper's finding, §7.2, that small blocks
  under-use the GPU's memory parallelism; measure your own kernel with
  ``python -m pagedsim.kernels.bench`` on a GPU and set it).
* A sliding-window layer attends to at most its window: for a scheme whose kernel knows
  the windows (``window_tokens``: the hybrid manager's, whose sliding-window decode skips
  the blocks before the window), a step's K/V reads and attention pairs in the sliding
  layers of window ``W`` are ``kv_window_tokens_read[i]`` = the sum over the sequences
  of ``min(context, W)``, not their whole contexts (``kv_tokens_read``), which the other
  layers read. ``window_tokens`` empty (the default, and every full-attention model or
  scheme: all-full treats a sliding layer as a full one): every layer reads the whole
  context. ``prefill_attn_pairs`` is counted over every layer.

``num_gpus`` models tensor parallelism: weights, KV and work split evenly, peak and
bandwidth add up. Tensor parallelism: each layer all-reduces its attention output and its
MLP output, two all-reduces a layer, each of the step's ``tokens x hidden_size``
activations; one costs ``allreduce_s`` (its latency) plus the bytes each GPU sends, ``2
(N - 1) / N`` of the activations in a ring, at ``tp_link_bytes_per_s``
(:meth:`CostModel.allreduce_time_s`). Both default to nothing (free communication, an
optimistic bound, the paper profile's); a decode step of a few tokens pays mostly the
latency, a prefill chunk of thousands of tokens mostly the bytes, and GPUs without
peer-to-peer access (the all-reduce staged through host memory) pay the host link's
bandwidth instead of NVLink's.

Defaults that are assumptions, not measurements (set them from your own if you have any):

* ``step_overhead_s = 2 ms``: per-step CPU work that the roofline does not see: the
  scheduler's Python, preparing inputs, and launching the kernels of every layer (of the
  order of ten launches per layer at a few microseconds each, ~40 layers, without CUDA
  graphs). It matters at small batches, where the step is otherwise short.
* ``pcie_bytes_per_s = 25e9`` (25 GB/s): PCIe 4.0 x16, the A100's host link, carries
  about 31.5 GB/s per direction in theory (16 GT/s x 16 lanes, 128b/130b coding);
  pinned-memory copies reach somewhat less in practice.
* ``swap_copy_overhead_s = 10 us`` per copy call: vLLM swaps with one copy per block (per
  layer, for K and for V), each with a fixed launch/DMA set-up cost; so many small blocks
  swap slower than few large ones of the same total bytes (the paper's §7.3).

A host tier of the prefix cache (:mod:`pagedsim.memory.host_tier`) moves whole blocks
over the GPU's host link, ``host_link_bytes_per_s`` per direction (the GPU preset's:
PCIe 4.0 x16 for the A100, PCIe 5.0 x16 for the H100 and H200; None: ``pcie_bytes_per_s``),
in one batched copy per layer and direction per step (as HiCache's and LMCache's
transfer kernels do), each costing ``swap_copy_overhead_s``
(:meth:`CostModel.host_copy_s`). Loads run host -> GPU, write-backs and write-throughs
GPU -> host; the link is full duplex, so the two directions overlap each other. With
``host_overlap`` (the default, as HiCache and LMCache do) the copies of layer ``l + 1``
run while layer ``l`` computes, so a step lasts the longer of its compute and its
copies, plus one layer's share of the shorter (the first layer's copy, or the last
layer's compute, overlaps nothing); without it a step waits for its copies, then
computes (:meth:`CostModel.host_transfer_s`).

Loading a cached block is not always cheaper than recomputing it. A prefill step is
memory-bound until its tokens' flops outweigh streaming the weights once (Llama-3.1-8B on
an H200: about 200 tokens), so recomputing a short prefix in such a step costs almost
nothing, while loading it costs the link's time; :meth:`CostModel.load_or_recompute_s`
gives both for a prefix alone in a step.

Sanity example, computed by this code: OPT-13B on one A100-40GB, a decode step of 32
sequences with 500 tokens of context each. Reading 26 GiB of weights plus 16,000 x 800 KiB
of KV takes 26.4 ms at 1.555 TB/s, while the ~0.91 TFLOP need 2.9 ms at 312 TFLOP/s, so
the step is memory-bound and, with the 2 ms overhead, takes 28.4 ms (~1,130 tokens/s):

>>> from pagedsim.models.specs import get_gpu, get_model
>>> cost = CostModel(get_model("opt-13b"), get_gpu("a100-40gb"))
>>> f"{cost.step_bytes(0, 32, 32 * 500) / 1e9:.2f} GB"
'41.05 GB'
>>> f"{cost.step_flops(0, 32, 32 * 500) / 1e12:.3f} TFLOP"
'0.906 TFLOP'
>>> f"{cost.step_time_s(0, 32, 32 * 500) * 1e3:.1f} ms"
'28.4 ms'
>>> f"{cost.swap_time_s(16 * 800 * 1024) * 1e6:.0f} us"  # one 16-token block, one copy
'534 us'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..models.specs import GpuSpec, ModelSpec
from ..validate import check_int


def _check_seconds_or_rate(name: str, value: object, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, "
                         f"got {value!r}")


@dataclass(frozen=True, slots=True)
class CostModel:
    """Roofline step time for ``model`` on ``num_gpus`` x ``gpu`` (see the module docstring).

    ``step_overhead_s`` is seconds added to every non-empty step, ``pcie_bytes_per_s`` the
    host link bandwidth per GPU in bytes/s (swaps), ``swap_copy_overhead_s`` seconds per
    copy call, ``block_size`` the attention kernel's block (slots, None = contiguous reads)
    and ``kv_block_overhead_tokens`` what one block lookup costs in tokens of K/V read;
    ``host_link_bytes_per_s`` (bytes/s per direction per GPU; None: ``pcie_bytes_per_s``)
    and ``host_overlap`` are a host tier's (see the module docstring). ``window_tokens``:
    the distinct sliding windows (tokens) of the model's layers whose reads the kernel
    bounds by the window (empty: none; see the module docstring).
    """

    model: ModelSpec
    gpu: GpuSpec
    num_gpus: int = 1
    step_overhead_s: float = 2e-3
    pcie_bytes_per_s: float = 25e9
    swap_copy_overhead_s: float = 10e-6
    block_size: int | None = None  # slots per block-table lookup of the attention kernel
    kv_block_overhead_tokens: float = 3.68  # K/V tokens one block lookup costs extra
    host_link_bytes_per_s: float | None = None  # a host tier's link; None: pcie_bytes_per_s
    host_overlap: bool = True  # host-tier copies overlapped layer by layer with compute
    window_tokens: tuple[int, ...] = ()  # sliding windows whose layers read only the window
    #: Achieved fractions of the GPU's peak HBM bandwidth and peak FLOP/s (1: the roofline
    #: at peak, the paper profile's; :mod:`pagedsim.models.cost_profiles` has measured ones).
    hbm_efficiency: float = 1.0
    flops_efficiency: float = 1.0
    #: Seconds of CPU work per decoding sequence a step adds (sampling, input preparation).
    step_overhead_per_seq_s: float = 0.0
    #: Seconds every layer adds to a step whatever its size: the floor of its kernels'
    #: durations (launch and synchronisation latency a CUDA graph does not remove).
    layer_overhead_s: float = 0.0
    #: Seconds per tensor-parallel all-reduce (two per layer; only with ``num_gpus`` > 1):
    #: its latency, whatever its size.
    allreduce_s: float = 0.0
    #: Bytes/s per direction per GPU of the link the all-reduces run over (NVLink, or the
    #: host link where GPUs lack peer-to-peer access); None: the bytes cost nothing, only
    #: ``allreduce_s`` (the module docstring, "Tensor parallelism").
    tp_link_bytes_per_s: float | None = None
    #: Whether the simulator passes each step's prefill attention pairs (a prompt's causal
    #: self-attention; the module docstring) or 0, the paper profile's choice.
    prefill_attention: bool = False
    #: Per window of ``window_tokens``: (its layers, their KV bytes per token); derived.
    _windowed: tuple[tuple[int, int], ...] = field(init=False, repr=False, compare=False)
    #: Parameters one token passes through (``model.active_params``); derived.
    _active: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.model, ModelSpec):
            raise TypeError(f"model must be a ModelSpec, got {self.model!r}")
        if not isinstance(self.gpu, GpuSpec):
            raise TypeError(f"gpu must be a GpuSpec, got {self.gpu!r}")
        check_int("num_gpus", self.num_gpus, minimum=1)
        _check_seconds_or_rate("step_overhead_s", self.step_overhead_s, positive=False)
        _check_seconds_or_rate("pcie_bytes_per_s", self.pcie_bytes_per_s, positive=True)
        _check_seconds_or_rate("swap_copy_overhead_s", self.swap_copy_overhead_s,
                               positive=False)
        if self.block_size is not None:
            check_int("block_size", self.block_size, minimum=1)
        _check_seconds_or_rate("kv_block_overhead_tokens", self.kv_block_overhead_tokens,
                               positive=False)
        if self.host_link_bytes_per_s is not None:
            _check_seconds_or_rate("host_link_bytes_per_s", self.host_link_bytes_per_s,
                                   positive=True)
        if not isinstance(self.host_overlap, bool):
            raise TypeError(f"host_overlap must be True or False, got {self.host_overlap!r}")
        if not isinstance(self.prefill_attention, bool):
            raise TypeError(f"prefill_attention must be True or False, "
                            f"got {self.prefill_attention!r}")
        for name in ("hbm_efficiency", "flops_efficiency"):
            value = getattr(self, name)
            _check_seconds_or_rate(name, value, positive=True)
            if value > 1:
                raise ValueError(f"{name} must be a fraction of the peak in (0, 1], "
                                 f"got {value!r}")
        _check_seconds_or_rate("step_overhead_per_seq_s", self.step_overhead_per_seq_s,
                               positive=False)
        _check_seconds_or_rate("allreduce_s", self.allreduce_s, positive=False)
        _check_seconds_or_rate("layer_overhead_s", self.layer_overhead_s, positive=False)
        if self.tp_link_bytes_per_s is not None:
            _check_seconds_or_rate("tp_link_bytes_per_s", self.tp_link_bytes_per_s,
                                   positive=True)
        object.__setattr__(self, "_windowed", self._window_layers())
        object.__setattr__(self, "_active", self.model.active_params)

    def _window_layers(self) -> tuple[tuple[int, int], ...]:
        """``window_tokens`` checked against the model's sliding layers: per window, how
        many layers have it and their KV bytes per token."""
        if not isinstance(self.window_tokens, tuple):
            raise TypeError(f"window_tokens must be a tuple, got {self.window_tokens!r}")
        layers = self.model.kv_layers
        have = sorted({layer.window_tokens for layer in layers if layer.kind == "sliding"})
        out = []
        for w in self.window_tokens:
            if w not in have or self.window_tokens.count(w) > 1:
                raise ValueError(f"window_tokens {self.window_tokens!r}: each must be a "
                                 f"sliding window of {self.model.name}'s layers, once "
                                 f"(its windows: {have or 'none'})")
            mine = [layer for layer in layers if layer.kind == "sliding"
                    and layer.window_tokens == w]
            out.append((len(mine), sum(layer.bytes_per_token(self.model.dtype_bytes)
                                       for layer in mine)))
        return tuple(out)

    def with_block_size(self, block_size: int | None) -> CostModel:
        """The same model for an attention kernel that reads blocks of ``block_size`` slots
        through a block table (None: contiguous reads)."""
        return replace(self, block_size=block_size)

    def with_windows(self, window_tokens: Sequence[int]) -> CostModel:
        """The same model for a kernel that reads the sliding layers of each window in
        ``window_tokens`` only within it (empty: every layer the whole context)."""
        return replace(self, window_tokens=tuple(window_tokens))

    def _check_windows(self, kv_tokens_read: int, window_reads: Sequence[int]) -> None:
        """One count per window, each at most ``kv_tokens_read`` (a window bounds reads)."""
        if len(window_reads) != len(self.window_tokens):
            raise ValueError(f"kv_window_tokens_read {list(window_reads)!r} needs one count per "
                             f"window of window_tokens {self.window_tokens!r}")
        for read in window_reads:
            check_int("kv_window_tokens_read", read, minimum=0)
            if read > kv_tokens_read:
                raise ValueError(f"kv_window_tokens_read ({read}) exceeds kv_tokens_read "
                                 f"({kv_tokens_read}): a window only bounds reads")

    @staticmethod
    def _check_step(num_prefill_tokens: int, num_decode_seqs: int, kv_tokens_read: int,
                    prefill_attn_pairs: int) -> int:
        check_int("num_prefill_tokens", num_prefill_tokens, minimum=0)
        check_int("num_decode_seqs", num_decode_seqs, minimum=0)
        check_int("kv_tokens_read", kv_tokens_read, minimum=0)
        check_int("prefill_attn_pairs", prefill_attn_pairs, minimum=0)
        tokens = num_prefill_tokens + num_decode_seqs
        if tokens == 0 and kv_tokens_read:
            raise ValueError(f"kv_tokens_read ({kv_tokens_read}) needs tokens to attend with; "
                             "the step processes none")
        if num_prefill_tokens == 0 and prefill_attn_pairs:
            raise ValueError(f"prefill_attn_pairs ({prefill_attn_pairs}) without prefill tokens")
        return tokens

    def step_flops(self, num_prefill_tokens: int, num_decode_seqs: int, kv_tokens_read: int,
                   prefill_attn_pairs: int = 0,
                   kv_window_tokens_read: Sequence[int] = ()) -> int:
        """Floating-point operations of one step (all GPUs together)."""
        tokens = self._check_step(num_prefill_tokens, num_decode_seqs, kv_tokens_read,
                                  prefill_attn_pairs)
        if self.window_tokens or kv_window_tokens_read:
            self._check_windows(kv_tokens_read, kv_window_tokens_read)
            return self._windowed_flops(tokens, kv_tokens_read, prefill_attn_pairs,
                                        kv_window_tokens_read)
        return self._flops(tokens, kv_tokens_read + prefill_attn_pairs)

    def _flops(self, tokens: int, attn_pairs: int) -> int:
        m = self.model
        return 2 * self._active * tokens + 4 * m.num_layers * m.hidden_size * attn_pairs

    def _windowed_flops(self, tokens: int, kv_tokens_read: int, prefill_attn_pairs: int,
                        window_reads: Sequence[int]) -> int:
        """:meth:`_flops` with each window's layers attending to their window's reads."""
        m = self.model
        full_layers = m.num_layers - sum(n for n, _ in self._windowed)
        pairs = m.num_layers * prefill_attn_pairs + full_layers * kv_tokens_read
        pairs += sum(n * read for (n, _), read in zip(self._windowed, window_reads,
                                                      strict=True))
        return 2 * self._active * tokens + 4 * m.hidden_size * pairs

    def _gathered(self, kv_tokens: int) -> int:
        """Tokens of K/V read, in the cost of contiguous reads: block-table gathers cost
        extra (the module docstring)."""
        if self.block_size is not None and kv_tokens:
            return round(kv_tokens * (1 + self.kv_block_overhead_tokens / self.block_size))
        return kv_tokens

    def weights_read(self, tokens: int) -> int:
        """Bytes of weights a step of ``tokens`` tokens streams: all of ``weights_bytes``
        for a dense model; for MoE the dense share and the experts its tokens touch
        (the module docstring). 0 tokens read nothing."""
        check_int("tokens", tokens, minimum=0)
        return self._weights_read(tokens)

    def _weights_read(self, tokens: int) -> int:
        params = self.model.params
        if tokens == 0:
            return 0
        if params is None or not params.is_moe:
            return self.model.weights_bytes
        return round(self.model.weights_bytes * params.streamed_fraction(tokens))

    def _bytes(self, tokens: int, kv_tokens_read: int,
               window_reads: Sequence[int] = ()) -> int:
        if tokens == 0:
            return 0
        m = self.model
        weights = self._weights_read(tokens)
        if not window_reads:  # every layer reads the whole context
            return weights + (self._gathered(kv_tokens_read) + tokens) * m.bytes_per_token
        full_bytes = m.bytes_per_token - sum(b for _, b in self._windowed)
        kv = self._gathered(kv_tokens_read) * full_bytes
        kv += sum(self._gathered(read) * b
                  for (_, b), read in zip(self._windowed, window_reads, strict=True))
        return weights + kv + tokens * m.bytes_per_token

    def step_bytes(self, num_prefill_tokens: int, num_decode_seqs: int,
                   kv_tokens_read: int, kv_window_tokens_read: Sequence[int] = ()) -> int:
        """HBM bytes one step moves (all GPUs together): weights once (MoE: the experts
        touched), KV read, KV written."""
        tokens = self._check_step(num_prefill_tokens, num_decode_seqs, kv_tokens_read, 0)
        if self.window_tokens or kv_window_tokens_read:
            self._check_windows(kv_tokens_read, kv_window_tokens_read)
        return self._bytes(tokens, kv_tokens_read, kv_window_tokens_read)

    def step_time_s(self, num_prefill_tokens: int, num_decode_seqs: int, kv_tokens_read: int,
                    prefill_attn_pairs: int = 0,
                    kv_window_tokens_read: Sequence[int] = ()) -> float:
        """Seconds for one step that prefills ``num_prefill_tokens`` prompt tokens, decodes one
        token for each of ``num_decode_seqs`` sequences, and reads ``kv_tokens_read`` cached
        tokens' K/V (the sum of the decoding sequences' context lengths, plus any cached
        prefix a prefill attends to). ``prefill_attn_pairs``: see the module docstring.
        ``kv_window_tokens_read``: one count per window of ``window_tokens`` (the same
        sum, each context at most that window; required when there are windows).

        An empty step (no tokens) costs 0 s: the simulator skips ahead to the next arrival.
        """
        # Validate once, then compute both sides of the roofline (this runs every step).
        tokens = self._check_step(num_prefill_tokens, num_decode_seqs, kv_tokens_read,
                                  prefill_attn_pairs)
        if self.window_tokens:
            self._check_windows(kv_tokens_read, kv_window_tokens_read)
            flops = self._windowed_flops(tokens, kv_tokens_read, prefill_attn_pairs,
                                         kv_window_tokens_read)
        elif kv_window_tokens_read:
            self._check_windows(kv_tokens_read, kv_window_tokens_read)  # raises: no windows
        else:
            flops = self._flops(tokens, kv_tokens_read + prefill_attn_pairs)
        return self._seconds(flops, tokens, kv_tokens_read, kv_window_tokens_read,
                             num_decode_seqs)

    def decode_steps_s(self, num_seqs: int, first_kv_tokens_read: int,
                       num_steps: int) -> list[float]:
        """:meth:`step_time_s` of ``num_steps`` steps that each decode one token of
        ``num_seqs`` sequences, the first reading ``first_kv_tokens_read`` cached tokens
        and each next one ``num_seqs`` more (every context one token longer): the same
        seconds as asking step by step (:mod:`pagedsim.engine.steady`'s runs). Only for a
        model read whole (no ``window_tokens``: their reads do not grow so)."""
        if self.window_tokens:
            raise ValueError(f"decode_steps_s needs every layer read whole, not the windows "
                             f"{self.window_tokens!r}: ask step_time_s for each step")
        check_int("num_steps", num_steps, minimum=0)
        self._check_step(0, num_seqs, first_kv_tokens_read, 0)
        seconds, flops, kv = self._seconds, self._flops, first_kv_tokens_read
        times = []
        for _ in range(num_steps):
            times.append(seconds(flops(num_seqs, kv), num_seqs, kv, (), num_seqs))
            kv += num_seqs
        return times

    def _seconds(self, flops: int, tokens: int, kv_tokens_read: int,
                 window_reads: Sequence[int] = (), num_decode_seqs: int = 0) -> float:
        """A step's seconds: the slower side of the roofline at the achieved fractions of
        the peaks, plus the step overhead (fixed, per decoding sequence, and the
        tensor-parallel all-reduces)."""
        if flops == 0:
            return 0.0
        num_bytes = self._bytes(tokens, kv_tokens_read, window_reads)
        # At the paper profile's efficiencies of 1 and extra overheads of 0 these are the
        # plain roofline's floats exactly (x * 1.0 and y + 0.0 change no bit).
        compute_s = flops / (self.gpu.peak_flops_per_s * self.flops_efficiency * self.num_gpus)
        memory_s = num_bytes / (self.gpu.hbm_bytes_per_s * self.hbm_efficiency * self.num_gpus)
        seconds = max(compute_s, memory_s) + self.step_overhead_s
        if self.step_overhead_per_seq_s:
            seconds += self.step_overhead_per_seq_s * num_decode_seqs
        if self.layer_overhead_s:
            seconds += self.layer_overhead_s * self.model.num_layers
        if self.num_gpus > 1 and (self.allreduce_s or self.tp_link_bytes_per_s):
            seconds += 2 * self.model.num_layers * self.allreduce_time_s(tokens)
        return seconds

    def allreduce_time_s(self, tokens: int) -> float:
        """Seconds of one tensor-parallel all-reduce of a step of ``tokens`` tokens: the
        latency ``allreduce_s`` plus, with ``tp_link_bytes_per_s``, the bytes each GPU
        sends over the link (a ring all-reduce of the ``tokens x hidden_size`` activations
        sends ``2 (N - 1) / N`` of them from each of the ``N`` GPUs). 0 on one GPU."""
        if self.num_gpus == 1:
            return 0.0
        seconds = self.allreduce_s
        if self.tp_link_bytes_per_s:
            n = self.num_gpus
            sent = tokens * self.model.hidden_size * self.model.dtype_bytes * 2 * (n - 1) / n
            seconds += sent / self.tp_link_bytes_per_s
        return seconds

    def swap_time_s(self, num_bytes: int, num_copies: int = 1) -> float:
        """Seconds to move ``num_bytes`` between GPU and CPU memory in ``num_copies`` copy
        calls (vLLM: one per block, per layer, for K and for V). Each GPU swaps its own
        shard over its own link, so bandwidth scales with ``num_gpus``. 0 bytes cost 0 s.
        """
        check_int("num_bytes", num_bytes, minimum=0)
        check_int("num_copies", num_copies, minimum=0)
        if num_bytes == 0:
            return 0.0
        if num_copies == 0:
            raise ValueError(f"moving {num_bytes} bytes needs at least one copy")
        return (num_copies * self.swap_copy_overhead_s
                + num_bytes / (self.pcie_bytes_per_s * self.num_gpus))

    # ------------------------------------------------------------- host tier
    def host_copy_s(self, num_bytes: int) -> float:
        """Seconds to move ``num_bytes`` one way over the host link in one step: one
        batched copy per layer (each ``swap_copy_overhead_s``), then the bytes at
        ``host_link_bytes_per_s`` per GPU. 0 bytes cost 0 s."""
        check_int("num_bytes", num_bytes, minimum=0)
        if num_bytes == 0:
            return 0.0
        link = self.host_link_bytes_per_s or self.pcie_bytes_per_s
        return (self.model.num_layers * self.swap_copy_overhead_s
                + num_bytes / (link * self.num_gpus))

    def host_transfer_s(self, step_s: float, load_bytes: int, offload_bytes: int) -> float:
        """Seconds a step that lasts ``step_s`` without them lasts longer for a host tier's
        ``load_bytes`` (host -> GPU) and ``offload_bytes`` (GPU -> host): the copies before
        the compute (``host_overlap`` False), or overlapped with it layer by layer."""
        t_in, t_out = self.host_copy_s(load_bytes), self.host_copy_s(offload_bytes)
        if not (t_in or t_out):
            return 0.0
        if not self.host_overlap:
            return t_in + t_out  # one copy stream, then the model
        compute = max(step_s - self.step_overhead_s, 0.0)
        link = max(t_in, t_out)  # full duplex: the two directions run at once
        return max(compute, link) + min(compute, link) / self.model.num_layers - compute

    def load_or_recompute_s(self, num_tokens: int) -> tuple[float, float]:
        """A step serving a cached prefix of ``num_tokens`` tokens and computing one more
        token after it, alone: ``(seconds when the prefix is loaded from the host tier,
        seconds when it is recomputed)``. Loading pays only when the first is smaller."""
        check_int("num_tokens", num_tokens, minimum=1)
        step = self.step_time_s(1, 0, num_tokens)
        loaded = step + self.host_transfer_s(step, num_tokens * self.model.bytes_per_token, 0)
        return loaded, self.step_time_s(num_tokens + 1, 0, 0)
