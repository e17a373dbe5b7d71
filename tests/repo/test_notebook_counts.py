"""Counts the READMEs state about the notebooks are the notebooks' own: how many there are,
the class time their table adds up to, which ones no lab follows."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORDS = {"eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}


def _notebooks() -> list[str]:
    return sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_both_readmes_count_the_notebooks_there_are():
    n = len(_notebooks())
    top = (ROOT / "README.md").read_text(encoding="utf-8")
    nb = (ROOT / "notebooks" / "README.md").read_text(encoding="utf-8")
    (said,) = re.findall(r"(\w+) step-through notebooks", top)
    assert WORDS[said.lower()] == n
    (said,) = re.findall(r"(\w+) step-through lectures", nb)
    assert WORDS[said.lower()] == n


def test_the_class_time_sentence_is_the_tables_sum():
    nb = (ROOT / "notebooks" / "README.md").read_text(encoding="utf-8")
    rows = [r for r in nb.splitlines() if re.match(r"\| \d+ \| \[`\d\d_", r)]
    assert len(rows) == len(_notebooks())
    minutes = sum(int(re.search(r"\| (\d+) min \|", r).group(1)) for r in rows)
    (said,) = re.findall(r"About (\d+) minutes \((\w+) hours\) of class", nb)
    assert int(said[0]) == minutes
    assert WORDS[said[1]] == round(minutes / 60)


def test_the_notebooks_without_a_lab_are_named():
    nb = (ROOT / "notebooks" / "README.md").read_text(encoding="utf-8")
    table = nb.split("| after notebook | lab |", 1)[1].split("\n\n", 1)[0]
    followed = set(re.findall(r"^\| (\d\d) \|", table, flags=re.M))
    without = sorted({n[:2] for n in _notebooks()} - followed)
    (said,) = re.findall(r"\(notebooks? ([^)]*) ha(?:ve|s) none\)", nb.replace("\n", " "))
    assert re.findall(r"\b\d\d\b", said) == without
