"""Shared helpers for the experiment tests (tests/experiments/test_*.py): a command that
must be refused as bad input.

Not a conftest: the project's tests/conftest.py registers the hypothesis profiles.
"""

from __future__ import annotations

import pytest

from pagedsim.cli import main


def one_error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run ``argv``: status 2, nothing on stdout, one error line (returned)."""
    status = main(argv)
    captured = capsys.readouterr()
    assert status == 2 and captured.out == "", captured
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], captured.err
    return err[0]
