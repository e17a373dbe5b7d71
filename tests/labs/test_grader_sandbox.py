"""What the worker that runs a student's code may do once confined (pagedsim.labs.sandbox).

:func:`confine` runs in a fresh process (it cannot be undone), loaded from its file alone,
so that a Python without the project's packages can run it: as root with the system
Python, the process must become ``nobody``. Each check is skipped, saying why, where the
machine lacks what it needs (Linux, Landlock, root, a user ``nobody``, a Python every user
can read).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SANDBOX = ROOT / "pagedsim" / "labs" / "sandbox.py"
REFERENCE = ROOT / "labs" / "lab1_budget" / "budget_lab.py"
FORBIDDEN = ROOT / "pagedsim" / "models" / "budget.py"

# Run in the confined process: confine, then try what a cheat would; print what happened.
_PROBE = r'''
import importlib.util, json, os, socket, sys
spec = importlib.util.spec_from_file_location("sandbox", sys.argv[1])
sandbox = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sandbox)
work, private, reference, forbidden, allowed, port, parent = sys.argv[2:9]
notes = sandbox.confine(__import__("pathlib").Path(work), 2**30, 60, ("pagedsim.models.budget",))
seen = {"notes": notes, "uid": os.getuid()}
def attempt(name, action):
    try:
        action()
        seen[name] = "ok"
    except OSError as exc:
        seen[name] = type(exc).__name__
attempt("write_own", lambda: open(os.path.join(work, "mine.txt"), "w").write("x"))
attempt("write_private", lambda: open(os.path.join(private, "results.jsonl"), "a").write("x"))
attempt("read_reference", lambda: open(reference).read())
attempt("read_forbidden", lambda: open(forbidden).read())
attempt("read_allowed", lambda: open(allowed).read())
# The parent by its pid outside: in the worker's PID namespace getppid() says 0.
attempt("signal_parent", lambda: os.kill(int(parent), 0))
attempt("udp_out", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(
    b"out", ("127.0.0.1", int(port))))
print(json.dumps(seen))
'''


def _probe(python: str, tmp_path: Path) -> dict:
    """What the confined probe could do; ``udp_received``: whether its datagram to this
    process's loopback arrived."""
    work = tmp_path / "work"
    private = tmp_path / "private"
    work.mkdir()
    private.mkdir(mode=0o700)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.settimeout(0.5)
        proc = subprocess.run(
            [python, "-c", _PROBE, str(SANDBOX), str(work), str(private), str(REFERENCE),
             str(FORBIDDEN), str(ROOT / "pagedsim" / "units.py"),
             str(listener.getsockname()[1]), str(os.getpid())],
            capture_output=True, text=True, timeout=120, cwd=work,
            env={"PATH": os.environ.get("PATH", ""), "PYTHONDONTWRITEBYTECODE": "1"})
        assert proc.returncode == 0, proc.stderr[-2000:]
        try:
            received = listener.recv(16) == b"out"
        except OSError:  # nothing within the timeout
            received = False
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "udp_received": received}


def _landlock(notes: list[str]) -> bool:
    return any(n.startswith("Landlock ABI") for n in notes)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
def test_landlock_keeps_the_worker_to_its_folder(tmp_path: Path) -> None:
    seen = _probe(sys.executable, tmp_path)
    if not _landlock(seen["notes"]):
        pytest.skip(f"Landlock not applied here: {seen['notes']}")
    assert seen["write_own"] == "ok" and seen["read_allowed"] == "ok", seen
    assert seen["write_private"] == "PermissionError", seen
    assert seen["read_reference"] == "PermissionError", seen  # labs/: the reference
    assert seen["read_forbidden"] == "PermissionError", seen  # pagedsim/models/budget.py
    if "no signals out" in " ".join(seen["notes"]):
        # Refused by Landlock, or no such process in the worker's PID namespace.
        assert seen["signal_parent"] in ("PermissionError", "ProcessLookupError"), seen


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
def test_the_worker_has_no_network(tmp_path: Path) -> None:
    """A network namespace of its own: even UDP, which Landlock does not know, leaves
    nothing (the probe's datagram to this process's loopback never arrives)."""
    seen = _probe(sys.executable, tmp_path)
    if not any(n.startswith("network: none") for n in seen["notes"]):
        pytest.skip(f"no network namespace here: {seen['notes']}")
    assert seen["udp_out"] != "ok" and not seen["udp_received"], seen


# As a non-root user (nobody, from root: this Python may not be readable by nobody, so
# the process forks after loading what it needs instead of starting afresh): the network
# is cut off in a user namespace of its own, and the user's own files stay readable.
_NON_ROOT = r'''
import ctypes, importlib.util, json, os, socket, sys
spec = importlib.util.spec_from_file_location("sandbox", sys.argv[1])
sandbox = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sandbox)
if os.geteuid() == 0:
    os.setgid(65534)
    os.setuid(65534)
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # dumpable, as a process started by its user is
note = sandbox._no_network()
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"out", ("127.0.0.1", 9))
    udp = "ok"
except OSError as exc:
    udp = type(exc).__name__
print(json.dumps({"note": note, "udp": udp, "read": len(open(sys.argv[2], "rb").read())}))
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
def test_without_root_the_network_is_cut_off_in_a_user_namespace() -> None:
    proc = subprocess.run([sys.executable, "-c", _NON_ROOT, str(SANDBOX),
                           str(ROOT / "pagedsim" / "units.py")],
                          capture_output=True, text=True, timeout=60, cwd="/")
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    if not seen["note"].startswith("network: none"):
        pytest.skip(f"this kernel lets no user make a user namespace: {seen['note']}")
    assert "user and network namespaces" in seen["note"], seen
    assert seen["udp"] == "OSError" and seen["read"] > 0, seen


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_as_root_the_worker_becomes_nobody(tmp_path: Path) -> None:
    """With a Python every user can read (the system's), the confined process runs as
    nobody and cannot write a folder only root may (where the results are)."""
    import pwd

    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody")
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3 in /usr/bin")
    base = Path(tempfile.mkdtemp(prefix="pagedsim-sandbox-"))  # pytest's is root-only
    try:
        base.chmod(0o755)
        seen = _probe(python, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert seen["uid"] == nobody.pw_uid, seen
    assert any("runs as the unprivileged user nobody" in n for n in seen["notes"]), seen
    assert seen["write_own"] == "ok" and seen["write_private"] == "PermissionError", seen


def test_without_root_no_user_switch_is_tried(tmp_path: Path) -> None:
    """The note says why there was no switch (here: not root, or Python unreadable)."""
    seen = _probe(sys.executable, tmp_path)
    notes = " ".join(seen["notes"])
    if os.geteuid() != 0:
        assert "not run as root" in notes and seen["uid"] == os.getuid()
    else:
        assert "runs as the unprivileged user" in notes or "stays root" in notes


_LIMIT_TESTS = '''\
import adapters
import pytest


