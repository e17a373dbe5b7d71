"""The release step: the student version of the labs.

``release(OUT)`` writes ``OUT/README.md`` (the labs index) and, for every lab, a folder
``OUT/lab<N>_<slug>/`` with everything of the lab folder except ``mutants.py``, the
student files' solution regions replaced by TODOs that raise ``NotImplementedError``
(:mod:`pagedsim.labs.regions`). Every lab is checked and stripped in memory first, so a bad
lab leaves ``OUT`` untouched.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .grading import IGNORED
from .meta import LabError, LabInfo, find_labs_dir, list_labs
from .pysource import parse
from .regions import RegionError, parse_regions, strip_regions

#: The text no released file may hold (it would mean a solution leaked).
LEAK = "BEGIN SOLUTION"


def stripped_files(lab: LabInfo) -> dict[str, str]:
    """Student file name -> its released text, after checking the lab's regions: each has a
    task id of this lab, every task has at least one region, no other released file holds
    a marker, and the stripped files still parse."""
    released: dict[str, str] = {}
    covered: set[str] = set()
    for name in lab.student_files:
        where = f"{lab.folder}/{name}"
        source = (lab.path / name).read_text(encoding="utf-8")
        covered |= {r.marker for r in parse_regions(source, where, lab.markers)}
        text = strip_regions(source, where, lab.markers)
        try:
            parse(text, filename=where)
        except SyntaxError as exc:
            raise RegionError(f"{where}:{exc.lineno}: the released file does not parse "
                              f"({exc.msg}); a region must hold whole statements") from None
        released[name] = text
    uncovered = [t.task_id for t in lab.tasks if t.marker not in covered]
    if uncovered:
        raise RegionError(f"{lab.folder}: task(s) {', '.join(uncovered)} have no solution "
                          "region in the student files; every task needs at least one")
    for path in _released_others(lab):
        text = path.read_text(encoding="utf-8", errors="replace")
        if LEAK in text:
            line = text[:text.index(LEAK)].count("\n") + 1
            raise RegionError(f"{lab.folder}/{path.relative_to(lab.path)}:{line}: solution "
                              "markers belong in the student files only")
    return released


def _released_others(lab: LabInfo) -> list[Path]:
    """The lab's files other than the student files that the release copies."""
    skip = set(lab.student_files)
    out = []
    for path in sorted(lab.path.rglob("*")):
        rel = path.relative_to(lab.path)
        if path.is_file() and rel.as_posix() not in skip and not any(
                rel.match(p) or any(part == p for part in rel.parts) for p in IGNORED):
            out.append(path)
    return out


def release_lab(lab: LabInfo, dest: Path) -> None:
    """Write ``lab``'s student version into the new folder ``dest``."""
    released = stripped_files(lab)
    shutil.copytree(lab.path, dest, ignore=shutil.ignore_patterns(*IGNORED))
    for name, text in released.items():
        (dest / name).write_text(text, encoding="utf-8")


def parse_lab_ids(spec: str, valid: list[int]) -> list[int]:
    """``"4"``, ``"1-3"``, ``"1,4-5"``: the lab ids named, in order, each once. A
    :class:`LabError` line names the spec, its bad part and the valid ids."""
    ids: list[int] = []
    shown = ", ".join(map(str, valid))
    for part in spec.split(","):
        first, dash, last = part.strip().partition("-")
        try:
            lo, hi = int(first), int(last) if dash else int(first)
        except ValueError:
            raise LabError(f"{spec!r}: {part.strip()!r} is no lab id or range such as 4 or "
                           f"1-3; valid ids: {shown}") from None
        if lo > hi:
            raise LabError(f"{spec!r}: the range {part.strip()!r} runs backwards")
        # The first id of the range that is no lab, found within len(valid) + 1 steps: a
        # range of 10**12 ids is never walked whole.
        unknown = next((i for i in range(lo, hi + 1) if i not in valid), None)
        if unknown is not None:
            raise LabError(f"{spec!r}: no lab {unknown}; valid ids: {shown}")
        ids += [i for i in range(lo, hi + 1) if i not in ids]
    return ids


def release(out_dir: Path | str, force: bool = False, labs_dir: Path | None = None,
            lab_ids: list[int] | None = None) -> list[LabInfo]:
    """Write the student version of every lab (or of those in ``lab_ids``) under
    ``out_dir``; return the labs written.

    ``out_dir`` must not exist or be empty, unless ``force``: then the lab folders and
    ``README.md`` it would write are replaced and anything else there is left alone (so
    that a lab released later, ``--lab 4``, joins the earlier ones).
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise LabError(f"output {str(out)!r} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise LabError(f"output folder {str(out)!r} is not empty; pass --force to replace the "
                       "labs in it")
    labs_dir = find_labs_dir() if labs_dir is None else Path(labs_dir)
    labs = list_labs(labs_dir)
    if not labs:
        raise LabError(f"no labs found in {labs_dir}")
    if lab_ids is not None:
        unknown = [i for i in lab_ids if i not in [lab.id for lab in labs]]
        if unknown:
            raise LabError(f"no lab {unknown[0]}; valid ids: "
                           f"{', '.join(str(lab.id) for lab in labs)}")
        labs = [lab for lab in labs if lab.id in lab_ids]
    for lab in labs:  # check everything before writing anything
        stripped_files(lab)
    if labs_dir.resolve() == out.resolve() or labs_dir.resolve() in out.resolve().parents:
        raise LabError(f"output {str(out)!r} is inside the labs folder {labs_dir}")
    out.mkdir(parents=True, exist_ok=True)
    index = labs_dir / "README.md"
    if index.is_file():
        shutil.copyfile(index, out / "README.md")
    for lab in labs:
        dest = out / lab.folder
        if dest.exists():
            shutil.rmtree(dest)
        release_lab(lab, dest)
    return labs
