"""The notebooks: committed clean, and every one runs top to bottom in under 90 seconds.

Each ``notebooks/*.ipynb`` (found by glob, so notebooks added later are picked up) is
executed with nbclient on the ``python3`` kernel of the interpreter running pytest,
with ``notebooks/`` as the working directory and ``MPLBACKEND=Agg``. Its wall time is
printed in a section at the end of the run (and kept as a junit property).

Committed notebooks carry no outputs, no execution counts and no widget state, so
their diffs stay readable: strip them with
``jupyter nbconvert --clear-output --inplace notebooks/NAME.ipynb``.

Prediction exercises (``notebooks/predict.py``): a code cell whose metadata holds
``exercise`` is a prediction cell (``NAME = None``); the next code cell is its knob cell,
committed with ``KNOB = ...`` set away from the asked value; the code cell after that is
its check cell. Every notebook has at least two. The run test executes the notebook as
committed, where every check cell must say that the knob is not set (so "run all" answers
nothing), and then, on the same kernel, copies of each exercise's three cells with the
stored sample prediction and the asked knob value written in, whose check cell must print
the stored verdict (``Verdict: right`` or ``wrong``).
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 120
MAX_WALL_S = 90.0
KERNEL_NAME = "python3"

EXERCISE_KEY = "exercise"
MIN_EXERCISES = 2
EXERCISE_FIELDS = ("id", "prediction", "sample", "knob", "set", "verdict")

_wall_times: dict[str, float] = {}


def _ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def _read(path: Path):
    return nbformat.read(path, as_version=4)


@pytest.fixture(scope="module", autouse=True)
def _report_wall_times(request):
    """After this module's tests, print each executed notebook's wall time."""
    yield
    if not _wall_times:
        return
    plugins = request.config.pluginmanager
    reporter, capman = plugins.getplugin("terminalreporter"), plugins.getplugin("capturemanager")
    lines = [f"{name:<40s} {secs:6.1f} s" for name, secs in sorted(_wall_times.items())]
    if reporter is None or capman is None:  # pragma: no cover - unusual plugin set-ups
        print("\n".join(lines))
        return
    with capman.global_and_fixture_disabled():  # so the lines reach the terminal
        reporter.write_line("")
        reporter.write_sep("-", f"notebook wall times (limit {MAX_WALL_S:.0f} s)")
        for line in lines:
            reporter.write_line(line)


def _line_re(name: str) -> re.Pattern[str]:
    """The line that assigns ``name`` (alone on the left of ``=``)."""
    return re.compile(rf"^{re.escape(name)} = .*$", re.MULTILINE)


def _exercises(nb) -> list[tuple[dict, int, int, int]]:
    """(metadata, prediction cell, knob cell, check cell) of every exercise, in order."""
    code = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    found = []
    for pos, i in enumerate(code):
        meta = nb.cells[i].metadata.get(EXERCISE_KEY)
        if meta is None:
            continue
        assert pos + 2 < len(code), f"exercise {meta.get('id')}: no knob and check cells after it"
        found.append((meta, i, code[pos + 1], code[pos + 2]))
    return found


def _set_line(cell, name: str, value: str) -> None:
    """Rewrite the one line ``name = ...`` of ``cell`` as ``name = value``."""
    pattern = _line_re(name)
    hits = pattern.findall(cell.source)
    assert len(hits) == 1, f"expected one line `{name} = ...` in the cell, found {len(hits)}"
    cell.source = pattern.sub(lambda _: f"{name} = {value}", cell.source)


def _apply_samples(nb) -> tuple[list[tuple[dict, int]], list[tuple[dict, int]]]:
    """Append to ``nb``, after its last cell, a copy of every exercise's three cells with the
    sample prediction and the asked knob value written in, so that one execution runs the
    notebook as committed (what "run all" shows a student) and then each exercise as a
    student who predicted the sample would. Returns the (metadata, check cell) pairs of the
    committed check cells and of the appended ones."""
    committed, sampled = [], []
    for meta, pred, knob, check in _exercises(nb):
        committed.append((meta, check))
        cells = [nbformat.from_dict(nb.cells[i]) for i in (pred, knob, check)]
        for cell in cells:
            cell.pop("id", None)  # ids must stay unique: the copies get none
            cell.metadata = {}
        _set_line(cells[0], meta["prediction"], meta["sample"])
        _set_line(cells[1], meta["knob"], meta["set"])
        nb.cells.extend(cells)
        sampled.append((meta, len(nb.cells) - 1))
    return committed, sampled


def _output_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(out.get("text", ""))
        for value in out.get("data", {}).values():
            parts.append(value if isinstance(value, str) else "")
    return "\n".join(parts)


def _execute(nb, monkeypatch):
    """Run ``nb`` in place on a fresh python3 kernel in notebooks/; returns the client."""
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # The kernel inherits this environment: Agg means figures never need a display.
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    client.execute()
    return client


def test_notebooks_exist():
    assert NOTEBOOKS, f"no notebooks found in {NOTEBOOK_DIR}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_committed_clean(path: Path):
    """No outputs, no execution counts, no widget state: strip before committing."""
    nb = _read(path)
    dirty = [
        i for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count"))
    ]
    assert not dirty, (
        f"{path.name}: code cells {dirty} carry outputs or execution counts; run "
        f"`jupyter nbconvert --clear-output --inplace notebooks/{path.name}`"
    )
    assert "widgets" not in nb.metadata, (
        f"{path.name}: notebook metadata holds saved widget state; remove metadata.widgets"
    )


def test_kernel_is_this_interpreter(monkeypatch):
    """The ``python3`` kernel runs the same Python (the venv's) as pytest itself."""
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print(sys.executable)"))
    _execute(nb, monkeypatch)
    printed = "".join(o.get("text", "") for o in nb.cells[0].outputs).strip()
    assert Path(printed).resolve() == Path(sys.executable).resolve(), (
        f"kernel {KERNEL_NAME!r} runs {printed}, tests run {sys.executable}; install the "
        "venv's kernel with `python -m ipykernel install --sys-prefix`"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_exercises_are_predictions(path: Path):
    """At least two exercises; each committed with no prediction (``NAME = None``), its
    knob away from the asked value, and a check cell that judges that prediction."""
    nb = _read(path)
    exercises = _exercises(nb)
    assert len(exercises) >= MIN_EXERCISES, (
        f"{path.name}: {len(exercises)} prediction exercise(s), at least {MIN_EXERCISES} wanted")
    ids = [meta.get("id") for meta, *_ in exercises]
    assert len(set(ids)) == len(ids), f"{path.name}: exercise ids repeat: {ids}"
    for meta, pred, knob, check in exercises:
        missing = [k for k in EXERCISE_FIELDS if k not in meta]
        assert not missing, f"{path.name} exercise {meta.get('id')}: metadata lacks {missing}"
        assert meta["verdict"] in ("right", "wrong"), f"{path.name} {meta['id']}: bad verdict"
        name, knob_name = meta["prediction"], meta["knob"]
        lines = _line_re(name).findall(nb.cells[pred].source)
        assert lines == [f"{name} = None"] or (
            len(lines) == 1 and lines[0].startswith(f"{name} = None ")), (
            f"{path.name} {meta['id']}: the prediction cell must commit `{name} = None`")
        knob_lines = _line_re(knob_name).findall(nb.cells[knob].source)
        assert len(knob_lines) == 1, f"{path.name} {meta['id']}: no single `{knob_name} = ...`"
        committed = knob_lines[0].split("=", 1)[1].split("#", 1)[0].strip()
        assert committed != meta["set"], (
            f"{path.name} {meta['id']}: `{knob_name}` is committed at the asked value "
            f"{meta['set']}, so running the notebook answers the question")
        src = nb.cells[check].source
        assert re.search(r"check_(number|choice)\(", src) and f"name={name!r}" in src.replace(
            '"', "'"), f"{path.name} {meta['id']}: the check cell does not judge `{name}`"
        assert knob_name in src, f"{path.name} {meta['id']}: the check cell ignores the knob"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_runs(path: Path, monkeypatch, record_property):
    """Executes top to bottom without an error, within MAX_WALL_S seconds: as committed,
    every check cell says its knob is not set; then each exercise again with its sample
    prediction and asked knob value, whose check prints the verdict its metadata names."""
    nb = _read(path)
    committed, sampled = _apply_samples(nb)
    start = time.perf_counter()
    try:
        _execute(nb, monkeypatch)
    except nbclient.exceptions.CellExecutionError as err:
        pytest.fail(f"{path.name} failed:\n{err}", pytrace=False)
    finally:
        wall_s = time.perf_counter() - start
        _wall_times[path.name] = wall_s
        record_property("wall_time_s", round(wall_s, 2))
    print(f"{path.name}: {wall_s:.1f} s")
    for meta, check in committed:  # as committed, the check must not answer the question
        text = _output_text(nb.cells[check])
        assert "Verdict: knob not set." in text, (
            f"{path.name} exercise {meta['id']}: as committed, the check cell should say the knob "
            f"is not set; it printed:\n{text}")
    for meta, check in sampled:
        text = _output_text(nb.cells[check])
        assert f"Verdict: {meta['verdict']}." in text, (
            f"{path.name} exercise {meta['id']}: with the sample prediction {meta['sample']} and "
            f"{meta['knob']} = {meta['set']}, expected `Verdict: {meta['verdict']}.`, got:\n{text}")
    assert wall_s <= MAX_WALL_S, (
        f"{path.name} took {wall_s:.1f} s to run; the limit is {MAX_WALL_S:.0f} s"
    )
