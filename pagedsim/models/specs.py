"""Model and GPU presets (the model's own specification is :mod:`pagedsim.models.model_spec`).

Memory is counted in bytes; presets quote GPU memory in binary units
(1 GiB = 2**30 bytes, see :mod:`pagedsim.units`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..units import GiB, MiB
from ..validate import check_int
from .hf_config import load_config, looks_like_config_path
from .model_presets import load_model_presets
from .model_spec import ModelSpec

__all__ = ["GPUS", "MODELS", "GpuSpec", "ModelSpec", "get_gpu", "get_model"]


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """An accelerator: memory in bytes, HBM bandwidth in bytes/s, dense fp16/bf16 peak in
    flop/s, and the bandwidth of its link to host memory in bytes/s per direction (what a
    host tier of the KV cache moves blocks over: :data:`PCIE4_X16_BYTES_PER_S`, ...)."""

    name: str
    memory_bytes: int
    hbm_bytes_per_s: float
    peak_flops_per_s: float
    host_link_bytes_per_s: float = 25e9

    def __post_init__(self) -> None:
        check_int(f"{self.name}: memory_bytes", self.memory_bytes, minimum=1)
        if not self.hbm_bytes_per_s > 0 or not self.peak_flops_per_s > 0 \
                or not self.host_link_bytes_per_s > 0:
            raise ValueError(f"{self.name}: bandwidths and peak flop/s must be > 0")


def _params_bytes(num_params: float, dtype_bytes: int = 2) -> int:
    return int(num_params * dtype_bytes)


#: Model presets. Weights are the published parameter counts in fp16/bf16 (2 bytes each).
MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        # The seed's example: 32 x 32 x 128 x 2 bytes x 2 = 512 KiB per token.
        ModelSpec("llama-2-7b", 32, 32, 32, 128, 2, _params_bytes(6.74e9), 4096),
        ModelSpec("llama-2-13b", 40, 40, 40, 128, 2, _params_bytes(13.0e9), 4096),
        ModelSpec("llama-2-70b", 80, 64, 8, 128, 2, _params_bytes(69.0e9), 4096),  # GQA, 8 kv heads
        ModelSpec("llama-3-8b", 32, 32, 8, 128, 2, _params_bytes(8.03e9), 8192),  # GQA, 8 kv heads
        # The vLLM paper's models (OPT, max 2048 tokens): 13B has 800 KiB per token.
        ModelSpec("opt-13b", 40, 40, 40, 128, 2, 26 * GiB, 2048),
        ModelSpec("opt-66b", 64, 72, 72, 128, 2, 132 * GiB, 2048),
        ModelSpec("opt-175b", 96, 96, 96, 128, 2, 346 * GiB, 2048),
    )
}


def _add_current_models() -> None:
    """Today's models (Llama 3.1 with its 128K context, Qwen3, Mistral, gpt-oss, Gemma 3,
    DeepSeek-V3), read from the package's data file by :mod:`pagedsim.models.model_presets`."""
    for name, spec in load_model_presets().items():
        if name in MODELS:
            raise ValueError(f"model preset {name!r} is defined twice")
        MODELS[name] = spec


_add_current_models()

#: Host links, bytes/s per direction, as pinned-memory copies reach them in practice.
#: PCIe 4.0 x16 carries 31.5 GB/s in theory (16 GT/s x 16 lanes, 128b/130b coding),
#: PCIe 5.0 x16 twice that (63 GB/s); copies reach about 80% of it. A GH200's Grace CPU
#: and Hopper GPU are joined by NVLink-C2C instead, 450 GB/s each way (900 GB/s in all).
PCIE4_X16_BYTES_PER_S = 25e9
PCIE5_X16_BYTES_PER_S = 50e9
NVLINK_C2C_BYTES_PER_S = 450e9

#: GPU presets. Memory is what ``nvidia-smi`` reports (MiB), HBM bandwidth and dense
#: fp16/bf16 tensor-core peak are NVIDIA's datasheet figures (SXM parts); the host link
#: is the A100's PCIe 4.0 x16 and the H100's and H200's PCIe 5.0 x16.
GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        GpuSpec("a100-40gb", 40960 * MiB, 1.555e12, 312e12, PCIE4_X16_BYTES_PER_S),
        GpuSpec("a100-80gb", 81920 * MiB, 2.039e12, 312e12, PCIE4_X16_BYTES_PER_S),
        GpuSpec("h100-80gb", 81559 * MiB, 3.35e12, 989e12, PCIE5_X16_BYTES_PER_S),
        GpuSpec("h200-141gb", 143771 * MiB, 4.8e12, 989e12, PCIE5_X16_BYTES_PER_S),
    )
}


def get_model(name: str) -> ModelSpec:
    """Look up a model preset by name, or read a Hugging Face config.json when ``name`` is
    a path to one (ends in ``.json`` or holds a ``/``; :mod:`pagedsim.models.hf_config`). The
    error lists the valid names."""
    try:
        return MODELS[name]
    except KeyError:
        pass
    except TypeError:
        raise TypeError(f"model must be a preset name or a config.json path, got {name!r}"
                        ) from None
    if isinstance(name, str) and looks_like_config_path(name):
        return load_config(name)
    raise ValueError(f"unknown model {name!r}; valid: {', '.join(MODELS)}, or a path to "
                     "a Hugging Face config.json")


def get_gpu(name: str) -> GpuSpec:
    """Look up a GPU preset by name (error lists the valid names)."""
    try:
        return GPUS[name]
    except KeyError:
        raise ValueError(f"unknown gpu {name!r}; valid: {', '.join(GPUS)}") from None
