"""Submissions that attack the grader rather than the graders (issue 37).

- the graded code prints terminal escapes (clear the screen, a fake "total 100/100", then
  conceal): every report shows them written out, never raw;
- a student file is a symbolic link (to the reference, when a submission is unpacked inside
  the instructor's checkout) or a FIFO: refused with one line, never followed or opened
  for a blocking read;
- the forbidden-import check, which runs in the grading process before the graders and
  outside their time limit: a long attribute chain costs linear time (it cost N^3: 500
  links took two minutes), and a file Python's parser gives up on scores 0 with one line
  instead of a traceback.
"""

from __future__ import annotations

import importlib
import os
import re
import time
from pathlib import Path

import pytest

from pagedsim.labs import LabError, forbidden_imports, get_lab, grade
from pagedsim.labs.imports import UnparsableSource
from pagedsim.labs.results import LabResult, TaskScore, visible

ROOT = Path(__file__).resolve().parents[2]
LABS = ROOT / "labs"
pytestmark = pytest.mark.skipif(not (LABS / "lab1_budget").is_dir() or not hasattr(os, "fork"),
                                reason="needs lab 1 and os.fork")
FORBIDDEN = ["pagedsim.models.budget"]
#: What a terminal acts on: C0 controls but newline and tab, DEL, C1 controls.
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: Clear the screen, home the cursor, print a fake total, conceal what follows.
FAKE = "\x1b[2J\x1b[H total 100/100 \x1b[8m"


def _submission(root: Path, text: str) -> Path:
    folder = root / "lab1_budget"
    folder.mkdir(parents=True)
    (folder / "budget_lab.py").write_text(text, encoding="utf-8")
    return root


def _reports(result: LabResult) -> list[str]:
    """Every text a person reads of ``result``: both tables, both results.json's fields."""
    texts = [result.table(), result.table(instructor=True)]
    for instructor in (False, True):
        data = result.to_gradescope(instructor)
        texts += [data["output"], *(t["output"] for t in data["tests"]),
                  *(t["name"] for t in data["tests"])]
    return texts


# --------------------------------------------------------------------------------------
# Terminal escapes


def test_visible_writes_out_controls_and_keeps_line_ends() -> None:
    assert visible("a\tb\nc") == "a\tb\nc"
    assert visible("a\r\nb") == "a\nb"  # a Windows line end stays a line end
    assert visible(FAKE) == "\\x1b[2J\\x1b[H total 100/100 \\x1b[8m"
    assert visible("x\ry\x9b2J\x00\x7f\u202eevil") == "x\\ry\\x9b2J\\x00\\x7f\\u202eevil"


def test_escapes_the_graded_code_prints_reach_no_report_raw(starter: str,
                                                            tmp_path: Path) -> None:
    """The starter prints the fake total at import and fails a test with it in the
    message: the grade is 0, and every report shows the escapes written out."""
    cheat = (f"\nprint({FAKE!r}, flush=True)\n"
             f"def bytes_per_token(model):\n    raise ValueError({FAKE!r})\n")
    path = _submission(tmp_path, starter + cheat)
    result = grade(1, path=path, labs_dir=LABS, tasks=["lab1_1"], timeout_s=180)
    assert result.score == 0 and "\x1b" in result.output  # the escapes did reach the grader
    for text in _reports(result):
        assert not RAW_CONTROL.search(text), repr(text)
    assert "\\x1b[2J" in result.table() and "\\x1b[8m" in result.table(instructor=True)


def test_a_report_escapes_every_field_that_holds_student_text() -> None:
    lab = get_lab(1, LABS)
    tasks = tuple(TaskScore(t.marker, t.title, t.points, 0.0, 0, 1, f"failed: {FAKE}")
                  for t in lab.tasks)
    result = LabResult(lab=lab, graded=f"/tmp/{FAKE}", tasks=tasks, message=f"m {FAKE}",
                       errors=(f"e {FAKE}",), output=FAKE, output_bytes=len(FAKE))
    for text in _reports(result):
        assert not RAW_CONTROL.search(text), repr(text)
    assert result.table().count("\\x1b[2J") >= 4  # graded, message, error, printed output


