"""Tests for console: display-width alignment, numeric alignment, styling, wrapping.

Display widths are checked against wcwidth (the independent oracle for terminal columns);
small expected outputs are written out by hand.
"""

import io
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from wcwidth import wcswidth, wcwidth

import console

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ROOT = Path(__file__).resolve().parents[1]


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def separator_columns(line):
    """Display columns at which '|' occurs in `line`."""
    cols, col = [], 0
    for ch in line:
        if ch == "|":
            cols.append(col)
        col += max(wcwidth(ch), 0)
    return cols


def assert_aligned(table):
    lines = table.split("\n")
    assert len({wcswidth(line) for line in lines}) == 1, table
    assert len({tuple(separator_columns(line)) for line in lines}) == 1, table


def cells_of(line):
    return line.split("|")[1:-1]


# ----- tables ---------------------------------------------------------------------------

CJK_HEADERS = ["格式", "bits", "说明"]
CJK_ROWS = [["E4M3", 8, "最大值 448"],
            ["FP16 半精度", "16", "IEEE 754"],
            ["e\u0301", 3.25, ""]]


def test_table_cjk_hand_written():
    # 格式 is 4 columns wide; FP16 半精度 is 11; 最大值 448 is 10; e + U+0301 is 1.
    expected = textwrap.dedent("""\
        | 格式        | bits | 说明       |
        |-------------|------|------------|
        | E4M3        |    8 | 最大值 448 |
        | FP16 半精度 |   16 | IEEE 754   |
        | e\u0301           | 3.25 |            |""")
    assert console.format_table(CJK_HEADERS, CJK_ROWS) == expected


def test_table_cjk_same_display_width_and_separator_columns():
    table = console.format_table(CJK_HEADERS, CJK_ROWS)
    assert_aligned(table)
    # len() would disagree: the wide characters make code-point counts differ per line
    assert len({len(line) for line in table.split("\n")}) > 1


wide_text = st.lists(st.sampled_from(list("ab Z9.-格式半精度中") + ["e\u0301"]),
                     max_size=8).map("".join)
cell = st.one_of(wide_text, st.integers(-10**6, 10**6),
                 st.floats(allow_nan=False, allow_infinity=False, width=32))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4).flatmap(lambda n: st.tuples(
    st.lists(wide_text, min_size=n, max_size=n),
    st.lists(st.lists(cell, min_size=n, max_size=n), max_size=5))))
def test_table_aligned_for_any_cells(table_data):
    headers, rows = table_data
    table = console.format_table(headers, rows)
    assert_aligned(table)
    assert not any(line != line.rstrip() for line in table.split("\n"))
    assert len(table.split("\n")) == len(rows) + 2


@pytest.mark.parametrize("value", [7, -3, 2.5, np.float32(0.25), np.int64(42), "12.5%",
                                   "-3.1", "+6.0", "1,234", "1e-3", "2.5x", "inf"])
def test_numeric_cells_right_aligned(value):
    table = console.format_table(["a much wider header", "b"], [[value, "x"]])
    cell_text = cells_of(table.split("\n")[2])[0]
    assert cell_text.endswith(f"{value} ")
    assert cell_text.startswith("  ")  # padding went to the left


@pytest.mark.parametrize("value", ["E4M3", "abc", "v1", "1.2.3", "1,23", "-", "", True])
def test_text_cells_left_aligned(value):
    table = console.format_table(["a much wider header", "b"], [[value, "x"]])
    cell_text = cells_of(table.split("\n")[2])[0]
    assert cell_text.startswith(f" {value}")
    assert cell_text.endswith("  ")


def test_header_right_aligned_only_over_all_numeric_column():
    table = console.format_table(["n", "mixed"], [[10000, 10000], [1, "n/a"]])
    head = cells_of(table.split("\n")[0])
    assert head == ["     n ", " mixed "]


def test_table_without_rows():
    assert console.format_table(["a", "格式"], []) == "| a | 格式 |\n|---|------|"


@pytest.mark.parametrize("rows, index", [([[1, 2], [3]], 1), ([[1, 2, 3]], 0),
                                          ([[1, 2], [3, 4], []], 2)])
