"""The graders read the student's objects in as few requests as is exact (pagedsim.labs.remote).

Every read of an object that lives in the worker was one request, a round trip between
processes of about 0.1 ms: lab 2's graders made 78,000 of them (8 s of its 9 s), most to
read a few numbers of a record the previous call returned. Now a handle brings its
object's stored plain fields, and a read of a stored attribute is kept, both until the
student's code next runs. These tests hold that to what reading the live object gives:
whatever runs the student's code (a call, a property, a callback's return, a write)
makes the next read ask again, and nothing is kept from a class that computes its
attributes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pagedsim.labs import get_lab

ROOT = Path(__file__).resolve().parents[2]
LABS = ROOT / "labs"
pytestmark = pytest.mark.skipif(not (LABS / "lab1_budget").is_dir() or not hasattr(os, "fork"),
                                reason="needs lab 1 and os.fork")

STUDENT = '''
from dataclasses import dataclass


@dataclass
class Record:
    a: int
    b: float = 0.5
    name: str = "r"
    items: tuple = ()


class Big:
    def __init__(self):
        self.text = "x" * 70_000_000
        self.number = 10 ** 400_000
        self.a = 1


class Slotted:
    __slots__ = ("x", "y", "unset")

    def __init__(self):
        self.x, self.y = 1, 2


class Ticker:
    def __init__(self):
        self.n = 0
        self.rec = Record(1)

    @property
    def ticks(self):
        self.n += 1
        return self.n

    @property
    def touch(self):
        self.rec.a = 99
        return 0


class Shadowed:
    def __init__(self):
        self.__dict__["v"] = "stored"

    @property
    def v(self):
        return "property"


class Computed:
    def __init__(self):
        self.count = 0

    def __getattribute__(self, name):
        if name == "count":
            d = object.__getattribute__(self, "__dict__")
            d["count"] += 1
            return d["count"]
        return object.__getattribute__(self, name)


class Holder:
    def __init__(self):
        self.blocks = [1, 2]
        self.rec = Record(3)

    def grow(self):
        self.blocks.append(len(self.blocks) + 1)
        self.rec.a += 1


def bump(rec):
    rec.a += 10


def run(callback, rec):
    callback(rec)
    rec.a = 5
'''


@pytest.fixture
def student(tmp_path: Path):
    """(the student's module through a worker, the worker)."""
    from pagedsim.labs.grading import _worker_config
    from pagedsim.labs.remote import Worker

    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "budget_lab.py").write_text(STUDENT, encoding="utf-8")
    worker = Worker(_worker_config(get_lab(1, LABS), folder, 60))
    try:
        yield worker.request("import", "budget_lab"), worker
    finally:
        worker.close()


def test_a_records_fields_come_with_it_until_the_student_code_runs(student) -> None:
    mod, worker = student
    rec = mod.Record(7)
    asked = worker.requests
    assert (rec.a, rec.b, rec.name) == (7, 0.5, "r")
    assert worker.requests == asked  # no request: the fields came with the handle
    mod.bump(rec)  # the student's code runs: what came before is stale
    asked = worker.requests
    assert rec.a == 17 and rec.b == 0.5
    assert worker.requests == asked + 2  # one read each (the fields are stale)
    assert rec.a == 17 and rec.b == 0.5
    assert worker.requests == asked + 2  # read since the code ran: kept
    rec.a = 4  # a write runs code too (a __setattr__ may)
    assert rec.a == 4
    assert rec.items == ()  # not a plain value: asked, and read right


def test_slots_come_with_the_handle_and_an_unset_one_is_an_attribute_error(student) -> None:
    mod, worker = student
    s = mod.Slotted()
    asked = worker.requests
    assert (s.x, s.y) == (1, 2)
    assert worker.requests == asked
    with pytest.raises(AttributeError):
        _ = s.unset


def test_a_property_runs_on_every_read(student) -> None:
    mod, _ = student
    t = mod.Ticker()
    assert [t.ticks, t.ticks, t.ticks] == [1, 2, 3]
    assert t.n == 3


def test_a_property_that_changes_another_object_makes_its_fields_stale(student) -> None:
    mod, _ = student
    t = mod.Ticker()
    rec = t.rec
    assert rec.a == 1
    assert t.touch == 0  # sets t.rec.a = 99 in the student's process
    assert rec.a == 99


def test_a_property_comes_before_the_instance_dict(student) -> None:
    mod, _ = student
    assert mod.Shadowed().v == "property"


def test_nothing_is_kept_of_a_class_that_computes_its_attributes(student) -> None:
    mod, worker = student
    c = mod.Computed()
    assert [c.count, c.count] == [1, 2]


def test_a_stored_list_is_read_once_until_the_student_code_runs(student) -> None:
    mod, worker = student
    h = mod.Holder()
    asked = worker.requests
    assert h.blocks == [1, 2] and h.blocks == [1, 2]
    assert worker.requests == asked + 1
    inner = h.rec  # a stored attribute holding an object: kept too, with its fields
    assert inner.a == 3 and h.rec.a == 3
    assert worker.requests == asked + 2
    h.grow()
    assert h.blocks == [1, 2, 3] and inner.a == 4 and h.rec.a == 4
    h.blocks.append(9)  # a write through the live copy: the student's list changes
    assert h.blocks == [1, 2, 3, 9]


def test_what_a_callback_was_given_is_stale_once_the_student_code_goes_on(student) -> None:
    mod, _ = student
    rec = mod.Record(1)
    seen: list = []

    def callback(r) -> None:  # the grader's: run here, while the student's call waits
        seen.append((r, r.a))

    mod.run(callback, rec)
    given, a_then = seen[0]
    assert a_then == 1
    assert given.a == 5 and rec.a == 5  # the student's code set it after the callback


def test_a_long_field_is_read_when_asked_not_sent_with_every_handle(student) -> None:
    """A 70 MB string sent with the handle (and with every later one) would pass the
    message limit and end the worker (as reading it does); a 400,000-digit int comes
    when read."""
    mod, worker = student
    big = mod.Big()
    asked = worker.requests
    assert big.a == 1 and worker.requests == asked
    assert big.number % 1000 == 0 and worker.requests == asked + 1
