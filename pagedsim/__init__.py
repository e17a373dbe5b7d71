"""pagedsim: where the KV-cache memory of an LLM server goes, contiguous versus paged.

The simulator half of the package; pure Python (it never imports torch or triton).
The real kernels are the subpackage ``pagedsim.kernels`` (torch, triton), imported only
when asked for; its source is the repository's top-level ``kernels/`` folder.
"""

from .engine.cost import CostModel
from .engine.scheduler import Scheduler, SchedulerConfig
from .engine.simulator import simulate
from .errors import OutOfMemoryError, PagedSimError
from .memory import (
    Allocator,
    ContiguousAllocator,
    KVCopy,
    PagedAllocator,
    SlotUsage,
    SwappedGroup,
)
from .memory.accounting import CATEGORIES, SlotAccount, account
from .memory.schemes import DEFAULT_SCHEMES, make_allocator
from .metrics.sim_result import SimResult
from .models.budget import KVBudget, kv_budget
from .models.specs import GPUS, MODELS, GpuSpec, ModelSpec, get_gpu, get_model
from .workloads.traces import Trace, TraceError, load_trace, save_trace
from .workloads.workload import Request, WorkloadConfig, generate_workload, summarize_workload

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


def _find_checkout_kernels() -> None:
    """Let ``import pagedsim.kernels`` find the repository's ``kernels/`` folder when
    pagedsim is imported from a checkout without the installed mapping (pyproject's
    ``package-dir``): the repository root on ``sys.path`` with an editable install made
    before the mapping existed, or none. An installed wheel has ``pagedsim/kernels/``
    and needs nothing. Registers a finder (appended, so an install's own finder wins);
    imports nothing."""
    import importlib.util
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    folder = here.parent / "kernels"
    if (here / "kernels").exists() or not (folder / "__init__.py").is_file():
        return

    class CheckoutKernelsFinder:
        """Finds ``pagedsim.kernels`` in ``<checkout>/kernels``."""

        @staticmethod
        def find_spec(fullname: str, path: object = None, target: object = None) -> object:
            if fullname != "pagedsim.kernels":
                return None
            return importlib.util.spec_from_file_location(
                fullname, folder / "__init__.py", submodule_search_locations=[str(folder)])

    if not any(getattr(f, "__name__", None) == "CheckoutKernelsFinder" for f in sys.meta_path):
        sys.meta_path.append(CheckoutKernelsFinder)  # once, also if pagedsim is reloaded


_find_checkout_kernels()

