"""The notebooks: committed clean, and every one runs top to bottom in under 90 seconds.

Each ``notebooks/*.ipynb`` (found by glob, so notebooks added later are picked up) is
executed with nbclient on the ``python3`` kernel of the interpreter running pytest,
with ``notebooks/`` as the working directory and ``MPLBACKEND=Agg``. Its wall time is
printed in a section at the end of the run (and kept as a junit property).

Committed notebooks carry no outputs, no execution counts and no widget state, so
their diffs stay readable: strip them with
``jupyter nbconvert --clear-output --inplace notebooks/NAME.ipynb``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 120
MAX_WALL_S = 90.0
KERNEL_NAME = "python3"

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
def test_notebook_runs(path: Path, monkeypatch, record_property):
    """Executes top to bottom without an error, within MAX_WALL_S seconds."""
    nb = _read(path)
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
    assert wall_s <= MAX_WALL_S, (
        f"{path.name} took {wall_s:.1f} s to run; the limit is {MAX_WALL_S:.0f} s"
    )
