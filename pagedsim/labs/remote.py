"""The graders' side of the student's code: a worker process and proxies of its objects.

When :func:`pagedsim.labs.grade` grades, the pytest process that runs the graders holds
no student code. :func:`install` puts a :class:`RemoteModule` in ``sys.modules`` under each
name the lab's graders import the student's code by (``budget_lab``; lab 6's
``adapters``); every use of it (an attribute, a call, an item, ``len``, iteration) is a
request to a :class:`Worker`, a process (:mod:`pagedsim.labs.worker`, started through
:mod:`.guard`, which keeps the lab's forbidden modules out of it) in a folder holding the
student's files only, confined (:mod:`pagedsim.labs.sandbox`). Answers
come back as plain values (ints, strings, lists, tensors' copies...), checked by the
graders here, or as handles (:class:`Remote`) of objects that stay there; the student's
exceptions come back as the nearest builtin or pagedsim exception class. The student's
code can answer wrongly, or end its process, but it cannot reach the graders, the
plugin's records or pytest: a forged record forges nothing.

Limits: one call that runs longer than ``call_limit_s`` ends the worker (the test fails
and the next request starts a fresh one); the worker's output is kept up to
:data:`OUTPUT_CAP_BYTES` and the rest counted, never stored.
"""

from __future__ import annotations

import json
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

from . import same_cpu, tree
from .answers import CallTimedOut, WorkerError, exception, tensor
from .guard import BOOT
from .live import LIVE
from .wire import WireError, recv, safe_loads, send

#: Bytes of the student's printed output kept (the rest is counted, then dropped).
OUTPUT_CAP_BYTES = 64 * 2**10
#: Seconds a worker whose channel broke is given to end by itself (its status is then its own).
DEATH_WAIT_S = 1.0
#: Seconds between two looks at what the worker's whole process tree uses.
WATCH_PERIOD_S = 0.25
_CALLABLES = (types.FunctionType, types.MethodType, types.BuiltinFunctionType)


