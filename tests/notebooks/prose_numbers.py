"""Numbers typed into a notebook's prose, checked against what its run computes.

A sentence that quotes a figure ("the internal share falls from 61.7% to 47.9%") stays true
only while the run still produces that figure. :func:`unconfirmed` lists the numbers typed
into an executed notebook's markdown cells, and into the literal text of its exercise
check cells' explanations, that no cell of the run prints (allowing for rounding to the
digits typed) and that the notebook's allow-list does not name with a reason.

What counts as a typed number, and what is left out on purpose:

* left out: text inside ``code spans``, fenced code and ``$math$`` (knob values and
  formulas, not claims about a run); links' targets; heading numbers (``## 3. ...``);
  numbers glued to a name (``Llama-2-7B``, ``H100``, ``fp8``, ``§6.3``) or following
  ``notebook``, ``lab``, ``section``, ``Figure``, ``Table``, ``step`` and the like (they
  name things, they do not measure them); whole numbers below 10 (counts like "two
  blocks" written as digits are everywhere and match any run by chance);
* kept: every other number, with its thousands separators (``9,700``) and decimals.

A typed number is confirmed when some printed number, rounded to the typed number's
decimals, equals it (for a percentage, the printed number may also be the fraction).
Numbers the notebook's own code sets (literals in code cells, such as a 4,096-token
context) confirm a typed number too, unless the typed number is a result by its form:
followed by ``%``, ``x``/``×`` or ``times``, which only a printed number confirms.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

# A number as typed in prose: 9,700 / 61.7 / 0.25 / 131,072.
_NUMBER = re.compile(r"(?<![\w.,§-])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?![\w,]*\d)")
# Words after which a number names a thing (notebook 03, Figure 2, step 40) rather than
# measuring it.
_NAMING = re.compile(
    r"(?:notebooks?|labs?|sections?|cells?|Figures?|Fig\.|Tables?|steps?|§|tasks?|weeks?|"
    r"exercises?|parts?|Try it|chapters?|version|v|Python|items?|issues?)\s*$",
    re.IGNORECASE)
_RESULT_AFTER = re.compile(r"^\s*(?:%|x\b|×|times\b)")
_STRIP = [
    re.compile(r"```.*?```", re.DOTALL),  # fenced code
    re.compile(r"`[^`]*`"),  # code spans: knob values, names
    re.compile(r"\$\$.*?\$\$", re.DOTALL),  # display math
    re.compile(r"\$[^$\n]*\$"),  # inline math
    re.compile(r"\]\([^)]*\)"),  # a link's target
    re.compile(r"<[^>\n]*>"),  # html tags
    re.compile(r"^#+\s*[\d.]+", re.MULTILINE),  # a heading's number
]
SMALL_WHOLE_BELOW = 10


@dataclass(slots=True, frozen=True)
class Typed:
    """One number typed into prose: its value, decimals typed, whether its form makes it a
    result of the run (a percentage, a ratio) and a percentage, the text around it for the
    message, and where it is."""

    value: float
    decimals: int
    is_result: bool
    is_percent: bool
    where: str
    span: tuple[int, int]  # its characters in the text it was read from


def _blank(match: re.Match[str]) -> str:
    return " " * len(match.group(0))


def typed_numbers(text: str) -> list[Typed]:
    """The numbers of ``text`` (markdown) that claim something about a run (see module)."""
    for pattern in _STRIP:
        text = pattern.sub(_blank, text)
    found = []
    for m in _NUMBER.finditer(text):
        whole, frac = m.group(1), m.group(2) or ""
        value = float(whole.replace(",", "") + frac)
        if not frac and value < SMALL_WHOLE_BELOW:
            continue
        if _NAMING.search(text[max(0, m.start() - 20):m.start()]):
            continue
        if not frac and "," not in whole and 1900 <= value <= 2099:
            continue  # a year
        after = text[m.end():m.end() + 8]
        where = " ".join(text[max(0, m.start() - 40):m.end() + 25].split())
        found.append(Typed(value, len(frac) - 1 if frac else 0,
                           bool(_RESULT_AFTER.match(after)), after.lstrip().startswith("%"),
                           where, m.span()))
    return found


def printed_numbers(text: str) -> set[float]:
    """Every number printed in ``text`` (outputs: plain text, markdown, html tables)."""
    values = set()
    for m in re.finditer(r"-?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?:[eE]([+-]?\d+))?", text):
        raw = m.group(0).replace(",", "")
        try:
            values.add(abs(float(raw)))
        except ValueError:  # pragma: no cover - the pattern only matches numbers
            continue
    return values


def code_literals(source: str) -> set[float]:
    """The numeric literals of a code cell (what the notebook sets, not what it computes)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython magics: fall back to the text
        return printed_numbers(source)
    return {abs(float(node.value)) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, int | float)
            and not isinstance(node.value, bool)}


