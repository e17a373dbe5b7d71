"""The process that runs a student's code: ``python -c BOOT CONFIG`` (:mod:`.guard`).

Started by :mod:`pagedsim.labs.remote` in a folder holding the student's files (and, for
a lab whose graders reach the student through it, the lab's ``adapters.py``), nothing
else. :func:`pagedsim.labs.guard.boot` keeps the lab's forbidden modules from ever running
here, then :func:`main` imports the preloads (pagedsim, torch...), scrubs what a lab's
given modules imported of the forbidden ones (:func:`~pagedsim.labs.guard.block_forbidden`),
confines itself (:func:`pagedsim.labs.sandbox.confine`) and
then answers requests on one pipe, replying on another (:mod:`pagedsim.labs.wire`). Its stdout
and stderr go to a pipe the grader reads and cuts at a cap. It never sees the graders,
the results, or where they go; whatever it answers, the graders check the answer.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import sys
import traceback
import types
from pathlib import Path

from . import counting  # noqa: F401  (imported before the user switch: see setup.sh)
from .guard import block_forbidden
from .wire import recv, send

#: The channel's two ends in this process (set from the config by :func:`main`).
REQUESTS_FD, REPLIES_FD = -1, -1
_PLAIN = (type(None), bool, int, float, str, bytes, list, tuple, dict, set, frozenset)
#: Mutable containers read from an attribute or an item stay in the worker (a handle), so
#: that an adapter writing into them (``lab.ref_counts[b] += 1``) changes the student's.
_LIVE = (list, dict, set)
_handles: dict[int, object] = {}
_next_id = [1]


class _ByRef:
    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj


class _Live:
    """A mutable container read from an attribute or an item: sent as its copy and its
    handle (the grader reads the copy, writes go to the handle)."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj


class _Method:
    __slots__ = ("handle", "name")

    def __init__(self, handle: int, name: str) -> None:
        self.handle, self.name = handle, name


class Callback:
    """A function of the grader's: calling it asks the grader to run it."""

    __slots__ = ("id",)

    def __init__(self, cb_id: int) -> None:
        self.id = cb_id

    def __call__(self, *args: object, **kwargs: object) -> object:
        send(REPLIES_FD, _encode(("cb", self.id, args, kwargs)))
        return _serve(until_reply=True)

    def __repr__(self) -> str:
        return f"<grader callback {self.id}>"


def _register(obj: object) -> int:
    handle = _next_id[0]
    _next_id[0] += 1
    _handles[handle] = obj
    return handle


class _Out(pickle.Pickler):
    def persistent_id(self, obj: object) -> object:
        kind = type(obj)
        if kind in _PLAIN:
            return None
        if kind is _ByRef:
            return _handle_tag(obj.obj)
        if kind is _Live:
            return ("L", _register(obj.obj), _copy(obj.obj))
        if kind is _Method:
            return ("m", obj.handle, obj.name)
        if kind is Callback:
            return ("cb", obj.id)
        if isinstance(obj, (int, float, str, bytes)) and not isinstance(obj, bool):
            # An int (str...) subclass goes as its plain value: a NamedTuple's fields, an
            # IntEnum, lab 5's counted block ids. Its own __eq__ stays here.
            return ("v", (int, float, str, bytes)[[isinstance(obj, t) for t in (
                int, float, str, bytes)].index(True)](obj))
        if kind.__module__ == "torch" and kind.__name__ in ("Tensor", "Parameter"):
            return _tensor(obj)
        return _handle_tag(obj)


def _handle_tag(obj: object) -> tuple:
    """``("h", handle, type name)``, and the object's plain fields when it has any (see
    :func:`_fields`)."""
    tag = ("h", _register(obj), type(obj).__qualname__)
    fields = _fields(obj)
    return (*tag, fields) if fields else tag


#: Values a handle's fields may carry (exact types: a subclass's own methods stay here).
_FIELD_TYPES = (type(None), bool, int, float, str)
#: At most this many fields go with one handle (the rest are read one request each), and
#: only short ones: a string of at most this many characters, an int of at most this many
#: bits (a long one is read when asked, so a handle's message stays small).
MAX_FIELDS = 64
MAX_FIELD_SIZE = 1024
_MISSING = object()


