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


def test_host_cache_gb_names_the_schemes_that_ignore_it(capsys) -> None:
    """Was: paged and hybrid-prefix-cache ran without a host tier, unsaid, under a title
    saying "host tier 10 GiB"."""
    argv = ["compare", "--num-requests", "5", "--host-cache-gb", "10", "--no-write",
            "--quiet", "--jobs", "1", "--schemes"]
    assert main([*argv, "paged,hybrid-prefix-cache,prefix-cache"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["warning: --host-cache-gb 10 ignored by paged, hybrid-prefix-cache: only "
                   "schemes with a prefix cache (prefix-cache, radix and their variants) "
                   "have a host tier; these run without one"]
    assert main([*argv, "prefix-cache,radix"]) == 0  # every scheme has the tier: no line
    assert capsys.readouterr().err == ""
    assert main(["sweep", "host-cache", "--num-requests", "5", "--values", "1", "--no-write",
                 "--quiet", "--jobs", "1", "--schemes", "paged,radix"]) == 0
    assert "warning: the host-cache sweep's sizes ignored by paged:" in capsys.readouterr().err
    assert main(["sweep", "block-size", "--num-requests", "5", "--values", "16", "--no-write",
                 "--quiet", "--jobs", "1", "--host-cache-gb", "2"]) == 0  # runs paged
    assert "warning: --host-cache-gb 2 ignored by paged:" in capsys.readouterr().err
