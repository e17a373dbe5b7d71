"""Fixtures of the lab tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from pagedsim.labs import get_lab
from pagedsim.labs.release import release_lab

LABS = Path(__file__).resolve().parents[2] / "labs"


@pytest.fixture(scope="module")
def starter(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Lab 1's student file as released: the starter a cheat or a mistake is added to."""
    out = tmp_path_factory.mktemp("starter")
    release_lab(get_lab(1, LABS), out / "lab1_budget")
    return (out / "lab1_budget" / "budget_lab.py").read_text(encoding="utf-8")
