"""Labs: exercises a student completes beside each lecture, graded bit for bit.

Each lab is a file ``labs/NN_topic.py`` of function stubs; ``python -m labs check NN`` grades
it against numfmt and the other oracles of the tests (``labs/checks/labNN.py``). Reference
solutions are in ``labs/solutions/``. ``labs/README.md`` says how to work a lab, and how an
instructor makes a release without solutions and grades a folder of submissions.
"""

from __future__ import annotations

__all__ = ["check"]


def check(number: str, solutions: bool = False) -> bool:
    """Grade lab `number` and print its report (the notebooks' "Lab" cell); True when every
    exercise is done."""
    from labs.grading import DONE, grade_lab, report, stub_docs
    lab, results, file_error = grade_lab(number, solutions=solutions)
    report(lab, results, file_error, stub_docs(lab))
    return all(r.status == DONE for r in results)
