"""A Gradescope autograder zip for one lab: ``pagedsim labs autograder N OUT.zip``.

Gradescope unpacks the zip into ``/autograder/source``, runs ``setup.sh`` once to build the
image, then ``run_autograder`` for every submission (the student's files are in
``/autograder/submission``; the score goes to ``/autograder/results/results.json``). The zip
holds, at its root:

- ``setup.sh``: pip-installs pagedsim from the source copy below (with the extra
  ``[kernels]``, after a CPU build of torch, when the lab's files import torch or triton)
  and the graders' own needs (pytest, and what else they import; ``requires`` in
  ``lab.json``);
- ``run_autograder``: copies the student files (found by name anywhere in the submission)
  into an empty lab folder and runs ``python3 -m pagedsim labs grade N --path ... --json``;
- ``pyproject.toml``, ``README.md``, ``pagedsim/``, ``kernels/``: a source copy of pagedsim;
- ``labs/README.md`` and ``labs/lab<N>_<slug>/``: the *released* lab, as
  :func:`pagedsim.labs.release` writes it: no reference solution, no ``mutants.py``.
"""

from __future__ import annotations

import ast
import shlex
import sys
import tempfile
import zipfile
from pathlib import Path

from .meta import LabError, LabInfo, get_lab
from .release import release_lab

#: Import name -> pip requirement, for what graders commonly import; the pins are
#: pyproject's (its ``dev`` extra; tests/test_labs.py keeps them equal).
KNOWN_REQUIREMENTS = {"pytest": "pytest>=8", "hypothesis": "hypothesis>=6.100"}
#: Imports that call for the extra ``pagedsim[kernels]`` (torch and triton).
KERNEL_IMPORTS = ("torch", "triton", "pagedsim.kernels")
#: Where setup.sh gets a CPU-only torch (the default wheel carries CUDA, gigabytes of it).
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
_SOURCE_FILES = ("pyproject.toml", "README.md")
_SOURCE_DIRS = ("pagedsim", "kernels")
# Zip entries get one fixed date, so the same inputs give the same bytes.
_DATE = (1980, 1, 1, 0, 0, 0)


def source_root() -> Path:
    """The checkout pagedsim is imported from (``pyproject.toml`` beside ``pagedsim/`` and
    ``kernels/``); an installed copy cannot build a zip."""
    root = Path(__file__).resolve().parents[2]
    if not all((root / n).is_file() for n in _SOURCE_FILES) or not all(
            (root / d).is_dir() for d in _SOURCE_DIRS):
        raise LabError(f"building an autograder needs a source checkout of pagedsim "
                       f"(pyproject.toml, README.md, pagedsim/ and kernels/ in one folder); "
                       f"{root} is not one")
    return root


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
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
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


def setup_script(lab: LabInfo, requirements: list[str], kernels: bool) -> str:
    """``setup.sh``: install pagedsim from the zip's source copy and the graders' needs."""
    target = ".[kernels]" if kernels else "."
    lines = [
        "#!/usr/bin/env bash",
        f"# Gradescope autograder for lab {lab.id} ({lab.title}), built by "
        f"'pagedsim labs autograder {lab.id}'.",
        "# Runs once, as root, when Gradescope builds the image: installs pagedsim from the",
        "# source copy in this folder and what the lab's graders import.",
        "set -euo pipefail",
        "cd /autograder/source",
        "python3 -m pip install --upgrade pip",
    ]
    if kernels:
        lines.append("# The graders import torch/triton: a CPU build of torch (no GPU there).")
        lines.append(f"python3 -m pip install torch --index-url {TORCH_CPU_INDEX}")
    lines.append("python3 -m pip install " + " ".join(shlex.quote(r)
                                                      for r in [target, *requirements]))
    return "\n".join(lines) + "\n"


