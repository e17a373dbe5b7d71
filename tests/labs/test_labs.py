"""The classroom labs (labs/, issue 12) and their framework (pagedsim.labs).

For every lab folder found (parametrized at collection, so a lab added later is covered):
the reference gets full marks, the released starter scores 0 on every task and its graders
collect, every mutant loses points in one of its ``caught_by`` tasks, a forbidden import
scores 0, the release holds no solution, the autograder zip holds no solution and no
mutants. The grader runs of all selected labs happen once per session, two at a time (the
machine has 2 cores), in :func:`graded`. Then the framework's own parts: regions, mutants,
the import check, the plugin's marker rules and scoring, the CLI, the index in
labs/README.md.
"""

from __future__ import annotations

import getpass
import json
import os
import queue
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pagedsim.cli import main
from pagedsim.labs import (
    LabError,
    LabResult,
    Mutant,
    RegionError,
    build_autograder,
    find_labs_dir,
    forbidden_imports,
    grade,
    list_labs,
    load_mutants,
    parse_regions,
    release,
    strip_regions,
)
from pagedsim.labs.autograder import (
    KNOWN_REQUIREMENTS,
    TORCH_CPU_INDEX,
    TORCH_PIN,
    lab_requirements,
)
from pagedsim.labs.index import between, index_table
from pagedsim.labs.meta import lab_folders, load_lab
from pagedsim.labs.prefork import Prefork
from pagedsim.labs.release import release_lab, stripped_files

ROOT = Path(__file__).resolve().parents[2]


def _load_each() -> tuple[list, dict[str, str]]:
    """The labs that load, and folder -> error for those that do not (each fails its own
    test below instead of stopping the collection of every lab's)."""
    labs, broken = [], {}
    for folder in (lab_folders(ROOT / "labs") if (ROOT / "labs").is_dir() else []):
        try:
            lab = load_lab(folder)
            load_mutants(lab)
            labs.append(lab)
        except LabError as exc:
            broken[folder.name] = str(exc)
    return labs, broken


LABS, BROKEN = _load_each()
LAB_IDS = [f"lab{lab.id}" for lab in LABS]
MUTANTS = [(lab, m) for lab in LABS for m in load_mutants(lab)]
#: At most this many grader subprocesses at once (the suite's machine has 2 cores).
JOBS = 2
#: The reference is graded 1 + len(REGRADES) times (issue 35: a regrade gave another mark).
REGRADES = (2, 3)


# --------------------------------------------------------------------------------------
# Every grader run of the session, once, two at a time.


@pytest.fixture(scope="session")
def released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every lab that loads, released (one by one, so a broken lab fails only its own
    tests; test_cli_release_refuses_a_non_empty_folder runs the whole release)."""
    out = tmp_path_factory.mktemp("released")
    for lab in LABS:
        release_lab(lab, out / lab.folder)
    return out


@pytest.fixture(scope="session")
def graded(request: pytest.FixtureRequest, released: Path) -> dict[tuple[int, str], object]:
    """(lab id, "reference" | "starter" | mutant name) -> result, for the labs this session
    selected."""
    wanted = set()
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "lab" in params and "graded" in getattr(item, "fixturenames", ()):
            wanted.add(params["lab"].id)
    jobs: dict[tuple[int, str], dict] = {}
    # Labs that run torch/triton first: their runs are the longest, and starting them
    # early keeps both workers busy until the end.
    for lab in sorted(LABS, key=lambda lab: not lab_requirements(lab)[1]):
        if lab.id in wanted:
            jobs[(lab.id, "reference")] = {}
            # Graded twice more (forked, which saves the start-up): the same files must
            # get the same grade on every run.
            jobs.update({(lab.id, f"reference#{i}"): {} for i in REGRADES})
            jobs[(lab.id, "starter")] = {"path": released}
            # A mutant is caught once one test of its caught_by tasks fails: run only those
            # tasks and stop at the first failure (pytest -x).
            jobs.update({(lab.id, m.name): {"mutant": m.name, "tasks": m.caught_by,
                                            "fail_fast": True} for m in load_mutants(lab)})
    # Starters and mutants run in children forked from warm servers (Prefork: pytest,
    # hypothesis, pagedsim and, for the kernel labs, torch imported once), which saves most
    # of each short run; the references run as `pagedsim labs grade` runs them, in a fresh
    # Python, so the production path is the one that must give full marks.
    torch = any(lab_requirements(lab)[1] for lab in LABS if lab.id in wanted)
    preload = ("pytest", "hypothesis", "pagedsim") + (("torch",) if torch else ())
    servers: queue.Queue = queue.Queue()
    started = [Prefork(preload) for _ in range(JOBS)] if hasattr(os, "fork") else []
    for server in started or [None] * JOBS:
        servers.put(server)

    def run(key: tuple[int, str], kwargs: dict) -> LabResult:
        server = servers.get()
        try:
            runner = None if key[1] == "reference" else server
            return grade(key[0], labs_dir=ROOT / "labs", runner=runner, **kwargs)
        finally:
            servers.put(server)

    try:
        with ThreadPoolExecutor(max_workers=JOBS) as pool:
            futures = {key: pool.submit(run, key, kwargs) for key, kwargs in jobs.items()}
            # A lab that cannot be graded fails its own tests, not every lab's.
            return {key: f.exception() or f.result() for key, f in futures.items()}
    finally:
        for server in started:
            server.close()


def _result(graded: dict, key: tuple[int, str]) -> LabResult:
    result = graded[key]
    if isinstance(result, BaseException):
        raise result
    return result


@pytest.mark.parametrize("folder", sorted(p.name for p in lab_folders(ROOT / "labs"))
                         if (ROOT / "labs").is_dir() else [])
def test_lab_loads(folder: str) -> None:
    """lab.json is valid, the files it names exist, mutants.py loads and its mutants apply."""
    assert folder not in BROKEN, BROKEN.get(folder)


@pytest.mark.slow
@pytest.mark.parametrize("lab", LABS, ids=LAB_IDS)
def test_reference_gets_full_marks(lab, graded) -> None:
    result = _result(graded, (lab.id, "reference"))
    assert result.errors == () and result.message == "", result.table()
    for task in result.tasks:
        assert task.tests >= 1, f"{task.marker} has no test"
    assert result.full_marks, result.table()


def _per_test(result: LabResult) -> list[tuple]:
    """What a grade consists of: each task's points, tests passed and feedback."""
    return [(t.marker, t.score, t.passed, t.tests, t.output) for t in result.tasks]


