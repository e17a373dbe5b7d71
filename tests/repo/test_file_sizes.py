"""Small files, one concept each: no module under pagedsim/ grows past 500 lines."""

from __future__ import annotations

from pathlib import Path

PAGEDSIM = Path(__file__).resolve().parents[2] / "pagedsim"


def test_no_pagedsim_module_over_500_lines():
    sizes = {p.relative_to(PAGEDSIM).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
             for p in PAGEDSIM.rglob("*.py")}
    assert sizes, "no modules found"
    assert {name: n for name, n in sizes.items() if n > 500} == {}


def test_no_memory_layer_module_over_300_lines():
    """The memory manager stays readable: no module of pagedsim/memory/ past 300 lines."""
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines())
             for p in (PAGEDSIM / "memory").glob("*.py")}
    assert sizes and {name: n for name, n in sizes.items() if n > 300} == {}
