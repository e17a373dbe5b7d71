"""The KV budget against a real GPU: what :func:`pagedsim.kv_budget` predicts for the decoder,
held against ``torch.cuda.mem_get_info()`` and the blocks a cache could really allocate.

``python -m pagedsim.kernels.measure --budget`` prints it after the comparison; without a
CUDA GPU there is nothing to hold it against.
"""

from __future__ import annotations

import torch

import pagedsim

from .measure_config import model_spec
from .model import Decoder, ModelConfig


def budget_check(model: ModelConfig, gpu_memory_utilization: float = 0.9,
                 block_size: int = 16) -> dict | None:
    """On CUDA: the KV budget ``pagedsim.kv_budget`` predicts for this decoder, against
    ``torch.cuda.mem_get_info()`` and the blocks a cache could really allocate.
    Returns None without a GPU."""
    if not torch.cuda.is_available():
        return None
    decoder = Decoder(model)  # its weights are on the GPU while we read the free memory
    weights = model_spec(model, 4096).weights_bytes
    torch.cuda.synchronize()
    free_b, total_b = torch.cuda.mem_get_info()
    spec = model_spec(model, 4096)
    gpu = pagedsim.GpuSpec(torch.cuda.get_device_name(), total_b, 1.0, 1.0)
    budget = pagedsim.kv_budget(spec, gpu, weights_bytes=weights,
                                gpu_memory_utilization=gpu_memory_utilization,
                                activation_bytes=total_b - free_b, block_size=block_size)
    # How many blocks can really be allocated: try the predicted pool.
    got, err = 0, None
    try:
        probe = torch.empty((budget.num_blocks, block_size * spec.bytes_per_token),
                            dtype=torch.uint8, device="cuda")
        got = probe.shape[0]
        del probe
    except torch.OutOfMemoryError as e:  # pragma: no cover - depends on the GPU
        err = str(e).splitlines()[0]
    del decoder
    torch.cuda.empty_cache()
    return {"gpu": torch.cuda.get_device_name(), "total_bytes": total_b, "free_bytes": free_b,
            "weights_bytes": weights, "predicted_kv_bytes": budget.kv_cache_bytes,
            "predicted_num_blocks": budget.num_blocks, "allocated_num_blocks": got,
            "allocation_error": err}