@pytest.mark.slow
@pytest.mark.parametrize("lab", LABS, ids=LAB_IDS)
def test_reference_gets_the_same_grade_three_times(lab, graded) -> None:
    """Three grader runs of the same files: the same points and the same feedback, task by
    task (every property test tries the same examples on every run)."""
    runs = [_result(graded, (lab.id, "reference"))]
    runs += [_result(graded, (lab.id, f"reference#{i}")) for i in REGRADES]
    assert [r.score for r in runs] == [runs[0].score] * len(runs)
    for again in runs[1:]:
        assert _per_test(again) == _per_test(runs[0]), again.table()


@pytest.mark.slow
@pytest.mark.parametrize("lab", LABS, ids=LAB_IDS)
def test_released_starter_scores_zero_on_every_task(lab, graded) -> None:
    result = _result(graded, (lab.id, "starter"))
    # The graders must collect on the starter: every test runs and fails (no collection
    # error, which would zero the tasks for the wrong reason).
    assert result.errors == () and result.message == "", result.table()
    for task in result.tasks:
        assert task.tests >= 1 and task.score == 0, (task.marker, task.output)


@pytest.mark.parametrize("lab", LABS, ids=LAB_IDS)
def test_lab_has_two_mutants_or_more(lab) -> None:
    assert len(load_mutants(lab)) >= 2


@pytest.mark.slow
@pytest.mark.parametrize(("lab", "mutant"), MUTANTS,
                         ids=[f"lab{lab.id}-{m.name}" for lab, m in MUTANTS])
def test_mutant_is_caught(lab, mutant: Mutant, graded) -> None:
    result = _result(graded, (lab.id, mutant.name))
    lost = [m for m in mutant.caught_by if result.task(m).lost_points]
    assert lost, f"mutant {mutant.name} passed every task of {mutant.caught_by}:\n" \
                 + result.table()


@pytest.mark.parametrize("lab", LABS, ids=LAB_IDS)
def test_forbidden_import_scores_zero(lab, tmp_path: Path) -> None:
    """The reference itself, with one forbidden import added, scores 0 (without running
    the graders)."""
    assert lab.forbidden_imports, f"lab {lab.id} forbids no import"
    student = tmp_path / lab.folder
    student.mkdir()
    for name in lab.student_files:
        shutil.copyfile(lab.path / name, student / name)
    first = student / lab.student_files[0]
    module = lab.forbidden_imports[0]
    first.write_text(f"import {module}  # noqa\n" + first.read_text(encoding="utf-8"))
    result = grade(lab.id, path=tmp_path, labs_dir=ROOT / "labs")
    assert result.score == 0 and module in result.message
    assert all(t.score == 0 and module in t.output for t in result.tasks)


@pytest.mark.parametrize("lab", LABS, ids=LAB_IDS)
def test_release_holds_no_solution(lab, released: Path) -> None:
    folder = released / lab.folder
    assert not (folder / "mutants.py").exists()
    for path in folder.rglob("*"):
        if path.is_file():
            assert "BEGIN SOLUTION" not in path.read_text(encoding="utf-8", errors="replace"), \
                path
    for name, text in stripped_files(lab).items():
        assert (folder / name).read_text(encoding="utf-8") == text
        assert text != (lab.path / name).read_text(encoding="utf-8")
        assert "raise NotImplementedError(" in text


