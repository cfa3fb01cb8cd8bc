"""``python -m labs``: check a lab, show its tasks, make a student release, grade submissions.

::

    python -m labs check 05                 # grade labs/05_quantization_basics.py
    python -m labs check                    # every lab
    python -m labs check 05 --solutions     # grade the reference solutions instead
    python -m labs check 05 --file my.py    # grade another copy of the lab file
    python -m labs check 05 --lang zh       # in Chinese
    python -m labs show 05 --lang zh        # the lab's exercises, their tasks and hints
    python -m labs release DEST             # the repository without labs/solutions
    python -m labs grade SUBMISSIONS --csv grades.csv   # a folder per student, into a CSV

``check`` exits with 0 when every exercise it graded is done, 1 otherwise.
"""

from __future__ import annotations

import sys

from labs import instructor
from labs.grading import DONE, grade_lab, lab_numbers, load_lab, report, stub_docs
from labs.i18n import _, docstring


def _check(args) -> int:
    import json
    numbers = args.labs or lab_numbers()
    if args.file and len(numbers) != 1:
        raise SystemExit(_("--file grades one lab: name it, e.g. check 05 --file my.py"))
    passed = total = 0
    rows = []
    for nn in numbers:
        lab, results, file_error = grade_lab(nn, args.file, args.solutions)
        if args.json:
            rows += [{"lab": lab.number, "exercise": r.name, "status": r.status} for r in results]
        else:
            report(lab, results, file_error, stub_docs(lab))
        passed += sum(r.status == DONE for r in results)
        total += len(results)
    if args.json:
        print(json.dumps(rows))
    else:
        print(_("{passed} of {total} exercises done").format(passed=passed, total=total))
    return 0 if passed == total else 1


def _show(args) -> int:
    for nn in args.labs or lab_numbers():
        lab = load_lab(nn)
        docs = stub_docs(lab)
        print(_("Lab {number}: {title}").format(number=lab.number, title=_(lab.title)))
        print(_("file: labs/{file}").format(file=lab.file))
        for ex in lab.exercises:
            print(f"\n{ex.name}\n" + "-" * len(ex.name))
            print(docstring(docs.get(ex.name, "")))
        print()
    return 0


def main(argv=None) -> int:
    import argparse

    from console.i18n import set_language
    parser = argparse.ArgumentParser(
        prog="python -m labs",
        description="Check a lab, show its tasks, make a student release, grade submissions.")
    parser.add_argument("--lang", help="en or zh (default: the environment's language)")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="grade labs")
    c.add_argument("labs", nargs="*", help="lab numbers (default: all)")
    c.add_argument("--solutions", action="store_true", help="grade the reference solutions")
    c.add_argument("--file", help="grade this copy of the lab file")
    c.add_argument("--json", action="store_true", help="one JSON list of results")
    c.add_argument("--lang", help="en or zh", dest="lang_sub")
    s = sub.add_parser("show", help="print the exercises' tasks and hints")
    s.add_argument("labs", nargs="*")
    s.add_argument("--lang", help="en or zh", dest="lang_sub")
    instructor.add_commands(sub)
    args = parser.parse_args(argv)
    lang = getattr(args, "lang_sub", None) or args.lang
    if lang:
        try:
            set_language(lang)
        except ValueError as err:
            parser.error(str(err))
    try:
        if args.command == "check":
            return _check(args)
        if args.command == "show":
            return _show(args)
        return instructor.run(args)
    except (ValueError, FileNotFoundError) as err:
        print(err, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
