"""Follow one request through the simulator and count what a reader would have to open.

Runs ``pagedsim compare`` on a trace of one request (a ``--prompt-len`` token prompt,
``--output-len`` output tokens; 40 and 20 by default) for one scheme and scheduling policy,
with ``sys.setprofile`` watching every Python call whose code lives in the core layers
``pagedsim/engine``, ``pagedsim/memory`` and ``pagedsim/workloads``. Module and class bodies
(run once, at import) and comprehensions / generator expressions / lambdas are left out:
they are not functions a reader opens. It prints:

* ``files``: distinct source files entered;
* ``functions``: distinct functions (file, qualified name) called;
* ``calls``: calls in all;
* ``crossings``: calls from a function of one of the three layers into another of them.

Those are the counts of the issue that asked for this script (engine + memory +
workloads). What a run records lives in its own layer, ``pagedsim/metrics`` (the per-step
sums, the request log, the kept steps, the inter-token gaps, the run's record), which the
engine feeds every step: its files, functions and calls are counted apart and printed on
their own, so that moving code between the engine and that layer cannot pass for a
shorter walk.

With ``--list`` it also prints the functions, by file, with their call counts: the reading
list of that request (the metrics layer's after the others). With ``--plain`` the
simulator's speed shortcuts are off (steady runs of decode steps, a step's decodes in one
call: ``simulate(steady_runs=False, batch_decodes=False)``, proven to make the same run by
their tests), so the walk is the reading path alone. Usage::

    python scripts/walk.py --scheme prefix-cache --policy v0
    python scripts/walk.py --scheme paged --list
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import sys
import tempfile
from collections import Counter
from inspect import CO_OPTIMIZED
from pathlib import Path

LAYERS = ("engine", "memory", "workloads")
#: Counted apart: what a run records (see the module docstring).
METRICS = "metrics"
SKIPPED = {"<module>", "<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>", "<lambda>"}


def _layer(filename: str, root: Path) -> str | None:
    """The layer a source file belongs to (a core one, or the metrics layer), or None when
    it is outside them."""
    try:
        rel = Path(filename).resolve().relative_to(root)
    except ValueError:
        return None
    counted = rel.parts[0] in LAYERS or rel.parts[0] == METRICS
    return rel.parts[0] if len(rel.parts) > 1 and counted else None


def walk(scheme: str, policy: str, prompt_len: int, output_len: int,
         plain: bool = False) -> dict:
    """Run one request through ``pagedsim compare`` and count its calls (see the module
    docstring); returns the counts and, under ``"functions_by_call"``, a Counter of
    ``(file, function)`` -> calls, for the three core layers; under ``"metrics"`` the
    same counts (files, functions, calls, functions_by_call) for the metrics layer.
    ``plain``: with the speed shortcuts off."""
    import pagedsim
    from pagedsim.cli import main
    from pagedsim.engine import simulator

    root = Path(pagedsim.__file__).resolve().parent
    layer_of: dict[str, str | None] = {}
    calls: Counter[tuple[str, str]] = Counter()
    metrics_calls: Counter[tuple[str, str]] = Counter()
    crossings = 0

    def profile(frame, event, arg):
        nonlocal crossings
        if event != "call":
            return
        code = frame.f_code
        if code.co_name in SKIPPED or not code.co_flags & CO_OPTIMIZED:
            return  # a comprehension, or a module or class body (run once, at import)
        fname = code.co_filename
        layer = layer_of.get(fname, "?")
        if layer == "?":
            layer = layer_of[fname] = _layer(fname, root)
        if layer is None:
            return
        rel = Path(fname).resolve().relative_to(root).as_posix()
        if layer == METRICS:
            metrics_calls[(rel, code.co_qualname)] += 1
            return  # counted apart; no crossing is counted into or out of it
        calls[(rel, code.co_qualname)] += 1
        caller = frame.f_back
        while caller is not None and caller.f_code.co_name in SKIPPED:
            caller = caller.f_back  # a comprehension's calls belong to its function
        if caller is not None:
            cname = caller.f_code.co_filename
            clayer = layer_of.get(cname, "?")
            if clayer == "?":
                clayer = layer_of[cname] = _layer(cname, root)
            if clayer is not None and clayer != METRICS and clayer != layer:
                crossings += 1

    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "one.csv"
        trace.write_text(f"arrival_s,prompt_len,output_len\n0.0,{prompt_len},{output_len}\n",
                         encoding="utf-8")
        argv = ["compare", "--workload", str(trace), "--schemes", scheme, "--policy", policy,
                "--jobs", "1", "--no-write", "--quiet"]
        out = io.StringIO()
        defaults = simulator.simulate.__defaults__
        if plain:  # the same function, its two shortcut switches' defaults turned off
            names = list(inspect.signature(simulator.simulate).parameters)[-len(defaults):]
            simulator.simulate.__defaults__ = tuple(
                False if name in ("steady_runs", "batch_decodes") else value
                for name, value in zip(names, defaults, strict=True))
        sys.setprofile(profile)
        try:
            with contextlib.redirect_stdout(out):
                rc = main(argv)
        finally:
            sys.setprofile(None)
            simulator.simulate.__defaults__ = defaults
    if rc not in (0, None):
        raise SystemExit(f"walk: pagedsim {' '.join(argv)} exited {rc}")
    return {**_counts(calls), "crossings": crossings, "metrics": _counts(metrics_calls)}


def _counts(calls: Counter[tuple[str, str]]) -> dict:
    """Distinct files and functions, and calls in all, of one Counter of calls."""
    return {"files": len({f for f, _ in calls}), "functions": len(calls),
            "calls": sum(calls.values()), "functions_by_call": calls}


def _print_list(calls: Counter[tuple[str, str]]) -> None:
    """The functions of ``calls``, by file, with their call counts."""
    by_file: dict[str, list[tuple[str, int]]] = {}
    for (f, fn), n in sorted(calls.items()):
        by_file.setdefault(f, []).append((fn, n))
    for f, fns in by_file.items():
        print(f"  {f}")
        for fn, n in fns:
            print(f"      {n:5d}  {fn}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scheme", default="prefix-cache",
                    help="a registered scheme (default %(default)s)")
    ap.add_argument("--policy", default="v0", help="scheduling policy (default %(default)s)")
    ap.add_argument("--prompt-len", type=int, default=40, help="prompt tokens (default 40)")
    ap.add_argument("--output-len", type=int, default=20, help="output tokens (default 20)")
    ap.add_argument("--list", action="store_true", help="also list the functions, by file")
    ap.add_argument("--plain", action="store_true",
                    help="with the simulator's speed shortcuts off (the reading path alone)")
    args = ap.parse_args(argv)
    for name in ("prompt_len", "output_len"):
        value = getattr(args, name)
        if not 1 <= value <= 100_000:
            ap.error(f"--{name.replace('_', '-')} {value}: give an integer in [1, 100000]")
    r = walk(args.scheme, args.policy, args.prompt_len, args.output_len, args.plain)
    plain = ", plain" if args.plain else ""
    m = r["metrics"]
    print(f"scheme {args.scheme}, policy {args.policy}{plain}, one request of {args.prompt_len} + "
          f"{args.output_len} tokens: {r['files']} files, {r['functions']} functions, "
          f"{r['calls']} calls, {r['crossings']} layer crossings "
          f"({'+'.join(LAYERS)}, as the issue counts); {METRICS} layer: {m['files']} files, "
          f"{m['functions']} functions, {m['calls']} calls")
    if args.list:
        _print_list(r["functions_by_call"])
        print(f"  {METRICS} layer:")
        _print_list(m["functions_by_call"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
