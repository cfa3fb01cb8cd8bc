"""The Chinese lectures: language choice, complete catalogs, and zh output that prints exactly
the numbers of the English output, fits 100 columns and is the same bytes run to run.

Lectures 08 and 09 need the real model: their en/zh comparisons render the demos' results
computed once by the session fixtures (tests/test_lecture08.py, tests/test_lecture09.py).
"""

from __future__ import annotations

import gettext
import re
import subprocess
import sys
from pathlib import Path

import pytest

from console import format_observations
from console.i18n import (Domain, current_language, language, resolve_language,
                          set_language)
from lectures import i18n
from lectures import i18n_catalogs as catalogs
import lecture_runs
from text_checks import english_runs, layout_problems, number_differences

ROOT = Path(__file__).resolve().parent.parent
LANG_VARS = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")


# --- choosing the language ------------------------------------------------------------------
@pytest.mark.parametrize("tag, want", [
    ("zh", "zh_CN"), ("zh_CN", "zh_CN"), ("zh_CN.UTF-8", "zh_CN"), ("zh-Hans", "zh_CN"),
    ("zh_TW.UTF-8", "zh_CN"), ("ZH", "zh_CN"), ("en", "en"), ("en_US.UTF-8", "en"),
    ("C", "en"), ("C.UTF-8", "en"), ("POSIX", "en"), ("fr_FR:zh_CN", "zh_CN"),
    ("de_DE:en_GB:zh", "en"), ("fr", None), ("", None), (None, None),
])
def test_resolve_language(tag, want):
    assert resolve_language(tag) == want


@pytest.mark.parametrize("env, want", [
    ({}, "en"), ({"LANG": "zh_CN.UTF-8"}, "zh_CN"), ({"LANG": "C.UTF-8"}, "en"),
    ({"LANG": "fr_FR.UTF-8"}, "en"),
    ({"LANG": "en_US.UTF-8", "LC_MESSAGES": "zh_CN.UTF-8"}, "zh_CN"),
    ({"LANG": "zh_CN.UTF-8", "LC_ALL": "C"}, "en"),
    ({"LC_ALL": "C", "LANGUAGE": "zh_CN"}, "zh_CN"),       # Python's gettext.find order
    ({"LANG": "zh_CN.UTF-8", "LANGUAGE": ""}, "zh_CN"),    # empty counts as unset
])
def test_language_from_environment(monkeypatch, env, want):
    for var in LANG_VARS:
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert current_language() == want


def test_set_language_overrides_environment_and_restores(monkeypatch):
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    with language("en"):
        assert current_language() == "en"
        with language("zh"):
            assert current_language() == "zh_CN"
        assert current_language() == "en"
    assert current_language() == "zh_CN"


@pytest.mark.parametrize("bad, err", [("fr", ValueError), ("klingon", ValueError),
                                      (5, TypeError), (b"zh", TypeError)])
def test_set_language_refuses(bad, err):
    with pytest.raises(err, match="language"):
        set_language(bad)
    assert set_language(None) in ("en", "zh_CN")


