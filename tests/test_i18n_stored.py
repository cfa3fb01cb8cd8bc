"""Notebook 09's stored run in Chinese: lectures.i18n_stored reads the English the lecture
printed back into its messages and fills their Chinese templates. Checked against the lecture
itself (demo 1 printed in both languages) and against the committed catalog."""

import contextlib
import importlib
import io
import re

import nbformat
import pytest

from console.i18n import language
from lectures import i18n_notebooks as zh
from lectures import i18n_stored as S
from lectures.i18n_catalogs import read_catalog
from text_checks import english_runs, layout_problems, number_differences

L = importlib.import_module("lectures.09_ptq_algorithms")


def _printed(show, result, lang):
    out = io.StringIO()
    with language(lang), contextlib.redirect_stdout(out):
        show(result)
    return out.getvalue().strip("\n")


def test_demo1_rendered_from_its_english_is_what_the_lecture_prints_in_chinese():
    r = L.demo1_output_error()
    english, chinese = _printed(L.show_demo1, r, "en"), _printed(L.show_demo1, r, "zh")
    assert S.render_demo(english, S.Renderer("09")) == chinese


def test_the_catalogs_stored_block_is_the_rendered_english_one():
    """notebook09.po holds the current English block rendered (else: python -m
    lectures.i18n_stored 09), with the same numbers, no English sentence, no ragged table."""
    stored = S.stored_block(nbformat.read(zh.english_path("09"), as_version=4))
    catalog = {m.id: m.string for m in read_catalog("notebook09", "zh_CN") if m.id}
    rendered = S.render_stored(stored, S.Renderer("09"))
    assert catalog[stored] == rendered
    assert number_differences(stored, rendered) == []
    blocks = re.findall(r"```text\n(.*?)```", rendered, re.S)
    assert len(blocks) == 5
    assert [r for b in blocks for r in english_runs(b)] == []
    assert [p for b in blocks for p in layout_problems(b)] == []


def test_a_sentence_no_message_prints_is_refused():
    renderer = S.Renderer("09")
    with pytest.raises(KeyError, match="no message"):
        renderer.sentence("A sentence the lecture never printed.")
    assert renderer.sentence("A sentence the lecture never printed.", strict=False) is None
    with pytest.raises(ValueError, match="header"):
        S.render_demo("no header here", renderer)
    with pytest.raises(ValueError, match="Stored"):
        S.render_stored("Other\n```text\nx\n```", renderer)
