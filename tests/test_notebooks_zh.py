"""The Chinese notebooks (notebooks/zh/): generated from the English ones and the catalogs, up
to date, with the English numbers, and with figures whose Chinese text has a font.

nbval executes them like the English notebooks (pyproject's testpaths include notebooks/).
"""

from __future__ import annotations

import collections
import copy
import os
import re
import warnings
from pathlib import Path

import matplotlib
import nbformat
import pytest
from fontTools.ttLib import TTFont
from matplotlib import font_manager
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text

from console.i18n import language
from lectures import i18n
from lectures import i18n_notebooks as zh
from lectures.widgets import fonts
from lectures.widgets.fonts import CJK_FONT, cjk_font_path, use_language_fonts
from text_checks import number_differences

ROOT = Path(__file__).resolve().parent.parent
TRANSLATED = list(zh.TRANSLATED)


def _cmap(path: str) -> set[int]:
    """The code points font file `path` maps to glyphs, read by fontTools (not matplotlib)."""
    with TTFont(path, fontNumber=0, lazy=True) as font:
        return set(font.getBestCmap())


def _is_cjk(ch: str) -> bool:
    return "\u3000" <= ch <= "\u9fff" or "\uff00" <= ch <= "\uffef"


def _text(outputs) -> str:
    """The text a code cell printed or returned (streams and text/plain), joined."""
    parts = []
    for o in outputs:
        if o.output_type == "stream":
            parts.append(o.text)
        elif o.output_type in ("execute_result", "display_data"):
            parts.append(o.data.get("text/plain", ""))
        elif o.output_type == "error":
            parts.append("\n".join(o.traceback))
    return "\n".join(parts)


# --- the font ---------------------------------------------------------------------------------
def test_cjk_font_is_found_for_every_chinese_glyph_drawn():
    """A figure drawn in Chinese: every character of every text is in the cmap of a font that
    matplotlib's font lookup gives that text, the Chinese ones in Noto Sans SC, and drawing
    warns nothing (matplotlib warns ``Glyph ... missing from font(s)`` for a box)."""
    L = __import__("importlib").import_module("lectures.01_number_formats")
    from lectures.widgets import lecture01 as W
    with matplotlib.rc_context(), language("zh"):
        use_language_fonts()
        fig = W.plot_value_grids(L.demo2_value_grids())
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            FigureCanvasAgg(fig).draw()
        texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text()]
        drawn = "".join(t.get_text() for t in texts)
        assert sum(map(_is_cjk, drawn)) > 10, drawn     # the figure's text is Chinese
        cjk_path = cjk_font_path()
        for t in texts:
            fonts = [str(p) for p in font_manager.fontManager._find_fonts_by_props(
                t.get_fontproperties())]
            cmaps = [_cmap(p) for p in fonts]
            for ch in set(t.get_text()) - set(" \n$"):
                first = next((p for p, c in zip(fonts, cmaps) if ord(ch) in c), None)
                assert first is not None, (ch, t.get_text(), fonts)
                if _is_cjk(ch):                 # the same file, by whichever path
                    assert os.path.samefile(first, cjk_path), (ch, first)
        assert os.path.samefile(font_manager.findfont(font_manager.FontProperties(
            family=CJK_FONT), fallback_to_default=False), cjk_path)


def test_cjk_font_covers_every_translated_string():
    """Every character of the Chinese catalogs of the translated notebooks and their lectures
    is in DejaVu Sans or Noto Sans SC."""
    from babel.messages.pofile import read_po
    fonts = _cmap(font_manager.findfont("DejaVu Sans")) | _cmap(cjk_font_path())
    chars = set()
    for nn in TRANSLATED:
        for name in (f"notebook{nn}", f"lecture{nn}"):
            with open(i18n.domain(name).catalog_path("zh_CN"), "rb") as f:
                chars |= {ch for m in read_po(f) if m.id for ch in str(m.string)}
    assert sorted(ch for ch in chars - set("\n\t") if ord(ch) not in fonts) == []


def test_use_language_fonts_sets_and_removes_the_cjk_font():
    with matplotlib.rc_context():
        assert use_language_fonts("zh")[-1] == CJK_FONT
        assert CJK_FONT not in use_language_fonts("en")
        assert matplotlib.rcParams["font.family"] == ["sans-serif"]
    with pytest.raises(ValueError, match="lang"):
        use_language_fonts("fr")
    with pytest.raises(TypeError, match="lang"):
        use_language_fonts(3)



