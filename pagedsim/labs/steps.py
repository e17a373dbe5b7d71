"""A property test's failing example, rewritten for a student as the steps that break it.

Hypothesis reports a failing stateful test as the program it replayed (``state =
Machine()``, a ``state.rule(...)`` line per step, the invariants checked after every step,
``Draw 2 (num_blocks): 28`` for each value drawn inside a step) and a plain property
test as a call with its arguments; both end with a ``@reproduce_failure`` line meant for
whoever owns the test. :func:`plain_steps` keeps the error itself and turns the rest into
a short numbered list: each step's name in words with its arguments and the values it
drew, and the check that failed after the last one. Text without a failing example is
returned unchanged.
"""

from __future__ import annotations

import re
from collections import Counter

_HEAD = re.compile(r"^(?:Failing test case|Falsifying example): ?(.*)$")
_CALL = re.compile(r"^state\.(\w+)\((.*)\)$")
_DRAW = re.compile(r"^Draw \d+(?: \(([^)]*)\))?: (.*)$")
_REPRODUCE = re.compile(r"^You can reproduce this test case|^@reproduce_failure|"
                        r"^Explanation:|^The test always failed")
_DATA_ARG = re.compile(r",?\s*\bdata=data\(\.\.\.\)")


def _words(name: str) -> str:
    return name.replace("_", " ").strip()


def _args(text: str) -> str:
    return _DATA_ARG.sub("", text).strip(" ,")


def _machine(lines: list[str]) -> list[str]:
    """The numbered steps of a state machine's replay (``lines`` after its head line)."""
    calls = [(m.group(1), m.group(2).strip()) for m in map(_CALL.match, lines) if m]
    # An invariant runs, with no arguments at all, after every step (after the failing one
    # only up to the check that fails); a rule takes arguments (``data=data(...)`` at
    # least) or runs once in a while.
    bare = Counter(name for name, args in calls if not args)
    with_args = {name for name, args in calls if args}
    steps_taken = sum(1 for _, args in calls if args)
    checks = {name for name, n in bare.items()
              if name not in with_args and n >= max(2, steps_taken - 1)}
    checks.add("teardown")
    steps: list[str] = []
    drawn: list[str] = []
    failed_check = None
    for line in lines:
        draw, call = _DRAW.match(line), _CALL.match(line)
        if draw:
            label, value = draw.groups()
            drawn.append(f"{label} = {value}" if label else value)
        elif call:
            name, args = call.group(1), _args(call.group(2))
            if name in checks:
                if name != "teardown":
                    failed_check = name
                continue
            failed_check = None  # a check met after this step has passed it, so far
            parts = [p for p in (args, "drew " + ", ".join(drawn) if drawn else "") if p]
            steps.append(_words(name) + (": " + "; ".join(parts) if parts else ""))
            drawn = []
    out = ["The steps that break it (the shortest found):"]
    out += [f"  {i}. {step}" for i, step in enumerate(steps, 1)]
    if failed_check is not None:
        out.append(f"then the check '{_words(failed_check)}' fails.")
    else:
        out.append("the last step fails.")
    return out


def _example(head: str, lines: list[str]) -> list[str]:
    """The arguments of a plain property test's failing call, on one line."""
    call = " ".join([head, *lines]).strip()
    inner = call[call.find("(") + 1: call.rfind(")")] if "(" in call else ""
    args = [a for a in (_args(p.split(":", 1)[-1] if p.lstrip().startswith("Draw") else p)
                        for p in re.split(r",\s*(?![^\[\](){}]*[\])}])", inner)) if a]
    return ["The smallest input found that breaks it: " + ", ".join(args) + "."]


def plain_steps(text: str) -> str:
    """``text`` (a failed test's message) with its failing example in plain words."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _HEAD.match(line.strip())), None)
    if start is None:
        return text
    head = _HEAD.match(lines[start].strip()).group(1)
    rest = [line.strip() for line in lines[start + 1:]]
    rest = [line for line in rest if line and not _REPRODUCE.match(line)]
    merged: list[str] = []
    for line in rest:  # a long drawn value is printed over several lines: one line again
        if merged and _DRAW.match(merged[-1]) and not (_CALL.match(line) or _DRAW.match(line)):
            merged[-1] += " " + line
        else:
            merged.append(line)
    rest = merged
    if head.startswith("<state machine>"):
        body = _machine(rest)
    else:
        draws = [d.group(2) for d in map(_DRAW.match, rest) if d]
        call = [line for line in rest if not _DRAW.match(line)]
        body = _example(head, call)
        if draws:
            body.append("Values drawn inside the test: " + "; ".join(draws) + ".")
    return "\n".join([*lines[:start], *body])
