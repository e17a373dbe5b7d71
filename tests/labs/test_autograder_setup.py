"""The autograder's setup.sh, run as Gradescope runs it (issue 21, part 4).

In a temporary layout standing in for ``/autograder`` (``source/``, ``submission/``,
``results/``) and with the Python this environment was made from (none of the project's
packages in it), setup.sh makes ``$ROOT/venv``, installs pagedsim and the graders' needs
there from PyPI, and run_autograder, with that venv's Python, grades. Skipped, saying so,
where PyPI cannot be reached. About a minute (pip downloads, cached after the first run).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pagedsim.labs import build_autograder, get_lab

ROOT = Path(__file__).resolve().parents[2]


def _reachable(host: str) -> bool:
    import socket

    try:
        socket.create_connection((host, 443), timeout=3).close()
        return True
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.skipif(not (ROOT / "labs" / "lab1_budget").is_dir(), reason="lab 1 missing")
def test_setup_sh_builds_a_venv_that_grades(tmp_path: Path) -> None:
    """setup.sh in a temporary layout standing in for /autograder (source, submission,
    results), with the Python this one was made from (no package of the project's in
    it): it makes $ROOT/venv, installs pagedsim and the graders' needs there, and
    run_autograder, with that venv's Python, gives lab 1's reference full marks."""
    if not (_reachable("pypi.org") and _reachable("files.pythonhosted.org")):
        pytest.skip("setup.sh installs from PyPI, which this machine cannot reach")
    out = build_autograder(1, tmp_path / "ag.zip", labs_dir=ROOT / "labs")
    root = tmp_path / "autograder"
    with zipfile.ZipFile(out) as zf:
        zf.extractall(root / "source")
    base = getattr(sys, "_base_executable", sys.executable)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", str(tmp_path)),
           "AUTOGRADER_ROOT": str(root), "PYTHON": base}
    proc = subprocess.run(["bash", str(root / "source" / "setup.sh")], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    python = root / "venv" / "bin" / "python"
    assert python.is_file()
    check = subprocess.run([str(python), "-c", "import pagedsim, pytest, hypothesis; "
                            "print(pagedsim.__file__)"], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)
    assert check.returncode == 0 and str(root / "venv") in check.stdout, check.stderr
    lab = get_lab(1, ROOT / "labs")
    submission = root / "submission"
    submission.mkdir()
    for name in lab.student_files:
        shutil.copyfile(lab.path / name, submission / name)
    env.pop("PYTHON")  # run_autograder's default: setup.sh's venv
    proc = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["score"] == lab.max_score, results


