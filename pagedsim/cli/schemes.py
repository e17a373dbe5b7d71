"""``pagedsim schemes``: the registered allocation schemes
(:data:`pagedsim.memory.schemes.SCHEMES`),
one line each, or as JSON. Any of them can be given to ``compare --schemes``."""

from __future__ import annotations

import argparse
import json

from ..memory.schemes import DEFAULT_SCHEMES, SCHEMES, available


def add_schemes(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "schemes", help="list the allocation schemes (names for compare --schemes)",
        description="The registered allocation schemes, one line each: the name, then "
                    "what it does; [compare default] marks the four compare runs by default.")
    p.add_argument("--json", action="store_true",
                   help="print a JSON list of objects: name, description, family, view, "
                        "paper_key (null if the vLLM paper has none), default")
    p.set_defaults(run=run_schemes)


def run_schemes(args: argparse.Namespace) -> int:
    names = available()
    if args.json:
        rows = [{"name": s.name, "description": s.description, "family": s.family,
                 "view": s.view, "paper_key": s.paper_key, "default": s.name in DEFAULT_SCHEMES}
                for s in (SCHEMES[n] for n in names)]
        print(json.dumps(rows, indent=1))
        return 0
    width = max(len(n) for n in names)
    for name in names:
        mark = " [compare default]" if name in DEFAULT_SCHEMES else ""
        print(f"{name:<{width}}  {SCHEMES[name].description}{mark}")
    return 0
