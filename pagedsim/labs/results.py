"""What a grader run returns: points per task, and its two printed forms (a table for
people, Gradescope's ``results.json`` for the autograder).

Both forms are the student's by default: they say nothing about the machine that graded
(how the student's process was confined, which user it ran as, where the files lay; a
path is cut to its last part). An instructor sees all of it with ``instructor=True``
(``pagedsim labs grade --instructor``, or ``$PAGEDSIM_LABS_INSTRUCTOR=1``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass

from .meta import LabInfo

#: Characters of the student's printed output shown in the table and in results.json.
SHOWN_OUTPUT_CHARS = 2000
#: Set to 1 to print the instructor's report (as ``--instructor`` does).
INSTRUCTOR_ENV = "PAGEDSIM_LABS_INSTRUCTOR"
#: An absolute path (``/srv/grading/lab3/test_lab3.py``): not after a word, a dot or a
#: slash, so that ``3/4`` and ``MB/s`` are left alone.
_ABSOLUTE_PATH = re.compile(r"(?<![\w./~-])(?:/[\w.@+~-]+)+/?")


#: Characters shown escaped (``\x1b``) in a report: C0 and C1 controls but newline and tab,
#: DEL, and the bidirectional overrides, which reorder what a terminal or a browser shows.
_HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f"
                     "\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """``text`` with every control character but newline and tab written out as an escape
    (``\x1b``, ``\r``, ``\u202e``): the graded code's output and messages reach the
    grader's terminal through a report, and raw escapes there could clear the screen, print a
    fake total and hide the real one. A Windows line end ``\r\n`` stays a line end."""
    text = text.replace("\r\n", "\n")
    return _HIDDEN.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


def instructor_default() -> bool:
    """Whether ``$PAGEDSIM_LABS_INSTRUCTOR`` asks for the instructor's report."""
    return os.environ.get(INSTRUCTOR_ENV, "") not in ("", "0")


def for_students(text: str) -> str:
    """``text`` with every absolute path cut to its last part (a file's name, a folder's):
    where the grading machine keeps its files is nobody's business but its owner's."""
    return _ABSOLUTE_PATH.sub(lambda m: m.group(0).rstrip("/").rsplit("/", 1)[-1], text)


@dataclass(frozen=True, slots=True)
class TaskScore:
    """One task's result: ``score`` of ``points`` = points x passed / tests (0 when no test
    of the task ran); ``output`` says which tests failed and why."""

    marker: str
    title: str
    points: float
    score: float
    passed: int
    tests: int
    output: str

    @property
    def lost_points(self) -> bool:
        return self.score < self.points


