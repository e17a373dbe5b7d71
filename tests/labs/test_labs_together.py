"""Every lab's tests in one pytest process (labs/conftest.py keeps each lab's own
``adapters``): an instructor's ``python -m pytest labs/`` passes as each lab alone does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_all_labs_pass_in_one_pytest_run():
    proc = subprocess.run([sys.executable, "-m", "pytest", "labs", "-v", "-p", "no:cacheprovider",
                           "-n", "0"],  # one process, not the addopts' workers
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    labs = sorted(p.name for p in (ROOT / "labs").iterdir() if (p / "lab.json").is_file())
    assert len(labs) == 8  # every lab was in it
    ran = {line.split("/")[1] for line in proc.stdout.splitlines()
           if line.startswith("labs/") and " PASSED" in line}
    assert ran == set(labs)  # every lab's tests ran, and passed