# --------------------------------------------------------------------------------------
# Links and special files


def test_a_student_file_linked_to_the_reference_is_refused(tmp_path: Path) -> None:
    """Before: the link was followed and the reference scored 100/100."""
    folder = tmp_path / "lab1_budget"
    folder.mkdir()
    reference = LABS / "lab1_budget" / "budget_lab.py"
    (folder / "budget_lab.py").symlink_to(os.path.relpath(reference, folder))
    result = grade(1, path=tmp_path, labs_dir=LABS, timeout_s=180)
    assert result.score == 0 and all(t.score == 0 for t in result.tasks)
    assert "budget_lab.py is a symbolic link" in result.message
    assert "\n" not in result.message


def test_a_linked_lab_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "lab1_budget").symlink_to(LABS / "lab1_budget")
    with pytest.raises(LabError, match="lab1_budget .* is a symbolic link"):
        grade(1, path=tmp_path, labs_dir=LABS, timeout_s=180)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    """Before: reported as a missing file; opened for reading it would block forever."""
    folder = tmp_path / "lab1_budget"
    folder.mkdir()
    os.mkfifo(folder / "budget_lab.py")
    start = time.perf_counter()
    result = grade(1, path=tmp_path, labs_dir=LABS, timeout_s=180)
    assert result.score == 0 and "budget_lab.py is not a regular file" in result.message
    assert time.perf_counter() - start < 30


def test_a_student_file_inside_a_folder_is_named_where_it_is(tmp_path: Path) -> None:
    """Before: an upload holding the file one folder down was told "rename 'budget_lab.py'
    to 'budget_lab.py' and upload it again"."""
    nested = tmp_path / "my-lab" / "budget_lab.py"
    nested.parent.mkdir()
    nested.write_text("x = 1\n")
    result = grade(1, path=tmp_path, labs_dir=LABS, timeout_s=180)
    assert result.score == 0
    assert ("upload 'my-lab/budget_lab.py' itself, not the folder around it: the graders "
            "look for 'budget_lab.py' at the top of the upload") in result.message
    assert "rename" not in result.message


def test_uploaded_is_refused_where_it_would_be_ignored(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    """Before: ``labs grade 1 --uploaded DIR`` graded the reference, --uploaded ignored;
    a FIFO as --uploaded was taken too."""
    from pagedsim.cli import main

    os.mkfifo(tmp_path / "fifo")
    for argv, needle in ((["--uploaded", str(tmp_path)], "argument --uploaded: only with --path"),
                         (["--path", str(tmp_path), "--uploaded", str(tmp_path / "fifo")],
                          "is not a folder")):
        assert main(["labs", "grade", "1", *argv]) == 2
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0] and captured.out == ""


# --------------------------------------------------------------------------------------
# The forbidden-import check's cost and the files it cannot parse


class _TooManyImports(BaseException):
    """Not an Exception: the check's own ``except Exception`` must not swallow it."""


