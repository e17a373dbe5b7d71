"""Solution regions in a lab's student files (nbgrader style), and stripping them.

A region is a run of lines opened by ``# BEGIN SOLUTION lab N.k: what to do`` and closed by
``# END SOLUTION``, at any indentation. The release step replaces the whole region (both
marker lines included) by two lines at the BEGIN line's indentation::

    # TODO lab N.k: what to do
    raise NotImplementedError("lab N.k: what to do")

Rules (each broken rule is one :class:`RegionError` line naming the file and the line):
every BEGIN carries a task id ``lab N.k`` of a task the lab has, regions do not nest, every
BEGIN has its END, and every marker line is spelled exactly so (a misspelled marker
would otherwise leak the solution into the release).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .meta import LabError

_BEGIN = re.compile(r"^(?P<indent>[ \t]*)# BEGIN SOLUTION"
                    r"(?:[ \t]+(?P<id>lab[ \t]+(?P<lab>[0-9]+)\.(?P<task>[0-9]+)))?"
                    r"(?P<rest>.*)$")
_END = re.compile(r"^[ \t]*# END SOLUTION[ \t]*$")
# A comment that looks like a marker, spelled in any way: checked against the two above.
_LOOSE = re.compile(r"#.*\b(BEGIN|END)[ _]*SOLUTION\b", re.IGNORECASE)


class RegionError(LabError):
    """A malformed solution region (one line: ``file:line: what is wrong``)."""


@dataclass(frozen=True, slots=True)
class Region:
    """One solution region: its task id (``lab 1.2``), its marker (``lab1_2``), the hint
    text after the colon, the BEGIN and END line numbers (1-based) and the indentation."""

    task_id: str
    marker: str
    text: str
    begin: int
    end: int
    indent: str

    @property
    def message(self) -> str:
        """``lab 1.2: text``, or ``lab 1.2`` without text: the TODO and the error message."""
        return f"{self.task_id}: {self.text}" if self.text else self.task_id


def parse_regions(source: str, filename: str = "<string>",
                  markers: tuple[str, ...] | None = None) -> list[Region]:
    """The solution regions of ``source``, in order. ``markers`` (``lab1_1`` ...), when
    given, are the task markers the ids must name. Raises :class:`RegionError`."""
    regions: list[Region] = []
    open_at: tuple[int, re.Match[str]] | None = None
    for number, line in enumerate(source.splitlines(), start=1):
        where = f"{filename}:{number}"
        begin, end = _BEGIN.match(line), _END.match(line)
        if begin is None and end is None:
            if _LOOSE.search(line):
                raise RegionError(f"{where}: malformed solution marker {line.strip()!r}; write "
                                  "'# BEGIN SOLUTION lab N.k: hint' or '# END SOLUTION' "
                                  "alone on a line")
            continue
        if begin is not None:
            if open_at is not None:
                raise RegionError(f"{where}: BEGIN SOLUTION inside the region opened at line "
                                  f"{open_at[0]} (regions may not nest)")
            _check_id(begin, where, markers)
            open_at = (number, begin)
            continue
        if open_at is None:
            raise RegionError(f"{where}: END SOLUTION without a BEGIN SOLUTION before it")
        start, match = open_at
        text = match["rest"].strip()
        text = text[1:].strip() if text.startswith(":") else text
        regions.append(Region(task_id=f"lab {int(match['lab'])}.{int(match['task'])}",
                              marker=f"lab{int(match['lab'])}_{int(match['task'])}",
                              text=text, begin=start, end=number, indent=match["indent"]))
        open_at = None
    if open_at is not None:
        raise RegionError(f"{filename}:{open_at[0]}: BEGIN SOLUTION {open_at[1]['id']} is never "
                          "closed by an END SOLUTION line")
    return regions


def _check_id(begin: re.Match[str], where: str, markers: tuple[str, ...] | None) -> None:
    rest = begin["rest"].strip()
    if begin["id"] is None or (rest and not rest.startswith(":")):
        raise RegionError(f"{where}: BEGIN SOLUTION needs a task id, as in "
                          "'# BEGIN SOLUTION lab 1.2: hint'")
    marker = f"lab{int(begin['lab'])}_{int(begin['task'])}"
    if markers is not None and marker not in markers:
        valid = ", ".join(m.replace("lab", "lab ", 1).replace("_", ".") for m in markers)
        raise RegionError(f"{where}: unknown task id {begin['id']!r}; valid: {valid}")


def strip_regions(source: str, filename: str = "<string>",
                  markers: tuple[str, ...] | None = None) -> str:
    """``source`` with each region replaced by its TODO comment and a
    ``raise NotImplementedError(...)`` at the BEGIN line's indentation."""
    regions = parse_regions(source, filename, markers)
    lines = source.splitlines(keepends=True)
    out: list[str] = []
    index = 0
    for region in regions:
        out.extend(lines[index:region.begin - 1])
        # json.dumps writes a valid Python string literal in double quotes (its escapes
        # \" \\ \n \uXXXX are Python's too), whatever the hint text holds.
        out.append(f"{region.indent}# TODO {region.message}\n")
        out.append(f"{region.indent}raise NotImplementedError("
                   f"{json.dumps(region.message, ensure_ascii=False)})\n")
        index = region.end
    out.extend(lines[index:])
    return "".join(out)
