"""The grader against submissions that cheat (issue 21): each scores 0.

Every cheat is lab 1's released starter (every function still raising
``NotImplementedError``) with a few lines appended. Three of them forged full marks when
the student's code ran in the graders' pytest process;
:func:`test_cheats_work_in_the_graders_process` shows they still do there (so these tests
can fail), and :func:`test_cheat_scores_zero` that they score 0 now that it runs in a
separate, confined worker
(:mod:`pagedsim.labs.remote`). Then a 400 MB print (the graders' memory stays bounded) and
an equality that says yes to everything.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pagedsim.labs import grade
from pagedsim.labs.meta import RESULTS_ENV
from pagedsim.labs.prefork import FIXED_ENV, Prefork

ROOT = Path(__file__).resolve().parents[2]
LABS = ROOT / "labs"
pytestmark = pytest.mark.skipif(not (LABS / "lab1_budget").is_dir() or not hasattr(os, "fork"),
                                reason="needs lab 1 and os.fork")

_FORGE = '''
import glob as _glob, json as _json, os as _os, tempfile as _tempfile
def _forge():
    # The grading folders lie beside this process's own folder (both made by tempfile in
    # the grader's temporary directory; this process's $TMPDIR is its own folder).
    tmp = {_os.path.dirname(_os.getcwd()), _tempfile.gettempdir()}
    paths = [p for t in tmp for p in _glob.glob(_os.path.join(t, "pagedsim-lab1-*",
                                                              "results.jsonl"))]
    try:  # the grader's environment, where the results path was
        env = open(f"/proc/{_os.getppid()}/environ", "rb").read().split(b"\\0")
        paths += [e.split(b"=", 1)[1].decode() for e in env
                  if e.startswith(b"PAGEDSIM_LABS_RESULTS=")]
    except OSError:
        pass
    for path in paths:
        with open(path, "a") as f:
            for i in range(1, 5):
                f.write(_json.dumps({"kind": "test", "nodeid": f"forged{i}",
                                     "marker": f"lab1_{i}", "outcome": "passed",
                                     "text": "", "duration": 0}) + "\\n")
'''

CHEATS = {
    # The three of the issue.
    "runtest-no-op": '''
import _pytest.python
_pytest.python.Function.runtest = lambda self: None
''',
    "plugin-write-wrapped": '''
import pagedsim.labs.plugin as _plugin
_real_write = _plugin._write
def _passing(record):
    if record.get("kind") == "test":
        record = {**record, "outcome": "passed", "text": ""}
    _real_write(record)
_plugin._write = _passing
''',
    "plugin-state-faked": '''
import pagedsim.labs.plugin as _plugin
class _AlwaysPassed(dict):
    def setdefault(self, key, default=None):
        return {"outcome": "passed", "text": "", "duration": 0.0}
    def get(self, key, default=None):
        return {"outcome": "passed", "text": "", "duration": 0.0}
_plugin._state["outcomes"] = _AlwaysPassed()
''',
    # The static import check's blind spot: pagedsim.models.specs reached through getattr.
    "forbidden-module-through-getattr": '''
import importlib as _il
_Spec = getattr(_il.import_module("pagedsim"), "Model" + "Spec")
def bytes_per_token(model):
    return _Spec("m", model.num_layers, model.num_heads, model.num_kv_heads, model.head_dim,
                 model.dtype_bytes, weights_bytes=0, max_model_len=1).bytes_per_token
def sequence_kv_bytes(model, num_tokens):
    return num_tokens * bytes_per_token(model)
''',
    # Reading a solution by path: the lab's reference, and pagedsim's forbidden module.
    "reference-read-by-path": '''
import pathlib as _pl, pagedsim as _ps
_ref = _pl.Path(_ps.__file__).resolve().parents[1] / "labs" / "lab1_budget" / "budget_lab.py"
exec(compile(_ref.read_text(), str(_ref), "exec"))
''',
    "forbidden-source-loaded-by-path": '''
import importlib.util as _u, pathlib as _pl, sys as _sy, pagedsim as _ps
_s = _u.spec_from_file_location("pagedsim.models._stolen",
                                _pl.Path(_ps.__file__).parent / "models" / "model_spec.py")
_stolen = _sy.modules[_s.name] = _u.module_from_spec(_s)  # (dataclasses look it up there)
_s.loader.exec_module(_stolen)
def bytes_per_token(model):
    return _stolen.ModelSpec("m", model.num_layers, model.num_heads, model.num_kv_heads,
                             model.head_dim, model.dtype_bytes, weights_bytes=0,
                             max_model_len=1).bytes_per_token
''',
    # The test module's functions gutted in place once pytest has collected them.
    "sys-modules-surgery": '''
import sys as _sys, threading as _th, time as _time
def _gut():
    for _ in range(500):
        mod = _sys.modules.get("test_lab1")
        if mod is not None and sum(n.startswith("test_") for n in vars(mod)) > 20:
            _time.sleep(0.05)
            for name, obj in list(vars(mod).items()):
                code = getattr(obj, "__code__", None)
                if name.startswith("test_") and code is not None and code.co_argcount == 0:
                    obj.__code__ = (lambda: None).__code__
            return
        _time.sleep(0.01)
_th.Thread(target=_gut, daemon=True).start()
''',
    "atexit-writes-results": _FORGE + '''
import atexit as _atexit
_atexit.register(_forge)
''',
    "results-path-written": _FORGE + "\n_forge()\n",
    "signal-to-the-grader": '''
import os as _os, signal as _signal
try:
    _os.kill(_os.getppid(), _signal.SIGINT)
except OSError:
    pass
''',
    "fork-outlives-the-test": '''
import os as _os
if _os.fork() == 0:
    try:
        _os.setsid()
        _os.execv("/bin/sleep", ["sleep", "271.828"])
    finally:
        _os._exit(0)
''',
    "exit-zero-at-import": "\nimport os as _os\n_os._exit(0)\n",
    "skip-from-student-code": '''
import pytest as _pytest
_pytest.skip("nothing to grade", allow_module_level=True)
''',
    # An answer that equals everything.
    "equal-to-everything": '''
class _Yes:
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__
    def __bool__(self):
        return True
def _yes(*args, **kwargs):
    return _Yes()
for _name in ("bytes_per_token", "sequence_kv_bytes", "kv_cache_bytes", "num_blocks",
              "blocks_for_tokens", "wasted_slots", "max_num_sequences"):
    globals()[_name] = _yes
''',
}
#: The cheats that forged full marks when the student's code ran among the graders.
IN_PROCESS_FORGERIES = ("runtest-no-op", "plugin-write-wrapped", "plugin-state-faked")


def _submission(root: Path, starter: str, cheat: str) -> Path:
    folder = root / "lab1_budget"
    folder.mkdir(parents=True)
    (folder / "budget_lab.py").write_text(starter + "\n" + cheat, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def cheated(starter: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Cheat name -> its grade, two at a time from two warm servers."""
    root = tmp_path_factory.mktemp("cheats")
    servers: queue.Queue = queue.Queue()
    started = [Prefork() for _ in range(2)]
    for server in started:
        servers.put(server)

    def run(name: str):
        server = servers.get()
        try:
            path = _submission(root / name, starter, CHEATS[name])
            return grade(1, path=path, labs_dir=LABS, runner=server, timeout_s=180)
        finally:
            servers.put(server)

    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = {name: pool.submit(run, name) for name in CHEATS}
            return {name: f.exception() or f.result() for name, f in futures.items()}
    finally:
        for server in started:
            server.close()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CHEATS))
