"""Which implementation the kernels run on, decided once, before any kernel is defined.

Three cases, in order of preference:

1. CUDA is available and triton is installed -> real Triton kernels on the GPU.
2. No CUDA, triton installed (Linux laptop, CI) -> the same Triton kernels run by
   Triton's *interpreter* on the CPU (numpy under the hood). Correct but slow, and
   timings mean nothing. The interpreter is chosen through ``TRITON_INTERPRET=1``,
   which triton reads when it is imported and when kernels are decorated, so it
   must be set here, before anything imports triton: that is why this module is
   the first thing ``kernels/__init__.py`` imports.
3. triton not installed (macOS) -> a pure-torch backend (vectorised gathers).

``PAGEDSIM_KERNEL_BACKEND`` (``triton`` or ``torch``) overrides the choice. The pure
torch backend can also be asked for per call (``backend="torch"``) for comparison.

Nothing here imports triton: :func:`triton_available` only asks whether it *could*
be imported.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass

import torch

ENV_VAR = "PAGEDSIM_KERNEL_BACKEND"
BACKENDS = ("triton", "torch")


def triton_available() -> bool:
    """Whether the ``triton`` package is installed (it is not imported)."""
    return importlib.util.find_spec("triton") is not None


@dataclass(frozen=True, slots=True)
class BackendInfo:
    """The backend in use: ``name`` in BACKENDS, the device tensors must live on."""

    name: str  # "triton" or "torch"
    device: str  # "cuda" or "cpu"
    interpreter: bool  # triton kernels (default or asked for per call) run in the interpreter
    triton_installed: bool
    reason: str  # one line, printed by ``python -m pagedsim.kernels``

    def __post_init__(self) -> None:
        if self.name not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.name!r}")
        if self.device not in ("cuda", "cpu"):
            raise ValueError(f"device must be 'cuda' or 'cpu', got {self.device!r}")


def _decide() -> BackendInfo:
    has_triton = triton_available()
    has_cuda = torch.cuda.is_available()
    device = "cuda" if has_cuda else "cpu"
    requested = os.environ.get(ENV_VAR, "").strip().lower()
    if requested and requested not in BACKENDS:
        raise ValueError(f"{ENV_VAR}={requested!r}: expected one of {BACKENDS}")

    # The interpreter flag must be in place before the first `import triton`,
    # even when the torch backend is the default, so that a per-call
    # backend="triton" comparison still works on a CPU-only machine.
    interpreter = has_triton and not has_cuda
    if interpreter:
        os.environ["TRITON_INTERPRET"] = "1"

    if requested == "torch":
        return BackendInfo("torch", device, interpreter, has_triton, f"{ENV_VAR}=torch")
    if not has_triton:
        if requested == "triton":
            raise ImportError(f"{ENV_VAR}=triton but triton is not installed")
        return BackendInfo(
            "torch", device, False, False,
            "triton is not installed: using the pure-torch kernels (correct, not fast)",
        )
    if interpreter:
        return BackendInfo(
            "triton", "cpu", True, True,
            "no CUDA device: Triton kernels run in the CPU interpreter "
            "(slow; timings mean nothing)",
        )
    return BackendInfo("triton", "cuda", False, True, "Triton kernels on CUDA")


INFO: BackendInfo = _decide()
BACKEND: str = INFO.name
DEVICE: str = INFO.device

if INFO.name == "torch" and not INFO.triton_installed:
    print(f"pagedsim.kernels: {INFO.reason}", file=sys.stderr)


def resolve(backend: str | None) -> str:
    """The backend a call uses: ``backend`` if given (validated), else the default."""
    if backend is None:
        return BACKEND
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS} or None, got {backend!r}")
    if backend == "triton" and not INFO.triton_installed:
        raise ValueError("backend='triton' asked for, but triton is not installed")
    return backend
