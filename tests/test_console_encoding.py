"""Output encodings that lack characters the lectures print: the fallback table, the check
before a lecture starts, and whole runs under GBK (Chinese Windows, redirected) and ASCII.

Oracles: Python's own codecs (what GBK and ASCII can encode), the UTF-8 run of the same
lecture with the table applied by hand here, and the source and catalog files themselves
(every character they hold is covered)."""

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from console.encoding import FALLBACKS, install_fallbacks, unprintable

ROOT = Path(__file__).resolve().parent.parent
ENV_VARS = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")


def encodes(text, encoding):
    try:
        text.encode(encoding)
    except UnicodeEncodeError:
        return False
    return True


def cjk(ch):
    return "\u3000" <= ch <= "\u9fff" or "\uff00" <= ch <= "\uffef"


def po_texts(keyword):
    """The msgid or msgstr texts of every catalog, read from the .po files directly."""
    out = []
    for po in list(ROOT.glob("lectures/locale/*/LC_MESSAGES/*.po")) + list(
            ROOT.glob("console/locale/*/LC_MESSAGES/*.po")):
        current = None
        for line in po.read_text(encoding="utf-8").splitlines():
            if line.startswith(("msgid ", "msgid_plural ", "msgstr")):
                current = line.split(" ", 1)[0].startswith(keyword)
                line = line.split(" ", 1)[1]
            if current and line.startswith('"'):
                out.append(line)
    return "".join(out)


def source_text():
    files = [p for pattern in ("lectures/**/*.py", "console/*.py", "numfmt/**/*.py")
             for p in ROOT.glob(pattern)]
    return "".join(p.read_text(encoding="utf-8") for p in files)


def test_every_character_the_lectures_print_has_a_fallback():
    english = {c for c in po_texts("msgid") + source_text() if not c.isascii() and not cjk(c)}
    chinese = {c for c in po_texts("msgstr") if not c.isascii()}
    assert english and chinese
    # English under ASCII: every non-ASCII character has an ASCII spelling
    assert sorted(c for c in english if not (FALLBACKS.get(c, "x").isascii()
                                             and c in FALLBACKS)) == []
    # Chinese (and English) under GBK: GBK has it, or its spelling is ASCII
    assert sorted(c for c in chinese | english if not encodes(c, "gbk")
                  and c not in FALLBACKS) == []
    assert all(v.isascii() for v in FALLBACKS.values())


def test_a_stream_writes_fallbacks_only_where_its_encoding_lacks_the_character():
    text = "x² ≈ Wᵀ … 中文\n"
    gbk = io.TextIOWrapper(io.BytesIO(), encoding="gbk")
    install_fallbacks(gbk)
    gbk.write(text)
    gbk.flush()
    assert gbk.buffer.getvalue() == "x^2 ≈ W^T … 中文\n".encode("gbk")   # GBK has ≈ and …
    ascii_ = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    install_fallbacks(ascii_)
    ascii_.write("x² ≈ Wᵀ … \u2603\n")          # a snowman: no entry, a backslash escape
    ascii_.flush()
    assert ascii_.buffer.getvalue() == b"x^2 ~= W^T ... \\u2603\n"
    utf8 = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    install_fallbacks(utf8)
    utf8.write(text)
    utf8.flush()
    assert utf8.errors == "strict" and utf8.buffer.getvalue() == text.encode("utf-8")


def test_unprintable_is_what_neither_the_encoding_nor_a_fallback_shows():
    assert unprintable("x² 中文", "gbk") == []
    assert unprintable("x² 中文", "ascii") == ["中", "文"]
    assert unprintable("x² 中文", "utf-8") == []
    assert unprintable("x²", "latin-1") == []                 # latin-1 has ²


def run(path, lang, encoding):
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    env.update(PYTHONIOENCODING=encoding, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, str(path), "--lang", lang], cwd=ROOT,
                       capture_output=True, timeout=300, env=env)
    return r.returncode, r.stdout, r.stderr


@pytest.mark.parametrize("lang, encoding", [("zh", "gbk"), ("en", "gbk"), ("en", "ascii")])
def test_lecture_02_runs_whole_under_gbk_and_ascii(lang, encoding):
    """``PYTHONIOENCODING=gbk python lectures/02_... --lang zh > out.txt``: the UTF-8 run's
    text with each character the encoding lacks spelt as the table says."""
    path = ROOT / "lectures" / "02_rounding_and_accumulation.py"
    code, out, err = run(path, lang, encoding)
    assert code == 0 and b"Traceback" not in err
    ref_code, ref, _ = run(path, lang, "utf-8")
    assert ref_code == 0
    want = "".join(c if encodes(c, encoding) else FALLBACKS[c] for c in ref.decode("utf-8"))
    assert out.decode(encoding) == want
    assert any(not encodes(c, encoding) for c in ref.decode("utf-8"))   # a fallback was used


def test_chinese_under_ascii_is_refused_before_anything_is_printed():
    code, out, err = run(ROOT / "lectures" / "02_rounding_and_accumulation.py", "zh", "ascii")
    assert code == 1 and out == b"" and b"PYTHONIOENCODING=utf-8" in err
    assert b"Traceback" not in err
