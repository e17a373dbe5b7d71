"""No absolute path of one machine in any tracked file (figures, notebooks, CSVs included).

A path such as a home directory, the root user's, a scratch directory or a development
machine's work tree means nothing on a student's laptop, and a recorded one leaks how a
run was made. Every file ``git ls-files`` lists is read as bytes (binary ones too: a PNG's
text chunks or a pickled path would show) and searched. Write paths relative to the
repository, or as a placeholder (``PATH/``, ``OUT/``, ``$(mktemp -d)``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Built from pieces so that this file does not match itself.
_S = "/"
_LEAD = r"(?<![\w.~$%{}-])"  # not part of a longer path, a URL or a placeholder
_ROOTS = "|".join(("work", "root", "tmp", "private" + _S + "tmp", "var" + _S + "folders"))
MACHINE_PATH = re.compile(
    _LEAD + _S + rf"(?:{_ROOTS})" + _S + "[\\w.-]"  # e.g. a work tree, root's home, scratch
    + "|" + _LEAD + _S + "(?:home|Users)" + _S + r"[A-Za-z0-9_.-]+"  # a user's home
    + "|" + r"\b[A-Za-z]:(?:\\){1,2}Users(?:\\){1,2}",  # a Windows home, raw or JSON-escaped
    re.IGNORECASE,
)


def find_machine_paths(text: str) -> list[str]:
    """The machine paths in ``text``, as matched (with a few characters after each)."""
    return [text[m.start(): m.end() + 30].splitlines()[0] for m in MACHINE_PATH.finditer(text)]


def _tracked_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no list of tracked files")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                         check=True).stdout
    return [ROOT / name for name in out.decode().split("\0") if name]


@pytest.mark.parametrize("text", [
    "trace at " + _S + "work" + _S + "shared/data/x.jsonl",
    "wrote " + _S + "root" + _S + "out/bench.csv",
    "cd " + _S + "tmp" + _S + "ag",
    "'" + _S + "home" + _S + "alice/venv'",
    '"C:' + "\\\\" + "Users" + "\\\\" + 'bob"',  # as a notebook's JSON holds it
    "C:" + "\\" + "Users" + "\\" + "bob",
    "`" + _S + "Users" + _S + "carol/x`",
])
def test_finds_machine_paths(text):
    assert find_machine_paths(text), text


@pytest.mark.parametrize("text", [
    "https://github.com/org/work/tree",  # part of a URL
    "network" + _S + "tmp" + _S + "x",  # part of a longer relative path
    "notebooks/../tests/data/mooncake_sample.jsonl",
    "PATH/conversation_trace.jsonl and OUT/bench.csv",
    "$OUT" + _S + "tmp" + _S + "x",
    "a ratio of 1" + _S + "tmp",
])
def test_leaves_other_paths_alone(text):
    assert not find_machine_paths(text), text


def test_no_tracked_file_names_a_machine_path():
    found = []
    for path in _tracked_files():
        if not path.is_file():  # deleted in the work tree, not yet committed
            continue
        text = path.read_bytes().decode("latin-1")
        found += [f"{path.relative_to(ROOT)}: {hit}" for hit in find_machine_paths(text)]
    assert not found, "absolute machine paths in tracked files:\n" + "\n".join(found[:40])
