"""``import pagedsim`` (and every module in it) must work without torch or triton.

Students on macOS have no Triton, and the simulator half must stay light, so no module
under ``pagedsim/`` may import torch or triton at import time (``kernels/`` may). Each check
runs in a fresh interpreter, since this test process may already have imported torch.
Submodules are found with ``pkgutil.walk_packages``, so modules added later are covered.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = ("torch", "triton")

# Runs in the child: import everything, report which forbidden top-level modules appeared
# (compared with what the bare interpreter had already loaded) and which imports failed.
_CHILD = r"""
import importlib, json, pkgutil, sys
forbidden = {forbidden!r}
before = {{name.partition(".")[0] for name in sys.modules}}
import pagedsim
modules, failed = ["pagedsim"], {{}}
if {walk!r}:
    for info in pkgutil.walk_packages(pagedsim.__path__, prefix="pagedsim.",
                                      onerror=lambda name: failed.setdefault(name, "walk")):
        try:
            importlib.import_module(info.name)
            modules.append(info.name)
        except Exception as exc:
            failed[info.name] = f"{{type(exc).__name__}}: {{exc}}"
after = {{name.partition(".")[0] for name in sys.modules}}
print(json.dumps({{"modules": modules, "failed": failed,
                  "imported": sorted((after - before) & set(forbidden))}}))
"""


def _run_child(walk: bool, forbidden: tuple[str, ...]) -> dict:
    code = _CHILD.format(forbidden=forbidden, walk=walk)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_pagedsim_leaves_out_torch_and_triton() -> None:
    result = _run_child(walk=False, forbidden=FORBIDDEN)
    assert result["imported"] == [], f"import pagedsim imported {result['imported']}"


def test_every_pagedsim_module_leaves_out_torch_and_triton() -> None:
    result = _run_child(walk=True, forbidden=FORBIDDEN)
    assert result["failed"] == {}, f"modules that failed to import: {result['failed']}"
    assert "pagedsim.cli" in result["modules"]
    assert "pagedsim.budget" in result["modules"]
    assert result["imported"] == [], (
        f"importing {result['modules']} imported {result['imported']}"
    )


def test_import_pagedsim_leaves_out_matplotlib() -> None:
    """DESIGN.md: plots import matplotlib lazily, so the bare package (and the CLI's start-up)
    stay fast."""
    result = _run_child(walk=False, forbidden=("matplotlib",))
    assert result["imported"] == [], f"import pagedsim imported {result['imported']}"