def test_lang_option_errors_name_the_option():
    r = subprocess.run([sys.executable, "lectures/03_scaling.py", "--lang", "fr"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "--lang" in r.stderr and "'fr'" in r.stderr
    assert r.stdout == ""


def test_console_heading_follows_language():
    with language("en"):
        assert format_observations(["x"]).splitlines()[0] == "What to notice:"
    with language("zh"):
        assert format_observations(["x"]).splitlines()[0] == "值得注意："
        assert format_observations(["x"], title="Own").splitlines()[0] == "Own："


# --- the catalogs -----------------------------------------------------------------------------
def test_domains_cover_every_lecture():
    lectures = sorted(p.name[:2] for p in (ROOT / "lectures").glob("[0-9][0-9]_*.py"))
    assert [f"lecture{n}" for n in lectures] == [d for d in i18n.DOMAINS if d[:7] == "lecture"]
    for name in i18n.DOMAINS:
        assert catalogs.source_files(name), name


@pytest.mark.parametrize("name", list(i18n.DOMAINS))
def test_catalog_complete(name):
    """Every marked message is translated (not fuzzy), none is obsolete, and each Chinese
    text has exactly the English text's {fields} and format specs."""
    assert catalogs.check_domain(name, "zh_CN") == []


@pytest.mark.parametrize("name", list(i18n.DOMAINS))
def test_catalog_compiles_with_babel(name, tmp_path):
    """The .po file compiles to a .mo file (Babel, as ``pybabel compile`` does) that Python's
    own gettext reads back with every translation."""
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po
    path = i18n.domain(name).catalog_path("zh_CN")
    if not catalogs.extract(name):
        pytest.skip(f"{name} marks no messages")
    with open(path, "rb") as f:
        catalog = read_po(f, locale="zh_CN")
    for m in catalog:   # str.format templates: Babel reads "5% of" as a %-placeholder "% o"
        m.flags.discard("python-format")
    assert not [err for _, errs in catalog.check() for err in errs]
    mo = tmp_path / "zh_CN" / "LC_MESSAGES" / f"{name}.mo"
    mo.parent.mkdir(parents=True)
    with open(mo, "wb") as f:
        write_mo(f, catalog)
    t = gettext.translation(name, tmp_path, languages=["zh_CN"])
    for m in catalog:
        if m.id and not m.pluralizable:
            got = t.pgettext(m.context, m.id) if m.context else t.gettext(m.id)
            assert got == m.string


def test_update_is_idempotent(tmp_path, monkeypatch):
    """``python -m lectures.i18n update`` on a complete catalog rewrites the same bytes."""
    name = "console"
    path = i18n.domain(name).catalog_path("zh_CN")
    before = path.read_bytes()
    copy = tmp_path / "zh_CN" / "LC_MESSAGES" / f"{name}.po"
    copy.parent.mkdir(parents=True)
    copy.write_bytes(before)
    monkeypatch.setitem(i18n._domains, name, Domain(name, tmp_path))
    catalogs.update_domain(name, "zh_CN")
    assert copy.read_bytes() == before


def test_missing_catalog_falls_back_to_english(tmp_path):
    d = Domain("nothing", tmp_path)
    with language("zh"):
        assert d.gettext("What to notice") == "What to notice"


def test_fuzzy_and_untranslated_entries_are_not_used(tmp_path):
    po = tmp_path / "zh_CN" / "LC_MESSAGES" / "demo.po"
    po.parent.mkdir(parents=True)
    po.write_text('msgid ""\nmsgstr "Content-Type: text/plain; charset=utf-8\\n"\n\n'
                  '#, fuzzy\nmsgid "a"\nmsgstr "甲"\n\nmsgid "b"\nmsgstr ""\n\n'
                  'msgid "c"\nmsgstr "丙"\n', encoding="utf-8")
    d = Domain("demo", tmp_path)
    with language("zh"):
        assert [d.gettext(k) for k in "abc"] == ["a", "b", "丙"]


# --- the lectures' output -------------------------------------------------------------------
FAST_LECTURES = sorted(p.name for p in (ROOT / "lectures").glob("0[1-7]_*.py"))


@pytest.fixture(scope="module", params=FAST_LECTURES)
def outputs(request, english_run):
    """One lecture printed three times: English (LANG=C.UTF-8, the session's shared run),
    Chinese by ``--lang zh``, and Chinese by ``LANG=zh_CN.UTF-8``."""
    script = request.param
    return (script, english_run(script),
            lecture_runs.run(script, ["--lang", "zh"]),
            lecture_runs.run(script, env=lecture_runs.environment(LANG="zh_CN.UTF-8")))


def test_zh_prints_the_english_numbers(outputs):
    script, en, zh, _ = outputs
    assert number_differences(en, zh) == [], script


def test_zh_is_translated(outputs):
    script, en, zh, _ = outputs
    assert zh != en
    assert english_runs(zh) == [], script


def test_zh_layout(outputs):
    script, en, zh, _ = outputs
    assert layout_problems(zh) == [], script
    assert len(zh.splitlines()) > 0.5 * len(en.splitlines())


def test_zh_same_bytes_from_flag_and_environment(outputs):
    """``--lang zh`` and ``LANG=zh_CN.UTF-8`` print the same bytes (two separate runs)."""
    script, _, zh, zh_env = outputs
    assert zh == zh_env, script



@pytest.mark.parametrize("name", [d for d in i18n.DOMAINS if d.startswith("lecture")])
def test_every_lecture_is_marked_for_translation(name):
    """Each lecture marks its text (titles, intros, headers, tables, observations)."""
    assert len(catalogs.extract(name)) >= 20, f"{name}: too few messages marked with _()"


# --- the glossary ------------------------------------------------------------------------------
def _glossary(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    start = text.index("| English | 中文 |")
    rows = []
    for line in text[start:].splitlines():
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_glossary_has_a_translation_for_every_term():
    """lectures/locale/GLOSSARY.md: one row per term, both columns filled, no term twice; both
    READMEs and the translators' guide point to it. (README.md against README.zh.md:
    tests/test_readme.py.)"""
    rows = _glossary(ROOT / "lectures" / "locale" / "GLOSSARY.md")
    assert len(rows) > 30
    english = []
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 2 and all(cells), row
        english.append(cells[0])
    assert len(english) == len(set(english))
    for doc in ("README.md", "README.zh.md", "lectures/locale/TRANSLATING.md"):
        assert "GLOSSARY.md" in (ROOT / doc).read_text(encoding="utf-8"), doc


#: Renderings the glossary rules out, each with the one it keeps: explorer is 探索器 (浏览器 is a
#: web browser), notebook is 笔记本, an exercise is "试一试。", ties-to-even is 平局取偶, a
#: notebook's title is the lecture's ("第 NN 讲：…", no 交互版).
FORBIDDEN_RENDERINGS = re.compile(
    r"浏览器|(?i:notebook)|动手试试|\*\*试试\*\*|\*\*试一试\*\*：|偶数优先|交互版")

#: Domains whose lecture prints "95 %" (a space before the sign) from its own code in both
#: languages: none; every Chinese text writes "0.1%", as lectures 01-13 print it.
SPACED_PERCENT: frozenset = frozenset()


def _zh_messages():
    """(catalog, Chinese text) of every message of every Chinese catalog."""
    from babel.messages.pofile import read_po
    paths = sorted((ROOT / "lectures" / "locale" / "zh_CN" / "LC_MESSAGES").glob("*.po")) + \
        sorted((ROOT / "labs" / "locale" / "zh_CN" / "LC_MESSAGES").glob("*.po"))
    for path in paths:
        with open(path, "rb") as f:
            for m in read_po(f):
                if m.id:
                    text = m.string if isinstance(m.string, str) else " ".join(m.string)
                    yield path.stem, text


def rendering_problems(messages) -> list[str]:
    """``catalog: text`` for every ruled-out rendering and every percent sign spaced against
    its catalog's convention; `code` spans (commands, paths) are left alone."""
    problems = []
    for name, text in messages:
        text = re.sub(r"`[^`]*`", "", text)
        bad = FORBIDDEN_RENDERINGS.findall(text)
        spaced = re.findall(r"[0-9}] %", text)
        if name not in SPACED_PERCENT:
            bad += spaced
        problems += [f"{name}: {b!r} in {text[:60]!r}" for b in bad]
    return problems


def test_one_rendering_per_term():
    assert rendering_problems(_zh_messages()) == []


def test_rendering_check_can_fail():
    assert rendering_problems([("notebook12", "运行本 notebook 的机器")]) != []
    assert rendering_problems([("notebook05", "格式浏览器")]) != []
    assert rendering_problems([("notebook01", "精确到 0.1 % 时")]) != []
    assert rendering_problems([("lecture11", "95 % 区间")]) != []
    assert rendering_problems([("lecture13", "丢失 6.9 % 的更新")]) != []
    assert rendering_problems([("notebook01", "运行 `jupyter lab notebooks/zh/`：0.1%")]) == []


# --- the checks themselves (they must be able to fail) ------------------------------------------
def test_text_checks_catch_what_they_claim():
    from text_checks import english_runs, layout_problems, number_differences
    assert number_differences("error 1,234.5% and 7x", "误差 1234.5% 与 7 倍") == []
    assert number_differences("16 values", "十六个值") == ["'16': 1x in English, 0x in Chinese"]
    assert english_runs("误差为 2.6%，FP8 E4M3 per channel") == []
    assert english_runs("the error grows fast，误差") != []
    two_tables = "| a | b |\n|---|---|\n| 1 | 2 |\n| xx | y |\n|----|---|\n| 1  | 2 |"
    assert layout_problems(two_tables) == []
    assert layout_problems("| a | b |\n|---|---|\n| 1 | 22 |") != []
    assert layout_problems("中" * 51) != [] and layout_problems("中" * 50) == []


def test_pgettext_keeps_two_translations_of_one_word_apart():
    """A message with a context (msgctxt) is looked up by context and text: lecture 08's table
    header "quantized" and its figures' "quantized" (model) read differently in Chinese."""
    d = i18n.domain("lecture08")
    with language("zh"):
        assert d.gettext("quantized") == "量化对象"
        assert d.pgettext("quantized model", "quantized") == "量化后"
    with language("en"):
        assert d.pgettext("quantized model", "quantized") == "quantized"