@dataclass(frozen=True, slots=True)
class LabResult:
    """One grader run of one lab. ``graded`` says what was graded (``reference``,
    ``mutant NAME``, or the student folder); ``message`` explains a run that scored 0
    without running the graders (a forbidden import, a missing file) or a run pytest
    could not finish; ``errors`` are collection errors; ``duration_s`` is the wall time of
    the whole run in seconds. ``sandbox`` says how the student's process was confined,
    ``output`` holds the first bytes it printed and ``output_bytes`` how many it printed
    in all; ``grader_peak_rss_bytes`` is the peak memory of the process that ran the
    graders."""

    lab: LabInfo
    graded: str
    tasks: tuple[TaskScore, ...]
    message: str = ""
    errors: tuple[str, ...] = ()
    duration_s: float = 0.0
    sandbox: tuple[str, ...] = ()
    output: str = ""
    output_bytes: int = 0
    grader_peak_rss_bytes: int = 0

    @property
    def score(self) -> float:
        return sum(t.score for t in self.tasks)

    @property
    def max_score(self) -> float:
        return sum(t.points for t in self.tasks)

    @property
    def full_marks(self) -> bool:
        return all(not t.lost_points for t in self.tasks)

    def task(self, marker: str) -> TaskScore:
        """The score of the task with this marker (error lists the valid markers)."""
        for task in self.tasks:
            if task.marker == marker:
                return task
        raise KeyError(f"no task {marker!r}; valid: {', '.join(t.marker for t in self.tasks)}")

    def scores(self) -> dict[str, float]:
        """Task marker -> points scored."""
        return {t.marker: t.score for t in self.tasks}

    def to_gradescope(self, instructor: bool = False) -> dict:
        """Gradescope's ``results.json``: ``score``, a top-level ``output`` and one entry per
        task with ``name`` (``lab1_1: title``), ``score``, ``max_score`` and ``output``.
        A student's (the default) names no path of the grading machine; an instructor's
        also says how the student's process was confined."""
        show = _shown(instructor)
        return {
            "score": _round(self.score),
            "output": self._summary(instructor),
            "tests": [{"name": show(f"{t.marker}: {t.title}"), "score": _round(t.score),
                       "max_score": _round(t.points), "output": show(t.output)}
                      for t in self.tasks],
        }

    def _summary(self, instructor: bool = False) -> str:
        lines = [f"lab {self.lab.id} ({self.lab.title}): {_fmt(self.score)} of "
                 f"{_fmt(self.max_score)} points"]
        if self.message:
            lines.append(self.message)
        lines += self.errors
        lines += self._printed()
        if instructor:
            lines += self._confinement()
        return _shown(instructor)("\n".join(lines))

    def _confinement(self) -> list[str]:
        """How the student's process was confined (the instructor's report only: it names
        the grading machine's users, paths and kernel features)."""
        if not self.sandbox:
            return []
        return ["the graded code ran in a process of its own: " + "; ".join(self.sandbox)]

    def _printed(self) -> list[str]:
        """What the student's code printed: how much, and its start (cut, and said so)."""
        if not self.output_bytes:
            return []
        shown = self.output[:SHOWN_OUTPUT_CHARS]
        cut = len(shown.encode("utf-8", errors="replace")) < self.output_bytes
        head = f"your code printed {self.output_bytes:,} bytes" + (
            f"; the first {len(shown):,} characters (the rest was cut):" if cut else ":")
        return [head, shown.rstrip("\n")]

    def table(self, instructor: bool = False) -> str:
        """A per-task points table, then why points were lost. A student's (the default)
        names no path, user or confinement of the grading machine; an instructor's ends
        with how the student's process was confined."""
        head = f"lab {self.lab.id}: {self.lab.title} (graded: {self.graded})"
        rows = [("task", "title", "points", "tests passed")]
        rows += [(t.marker, t.title, f"{_fmt(t.score)}/{_fmt(t.points)}",
                  f"{t.passed}/{t.tests}") for t in self.tasks]
        rows.append(("total", "", f"{_fmt(self.score)}/{_fmt(self.max_score)}",
                     f"{sum(t.passed for t in self.tasks)}/{sum(t.tests for t in self.tasks)}"))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = [head, ""]
        for i, row in enumerate(rows):
            if i == len(rows) - 1:
                lines.append("  ".join("-" * w for w in widths))
            cells = zip(row, widths, strict=True)
            lines.append("  ".join(c.ljust(w) if j < 2 else c.rjust(w)
                                   for j, (c, w) in enumerate(cells)).rstrip())
        notes = ([self.message] if self.message else []) + list(self.errors) + self._printed()
        if not self.errors and not self.message:  # else every task says "see above"
            notes += [f"{t.marker}: {t.output}" for t in self.tasks
                      if t.lost_points and t.output]
        if notes:
            lines += ["", *notes]
        if instructor and self.sandbox:
            lines += ["", *self._confinement()]
        lines.append(f"\n({self.duration_s:.1f} s)")
        return _shown(instructor)("\n".join(lines))


def _shown(instructor: bool) -> Callable[[str], str]:
    """What a report's text goes through: :func:`visible` for everyone (the student's text
    in it may hold terminal escapes), after :func:`for_students` for a student (first, so
    that an escape written out cannot hide the path that follows it)."""
    return visible if instructor else (lambda text: visible(for_students(text)))


def _round(x: float) -> float:
    """Points to 4 decimals (a third of a task's points prints as 3.3333, not 3.333333...)."""
    return round(float(x), 4)


def _fmt(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")
