"""Instructor answer keys (notebooks/ANSWERS.md) for the prompts that invite more runs.

A question cell that says "Afterwards try ..." or "Try 4 and 1 kv heads too" asks for runs
its check cell does not judge. Each such exercise lists those runs in its metadata
(``followups``), ``scripts/notebook_answers.py`` runs them and writes what they print into
ANSWERS.md, and these tests hold the three together: every inviting question has follow-ups
that name the values it suggests, every follow-up has its key, and (slow) the key of one
notebook is what the script computes today.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
ANSWERS = ROOT / "notebooks" / "ANSWERS.md"
# A sentence that asks for another run: "Afterwards try 16", "Try 4 and 1 kv heads too",
# "...and the check; try 0 too" (not the "Try it" headings, nor "Afterwards: how many...",
# which asks about the run just made).
INVITES = re.compile(r"\bAfterwards,?\s(?:try|set|make)\b|\b[Tt]ry\s(?!it\b)")


def _script():
    spec = importlib.util.spec_from_file_location(
        "notebook_answers", ROOT / "scripts" / "notebook_answers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


answers = _script()


def _question(nb, pred: int) -> str:
    """The markdown just before an exercise's prediction cell: its question."""
    return nb.cells[pred - 1].source if nb.cells[pred - 1].cell_type == "markdown" else ""


def _ids(paths):
    return [p.name for p in paths]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_every_invitation_has_followups_naming_its_values(path: Path):
    nb = nbformat.read(path, as_version=4)
    for meta, pred, _, _ in answers.exercises(nb):
        question = _question(nb, pred)
        followups = meta.get(answers.FOLLOWUPS_KEY, [])
        invites = INVITES.findall(question)
        assert bool(invites) == bool(followups), (
            f"{path.name} {meta['id']}: the question {'invites' if invites else 'does not invite'}"
            f" more runs ({invites}) but lists {len(followups)} follow-up(s) in its metadata")
        plain = question.replace(",", "")
        for followup in followups:
            values = [v.split(",")[-1].strip().strip('"') for v in followup.values()]
            assert any(v.replace(",", "") in plain for v in values), (
                f"{path.name} {meta['id']}: the question does not suggest {followup}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_every_followup_has_its_key(path: Path):
    nb = nbformat.read(path, as_version=4)
    wanted = [answers.followup_label(meta, f) for meta, *_ in answers.exercises(nb)
              for f in meta.get(answers.FOLLOWUPS_KEY, [])]
    section = answers.sections(ANSWERS.read_text(encoding="utf-8")).get(path.name, "")
    found = re.findall(r"^### (.+)$", section, flags=re.MULTILINE)
    assert found == wanted, (
        f"{path.name}: ANSWERS.md has keys {found}, the exercises ask for {wanted}; run "
        f"`python scripts/notebook_answers.py {path.name}`")
    for key in re.split(r"^### .+$", section, flags=re.MULTILINE)[1:]:
        assert "**The run gives" in key, f"{path.name}: a key without the run's value:\n{key}"


def test_followups_cover_the_notebooks():
    """About 19 follow-up prompts in the notebooks when the keys were written: none lost."""
    total = sum(len(meta.get(answers.FOLLOWUPS_KEY, []))
                for path in NOTEBOOKS for meta, *_ in answers.exercises(
                    nbformat.read(path, as_version=4)))
    assert total >= 19, total


@pytest.mark.slow
def test_key_is_what_the_script_computes(monkeypatch):
    """The committed key of notebook 02 (the quickest with follow-ups) equals a fresh run."""
    pytest.importorskip("nbclient")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    name = "02_contiguous.ipynb"
    fresh = answers.answers_for(ROOT / "notebooks" / name)
    committed = answers.sections(ANSWERS.read_text(encoding="utf-8"))[name]
    assert fresh.strip() == committed.strip()
