"""Prediction exercises for the notebooks: predict, change the knob, run, compare.

Each exercise is three code cells after its markdown question:

1. a **prediction cell** that binds a name to ``None`` ("not predicted yet"); the student
   writes a number or one of the offered choices there *before* changing anything;
2. a **knob cell**, committed with the knob set away from the value the question asks
   about, so that "run all" does not answer it; the student sets the knob and runs it;
3. a **check cell** that calls :func:`check_number` or :func:`check_choice` with the
   prediction, the value the run produced, the knob's current and asked values, and an
   explanation computed from the run. It prints one line starting ``Verdict:``, then what
   the run gave and why.

The check refuses to judge until both are done: with the knob still at its committed value
it says which value to set, and with no prediction it asks for one, and in neither case does
it show the answer. tests/notebooks/test_notebooks.py runs every exercise with the sample prediction
stored in the prediction cell's metadata (key ``exercise``) and the knob at the asked value,
and requires the verdict the metadata names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

VERDICTS = ("right", "wrong", "no prediction", "knob not set")


@dataclass(slots=True, frozen=True)
class Check:
    """The outcome of one check: ``verdict`` is one of :data:`VERDICTS`; ``text`` is
    Markdown (the verdict line first)."""

    verdict: str
    text: str

    def _repr_markdown_(self) -> str:  # Jupyter renders the check as Markdown
        return self.text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:  # plain-text front ends show the same words
        return self.text


def _knob_gate(knob: tuple[str, object, object]) -> Check | None:
    name, current, asked = knob
    if current != asked:
        return Check("knob not set", f"**Verdict: knob not set.** `{name}` is {current!r}; the "
                     f"question asks about `{name} = {asked!r}`. Set it in the knob cell, run "
                     "that cell, then this one.")
    return None


def _no_prediction(name: str) -> Check:
    return Check("no prediction", f"**Verdict: no prediction.** Write your prediction in "
                 f"`{name}` (the cell under the question) and run it, then this cell.")


def check_number(prediction: float | None, actual: float, *, name: str,
                 knob: tuple[str, object, object], rel_tol: float = 0.1, abs_tol: float = 0.0,
                 unit: str = "", why: str = "") -> Check:
    """Compare a numeric ``prediction`` with the run's ``actual`` value.

    Right when ``|prediction - actual| <= max(rel_tol * |actual|, abs_tol)`` (both in the
    units of ``unit``). ``name`` is the prediction's variable, ``knob`` is
    ``(knob name, its current value, the value the question asks about)``, ``why`` the
    explanation of the run's value, shown whatever the verdict.
    """
    gate = _knob_gate(knob)
    if gate is not None:
        return gate
    if prediction is None:
        return _no_prediction(name)
    if isinstance(prediction, bool) or not isinstance(prediction, int | float):
        raise TypeError(f"{name} must be a number (or None before you predict), "
                        f"got {prediction!r}")
    if math.isnan(prediction):
        raise ValueError(f"{name} is NaN; write a number")
    tol = max(rel_tol * abs(actual), abs_tol)
    diff = prediction - actual
    right = abs(diff) <= tol
    suffix = "" if not unit else unit if unit == "%" else f" {unit}"
    within = "exact" if tol == 0 else f"within {tol:,.3g}{suffix}"
    if right:
        head = (f"**Verdict: right.** You predicted {prediction:,.4g}{suffix}; the run gives "
                f"{actual:,.4g}{suffix} (right means {within}).")
    else:
        rel = f", {abs(diff) / abs(actual):.0%} of the run's value" if actual else ""
        head = (f"**Verdict: wrong.** You predicted {prediction:,.4g}{suffix}; the run gives "
                f"{actual:,.4g}{suffix}: {'too high' if diff > 0 else 'too low'} by "
                f"{abs(diff):,.4g}{suffix}{rel} (right means {within}).")
    return Check("right" if right else "wrong", head + (f"\n\n{why}" if why else ""))


def check_choice(prediction: str | None, actual: str, *, name: str, choices: Sequence[str],
                 knob: tuple[str, object, object], why: str = "") -> Check:
    """Compare a ``prediction`` that is one of ``choices`` with the run's ``actual`` choice.

    ``name``, ``knob`` and ``why`` as in :func:`check_number`.
    """
    gate = _knob_gate(knob)
    if gate is not None:  # the run is not the one asked about: its answer may be no choice
        return gate
    if actual not in choices:
        raise ValueError(f"the run's answer {actual!r} is not one of {list(choices)}")
    if prediction is None:
        return _no_prediction(name)
    if prediction not in choices:
        raise ValueError(f"{name} = {prediction!r}: write one of {list(choices)}")
    right = prediction == actual
    head = (f"**Verdict: {'right' if right else 'wrong'}.** You predicted {prediction!r}; "
            f"the run says {actual!r}.")
    return Check("right" if right else "wrong", head + (f"\n\n{why}" if why else ""))
