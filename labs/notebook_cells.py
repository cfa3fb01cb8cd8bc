"""Give every notebook its closing "Lab" cells: a markdown cell naming the lab and a code cell
that checks the student's file (tagged ``nbval-skip``: stored unexecuted, so its output never
depends on the student's work).

::

    python -m labs.notebook_cells          # add or refresh the cells of notebooks 01-12

The English notebook gets the two cells at its very end (replacing earlier ones with the same
ids), the markdown's Chinese translation goes into the notebook's catalog
(``lectures/locale/zh_CN/LC_MESSAGES/notebookNN.po``), and the Chinese notebook gets the same
two cells, translated, as :func:`lectures.i18n_notebooks.build` would make them, without
re-executing anything else. Run it again after re-storing a notebook.
"""

from __future__ import annotations

import sys

from labs.grading import lab_numbers, load_lab
from labs.i18n import ROOT

__all__ = ["CODE_ID", "MARKDOWN_ID", "cells", "main", "markdown"]

MARKDOWN_ID, CODE_ID = "lab-markdown", "lab-check"

_EN = ("## Lab {nn}\n"
       "Now write the code yourself: lab {nn} asks for the core of this lecture as functions in "
       "`labs/{file}`. Replace each `raise NotImplementedError` with your code, then run the "
       "cell below (or `python -m labs check {nn}` in a terminal): it says which exercises are "
       "done and, for a wrong one, the smallest input where your output differs, in bits. "
       "`python -m labs show {nn}` prints the tasks; the reference solutions are in "
       "`labs/solutions/` (spoilers).")
_ZH = ("## 实验 {nn}\n"
       "现在自己动手写代码：实验 {nn} 把本讲的核心内容变成 `labs/{file}` 中的函数。把每个 "
       "`raise NotImplementedError` 换成你的代码，然后运行下面的单元格（或在终端中运行 "
       "`python -m labs check {nn}`）：它会告诉你哪些练习已完成；对于错误的练习，给出使你的输出"
       "不同的最小输入，并以位显示。`python -m labs show {nn}` 打印各练习的任务；参考答案在 "
       "`labs/solutions/` 中（会剧透）。")
_CODE = 'import labs\n\nlabs.check("{nn}");'


def markdown(nn: str, lang: str = "en") -> str:
    """The Lab markdown cell of notebook `nn` in `lang` ("en" or "zh_CN")."""
    return (_ZH if lang == "zh_CN" else _EN).format(nn=nn, file=load_lab(nn).file)


def cells(nn: str, lang: str = "en") -> list:
    """The two Lab cells of notebook `nn` (nbformat cells)."""
    import nbformat
    return [nbformat.v4.new_markdown_cell(markdown(nn, lang), id=MARKDOWN_ID),
            nbformat.v4.new_code_cell(_CODE.format(nn=nn), id=CODE_ID,
                                      metadata={"tags": ["nbval-skip"]})]


def _replace_cells(path, new) -> None:
    import nbformat

    from lectures.widgets.tidy import tidy
    nb = nbformat.read(path, as_version=4)
    nb.cells = [c for c in nb.cells if c.get("id") not in (MARKDOWN_ID, CODE_ID)] + new
    nbformat.write(nb, path)
    tidy(path)


def _translate(nn: str) -> None:
    """Put the Lab markdown's translation into catalog notebookNN (its other entries as they
    are)."""
    from babel.messages.pofile import write_po

    from lectures.i18n import domain
    from lectures.i18n_catalogs import read_catalog
    catalog = read_catalog(f"notebook{nn}", "zh_CN")
    for m in list(catalog):
        if m.id and isinstance(m.id, str) and m.id.startswith("## Lab ") and m.id != markdown(nn):
            catalog.delete(m.id)
    catalog.add(markdown(nn), markdown(nn, "zh_CN"))
    for message in catalog:       # as lectures.i18n.update_domain: str.format, not %-format
        message.flags.discard("python-format")
    with open(domain(f"notebook{nn}").catalog_path("zh_CN"), "wb") as f:
        write_po(f, catalog, width=100, no_location=True, omit_header=False,
                 ignore_obsolete=True, sort_output=False)


def main(argv=None) -> int:
    from lectures.i18n_notebooks import english_path, zh_path
    numbers = (argv if argv is not None else sys.argv[1:]) or lab_numbers()
    for nn in numbers:
        _replace_cells(english_path(nn), cells(nn))
        _translate(nn)
        _replace_cells(zh_path(nn), cells(nn, "zh_CN"))
        print(english_path(nn).relative_to(ROOT), zh_path(nn).relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
