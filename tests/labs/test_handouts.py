"""Each lab's handout agrees with its ``lab.json`` (issue 35: lab 5's README and docstring
named three forbidden modules, its lab.json four): the modules the README and the student
files' docstrings forbid, the task table's tasks and points, and the total in the
README's first line."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from pagedsim.labs.meta import LabInfo, lab_folders, load_lab

ROOT = Path(__file__).resolve().parents[2]
LABS = [load_lab(folder) for folder in lab_folders(ROOT / "labs")]
IDS = [f"lab{lab.id}" for lab in LABS]

#: Where a "do not import" sentence starts, and where its list of modules ends: at the
#: reason (after ":"), at "scores 0", at "(the grader refuses ...", or at "(nor names
#: `pagedsim` re-exports ...)", whose names are examples, not the list.
_FORBID = re.compile(r"not\**\s+import\b", re.IGNORECASE)
_LIST_END = re.compile(r":|\bscores\b|\(the grader|\s\(nor\b")
_MODULE = re.compile(r"`+([A-Za-z_][\w.]*)`+")


def forbidden_in(text: str) -> list[set[str]]:
    """The modules named by each "do not import ..." sentence of ``text`` (in backticks,
    single as in markdown or double as in a docstring)."""
    found = []
    for start in _FORBID.finditer(text):
        rest = text[start.end():]
        end = _LIST_END.search(rest)
        found.append(set(_MODULE.findall(rest[:end.start() if end else len(rest)])))
    return found


def task_rows(readme: str) -> list[tuple[str, float]]:
    """(task id such as "3.5", points) of each row of the README's task table."""
    lines = readme.splitlines()
    header = next(i for i, line in enumerate(lines)
                  if line.startswith("|") and "points" in line.lower().split("|")[2:4]
                  or re.match(r"^\|\s*task\s*\|", line) and "points" in line)
    cells = [c.strip().lower() for c in lines[header].strip("|").split("|")]
    points_at = cells.index("points")
    rows = []
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        row = [c.strip() for c in line.strip("|").split("|")]
        rows.append((re.match(r"(\d+\.\d+)", row[0]).group(1), float(row[points_at])))
    return rows


def test_the_parsers_see_a_planted_difference() -> None:
    """The checks below can fail: a module left out of a sentence, a task's points."""
    text = ("do not import `pagedsim.memory` or `pagedsim.cli` (nor names `pagedsim` "
            "re-exports, such as `pagedsim.x`): a file that does scores 0. Do not import "
            "``a.b`` (the grader refuses it)")
    assert forbidden_in(text) == [{"pagedsim.memory", "pagedsim.cli"}, {"a.b"}]
    table = "| task | marker | points | what |\n|---|---|---|---|\n| 1.1 | `lab1_1` | 25 | x |\n"
    assert task_rows(table) == [("1.1", 25.0)]


@pytest.mark.parametrize("lab", LABS, ids=IDS)
def test_readme_forbids_what_lab_json_forbids(lab: LabInfo) -> None:
    readme = (lab.path / "README.md").read_text(encoding="utf-8")
    sentences = forbidden_in(readme)
    assert sentences, f"{lab.folder}/README.md says nothing of the modules it forbids"
    for named in sentences:
        assert named == set(lab.forbidden_imports), (
            f"{lab.folder}/README.md forbids {sorted(named)}, lab.json "
            f"{sorted(lab.forbidden_imports)}")


@pytest.mark.parametrize("lab", LABS, ids=IDS)
def test_student_files_forbid_what_lab_json_forbids(lab: LabInfo) -> None:
    for name in lab.student_files:
        doc = ast.get_docstring(ast.parse((lab.path / name).read_text(encoding="utf-8"))) or ""
        for named in forbidden_in(doc):
            assert named == set(lab.forbidden_imports), (
                f"{lab.folder}/{name}'s docstring forbids {sorted(named)}, lab.json "
                f"{sorted(lab.forbidden_imports)}")


@pytest.mark.parametrize("lab", LABS, ids=IDS)
def test_readme_task_table_matches_lab_json(lab: LabInfo) -> None:
    readme = (lab.path / "README.md").read_text(encoding="utf-8")
    assert task_rows(readme) == [(t.marker.replace(f"lab{lab.id}_", f"{lab.id}."),
                                  float(t.points)) for t in lab.tasks]
    for task in lab.tasks:  # where the table has a marker column, the right marker
        number = task.marker.replace(f"lab{lab.id}_", f"{lab.id}.")
        row = next(line for line in readme.splitlines()
                   if re.match(rf"^\|\s*{re.escape(number)}\b", line))
        assert "`lab" not in row or f"`{task.marker}`" in row, row
    total = re.search(r"\*\*Points:\*\*\s*(\d+)", readme)
    assert total and float(total.group(1)) == lab.max_score, \
        f"{lab.folder}/README.md: **Points:** {total and total.group(1)}, lab.json " \
        f"{lab.max_score:g}"
