"""Lend the graders' functions to a student's module while one task's tests run.

A lab's later task often calls the student's functions of earlier tasks (lab 8's
``request_kv_bytes`` calls its ``layer_bytes_per_token``): a mistake in the earlier task
would then cost points twice. :func:`lend` replaces those functions, in the student's
module, by the graders' (a reference, or pagedsim's own), for the length of a ``with``
block, so that a task's tests run the student's function for that task on correct
functions under it: one mistake, points lost in one task.

Graded, the student's module lives in the worker's process
(:mod:`pagedsim.labs.remote`): a lent function goes there as a callback, which the
worker's calls run here, in the graders' process. Run by hand (the module imported
plainly), the module's attributes are set directly. Either way the student's own
functions are put back afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping


@contextlib.contextmanager
def lend(module: object, functions: Mapping[str, Callable]) -> Iterator[None]:
    """Within the block, ``module.<name>`` is ``functions[name]`` for each name the
    module has (a name it lacks is left alone: students may organise their module as
    they like; only the functions called through the module's globals are replaced)."""
    # A RemoteModule imports the student's module on first use (and again after its
    # process ended): touch it, then set the attributes of the module over there.
    with contextlib.suppress(Exception):
        getattr(module, next(iter(functions), "__name__"))
    remote = getattr(module, "__dict__", {}).get("_module")
    target = remote if remote is not None else module
    saved = {}
    for name, func in functions.items():
        try:
            saved[name] = getattr(target, name)
        except AttributeError:
            continue
        setattr(target, name, func)
    try:
        yield
    finally:
        for name, func in saved.items():
            with contextlib.suppress(Exception):  # the process may have ended meanwhile
                setattr(target, name, func)