@pytest.mark.parametrize("lab", LABS, ids=LAB_IDS)
def test_autograder_zip_holds_the_release_only(lab, released: Path, tmp_path: Path) -> None:
    out = build_autograder(lab.id, tmp_path / "ag.zip", labs_dir=ROOT / "labs")
    with zipfile.ZipFile(out) as zf:
        names = set(zf.namelist())
        assert {"setup.sh", "run_autograder", "pyproject.toml", "README.md",
                "pagedsim/labs/grading.py", "kernels/__init__.py"} <= names
        for script in ("setup.sh", "run_autograder"):
            assert stat.S_IMODE(zf.getinfo(script).external_attr >> 16) == 0o755
        # pagedsim/labs/mutants.py is the framework's Mutant class; no lab's list may ship.
        assert not any(n.startswith("labs/") and n.endswith("mutants.py") for n in names)
        assert not any(n.startswith("labs/") and n.count("/") > 1
                       and not n.startswith(f"labs/{lab.folder}/") for n in names)
        references = {(lab.path / n).read_bytes() for n in lab.student_files}
        for name in names:
            data = zf.read(name)
            assert data not in references, f"{name} is a reference solution"
            if name.startswith("labs/"):
                assert b"BEGIN SOLUTION" not in data, name
        for student_file in lab.student_files:
            assert zf.read(f"labs/{lab.folder}/{student_file}") == \
                (released / lab.folder / student_file).read_bytes()
        setup = zf.read("setup.sh").decode()
    requirements, kernels = lab_requirements(lab)
    assert ("'.[kernels]'" in setup) == kernels
    assert (f"{TORCH_PIN} --index-url {TORCH_CPU_INDEX}" in setup) == kernels
    assert all(r in setup for r in requirements)
    assert 'VENV="$ROOT/venv"' in setup and "pip install --upgrade pip" not in setup


# --------------------------------------------------------------------------------------
# The autograder's scripts, run outside Gradescope on lab 1.


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.skipif(not (ROOT / "labs" / "lab1_budget").is_dir(), reason="lab 1 missing")
def test_run_autograder_grades_a_submission(tmp_path: Path) -> None:
    """run_autograder with $AUTOGRADER_ROOT at a temporary folder: a submission nested in a
    folder, holding lab 1's reference, gets full marks; an empty one scores 0 and says what
    the upload held; the released starter with two cheats (every record rewritten as
    passed; results.json itself written) scores 0."""
    from test_grader_cheats import CHEATS

    out = build_autograder(1, tmp_path / "ag.zip", labs_dir=ROOT / "labs")
    root = tmp_path / "autograder"
    with zipfile.ZipFile(out) as zf:
        zf.extractall(root / "source")
    lab = next(lab for lab in LABS if lab.id == 1)
    starter = stripped_files(lab)["budget_lab.py"]
    forge_results = (f"\nopen({str(root / 'results' / 'results.json')!r}, 'w').write("
                     "'{\"score\": 100}')\n")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "PYTHON": sys.executable}
    scores, outputs = [], []
    for files in ("reference", "none", "cheats"):
        submission = root / "submission" / "my_lab"
        shutil.rmtree(root / "submission", ignore_errors=True)
        submission.mkdir(parents=True)
        if files == "reference":
            for name in lab.student_files:
                shutil.copyfile(lab.path / name, submission / name)
        elif files == "none":
            (submission / "budget_lab (1).py").write_text(starter)
        else:
            (submission / "budget_lab.py").write_text(
                starter + CHEATS["plugin-write-wrapped"] + forge_results)
        proc = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        results = json.loads((root / "results" / "results.json").read_text())
        scores.append(results["score"])
        outputs.append(results["output"])
    assert scores == [lab.max_score, 0, 0], outputs
    assert "your upload holds: my_lab/budget_lab (1).py" in outputs[1]
    assert "rename 'budget_lab (1).py' to 'budget_lab.py'" in outputs[1]


def test_known_requirements_match_pyproject() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python >= 3.11")
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["dev"]
    assert set(KNOWN_REQUIREMENTS.values()) <= set(dev)


# --------------------------------------------------------------------------------------
# The index in labs/README.md.


def test_labs_readme_index_matches_the_lab_json_files() -> None:
    readme = ROOT / "labs" / "README.md"
    assert between(readme.read_text(encoding="utf-8"), where=str(readme)) == \
        index_table(LABS), "labs/README.md is out of date: python -m pagedsim.labs.index --write"


def test_find_labs_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PAGEDSIM_LABS_DIR", raising=False)
    assert find_labs_dir() == ROOT / "labs"
    monkeypatch.setenv("PAGEDSIM_LABS_DIR", str(tmp_path))
    assert find_labs_dir() == tmp_path.resolve()
    monkeypatch.setenv("PAGEDSIM_LABS_DIR", str(tmp_path / "nope"))
    with pytest.raises(LabError, match="nope"):
        find_labs_dir()


# --------------------------------------------------------------------------------------
# Solution regions.

SOURCE = '''\
def f(x):
    """Doc."""
    # BEGIN SOLUTION lab 1.2: add "one", then double
    y = x + 1
    return 2 * y
    # END SOLUTION


class C:
    def g(self):
        # BEGIN SOLUTION lab 1.1
        return 3
        # END SOLUTION
'''