class Worker:
    """One worker process (restarted on the next request after it ends)."""

    def __init__(self, config: dict) -> None:
        self.config = config
        #: Which process handles belong to: one more each time a worker ends.
        self.generation = 1
        self.notes: list[str] = []
        #: Requests sent so far (a handle's fields hold until the next one).
        self.requests = 0
        self.output = bytearray()
        self.output_total_bytes = 0
        #: Why no worker is started again ("" while one may be): one refused to run the
        #: student's code, or the student's module ended its process, or ran past the
        #: time limit, while it was being imported (a new process would import it again
        #: and end the same way, and a property test's shrinking would start dozens).
        self.refused = ""
        #: Why the watch of the worker's tree stopped it ("" while it has not).
        self.stopped_why = ""
        self._proc: subprocess.Popen | None = None
        #: The requesting thread, held on the worker's CPU while one runs (same_cpu.py).
        self._held: same_cpu.Held | None = None
        self._callbacks: dict[int, object] = {}
        self._released: list[int] = []
        #: (type name, attribute) pairs known to be methods: called in one request.
        self.methods: set[tuple[str, str]] = set()
        #: Requests sent so far, and the count when the student's code last ran (or
        #: may have: every request but a read of a stored attribute runs some).
        self.requests = 0
        self.changed_at = 0
        #: (handle, attribute) -> what reading it answered, for the attributes read since
        #: the student's code last ran that the worker read from the instance without
        #: running any (its dict, its slots): they cannot have changed in between, and
        #: the graders read the same ones at every step (pagedsim's views, every block's
        #: reference count).
        self.reads: dict[tuple[int, str], object] = {}

    # -- the process
    def _start(self) -> None:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        config = {**self.config, "fds": [req_r, rep_w]}
        if self.config.get("same_cpu", True) and self._held is None:
            # This thread, and so the worker forked from it, on the CPU it runs on now.
            self._held = same_cpu.hold_here()
        # (OMP_NUM_THREADS: how many threads torch may use, the grading machine's choice;
        # the test suite runs it at 1 per core's worker.)
        env = {k: v for k, v in os.environ.items()
               if k in ("PATH", "LANG", "LC_ALL", "HOME", "PAGEDSIM_LABS_USER", "SYSTEMROOT",
                        "PAGEDSIM_LABS_NO_LANDLOCK", "OMP_NUM_THREADS")}
        env.update(PYTHONDONTWRITEBYTECODE="1", TMPDIR=config["folder"],
                   TRITON_CACHE_DIR=str(Path(config["folder"]) / ".triton"))
        self._proc = subprocess.Popen(
            [sys.executable, "-c", BOOT, json.dumps(config)],
            cwd=config["folder"], pass_fds=(req_r, rep_w), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
            start_new_session=True)
        os.close(req_r)
        os.close(rep_w)
        self._send_fd, self._recv_fd = req_w, rep_r
        threading.Thread(target=self._drain, args=(self._proc.stdout,), daemon=True).start()
        self.stopped_why = ""
        threading.Thread(target=self._watch, args=(self._proc,), daemon=True).start()
        reply = self._wait(self.config["start_limit_s"], "to start")
        if reply and reply[0] == "refused":  # root without confinement (sandbox.py)
            self.close()
            self.refused = str(reply[1])  # and so will every other start: none is tried
            raise WorkerError(self.refused)
        self.notes = list(reply[1]) if reply and reply[0] == "ready" else []

    def _drain(self, stream) -> None:
        while True:
            chunk = stream.read1(1 << 16)
            if not chunk:
                return
            self.output_total_bytes += len(chunk)
            room = OUTPUT_CAP_BYTES - len(self.output)
            if room > 0:
                self.output += chunk[:room]

    def _watch(self, proc: subprocess.Popen) -> None:
        """Every :data:`WATCH_PERIOD_S`, what the worker's whole tree uses
        (:mod:`pagedsim.labs.tree`); past a limit, the tree is killed (the call under way
        then fails, saying why) and the watch ends with it."""
        if not sys.platform.startswith("linux"):
            return
        folder = self.config["folder"]
        memory_bytes, cpu_s = self.config["memory_bytes"], self.config["cpu_s"]
        disk_bytes = self.config["disk_bytes"]
        while proc.poll() is None:
            time.sleep(WATCH_PERIOD_S)
            used = tree.usage(proc.pid)
            disk = tree.folder_bytes(folder)
            why = ""
            if used.memory_bytes > memory_bytes:
                why = (f"your code's processes ({used.processes}) held "
                       f"{used.memory_bytes / 2**30:.2f} GiB of memory together, over the "
                       f"limit of {memory_bytes / 2**30:g} GiB, and were stopped")
            elif used.cpu_s > cpu_s:
                why = (f"your code's processes used {used.cpu_s:.0f} s of CPU together, over "
                       f"the limit of {cpu_s} s, and were stopped")
            elif disk < 0 or disk > disk_bytes:
                why = ("your code wrote " + (f"more than {tree.MAX_ENTRIES:,} files" if disk < 0
                                             else f"{disk / 2**20:.0f} MiB of files")
                       + f", over the limit of {disk_bytes / 2**20:g} MiB, and was stopped")
            if why and proc.poll() is None:
                self.stopped_why = why
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                return

    @property
    def pid(self) -> int | None:
        """The worker's process id (None while none runs)."""
        return self._proc.pid if self._proc is not None else None

    def close(self) -> None:
        """End the worker and everything it started."""
        if self._held is not None:  # the requesting thread's CPUs back
            self._held.release()
            self._held = None
        if self._proc is None:
            return
        for fd in (self._send_fd, self._recv_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._proc.wait()
        self._proc = None
        self.generation += 1  # its handles are stale from now on
        self.reads.clear()

    def _died(self, what: str, op: str = "") -> WorkerError:
        """The error for a worker that ended ``what`` (its tree is killed); when it ended
        importing the student's module (``op`` "import"), no other is started."""
        proc = self._proc
        if proc is not None:
            # A channel that closed is usually a process on its way out: its own status
            # (exit 0, a signal) says more than the kill below would.
            try:
                proc.wait(timeout=DEATH_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
        self.close()
        status = proc.returncode if proc is not None else None
        if self.stopped_why:  # the watch above: say which limit
            message = self.stopped_why
        else:
            how = (f"killed by signal {-status}" if status is not None and status < 0
                   else f"exit status {status}")
            message = f"your code's process ended {what} ({how})"
        if op == "import":
            message = self._no_restart(message, "end")
        return WorkerError(message)

    def _no_restart(self, message: str, how: str) -> str:
        """``message`` about the import of the student's module, which ended or hung
        (``how``: "end", "hang"); kept as :attr:`refused`, so no worker is started again."""
        self.refused = (f"{message}, while importing your module; it was not started again, "
                        f"since it would {how} the same way")
        return self.refused

    # -- requests
    def request(self, op: str, *args: object) -> object:
        self.requests += 1
        if op != "getattr":
            self._code_runs()
        if self.refused:
            raise WorkerError(self.refused)
        if self._proc is None:
            self._start()
        released, self._released = self._released, []
        try:
            send(self._send_fd, self._encode(("req", op, args, released)))
        except OSError:
            raise self._died("before answering", op) from None
        reply = self._wait(self.config["call_limit_s"], "in this call", op, args)
        value = self._finish(reply)
        if op == "getattr":
            if len(reply) == 3:  # read from the instance: no code ran
                self.reads[(args[0], args[1])] = value
            else:  # a property (or the like) ran the student's code
                self._code_runs()
        return value

    def _code_runs(self) -> None:
        """The student's code runs (or may) in the request under way: what was read before
        may have changed. (What this request's reply brings was read after it ran.)"""
        self.changed_at = self.requests
        self.reads.clear()

    def _wait(self, limit_s: float, what: str, op: str = "", args: tuple = ()) -> tuple:
        """The next reply to request ``op`` (of ``args``, named if it times out); runs the
        grader callbacks the worker asks for meanwhile."""
        while True:
            ready, _, _ = select.select([self._recv_fd], [], [], limit_s)
            if not ready:
                self.close()
                message = (f"your code ran longer than {limit_s:g} s {what}"
                           f"{_call_text(op, args)} and was stopped")
                if op == "import":  # a module that hangs at import hangs every time
                    message = self._no_restart(message, "hang")
                raise CallTimedOut(message)
            try:
                message = safe_loads(recv(self._recv_fd), self._resolve)
            except WireError as exc:
                raise self._died(f"{what}: {exc}", op) from None
            if not isinstance(message, tuple) or not message:
                raise self._died(f"{what}: a malformed reply", op)
            if message[0] != "cb":
                return message
            self._run_callback(message)
            self.requests += 1  # the student's code goes on after the callback
            self._code_runs()

    def _run_callback(self, message: tuple) -> None:
        try:
            _, cb_id, args, kwargs = message
            reply = ("ok", self._callbacks[cb_id](*args, **kwargs))  # type: ignore[operator]
        except Exception as exc:  # noqa: BLE001 - reported to the worker
            reply = ("err", f"{type(exc).__name__}: {exc}")
        send(self._send_fd, self._encode(reply))

    def _finish(self, message: tuple) -> object:
        if message[0] == "ok" and (len(message) == 2 or message[2:] == ("stored",)):
            return message[1]
        if message[0] == "err" and len(message) == 4:
            raise exception(*message[1:])
        raise self._died("with a malformed reply")

    # -- encoding
    def _encode(self, value: object) -> bytes:
        import io

        out = io.BytesIO()
        _Pickler(out, self).dump(value)
        return out.getvalue()

    def _persistent_id(self, obj: object) -> object:
        if isinstance(obj, Remote):
            if obj._gen != self.generation:
                raise WorkerError("this object belonged to your code's earlier process, "
                                  "which ended")
            return ("h", obj._id)
        if isinstance(obj, _CALLABLES) and _graders_own(obj):
            cb_id = len(self._callbacks) + 1
            self._callbacks[cb_id] = obj
            return ("cb", cb_id)
        return None

    def _resolve(self, tag: tuple) -> object:
        kind = tag[0]
        if kind == "h" and len(tag) == 3 and type(tag[1]) is int:
            return Remote(self, tag[1], str(tag[2]))
        if kind == "h" and len(tag) == 4 and type(tag[1]) is int and _fields_ok(tag[3]):
            return Remote(self, tag[1], str(tag[2]), tag[3])
        if kind == "m" and len(tag) == 3 and type(tag[1]) is int and type(tag[2]) is str:
            return RemoteMethod(self, tag[1], tag[2])
        if kind == "cb" and len(tag) == 2 and tag[1] in self._callbacks:
            return self._callbacks[tag[1]]
        if kind == "L" and len(tag) == 3 and type(tag[1]) is int and type(tag[2]) in LIVE:
            return LIVE[type(tag[2])](Remote(self, tag[1], type(tag[2]).__name__), tag[2])
        if kind == "v" and len(tag) == 2 and type(tag[1]) in (int, float, str, bytes):
            return tag[1]
        if kind == "T" and len(tag) == 5:
            return tensor(*tag[1:])
        raise WireError(f"unknown reference {tag!r:.80}")


#: What goes to the worker as a list: views and one-pass iterables that pickle cannot copy.
_AS_LIST = (type({}.keys()), type({}.values()), type({}.items()), types.GeneratorType, map,
            filter, zip, reversed)


class _Pickler(pickle.Pickler):
    def __init__(self, out, worker: Worker) -> None:
        super().__init__(out, protocol=4)
        self._worker = worker

    def persistent_id(self, obj: object) -> object:
        return self._worker._persistent_id(obj)

    def reducer_override(self, obj: object) -> object:
        if isinstance(obj, _AS_LIST):
            return (list, (list(obj),))  # type: ignore[call-overload]
        return NotImplemented


#: Modules whose functions go to the worker by name: what pickle itself names when it
#: copies a tensor or a container (torch's rebuilders, copyreg's reconstructor).
_BY_NAME = ("torch", "copyreg", "builtins", "collections", "numpy", "_codecs", "functools")


def _call_text(op: str, args: tuple) -> str:
    """`` (NAME called with ARGS)`` for a call request (a function's name is not known
    here: `` (called with ARGS)``), its plain arguments shown (ints, floats, strings,
    short tuples and lists of them; anything else by its type, since asking a stopped
    worker for a repr would start another), or "" for any other request."""
    if op == "callmethod" and len(args) == 4:
        name, call_args, kwargs = str(args[1]), args[2], args[3]
    elif op == "call" and len(args) == 3:
        name, call_args, kwargs = "", args[1], args[2]
    else:
        return ""
    shown = [_plain(a) for a in call_args] if isinstance(call_args, tuple) else ["..."]
    if isinstance(kwargs, dict):
        shown += [f"{k}={_plain(v)}" for k, v in kwargs.items()]
    return f" ({name + ' ' if name else ''}called with {', '.join(shown) or 'no arguments'})"


def _plain(value: object, depth: int = 0) -> str:
    """A short repr of a plain value; of anything else, what it is (``<your Seq>`` for an
    object of the student's process, ``a LabModel`` for one of the graders'), without
    calling its ``repr`` (see :func:`_call_text`)."""
    if value is None or type(value) in (bool, int, float):
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."
    if type(value) is str:
        return repr(value if len(value) <= 40 else value[:37] + "...")
    if type(value) in (tuple, list) and depth < 2 and len(value) <= 8:
        inner = ", ".join(_plain(v, depth + 1) for v in value)
        return f"({inner}{',' if len(value) == 1 else ''})" if type(value) is tuple \
            else f"[{inner}]"
    if isinstance(value, Remote):
        return f"<your {object.__getattribute__(value, '_type')}>"
    return f"a {type(value).__name__}"


def _fields_ok(fields: object) -> bool:
    """Is ``fields`` what a handle's fields must be: a dict of names to plain values?"""
    return type(fields) is dict and all(
        type(k) is str and type(v) in (type(None), bool, int, float, str)
        for k, v in fields.items())


def _graders_own(func: object) -> bool:
    """Is ``func`` to be called back in this process (every function and method of the
    graders, pagedsim's included, so that what it changes is changed here) rather than
    pickled by name (a library's that pickle uses to copy a value)?"""
    if isinstance(func, types.MethodType):
        return True
    module = getattr(func, "__module__", None) or ""
    return module.partition(".")[0] not in _BY_NAME


class Remote:
    """An object that lives in the worker; every use is a request."""

    __slots__ = ("_w", "_id", "_gen", "_type", "_fields", "_asked", "__weakref__")

    def __init__(self, worker: Worker, handle: int, type_name: str,
                 fields: dict[str, object] | None = None) -> None:
        object.__setattr__(self, "_w", worker)
        object.__setattr__(self, "_id", handle)
        object.__setattr__(self, "_gen", worker.generation)
        object.__setattr__(self, "_type", type_name)
        #: The object's plain stored fields as the reply that brought it read them (the
        #: worker's ``_fields``), good until the student's code next runs (``_asked``:
        #: the worker's request count then; see ``Worker.changed_at``).
        object.__setattr__(self, "_fields", fields)
        object.__setattr__(self, "_asked", worker.requests)

    def _ask(self, op: str, *args: object) -> object:
        if self._gen != self._w.generation:
            raise WorkerError(f"this {self._type} belonged to your code's earlier process, "
                              "which ended")
        return self._w.request(op, self._id, *args)

    def __getattr__(self, name: str) -> object:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        worker = self._w
        current = self._gen == worker.generation
        fields = self._fields
        if current and fields is not None and name in fields and \
                self._asked >= worker.changed_at:
            return fields[name]
        if (self._type, name) in worker.methods:
            return RemoteMethod(worker, self._id, name)
        key = (self._id, name)
        if current and key in worker.reads:
            return worker.reads[key]
        value = self._ask("getattr", name)
        if isinstance(value, RemoteMethod):
            worker.methods.add((self._type, name))
        return value

    def __setattr__(self, name: str, value: object) -> None:
        self._ask("setattr", name, value)

    def __del__(self) -> None:
        if getattr(self, "_gen", None) == self._w.generation:
            self._w._released.append(self._id)

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self._ask("call", args, kwargs)

    def __getitem__(self, key: object) -> object:
        return self._ask("getitem", key)

    def __setitem__(self, key: object, value: object) -> None:
        self._ask("setitem", key, value)

    def __delitem__(self, key: object) -> None:
        self._ask("delitem", key)

    def __iter__(self):
        return iter(self._ask("list"))  # type: ignore[call-overload]

    def __hash__(self) -> int:
        return hash((id(self._w), self._gen, self._id))

    def __copy__(self) -> object:
        return self._ask("copy")  # made in the worker: a handle of the copy

    def __deepcopy__(self, memo: dict) -> object:
        return self._ask("deepcopy")

    def __repr__(self) -> str:
        try:
            return str(self._ask("dunder", "__repr__", ()))
        except (Exception, CallTimedOut):  # noqa: BLE001 - a repr must not raise in a report
            return f"<your {self._type}>"


def _dunder(name: str):
    def method(self: Remote, *args: object) -> object:
        return self._ask("dunder", name, args)
    method.__name__ = name
    return method


# What the student's object answers is data the graders check (a length, a string, a
# number, membership). Equality, order and truth are not asked: an object whose __eq__
# says True to everything would pass every ``assert answer == expected``. A student's
# object equals only itself here, and has no truth value.
for _name in ("__len__", "__contains__", "__str__", "__int__", "__float__", "__index__",
              "__next__"):
    setattr(Remote, _name, _dunder(_name))


def _equal(self: Remote, other: object) -> bool:
    return isinstance(other, Remote) and (other._w, other._gen, other._id) == (
        self._w, self._gen, self._id)


def _no_truth(self: Remote) -> bool:
    raise TypeError(f"your code gave a {self._type} where a value (a bool, a number, a "
                    "list...) was expected")


Remote.__eq__ = _equal  # type: ignore[method-assign,assignment]
Remote.__ne__ = lambda self, other: not _equal(self, other)  # type: ignore[method-assign]
Remote.__bool__ = _no_truth  # type: ignore[attr-defined]


class RemoteMethod:
    """A method of a worker object (``pool.take_block``), called in one request."""

    __slots__ = ("_w", "_id", "_gen", "_name")

    def __init__(self, worker: Worker, handle: int, name: str) -> None:
        self._w, self._id, self._gen, self._name = worker, handle, worker.generation, name

    def __call__(self, *args: object, **kwargs: object) -> object:
        if self._gen != self._w.generation:
            raise WorkerError("this method belonged to your code's earlier process")
        return self._w.request("callmethod", self._id, self._name, args, kwargs)


class RemoteModule(types.ModuleType):
    """A module of the worker, imported there on first use."""

    def __init__(self, name: str, worker: Worker) -> None:
        super().__init__(name, f"your {name}, run in a separate process")
        self._worker = worker
        self._module: Remote | None = None

    def __getattr__(self, attr: str) -> object:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        module = self.__dict__.get("_module")
        if module is None or module._gen != self._worker.generation:
            module = self._worker.request("import", self.__name__)
            self.__dict__.update(_module=module, _cache={})
        cache = self.__dict__["_cache"]
        if attr in cache and cache[attr]._gen == self._worker.generation:
            return cache[attr]
        value = getattr(module, attr)
        if isinstance(value, Remote):  # a class or function: the same object next time
            cache[attr] = value
        return value


def install(worker: Worker, names: list[str]) -> None:
    """Put a :class:`RemoteModule` for each name in ``sys.modules``."""
    for name in names:
        sys.modules[name] = RemoteModule(name, worker)
