"""Copies of the student's lists, dicts and sets that write through to the originals.

Read from an attribute or an item of a student's object (``lab.ref_counts``,
``lab.block_tables``), a list, dict or set comes to the graders as a :class:`LiveList`,
:class:`LiveDict` or :class:`LiveSet`: a real container holding a copy (read here, at no
cost), whose writes (``ref_counts[b] += 1``, ``block_tables[child] = table``) go to the
student's container too, through its handle (:class:`pagedsim.labs.remote.Remote`). A copy
of one (``copy.deepcopy``, pickle) is a plain container.
"""

from __future__ import annotations

from typing import Any


class LiveMixin:
    """A copy of a worker's list, dict or set, read here; writes change both."""

    _remote: Any  # a pagedsim.labs.remote.Remote

    def _write(self, name: str, *args: object) -> object:
        self._remote._ask("callmethod", name, args, {})
        return getattr(super(), name)(*args)  # type: ignore[misc]

    def __reduce_ex__(self, protocol: object) -> tuple:
        # A copy (copy.deepcopy, pickle) is a plain container: the values, not the link.
        plain = next(t for t in (list, dict, set) if isinstance(self, t))
        return (plain, (plain(self),))  # type: ignore[call-overload]


def _writer(name: str):
    def method(self: LiveMixin, *args: object) -> object:
        return self._write(name, *args)
    method.__name__ = name
    return method


class LiveList(LiveMixin, list):
    def __init__(self, remote: Any, value: list) -> None:
        super().__init__(value)
        self._remote = remote


class LiveDict(LiveMixin, dict):
    def __init__(self, remote: Any, value: dict) -> None:
        super().__init__(value)
        self._remote = remote


class LiveSet(LiveMixin, set):
    def __init__(self, remote: Any, value: set) -> None:
        super().__init__(value)
        self._remote = remote


for _cls, _names in ((LiveList, ("__setitem__", "__delitem__", "append", "extend", "insert",
                                 "pop", "remove", "clear", "sort", "reverse")),
                     (LiveDict, ("__setitem__", "__delitem__", "pop", "popitem", "clear",
                                 "update", "setdefault")),
                     (LiveSet, ("add", "discard", "remove", "pop", "clear", "update"))):
    for _name in _names:
        setattr(_cls, _name, _writer(_name))
LIVE = {list: LiveList, dict: LiveDict, set: LiveSet}
