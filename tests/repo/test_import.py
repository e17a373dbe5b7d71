"""``import pagedsim`` (and every module in it) must work without torch or triton.

Students on macOS have no Triton, and the simulator half must stay light, so no module
under ``pagedsim/`` may import torch or triton at import time (``pagedsim.kernels``, whose
source is the top-level ``kernels/`` folder, may: it is imported only when asked for). Each
check runs in a fresh interpreter, since this test process may already have imported torch.
Submodules are found with ``pkgutil.walk_packages``, so modules added later are covered.

The kernels install and import as ``pagedsim.kernels`` (pyproject's ``package-dir``), so
nothing named ``kernels`` lands in site-packages; the last tests here check that layout.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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
        if info.name.startswith("pagedsim.kernels"):
            continue  # the torch half (inside pagedsim/ only in an installed wheel)
        try:
            importlib.import_module(info.name)
            modules.append(info.name)
        except Exception as exc:
            failed[info.name] = f"{{type(exc).__name__}}: {{exc}}"
after = {{name.partition(".")[0] for name in sys.modules}}
print(json.dumps({{"modules": modules, "failed": failed,
                  "imported": sorted((after - before) & set(forbidden)),
                  "kernels_loaded": "pagedsim.kernels" in sys.modules}}))
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
    assert not result["kernels_loaded"], "import pagedsim imported pagedsim.kernels"


def test_every_pagedsim_module_leaves_out_torch_and_triton() -> None:
    result = _run_child(walk=True, forbidden=FORBIDDEN)
    assert result["failed"] == {}, f"modules that failed to import: {result['failed']}"
    assert "pagedsim.cli" in result["modules"]
    assert "pagedsim.models.budget" in result["modules"]
    assert result["imported"] == [], (
        f"importing {result['modules']} imported {result['imported']}"
    )


def test_import_pagedsim_leaves_out_matplotlib() -> None:
    """DESIGN.md: plots import matplotlib lazily, so the bare package (and the CLI's start-up)
    stay fast."""
    result = _run_child(walk=False, forbidden=("matplotlib",))
    assert result["imported"] == [], f"import pagedsim imported {result['imported']}"


# --------------------------------------------------------------------------------------
# Layout: kernels/ in the repository, pagedsim.kernels once installed.


def test_pyproject_lists_every_package() -> None:
    """pyproject lists the packages (package-dir rules out packages.find): every folder
    with an ``__init__.py`` under ``pagedsim/``, plus ``pagedsim.kernels`` from
    ``kernels/``, and nothing else; no top-level ``kernels`` package."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python >= 3.11")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {".".join(p.parent.relative_to(ROOT).parts)
               for p in (ROOT / "pagedsim").rglob("__init__.py")}
    assert sorted(config["packages"]) == sorted(folders | {"pagedsim.kernels"})
    assert config["package-dir"] == {"pagedsim.kernels": "kernels"}
    assert (ROOT / "kernels" / "__init__.py").is_file()


