"""The README's first screen names the core's files in reading order, and they are the
files one request really goes through (``scripts/walk.py`` follows it)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _reading_order() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Read the core, in this order", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| \d+ \| `([^`]+)` \|", section, flags=re.M)


def test_the_reading_order_is_on_the_first_screen():
    head = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:45]
    assert "## Read the core, in this order" in head
    files = _reading_order()
    assert len(files) == 5
    assert all(f"`{f}`" in "\n".join(head) for f in files)
    for f in files:
        assert (ROOT / f).is_file(), f


def test_one_request_goes_through_every_file_of_the_reading_order():
    spec = importlib.util.spec_from_file_location("walk", ROOT / "scripts" / "walk.py")
    walk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(walk)
    result = walk.walk("paged", "v0", 40, 20)
    walked = {f"pagedsim/{f}" for f, _ in result["functions_by_call"]}
    assert set(_reading_order()) <= walked, set(_reading_order()) - walked
    assert result["files"] == len({f for f, _ in result["functions_by_call"]})
    assert result["calls"] >= result["functions"] > 0
    # What the run records is counted apart (the metrics layer), never in the core's counts.
    metrics = result["metrics"]
    assert {f.split("/")[0] for f, _ in result["functions_by_call"]} == {
        "engine", "memory", "workloads"}
    assert {f.split("/")[0] for f, _ in metrics["functions_by_call"]} == {"metrics"}
    assert "metrics/sim_result.py" in {f for f, _ in metrics["functions_by_call"]}
    assert metrics["files"] == len({f for f, _ in metrics["functions_by_call"]})
    assert metrics["calls"] >= metrics["functions"] > 0


def test_the_walk_prints_the_metrics_layer_on_its_own(capsys):
    spec = importlib.util.spec_from_file_location("walk", ROOT / "scripts" / "walk.py")
    walk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(walk)
    assert walk.main(["--scheme", "paged", "--output-len", "2"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert re.search(r": \d+ files, \d+ functions, \d+ calls, \d+ layer crossings "
                     r"\(engine\+memory\+workloads, as the issue counts\); metrics layer: "
                     r"\d+ files, \d+ functions, \d+ calls$", line), line


def _in_the_code(path: Path) -> str:
    """The "In the code." paragraph of a notebook's first cell ("" if it has none)."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    first = "".join(cells[0]["source"]) if cells and cells[0]["cell_type"] == "markdown" else ""
    return first.split("**In the code.**", 1)[1] if "**In the code.**" in first else ""


def test_the_notebooks_point_at_the_files_they_step_through():
    """Each notebook's first cell names the files of the code it steps through; each one
    exists, and together the notebooks name every file of the reading order (COURSE.md
    says the notebooks step through them)."""
    named: set[str] = set()
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        files = re.findall(r"`((?:pagedsim|kernels)/[\w/]+\.py)`", _in_the_code(path))
        assert files, f"{path.name}: its first cell names no file ('**In the code.** ...')"
        for f in files:
            assert (ROOT / f).is_file(), f"{path.name} names {f}, which does not exist"
        named.update(files)
    assert set(_reading_order()) <= named, set(_reading_order()) - named
