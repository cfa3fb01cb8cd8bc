"""Write a notebook the way JupyterLab saves it, so that opening and saving it changes nothing.

JupyterLab reads a notebook into JavaScript, where ``3.0`` and ``3`` are the same number, and
sends it back to the server, which writes ``3``. A notebook executed by ``jupyter nbconvert``
keeps Python's ``3.0`` in its widget state, so the first save in JupyterLab rewrites those
lines and ``git status`` shows the notebook modified though nothing was run. JupyterLab also
replaces a kernelspec whose display name is not the current ipykernel's.

A cell's nbval marker (``# NBVAL_SKIP``, ``# NBVAL_IGNORE_OUTPUT``, ... on a line of its own)
moves into the cell's tags (``nbval-skip``, ``nbval-ignore-output``, as nbval reads them), so
that the code a student reads does not start with test machinery.

Run after executing a notebook (``python -m lectures.widgets.tidy notebooks/*.ipynb``);
``tests/test_notebooks_clean.py`` checks every committed notebook.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

#: The kernelspec that JupyterLab writes for the ipykernel of the virtual environment.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def _as_javascript(value):
    """``value`` with every integral float turned into an int, as JSON.parse then
    JSON.stringify would leave it (floats beyond 2**53 are not integers in JavaScript either)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2.0 ** 53:
        return int(value)
    if isinstance(value, dict):
        return {k: _as_javascript(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_javascript(v) for v in value]
    return value


def _merged_streams(outputs: list) -> list:
    """``outputs`` with each run of consecutive stream outputs of one name joined into one, as
    JupyterLab's output area keeps them (nbconvert stores each write of the kernel apart)."""
    merged = []
    for out in outputs:
        if (out.get("output_type") == "stream" and merged
                and merged[-1].get("output_type") == "stream"
                and merged[-1].get("name") == out.get("name")):
            merged[-1]["text"] = "".join(merged[-1]["text"]) + "".join(out["text"])
        else:
            merged.append(out)
    return merged


#: A line that holds only an nbval comment marker (nbval's own list of markers).
_MARKER = re.compile(r"^[ \t]*#[ \t]*(NBVAL_IGNORE_OUTPUT|NBVAL_CHECK_OUTPUT|NBVAL_RAISES_EXCEPTION"
                     r"|NBVAL_SKIP)[ \t]*$")


def markers_to_tags(cell) -> list[str]:
    """Move code cell `cell`'s nbval comment markers into its ``metadata.tags`` (nbval's tag of
    each: the marker in lower case with ``-`` for ``_``); return the tags added.

    The marker's line leaves the source; the cell's other lines stay as they were."""
    source = cell.source if isinstance(cell.source, str) else "".join(cell.source)
    lines = source.split("\n")
    found = [m.group(1) for m in map(_MARKER.match, lines) if m]
    if not found:
        return []
    cell.source = "\n".join(line for line in lines if not _MARKER.match(line))
    tags = cell.metadata.setdefault("tags", [])
    added = []
    for marker in found:
        tag = marker.lower().replace("_", "-")
        if tag not in tags:
            tags.append(tag)
            added.append(tag)
    return added


def tidy_text(text: str) -> str:
    """The notebook JSON ``text`` as JupyterLab would save it after running it (nbformat's
    writer, JavaScript numbers, the ipykernel kernelspec, no per-cell ``execution`` timing
    metadata, which JupyterLab removes when it runs a cell without recording timing, and
    consecutive stream outputs of one name joined), with nbval's markers in the cells' tags
    (:func:`markers_to_tags`)."""
    import nbformat

    nb = nbformat.from_dict(_as_javascript(json.loads(text)))
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.metadata.pop("execution", None)
            cell.outputs = _merged_streams(cell.outputs)
            markers_to_tags(cell)
    out = nbformat.writes(nb)
    return out if out.endswith("\n") else out + "\n"


def tidy(path) -> bool:
    """Rewrite the notebook at ``path`` as JupyterLab saves it; return True if it changed."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    new = tidy_text(text)
    if new == text:
        return False
    path.write_text(new, encoding="utf-8")
    return True


def main(argv=None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        print("usage: python -m lectures.widgets.tidy NOTEBOOK.ipynb [...]", file=sys.stderr)
        return 2
    for p in paths:
        if tidy(p):
            print(f"tidied {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