def test_installed_names_outside_the_repository(tmp_path: Path) -> None:
    """From a folder outside the repository (the Done-when check of the rename):
    ``pagedsim.kernels`` is found in the repository's kernels/ folder and no top-level
    ``kernels`` is importable. find_spec imports pagedsim but not the kernels (no torch)."""
    code = ("import importlib.util as u, json; s = u.find_spec('pagedsim.kernels'); "
            "print(json.dumps([s and s.origin, u.find_spec('kernels') is None]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    origin, no_top_level = json.loads(proc.stdout)
    assert origin is not None and Path(origin) == ROOT / "kernels" / "__init__.py"
    assert no_top_level, "a top-level 'kernels' package is importable outside the repository"


def test_checkout_finds_kernels_without_the_install_finder() -> None:
    """From the repository root with only the plain path finders (an editable install made
    before the package-dir mapping, or none), pagedsim's own finder resolves
    pagedsim.kernels to the checkout's kernels/ folder."""
    code = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path "
            "if 'editable' not in repr(f).lower()]; "
            "import importlib.util as u; print(u.find_spec('pagedsim.kernels').origin)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == ROOT / "kernels" / "__init__.py"
    assert importlib.util.find_spec("pagedsim.kernels") is not None


#: An import of the bare name ``kernels``, or ``python -m kernels``: code, strings, docs.
_BARE = re.compile(r"^\s*(?:from|import)\s+kernels\b|-m\s+kernels\b|\"-m\",\s*\"kernels\b"
                   r"|`(?:import )?kernels[.`]", re.M)


def test_nothing_uses_the_bare_name_kernels() -> None:
    """Every import, command and doc says ``pagedsim.kernels`` (from the repository root
    ``import kernels`` would load a second copy of the package)."""
    paths = [ROOT / "README.md", ROOT / "scripts" / "gpu_checks.sh"]
    for folder, pattern in (("kernels", "*.py"), ("pagedsim", "*.py"), ("tests", "*.py"),
                            ("notebooks", "*.ipynb"), ("notebooks", "*.md")):
        paths += sorted((ROOT / folder).rglob(pattern))
    offenders = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".ipynb":
            text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"])
        offenders += [f"{path.relative_to(ROOT)}: {m.group(0).strip()}"
                      for m in _BARE.finditer(text)]
    offenders = [o for o in offenders if not o.startswith("tests/repo/test_import.py")]
    assert offenders == []


def _module_imports(root: Path) -> dict[str, set[str]]:
    """Module -> the pagedsim modules it imports, at its top or inside its functions
    (``if TYPE_CHECKING:`` blocks are not imports at run time)."""
    import ast

    def run_time_nodes(tree: ast.AST):
        for node in ast.iter_child_nodes(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            yield node
            yield from run_time_nodes(node)

    mods = {}
    for path in root.rglob("*.py"):
        parts = path.with_suffix("").relative_to(root.parent).parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        deps = set()
        for node in run_time_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = package[:len(package) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                deps |= {t for t in (target, *(f"{target}.{a.name}" for a in node.names))
                         if t in mods}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in mods}
        graph[name] = deps - {name}
    return graph


def test_no_import_cycles_between_modules():
    """The layout's one-way data flow: no module imports one that imports it back, not
    even inside a function (a package's ``__init__`` re-exporting its modules is not a
    cycle)."""
    graph = _module_imports(ROOT / "pagedsim")
    packages = {m for m in graph if (ROOT / m.replace(".", "/") / "__init__.py").exists()}
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        for dep in sorted(graph[module] - packages):
            if dep in path:
                cycles.append(path[path.index(dep):] + [dep])
            elif dep not in seen:
                seen.add(dep)
                visit(dep, path + [dep])

    seen: set[str] = set()
    for module in sorted(graph.keys() - packages):
        if module not in seen:
            seen.add(module)
            visit(module, [module])
    assert cycles == []


#: The core layers, each with the layers it may import (besides the top-level helper
#: modules such as ``pagedsim/validate.py``): data flows from workloads through the engine
#: and memory into metrics, so metrics never imports the engine that feeds it.
LAYERS_BELOW = {
    "workloads": set(),
    "models": set(),
    "memory": {"models", "workloads"},
    "metrics": {"memory", "models", "workloads"},
    "engine": {"memory", "metrics", "models", "workloads"},
}


def _layer_imports(path: Path, package: list[str]) -> set[str]:
    """The ``pagedsim`` subpackages ``path`` imports anywhere: at its top, in functions and
    under ``TYPE_CHECKING`` alike (a type named from a layer above is a dependency too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            targets = [".".join(base + ([node.module] if node.module else []))]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            if parts[0] == "pagedsim" and len(parts) > 1 and (
                    ROOT / "pagedsim" / parts[1] / "__init__.py").is_file():
                found.add(parts[1])
    return found


def test_the_core_layers_import_only_the_layers_below():
    bad = []
    for layer, below in LAYERS_BELOW.items():
        for path in sorted((ROOT / "pagedsim" / layer).glob("*.py")):
            package = ["pagedsim", layer]
            for other in sorted(_layer_imports(path, package) - below - {layer}):
                bad.append(f"pagedsim/{layer}/{path.name} imports pagedsim.{other}")
    assert bad == []


def test_the_layer_check_sees_an_import_only_type_checkers_see(tmp_path: Path):
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    from ..engine.plan import StepPlan\n", encoding="utf-8")
    assert _layer_imports(module, ["pagedsim", "metrics"]) == {"engine"}