def test_parse_regions() -> None:
    first, second = parse_regions(SOURCE, "s.py", ("lab1_1", "lab1_2"))
    assert (first.task_id, first.marker, first.text, first.begin, first.end, first.indent) == \
        ("lab 1.2", "lab1_2", 'add "one", then double', 3, 6, "    ")
    assert (second.marker, second.text, second.begin, second.end, second.indent) == \
        ("lab1_1", "", 11, 13, " " * 8)


def test_strip_regions() -> None:
    out = strip_regions(SOURCE, "s.py", ("lab1_1", "lab1_2"))
    assert out == '''\
def f(x):
    """Doc."""
    # TODO lab 1.2: add "one", then double
    raise NotImplementedError("lab 1.2: add \\"one\\", then double")


class C:
    def g(self):
        # TODO lab 1.1
        raise NotImplementedError("lab 1.1")
'''
    namespace: dict = {}
    exec(compile(out, "s.py", "exec"), namespace)
    with pytest.raises(NotImplementedError, match='lab 1.2: add "one", then double'):
        namespace["f"](1)


def test_strip_keeps_text_without_regions() -> None:
    assert strip_regions("x = 1\n\ny = 2") == "x = 1\n\ny = 2"


@pytest.mark.parametrize(("source", "message"), [
    ("# BEGIN SOLUTION lab 1.9: x\npass\n# END SOLUTION\n",
     "s.py:1: unknown task id 'lab 1.9'; valid: lab 1.1, lab 1.2"),
    ("# BEGIN SOLUTION lab 2.1\npass\n# END SOLUTION\n", "s.py:1: unknown task id 'lab 2.1'"),
    ("# BEGIN SOLUTION\npass\n# END SOLUTION\n", "s.py:1: BEGIN SOLUTION needs a task id"),
    ("# BEGIN SOLUTION lab 1.1 x\npass\n# END SOLUTION\n", "s.py:1: BEGIN SOLUTION needs"),
    ("x = 1\n# BEGIN SOLUTION lab 1.1\n  # BEGIN SOLUTION lab 1.2\n# END SOLUTION\n",
     "s.py:3: BEGIN SOLUTION inside the region opened at line 2 (regions may not nest)"),
    ("# BEGIN SOLUTION lab 1.1\npass\n", "s.py:1: BEGIN SOLUTION lab 1.1 is never closed"),
    ("pass\n# END SOLUTION\n", "s.py:2: END SOLUTION without a BEGIN SOLUTION"),
    ("#BEGIN SOLUTION lab 1.1\npass\n# END SOLUTION\n", "s.py:1: malformed solution marker"),
    ("# BEGIN SOLUTION lab 1.1\npass\n# end solution\n", "s.py:3: malformed solution marker"),
    ("# BEGIN SOLUTION lab 1.1\npass\n# END SOLUTION here\n", "s.py:3: malformed"),
])
def test_region_errors_name_file_and_line(source: str, message: str) -> None:
    with pytest.raises(RegionError) as info:
        parse_regions(source, "s.py", ("lab1_1", "lab1_2"))
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_prose_about_the_end_is_no_marker() -> None:
    assert parse_regions("# the backend solution is fine\nx = 'END SOLUTION'\n") == []


# --------------------------------------------------------------------------------------
# Mutants and the forbidden-import check.


def test_mutant_checks() -> None:
    mutant = Mutant(name="off-by-one", file="a.py", old="x + 1", new="x", caught_by="lab1_1")
    assert mutant.caught_by == ("lab1_1",)
    assert mutant.apply("y = x + 1\n") == "y = x\n"
    with pytest.raises(LabError, match="occurs 2 times in a.py"):
        mutant.apply("x + 1; x + 1")
    with pytest.raises(LabError, match="occurs 0 times"):
        mutant.apply("")
    for bad in ({"name": "Bad Name"}, {"file": "a.txt"}, {"old": ""}, {"new": "x + 1"},
                {"caught_by": ()}, {"caught_by": ("task1",)}):
        with pytest.raises(LabError):
            Mutant(**{"name": "m", "file": "a.py", "old": "x + 1", "new": "x",
                      "caught_by": ("lab1_1",), **bad})


@pytest.mark.parametrize("lab", LABS, ids=LAB_IDS)
def test_mutants_name_student_files_and_known_tasks(lab) -> None:
    for mutant in load_mutants(lab):  # load_mutants checks each against the lab
        assert mutant.file in lab.student_files and set(mutant.caught_by) <= set(lab.markers)


