"""What every command module shares: the program name, the exit status for bad input, the
units note, and an ArgumentParser that raises instead of exiting."""

from __future__ import annotations

import argparse

PROG = "pagedsim"
#: Exit status for bad input or usage (argparse's convention).
EXIT_USAGE = 2
UNITS_NOTE = "GB here means GiB: 1 GiB = 2**30 bytes"


class CliError(Exception):
    """A usage error found while parsing the command line (one line, exit status 2)."""


class ArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise :class:`CliError` instead of printing usage and
    exiting, so that :func:`pagedsim.cli.main` reports every error the same way: one line,
    status 2."""

    #: The subcommands' names, filled in by :func:`pagedsim.cli.build_parser`.
    command_names: tuple[str, ...] = ()

    def error(self, message: str) -> None:  # type: ignore[override]
        hint = f"see '{self.prog} --help'"
        raise CliError(f"{message} ({hint})")