def test_wrong_row_length_raises_naming_row(rows, index):
    with pytest.raises(ValueError, match=rf"row {index} has {len(rows[index])} cells, "
                                         r"expected 2"):
        console.format_table(["a", "b"], rows)


def test_table_bad_input():
    with pytest.raises(ValueError, match="headers must not be empty"):
        console.format_table([], [])
    with pytest.raises(TypeError, match="headers"):
        console.format_table("ab", [["x", "y"]])
    with pytest.raises(TypeError, match="row 0"):
        console.format_table(["a", "b"], ["xy"])
    with pytest.raises(ValueError, match="row 0, column 1"):
        console.format_table(["a", "b"], [["x", "two\nlines"]])
    with pytest.raises(ValueError, match="row 0"):
        console.print_table(["a", "b"], [[1]], file=io.StringIO())


# ----- header ----------------------------------------------------------------------------

def test_header_layout():
    rule = "=" * 72
    assert console.format_header("Lecture 1: 格式") == f"\n{rule}\nLecture 1: 格式\n{rule}"
    long_title = "格" * 40  # 80 columns: the rule grows to the title
    assert console.format_header(long_title).split("\n")[1] == "=" * 80


def test_header_bad_input():
    for bad in ["", "   ", "two\nlines"]:
        with pytest.raises(ValueError):
            console.format_header(bad)
    with pytest.raises(TypeError):
        console.format_header(3)


# ----- observations ----------------------------------------------------------------------

def test_observations_hand_written():
    text = console.format_observations(
        ["E4M3 keeps three mantissa bits", "ok", "c", "d", "e", "f", "g", "h", "i",
         "ten items widen the numbers"], width=20)
    assert text == textwrap.dedent("""\
        What to notice:
         1. E4M3 keeps three
            mantissa bits
         2. ok
         3. c
         4. d
         5. e
         6. f
         7. g
         8. h
         9. i
        10. ten items widen
            the numbers""")


def test_observations_cjk_hand_written():
    # 9 wide characters at width 10: "1. " takes 3 columns, so 3 characters (6) per line
    text = console.format_observations(["一二三四五六七八九"], width=10)
    assert text == "What to notice:\n1. 一二三\n   四五六\n   七八九"


LONG = ("Rounding to nearest even keeps the error unbiased, so the mean of many quantized "
        "values stays close to the mean of the originals, while saturation clips the tail. ")


@pytest.mark.parametrize("width", [20, 41, 60, 100])
@pytest.mark.parametrize("item", [LONG * 3, "格式半精度中文没有空格" * 20,
                                  "mixed 中文 text 半精度 e\u0301 " * 15,
                                  "x" * 250, "word " + "格" * 120])
def test_observations_wrap_within_width(item, width):
    text = console.format_observations([item, "short"], width=width)
    lines = text.split("\n")
    assert lines[0] == "What to notice:"
    assert len(lines) > 3  # the long item really wrapped
    assert all(wcswidth(line) <= width for line in lines), text
    assert all(line == line.rstrip() for line in lines)
    assert lines[1].startswith("1. ") and lines[-1] == "2. short"
    assert all(line.startswith("   ") and line[3] != " " for line in lines[2:-1])
    # nothing lost or reordered: the words come back once line breaks are undone
    body = "".join(line[3:] for line in lines[1:-1])
    assert body.replace(" ", "") == item.replace(" ", "")


def test_observations_default_width_is_100():
    lines = console.format_observations([LONG * 4]).split("\n")
    assert max(wcswidth(line) for line in lines) <= 100
    assert max(wcswidth(line) for line in lines) > 90  # lines are filled, not cut short


def test_observations_bad_input():
    with pytest.raises(TypeError):
        console.format_observations("one string, not a list")
    with pytest.raises(ValueError, match="at least one"):
        console.format_observations([])
    with pytest.raises(ValueError, match="observation 1 is blank"):
        console.format_observations(["fine", "  "])
    with pytest.raises(TypeError, match="observation 0"):
        console.format_observations([3.5])
    with pytest.raises(ValueError, match="width"):
        console.format_observations(["x"], width=4)


