"""pagedsim: where the KV-cache memory of an LLM server goes, contiguous versus paged.

The simulator half of the package; pure Python (it never imports torch or triton).
"""

from .accounting import CATEGORIES, SlotAccount, account
from .allocators import (
    Allocator,
    ContiguousAllocator,
    KVCopy,
    PagedAllocator,
    SlotUsage,
    SwappedGroup,
)
from .budget import KVBudget, kv_budget
from .errors import OutOfMemoryError, PagedSimError
from .specs import GPUS, MODELS, GpuSpec, ModelSpec, get_gpu, get_model

__all__ = [
    "CATEGORIES",
    "Allocator",
    "ContiguousAllocator",
    "KVCopy",
    "PagedAllocator",
    "SlotAccount",
    "SlotUsage",
    "SwappedGroup",
    "account",
    "GPUS",
    "MODELS",
    "GpuSpec",
    "KVBudget",
    "ModelSpec",
    "OutOfMemoryError",
    "PagedSimError",
    "get_gpu",
    "get_model",
    "kv_budget",
]
__version__ = "0.1.0"
