"""For instructors: a student release without the solutions, and a folder of submissions
graded into a CSV.

``python -m labs release DEST`` copies the repository's tracked files (``git ls-files``) to
DEST, leaving out ``labs/solutions/``. ``python -m labs grade SUBMISSIONS --csv grades.csv``
grades ``SUBMISSIONS/<student>/NN_topic.py`` for every student folder and lab file found, each
in its own process with a time limit (a student's endless loop costs that lab, not the run),
and writes one row per student, lab and exercise: student, lab, exercise, status.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

from labs.grading import load_lab, lab_numbers
from labs.i18n import ROOT, _

__all__ = ["add_commands", "grade_folder", "release", "run"]


def release(dest) -> int:
    """Copy the repository's tracked files to `dest` without ``labs/solutions/``; return how
    many files were copied."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise ValueError(_("{dest} exists and is not empty").format(dest=dest))
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True,
                           text=True).stdout.split("\0")
    n = 0
    for name in filter(None, files):
        if name.startswith("labs/solutions/") or not (ROOT / name).is_file():
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
        n += 1
    return n


def grade_folder(submissions, timeout: float = 120.0) -> list[dict]:
    """Grade every ``<student>/NN_topic.py`` under `submissions`: rows of student, lab,
    exercise and status (done, not done, wrong; "timeout" or "error" where the run did not
    finish)."""
    rows = []
    files = {load_lab(nn).file: nn for nn in lab_numbers()}
    for student in sorted(p for p in Path(submissions).iterdir() if p.is_dir()):
        for name, nn in sorted(files.items(), key=lambda kv: kv[1]):
            path = student / name
            if not path.is_file():
                continue
            cmd = [sys.executable, "-m", "labs", "--lang", "en", "check", nn, "--file",
                   str(path), "--json"]
            try:
                done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                                      timeout=timeout)
                results = json.loads(done.stdout.strip().splitlines()[-1])
            except subprocess.TimeoutExpired:
                results = [{"lab": nn, "exercise": ex.name, "status": "timeout"}
                           for ex in load_lab(nn).exercises]
            except (ValueError, IndexError):
                results = [{"lab": nn, "exercise": ex.name, "status": "error"}
                           for ex in load_lab(nn).exercises]
            rows += [{"student": student.name, **r} for r in results]
    return rows


def add_commands(sub) -> None:
    r = sub.add_parser("release", help="copy the repository without labs/solutions")
    r.add_argument("dest")
    g = sub.add_parser("grade", help="grade a folder of submissions into a CSV")
    g.add_argument("submissions", help="a folder holding one folder per student")
    g.add_argument("--csv", required=True, help="the CSV file to write")
    g.add_argument("--timeout", type=float, default=120.0, help="seconds per lab and student")


def run(args) -> int:
    if args.command == "release":
        n = release(args.dest)
        print(_("{n} files copied to {dest}, without labs/solutions").format(n=n, dest=args.dest))
        return 0
    rows = grade_folder(args.submissions, args.timeout)
    with open(args.csv, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=["student", "lab", "exercise", "status"])
        w.writeheader()
        w.writerows(rows)
    students = len({r["student"] for r in rows})
    print(_("{rows} results of {students} students written to {csv}").format(
        rows=len(rows), students=students, csv=args.csv))
    return 0