# ----- styling ---------------------------------------------------------------------------

def print_all(stream):
    console.print_header("格式 header", file=stream)
    console.print_table(CJK_HEADERS, CJK_ROWS, file=stream)
    console.print_observations([LONG, "两个"], file=stream)
    return stream.getvalue()


def plain_all():
    return "\n".join([console.format_header("格式 header"),
                      console.format_table(CJK_HEADERS, CJK_ROWS),
                      console.format_observations([LONG, "两个"])]) + "\n"


def test_no_ansi_when_not_a_tty(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert print_all(io.StringIO()) == plain_all()
    assert "\x1b" not in plain_all()


def test_ansi_on_a_tty_and_alignment_kept(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = print_all(FakeTTY())
    assert out.count("\x1b[") >= 6
    assert ANSI.sub("", out) == plain_all()  # styling adds codes, never moves text
    assert all(line == line.rstrip() for line in out.split("\n"))


@pytest.mark.parametrize("value", ["1", "true", "anything"])
def test_no_color_disables_ansi_on_a_tty(monkeypatch, value):
    monkeypatch.setenv("NO_COLOR", value)
    assert print_all(FakeTTY()) == plain_all()


def test_empty_no_color_does_not_disable(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "")  # no-color.org: only a non-empty value counts
    assert "\x1b[" in print_all(FakeTTY())


def test_use_color_on_odd_streams(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    closed = io.StringIO()
    closed.close()  # isatty() now raises ValueError
    assert console.use_color(closed) is False
    assert console.use_color(object()) is False


def test_print_defaults_to_stdout(capsys):
    console.print_header("Section")
    console.print_table(["a"], [[1]])
    console.print_observations(["one"])
    assert capsys.readouterr().out == (console.format_header("Section") + "\n"
                                       + console.format_table(["a"], [[1]]) + "\n"
                                       + console.format_observations(["one"]) + "\n")


# ----- determinism -----------------------------------------------------------------------

SCRIPT = """
import console
console.print_header("格式 E4M3")
console.print_table(["格式", "bits", "max"], [["E4M3", 8, 448.0], ["半精度", "16", "6.5e4"]])
console.print_observations(["格式" * 80, "word " * 50])
"""


def test_piped_output_is_byte_identical_across_runs():
    outputs = []
    for seed in ["0", "1", "12345"]:
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONIOENCODING": "utf-8"}
        env.pop("NO_COLOR", None)
        proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env,
                              capture_output=True, check=True)
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1] == outputs[2]
    assert b"\x1b" not in outputs[0]
    assert "格式 E4M3".encode() in outputs[0]


def test_format_title_wraps_intro_and_rules_the_title():
    from console import format_title
    text = format_title("Lecture 05: basics", ["word " * 30, "短句"], width=40)
    lines = text.split("\n")
    assert lines[0] == lines[2] == "#" * 40 and lines[1] == "Lecture 05: basics"
    assert lines[3] == "" and all(len(line) <= 40 for line in lines)
    assert lines[-1] == "短句" and lines[-2] == ""
    with pytest.raises(TypeError):
        format_title("t", "a bare string")
    with pytest.raises(ValueError):
        format_title("  ")


def test_run_lecture_ends_quietly_when_the_pipe_closes():
    # Like `python lectures/05_... | head -1`: the reader leaves after one line.
    code = "from console import run_lecture; run_lecture(lambda: [print('x' * 80) for _ in range(200000)])"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err


def test_format_paragraph_wraps_by_display_width_and_chinese_rules():
    from console import display_width, format_paragraph
    assert format_paragraph("aa bb cc", width=5) == "aa bb\ncc"
    text = format_paragraph("中文没有空格，" * 8, width=20)
    lines = text.splitlines()
    assert all(display_width(line) <= 20 for line in lines) and len(lines) > 2
    assert not any(line.startswith("，") for line in lines)
    assert "".join(lines) == "中文没有空格，" * 8
    with pytest.raises(TypeError, match="text"):
        format_paragraph(5)
    with pytest.raises(ValueError, match="width"):
        format_paragraph("x", width=1)