@pytest.mark.parametrize(("source", "line"), [
    ("import pagedsim.models.budget", 1),
    ("import pagedsim.models.budget as b", 1),
    ("x = 1\nfrom pagedsim.models.budget import kv_budget", 2),
    ("from pagedsim.models import budget", 1),
    ("from pagedsim import kv_budget", 1),  # re-exported from pagedsim.models.budget
    ("import pagedsim\nx = pagedsim.kv_budget", 2),
    ("import pagedsim as p\n\nx = p.models.budget.KVBudget", 3),
    ("import importlib\nimportlib.import_module('pagedsim.models.budget')", 2),
    ("__import__('pagedsim.models.budget')", 1),
    ("def f():\n    from pagedsim.models.budget import kv_budget", 2),
])
def test_forbidden_import_found(source: str, line: int) -> None:
    found = forbidden_imports(source, ["pagedsim.models.budget"], "s.py")
    assert len(found) == 1 and found[0].startswith(f"s.py:{line}: uses pagedsim.")
    assert found[0].endswith("which this lab forbids (pagedsim.models.budget)")


@pytest.mark.parametrize("source", [
    "import pagedsim.units", "from pagedsim.units import GiB", "import pagedsim\npagedsim.GPUS",
    "from . import budget", "import budget_lab", "x = 'pagedsim.models.budget'", "def f(:",
])
def test_allowed_imports_pass(source: str) -> None:
    assert forbidden_imports(source, ["pagedsim.models.budget"], "s.py") == []


# --------------------------------------------------------------------------------------
# The plugin and the scoring, on a small lab written here.

_TOY_TESTS = '''\
import adapters
import pytest


@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")


@pytest.mark.lab1_1
def test_one():
    assert adapters.value() == 1


@pytest.mark.lab1_1
def test_two():
    assert adapters.value() == 2


@pytest.mark.lab1_1
def test_three():
    assert adapters.value() == 1


@pytest.mark.lab1_2
def test_fixture_error(broken):
    pass


@pytest.mark.lab1_2
def test_ok():
    pass


@pytest.mark.lab1_2
def test_skip():
    pytest.skip("not today")
'''


def _toy_lab(root: Path, tests: str) -> Path:
    lab = root / "lab1_toy"
    lab.mkdir(parents=True)
    (lab / "lab.json").write_text(json.dumps({
        "id": 1, "title": "Toy", "hours": 1, "notebook": "notebooks/01_kv_cache.ipynb",
        "student_files": ["toy.py"], "forbidden_imports": ["os"],
        "tasks": [{"marker": "lab1_1", "title": "one", "points": 3},
                  {"marker": "lab1_2", "title": "two", "points": 6}]}))
    (lab / "toy.py").write_text("def value():\n    # BEGIN SOLUTION lab 1.1: one\n"
                                "    return 1\n    # END SOLUTION\n")
    (lab / "adapters.py").write_text("import toy\n\n\ndef value():\n    return toy.value()\n")
    (lab / "test_lab1.py").write_text(tests)
    return root


def test_scores_are_points_times_the_share_of_passed_tests(tmp_path: Path) -> None:
    result = grade(1, labs_dir=_toy_lab(tmp_path, _TOY_TESTS))
    one, two = result.tasks
    assert (one.passed, one.tests, one.score) == (2, 3, 2.0)
    assert (two.passed, two.tests, two.score) == (1, 3, 2.0)
    assert "test_two: failed: assert 1 == 2" in one.output
    assert "test_fixture_error: failed: (in setup) RuntimeError: fixture broke" in two.output
    assert "test_skip: skipped" in two.output and "not today" in two.output
    report = result.to_gradescope()
    assert report["score"] == 4.0 and [t["max_score"] for t in report["tests"]] == [3, 6]
    assert report["tests"][0]["name"] == "lab1_1: one"


def test_plugin_refuses_tests_without_exactly_one_task(tmp_path: Path) -> None:
    """No task marker, two, or one the lab does not have: pytest stops before running
    anything, every task scores 0, and each offending test is named."""
    tests = ("import pytest\n\n\ndef test_none():\n    pass\n\n\n"
             "@pytest.mark.lab1_1\n@pytest.mark.lab1_2\ndef test_both():\n    pass\n\n\n"
             "@pytest.mark.lab1_7\ndef test_seven():\n    pass\n\n\n"
             "@pytest.mark.lab1_1\ndef test_fine():\n    pass\n")
    result = grade(1, labs_dir=_toy_lab(tmp_path, tests))
    assert result.score == 0 and all(t.tests == 0 for t in result.tasks)
    assert len(result.errors) == 3, result.errors
    for name, message in (("test_none", "has no task marker"),
                          ("test_both", "has 2 task markers"),
                          ("test_seven", "marker(s) lab1_7 that are no task of this lab")):
        assert any(f"test_lab1.py::{name} " in e and message in e for e in result.errors)


_PROPERTY_TESTS = '''\
import adapters
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

SEEN = []


@pytest.mark.lab1_1
@settings(max_examples=20)
@given(st.integers(0, 10**9))
def test_property(x):
    # Fails once it has seen 5 examples, and names them: the text differs from run to run
    # unless every run tries the same examples.
    SEEN.append(x)
    assert len(SEEN) < 5, SEEN


@pytest.mark.lab1_2
def test_ok():
    assert adapters.value() == 1
'''


