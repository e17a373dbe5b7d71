"""The KV-cache memory budget, as vLLM computes it at start-up.

``kv_cache_bytes = gpu_memory_bytes x gpu_memory_utilization - weights_bytes - activation_bytes``

The engine pre-allocates that much and carves it into blocks of ``block_size``
token slots: ``num_blocks = kv_cache_bytes // (block_size x bytes_per_token)``.
``gpu_memory_utilization`` is therefore not a cap on usage but the fraction the
engine claims up front.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from numbers import Real

from ..paper import TABLE1
from ..units import GiB, format_bytes
from ..validate import check_int
from .specs import GpuSpec, ModelSpec, get_gpu, get_model


@dataclass(frozen=True, slots=True)
class KVBudget:
    """The result of :func:`kv_budget`. All sizes in bytes, capacities in blocks and tokens."""

    model: str
    gpu: str
    num_gpus: int
    gpu_memory_bytes: int  # all GPUs together
    gpu_memory_utilization: float
    weights_bytes: int
    activation_bytes: int
    kv_cache_bytes: int
    bytes_per_token: int
    block_size: int
    bytes_per_block: int
    num_blocks: int
    max_tokens: int  # num_blocks x block_size: the token slots the pool holds

    def to_dict(self) -> dict:
        return asdict(self)


def kv_budget(
    model: ModelSpec | str,
    gpu: GpuSpec | str,
    weights_bytes: int | None = None,
    gpu_memory_utilization: float = 0.9,
    activation_bytes: int = 0,
    block_size: int = 16,
    num_gpus: int = 1,
) -> KVBudget:
    """How much KV cache fits, in bytes, blocks and token slots.

    ``weights_bytes`` defaults to the model preset's; ``activation_bytes`` is the
    peak activation (and other non-KV) memory across all GPUs; with ``num_gpus`` > 1
    the model is sharded (tensor parallel) so memory and KV cache add up.
    """
    model = get_model(model) if isinstance(model, str) else model
    gpu = get_gpu(gpu) if isinstance(gpu, str) else gpu
    if isinstance(gpu_memory_utilization, bool) or not isinstance(gpu_memory_utilization, Real):
        raise TypeError(f"gpu_memory_utilization must be a number, got {gpu_memory_utilization!r}")
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(
            f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}"
        )
    block_size = check_int("block_size", block_size, minimum=1)
    num_gpus = check_int("num_gpus", num_gpus, minimum=1)
    if weights_bytes is None and model.weights_bytes == 0 and model.source:
        # A config.json says nothing of the weights' size; a KV budget from 0 would be wrong.
        why = model.weights_from.removeprefix("unknown: ") or "its size is not known"
        raise ValueError(f"the weights of {model.name} are unknown (no "
                         f"model.safetensors.index.json beside the config, and {why}): "
                         "give weights_bytes (--weights-gb)")
    weights = model.weights_bytes if weights_bytes is None else weights_bytes
    weights = check_int("weights_bytes", weights, minimum=0)
    activation_bytes = check_int("activation_bytes", activation_bytes, minimum=0)

    total = gpu.memory_bytes * num_gpus
    usable = int(total * gpu_memory_utilization)
    kv_bytes = usable - weights - activation_bytes
    if kv_bytes <= 0:
        raise ValueError(
            f"no room for a KV cache: {model.name} weights ({format_bytes(weights)}) + "
            f"activations ({format_bytes(activation_bytes)}) "
            f"{'exceed' if kv_bytes < 0 else 'fill all of'} {gpu_memory_utilization:g} "
            f"x {num_gpus} x {gpu.name} ({format_bytes(usable)}); use more GPUs, a larger "
            "gpu_memory_utilization, or a bigger GPU"
        )
    bytes_per_block = block_size * model.bytes_per_token
    num_blocks = kv_bytes // bytes_per_block
    if num_blocks == 0:
        raise ValueError(
            f"a KV cache of {format_bytes(kv_bytes)} is smaller than one block of "
            f"{block_size} tokens ({format_bytes(bytes_per_block)}); lower block_size or free "
            "more memory"
        )
    return KVBudget(
        model=model.name,
        gpu=gpu.name,
        num_gpus=num_gpus,
        gpu_memory_bytes=total,
        gpu_memory_utilization=float(gpu_memory_utilization),
        weights_bytes=weights,
        activation_bytes=activation_bytes,
        kv_cache_bytes=kv_bytes,
        bytes_per_token=model.bytes_per_token,
        block_size=block_size,
        bytes_per_block=bytes_per_block,
        num_blocks=num_blocks,
        max_tokens=num_blocks * block_size,
    )


@dataclass(frozen=True, slots=True)
class BudgetPreset:
    """A named memory setting: model, GPUs, the fraction of GPU memory the engine claims
    and the activation memory (bytes, all GPUs together), as :func:`kv_budget` takes
    them. ``weights_bytes`` None means the model preset's. ``source`` says where the
    setting comes from; ``reported_slots`` is the KV capacity (token slots) the source
    reports, rounded as it prints it, or None."""

    name: str
    model: str
    gpu: str
    num_gpus: int
    gpu_memory_utilization: float
    activation_bytes: int
    weights_bytes: int | None
    source: str
    reported_slots: int | None = None

    def budget(self, block_size: int = 16) -> KVBudget:
        """:func:`kv_budget` of this setting with blocks of ``block_size`` slots."""
        return kv_budget(self.model, self.gpu, weights_bytes=self.weights_bytes,
                         gpu_memory_utilization=self.gpu_memory_utilization,
                         activation_bytes=self.activation_bytes, block_size=block_size,
                         num_gpus=self.num_gpus)

    def matches(self, model: str, gpu: str, num_gpus: int, gpu_memory_utilization: float,
                activation_bytes: int, weights_bytes: int | None) -> bool:
        """Whether these :func:`kv_budget` arguments are this setting (weights given as
        the model preset's own size count as None)."""
        if weights_bytes is not None and weights_bytes == get_model(model).weights_bytes:
            weights_bytes = None
        return (model, gpu, num_gpus, float(gpu_memory_utilization), activation_bytes,
                weights_bytes) == (self.model, self.gpu, self.num_gpus,
                                   float(self.gpu_memory_utilization),
                                   self.activation_bytes, self.weights_bytes)


#: The vLLM paper's Table 1 / Figure 2 setting: OPT-13B (26 GiB of weights) on one
#: A100-40GB, the whole 40 GiB claimed and 2 GiB kept for activations, which leaves the
#: paper's 12 GiB of KV cache = 15,728 slots of 800 KiB (Table 1 prints 15.7K).
#: ``pagedsim compare`` and ``pagedsim sweep`` run it by default.
PAPER_OPT_13B = BudgetPreset(
    name="paper-opt-13b", model="opt-13b", gpu="a100-40gb", num_gpus=1,
    gpu_memory_utilization=1.0, activation_bytes=2 * GiB, weights_bytes=None,
    source="the vLLM paper's Table 1 setting (OPT-13B on one A100-40GB, 12 GiB of KV cache)",
    reported_slots=int(TABLE1["opt-13b"]["kv_slots"]),
)

#: Named memory settings (``--preset`` of ``pagedsim budget`` and ``compare``).
BUDGET_PRESETS: dict[str, BudgetPreset] = {p.name: p for p in (PAPER_OPT_13B,)}


def get_budget_preset(name: str) -> BudgetPreset:
    """Look up a memory setting by name (error lists the valid names)."""
    try:
        return BUDGET_PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; valid: {', '.join(BUDGET_PRESETS)}"
                         ) from None


def preset_of(model: str, gpu: str, num_gpus: int, gpu_memory_utilization: float,
              activation_bytes: int, weights_bytes: int | None) -> BudgetPreset | None:
    """The named setting these :func:`kv_budget` arguments are, or None."""
    for preset in BUDGET_PRESETS.values():
        if preset.matches(model, gpu, num_gpus, gpu_memory_utilization, activation_bytes,
                          weights_bytes):
            return preset
    return None
