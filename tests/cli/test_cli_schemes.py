"""``pagedsim schemes``: one line per registered scheme (name, description), or JSON."""

from __future__ import annotations

import json

import pytest

from pagedsim.cli import main
from pagedsim.experiments import check_schemes
from pagedsim.memory.schemes import DEFAULT_SCHEMES, SCHEMES, available


def test_text_lists_every_scheme_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schemes"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    lines = captured.out.splitlines()
    assert len(lines) == len(SCHEMES) > 0
    for line, name in zip(lines, available(), strict=True):
        first, _, rest = line.partition("  ")
        assert first == name
        assert SCHEMES[name].description in rest
        assert rest.endswith("[compare default]") == (name in DEFAULT_SCHEMES)


def test_json_names_and_descriptions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schemes", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert isinstance(rows, list)
    assert [r["name"] for r in rows] == available()
    for row in rows:
        scheme = SCHEMES[row["name"]]
        assert row["description"] == scheme.description
        assert row["family"] == scheme.family and row["view"] == scheme.view
        assert row["paper_key"] == scheme.paper_key
        assert row["default"] == (row["name"] in DEFAULT_SCHEMES)
    assert sum(r["default"] for r in rows) == len(DEFAULT_SCHEMES)


def test_every_listed_scheme_is_accepted_by_compare() -> None:
    assert check_schemes(available()) == tuple(available())
