"""The Chinese notebooks, generated from the English ones and the gettext catalogs.

The English notebook ``notebooks/NN_topic.ipynb`` is the one source. Its markdown is split into
paragraphs (blank-line separated; a fenced code block stays whole); each paragraph with any
prose in it is one message of the domain ``notebookNN``, extracted by
``python -m lectures.i18n update notebookNN`` into
``lectures/locale/zh_CN/LC_MESSAGES/notebookNN.po`` and checked by ``check`` like the
lectures' catalogs. The Chinese notebook ``notebooks/zh/NN_topic.ipynb`` has the English
notebook's cells in the same order with every markdown paragraph translated, the same code,
and one more code cell before the first code cell that chooses Chinese
(:func:`lectures.widgets.fonts.use_language`): from then on the lectures print through their
own Chinese catalogs and the widgets label their figures and controls through them.

::

    python -m lectures.i18n_notebooks 01            # write, execute and tidy notebooks/zh/01_*
    python -m lectures.i18n_notebooks --no-execute  # write every translated notebook, unexecuted

``tests/test_notebooks_zh.py`` fails when a Chinese notebook differs from what this module
generates from the current English notebook and catalog, or when its outputs hold other
numbers than the English notebook's.
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

__all__ = ["LANGUAGE_CELL", "TRANSLATED", "build", "english_path", "markdown_messages",
           "translate_markdown", "zh_path"]

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
ZH_DIR = NOTEBOOK_DIR / "zh"

#: The notebooks that have a Chinese edition (their domains are ``notebookNN``).
TRANSLATED = ("01", "02", "03", "04", "06", "07")

#: The cell a Chinese notebook runs first.
LANGUAGE_CELL = """\
# 本笔记本使用中文：讲义打印的文字、图中的文字和控件的标签都取自中文翻译目录。
from lectures.widgets.fonts import use_language

use_language("zh")"""
LANGUAGE_CELL_ID = "use-language-zh"

_SPLIT = re.compile(r"(\n[ \t]*\n)")
_TAG = re.compile(r"<[^>]*>")


def english_path(nn: str) -> Path:
    """The English notebook ``notebooks/NN_*.ipynb``.

    Raises
    ------
    ValueError
        If there is not exactly one such notebook.
    """
    found = sorted(NOTEBOOK_DIR.glob(f"{nn}_*.ipynb"))
    if len(found) != 1:
        raise ValueError(f"nn={nn!r}: expected one notebook {nn}_*.ipynb, found {len(found)}")
    return found[0]


def zh_path(nn: str) -> Path:
    """Where the Chinese edition of notebook `nn` lives."""
    return ZH_DIR / english_path(nn).name


def _pieces(text: str) -> list[str]:
    """`text` split into paragraphs and the blank-line separators between them (joined back,
    they give `text`); a fenced code block is never split."""
    parts = _SPLIT.split(text)
    merged: list[str] = []
    open_fence = False
    for part in parts:
        if open_fence:
            merged[-1] += part
        else:
            merged.append(part)
        if not _SPLIT.fullmatch(part) and part.count("```") % 2:
            open_fence = not open_fence
    return merged


def _is_message(piece: str) -> bool:
    """Whether a paragraph has prose to translate (not a separator, not bare HTML tags)."""
    return not _SPLIT.fullmatch(piece) and bool(re.search(r"[A-Za-z]", _TAG.sub("", piece)))


def markdown_messages(text: str) -> list[str]:
    """The translatable paragraphs of one markdown cell, in order."""
    return [p for p in _pieces(text) if _is_message(p)]


def translate_markdown(text: str, translate) -> str:
    """`text` with every translatable paragraph replaced by ``translate(paragraph)``."""
    return "".join(translate(p) if _is_message(p) else p for p in _pieces(text))


def _catalog(nn: str, lang: str) -> dict[str, str]:
    from lectures.i18n import _read
    return {m.id: m.string for m in _read(f"notebook{nn}", lang)
            if m.id and m.string and not m.fuzzy}


def build(nn: str, lang: str = "zh_CN", english=None):
    """The unexecuted Chinese edition of notebook `nn`, as an nbformat NotebookNode.

    Parameters
    ----------
    nn : str
        The notebook's number, ``"01"`` … (its catalog is ``notebookNN``).
    lang : str
        The catalog's language.
    english : NotebookNode, optional
        The English notebook (default: read ``notebooks/NN_*.ipynb``).

    Raises
    ------
    ValueError
        If a markdown paragraph has no (non-fuzzy) translation in the catalog.
    """
    import nbformat
    if english is None:
        english = nbformat.read(english_path(nn), as_version=4)
    translations = _catalog(nn, lang)
    missing = []

    def translate(paragraph: str) -> str:
        if paragraph not in translations:
            missing.append(paragraph)
            return paragraph
        return translations[paragraph]

    nb = copy.deepcopy(english)
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = translate_markdown(cell.source, translate)
        elif cell.cell_type == "code":
            if not any(c.get("id") == LANGUAGE_CELL_ID for c in cells):
                cells.append(nbformat.v4.new_code_cell(LANGUAGE_CELL, id=LANGUAGE_CELL_ID))
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)
        cells.append(cell)
    if missing:
        raise ValueError(f"notebook{nn}/{lang}: {len(missing)} untranslated paragraphs, the "
                         f"first: {missing[0][:80]!r}; run python -m lectures.i18n update "
                         f"notebook{nn} and translate them")
    nb.cells = cells
    return nb


def write(nn: str, execute: bool = True) -> Path:
    """Write notebook `nn`'s Chinese edition, execute it in its folder and tidy it."""
    import nbformat

    from lectures.widgets.tidy import tidy
    path = zh_path(nn)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(build(nn), path)
    if execute:
        # no time limit per cell: a full-run cell (notebook 10's) takes many minutes on a
        # busy machine, and the run is watched by whoever started it
        subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook",
                        "--execute", "--inplace", "--ExecutePreprocessor.timeout=-1",
                        path.name], cwd=path.parent, check=True)
    tidy(path)
    return path


def main(argv=None) -> int:
    """``python -m lectures.i18n_notebooks [NN ...] [--no-execute]``."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m lectures.i18n_notebooks",
                                     description="Write the Chinese notebooks.")
    parser.add_argument("notebooks", nargs="*", help="default: all of " + ", ".join(TRANSLATED))
    parser.add_argument("--no-execute", action="store_true", help="write them unexecuted")
    args = parser.parse_args(argv)
    for nn in args.notebooks or TRANSLATED:
        if nn not in TRANSLATED:
            parser.error(f"notebook {nn!r} has no Chinese catalog; add it to TRANSLATED")
        print(write(nn, execute=not args.no_execute).relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
