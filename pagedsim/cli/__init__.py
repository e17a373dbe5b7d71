"""pagedsim's command line: ``pagedsim <command> [options]`` (or ``python -m pagedsim``).

Commands:

- ``budget``  the KV-cache memory budget of one model on one or more GPUs (vLLM's start-up
  arithmetic): bytes per token, bytes per sequence, the pool, its blocks and token slots;
  ``--preset paper-opt-13b`` is the vLLM paper's setting, which ``compare`` runs.
- ``models``  the model presets (``pagedsim.MODELS``).
- ``gpus``    the GPU presets (``pagedsim.GPUS``).
- ``schemes`` the registered allocation schemes (``pagedsim.memory.schemes.SCHEMES``).
- ``compare`` one workload through every scheme: shares of the KV pool, batch size,
  throughput, beside the vLLM paper's Figure 2 / Figure 13 (:mod:`pagedsim.experiments`).
- ``sweep``   block size, request rate, n / beam width, swap vs recompute (``pagedsim sweep
  NAME --help``: one sweep's own defaults).
- ``figures`` regenerate every committed figure under ``figures/``.
- ``cache-replay`` prefix-cache hit rate of a trace against capacity (Mooncake's Figure 9).
- ``calibrate`` fit the step-time constants to ``benchmark_serving`` result files, for
  ``--cost-profile FILE`` (:mod:`pagedsim.experiments.calibrate`).
- ``labs``    the graded classroom labs: list, release, grade, autograder (:mod:`pagedsim.labs`).

Units: every "GB" in a flag or in the output is a binary gigabyte, 1 GiB = 2**30 bytes
(as ``nvidia-smi`` and the vLLM paper's arithmetic count; see :mod:`pagedsim.units`).

One module per group of commands: :mod:`~pagedsim.cli.presets` (budget, models, gpus),
:mod:`~pagedsim.cli.schemes` (schemes), :mod:`~pagedsim.cli.simulate` (compare, figures),
:mod:`~pagedsim.cli.sweep` (sweep) and the options those share
(:mod:`~pagedsim.cli.experiment_options`; vLLM's engine and benchmark_serving's load
flags in :mod:`~pagedsim.cli.engine_options`), :mod:`~pagedsim.cli.cache` (cache-replay);
argument types in
:mod:`~pagedsim.cli.argtypes`. Adding a command (keep the modules light: import heavy
things inside ``run_<cmd>``, since ``import pagedsim.cli`` must never pull in torch, triton
or matplotlib):

1. write ``add_<cmd>(subparsers)``: it calls ``subparsers.add_parser("<cmd>", ...)``, adds
   the options, and ends with ``parser.set_defaults(run=run_<cmd>)``;
2. write ``run_<cmd>(args) -> int``: it does the work, prints, and returns the exit status;
   bad input raises ``ValueError``/``TypeError`` (or a :class:`pagedsim.PagedSimError`),
   which :func:`main` turns into one line ``pagedsim: error: <message>`` and exit status 2;
3. append ``add_<cmd>`` to :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from .. import __version__
from ..errors import PagedSimError
from .base import EXIT_USAGE, PROG, UNITS_NOTE, ArgumentParser, CliError, name_the_flag
from .cache import add_cache_replay
from .calibrate import add_calibrate
from .labs import add_labs
from .presets import add_budget, add_gpus, add_models
from .schemes import add_schemes
from .simulate import add_compare, add_figures
from .sweep import add_sweep

__all__ = ["COMMANDS", "EXIT_USAGE", "PROG", "UNITS_NOTE", "CliError", "build_parser", "main"]

#: One ``add_<cmd>`` per command, in the order ``--help`` lists them.
COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    add_budget,
    add_models,
    add_gpus,
    add_schemes,
    add_compare,
    add_sweep,
    add_figures,
    add_cache_replay,
    add_calibrate,
    add_labs,
]


def build_parser() -> ArgumentParser:
    """The top-level parser with every command in :data:`COMMANDS`."""
    parser = ArgumentParser(
        prog=PROG,
        description="KV-cache memory in LLM serving: contiguous versus paged (PagedAttention). "
                    + UNITS_NOTE + ".",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in COMMANDS:
        add(subparsers)
    parser.command_names = tuple(subparsers.choices)
    parser.command_parsers = dict(subparsers.choices)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit status (0 ok, 2 bad input or usage).

    Every error a user can cause (bad flags, bad values, unknown presets, a model that does
    not fit, an unreadable file) is reported as exactly one line ``pagedsim: error: ...``
    on stderr, without a traceback.
    """
    parser = build_parser()
    command = None
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help and --version print and exit 0
            return exc.code if isinstance(exc.code, int) else 0
        if args.command is None:
            choices = ", ".join(parser.command_names)
            raise CliError(f"missing command, choose one of: {choices} (see '{PROG} --help')")
        command = parser.command_parsers[args.command]
        return int(args.run(args))
    except BrokenPipeError:
        # The reader went away (``pagedsim schemes | head -1``): stop quietly, as other
        # command-line tools do, instead of reporting an error it did not make.
        _silence_stdout()
        return 1
    except (CliError, ValueError, TypeError, PagedSimError, OSError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        if command is not None and not isinstance(exc, CliError):
            message = name_the_flag(message, command)
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush of what is still
    buffered does not hit the closed pipe again (Python's documented recipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is no real file (tests)
        pass