def _fields(obj: object) -> dict[str, object]:
    """The plain values (None, bool, int, float, str) among ``obj``'s stored attributes
    (:func:`_stored`): they go with the object's handle, and the grader reads them there
    until the student's code next runs (:class:`pagedsim.labs.remote.Remote`), so that a
    dataclass's record of a few numbers costs one request, not one per field."""
    kind = type(obj)
    if not _reads_plainly(kind):
        return {}
    own = _instance_dict(obj, kind)
    names = [k for k in own if type(k) is str] if own is not None else []
    for klass in kind.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names += [slots] if type(slots) is str else [n for n in slots if type(n) is str]
    found: dict[str, object] = {}
    for name in names:
        if len(found) == MAX_FIELDS:
            break
        value = _stored(obj, kind, name, own)
        kind_of = type(value)
        if kind_of in _FIELD_TYPES and not (
                kind_of is str and len(value) > MAX_FIELD_SIZE  # type: ignore[arg-type]
                or kind_of is int and value.bit_length() > MAX_FIELD_SIZE):  # type: ignore[union-attr]
            found[name] = value
    return found


def _read(obj: object, name: str) -> tuple[object, bool]:
    """``getattr(obj, name)``, and whether it was read without running any code (a value
    stored in the instance: :func:`_stored`)."""
    kind = type(obj)
    if _reads_plainly(kind):
        value = _stored(obj, kind, name, _instance_dict(obj, kind))
        if value is not _MISSING:
            return value, True
    return getattr(obj, name), False


def _reads_plainly(kind: type) -> bool:
    """Do reads of a ``kind`` instance's attributes follow Python's default lookup (no
    ``__getattribute__`` of its own; not a class or a module, whose lookups differ)?"""
    return not issubclass(kind, (type, types.ModuleType)) and \
        _find(kind, "__getattribute__") is object.__dict__["__getattribute__"]


def _stored(obj: object, kind: type, name: str, own: dict | None) -> object:
    """``obj.name`` where it is stored in the instance, in a slot or in its dict ``own``,
    and no property or other data descriptor of its class comes first, so that reading
    it runs no code; else ``_MISSING``. Looked up in the classes' dicts: no descriptor
    runs."""
    attr = _find(kind, name, _MISSING)
    if type(attr) is types.MemberDescriptorType:  # a slot
        try:
            return attr.__get__(obj)
        except AttributeError:  # not set
            return _MISSING
    if own is None or (attr is not _MISSING and _is_data_descriptor(attr)):
        return _MISSING
    return own.get(name, _MISSING)


def _instance_dict(obj: object, kind: type) -> dict | None:
    """``obj.__dict__`` as Python's own descriptor gives it, or None (no dict, or one a
    class computes)."""
    own = _find(kind, "__dict__")
    if not isinstance(own, types.GetSetDescriptorType):
        return None
    value = own.__get__(obj)
    return value if type(value) is dict else None


def _find(kind: type, name: str, default: object = None) -> object:
    """``name`` as the first class of ``kind``'s MRO that defines it holds it (no
    descriptor runs), or ``default``."""
    for klass in kind.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return default


def _is_data_descriptor(attr: object) -> bool:
    """Does ``attr`` (a class attribute) take precedence over the instance dict?"""
    return any("__set__" in k.__dict__ or "__delete__" in k.__dict__
               for k in type(attr).__mro__)


def _copy(value: object) -> object:
    """A copy of a live container for the grader (its elements go as usual)."""
    return dict(value) if isinstance(value, dict) else list(value) if isinstance(
        value, list) else set(value)


def _tensor(x) -> tuple:
    import torch

    flat = x.detach().cpu().contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return ("T", str(x.dtype).removeprefix("torch."), tuple(x.shape), str(x.device), raw)


def _encode(value: object) -> bytes:
    import io

    out = io.BytesIO()
    _Out(out, protocol=4).dump(value)
    return out.getvalue()


class _In(pickle.Unpickler):
    def persistent_load(self, pid: tuple) -> object:
        if pid[0] == "h":
            return _handles[pid[1]]
        if pid[0] == "cb":
            return Callback(pid[1])
        raise pickle.UnpicklingError(f"unknown reference {pid!r}")


def _decode(data: bytes) -> object:
    import io

    return _In(io.BytesIO(data)).load()


def _live(value: object) -> object:
    return _Live(value) if type(value) in _LIVE else value


