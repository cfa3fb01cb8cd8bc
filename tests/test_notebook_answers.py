"""Every notebook that asks questions answers them in a closing "Answers" section.

An answer is a collapsed markdown cell with the reasoning and a code cell (source hidden,
tagged ``answer``) that computes what the reasoning rests on and asserts it, so nbval, which
executes every notebook, checks the answers like any other cell.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
QUESTION = re.compile(r"\*\*Questions?\.?\*\*|\*Question:\*|\*\*Questions?\*\*:")


def _cells(path):
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _asks(cells) -> int:
    """How many question paragraphs the notebook's markdown holds before its answers."""
    n = 0
    for c in cells:
        text = "".join(c["source"])
        if c["cell_type"] == "markdown" and text.startswith("## Answers"):
            break
        if c["cell_type"] == "markdown":
            n += len(QUESTION.findall(text))
    return n


ASKING = [p for p in NOTEBOOKS if _asks(_cells(p))]


@pytest.mark.parametrize("path", ASKING, ids=lambda p: p.name)
def test_questions_have_an_answers_section(path):
    cells = _cells(path)
    starts = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown"
              and "".join(c["source"]).startswith("## Answers")]
    assert len(starts) == 1, f"{path.name}: asks {_asks(cells)} questions and has no Answers section"
    answers = cells[starts[0] + 1:]
    # the closing Lab cells (labs/notebook_cells.py) follow the answers
    answers = [c for c in answers if c.get("id") not in ("lab-markdown", "lab-check")]
    revealed = [c for c in answers if c["cell_type"] == "markdown"
                and "<details><summary>" in "".join(c["source"])]
    code = [c for c in answers if c["cell_type"] == "code"]
    assert len(revealed) >= _asks(cells), f"{path.name}: fewer collapsed answers than questions"
    for c in code:
        src = "".join(c["source"])
        assert "answer" in c["metadata"].get("tags", []), src[:80]
        assert c["metadata"].get("jupyter", {}).get("source_hidden") is True, src[:80]
        assert "assert " in src, f"{path.name}: an answer cell checks nothing: {src[:80]!r}"
        assert c.get("outputs"), f"{path.name}: an answer cell was committed without its output"


def test_the_check_sees_questions():
    """The question pattern finds the questions of the notebooks known to ask them."""
    assert {"01_number_formats.ipynb", "03_scaling.ipynb", "05_quantization_basics.ipynb"} <= {
        p.name for p in ASKING}
