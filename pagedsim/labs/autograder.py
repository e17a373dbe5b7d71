"""A Gradescope autograder zip for one lab: ``pagedsim labs autograder N OUT.zip``.

Gradescope unpacks the zip into ``/autograder/source``, runs ``setup.sh`` once to build the
image, then ``run_autograder`` for every submission (the student's files are in
``/autograder/submission``; the score goes to ``/autograder/results/results.json``). The zip
holds, at its root:

- ``setup.sh``: makes a virtual environment ``/autograder/venv`` (pip bootstrapped if the
  image lacks it) and installs into it pagedsim from the source copy below (with the extra
  ``[kernels]``, after a CPU build of torch pinned to :data:`TORCH_PIN`, when the lab's
  files import torch or triton) and the graders' own needs (pytest, and what else they
  import; ``requires`` in ``lab.json``);
- ``run_autograder``: copies the student files (found by name anywhere in the submission)
  into an empty lab folder and runs ``python3 -m pagedsim labs grade N --path ... --json``;
- ``pyproject.toml``, ``README.md``, ``pagedsim/``, ``kernels/``: a source copy of pagedsim;
- ``labs/README.md`` and ``labs/lab<N>_<slug>/``: the *released* lab, as
  :func:`pagedsim.labs.release` writes it: no reference solution, no ``mutants.py``.
"""

from __future__ import annotations

import shlex
import tempfile
import zipfile
from pathlib import Path

from .meta import LabError, LabInfo, get_lab
from .release import release_lab
from .requirements import KERNEL_IMPORTS, KNOWN_REQUIREMENTS, lab_requirements

__all__ = ["KERNEL_IMPORTS", "KNOWN_REQUIREMENTS", "TORCH_CPU_INDEX", "TORCH_PIN",
           "build_autograder", "lab_requirements", "run_script", "setup_script", "source_root"]

#: Where setup.sh gets a CPU-only torch (the default wheel carries CUDA, gigabytes of it).
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: The torch setup.sh installs for the kernel labs (the version the project is tested on).
TORCH_PIN = "torch==2.13.0"
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


def setup_script(lab: LabInfo, requirements: list[str], kernels: bool) -> str:
    """``setup.sh``: a virtual environment (Gradescope's Ubuntu images have an externally
    managed system Python, PEP 668, and may lack pip), pagedsim from the zip's source copy
    and the graders' needs in it; torch pinned to :data:`TORCH_PIN`, a CPU build.

    ``$AUTOGRADER_ROOT`` (default ``/autograder``) and ``$PYTHON`` (default ``python3``)
    let it run outside Gradescope (tests/labs/test_labs.py runs it so)."""
    target = ".[kernels]" if kernels else "."
    lines = [
        "#!/usr/bin/env bash",
        f"# Gradescope autograder for lab {lab.id} ({lab.title}), built by "
        f"'pagedsim labs autograder {lab.id}'.",
        "# Runs once, as root, when Gradescope builds the image: a virtual environment in",
        "# $ROOT/venv (the system Python refuses pip installs, PEP 668), pagedsim from the",
        "# source copy in this folder and what the lab's graders import, installed in it.",
        "set -euo pipefail",
        'ROOT="${AUTOGRADER_ROOT:-/autograder}"',
        'PYTHON="${PYTHON:-python3}"',
        'VENV="$ROOT/venv"',
        'cd "$ROOT/source"',
        "# Debian and Ubuntu ship venv and ensurepip in a package of their own.",
        'if ! "$PYTHON" -c "import venv, ensurepip" 2>/dev/null; then',
        "    if command -v apt-get >/dev/null; then",
        "        apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
        "python3-venv python3-pip",
        "    fi",
        "fi",
        'if "$PYTHON" -c "import ensurepip" 2>/dev/null; then',
        '    "$PYTHON" -m venv "$VENV"',
        "else  # no ensurepip at all: a venv without pip, then pip bootstrapped into it",
        '    "$PYTHON" -m venv --without-pip "$VENV"',
        '    curl -fsSL https://bootstrap.pypa.io/get-pip.py | "$VENV/bin/python"',
        "fi",
        'PIP=("$VENV/bin/python" -m pip install --no-input --disable-pip-version-check)',
        '"${PIP[@]}" --upgrade pip',
    ]
    if kernels:
        lines.append("# The graders import torch/triton: torch pinned as the project pins it, "
                     "a CPU build (no GPU there).")
        lines.append(f'"${{PIP[@]}}" {shlex.quote(TORCH_PIN)} --index-url {TORCH_CPU_INDEX}')
    lines.append('"${PIP[@]}" ' + " ".join(shlex.quote(r) for r in [target, *requirements]))
    lines += [
        "# The student's code runs as an unprivileged user (pagedsim.labs.sandbox): it may",
        "# not read pagedsim's sources by path (the modules a lab forbids are among them);",
        "# the grader imports them as root before switching user.",
        'PKG=$("$VENV/bin/python" -c "import pagedsim, os; '
        'print(os.path.dirname(pagedsim.__file__))")',
        'chmod -R go-rwx "$PKG" "$ROOT/source"',
        'chmod go+x "$ROOT/source"  # run_autograder stays reachable',
        'chmod go+r "$ROOT/source/run_autograder" "$ROOT/source/setup.sh"',
    ]
    return "\n".join(lines) + "\n"


def run_script(lab: LabInfo) -> str:
    """``run_autograder``: grade the files of one submission into results.json.

    ``$AUTOGRADER_ROOT`` (default ``/autograder``) and ``$PYTHON`` (default setup.sh's
    ``$AUTOGRADER_ROOT/venv/bin/python``) let the script run outside Gradescope too
    (tests/labs/test_labs.py runs it so)."""
    names = " ".join(shlex.quote(n) for n in lab.student_files)
    return f"""#!/usr/bin/env bash
# Gradescope runs this for every submission. The student's files ({', '.join(lab.student_files)})
# are looked up by name anywhere under $ROOT/submission and copied into an empty
# {lab.folder}/ folder; pagedsim grades that folder against the released lab in
# $ROOT/source/labs (which holds no reference solution). A missing file scores 0.
set -uo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
PYTHON="${{PYTHON:-$ROOT/venv/bin/python}}"  # setup.sh's virtual environment
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
        --uploaded "$ROOT/submission" \\
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
