"""The messages between a grader run and the worker that runs the student's code.

One message is an 8-byte big-endian length, then that many bytes of pickle. The two
directions are not trusted alike:

- grader -> worker: a plain pickle (the grader is trusted; the worker may unpickle
  anything it sends). Objects of the worker (:class:`pagedsim.labs.remote.Remote`
  proxies) travel as their handle number, and the grader's functions as callbacks the
  worker can only call, never look into.
- worker -> grader: read with :class:`SafeUnpickler`, which builds no object but the
  builtin ones (None, bool, int, float, complex is refused, str, bytes, list, tuple, dict,
  set, frozenset) and the tagged references below: a message from the student's process
  cannot run code in the grader, whatever bytes it holds. A message longer than
  :data:`MAX_MESSAGE_BYTES` is refused before it is read.

Tags (persistent ids) from the worker: ``("h", id, type name)`` an object that stays in
the worker (a handle), ``("m", id, name)`` a method of one, ``("T", dtype, shape, device,
raw bytes)`` a tensor's copy, ``("cb", id)`` a grader callback coming back, ``("v",
value)`` the plain value of an int, float, str or bytes subclass, ``("L", id, copy)`` a
list, dict or set read from an attribute: its copy, writes to which go to the original.
"""

from __future__ import annotations

import io
import os
import pickle
import struct

#: Longest message either side accepts (bytes): a reply bigger than this (a 400 MB
#: string, say) ends the worker instead of filling the grader's memory.
MAX_MESSAGE_BYTES = 64 * 2**20
_HEADER = struct.Struct(">Q")
#: Tensor element types a reply may carry (torch's names).
TENSOR_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "uint8", "int16",
                 "int32", "int64", "bool")


class WireError(OSError):
    """The other side closed the channel, or sent a message that breaks the rules."""


def send(fd: int, payload: bytes) -> None:
    """Write one message (length, then ``payload``) to ``fd``."""
    data = _HEADER.pack(len(payload)) + payload
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def recv(fd: int, limit_bytes: int = MAX_MESSAGE_BYTES) -> bytes:
    """Read one message from ``fd``; :class:`WireError` at end of file or when it is
    longer than ``limit_bytes``."""
    (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size))
    if size > limit_bytes:
        raise WireError(f"a message of {size:,} bytes, over the limit of {limit_bytes:,}")
    return _read_exact(fd, size)


def _read_exact(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise WireError("the channel closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class SafeUnpickler(pickle.Unpickler):
    """Builds builtin values only; tags go to ``resolve(tag)``."""

    def __init__(self, data: bytes, resolve) -> None:
        super().__init__(io.BytesIO(data))
        self._resolve = resolve

    def find_class(self, module: str, name: str):  # noqa: D102 - refuse every global
        raise WireError(f"a reply may not name {module}.{name}")

    def persistent_load(self, pid: object) -> object:
        if not isinstance(pid, tuple) or not pid or not isinstance(pid[0], str):
            raise WireError(f"a malformed reference {pid!r:.80}")
        return self._resolve(pid)


def safe_loads(data: bytes, resolve) -> object:
    """Unpickle a worker's message with :class:`SafeUnpickler`."""
    try:
        return SafeUnpickler(data, resolve).load()
    except WireError:
        raise
    except Exception as exc:  # noqa: BLE001 - any malformed pickle is the worker's fault
        raise WireError(f"a malformed reply ({type(exc).__name__}: {exc})"[:300]) from None
