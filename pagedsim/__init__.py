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
from .cost import CostModel
from .errors import OutOfMemoryError, PagedSimError
from .scheduler import Scheduler, SchedulerConfig
from .schemes import DEFAULT_SCHEMES, make_allocator
from .simulator import SimResult, simulate
from .specs import GPUS, MODELS, GpuSpec, ModelSpec, get_gpu, get_model
from .traces import Trace, TraceError, load_trace, save_trace
from .workload import Request, WorkloadConfig, generate_workload, summarize_workload

__all__ = [
    "DEFAULT_SCHEMES",
    "CostModel",
    "Request",
    "Scheduler",
    "SchedulerConfig",
    "SimResult",
    "Trace",
    "TraceError",
    "WorkloadConfig",
    "generate_workload",
    "load_trace",
    "make_allocator",
    "save_trace",
    "simulate",
    "summarize_workload",
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
