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

Prose (``prose_numbers.py``): after that same execution, every number typed into a
markdown cell or into a check cell's explanation must be one the run printed (to the
digits typed) or, unless it is a percentage or a ratio, one the code sets; the few that
stand for something outside the run are listed in ``PROSE_ALLOWED`` with the reason. The
run test then plants a wrong number into a copy of one of the notebook's own sentences
and requires the check to name it, so a check that stopped looking would fail.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from prose_numbers import Typed, confirmed, prose_numbers, run_numbers, unconfirmed

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

# Numbers a notebook's prose may type that its run does not print, each with its reason.
PROSE_ALLOWED: dict[str, dict[float, str]] = {
    "01_kv_cache.ipynb": {
        300: "an illustrative token count (one decode token against a prompt's 300)",
        1410: "the A100's boost clock in MHz (NVIDIA A100 whitepaper)",
        192: "the A100's combined L1/shared array per SM in KiB (NVIDIA A100 whitepaper)",
    },
    "03_paged.ipynb": {
        1023: "a 2 MiB vAttention page over Llama-3-8B's 2 KiB of one layer's K per token, "
              "less one",
    },
    "05_fragmentation_curves.ipynb": {
        2000: "requests per run of the full-size figures (scripts), not run here",
        1000: "requests per sweep run of the full-size figures (scripts), not run here",
        1.84: "a knob value to try after the exercise (its key: notebooks/ANSWERS.md)",
        3000: "a knob value to try after the exercise (its key: notebooks/ANSWERS.md)",
        12000: "a knob value to try after the exercise (its key: notebooks/ANSWERS.md)",
    },
    "08_prefix_caching.ipynb": {
        25: "a year: FAST'25, the Mooncake paper's venue",
        12031: "requests of the full Mooncake trace, of which the notebook replays a sample",
        32: "a knob value to try after the exercise (its key: notebooks/ANSWERS.md)",
    },
    "10_host_tier.ipynb": {
        12.5: "OPT-13B's block of 16 tokens at 800 KiB a token, in MiB (notebook 01's formula)",
    },
}


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


def _check_cells(nb, committed_cells: int) -> set[int]:
    """Indices of the check cells of executed ``nb``: the committed exercises' and those of
    the copies ``_apply_samples`` appended (threes after the first ``committed_cells``)."""
    appended = range(committed_cells + 2, len(nb.cells), 3)
    return {check for *_, check in _exercises(nb)} | set(appended)


def _wrong_number(typed: Typed, printed: set[float], literals: set[float]) -> str:
    """A number written as ``typed`` is (same decimals, thousands separators) that the run
    does not confirm: what a stale or mistyped sentence would hold."""
    for factor in (1.37, 1.71, 2.3, 3.1, 4.7, 7.9, 13.3):
        value = round(typed.value * factor + (1 if typed.decimals == 0 else 0), typed.decimals)
        text = f"{value:,.{typed.decimals}f}"
        candidate = Typed(value, typed.decimals, typed.is_result, typed.is_percent, "", (0, 0))
        if not confirmed(candidate, printed, literals):
            return text
    raise AssertionError(f"no wrong number found near {typed.value:g}")  # pragma: no cover


def _check_prose(path: Path, nb, committed_cells: int) -> None:
    """Typed numbers true of executed ``nb``; and a wrong one planted into a copy of one of
    its sentences is named."""
    checks = _check_cells(nb, committed_cells)
    allowed = PROSE_ALLOWED.get(path.name, {})
    missing = unconfirmed(nb, checks, allowed)
    assert not missing, (
        f"{path.name}: numbers typed into its prose that the run does not print (fix the "
        "sentence, print the figure, or add it to PROSE_ALLOWED with its reason):\n"
        + "\n".join(f"  {m}" for m in missing))
    printed, literals = run_numbers(nb, checks)
    cell, typed = next((i, t) for i, t in prose_numbers(nb, checks)
                       if nb.cells[i].cell_type == "markdown" and t.value not in allowed)
    wrong = _wrong_number(typed, printed, literals)
    planted = nbformat.from_dict(nb)
    start, end = typed.span
    source = planted.cells[cell].source
    planted.cells[cell].source = source[:start] + wrong + source[end:]
    caught = [m for m in unconfirmed(planted, checks, allowed) if m.cell == cell]
    assert [m.typed.value for m in caught] == [float(wrong.replace(",", ""))], (
        f"{path.name}: {wrong} planted in cell {cell} for {source[start:end]} was not caught")


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
    committed_cells = len(nb.cells)
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
    _check_prose(path, nb, committed_cells)
    assert wall_s <= MAX_WALL_S, (
        f"{path.name} took {wall_s:.1f} s to run; the limit is {MAX_WALL_S:.0f} s"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_prose_allowed_numbers_are_typed(path: Path):
    """Every number PROSE_ALLOWED lets a notebook type unprinted is still typed there, with
    a reason (an entry whose sentence is gone would hide a future mistake)."""
    nb = _read(path)
    typed = {t.value for _, t in prose_numbers(nb, {c for *_, c in _exercises(nb)})}
    for value, reason in PROSE_ALLOWED.get(path.name, {}).items():
        assert reason.strip(), f"{path.name}: {value:g} is allowed with no reason"
        assert value in typed, f"{path.name}: {value:g} is allowed but no longer typed"


def test_prose_allowed_names_notebooks():
    names = {p.name for p in NOTEBOOKS}
    assert set(PROSE_ALLOWED) <= names, set(PROSE_ALLOWED) - names
