"""notebooks/predict.py: the checks behind the notebooks' prediction exercises.

A check must not reveal the answer before the student has predicted and set the knob,
must call a prediction right exactly when it is within the tolerance, and must refuse a
prediction it cannot judge with a line that names it.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

_PATH = Path(__file__).resolve().parents[2] / "notebooks" / "predict.py"
_spec = importlib.util.spec_from_file_location("notebook_predict", _PATH)
predict = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = predict  # dataclasses look their module up there
_spec.loader.exec_module(predict)

KNOB_SET = ("kv_heads", 8, 8)
finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False)


def test_knob_not_set_hides_the_answer():
    c = predict.check_number(64, 1234.5, name="p", knob=("kv_heads", 32, 8), why="because")
    assert c.verdict == "knob not set"
    assert "kv_heads = 8" in c.text and "1,234" not in c.text and "because" not in c.text


def test_no_prediction_hides_the_answer():
    c = predict.check_number(None, 1234.5, name="p_kib", knob=KNOB_SET, why="because")
    assert c.verdict == "no prediction" and "p_kib" in c.text
    assert "1,234" not in c.text and "because" not in c.text
    c = predict.check_choice(None, "more", name="p", choices=("more", "less"), knob=KNOB_SET)
    assert c.verdict == "no prediction"


def test_number_right_and_wrong_say_by_how_much():
    right = predict.check_number(66, 64, name="p", knob=KNOB_SET, rel_tol=0.05, unit="KiB",
                                 why="why text")
    assert right.verdict == "right" and "Verdict: right." in right.text
    assert "why text" in right.text and "64 KiB" in right.text
    wrong = predict.check_number(128, 64, name="p", knob=KNOB_SET, rel_tol=0.05, unit="KiB")
    assert wrong.verdict == "wrong" and "too high by 64 KiB" in wrong.text
    assert "100%" in wrong.text
    low = predict.check_number(10, 64, name="p", knob=KNOB_SET, abs_tol=2)
    assert low.verdict == "wrong" and "too low" in low.text


@given(actual=finite, frac=st.floats(min_value=0, max_value=0.099))
def test_within_tolerance_is_right(actual, frac):
    pred = actual * (1 + frac)
    assert predict.check_number(pred, actual, name="p", knob=KNOB_SET).verdict == "right"


@given(actual=finite.filter(lambda a: abs(a) > 1e-6), frac=st.floats(min_value=0.11, max_value=10))
def test_outside_tolerance_is_wrong(actual, frac):
    pred = actual * (1 + frac)
    assert predict.check_number(pred, actual, name="p", knob=KNOB_SET).verdict == "wrong"


def test_choice_right_and_wrong():
    kw = dict(name="p", choices=("more", "less", "same"), knob=KNOB_SET, why="w")
    assert predict.check_choice("more", "more", **kw).verdict == "right"
    wrong = predict.check_choice("less", "more", **kw)
    assert wrong.verdict == "wrong" and "'more'" in wrong.text and "w" in wrong.text


@pytest.mark.parametrize("bad", ["64", True, [64]])
def test_number_refuses_a_non_number(bad):
    with pytest.raises(TypeError, match="p must be a number"):
        predict.check_number(bad, 64, name="p", knob=KNOB_SET)


def test_number_refuses_nan():
    with pytest.raises(ValueError, match="NaN"):
        predict.check_number(math.nan, 64, name="p", knob=KNOB_SET)


def test_choice_refuses_an_unknown_choice():
    with pytest.raises(ValueError, match=r"p = 'maybe': write one of \['more', 'less'\]"):
        predict.check_choice("maybe", "more", name="p", choices=("more", "less"), knob=KNOB_SET)
    with pytest.raises(ValueError, match="not one of"):
        predict.check_choice("more", "other", name="p", choices=("more", "less"), knob=KNOB_SET)


def test_knob_not_set_judges_no_answer_at_all():
    # A run at the committed knob may give an answer that is none of the choices.
    c = predict.check_choice("more", "4, 5, 6, 7", name="p", choices=("more", "less"),
                             knob=("kv_heads", 2, 4))
    assert c.verdict == "knob not set"


def test_markdown_display():
    c = predict.check_number(1, 1, name="p", knob=KNOB_SET)
    assert c._repr_markdown_() == c.text == str(c)
