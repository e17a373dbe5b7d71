"""The prose check of ``prose_numbers.py`` on small executed notebooks built here: it
confirms numbers a run printed (to the digits typed) and names planted wrong ones. The
check over the real notebooks runs inside test_notebooks.py's run test, on the outputs of
its one execution."""

from __future__ import annotations

import pytest
from prose_numbers import typed_numbers, unconfirmed

nbformat = pytest.importorskip("nbformat")


def _executed(markdown: str, source: str, printed: str, check: str | None = None):
    """A notebook of one markdown cell, one code cell that printed ``printed`` and, if
    given, a check cell ``check`` that printed its own explanation."""
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell(markdown))
    code = nbformat.v4.new_code_cell(source)
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)]
    nb.cells.append(code)
    if check is not None:
        cell = nbformat.v4.new_code_cell(check)
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout",
                                               text=check.split('"')[1])]
        nb.cells.append(cell)
    return nb


def _missing(nb, checks=frozenset(), allowed=None) -> list[float]:
    return [m.typed.value for m in unconfirmed(nb, set(checks), allowed or {})]


RUN = "internal 0.6172 of the pool at 2,048; 0.4791 at 8,192; 9,700 slots; ratio 1.78x"


def test_numbers_the_run_printed_are_confirmed_to_the_digits_typed():
    nb = _executed("The internal share falls from 61.7% to 47.9% (about 62% and 48%); "
                   "9,700 slots, 1.78x ours, at 2,048 and 8,192 tokens.", "run()", RUN)
    assert _missing(nb) == []


@pytest.mark.parametrize("planted", ["67.1%", "47.3%", "9,600", "1.87x", "4,096"])
def test_a_planted_wrong_number_is_named(planted: str):
    text = f"The share falls from 61.7% to 47.9%; here {planted} stands where a true one did."
    nb = _executed(text, "run()", RUN)
    assert _missing(nb) == [float(planted.rstrip("%x").replace(",", ""))]


def test_a_ratio_only_typed_in_code_is_not_a_result():
    """Notebook 10's old sentence: "16 times a token's link time" where the run gave 6.2x;
    16 is the block size the code sets, which confirms a count but not a ratio."""
    nb = _executed("Recomputing costs 16 times a token's link time, with blocks of 16.",
                   "block_size = 16\nrun(block_size)", "recompute / link: 6.2x")
    assert _missing(nb) == [16.0]
    nb.cells[0].source = "Recomputing costs 6.2 times a token's link time, with blocks of 16."
    assert _missing(nb) == []


def test_a_check_explanation_cannot_confirm_its_own_typed_number():
    check = 'print("The run gives 12.5 blocks, about 40 more than the last.")'
    nb = _executed("", "run()", "12.5", check)
    assert _missing(nb, checks={2}) == [40.0]
    assert _missing(nb, checks={2}, allowed={40.0: "a reason"}) == []


def test_names_code_math_years_and_small_counts_are_not_claims():
    text = ("## 3. Section\nLlama-2-7B on an H100 (notebook 05, Figure 18, §6.3, Table 1) in "
            "2023: `block_size = 48` and $2^{20}$ slots, [link](x_77.md), 3 blocks of 4.")
    assert typed_numbers(text) == []
