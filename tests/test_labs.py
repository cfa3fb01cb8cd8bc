"""The labs' checker: the reference solutions pass, the stubs are "not done" without a
traceback, typical student bugs planted in copies of the solutions are caught with a minimal
counterexample, a student's exception or syntax error is reported as their file and line, and
the Chinese report comes from a complete catalog."""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from labs.grading import DONE, NOT_DONE, WRONG, grade_lab, lab_numbers, load_lab, report, stub_docs

ROOT = Path(__file__).resolve().parent.parent
LABS = ROOT / "labs"
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8", "LANGUAGE": ""}


def run_labs(*args):
    return subprocess.run([sys.executable, "-m", "labs", *args], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=300)


def test_solutions_all_pass():
    done = run_labs("check", "--solutions")
    total = sum(len(load_lab(nn).exercises) for nn in lab_numbers())
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith(f"{total} of {total} exercises done")
    assert "Traceback" not in done.stdout + done.stderr


def test_stubs_are_not_done_without_traceback():
    done = run_labs("check")
    total = sum(len(load_lab(nn).exercises) for nn in lab_numbers())
    assert done.returncode == 1
    assert done.stdout.count("not done ") == total
    assert done.stdout.strip().endswith(f"0 of {total} exercises done")
    assert "Traceback" not in done.stdout + done.stderr and done.stderr == ""


def test_the_labs_cover_every_lecture():
    """2-5 exercises per lecture, 30 or more in all; every exercise has a stub with a
    docstring ending in its hints, and a reference solution."""
    assert lab_numbers() == [f"{n:02d}" for n in range(1, 13)]
    counts = [len(load_lab(nn).exercises) for nn in lab_numbers()]
    assert all(2 <= c <= 5 for c in counts) and sum(counts) >= 30
    for nn in lab_numbers():
        lab = load_lab(nn)
        docs = stub_docs(lab)
        solved = {n.name for n in ast.parse((LABS / "solutions" / lab.file).read_text()).body
                  if isinstance(n, ast.FunctionDef)}
        for ex in lab.exercises:
            assert re.search(r"\n\s*Hints\n\s*-----\n", docs[ex.name]), (lab.file, ex.name)
            assert "Source\n" in docs[ex.name], (lab.file, ex.name)
            assert ex.name in solved, (lab.file, ex.name)


# (lab, exercise, text of the solution, the bug a student typically writes)
PLANTED = [
    ("05", "quantize_affine", "np.round(x / scale)",
     "np.sign(x / scale) * np.floor(np.abs(x / scale) + 0.5)"),         # half away from zero
    ("05", "mx_scale_exponent", "e = np.where(m > 0.5, k, k - 1)", "e = k - 1"),  # floor, not RCEIL
    ("04", "int8_gemm", "a32 @ b32 - np.int32(zero_a) * b32.sum(axis=0)", "a32 @ b32"),
    ("05", "quantize_groups", "amax = np.abs(xg).max(axis=-1, keepdims=True)",
     "amax = np.abs(np.roll(x, 1, axis=1).reshape(xg.shape)).max(axis=-1, keepdims=True)"),
    ("02", "round_to_format", "np.rint(a / step)", "np.floor(a / step + 0.5)"),
    ("02", "round_to_format", "e = np.maximum(k - 1, emin)", "e = k - 1"),   # no subnormals
    ("07", "pack_nibbles", "codes[0::2] | (codes[1::2] << 4)", "codes[1::2] | (codes[0::2] << 4)"),
    ("06", "fake_quantize", "return y + mask * (x - x.detach())", "return y + (x - x.detach())"),
    ("10", "update_loss_scale", "return scale, good", "return scale, growth_tracker"),
    ("08", "kv_quantize", "zero_point = np.clip(np.round(-lo / scale), 0, qmax)",
     "zero_point = np.clip(np.floor(-lo / scale), 0, qmax)"),
]


def plant(tmp_path, nn, old, new):
    lab = load_lab(nn)
    text = (LABS / "solutions" / lab.file).read_text()
    assert text.count(old) == 1, old
    path = tmp_path / lab.file
    path.write_text(text.replace(old, new))
    return lab, path


@pytest.mark.parametrize("nn, name, old, new", PLANTED, ids=[f"{p[0]}-{p[1]}-{i}"
                                                               for i, p in enumerate(PLANTED)])
def test_planted_bug_is_caught(tmp_path, nn, name, old, new, capsys):
    lab, path = plant(tmp_path, nn, old, new)
    _, results, error = grade_lab(nn, path, names=[name])
    assert error is None
    (result,) = results
    assert result.status == WRONG, (name, new)
    assert result.lines[0] in ("failing edge case:", "smallest failing input found:")
    assert any(line.startswith("wrong output:") for line in result.lines), result.lines
    report(lab, results, None, stub_docs(lab))
    out = capsys.readouterr().out
    assert "Hints" in out and "Traceback" not in out


def test_counterexamples_are_minimal(tmp_path):
    """hypothesis shrinks a wrong answer found at random to a small input: the floor rule's
    first failure is one block maximum; the missing zero point's a 1 x 1 product."""
    _, path = plant(tmp_path, "05", "e = np.where(m > 0.5, k, k - 1)", "e = k - 1")
    lab = load_lab("05")
    lab.exercises[3].cases.clear()
    try:
        _, (result,), _ = grade_lab("05", path, names=["mx_scale_exponent"])
    finally:
        import importlib
        importlib.reload(sys.modules["labs.checks.lab05"])
    assert result.status == WRONG
    shown = "\n".join(result.lines)
    assert re.search(r"amax = array\(\[[^,\]]+\]\)", shown), shown        # one element
    assert "rule = 'rceil'" in shown


