"""What every command module shares: the program name, the exit status for bad input, the
units note, and an ArgumentParser that raises instead of exiting."""

from __future__ import annotations

import argparse
import re

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
    #: The subcommands' parsers by name, filled in by :func:`pagedsim.cli.build_parser`.
    command_parsers: dict[str, argparse.ArgumentParser] = {}

    def error(self, message: str) -> None:  # type: ignore[override]
        hint = f"see '{self.prog} --help'"
        raise CliError(f"{message} ({hint})")


def name_the_flag(message: str, parser: argparse.ArgumentParser) -> str:
    """Prefix a library error with the flag it is about, as argparse does its own.

    The library names parameters, not flags (``block_size must be >= 1, got 0``,
    ``unknown preemption 'pause'; ...``); each of ``parser``'s options stores into a
    parameter of the same name (``--block-size`` -> ``block_size``), so a message that
    starts with one is reported as ``argument --block-size: block_size must be ...``.
    Messages about no single option come back unchanged.
    """
    if message.startswith("argument "):
        return message
    match = re.match(r"(?:unknown )?([a-z_]+)\b", message)
    if match is None:
        return message
    for action in parser._actions:  # argparse keeps no public list of a parser's options
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs and action.dest == match.group(1):
            return f"argument {longs[0]}: {message}"
    return message
