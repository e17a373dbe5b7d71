"""Fixtures of the CLI tests."""

from __future__ import annotations

import pytest

from pagedsim.experiments import runner as runner_module


@pytest.fixture
def no_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any simulation started in this process fails the test (errors must come first)."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a simulation started before the bad input was reported")

    monkeypatch.setattr(runner_module, "run_scheme", refuse)
