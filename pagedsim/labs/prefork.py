"""A warm process that forks one grader run at a time: for grading many times in a row.

Every grader run of :func:`pagedsim.labs.grade` normally starts ``python -m pytest`` afresh,
and most of a short run goes to importing Python's heavy hitters (pytest, hypothesis,
pagedsim, and torch for the kernel labs) before the first test. A :class:`Prefork`
imports them once, in a server process, and then forks a child per run: the child changes
into the grading folder, takes the run's environment, puts the folder first on
``sys.path`` (as ``python -m pytest`` does with its working directory) and calls
``pytest.main`` with the same arguments; its output goes to a file the parent reads.
Everything else (the grading copy, the plugin's records, the scoring) is the same code.
``tests/labs/test_labs.py`` grades every lab's reference, starter and mutants through two of
them; the command line always starts a fresh process.

Unix only (it needs ``os.fork``). Modules preloaded must be safe to fork after import:
pytest, hypothesis, pagedsim and torch are (nothing has run yet in the server); triton is
not preloaded, since a lab may choose its interpreter mode before importing it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

# The server: import the preloads, answer "ready", then for each request line fork a
# child that runs pytest.main and report its exit status (-9 when killed at the time limit).
_SERVER = r'''
import ctypes, importlib, json, os, signal, sys, time
try:  # the jobs it reads hold the runs' keys (pagedsim.labs.signing): no same-user reads
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
except (OSError, AttributeError):
    pass
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except ImportError:
        pass
print("ready", flush=True)
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        status = 3
        try:
            fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.chdir(job["cwd"])
            os.environ.clear()
            os.environ.update(job["env"])
            sys.path.insert(0, job["cwd"])
            sys.argv = ["pytest", *job["args"]]
            import pytest
            status = int(pytest.main(job["args"]))
        except BaseException as exc:
            print(f"prefork child: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    deadline = time.monotonic() + job["timeout"]
    while True:
        done, raw = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(raw)
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            status = -9
            break
        time.sleep(0.02)
    print(json.dumps({"status": status}), flush=True)
'''


#: Environment every grader run gets (and the server too, since both are read at import):
#: installed pytest plugins load only when named (some are slow to import: nbmake pulls in
#: jsonschema, two seconds per run; graders need none but hypothesis's), and hypothesis
#: skips other packages' hooks (trio's, if installed: a fifth of a second per run).
FIXED_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "HYPOTHESIS_NO_PLUGINS": "1",
             "PYTHONDONTWRITEBYTECODE": "1"}


class Prefork:
    """One warm server process; :meth:`run` forks a grader run from it (one at a time per
    server: use several servers for runs in parallel). Use as a context manager, or call
    :meth:`close`."""

    def __init__(self, preload: tuple[str, ...] = ("pytest", "hypothesis", "pagedsim"),
                 env: dict[str, str] | None = None) -> None:
        if not hasattr(os, "fork"):
            raise OSError("Prefork needs os.fork (Unix)")
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, json.dumps(list(preload))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, **FIXED_ENV, **(env or {})})
        assert self._proc.stdout is not None
        ready = self._proc.stdout.readline().strip()
        if ready != "ready":
            self.close()
            raise OSError(f"the prefork server did not start (said {ready!r})")

    def run(self, args: list[str], cwd: str, env: dict[str, str], log: str,
            timeout_s: float) -> int:
        """Run ``pytest.main(args)`` in a forked child in ``cwd`` with environment ``env``,
        its output written to the file ``log``; its exit status (-9 if it ran past
        ``timeout_s`` and was killed)."""
        job = {"args": args, "cwd": cwd, "env": env, "log": log, "timeout": timeout_s}
        with self._lock:
            assert self._proc.stdin is not None and self._proc.stdout is not None
            self._proc.stdin.write(json.dumps(job) + "\n")
            self._proc.stdin.flush()
            reply = self._proc.stdout.readline()
        if not reply:
            raise OSError("the prefork server died")
        return int(json.loads(reply)["status"])

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()

    def __enter__(self) -> Prefork:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