def test_choose_cjk_font_prefers_a_package_then_the_listed_order():
    """The fallback order over a made-up machine: a packaged font first, then the system's
    fonts in CJK_FAMILIES' order whatever order the system lists them in."""
    system = [("DejaVu Sans", "/f/dv.ttf"), ("WenQuanYi Zen Hei", "/f/wqy.ttc"),
              ("SimHei", "/f/simhei.ttf"), ("Microsoft YaHei", "/f/msyh.ttc"),
              ("Noto Sans CJK SC", "/f/noto.otf")]
    assert fonts.choose_cjk_font([("Noto Sans SC", "/p/sc.otf")], system) == (
        "Noto Sans SC", "/p/sc.otf")
    assert fonts.choose_cjk_font([], system) == ("Noto Sans CJK SC", "/f/noto.otf")
    assert fonts.choose_cjk_font([], system[:4]) == ("Microsoft YaHei", "/f/msyh.ttc")
    assert fonts.choose_cjk_font([], system[:3]) == ("SimHei", "/f/simhei.ttf")
    assert fonts.choose_cjk_font([], system[:2]) == ("WenQuanYi Zen Hei", "/f/wqy.ttc")
    assert fonts.choose_cjk_font([], system[:1]) is None
    assert fonts.choose_cjk_font([], [("PingFang SC", "/a"), ("PingFang SC", "/b"),
                                      ("Source Han Sans SC", "/c")]) == ("Source Han Sans SC",
                                                                          "/c")


def test_a_system_font_serves_without_the_font_package(monkeypatch):
    """Without a font package, a Chinese font the system has (here the packaged file under a
    system family's name) becomes the figures' font."""
    real = cjk_font_path()
    monkeypatch.setattr(fonts, "_packaged_fonts", lambda: [])
    monkeypatch.setattr(fonts, "_system_fonts", lambda: [("DejaVu Sans", "/f/dv.ttf"),
                                                         ("PingFang SC", real)])
    with matplotlib.rc_context():
        assert use_language_fonts("zh") == ["sans-serif", "PingFang SC"]
        assert use_language_fonts("en") == ["sans-serif"]
    assert cjk_font_path() == real


def test_a_font_installed_after_matplotlib_listed_the_fonts_is_found(monkeypatch, tmp_path):
    """matplotlib caches its font list and never rescans: a Chinese font installed later (here
    the packaged file copied into a new font folder) is found by reading the folders again,
    and only when the cached list has no Chinese font."""
    import shutil

    from matplotlib import font_manager
    monkeypatch.setattr(font_manager.fontManager, "ttflist", list(font_manager.fontManager.ttflist))
    new = tmp_path / "fonts" / "NotoSansSC-copy.otf"
    new.parent.mkdir()
    shutil.copy(cjk_font_path(), new)
    assert fonts._fonts_new_to_matplotlib([str(new.parent)]) == [("Noto Sans SC", str(new))]
    assert fonts._fonts_new_to_matplotlib([str(new.parent)]) == []        # now in the list
    monkeypatch.setattr(fonts, "_packaged_fonts", lambda: [])
    monkeypatch.setattr(fonts, "_system_fonts", lambda: [("DejaVu Sans", "/f/dv.ttf")])
    monkeypatch.setattr(fonts, "_fonts_new_to_matplotlib",
                        lambda: [("DejaVu Serif", "/f/dvs.ttf"), ("SimHei", "/f/simhei.ttf")])
    assert fonts.cjk_font() == ("SimHei", "/f/simhei.ttf")
    monkeypatch.setattr(fonts, "_system_fonts", lambda: [("WenQuanYi Zen Hei", "/f/wqy.ttc")])
    monkeypatch.setattr(fonts, "_fonts_new_to_matplotlib", lambda: 1 / 0)    # never read
    assert fonts.cjk_font() == ("WenQuanYi Zen Hei", "/f/wqy.ttc")


def test_no_cjk_font_warns_what_to_install_and_does_not_raise(monkeypatch):
    monkeypatch.setattr(fonts, "_packaged_fonts", lambda: [])
    monkeypatch.setattr(fonts, "_system_fonts", lambda: [("DejaVu Sans", "/f/dv.ttf")])
    monkeypatch.setattr(fonts, "_fonts_new_to_matplotlib", lambda: [])
    with matplotlib.rc_context():
        with pytest.warns(fonts.NoCJKFontWarning, match="fonts-noto-cjk"):
            assert use_language_fonts("zh") == ["sans-serif"]
        with pytest.raises(FileNotFoundError, match="pip install"):
            cjk_font_path()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert use_language_fonts("en") == ["sans-serif"]

# --- generation -------------------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "one\n\ntwo\n\n\nthree", "a\n```\nx = 1\n\ny = 2\n```\n\nb",
    "<details><summary>Answer</summary>\n\nYes.\n</details>", "", "one paragraph\nof two lines\n"])
def test_markdown_split_is_lossless(text):
    assert zh.translate_markdown(text, lambda p: p) == text
    assert zh.translate_markdown(text, lambda p: "X").count("X") == len(zh.markdown_messages(text))