def run_script(lab: LabInfo) -> str:
    """``run_autograder``: grade the files of one submission into results.json.

    ``$AUTOGRADER_ROOT`` (default ``/autograder``) and ``$PYTHON`` (default ``python3``)
    let the script run outside Gradescope too (tests/test_labs.py runs it so)."""
    names = " ".join(shlex.quote(n) for n in lab.student_files)
    return f"""#!/usr/bin/env bash
# Gradescope runs this for every submission. The student's files ({', '.join(lab.student_files)})
# are looked up by name anywhere under $ROOT/submission and copied into an empty
# {lab.folder}/ folder; pagedsim grades that folder against the released lab in
# $ROOT/source/labs (which holds no reference solution). A missing file scores 0.
set -uo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
PYTHON="${{PYTHON:-python3}}"
WORK=$(mktemp -d)
mkdir -p "$WORK/{lab.folder}" "$ROOT/results"
for name in {names}; do
    # The shortest path wins when a submission holds the name twice.
    found=$(find "$ROOT/submission" -type f -name "$name" -not -path '*/__MACOSX/*' \\
            | awk '{{ print length, $0 }}' | sort -n | head -n 1 | cut -d' ' -f2-)
    if [ -n "$found" ]; then cp "$found" "$WORK/{lab.folder}/$name"; fi
done
export PAGEDSIM_LABS_DIR="$ROOT/source/labs"
cd "$WORK"  # the installed pagedsim, not the source copy in $ROOT/source
if ! "$PYTHON" -m pagedsim labs grade {lab.id} --path "$WORK" --json \\
        > "$ROOT/results/results.json" 2> "$WORK/stderr.txt"; then
    # The grader itself failed (not the student's code): say why instead of a blank page.
    "$PYTHON" - "$WORK/stderr.txt" "$ROOT/results/results.json" <<'EOF'
import json, sys
reason = open(sys.argv[1], encoding="utf-8").read().strip() or "no message"
with open(sys.argv[2], "w", encoding="utf-8") as f:
    json.dump({{"score": 0, "output": "the grader could not run: " + reason}}, f)
EOF
fi
rm -rf "$WORK"
"""


def build_autograder(lab_id: int, out_zip: Path | str, labs_dir: Path | None = None) -> Path:
    """Write the autograder zip of lab ``lab_id`` to ``out_zip`` (a ``.zip`` path; replaced
    if it exists); return its path."""
    lab = get_lab(lab_id, labs_dir)
    out = Path(out_zip)
    if out.suffix != ".zip":
        raise LabError(f"output {str(out)!r} must be a .zip file name")
    if out.is_dir():
        raise LabError(f"output {str(out)!r} is a folder; give a .zip file name")
    if not out.parent.is_dir():
        raise LabError(f"output folder {str(out.parent)!r} does not exist")
    root = source_root()
    with tempfile.TemporaryDirectory(prefix=f"pagedsim-autograder{lab.id}-") as tmp:
        released = Path(tmp) / lab.folder
        release_lab(lab, released)
        requirements, kernels = lab_requirements(lab, released)
        entries: list[tuple[str, bytes, int]] = [
            ("setup.sh", setup_script(lab, requirements, kernels).encode(), 0o755),
            ("run_autograder", run_script(lab).encode(), 0o755),
        ]
        entries += [(n, (root / n).read_bytes(), 0o644) for n in _SOURCE_FILES]
        for folder in _SOURCE_DIRS:
            entries += [(p.relative_to(root).as_posix(), p.read_bytes(), 0o644)
                        for p in _files(root / folder)]
        index = lab.path.parent / "README.md"
        if index.is_file():
            entries.append(("labs/README.md", index.read_bytes(), 0o644))
        entries += [(f"labs/{lab.folder}/{p.relative_to(released).as_posix()}",
                     p.read_bytes(), 0o644) for p in _files(released)]
    tmp_out = out.with_name(out.name + ".part")
    with zipfile.ZipFile(tmp_out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data, mode in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=_DATE)
            info.external_attr = (0o100000 | mode) << 16  # a regular file with these bits
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    tmp_out.replace(out)
    return out


def _files(folder: Path) -> list[Path]:
    """The files under ``folder``, without caches and build leftovers."""
    return [p for p in sorted(folder.rglob("*")) if p.is_file()
            and "__pycache__" not in p.parts and p.suffix != ".pyc"
            and not any(part.endswith(".egg-info") for part in p.parts)]