@pytest.mark.lab1_1
def test_loops_forever():
    assert adapters.value() == 1


@pytest.mark.lab1_1
def test_after_the_stopped_call():
    assert adapters.toy.ok() == 1


@pytest.mark.lab1_2
def test_asks_too_much_memory():
    assert adapters.toy.hog() == 1
'''


def test_a_call_past_its_limit_or_the_memory_fails_its_test_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One call that never returns is stopped at the call limit (its test fails, the next
    test gets a fresh worker); 8 GiB asked for is a MemoryError in the worker, over its
    4 GiB data limit, not in the graders."""
    from test_labs import _toy_lab

    from pagedsim.labs import grade, grading

    monkeypatch.setattr(grading, "CALL_LIMIT_S", 3.0)
    labs = _toy_lab(tmp_path, _LIMIT_TESTS)
    (labs / "lab1_toy" / "toy.py").write_text(
        "def value():\n    # BEGIN SOLUTION lab 1.1: loop\n    while True:\n        pass\n"
        "    # END SOLUTION\n\n\ndef ok():\n    return 1\n\n\n"
        "def hog():\n    return len(bytearray(8 * 2**30))\n")
    (labs / "lab1_toy" / "adapters.py").write_text(
        "import toy\n\n\ndef value():\n    return toy.value()\n")
    result = grade(1, labs_dir=labs, timeout_s=120)
    first, second = result.tasks
    assert (first.passed, first.tests) == (1, 2), result.table()
    assert ("your code ran longer than 3 s in this call (called with no arguments) and was "
            "stopped") in first.output
    assert (second.passed, second.tests) == (0, 1) and "MemoryError" in second.output


_HANG_TESTS = '''\
import adapters
import pytest
from hypothesis import given, settings, strategies as st


@pytest.mark.lab1_1
@settings(max_examples=30, deadline=None, derandomize=True, database=None)
@given(st.integers(0, 1000))
def test_hangs_from_five_on(x):
    assert adapters.toy.value(x) == x


@pytest.mark.lab1_1
def test_fine_after_it():
    assert adapters.toy.value(1) == 1
'''


def test_a_hung_call_in_a_property_test_is_not_retried_to_shrink(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A property test whose call hangs fails at its first hang: hypothesis does not run
    it again on smaller inputs to shrink the failure (each retry would hang as long, and a
    few used up the grading time, zeroing every later task); the next test passes."""
    from test_labs import _toy_lab

    from pagedsim.labs import grade, grading

    monkeypatch.setattr(grading, "CALL_LIMIT_S", 2.0)
    labs = _toy_lab(tmp_path, _HANG_TESTS)
    (labs / "lab1_toy" / "toy.py").write_text(
        "def value(x):\n    # BEGIN SOLUTION lab 1.1: hang\n    while x >= 5:\n        pass\n"
        "    return x\n    # END SOLUTION\n")
    (labs / "lab1_toy" / "adapters.py").write_text("import toy\n")
    result = grade(1, labs_dir=labs, timeout_s=40)
    first = result.tasks[0]
    assert result.message == "", result.table()
    assert (first.passed, first.tests) == (1, 2), result.table()
    # The first input that hung (hypothesis draws 5 or more soon), named in the message.
    hung = re.search(r"your code ran longer than 2 s in this call \(called with (\d+)\) and "
                     r"was stopped", first.output)
    assert hung is not None and int(hung.group(1)) >= 5, first.output
    assert "smallest input" not in first.output  # no shrinking: one hang, not dozens


def test_a_time_out_names_the_call_without_asking_the_stopped_worker() -> None:
    """The arguments of the call that ran past its limit: plain values as they are, long
    ones cut, and anything else by what it is, never by its repr (a student object's repr
    would need the stopped worker)."""
    from dataclasses import dataclass

    from pagedsim.labs.remote import _call_text

    @dataclass
    class LabModel:
        num_layers: int

    assert _call_text("callmethod", (7, "append_slot", (3, "a"), {"n": 2})) == (
        " (append_slot called with 3, 'a', n=2)")
    assert _call_text("call", (7, ((1, 2.5), [None, True]), {})) == (
        " (called with (1, 2.5), [None, True])")
    assert _call_text("call", (7, (LabModel(3),), {})) == " (called with a LabModel)"
    assert _call_text("call", (7, ("x" * 100,), {})) == f" (called with '{'x' * 37}...')"
    assert _call_text("call", (7, (), {})) == " (called with no arguments)"
    assert _call_text("getattr", (7, "table")) == ""