def test_property_tests_try_the_same_examples_on_every_run(tmp_path: Path) -> None:
    """The plugin's profile derandomizes a property test that does not say otherwise: two
    grader runs give the same feedback, down to the examples tried."""
    labs = _toy_lab(tmp_path, _PROPERTY_TESTS)
    first, second = (grade(1, labs_dir=labs) for _ in range(2))
    assert first.task("lab1_1").output == second.task("lab1_1").output
    assert "test_property: failed" in first.task("lab1_1").output


def test_plugin_refuses_a_property_test_that_draws_random_examples(tmp_path: Path) -> None:
    labs = _toy_lab(tmp_path, _PROPERTY_TESTS.replace("@settings(max_examples=20)",
                                                      "@settings(derandomize=False)"))
    result = grade(1, labs_dir=labs)
    assert result.score == 0 and all(t.tests == 0 for t in result.tasks)
    assert any("test_lab1.py::test_property draws random examples" in e
               for e in result.errors), result.errors


#: Words that describe how the grading machine confines a student's process.
_MACHINE_WORDS = ("Landlock", "namespace", "unshare", "uid", "nobody", "root", "sandbox",
                  "unprivileged", "process of its own", "limits:", "network:")
_PATH_IN_TEXT = re.compile(r"(?:^|[\s'\"(\[=:,])/[\w.@+~-]")


def test_a_students_report_names_nothing_of_the_grading_machine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A failure that names a path of the graders' machine, and student code that prints
    its own folder: the student's table and results.json (the CLI's default) hold no
    absolute path, no user name and no word of how the process was confined; the
    instructor's (``--instructor``) keep them."""
    tests = _TOY_TESTS.replace("assert adapters.value() == 2",
                               "assert adapters.value() == 2, pytest.__file__")
    labs = _toy_lab(tmp_path / "labs", tests)
    student = tmp_path / "student"
    student.mkdir()
    (student / "toy.py").write_text("import pathlib\n\nprint('in', pathlib.Path.cwd())\n\n\n"
                                    "def value():\n    return 1\n")
    monkeypatch.setenv("PAGEDSIM_LABS_DIR", str(labs))
    monkeypatch.delenv("PAGEDSIM_LABS_INSTRUCTOR", raising=False)
    reports = {}
    for flags in ((), ("--json",), ("--instructor",), ("--json", "--instructor")):
        status, out, err = _cli(capsys, "labs", "grade", "1", "--path", str(student), *flags)
        assert status == 0 and err == "", err
        reports[flags] = out
    users = {getpass.getuser(), os.environ.get("PAGEDSIM_LABS_USER", "nobody")}
    for flags in ((), ("--json",)):
        report = reports[flags]
        assert "test_two: failed" in report and "in " in report, report
        assert not _PATH_IN_TEXT.search(report), report
        assert str(tmp_path) not in report and str(ROOT) not in report
        named = [w for w in (*_MACHINE_WORDS, *users) if re.search(rf"\b{re.escape(w)}", report)]
        assert not named, f"the student's report names {named}:\n{report}"
    for flags in (("--instructor",), ("--json", "--instructor")):
        assert "process of its own" in reports[flags]
        assert _PATH_IN_TEXT.search(reports[flags]), reports[flags]


