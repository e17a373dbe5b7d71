"""Input checks shared by the kernel wrappers: clear ``ValueError`` before any kernel runs.

A Triton kernel that reads past a tensor does not raise: on a GPU it returns garbage
or faults the context, in the interpreter it can crash the process. So every wrapper
checks shapes, dtypes and devices (cheap, no sync) and, with ``check_values=True``,
the *values* that become addresses (block ids, slots, lengths), which costs one
device-to-host sync; benchmarks turn that part off.
"""

from __future__ import annotations

import math
import numbers

import torch

from . import backend

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INDEX_DTYPES = (torch.int32, torch.int64)
MAX_BLOCK_SIZE = 256


def require_tensor(name: str, x: object, ndim: int) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(x.shape)}")
    return x


def require_int_in(name: str, x: object, low: int, high: int, why: str = "") -> int:
    """``x`` as an int in ``low..high`` (bools and floats refused: ``True`` is not a count)."""
    if isinstance(x, bool) or not isinstance(x, numbers.Integral) or not low <= x <= high:
        hint = f" ({why})" if why else ""
        raise ValueError(f"{name} must be an int in {low}..{high}{hint}, got {x!r}")
    return int(x)


def require_positive_finite(name: str, x: object) -> float:
    """``x`` as a finite float > 0. NaN and inf would turn every output into NaN without
    an error, and a zero or negative softmax scale is a bug (uniform or inverted attention)."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise ValueError(f"{name} must be a finite float > 0, got {type(x).__name__} {x!r}")
    value = float(x)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite float > 0, got {value!r}")
    return value


def require_same_device(backend_name: str, **tensors: torch.Tensor) -> torch.device:
    """All tensors on one device, and one the backend can run on."""
    devices = {name: t.device for name, t in tensors.items()}
    first = next(iter(devices.values()))
    if any(dev != first for dev in devices.values()):
        listing = ", ".join(f"{n}={d}" for n, d in devices.items())
        raise ValueError(f"tensors must be on one device, got {listing}")
    if backend_name == "triton":
        want = "cpu" if backend.INFO.interpreter else "cuda"
        if first.type != want:
            raise ValueError(
                f"the triton backend ({backend.INFO.reason}) needs {want} tensors, got {first}"
            )
    return first


def require_cache_pair(k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    """K and V caches: same shape [B, BS, KVH, D], same float dtype, sane block size."""
    require_tensor("k_cache", k_cache, 4)
    require_tensor("v_cache", v_cache, 4)
    if k_cache.shape != v_cache.shape:
        raise ValueError(
            f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} differ in shape"
        )
    if k_cache.dtype != v_cache.dtype:
        raise ValueError(f"k_cache is {k_cache.dtype} but v_cache is {v_cache.dtype}")
    if k_cache.dtype not in FLOAT_DTYPES:
        raise ValueError(f"cache dtype must be one of {FLOAT_DTYPES}, got {k_cache.dtype}")
    block_size = k_cache.shape[1]
    if not 1 <= block_size <= MAX_BLOCK_SIZE:
        raise ValueError(
            f"block_size (cache dim 1) must be in 1..{MAX_BLOCK_SIZE}, got {block_size}"
        )
    head_dim = k_cache.shape[3]
    if head_dim < 1:
        raise ValueError(f"head_dim must be positive, got {head_dim}")
