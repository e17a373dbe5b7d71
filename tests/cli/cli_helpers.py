"""What the CLI tests share: the check that a bad input gives exactly one error line (the
fixture that fails any run started before it is in ``conftest.py``)."""

from __future__ import annotations

import pytest

from pagedsim.cli import main


def error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run ``argv``; assert status 2, nothing on stdout, one error line; return it."""
    status = main(argv)
    captured = capsys.readouterr()
    assert status == 2, captured
    assert captured.out == ""
    assert "Traceback" not in captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("pagedsim: error: ")
    return lines[0]
