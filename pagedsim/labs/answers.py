"""What comes back from the student's process, rebuilt in the graders' one.

:class:`pagedsim.labs.remote.Worker` receives plain values, handles and two kinds of
description it rebuilds here: a tensor's dtype, shape, device and bytes (:func:`tensor`,
checked before anything is built), and the student's exception as its class names, its
message and where it was raised (:func:`exception`: the nearest builtin or pagedsim class;
never a class outside ``Exception``, so that a student's ``SystemExit`` cannot stop the
graders). A malformed tensor is a :class:`~pagedsim.labs.wire.WireError`.
"""

from __future__ import annotations

import builtins
import sys

from .wire import TENSOR_DTYPES, WireError


class WorkerError(RuntimeError):
    """The student's process ended, ran past a limit or broke the channel's rules."""


class CallTimedOut(BaseException):
    """A call into the student's code ran past its time limit, and its process was
    stopped.

    A ``BaseException`` and not an ``Exception`` on purpose: hypothesis treats an
    ``Exception`` as a failure to shrink, and runs the test again on smaller inputs, each
    of which may hang as long again; a few such retries used up the whole grading time,
    and every later task scored 0. This one ends its test at once (failed, with this
    message), and the next test starts a fresh process."""


def tensor(dtype: object, shape: object, device: object, raw: object) -> object:
    """The tensor the worker described (on the same CUDA device when there is one here)."""
    import torch

    if dtype not in TENSOR_DTYPES or not isinstance(raw, bytes) or not isinstance(
            shape, tuple) or not all(type(n) is int and n >= 0 for n in shape):
        raise WireError("a malformed tensor")
    kind = getattr(torch, str(dtype))
    if not raw:
        out = torch.empty(shape, dtype=kind)
    else:
        out = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(kind).reshape(shape)
    if isinstance(device, str) and device.startswith("cuda") and torch.cuda.is_available():
        out = out.to(device)
    return out


def exception(mro: object, text: object, where: object) -> Exception:
    """The student's exception as the nearest builtin or pagedsim class (its own name in
    front of the message when that differs), never a BaseException outside Exception."""
    chosen: type[Exception] = WorkerError
    names = [m for m in mro if isinstance(m, tuple) and len(m) == 2] if isinstance(
        mro, list) else []
    for module, qualname in names:
        cls = None
        if module == "builtins":
            cls = getattr(builtins, str(qualname), None)
        elif isinstance(module, str) and module.startswith("pagedsim.") and module in \
                sys.modules:
            cls = sys.modules[module]
            for part in str(qualname).split("."):
                cls = getattr(cls, part, None)
        if isinstance(cls, type) and issubclass(cls, Exception) and cls is not Exception:
            chosen = cls
            break
    own = str(names[0][1]) if names else "an error"
    message = str(text) if own == chosen.__qualname__ else f"{own}: {text}"
    if isinstance(where, list) and where:
        message += f" (at {', '.join(str(w) for w in where)})"
    try:
        return chosen(message)
    except Exception:  # noqa: BLE001 - a class that wants other arguments
        return WorkerError(message)
