"""COURSE.md's schedule agrees with the notebooks' README (class minutes, notebooks) and
with each lab's lab.json (which notebook it follows, its hours), and its totals are the
table's sums."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORDS = {"four": 4, "five": 5, "six": 6}


def _schedule() -> list[tuple[int, int, str, int | None, int | None]]:
    course = (ROOT / "COURSE.md").read_text(encoding="utf-8")
    table = course.split("## Schedule", 1)[1].split("\n\n", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in table.splitlines()[2:]:
        week, _, notebook, minutes, lab, hours = (c.strip() for c in line.strip("|").split("|"))
        rows.append((int(week), int(minutes), notebook[:2],
                     None if lab == "-" else int(lab), None if hours == "-" else int(hours)))
    return rows


def _labs() -> dict[int, dict]:
    return {json.loads(p.read_text(encoding="utf-8"))["id"]: json.loads(
        p.read_text(encoding="utf-8")) for p in (ROOT / "labs").glob("lab*/lab.json")}


def test_every_notebook_once_in_order_with_the_readmes_class_time():
    rows = _schedule()
    notebooks = sorted(p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert [nb for _, _, nb, _, _ in rows] == notebooks
    readme = (ROOT / "notebooks" / "README.md").read_text(encoding="utf-8")
    minutes = {f"{int(m.group(1)):02d}": int(m.group(2)) for m in re.finditer(
        r"^\| (\d+) \| \[`\d\d_[^|]*\|[^|]*\| (\d+) min \|", readme, flags=re.M)}
    assert {nb: m for _, m, nb, _, _ in rows} == minutes


def test_every_lab_once_after_its_own_notebook_with_its_hours():
    labs = _labs()
    placed = {lab: (nb, hours) for _, _, nb, lab, hours in _schedule() if lab is not None}
    assert sorted(placed) == sorted(labs)
    for lab_id, info in labs.items():
        assert placed[lab_id] == (Path(info["notebook"]).name[:2], info["hours"]), lab_id


def test_the_totals_and_the_weeks_are_the_tables():
    rows = _schedule()
    course = " ".join((ROOT / "COURSE.md").read_text(encoding="utf-8").split())
    total_min = sum(m for _, m, _, _, _ in rows)
    total_h = sum(h for *_, h in rows if h is not None)
    assert f"{total_min} minutes of class and {total_h} hours of labs" in course
    (weeks,) = re.findall(r"^# A course on .* in (\w+) weeks", course)
    assert WORDS[weeks] == max(w for w, *_ in rows)
