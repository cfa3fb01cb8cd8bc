"""Re-store notebook 12's timed real-model cells, in English and in Chinese.

Notebook 12 keeps one run of its real-model cells (demos 3 and 4: decode and prefill timed on the
machine) as text and a figure in the markdown cell above each of them (the cell's id plus
``-stored``), so that Run All without the model, and a save, lose nothing. Their timings are
measurements: the Chinese edition keeps a run of its own, measured in Chinese, as the translation
of the English stored cell in ``notebook12.po``. ::

    python -m lectures.i18n_timed 12     # about 4 minutes on 2 idle cores; needs the model

runs the English notebook (every code cell but the Lab check) and moves the timed cells' output
into their stored cells; then runs the same cells in the Chinese edition and writes that text
into the catalog (the stored cell's heading and figure line as the old translation has them)
and that figure into the Chinese notebook; then regenerates the Chinese notebook
(:func:`lectures.i18n_notebooks.write`). Run it on a quiet machine: the stored speeds are what
readers compare with their own.
"""

from __future__ import annotations

import sys
from pathlib import Path

from lectures import i18n_notebooks as zh

__all__ = ["TIMED", "replace_text_block", "restore", "timed_cells"]

#: The notebooks whose stored runs are timings: each language keeps a run of its own.
TIMED = ("12",)
LAB_CHECK_ID = "lab-check"


def replace_text_block(markdown: str, text: str) -> str:
    """`markdown` with the body of its first ```text block replaced by `text` (its leading blank
    lines dropped: a printed header starts with one).

    Raises
    ------
    ValueError
        If `markdown` has no ```text block.
    """
    start = markdown.find("```text\n")
    if start < 0:
        raise ValueError("markdown has no ```text block")
    start += len("```text\n")
    end = markdown.index("```", start)
    body = text.lstrip("\n")
    return markdown[:start] + body + ("" if body.endswith("\n") else "\n") + markdown[end:]


def timed_cells(nb) -> list[str]:
    """The ids of the code cells that have a stored twin (``<id>-stored``) in `nb`."""
    ids = {c.get("id") for c in nb.cells}
    return [c.get("id") for c in nb.cells
            if c.cell_type == "code" and f"{c.get('id')}-stored" in ids]


def _outputs(cell) -> tuple[str, list[str]]:
    """What a timed cell printed (stdout) and the PNGs it displayed; an error raises."""
    errors = [o for o in cell.outputs if o.output_type == "error"]
    if errors:
        raise RuntimeError(f"cell {cell.get('id')} raised {errors[0].ename}: {errors[0].evalue}")
    text = "".join(o.text for o in cell.outputs
                   if o.output_type == "stream" and o.name == "stdout")
    if not text:
        raise RuntimeError(f"cell {cell.get('id')} printed nothing (is the model installed?)")
    return text, [o.data["image/png"] for o in cell.outputs
                  if "data" in o and "image/png" in o.data]


def _run(nb, ids, folder: Path) -> None:
    from nbclient import NotebookClient
    client = NotebookClient(nb, timeout=None, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}})
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and cell.get("id") in ids:
                client.execute_cell(cell, i)
        client.set_widgets_metadata()


def _set_figure(cell, pngs) -> None:
    if cell.get("attachments"):
        (name,) = cell.attachments
        (png,) = pngs
        cell.attachments[name]["image/png"] = png


def restore(nn: str) -> None:
    """Re-store notebook `nn`'s timed cells in English and Chinese (see the module)."""
    import nbformat
    from babel.messages.pofile import read_po, write_po

    from lectures.i18n import domain
    from lectures.i18n_catalogs import update_domain
    from lectures.widgets.tidy import tidy
    if nn not in TIMED:
        raise ValueError(f"nn={nn!r}: the notebooks with timed stored cells are {TIMED}")
    path = zh.english_path(nn)
    english = nbformat.read(path, as_version=4)
    timed = timed_cells(english)
    po = domain(f"notebook{nn}").catalog_path("zh_CN")
    with open(po, "rb") as f:
        catalog = read_po(f)
    cells = {c.get("id"): c for c in english.cells}
    old_zh = {cid: catalog.get(cells[f"{cid}-stored"].source).string for cid in timed}
    chinese = zh.build(nn, english=english)     # before the English stored text changes

    _run(english, [c.get("id") for c in english.cells
                   if c.cell_type == "code" and c.get("id") != LAB_CHECK_ID], path.parent)
    for cid in timed:
        text, pngs = _outputs(cells[cid])
        stored = cells[f"{cid}-stored"]
        stored.source = replace_text_block(stored.source, text)
        _set_figure(stored, pngs)
        cells[cid].outputs, cells[cid].execution_count = [], None
        cells[cid].metadata.pop("execution", None)
    nbformat.write(english, path)
    tidy(path)

    # what the timed cells use: the language cell and every executed cell up to the last one
    last = max(i for i, c in enumerate(english.cells) if c.get("id") in timed)
    needed = [zh.LANGUAGE_CELL_ID] + [
        c.get("id") for c in english.cells[:last + 1]
        if c.cell_type == "code" and (c.execution_count is not None or c.get("id") in timed)]
    _run(chinese, needed, zh.zh_path(nn).parent)
    zcells = {c.get("id"): c for c in chinese.cells}
    figures = {}
    for cid in timed:
        text, figures[cid] = _outputs(zcells[cid])
        msgid = cells[f"{cid}-stored"].source
        catalog.add(msgid, replace_text_block(old_zh[cid], text))
    for message in catalog:       # as lectures.i18n.update_domain: str.format, not %-format
        message.flags.discard("python-format")
    with open(po, "wb") as f:
        write_po(f, catalog, width=100, no_location=True, omit_header=False,
                 ignore_obsolete=True, sort_output=False)
    update_domain(f"notebook{nn}", "zh_CN")      # the old stored texts leave the catalog

    old = nbformat.read(zh.zh_path(nn), as_version=4)
    for cell in old.cells:                     # zh.write keeps these figures
        cid = cell.get("id", "")
        if cid.endswith("-stored") and cid[:-len("-stored")] in figures:
            _set_figure(cell, figures[cid[:-len("-stored")]])
    nbformat.write(old, zh.zh_path(nn))
    zh.write(nn)


def main(argv=None) -> int:
    """``python -m lectures.i18n_timed 12``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in TIMED:
        print(f"usage: python -m lectures.i18n_timed {' | '.join(TIMED)}", file=sys.stderr)
        return 2
    restore(args[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
