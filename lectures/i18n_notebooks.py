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
import sys
from pathlib import Path

from lectures.i18n import NOTEBOOKS
from lectures.i18n_catalogs import markdown_messages, read_catalog, translate_markdown

__all__ = ["LANGUAGE_CELL", "TRANSLATED", "build", "english_path", "keep_attachments",
           "markdown_messages", "translate_markdown", "zh_path"]

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
ZH_DIR = NOTEBOOK_DIR / "zh"

#: The notebooks that have a Chinese edition (their domains are ``notebookNN``): all of them.
TRANSLATED = NOTEBOOKS

#: The cell a Chinese notebook runs first (its ``;`` keeps the returned language off the page).
#: nbval runs cells without storing them in IPython's history, where IPython looks for the
#: ``;``, so under nbval the cell shows ``'zh_CN'``: it is tagged ``nbval-ignore-output``.
LANGUAGE_CELL = """\
# 本笔记本使用中文：讲义打印的文字、图中的文字和控件的标签都取自中文翻译目录。
# 代码和代码中的注释保持英文，与英文版笔记本相同。
from lectures.widgets.fonts import use_language

use_language("zh");"""
LANGUAGE_CELL_ID = "use-language-zh"



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


def _catalog(nn: str, lang: str) -> dict[str, str]:
    return {m.id: m.string for m in read_catalog(f"notebook{nn}", lang)
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
                cells.append(nbformat.v4.new_code_cell(
                    LANGUAGE_CELL, id=LANGUAGE_CELL_ID,
                    metadata={"tags": ["nbval-ignore-output"]}))
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


def keep_attachments(nb, old) -> int:
    """Give `nb`'s markdown cells the attachments of `old`'s cells with the same id and the same
    attachment names; return how many cells were given theirs.

    The stored figures of a notebook that keeps a real-model run in markdown (notebook 08) are
    drawn once in Chinese into the Chinese notebook; regenerating it keeps them.
    """
    previous = {c.get("id"): c for c in old.cells if c.cell_type == "markdown"
                and c.get("attachments")}
    kept = 0
    for cell in nb.cells:
        before = previous.get(cell.get("id"))
        if (cell.cell_type == "markdown" and cell.get("attachments") and before is not None
                and set(before.attachments) == set(cell.attachments)):
            cell.attachments = copy.deepcopy(before.attachments)
            kept += 1
    return kept


def _execute(path: Path, english) -> None:
    """Execute the notebook at `path` in its folder, cell by cell, leaving unexecuted the code
    cells the English notebook stores unexecuted (a real-model run kept in markdown instead);
    the language cell runs whenever any other cell does."""
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(path, as_version=4)
    run = [c.execution_count is not None for c in english.cells if c.cell_type == "code"]
    if not any(run):
        return
    codes = iter(run)
    # no time limit per cell: a full-run cell takes many minutes on a busy machine
    client = NotebookClient(nb, timeout=None, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            if cell.get("id") == LANGUAGE_CELL_ID or next(codes):
                client.execute_cell(cell, i)
        client.set_widgets_metadata()
    nbformat.write(nb, path)


def execute_stored(nn: str) -> Path:
    """Execute English notebook `nn`'s first code cell and the cells nbval compares (those with
    no ``nbval-*`` tag: the cells that print its stored run, the data of
    :func:`lectures.llm.stored_path`, and any cell that needs no model), in its folder, and tidy
    it; its other cells are left as they are (the live real-model cells stay unexecuted, and so
    do the Chinese edition's: :func:`write` runs what the English runs).

    Raises
    ------
    ValueError
        If the notebook has no cell that prints a stored run (``stored[``).
    """
    import nbformat

    from lectures.widgets.tidy import tidy
    path = english_path(nn)
    nb = nbformat.read(path, as_version=4)
    codes = [c for c in nb.cells if c.cell_type == "code"]
    if not any("stored[" in c.source for c in codes):
        raise ValueError(f"notebook {nn} has no cell that prints a stored run (stored[...])")
    compared = [c for c in codes
                if not any(t.startswith("nbval-") for t in c.metadata.get("tags", []))]
    chosen = {id(c) for c in codes[:1] + compared}
    marked = copy.deepcopy(nb)
    for cell, mark in zip(nb.cells, marked.cells):
        if mark.cell_type == "code":
            mark.execution_count = 1 if id(cell) in chosen else None
    _execute(path, marked)
    tidy(path)
    return path


def write(nn: str, execute: bool = True) -> Path:
    """Write notebook `nn`'s Chinese edition (keeping its stored figures in markdown), execute
    it in its folder and tidy it."""
    import nbformat

    from lectures.widgets.tidy import tidy
    path = zh_path(nn)
    path.parent.mkdir(parents=True, exist_ok=True)
    english = nbformat.read(english_path(nn), as_version=4)
    nb = build(nn, english=english)
    if path.is_file():
        keep_attachments(nb, nbformat.read(path, as_version=4))
    nbformat.write(nb, path)
    if execute:
        _execute(path, english)
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
            parser.error(f"notebook {nn!r} has no Chinese catalog; is there a notebooks/{nn}_*.ipynb?")
        print(write(nn, execute=not args.no_execute).relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
