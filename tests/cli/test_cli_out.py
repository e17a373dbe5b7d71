"""Issue 22, part 4: every ``--out`` is checked, created and tested for writing before any
simulation starts; the error is one line naming ``--out`` (was: the whole run, the
table printed, then an OSError line that did not name the flag)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pagedsim.cli import main
from pagedsim.experiments import runner as runner_module

COMMANDS = {
    "compare": ["compare", "--jobs", "1", "--quiet", "--num-requests", "5", "--schemes",
                "paged"],
    "sweep": ["sweep", "rate", "--jobs", "1", "--quiet", "--num-requests", "5"],
    "figures": ["figures", "--jobs", "1", "--quiet"],
}


@pytest.fixture
def no_simulation(monkeypatch):
    """Fail the test if any run starts: every --out error must come before."""
    def refuse(*args, **kwargs):
        raise AssertionError("a simulation started before --out was checked")

    monkeypatch.setattr(runner_module, "run_scheme", refuse)


def _bad_out(tmp_path: Path, kind: str) -> str:
    if kind == "proc":
        return "/proc/pagedsim-no-such-dir/x"
    if kind == "dangling":
        link = tmp_path / "link"
        link.symlink_to(tmp_path / "missing" / "target")
        return str(link)
    if kind == "file":
        (tmp_path / "f").write_text("x")
        return str(tmp_path / "f" / "sub")
    out = tmp_path / "out"  # a folder where compare_summary.csv / a sweep CSV should be
    for name in ("compare_summary.csv", "sweep_rate.csv"):
        (out / name).mkdir(parents=True)
    return str(out)


@pytest.mark.parametrize("kind, needle", [
    ("proc", "cannot create the folder"),
    ("dangling", "is a symbolic link to"),
    ("file", "is under the file"),
    ("dir-in-the-way", "is a directory, where this command writes a file"),
])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_bad_out_fails_before_the_run(tmp_path: Path, capsys, no_simulation, command, kind,
                                      needle):
    if kind == "proc" and not os.path.isdir("/proc"):
        pytest.skip("no /proc")
    out = _bad_out(tmp_path, kind)
    assert main([*COMMANDS[command], "--out", out]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pagedsim: error: argument --out: "), lines
    assert needle in lines[0]
    assert captured.out == ""


def test_out_is_created_before_the_run(tmp_path: Path, capsys, monkeypatch):
    """A new folder exists (and was written in) by the time the first run starts."""
    out = tmp_path / "new" / "deeper"
    seen: list[bool] = []
    real = runner_module.run_many

    def spy(*args, **kwargs):
        seen.append(out.is_dir() and not any(out.iterdir()))  # the probe file is gone
        return real(*args, **kwargs)

    monkeypatch.setattr(runner_module, "run_many", spy)
    assert main([*COMMANDS["compare"], "--out", str(out)]) == 0
    assert seen and all(seen)
    assert (out / "compare_summary.csv").is_file()


@pytest.mark.parametrize("kind", ["proc", "dangling", "file"])
def test_labs_release_and_autograder_check_their_out_first(tmp_path: Path, kind: str,
                                                           capsys) -> None:
    """Was: 'labs release /proc/x' a bare [Errno 2]; 'labs autograder' did not name OUT."""
    out = _bad_out(tmp_path, kind)
    assert main(["labs", "release", out, "--lab", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "argument OUT:" in err[0] and out in err[0], err
    zip_path = str(Path(out) / "lab1.zip")
    assert main(["labs", "autograder", "1", zip_path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "argument OUT:" in err[0], err