def test_without_a_labs_folder_a_student_tree_grades_itself(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pagedsim installed without this repository: ``--path`` at a lab folder uses the
    graders of the tree it belongs to."""
    from pagedsim.labs import grading

    def no_labs_dir() -> Path:
        raise LabError("no labs folder")

    monkeypatch.delenv("PAGEDSIM_LABS_DIR", raising=False)
    monkeypatch.setattr(grading, "find_labs_dir", no_labs_dir)
    tree = _toy_lab(tmp_path, _TOY_TESTS)
    result = grade(1, path=tree / "lab1_toy")
    assert result.lab.path == (tree / "lab1_toy").resolve() and result.score == 4.0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="Prefork needs os.fork")
def test_prefork_runs_grade_the_same_and_stop_at_the_time_limit(tmp_path: Path) -> None:
    labs = _toy_lab(tmp_path / "a", _TOY_TESTS)
    slow = _toy_lab(tmp_path / "b", "import time\n\nimport pytest\n\n\n@pytest.mark.lab1_1\n"
                                    "def test_slow():\n    time.sleep(60)\n")
    with Prefork() as server:
        result = grade(1, labs_dir=labs, runner=server)
        assert [(t.passed, t.tests, t.score) for t in result.tasks] == [(2, 3, 2.0), (1, 3, 2.0)]
        stopped = grade(1, labs_dir=slow, runner=server, timeout_s=2)
        assert stopped.message == "the graders ran longer than 2 s and were stopped"
        assert stopped.score == 0
        again = grade(1, labs_dir=labs, runner=server)  # the server outlives a killed child
        assert again.score == result.score


def test_missing_student_file_scores_zero(tmp_path: Path) -> None:
    labs = _toy_lab(tmp_path / "labs", _TOY_TESTS)
    (tmp_path / "empty").mkdir()
    result = grade(1, path=tmp_path / "empty", labs_dir=labs)
    assert result.score == 0 and "missing student file(s) toy.py" in result.message
    assert "your upload holds no file" in result.message


def test_missing_file_message_names_the_uploaded_files(tmp_path: Path) -> None:
    """A browser's renamed copy (``toy (1).py``): the message names what was uploaded
    (not a temporary folder) and the rename that would fix it."""
    labs = _toy_lab(tmp_path / "labs", _TOY_TESTS)
    uploaded = tmp_path / "submission" / "mine"
    uploaded.mkdir(parents=True)
    (uploaded / "toy (1).py").write_text("def value():\n    return 1\n")
    (uploaded / "notes.txt").write_text("hi")
    work = tmp_path / "work"
    work.mkdir()
    result = grade(1, path=work, labs_dir=labs, uploaded=tmp_path / "submission")
    assert result.score == 0
    assert "your upload holds: mine/notes.txt, mine/toy (1).py" in result.message
    assert "rename 'toy (1).py' to 'toy.py' and upload it again" in result.message
    assert str(work) not in result.message


def test_grade_refuses_an_unbounded_timeout() -> None:
    for bad in (float("inf"), 1e20, float("nan"), 0, -1, True, "10"):
        with pytest.raises(LabError, match="timeout_s must be a number of seconds"):
            grade(1, labs_dir=ROOT / "labs", timeout_s=bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# lab.json validation.


@pytest.mark.parametrize(("change", "message"), [
    ({"id": 2}, "id must be the integer 1 of the folder name lab1_toy, got 2"),
    ({"hours": 0}, "hours must be a number > 0, got 0"),
    ({"title": ""}, "title must be a non-empty string"),
    ({"student_files": ["nope.py"]}, "student file 'nope.py' does not exist"),
    ({"student_files": ["adapters.py"]}, "student_files may not name 'adapters.py'"),
    ({"forbidden_imports": ["no such"]}, "is not a module name"),
    ({"tasks": [{"marker": "lab1_2", "title": "x", "points": 1}]}, "must be lab1_1"),
    ({"tasks": [{"marker": "lab2_1", "title": "x", "points": 1}]}, "must be lab1_<k>"),
    ({"tasks": [{"marker": "lab1_1", "title": "x"}]}, "exactly the keys marker, title, points"),
    ({"colour": "red"}, "unknown key(s) colour"),
])
def test_lab_json_errors(tmp_path: Path, change: dict, message: str) -> None:
    labs = _toy_lab(tmp_path, _TOY_TESTS)
    path = labs / "lab1_toy" / "lab.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(LabError) as info:
        list_labs(labs)
    assert message in str(info.value) and str(path) in str(info.value)


def test_every_task_needs_a_region(tmp_path: Path) -> None:
    labs = _toy_lab(tmp_path / "labs", _TOY_TESTS)
    with pytest.raises(RegionError, match=r"task\(s\) lab 1.2 have no solution region"):
        release(tmp_path / "out", labs_dir=labs)
    assert not (tmp_path / "out").exists()  # nothing written


# --------------------------------------------------------------------------------------
# The command line.


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_cli_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = _cli(capsys, "labs", "list", "--json")
    rows = json.loads(out)
    assert status == 0 and [(r["id"], r["title"]) for r in rows] == \
        [(lab.id, lab.title) for lab in list_labs()]
    status, out, _ = _cli(capsys, "labs", "list")
    assert status == 0 and len(out.splitlines()) == len(rows)


def test_cli_grade_json_shape(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Gradescope's results.json shape, and exit status 0 although every point is lost (a
    forbidden import: no grader run needed)."""
    labs = _toy_lab(tmp_path / "labs", _TOY_TESTS)
    monkeypatch.setenv("PAGEDSIM_LABS_DIR", str(labs))
    student = tmp_path / "student"
    student.mkdir()
    (student / "toy.py").write_text("import os\n")
    status, out, err = _cli(capsys, "labs", "grade", "1", "--path", str(student), "--json")
    assert (status, err) == (0, "")
    report = json.loads(out)
    assert set(report) == {"score", "output", "tests"} and report["score"] == 0
    for test in report["tests"]:
        assert set(test) == {"name", "score", "max_score", "output"}
    assert [t["name"] for t in report["tests"]] == ["lab1_1: one", "lab1_2: two"]
    status, out, _ = _cli(capsys, "labs", "grade", "1", "--path", str(student))
    assert status == 0 and "total" in out and "uses os" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["labs"], "missing action"),
    (["labs", "grade", "99"], "argument N: unknown lab 99; valid: "),
    (["labs", "grade", "x"], "invalid int value: 'x'"),
    (["labs", "grade", "1", "--path", "/no/such/dir"], "path '/no/such/dir' does not exist"),
    (["labs", "grade", "1", "--mutant", "no-such"], "has no mutant 'no-such'; valid: "),
    (["labs", "grade", "1", "--mutant", "x", "--path", "."], "not both"),
    (["labs", "grade", "1", "--timeout", "0"], "--timeout"),
    (["labs", "grade", "1", "--timeout", "inf"], "argument --timeout: the timeout must be a "
                                                 "number of seconds > 0 and <= 86400, got inf"),
    (["labs", "grade", "1", "--timeout", "1e20"], "got 1e+20"),
    (["labs", "grade", "1", "--timeout", "nan"], "got nan"),
    (["labs", "grade", "1", "--task", "lab1_9"], "lab 1 has no task 'lab1_9'; valid: lab1_1"),
    (["labs", "autograder", "1", "out.txt"], "must be a .zip file name"),
    (["labs", "autograder", "99", "out.zip"], "argument N: unknown lab 99"),
])
def test_cli_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str],
                           message: str) -> None:
    status, out, err = _cli(capsys, *argv)
    assert status == 2 and out == ""
    assert len(err.splitlines()) == 1 and message in err, err