def test_markdown_messages():
    assert zh.markdown_messages("a\n```\nx = 1\n\ny = 2\n```\n\n</details>\n\nb") == [
        "a\n```\nx = 1\n\ny = 2\n```", "b"]


@pytest.mark.parametrize("nn", TRANSLATED)
def test_build_refuses_an_untranslated_paragraph(nn):
    english = nbformat.read(zh.english_path(nn), as_version=4)
    changed = copy.deepcopy(english)
    cell = next(c for c in changed.cells if c.cell_type == "markdown")
    cell.source += "\n\nA paragraph nobody has translated yet."
    with pytest.raises(ValueError, match="untranslated"):
        zh.build(nn, english=changed)


@pytest.mark.parametrize("nn", TRANSLATED)
def test_zh_notebook_is_generated_from_the_current_sources(nn):
    """The committed Chinese notebook is what the generator makes from the English notebook and
    the catalog now: same cells, ids, metadata tags, code; translated markdown. A stale one
    (English or catalog changed since) fails: rerun ``python -m lectures.i18n_notebooks``."""
    want = zh.build(nn)
    got = nbformat.read(zh.zh_path(nn), as_version=4)
    assert [(c.cell_type, c.get("id"), c.source, c.metadata.get("tags"),
             c.metadata.get("jupyter")) for c in got.cells] == \
        [(c.cell_type, c.get("id"), c.source, c.metadata.get("tags"), c.metadata.get("jupyter"))
         for c in want.cells]


#: Notebooks that time the machine they run on: their cells that nbval does not compare print
#: other speeds in every run, so there the Chinese numbers are not compared either.
MEASURES_THE_MACHINE = {"12"}


def _nbval_leaves_alone(cell) -> bool:
    """Whether nbval skips the code cell or ignores its output (a tag, or a comment marker)."""
    first = cell.source.lstrip().split("\n", 1)[0].strip()
    return (first in ("# NBVAL_IGNORE_OUTPUT", "# NBVAL_SKIP")
            or bool({"nbval-ignore-output", "nbval-skip"} & set(cell.metadata.get("tags", []))))


@pytest.mark.parametrize("nn", TRANSLATED)
def test_zh_notebook_has_the_english_code_and_numbers(nn):
    english = nbformat.read(zh.english_path(nn), as_version=4)
    chinese = nbformat.read(zh.zh_path(nn), as_version=4)
    language_cells = [c for c in chinese.cells if c.get("id") == zh.LANGUAGE_CELL_ID]
    assert len(language_cells) == 1 and language_cells[0].source == zh.LANGUAGE_CELL
    assert [o.output_type for o in language_cells[0].outputs
            if o.output_type == "execute_result"] == []      # no stray 'zh_CN' on the page
    cells = [c for c in chinese.cells if c.get("id") != zh.LANGUAGE_CELL_ID]
    assert [c.cell_type for c in cells] == [c.cell_type for c in english.cells]
    for en, zc in zip(english.cells, cells):
        if en.cell_type != "code":
            assert zc.source != en.source or not zh.markdown_messages(en.source)
            continue
        assert zc.source == en.source
        # committed executed, except the cells the English notebook keeps unexecuted (a
        # real-model run stored in markdown instead)
        assert (zc.execution_count is None) == (en.execution_count is None), en.source
        if not (nn in MEASURES_THE_MACHINE and _nbval_leaves_alone(en)):
            assert number_differences(_text(en.outputs), _text(zc.outputs)) == [], en.source
        kinds = [sorted(o.data) for o in en.outputs if "data" in o]    # figures, widgets
        assert kinds == [sorted(o.data) for o in zc.outputs if "data" in o], en.source
        assert "missing from font" not in _text(zc.outputs)
        assert not [o for o in zc.outputs if o.output_type == "error"]


@pytest.mark.parametrize("nn", TRANSLATED)
def test_zh_notebook_stores_its_own_figures_in_markdown(nn):
    """A figure stored in a markdown cell (a real-model run kept without the model) has the
    English cell's name and is another image: the Chinese run's, not the English one copied."""
    english = nbformat.read(zh.english_path(nn), as_version=4)
    chinese = nbformat.read(zh.zh_path(nn), as_version=4)
    zh_cells = {c.get("id"): c for c in chinese.cells}
    for cell in english.cells:
        if cell.cell_type == "markdown" and cell.get("attachments"):
            stored = zh_cells[cell.get("id")].get("attachments", {})
            assert set(stored) == set(cell.attachments)
            for key, att in cell.attachments.items():
                assert stored[key]["image/png"] != att["image/png"], key


