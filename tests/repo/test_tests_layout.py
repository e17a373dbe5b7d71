"""``tests/`` is grouped by layer, as ``tests/README.md`` says: no test at the top, every
folder named in the README's table and every folder the table names there, and no two
test files with one name (pytest imports them by their file name)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _folders() -> set[str]:
    return {p.name for p in TESTS.iterdir()
            if p.is_dir() and p.name not in ("data", "__pycache__") and not p.name.startswith(".")}


def test_no_test_at_the_top_of_tests():
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == []


def test_the_readme_table_names_every_folder():
    readme = (TESTS / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"^\| `([a-z_]+)/` \|", readme, flags=re.MULTILINE))
    assert named == _folders()


def test_test_file_names_are_unique():
    names = Counter(p.name for p in TESTS.rglob("*.py") if p.name != "conftest.py")
    assert [n for n, k in names.items() if k > 1] == []
