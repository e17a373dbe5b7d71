"""A forbidden module reached at run time scores 0 (issue 21): every lab that forbids one.

Each cheat is a lab's released starter plus the lines of ``tests/labs/forbidden_routes.py``:
routes that find the forbidden object (the package's re-export, another module's global,
a function's ``__globals__``, ``gc.get_objects()``, a walk of ``object.__subclasses__()``,
a dataclass's module; its source read by path; the import hook taken off) and a use of it
that earns points in one task. Every route is shown to work where the defence is not
(:func:`baselines`: all of pagedsim loaded, for the routes through memory; the guard
without the sandbox for the routes through files), and the cheats of labs 1 to 5 to score
in a worker that loads all of pagedsim and then scrubs the forbidden names
(:func:`test_a_scrub_alone_let_the_cheats_score`). In the worker, where the forbidden
modules never run and the sandbox keeps their files out of reach, they score 0.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from forbidden_routes import FILE_ROUTES, LABS, MEMORY_ROUTES

from pagedsim.labs import build_autograder, get_lab, grade
from pagedsim.labs.prefork import Prefork
from pagedsim.labs.release import release_lab

ROOT = Path(__file__).resolve().parents[2]
LAB_DIR = ROOT / "labs"
GUARD = ROOT / "pagedsim" / "labs" / "guard.py"
pytestmark = pytest.mark.skipif(not LAB_DIR.is_dir() or not hasattr(os, "fork"),
                                reason="needs the labs and os.fork")
CASES = [(lab, route) for lab, cheat in LABS.items() for route in cheat.routes]

# Outside the worker: set the process up as `mode` says, then run each cheat (one route
# each) as a module and its lab's probe; print route -> True, False or the error.
_BASELINE = r'''
import importlib.util, json, sys, types
mode, guard_path, forbidden, given, probe, cheats = json.loads(sys.argv[1])
spec = importlib.util.spec_from_file_location("pagedsim.labs.guard", guard_path)
guard = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(guard)
if mode == "loaded":  # no defence at run time: all of pagedsim loaded
    import pagedsim
else:  # the worker's guard without its sandbox (a non-root grader without Landlock)
    guard.install(forbidden, given)
    import pagedsim
    guard.block_forbidden(forbidden)
# Only for the probes that need it: importing torch runs the garbage collector, which
# frees what the scrub left unreferenced (the old worker imported it for labs 6 and 7 only).
torch = __import__("torch") if "torch" in probe else None
seen = {}
for route, source in cheats.items():
    m = sys.modules[f"cheat_{route}"] = types.ModuleType(f"cheat_{route}")
    try:
        exec(compile(source, m.__name__, "exec"), m.__dict__)
        seen[route] = bool(eval(probe, {"m": m, "types": types, "torch": torch}))
    except Exception as exc:
        seen[route] = f"{type(exc).__name__}: {exc}"
print(json.dumps(seen))
'''


@pytest.fixture(scope="module")
def starters(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, str]]:
    """Lab id -> its released student files (name -> text)."""
    out = tmp_path_factory.mktemp("starters")
    files = {}
    for lab_id in LABS:
        lab = get_lab(lab_id, LAB_DIR)
        release_lab(lab, out / lab.folder)
        files[lab_id] = {n: (out / lab.folder / n).read_text(encoding="utf-8")
                         for n in lab.student_files}
    return files


def _cheat_file(lab_id: int, starters: dict, body: str) -> tuple[str, str]:
    (name, text), = starters[lab_id].items()
    return name, text + "\n" + body


def _baseline(lab_id: int, mode: str, routes: tuple[str, ...], starters: dict) -> dict:
    cheat = LABS[lab_id]
    lab = get_lab(lab_id, LAB_DIR)
    sources = {r: _cheat_file(lab_id, starters, cheat.one_route(r))[1] for r in routes}
    config = [mode, str(GUARD), list(lab.forbidden_imports), list(lab.given_modules),
              cheat.probe, sources]
    proc = subprocess.run([sys.executable, "-c", _BASELINE, json.dumps(config)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def baselines(starters: dict) -> dict[int, dict[str, object]]:
    """Lab id -> route -> does the cheat work where its route is not stopped?"""
    jobs = [(lab_id, mode, tuple(r for r in cheat.routes if r in routes))
            for lab_id, cheat in LABS.items()
            for mode, routes in (("loaded", MEMORY_ROUTES), ("guarded", FILE_ROUTES))]
    seen: dict[int, dict[str, object]] = {lab_id: {} for lab_id in LABS}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for (lab_id, _, _), found in zip(jobs, pool.map(
                lambda job: _baseline(*job, starters) if job[2] else {}, jobs), strict=True):
            seen[lab_id].update(found)
    return seen


@pytest.fixture(scope="module")
def graded(starters: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """(lab id, "worker" or "scrubbed") -> the grade of the cheat that tries every route
    (only its task): in the worker as it is, and, for labs 1 to 5, in a worker told to
    load all of pagedsim before it acts (``given_modules``: what a scrub alone left)."""
    root = tmp_path_factory.mktemp("forbidden")
    scrubbed = root / "labs-scrubbed"
    shutil.copytree(LAB_DIR, scrubbed, ignore=shutil.ignore_patterns("__pycache__"))
    for lab_id in range(1, 6):
        path = scrubbed / get_lab(lab_id, LAB_DIR).folder / "lab.json"
        meta = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps({**meta, "given_modules": ["pagedsim"]}), encoding="utf-8")
    jobs = [(lab_id, "worker") for lab_id in sorted(LABS, reverse=True)]  # torch labs first
    jobs += [(lab_id, "scrubbed") for lab_id in range(1, 6)]
    servers: queue.Queue = queue.Queue()
    started = [Prefork(("pytest", "hypothesis", "pagedsim", "torch")) for _ in range(2)]
    for server in started:
        servers.put(server)

    def run(job: tuple[int, str]):
        lab_id, how = job
        name, text = _cheat_file(lab_id, starters, LABS[lab_id].every_route())
        folder = root / f"lab{lab_id}-{how}"
        folder.mkdir()
        (folder / name).write_text(text, encoding="utf-8")
        server = servers.get()
        try:
            return grade(lab_id, path=folder, labs_dir=scrubbed if how == "scrubbed" else
                         LAB_DIR, tasks=[LABS[lab_id].marker], runner=server, timeout_s=300)
        finally:
            servers.put(server)

    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = {job: pool.submit(run, job) for job in jobs}
            return {job: f.exception() or f.result() for job, f in futures.items()}
    finally:
        for server in started:
            server.close()


def _result(graded: dict, key: tuple[int, str]):
    result = graded[key]
    if isinstance(result, BaseException):
        raise result
    return result


@pytest.mark.slow
@pytest.mark.parametrize(("lab_id", "route"), CASES, ids=[f"lab{a}-{r}" for a, r in CASES])
def test_forbidden_route_scores_zero(lab_id: int, route: str, baselines: dict,
                                     graded: dict) -> None:
    # Where nothing stops the route, it reaches the object and the use works.
    assert baselines[lab_id][route] is True, baselines[lab_id]
    result = _result(graded, (lab_id, "worker"))
    # In the worker it finds nothing (the cheat says so in its output), and scores 0 with
    # every test of the task run.
    assert f"cheat route {route}: nothing" in result.output, result.output[-2000:]
    assert result.score == 0, result.table()
    assert all(t.tests >= 1 and t.passed == 0 for t in result.tasks), result.table()


@pytest.mark.parametrize("lab_id", range(1, 6))
def test_a_scrub_alone_let_the_cheats_score(lab_id: int, graded: dict) -> None:
    """Graded in a worker that loads all of pagedsim and then scrubs the forbidden names
    (the defence before this one), the same cheats score: the routes are real."""
    result = _result(graded, (lab_id, "scrubbed"))
    assert result.score > 0, result.table() + result.output[-2000:]
    assert "found" in result.output


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_cheats_score_zero_through_run_autograder(starters: dict, tmp_path: Path) -> None:
    """Lab 3's cheat with every route, graded by the autograder's script (as Gradescope
    runs it, with $AUTOGRADER_ROOT at a temporary folder): 0 points, no route found it."""
    cheat = LABS[3]
    root = tmp_path / "autograder"
    with zipfile.ZipFile(build_autograder(3, tmp_path / "ag.zip", labs_dir=LAB_DIR)) as zf:
        zf.extractall(root / "source")
    name, text = _cheat_file(3, starters, cheat.every_route())
    (root / "submission").mkdir(parents=True)
    (root / "submission" / name).write_text(text, encoding="utf-8")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["score"] == 0, results["output"]
    assert all(t["score"] == 0 for t in results["tests"]), results["tests"]
    assert all(f"cheat route {r}: nothing" in results["output"] for r in cheat.routes), \
        results["output"]


def test_every_lab_that_forbids_a_module_has_cheats() -> None:
    """Every lab that forbids modules has its cheats, through a module it forbids (lab 7's
    through pagedsim.kernels: its pagedsim.memory.accounting answers no task, see
    INSTRUCTORS.md)."""
    from pagedsim.labs import list_labs

    forbidding = {lab.id for lab in list_labs(LAB_DIR) if lab.forbidden_imports}
    assert forbidding <= set(LABS), forbidding - set(LABS)
    for cheat in LABS.values():
        lab = get_lab(cheat.lab, LAB_DIR)
        assert cheat.package in lab.forbidden_imports, (cheat.lab, cheat.package)
        assert set(FILE_ROUTES) <= set(cheat.routes)
