"""``pagedsim labs``: the graded classroom labs (:mod:`pagedsim.labs`).

- ``pagedsim labs list [--json]``: the labs (JSON: objects with ``id``, ``title``, ...);
- ``pagedsim labs release OUT [--lab N|A-B|A,B-C] [--force]``: the student version,
  solutions stripped (of every lab, or of those named);
- ``pagedsim labs grade N [--path DIR] [--json] [--mutant NAME] [--task MARKER]``: grade
  the reference, the student files under DIR, or a planted-bug mutant (all tasks, or the
  ones named); prints a per-task points table, or with
  ``--json`` Gradescope's ``results.json``. Exit status 0 whatever the score (lost points
  are reported, not an error); 2 on bad input;
- ``pagedsim labs autograder N OUT.zip``: a Gradescope autograder zip for lab N.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from .base import CliError
from .outdir import prepare_out


def add_labs(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "labs", help="graded classroom labs: list, release, grade, autograder",
        description="The graded classroom labs in the repository's labs/ folder (or "
                    "$PAGEDSIM_LABS_DIR); labs/INSTRUCTORS.md is the instructor's guide.")
    sub = p.add_subparsers(dest="labs_command", metavar="ACTION")
    p.set_defaults(run=run_missing)

    q = sub.add_parser("list", help="list the labs", description="The labs, one line each.")
    q.add_argument("--json", action="store_true",
                   help="print a JSON list of objects: id, title, hours, notebook, folder, "
                        "student_files, forbidden_imports, max_score, tasks")
    q.set_defaults(run=run_list)

    q = sub.add_parser("release", help="write the student version of the labs",
                       description="Write the student version of every lab (or of those "
                                   "--lab names) into OUT: each solution region replaced by "
                                   "a TODO that raises NotImplementedError, mutants.py left "
                                   "out.")
    q.add_argument("--lab", metavar="IDS",
                   help="only these labs: an id (4), a range (1-3) or a list (1,4-5); with "
                        "--force, a later release joins the earlier ones in OUT")
    q.add_argument("out", metavar="OUT", help="output folder (must not exist or be empty)")
    q.add_argument("--force", action="store_true",
                   help="write into a non-empty OUT, replacing the lab folders and README.md "
                        "there (anything else in OUT is left alone)")
    q.set_defaults(run=run_release)

    q = sub.add_parser("grade", help="grade a lab: the reference, a student tree or a mutant",
                       description="Run lab N's graders on the reference solution, on the "
                                   "student files under --path, or on a planted-bug mutant; "
                                   "print points per task. Exit status 0 however many points "
                                   "are lost; 2 on bad input.")
    q.add_argument("lab", metavar="N", type=int, help="the lab id (see 'pagedsim labs list')")
    q.add_argument("--path", metavar="DIR",
                   help="a released tree's root (holding lab<N>_<slug>/) or that lab folder "
                        "itself; default: grade the reference solution")
    q.add_argument("--mutant", metavar="NAME",
                   help="grade the reference with this planted bug (names in the lab's "
                        "mutants.py; instructors only)")
    q.add_argument("--task", metavar="MARKER", action="append",
                   help="grade only this task (a marker such as lab1_2; repeat for more)")
    q.add_argument("--json", action="store_true",
                   help="print Gradescope's results.json: score, output, tests (name, score, "
                        "max_score, output)")
    q.add_argument("--timeout", metavar="SECONDS", type=float, default=600.0,
                   help="stop the graders after this many seconds, at most 86400 "
                        "(default: 600)")
    q.add_argument("--instructor", action="store_true",
                   help="the instructor's report: paths in full and how the student's "
                        "process was confined (its user, limits, Landlock, network); "
                        "$PAGEDSIM_LABS_INSTRUCTOR=1 does the same. Without it the report "
                        "is the student's: it names nothing of the grading machine")
    q.add_argument("--uploaded", metavar="DIR",
                   help="the folder the files were uploaded to, named with what it holds "
                        "when a student file is missing (the autograder passes its "
                        "submission folder)")
    q.set_defaults(run=run_grade)

    q = sub.add_parser("autograder", help="build a Gradescope autograder zip for one lab",
                       description="Write a Gradescope autograder zip for lab N: setup.sh, "
                                   "run_autograder, a source copy of pagedsim and the released "
                                   "lab (no reference solution, no mutants).")
    q.add_argument("lab", metavar="N", type=int, help="the lab id")
    q.add_argument("out", metavar="OUT.zip", help="the zip file to write (replaced if it exists)")
    q.set_defaults(run=run_autograder)


def run_missing(args: argparse.Namespace) -> int:
    """``pagedsim labs`` without an action: say which exist (exit status 2)."""
    raise CliError("labs: missing action, choose one of: list, release, grade, autograder "
                   "(see 'pagedsim labs --help')")


def run_list(args: argparse.Namespace) -> int:
    from ..labs import list_labs

    labs = list_labs()
    if args.json:
        print(json.dumps([lab.to_dict() for lab in labs], indent=1))
        return 0
    for lab in labs:
        print(f"{lab.id}  {lab.title}  ({lab.hours:g} h, {len(lab.tasks)} tasks, "
              f"{lab.max_score:g} points)  labs/{lab.folder}/")
    return 0


def run_release(args: argparse.Namespace) -> int:
    from ..labs import LabError, list_labs, release
    from ..labs.release import parse_lab_ids

    try:
        ids = None if args.lab is None else parse_lab_ids(args.lab,
                                                          [lab.id for lab in list_labs()])
    except LabError as exc:
        raise CliError(f"argument --lab: {exc}") from None
    prepare_out(args.out, ["README.md"], flag="OUT")  # before anything is written
    labs = release(args.out, force=args.force, lab_ids=ids)
    print(f"released {len(labs)} labs into {args.out}: "
          + ", ".join(lab.folder for lab in labs))
    return 0


def run_grade(args: argparse.Namespace) -> int:
    from ..labs import LabError, grade
    from ..labs.grading import check_timeout

    _check_lab_id(args.lab)
    try:
        check_timeout(args.timeout, "the timeout")
    except LabError as exc:
        raise CliError(f"argument --timeout: {exc}") from None
    if args.uploaded is not None:  # it only names where a student's files came from
        if args.path is None:
            raise CliError("argument --uploaded: only with --path (it names the folder the "
                           "student's files were uploaded to, for a missing file's message)")
        if not os.path.isdir(args.uploaded):
            raise CliError(f"argument --uploaded: {args.uploaded!r} is not a folder")
    result = grade(args.lab, path=args.path, mutant=args.mutant, timeout_s=args.timeout,
                   tasks=args.task, uploaded=args.uploaded)
    from ..labs.results import instructor_default

    instructor = args.instructor or instructor_default()
    if args.json:
        print(json.dumps(result.to_gradescope(instructor), indent=1))
    else:
        print(result.table(instructor))
    return 0


def run_autograder(args: argparse.Namespace) -> int:
    from ..labs import build_autograder

    _check_lab_id(args.lab)  # before OUT's folder is made
    out = Path(args.out)
    prepare_out(str(out.parent), [out.name], flag="OUT")  # its folder, before the build
    path = build_autograder(args.lab, args.out)
    print(f"wrote {path} (upload it as the autograder of lab {args.lab} on Gradescope)")
    return 0


def _check_lab_id(lab_id: int) -> None:
    """A lab id no lab has: one line naming the argument N and the valid ids."""
    from ..labs import LabError, get_lab

    try:
        get_lab(lab_id)
    except LabError as exc:
        raise CliError(f"argument N: {exc}") from None
