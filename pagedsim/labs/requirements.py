"""What a lab's graders need installed besides pagedsim, found from their imports (read
by the grader, to know whether torch must be importable, and by the autograder's
``setup.sh``)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from .meta import LabInfo
from .pysource import parse

#: Import name -> pip requirement, for what graders commonly import; the pins are
#: pyproject's (its ``dev`` extra; tests/labs/test_labs.py keeps them equal).
KNOWN_REQUIREMENTS = {"pytest": "pytest>=8", "hypothesis": "hypothesis>=6.100"}
#: Imports that call for the extra ``pagedsim[kernels]`` (torch and triton).
KERNEL_IMPORTS = ("torch", "triton", "pagedsim.kernels")


def lab_requirements(lab: LabInfo, folder: Path | None = None) -> tuple[list[str], bool]:
    """What the lab's graders need besides pagedsim: pip requirements, and whether they
    import torch/triton (the extra ``pagedsim[kernels]``). Found from the imports of every
    ``.py`` file in ``folder`` (default: the lab folder, ``mutants.py`` left out)."""
    folder = lab.path if folder is None else folder
    files = [p for p in sorted(folder.glob("*.py")) if p.name != "mutants.py"]
    local = {p.stem for p in files}
    names: set[str] = set()
    for path in files:
        try:
            tree = parse(path.read_text(encoding="utf-8"), filename=str(path))
        except SyntaxError:
            continue  # a starter can be broken mid-exercise; its imports are the reference's
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
                names.update(f"{node.module}.{a.name}" for a in node.names)
    kernels = any(n == k or n.startswith(k + ".") for n in names for k in KERNEL_IMPORTS)
    tops = {n.partition(".")[0] for n in names}
    third_party = sorted(t for t in tops - local - {"pagedsim", "torch", "triton", "__future__"}
                         if t not in sys.stdlib_module_names)
    requirements = [KNOWN_REQUIREMENTS["pytest"]]
    requirements += [KNOWN_REQUIREMENTS.get(t, t) for t in third_party if t != "pytest"]
    requirements += [r for r in lab.requires if r not in requirements]
    return requirements, kernels