@pytest.mark.parametrize("nn", ["08"])     # the notebook that stores figures in markdown
def test_regenerating_keeps_the_chinese_figures(nn):
    english = nbformat.read(zh.english_path(nn), as_version=4)
    chinese = nbformat.read(zh.zh_path(nn), as_version=4)
    rebuilt = zh.build(nn, english=english)
    assert zh.keep_attachments(rebuilt, chinese) == sum(
        1 for c in english.cells if c.cell_type == "markdown" and c.get("attachments"))
    assert [c.get("attachments") for c in rebuilt.cells if c.cell_type == "markdown"] == [
        c.get("attachments") for c in chinese.cells if c.cell_type == "markdown"]


def test_replace_text_block():
    from lectures.i18n_timed import replace_text_block
    stored = "**Stored** (one run)\n```text\nold\nlines\n```\n![f](attachment:figure1.png)"
    assert replace_text_block(stored, "\n====\nnew\n") == \
        "**Stored** (one run)\n```text\n====\nnew\n```\n![f](attachment:figure1.png)"
    assert replace_text_block(stored, "no newline") == \
        "**Stored** (one run)\n```text\nno newline\n```\n![f](attachment:figure1.png)"
    with pytest.raises(ValueError, match="text block"):
        replace_text_block("**Stored**, nothing kept", "x")


@pytest.mark.parametrize("nn", sorted(MEASURES_THE_MACHINE))
def test_timed_cells_are_stored_in_markdown_and_skipped(nn):
    """What ``python -m lectures.i18n_timed NN`` re-stores: each timed cell is skipped by nbval,
    stored unexecuted, with its run in the markdown cell ``<id>-stored`` in both editions."""
    from lectures.i18n_timed import TIMED, timed_cells
    assert nn in TIMED
    for path in (zh.english_path(nn), zh.zh_path(nn)):
        nb = nbformat.read(path, as_version=4)
        cells = {c.get("id"): c for c in nb.cells}
        timed = timed_cells(nb)
        assert len(timed) >= 2, path
        for cid in timed:
            assert "nbval-skip" in cells[cid].metadata.get("tags", [])
            assert cells[cid].execution_count is None and cells[cid].outputs == []
            assert "```text\n" in cells[f"{cid}-stored"].source


@pytest.mark.parametrize("nn", TRANSLATED)
def test_notebook_titles_are_the_lectures(nn):
    """Every notebook opens with its lecture's number and topic, one form in each language:
    ``# Lecture NN: …`` and ``# 第 NN 讲：…``."""
    first = {lang: nbformat.read(path, as_version=4).cells[0].source.splitlines()[0]
             for lang, path in (("en", zh.english_path(nn)), ("zh", zh.zh_path(nn)))}
    assert re.fullmatch(rf"# Lecture {nn}: [a-z][^:]*(: .+)?", first["en"]), first["en"]
    assert re.fullmatch(rf"# 第 {nn} 讲：(?!.*交互版).+", first["zh"]), first["zh"]


@pytest.mark.parametrize("nn", TRANSLATED)
def test_zh_notebook_prints_chinese(nn):
    chinese = nbformat.read(zh.zh_path(nn), as_version=4)
    printed = "".join(_text(c.outputs) for c in chinese.cells if c.cell_type == "code"
                      and "answer" not in c.metadata.get("tags", []))
    # a real-model run stored in markdown: its ```text blocks are what the lecture printed
    stored = "".join(block for c in chinese.cells if c.cell_type == "markdown"
                     for block in re.findall(r"```text\n(.*?)```", c.source, re.S))
    assert sum(map(_is_cjk, printed + stored)) > 200


def test_every_translated_notebook_has_a_catalog_domain():
    assert [f"notebook{nn}" for nn in TRANSLATED] == [
        d for d in i18n.DOMAINS if d.startswith("notebook")]
    assert sorted(p.name for p in zh.ZH_DIR.glob("*.ipynb")) == sorted(
        zh.zh_path(nn).name for nn in TRANSLATED)


#: A number as the lectures print it: 393,856 / 3.915 / 1.21e-10 / 2^16's 16.
NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?(?:e[+-]?\d+)?")


@pytest.mark.parametrize("nn", TRANSLATED)
def test_stored_runs_in_markdown_carry_the_english_numbers(nn):
    """A run kept as text in a markdown cell (a real-model run) is printed in Chinese with
    every number of the English one, as many times. A notebook that times the machine stores a
    run of its own in each language: other speeds."""
    if nn in MEASURES_THE_MACHINE:
        pytest.skip("its stored runs are timings, measured once per language")
    english = nbformat.read(zh.english_path(nn), as_version=4)
    chinese = {c.get("id"): c for c in nbformat.read(zh.zh_path(nn), as_version=4).cells}
    stored = [c for c in english.cells if c.cell_type == "markdown" and "```text" in c.source]
    for cell in stored:
        want = collections.Counter(NUMBER.findall(cell.source))
        got = collections.Counter(NUMBER.findall(chinese[cell.get("id")].source))
        assert got == want, (cell.get("id"), (want - got).most_common(5),
                             (got - want).most_common(5))