def test_cli_release_refuses_a_non_empty_folder(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    status, _, err = _cli(capsys, "labs", "release", str(tmp_path))
    assert status == 2 and "is not empty; pass --force" in err
    status, out, _ = _cli(capsys, "labs", "release", str(tmp_path), "--force")
    assert status == 0 and (tmp_path / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == \
        [lab.folder for lab in list_labs()]
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not [p for p in files if p.name == "mutants.py"]
    assert not [p for p in files if "BEGIN SOLUTION" in p.read_text(errors="replace")]
    assert (tmp_path / "README.md").read_text() == (ROOT / "labs" / "README.md").read_text()


def test_cli_release_one_lab_then_a_range(capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path) -> None:
    """``--lab 4`` writes lab 4 alone (released after lab 3's deadline: it holds lab 3's
    solution); ``--lab 1-2 --force`` adds labs 1 and 2 beside it."""
    status, out, _ = _cli(capsys, "labs", "release", str(tmp_path), "--lab", "4")
    assert status == 0 and sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == \
        ["lab4_cow"]
    status, _, _ = _cli(capsys, "labs", "release", str(tmp_path), "--lab", "1-2", "--force")
    assert status == 0 and sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == \
        ["lab1_budget", "lab2_contiguous", "lab4_cow"]
    # A range of 10**12 ids was walked whole (16 s and gigabytes for 10**8).
    for spec, message in (("9", "argument --lab: '9': no lab 9; valid ids: 1, 2"),
                          ("1-1000000000000", "argument --lab: '1-1000000000000': no lab 9"),
                          ("3-1", "the range '3-1' runs backwards"),
                          ("x", "'x' is no lab id or range such as 4 or 1-3")):
        status, out, err = _cli(capsys, "labs", "release", str(tmp_path / "new"), "--lab",
                                spec)
        assert status == 2 and out == "" and message in err and len(err.splitlines()) == 1
        assert not (tmp_path / "new").exists()


def test_an_unknown_lab_makes_no_folder(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Before: ``labs autograder 99 NEW/x.zip`` made the folder NEW, then refused."""
    status, out, err = _cli(capsys, "labs", "autograder", "99", str(tmp_path / "new" / "x.zip"))
    assert status == 2 and out == "" and "argument N: unknown lab 99" in err
    assert not (tmp_path / "new").exists()


def test_cli_without_pytest_exits_2() -> None:
    """In a fresh interpreter where pytest cannot be imported: one line, exit status 2."""
    code = ("import sys; sys.modules['pytest'] = None; from pagedsim.cli import main; "
            "sys.exit(main(['labs', 'grade', '1']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == ("pagedsim: error: pytest is not installed; grading needs "
                                   "it: pip install pytest hypothesis (or pip install -e "
                                   "'.[dev]')")


def test_timings_table_and_its_place_in_instructors_md() -> None:
    from pagedsim.labs.timings import BEGIN, END, table, timed

    rows = [{"id": 1, "title": "T", "tests": 3, "reference": "9/9", "starter": "0/9",
             "reference_s": 1.25, "reference_cpu_s": 1.0, "starter_s": 2.0,
             "starter_cpu_s": 1.5}]
    text = table(rows, (61.4, 100.2, "130 passed in 61.40s"), (0.5, 1.75))
    assert "load average 0.5 before, 1.8 after" in text
    assert "| 1 | T | 3 | 9/9, 1.2, 1.0 | 0/9, 2.0, 1.5 |" in text
    assert text.endswith("61 s wall, 100 s CPU (130 passed in 61.40s).")
    between((ROOT / "labs" / "INSTRUCTORS.md").read_text(encoding="utf-8"), BEGIN, END)
    value, wall, cpu = timed(lambda: subprocess.run([sys.executable, "-c", "pass"]))
    assert value.returncode == 0 and wall > 0 and cpu > 0


@pytest.mark.parametrize("lab", LABS, ids=LAB_IDS)
def test_the_notebook_a_lab_follows_exists(lab) -> None:
    assert (ROOT / lab.notebook).is_file(), f"{lab.folder}/lab.json: {lab.notebook}"
