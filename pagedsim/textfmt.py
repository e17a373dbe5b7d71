"""Plain-text formatting shared by the command line and the experiment reports.

Kept free of heavy imports (no pandas, no matplotlib): ``pagedsim budget`` and
``pagedsim models`` use it, and so do the tables under ``figures/``.
"""

from __future__ import annotations

from collections.abc import Sequence


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned, two
    spaces between columns, a rule of dashes under the header, no trailing spaces."""
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        rest = [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        parts = [row[0].ljust(widths[0]), *rest]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule] + [line(r) for r in cells[1:]])
