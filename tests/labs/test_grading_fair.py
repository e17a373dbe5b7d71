"""Grades a student can trust (issue 35): the same files get the same grade on every run,
a solution the handout allows gets full marks, and a planted mistake costs points in its
own task only, with feedback that names the concept.

Each test grades a few files with the real graders (a second or a few each); the planted
mistakes are the labs' own mutants (``labs/*/mutants.py``), graded in full here (the
suite's ``test_mutant_is_caught`` stops at their first failure).
"""

from __future__ import annotations

import functools
import types
from pathlib import Path

import pytest

from pagedsim.labs import get_lab, grade
from pagedsim.labs.lending import lend
from pagedsim.labs.mutants import get_mutant

# Each test grades a whole lab: the slow files run first, so the workers stay busy.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
LABS_DIR = ROOT / "labs"


def _write_variant(lab_id: int, old: str, new: str, out: Path) -> Path:
    """The reference of lab ``lab_id`` with ``old`` (once in its first student file)
    replaced by ``new``, written as a student's lab folder under ``out``."""
    lab = get_lab(lab_id, LABS_DIR)
    folder = out / lab.folder
    folder.mkdir(parents=True)
    for name in lab.student_files:
        text = (lab.path / name).read_text(encoding="utf-8")
        if name == lab.student_files[0]:
            assert text.count(old) == 1, f"{old!r} is not once in {name}"
            text = text.replace(old, new)
        (folder / name).write_text(text, encoding="utf-8")
    return out


# --------------------------------------------------------------------------------------
# The same files, the same grade; what the handout allows, full marks.

#: Solutions that differ from the reference in a way the handout allows (lab, old, new,
#: why). Each must get full marks on every one of three runs.
HANDOUT_VALID = [
    # The docstring says "A missing or bad number raises ValueError (int_field does it)":
    # a student who reads qk_rope_head_dim with int_field refuses 0. The graders used to
    # draw qk_rope_head_dim = 0 now and then (92.59, 92.15, 95.72 on three runs).
    (8, 'text.get("qk_rope_head_dim", 0)', 'int_field(text, "qk_rope_head_dim")',
     "qk_rope_head_dim read with int_field"),
]


@pytest.mark.parametrize(("lab_id", "old", "new", "why"), HANDOUT_VALID,
                         ids=[v[3] for v in HANDOUT_VALID])
def test_a_solution_the_handout_allows_gets_full_marks_every_time(
        lab_id: int, old: str, new: str, why: str, tmp_path: Path) -> None:
    tree = _write_variant(lab_id, old, new, tmp_path)
    runs = [grade(lab_id, path=tree, labs_dir=LABS_DIR) for _ in range(3)]
    assert [r.score for r in runs] == [runs[0].lab.max_score] * 3, runs[0].table()


# --------------------------------------------------------------------------------------
# One mistake, one task: a planted mistake loses points in its own task only, and that
# task's feedback names the concept in the lab's words.

#: (lab, mutant of the lab's mutants.py, words its task's feedback must contain).
TASK_LOCAL = [
    (1, "gqa-ignored", "for each KV head (num_kv_heads = 8), not for each query head"),
    (3, "free-forward-order", "blocks must be freed last-first"),
    (5, "lookup-without-last-token-rule", "the last-token rule"),
    (8, "mla-k-and-v", "MLA caches its latent once per token"),
    # One of our own per remaining lab (issue 35): each the lab's own mutant.
    (2, "reserved-past-region-end", "never past the region's end"),
    (4, "token-counts-shared-twice", "a slot shared by several sequences counts once"),
    (6, "split-k-averaged", "weighted by 2 ** (its lse - the largest lse)"),
    (7, "first-mismatch-against-tables", "the accounting under test disagree"),
]


@functools.cache
def _graded_mutant(lab_id: int, mutant: str):
    """Lab ``lab_id`` graded in full with its mutant ``mutant`` planted (once a session:
    two tests read lab 4's)."""
    return grade(lab_id, mutant=mutant, labs_dir=LABS_DIR)


@pytest.mark.parametrize(("lab_id", "mutant", "concept"), TASK_LOCAL,
                         ids=[f"lab{lab}-{m}" for lab, m, _ in TASK_LOCAL])
def test_a_planted_mistake_costs_points_in_its_own_task_only(
        lab_id: int, mutant: str, concept: str) -> None:
    lab = get_lab(lab_id, LABS_DIR)
    own = set(get_mutant(lab, mutant).caught_by)
    result = _graded_mutant(lab_id, mutant)
    lost = {t.marker for t in result.tasks if t.lost_points}
    assert lost == own, f"{mutant} should lose points in {sorted(own)} only:\n" \
                        + result.table()
    for marker in own:
        assert concept in result.task(marker).output, result.task(marker).output


def test_lend_replaces_a_modules_functions_for_a_block_only() -> None:
    """Run by hand (a plainly imported module): the module's globals are swapped in the
    block, names it lacks are skipped, its own functions come back after, an error too."""
    module = types.ModuleType("student")
    exec("def helper():\n    return 'mine'\n\ndef task():\n    return helper()\n",
         module.__dict__)
    with lend(module, {"helper": lambda: "reference", "absent": lambda: None}):
        assert module.task() == "reference" and not hasattr(module, "absent")
    assert module.task() == "mine"
    with pytest.raises(RuntimeError), lend(module, {"helper": lambda: "reference"}):
        raise RuntimeError("a failing test")
    assert module.task() == "mine"


def test_a_property_failure_reads_as_the_steps_that_break_it() -> None:
    """Lab 4's state machine caught the mutant: its feedback lists the steps in words and
    the check that failed, not hypothesis's replay program (pagedsim.labs.steps)."""
    out = _graded_mutant(4, "token-counts-shared-twice").task("lab4_3").output
    assert "The steps that break it (the shortest found):" in out, out
    assert "then the check 'categories partition capacity' fails." in out, out
    for machinery in ("reproduce_failure", "state = ", "data=data(", "Draw 1"):
        assert machinery not in out, out