def string_fragments(source: str) -> list[str]:
    """The literal text of a code cell's strings and f-strings (not their ``{}`` fields)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def matches(typed: Typed, pool: set[float]) -> bool:
    """Whether some number of ``pool``, rounded to ``typed``'s decimals, is ``typed``."""
    target = round(typed.value, typed.decimals)
    tol = 0.5 * 10 ** -typed.decimals + 1e-9
    scales = (1, 100) if typed.is_percent else (1,)  # 0.617 printed, 61.7% typed
    return any(abs(y * k - target) <= tol for y in pool for k in scales)


def output_text(cell) -> str:
    """Everything a code cell printed or displayed, as text."""
    parts = []
    for out in cell.get("outputs", []):
        parts.append(out.get("text", ""))
        for value in out.get("data", {}).values():
            parts.append(value if isinstance(value, str) else "")
        parts.extend(out.get("traceback", []))
    return "\n".join(parts)


@dataclass(slots=True, frozen=True)
class Unconfirmed:
    """A typed number no run output confirms: the cell it is in and the number."""

    cell: int
    typed: Typed

    def __str__(self) -> str:
        kind = "a result" if self.typed.is_result else "a number"
        return f"cell {self.cell}: {kind} {self.typed.value:g} in '... {self.typed.where} ...'"


def run_numbers(nb, check_cells: set[int]) -> tuple[set[float], set[float]]:
    """(printed, set in code): the numbers executed notebook ``nb``'s cells printed, with
    the literal text of the check cells ``check_cells`` cut out of the outputs first (so a
    number typed into an explanation cannot confirm itself), and its code's literals."""
    own_words = sorted((frag for i in check_cells for frag in string_fragments(nb.cells[i].source)
                        if len(frag.strip()) >= 4), key=len, reverse=True)
    printed: set[float] = set()
    literals: set[float] = set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        text = output_text(cell)
        for frag in own_words:
            text = text.replace(frag, " | ")
        printed |= printed_numbers(text)
        literals |= code_literals(cell.source)
    return printed, literals


def prose_numbers(nb, check_cells: set[int]) -> list[tuple[int, Typed]]:
    """(cell index, number) of every number typed into ``nb``'s markdown cells and into the
    literal text of its check cells ``check_cells``."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            found.extend((i, typed) for typed in typed_numbers(cell.source))
        elif i in check_cells:
            found.extend((i, typed) for frag in string_fragments(cell.source)
                         for typed in typed_numbers(frag))
    return found


def confirmed(typed: Typed, printed: set[float], literals: set[float]) -> bool:
    """Whether the run confirms ``typed``: printed, or (not a result by its form) set in code."""
    return matches(typed, printed) or (not typed.is_result and matches(typed, literals))


def unconfirmed(nb, check_cells: set[int], allowed: dict[float, str]) -> list[Unconfirmed]:
    """The typed numbers of executed notebook ``nb`` that its run does not confirm.

    ``check_cells`` are the indices of the exercise check cells (their explanations'
    literal text is prose too); ``allowed`` maps a number to the reason it may stand
    unprinted (a paper's figure, a hardware constant, a knob value to try).
    """
    printed, literals = run_numbers(nb, check_cells)
    return [Unconfirmed(i, typed) for i, typed in prose_numbers(nb, check_cells)
            if typed.value not in allowed and not confirmed(typed, printed, literals)]