def test_bits_are_shown(tmp_path):
    _, path = plant(tmp_path, "02", "np.rint(a / step)", "np.floor(a / step + 0.5)")
    _, (result,), _ = grade_lab("02", path, names=["round_to_format"])
    assert "expected 0x38 (1.0), got 0x39 (1.125)" in "\n".join(result.lines), result.lines
    _, path = plant(tmp_path, "02", "e = np.maximum(k - 1, emin)", "e = k - 1")
    _, (result,), _ = grade_lab("02", path, names=["round_to_format"])
    assert ("expected 0x02 (0.00390625), got 0x3f68000000000000 (0.0029296875) (off the E4M3 "
            "grid)") in "\n".join(result.lines), result.lines


def test_student_exception_shows_their_line(tmp_path):
    lab, path = plant(tmp_path, "01", "    e = code >> man_bits & ((1 << exp_bits) - 1)\n",
                      "    e = code >> man_bits & ((1 << exp_bit) - 1)\n")
    done = run_labs("check", "01", "--file", str(path))
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    line = path.read_text().splitlines().index("    e = code >> man_bits & ((1 << exp_bit) - 1)")
    assert f"{path}:{line + 1}: e = code >> man_bits & ((1 << exp_bit) - 1)" in done.stdout
    assert "NameError: name 'exp_bit' is not defined" in done.stdout
    assert "2 of 3 exercises done" in done.stdout


def test_syntax_error_shows_their_line(tmp_path):
    lab, path = plant(tmp_path, "12", "return max(flops / peak_flops, nbytes / bandwidth)",
                      "return max(flops / peak_flops, nbytes / bandwidth")
    done = run_labs("check", "12", "--file", str(path))
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    assert "SyntaxError" in done.stdout and str(path) in done.stdout
    assert "0 of 3 exercises done" in done.stdout


def test_chinese_report_and_catalog():
    from labs.i18n import check
    assert check("zh_CN") == []
    done = run_labs("check", "05", "--lang", "zh")
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    assert "未完成" in done.stdout and "共 5 个练习，完成 0 个" in done.stdout
    assert "not done" not in done.stdout and "Return the" not in done.stdout
    shown = run_labs("show", "05", "--lang", "zh")
    assert shown.returncode == 0 and "提示" in shown.stdout and "Hints" not in shown.stdout


def test_grade_folder_to_csv(tmp_path):
    """Two students' submissions graded into a CSV: one right, one with lab 12 left undone."""
    for student, source in (("ada", LABS / "solutions"), ("bob", LABS)):
        (tmp_path / "subs" / student).mkdir(parents=True)
        f = load_lab("12").file
        (tmp_path / "subs" / student / f).write_text((source / f).read_text())
    done = run_labs("grade", str(tmp_path / "subs"), "--csv", str(tmp_path / "g.csv"))
    assert done.returncode == 0, done.stderr
    rows = (tmp_path / "g.csv").read_text().splitlines()
    assert rows[0] == "student,lab,exercise,status"
    assert rows[1:] == [f"ada,12,{e.name},{DONE}" for e in load_lab("12").exercises] + \
        [f"bob,12,{e.name},{NOT_DONE}" for e in load_lab("12").exercises]


def test_release_leaves_out_solutions(tmp_path):
    from labs.instructor import release
    n = release(tmp_path / "out")
    assert n > 100
    assert not (tmp_path / "out" / "labs" / "solutions").exists()
    assert (tmp_path / "out" / "labs" / "05_quantization_basics.py").is_file()


@pytest.mark.parametrize("nn", lab_numbers())
def test_notebooks_end_with_their_lab_cells(nn):
    """Each notebook, English and Chinese, ends with the Lab cells labs.notebook_cells makes
    (re-run it after re-storing a notebook), the check cell unexecuted and skipped by nbval."""
    import nbformat

    from labs import notebook_cells
    from lectures.i18n_notebooks import english_path, zh_path
    for path, lang in ((english_path(nn), "en"), (zh_path(nn), "zh_CN")):
        last = nbformat.read(path, as_version=4).cells[-2:]
        want = notebook_cells.cells(nn, lang)
        assert [(c.cell_type, c.id, c.source) for c in last] == \
            [(c.cell_type, c.id, c.source) for c in want], path.name
        assert "nbval-skip" in last[1].metadata.get("tags", [])
        assert last[1].execution_count is None
    assert load_lab(nn).file in notebook_cells.markdown(nn)


def test_comparisons():
    """Bit for bit: the sign of zero counts, NaN matches NaN, an int is not 7.5, shapes must
    agree; within a tolerance: as stated."""
    import numpy as np

    from labs.checks.common import close, exact
    assert not exact()(np.array([0.0]), np.array([-0.0])).ok
    assert exact()(np.array([np.nan]), np.array([np.nan])).ok
    assert not exact()(7, 7.5).ok and exact()(448, 448.0).ok
    assert not exact()(np.zeros(3), np.zeros(4)).ok
    assert not exact()((1.0,), (1.0, 2.0)).ok
    assert "0x3ff0000000000001" in exact()(np.nextafter(1.0, 2.0), 1.0).detail
    assert close(1e-9)(1.0 + 1e-10, 1.0).ok and not close(1e-9)(1.0 + 1e-8, 1.0).ok


def test_the_notebook_lab_cell_runs_twice(capsys):
    """A student reruns the Lab cell: ``labs.check`` stays the function (a submodule of the
    same name would replace it on first import)."""
    import labs
    assert labs.check("01") is False and labs.check("01") is False
    assert capsys.readouterr().out.count("not done decode") == 2
