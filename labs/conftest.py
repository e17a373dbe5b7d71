"""Lets one pytest run take several labs (``python -m pytest labs/lab3_paged labs/lab4_cow``).

Each lab's tests import the lab's own top-level modules (``adapters``, ``mutants``, its
starter), and Python keeps a module by its name: a second lab would be handed the first
one's ``adapters``. Before a lab's test file is imported, the modules another lab's
folder put there are dropped, so each lab imports its own. A lab run alone, and every
released lab (a folder of its own), never needs this.
"""

from __future__ import annotations

import sys
from pathlib import Path

LABS = Path(__file__).resolve().parent


def _lab_of(path: Path) -> Path | None:
    """The lab folder (``labs/<lab>``) that ``path`` lies in, or None."""
    try:
        first = path.resolve().relative_to(LABS).parts[0]
    except (ValueError, IndexError):
        return None
    lab = LABS / first
    return lab if lab.is_dir() else None


def pytest_pycollect_makemodule(module_path: Path, parent: object) -> None:
    lab = _lab_of(module_path)
    if lab is None:
        return
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file is not None:
            other = _lab_of(Path(file))
            if other is not None and other != lab:
                del sys.modules[name]