def test_a_long_attribute_chain_costs_a_few_lookups(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: every link of ``pagedsim.a.a...`` tried to import every prefix of the whole
    chain (N^2 imports of N-part names: 500 links took two minutes)."""
    real = importlib.import_module
    calls = []

    def counted(name: str, package: str | None = None):
        calls.append(name)
        if len(calls) > 50:
            raise _TooManyImports(f"{len(calls)} imports for one chain")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", counted)
    source = "import pagedsim\nx = pagedsim" + ".a" * 1000 + "\n"
    assert forbidden_imports(source, FORBIDDEN, "s.py") == []
    assert len(calls) <= 5


@pytest.mark.parametrize("links", [1000, 100_000])
def test_a_long_attribute_chain_is_checked_in_well_under_a_second(links: int) -> None:
    source = "import pagedsim\nx = pagedsim" + ".a" * links + "\n"
    start = time.perf_counter()
    try:
        forbidden_imports(source, FORBIDDEN, "s.py")
    except UnparsableSource:
        pass  # 100,000 links are more than the parser takes
    assert time.perf_counter() - start < 1.0


def test_a_long_forbidden_chain_is_found_and_named_briefly() -> None:
    source = "import pagedsim\nx = pagedsim.kv_budget" + ".a" * 1000 + "\n"
    [line] = forbidden_imports(source, FORBIDDEN, "s.py")
    assert line.startswith("s.py:2: uses pagedsim.kv_budget.a.a") and len(line) < 300


@pytest.mark.parametrize("line", ["x = " + "-" * 100_000 + "1", "x = " + "1+" * 200_000 + "1",
                                  "x = pagedsim" + ".a" * 100_000],
                         ids=["unary-minus", "plus", "attributes"])
def test_a_file_the_parser_cannot_take_scores_zero_with_one_line(line: str,
                                                                 tmp_path: Path) -> None:
    """Before: MemoryError or RecursionError out of the check, a traceback and no grade."""
    with pytest.raises(UnparsableSource, match="s.py: Python's parser could not read"):
        forbidden_imports(line + "\n", FORBIDDEN, "s.py")
    path = _submission(tmp_path, line + "\n")
    result = grade(1, path=path, labs_dir=LABS, timeout_s=180)
    assert result.score == 0 and all(t.score == 0 for t in result.tasks)
    assert result.message.startswith("budget_lab.py: Python's parser could not read")
    assert "\n" not in result.message


@pytest.mark.parametrize(("ending", "status"), [("import os\nos._exit(0)\n", "exit status 0"),
                                                ("import os\nos._exit(3)\n", "exit status 3")])
def test_a_module_that_ends_its_process_at_import_is_imported_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ending: str, status: str) -> None:
    """A student module that ends its process while being imported fails every later call
    at once, saying so: a new process would end the same way, and a property test's
    shrinking used to start dozens of them (a minute per grade)."""
    from pagedsim.labs.answers import WorkerError
    from pagedsim.labs.grading import _worker_config
    from pagedsim.labs.remote import Worker

    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "budget_lab.py").write_text(ending, encoding="utf-8")
    worker = Worker(_worker_config(get_lab(1, LABS), folder, 60))
    starts = []
    start = worker._start
    monkeypatch.setattr(worker, "_start", lambda: (starts.append(1), start())[1])
    try:
        with pytest.raises(WorkerError, match="while importing your module; it was not "
                                              "started again") as first:
            worker.request("import", "budget_lab")
        assert f"({status})" in str(first.value)  # its own ending, not the cleanup's kill
        for _ in range(3):
            with pytest.raises(WorkerError, match="while importing your module"):
                worker.request("import", "budget_lab")
    finally:
        worker.close()
    assert len(starts) == 1


def test_a_module_that_hangs_at_import_is_imported_once(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A student module that runs past the call limit while being imported is stopped
    once; every later call fails at once, saying why, instead of hanging as long again."""
    from pagedsim.labs.answers import CallTimedOut, WorkerError
    from pagedsim.labs.grading import _worker_config
    from pagedsim.labs.remote import Worker

    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "budget_lab.py").write_text("while True:\n    pass\n", encoding="utf-8")
    config = {**_worker_config(get_lab(1, LABS), folder, 60), "call_limit_s": 1.0}
    worker = Worker(config)
    starts = []
    start = worker._start
    monkeypatch.setattr(worker, "_start", lambda: (starts.append(1), start())[1])
    try:
        with pytest.raises(CallTimedOut, match="ran longer than 1 s in this call and was "
                                               "stopped, while importing your module"):
            worker.request("import", "budget_lab")
        with pytest.raises(WorkerError, match="it was not started again"):
            worker.request("import", "budget_lab")
    finally:
        worker.close()
    assert len(starts) == 1