def _handle(op: str, args: tuple) -> object:
    if op == "import":
        return _ByRef(importlib.import_module(args[0]))
    if op == "count":  # lab 5's comparisons (pagedsim.labs.counting)
        return counting._COUNT[0]
    obj = _handles[args[0]]
    if op == "setattr":
        setattr(obj, args[1], args[2])
        return None
    if op == "call":
        return obj(*args[1], **args[2])  # type: ignore[operator]
    if op == "callmethod":
        return getattr(obj, args[1])(*args[2], **args[3])
    if op == "getitem":
        return _live(obj[args[1]])  # type: ignore[index]
    if op == "setitem":
        obj[args[1]] = args[2]  # type: ignore[index]
        return None
    if op == "delitem":
        del obj[args[1]]  # type: ignore[attr-defined]
        return None
    if op == "list":
        return list(obj)  # type: ignore[call-overload]
    if op in ("copy", "deepcopy"):  # copy.deepcopy(adapter) in the graders: a real copy
        import copy

        return _ByRef(getattr(copy, op)(obj))
    if op == "dunder":  # len, contains, eq, lt, bool, repr, str, hash, int, float, ...
        return getattr(obj, args[1])(*args[2])
    raise ValueError(f"unknown request {op!r}")


def _getattr(handle: int, name: str) -> tuple[object, bool]:
    """What reading ``name`` of object ``handle`` replies (a method as a :class:`_Method`,
    a list, dict or set as its live copy), and whether the read ran no code."""
    value, stored = _read(_handles[handle], name)
    if isinstance(value, (types.MethodType, types.BuiltinMethodType)) and \
            not isinstance(getattr(value, "__self__", None), types.ModuleType):
        return _Method(handle, name), False  # (called in one request from now on)
    return _live(value), stored


def _error_reply(exc: BaseException) -> bytes:
    mro = [(c.__module__, c.__qualname__) for c in type(exc).__mro__]
    where = [f"{Path(f.filename).name}:{f.lineno} in {f.name}"
             for f in traceback.extract_tb(exc.__traceback__)
             if not f.filename.startswith(str(Path(__file__).parent))][-3:]
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a student's __str__ may raise too
        text = "(its message could not be printed)"
    return pickle.dumps(("err", mro, text[:2000], where), protocol=4)


def _serve(until_reply: bool = False) -> object:
    """Answer requests; with ``until_reply``, return (or raise) the grader's answer to the
    callback just sent."""
    while True:
        message = _decode(recv(REQUESTS_FD))
        kind = message[0]
        if kind == "req":
            for handle in message[3]:  # proxies the grader dropped
                _handles.pop(handle, None)
        if kind == "ok" and until_reply:
            return message[1]
        if kind == "err" and until_reply:
            raise RuntimeError(f"the grader's callback failed: {message[1]}")
        if kind != "req":
            raise ValueError(f"unexpected message {kind!r}")
        try:
            if message[1] == "getattr":  # "stored": read without running the student's code
                value, stored = _getattr(*message[2])
                reply = _encode(("ok", value, "stored") if stored else ("ok", value))
            else:
                reply = _encode(("ok", _handle(message[1], message[2])))
        except BaseException as exc:  # noqa: BLE001 - the graders judge every failure
            if isinstance(exc, (KeyboardInterrupt,)) or type(exc) is SystemExit and \
                    exc.code == "pagedsim-worker-stop":
                raise
            try:
                reply = _error_reply(exc)
            except Exception:  # noqa: BLE001
                reply = pickle.dumps(("err", [("builtins", "RuntimeError")],
                                      "an error that could not be sent", []))
        send(REPLIES_FD, reply)


def main() -> None:
    global REQUESTS_FD, REPLIES_FD
    config = json.loads(sys.argv[1])
    REQUESTS_FD, REPLIES_FD = config["fds"]
    for name in config["preload"]:
        torch = sys.modules.get("torch")
        if name == "triton" and torch is not None and not torch.cuda.is_available():
            os.environ.setdefault("TRITON_INTERPRET", "1")  # as lab 6's adapters do
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    block_forbidden(tuple(config["forbidden"]))
    from .sandbox import Unconfined, confine

    workdir = Path.cwd().resolve()
    try:
        notes = confine(workdir, config["memory_bytes"], config["cpu_s"],
                        tuple(config["forbidden"]),
                        refuse_unconfined=bool(config.get("refuse_unconfined")))
    except Unconfined as exc:  # before the student's code is imported: none of it runs
        send(REPLIES_FD, pickle.dumps(("refused", str(exc)), protocol=4))
        os._exit(3)
    sys.path.insert(0, str(workdir))
    send(REPLIES_FD, pickle.dumps(("ready", notes), protocol=4))
    try:
        _serve()
    except OSError:
        pass  # the grader closed the channel: done
    sys.stdout.flush()
    os._exit(0)
