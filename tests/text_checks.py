"""Checks of a lecture's printed text shared by the tests of its English and Chinese output.

Plain functions (not tests): each returns a list of problems, empty when all is well, so a
failing assertion shows every offending line at once.
"""

from __future__ import annotations

import io
import re
from contextlib import redirect_stdout
from collections import Counter

from console import display_width
from console.i18n import language

WIDTH = 100

_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
# Three or more English words in a row: prose that was not translated. Single words and
# pairs (format names, "numfmt.ptq", "pip install") are allowed.
_ENGLISH_RUN = re.compile(r"(?<![A-Za-z0-9_./-])[A-Za-z]{2,}(?:[ -][a-z]{2,}){2,}(?![A-Za-z])")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def numbers(text: str) -> Counter:
    """The multiset of decimal numbers in `text` (thousands separators removed)."""
    return Counter(_NUMBER.findall(_THOUSANDS.sub("", _ANSI.sub("", text))))


def number_differences(en: str, zh: str) -> list[str]:
    """The numbers printed a different number of times in `en` and in `zh`."""
    a, b = numbers(en), numbers(zh)
    return [f"{n!r}: {a[n]}x in English, {b[n]}x in Chinese"
            for n in sorted(a.keys() | b.keys()) if a[n] != b[n]]


def english_runs(zh: str, allowed=()) -> list[str]:
    """Lines of `zh` holding three or more English words in a row (untranslated text)."""
    out = []
    for line in zh.splitlines():
        for m in _ENGLISH_RUN.finditer(line):
            if not any(a in m.group(0) for a in allowed):
                out.append(f"{m.group(0)!r} in {line!r}")
    return out


def layout_problems(text: str, width: int = WIDTH) -> list[str]:
    """Lines wider than `width` columns, and tables whose rows differ in display width."""
    out, table = [], []
    for line in _ANSI.sub("", text).splitlines() + [""]:
        if display_width(line) > width:
            out.append(f"{display_width(line)} columns: {line!r}")
        if line.startswith("|-") and len(table) > 2:    # a second table right below the first:
            out += _misaligned(table[:-1])             # its header row was the last line read
            table = table[-1:]
        if line.startswith("|"):
            table.append(line)
            continue
        out += _misaligned(table)
        table = []
    return out


def _misaligned(table: list[str]) -> list[str]:
    if len({display_width(row) for row in table}) > 1:
        return ["misaligned table:\n" + "\n".join(table)]
    return []


def render(show, result, lang: str) -> str:
    """What ``show(result)`` prints in language `lang` (a lecture's ``show_demoN``)."""
    buf = io.StringIO()
    with language(lang), redirect_stdout(buf):
        show(result)
    return buf.getvalue()
