"""The checker: grade a lab file's functions against their oracles and report each exercise.

For every exercise of a lab (``labs/checks/labNN.py``) the checker calls the student's function
on the fixed edge cases, then on random inputs drawn by hypothesis (derandomized: the same
inputs on every run and machine). The first wrong answer is shrunk by hypothesis to the
smallest input that still gives one, and reported with the expected and the student's output
(floats with their bits) and the exercise's hints. An exception in the student's code is
reported as the line of their file that raised it, never as a traceback. A function that still
raises ``NotImplementedError`` is "not done".
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import importlib.util
import inspect
import linecache
import re
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

from wcwidth import wcswidth

from labs.i18n import LABS_DIR, _, docstring

__all__ = ["Result", "grade_lab", "lab_numbers", "load_lab", "load_module", "report"]

DONE, NOT_DONE, WRONG = "done", "not done", "wrong"
SOLUTIONS_DIR = LABS_DIR / "solutions"


@dataclass
class Result:
    """The grade of one exercise: ``status`` (done, not done, wrong) and, when wrong, the
    report's lines (input, expected, got, error) already in the current language."""

    name: str
    status: str
    lines: tuple = ()
    doc: str = ""


class StudentError(Exception):
    """The student's code raised: ``where`` is "file:line: source", ``what`` the exception."""

    def __init__(self, where: str, what: str):
        super().__init__(where, what)
        self.where, self.what = where, what


def lab_numbers() -> list[str]:
    """Every lab's number, "01" to "12"."""
    return sorted(p.stem[3:] for p in (LABS_DIR / "checks").glob("lab[0-9][0-9].py"))


def load_lab(number: str):
    """The :class:`labs.checks.common.Lab` numbered `number` ("05" or "5")."""
    nn = f"{int(number):02d}" if str(number).isdigit() else str(number)
    if nn not in lab_numbers():
        raise ValueError(_("no lab {number}; the labs are {labs}").format(
            number=number, labs=", ".join(lab_numbers())))
    return importlib.import_module(f"labs.checks.lab{nn}").LAB


def _student_frame(tb, path: Path) -> str:
    """The last line of ``path`` in traceback ``tb``: "path:line: source" (else the last line
    of any file, which is where a library refused the student's arguments)."""
    frames = traceback.extract_tb(tb)
    mine = [f for f in frames if Path(f.filename).resolve() == path.resolve()]
    f = (mine or frames)[-1]
    line = (f.line or linecache.getline(f.filename, f.lineno)).strip()
    return f"{f.filename}:{f.lineno}: {line}"