def test_cheat_scores_zero(name: str, cheated: dict) -> None:
    result = cheated[name]
    if isinstance(result, BaseException):
        raise result
    assert result.score == 0, result.table()
    # Every test ran and was seen failing by the scorer (not a run that broke early).
    assert all(t.tests >= 1 and t.passed == 0 for t in result.tasks), result.table()


def test_the_worker_was_confined(cheated: dict) -> None:
    """What confined the worker is reported; on this machine (Linux with Landlock) the
    reference and the forbidden module could not be read."""
    result = cheated["reference-read-by-path"]
    assert any(n.startswith("limits: ") for n in result.sandbox), result.sandbox
    # The table says it, the user switch included (done, or why not).
    report = result.table(instructor=True)
    assert "the graded code ran in a process of its own: limits: 4 GiB" in report
    assert "user" in report.rsplit("process of its own", 1)[1]
    if any(n.startswith("Landlock ABI") for n in result.sandbox):
        assert "PermissionError" in result.table() or "Errno 13" in result.table()


def test_a_forked_process_does_not_outlive_the_grading(cheated: dict) -> None:
    assert "fork-outlives-the-test" in cheated
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            assert cmdline.read_bytes() != b"sleep\0271.828\0", f"{cmdline.parent} lives on"
        except OSError:
            continue


def test_cheats_work_in_the_graders_process(starter: str, tmp_path: Path) -> None:
    """The three forgeries of the issue, run the old way (the student's module imported
    by the graders' own pytest process, the plugin writing records): every record says
    passed. This is what the worker prevents."""
    with Prefork() as server:
        for name in IN_PROCESS_FORGERIES:
            work = tmp_path / name
            work.mkdir()
            for item in (LABS / "lab1_budget").iterdir():
                if item.is_file() and item.name not in ("mutants.py", "budget_lab.py"):
                    (work / item.name).write_bytes(item.read_bytes())
            (work / "budget_lab.py").write_text(starter + "\n" + CHEATS[name])
            results = tmp_path / f"{name}.jsonl"
            env = {**os.environ, **FIXED_ENV, RESULTS_ENV: str(results)}
            args = ["-q", "-p", "pagedsim.labs.plugin", "-p", "no:cacheprovider", "-p",
                    "hypothesis.extra.pytestplugin", "test_lab1.py"]
            server.run(args, str(work), env, str(tmp_path / f"{name}.log"), 120)
            records = [json.loads(line) for line in results.read_text().splitlines()]
            tests = [r for r in records if r["kind"] == "test"]
            assert len(tests) >= 20 and all(r["outcome"] == "passed" for r in tests), name


def test_a_400_mb_print_keeps_the_graders_memory_bounded(starter: str,
                                                         tmp_path: Path) -> None:
    """The student's code prints 400 MB at import: the output is cut and said so; the
    grading process and the graders' pytest process each stay under 300 MB."""
    cheat = ("import sys as _sys\nfor _ in range(400):\n    _sys.stdout.write('x' * 1_000_000)\n"
             "_sys.stdout.flush()\n")
    path = _submission(tmp_path, starter, cheat)
    # The grading process's own peak: VmHWM, not ru_maxrss, which Linux carries over from
    # the forking parent through exec (under the whole suite pytest is ~500 MB by now).
    code = ("import json, re, sys; from pagedsim.labs import grade; "
            f"r = grade(1, path={str(path)!r}, labs_dir={str(LABS)!r}, tasks=['lab1_1']); "
            "hwm = int(re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read())[1]);"
            " print(json.dumps({'self': hwm * 1024, 'pytest': r.grader_peak_rss_bytes, "
            "'printed': r.output_bytes, "
            "'score': r.score, 'summary': r.to_gradescope()['output']}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["printed"] >= 400_000_000 and seen["score"] == 0
    assert "the rest was cut" in seen["summary"]
    assert 0 < seen["pytest"] < 300 * 2**20 and seen["self"] < 300 * 2**20, seen