def _what(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def load_module(path: Path):
    """Import the file at `path` as a fresh module (its name starts with a digit, so by path);
    a syntax error or an exception at import is raised as :class:`StudentError`."""
    name = f"_lab_{path.stem}_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as err:
        where = f"{err.filename}:{err.lineno}: {(err.text or '').strip()}"
        raise StudentError(where, f"SyntaxError: {err.msg}") from None
    except Exception as err:  # noqa: BLE001 -- the student's module, whatever it raises
        raise StudentError(_student_frame(err.__traceback__, path), _what(err)) from None
    return module


class _Refused(Exception):
    """The oracle refused an input the search drew (outside what the exercise covers)."""


class _Call:
    """One call of the student's function on `args`: ``got``, or ``error`` (StudentError), or
    ``not_done``; ``verdict`` against the oracle's ``want``."""

    def __init__(self, ex, fn, path: Path, args: tuple):
        self.args, self.not_done, self.error, self.got = args, False, None, None
        try:
            self.want = ex.oracle(*copy.deepcopy(args))
        except (ValueError, ArithmeticError) as err:
            raise _Refused(err) from err
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.got = (ex.adapter(fn) if ex.adapter else fn)(*copy.deepcopy(args))
        except NotImplementedError as err:
            if _raised_in(err, path):          # the stub's own raise: not written yet
                self.not_done = True
            else:
                self.error = StudentError(_student_frame(err.__traceback__, path), _what(err))
        except Exception as err:  # noqa: BLE001 -- the student's code, whatever it raises
            self.error = StudentError(_student_frame(err.__traceback__, path), _what(err))
        self.verdict = None if (self.not_done or self.error) else ex.compare(self.got, self.want, args)

    @property
    def wrong(self) -> bool:
        return self.error is not None or (self.verdict is not None and not self.verdict.ok)


def _raised_in(err, path: Path) -> bool:
    frames = traceback.extract_tb(err.__traceback__)
    return bool(frames) and Path(frames[-1].filename).resolve() == path.resolve()


def _show_args(fn, args: tuple, names=None) -> list[str]:
    """The arguments as "name = value" lines (arrays in full, floats exact)."""
    import numpy as np
    try:
        names = list(names or inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        names = []
    names += [f"arg{k}" for k in range(len(names), len(args))]
    out = []
    with np.printoptions(floatmode="unique", threshold=64, linewidth=88):
        for name, value in zip(names, args):
            text = repr(value)
            if callable(value):                     # a function argument: its name, no address
                text = getattr(value, "__qualname__", text)
            elif isinstance(value, float):
                from labs.checks.common import float_bits
                text = float_bits(value)
            out.append(f"{name} = " + text.replace("\n", "\n" + " " * (len(name) + 3)))
    return out


def _search(ex, fn, path: Path):
    """The smallest failing input hypothesis finds (a _Call), or None when none fails."""
    from hypothesis import HealthCheck, Phase, assume, find, settings
    from hypothesis.errors import NoSuchExample

    def fails(args) -> bool:
        try:
            call = _Call(ex, fn, path, args)
        except _Refused:                        # an input the oracle refuses: not a test
            assume(False)
        return call.wrong

    conf = settings(max_examples=ex.examples, database=None, derandomize=True, deadline=None,
                    suppress_health_check=list(HealthCheck),
                    phases=[Phase.generate, Phase.shrink], report_multiple_bugs=False)
    try:
        args = find(ex.inputs, fails, settings=conf)
    except NoSuchExample:
        return None
    return _Call(ex, fn, path, args)


def grade_exercise(ex, module, path: Path) -> Result:
    """Grade one exercise of the imported lab file `module`."""
    fn = getattr(module, ex.name, None)
    if fn is None:
        return Result(ex.name, WRONG, (_("the file defines no function {name}").format(
            name=ex.name),))
    call, heading = None, _("failing edge case:")
    for args in ex.cases:
        call = _Call(ex, fn, path, args)
        if call.not_done:
            return Result(ex.name, NOT_DONE)
        if call.wrong:
            break
    else:
        call = _search(ex, fn, path) if ex.inputs is not None else None
        if call is None:
            return Result(ex.name, DONE)
        if call.not_done:
            return Result(ex.name, NOT_DONE)
        heading = _("smallest failing input found:")
    lines = [heading] + ["    " + a for a in _show_args(fn, call.args, ex.names)]
    if call.error is not None:
        lines += [_("your code raised {error}").format(error=call.error.what),
                  "    " + call.error.where]
    else:
        lines += [_("wrong output: {detail}").format(detail=call.verdict.detail)]
        if ex.tol is not None:
            lines += [_("(graded within a relative error of {rtol:g} and an absolute error of "
                        "{atol:g})").format(rtol=ex.tol[0], atol=ex.tol[1])]
    return Result(ex.name, WRONG, tuple(lines))


def grade_lab(number: str, path: Path | None = None, solutions: bool = False, names=None):
    """Grade lab `number`: the student's file (default ``labs/NN_topic.py``; `path` another
    copy of it), or with `solutions` the reference solutions; `names`: only these exercises.
    Returns ``(lab, results, file_error)``: file_error is a StudentError where the file does
    not import."""
    lab = load_lab(number)
    if names is not None:
        lab = dataclasses.replace(lab, exercises=[e for e in lab.exercises if e.name in names])
    if path is None:
        path = (SOLUTIONS_DIR if solutions else LABS_DIR) / lab.file
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(_("no file {path}").format(path=path))
    try:
        module = load_module(path)
    except StudentError as err:
        return lab, [Result(ex.name, WRONG) for ex in lab.exercises], err
    return lab, [grade_exercise(ex, module, path) for ex in lab.exercises], None


def _hints(doc: str) -> str:
    """The last section of a numpydoc docstring (the exercise's hints)."""
    parts = re.split(r"\n(?=[^\n]+\n-{3,}\n)", doc)
    return parts[-1] if len(parts) > 1 else ""


def _task(doc: str) -> str:
    """A docstring's first paragraph (the task, in a sentence or two)."""
    return doc.split("\n\n")[0]


def report(lab, results, file_error, stubs: dict, out=None) -> None:
    """Print one lab's results: a line per exercise, and for a wrong one its counterexample,
    outputs and hints; `stubs` maps a function's name to its English docstring."""
    out = out or sys.stdout
    from labs.i18n import _ as tr
    print(_("Lab {number}: {title}").format(number=lab.number, title=tr(lab.title)), file=out)
    if file_error is not None:
        print("  " + _("your file does not run: {error}").format(error=file_error.what), file=out)
        print("      " + file_error.where, file=out)
    marks = {DONE: _("done"), NOT_DONE: _("not done"), WRONG: _("wrong")}
    for r in results:
        doc = docstring(stubs.get(r.name, ""))
        mark = marks[r.status]
        print(f"  {mark}{' ' * max(1, 9 - wcswidth(mark))}{r.name}", file=out)
        if r.status == NOT_DONE:
            print("      " + _task(doc).replace("\n", "\n      "), file=out)
        if r.status == WRONG and r.lines:
            for line in r.lines:
                print("      " + line.replace("\n", "\n      "), file=out)
            hint = _hints(doc)
            if hint:
                heading, _dashes, body = hint.split("\n", 2)
                print("      " + _("{heading}: ").format(heading=heading)
                      + body.strip().replace("\n", "\n      "), file=out)


def stub_docs(lab) -> dict:
    """The English docstrings of the lab's exercises, from the lab file as shipped (read
    without importing it: a file that does not compile still has its exercises' tasks)."""
    import ast
    try:
        tree = ast.parse((LABS_DIR / lab.file).read_text(encoding="utf-8"))
    except SyntaxError:
        tree = ast.parse((SOLUTIONS_DIR / lab.file).read_text(encoding="utf-8")) \
            if (SOLUTIONS_DIR / lab.file).is_file() else ast.Module(body=[])
    return {n.name: ast.get_docstring(n, clean=False) or "" for n in tree.body
            if isinstance(n, ast.FunctionDef)}
