"""Opening a committed notebook in JupyterLab and saving it must change nothing.

JupyterLab rewrites a kernelspec other than the virtual environment's ipykernel and saves
widget state through JavaScript numbers (``3.0`` becomes ``3``); either leaves a student's
checkout modified though nothing was run. The expected text is built here from the JSON and
nbformat's writer, independently of ``lectures.widgets.tidy``'s own code path.
"""

import json
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(ROOT.glob("notebooks/**/*.ipynb"))


def _integral_floats(value, where="$"):
    if isinstance(value, float) and value.is_integer():
        yield where
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _integral_floats(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _integral_floats(v, f"{where}[{i}]")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_kernelspec_is_ipykernels(path):
    ks = json.loads(path.read_text(encoding="utf-8"))["metadata"].get("kernelspec")
    assert ks == {"display_name": "Python 3 (ipykernel)", "language": "python",
                  "name": "python3"}, f"{path.name}: kernelspec {ks}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_number_that_javascript_would_rewrite(path):
    floats = list(_integral_floats(json.loads(path.read_text(encoding="utf-8"))))
    assert not floats, (f"{path.name}: {len(floats)} integral floats (first {floats[:3]}); "
                        "run python -m lectures.widgets.tidy on it")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_as_jupyterlab_leaves_a_run(path):
    """No per-cell timing (JupyterLab deletes it when it runs a cell) and no two consecutive
    stream outputs of one name (its output area joins them), so Run All and save changes only
    what the run itself changes."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    for i, cell in enumerate(nb["cells"]):
        assert "execution" not in cell.get("metadata", {}), f"{path.name} cell {i}: timing"
        names = [o.get("name") if o["output_type"] == "stream" else None
                 for o in cell.get("outputs", [])]
        assert not any(a is not None and a == b for a, b in zip(names, names[1:])), \
            f"{path.name} cell {i}: consecutive {names} streams"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_saved_as_nbformat_writes_it(path):
    text = path.read_text(encoding="utf-8")
    assert nbformat.writes(nbformat.reads(text, as_version=4)) + "\n" == text


def test_tidy_rewrites_what_jupyterlab_would(tmp_path):
    from lectures.widgets.tidy import tidy

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["widgets"] = {"state": {"value": 3.0, "step": 0.5, "big": 2.0 ** 60}}
    p = tmp_path / "x.ipynb"
    p.write_text(json.dumps(nb, indent=1, sort_keys=True), encoding="utf-8")
    assert tidy(p) is True
    saved = json.loads(p.read_text(encoding="utf-8"))
    assert saved["metadata"]["widgets"]["state"] == {"value": 3, "step": 0.5, "big": 2.0 ** 60}
    assert isinstance(saved["metadata"]["widgets"]["state"]["value"], int)
    assert saved["metadata"]["kernelspec"]["display_name"] == "Python 3 (ipykernel)"
    assert tidy(p) is False


def _lab_schema(extension: str, plugin: str):
    """The installed JupyterLab's settings schema of ``@jupyterlab/extension:plugin``, or None
    without JupyterLab."""
    import sys
    path = (Path(sys.prefix) / "share" / "jupyter" / "lab" / "schemas" / "@jupyterlab" / extension
            / f"{plugin}.json")
    return json.loads(path.read_text()) if path.exists() else None


def test_shipped_jupyterlab_settings_turn_news_and_autosave_off():
    """The "Jupyter news?" pop-up covers the bottom right of the figures, and autosave would
    write every Run All's new outputs over the stored ones; the repository ships JupyterLab
    overrides that turn news, update checks and autosave off (installed with the package as
    data files by a regular install, not by ``pip install -e``; so every ``jupyter lab``
    command the documents give passes ``--LabApp.app_settings_dir=jupyter``)."""
    import tomllib

    overrides = json.loads((ROOT / "jupyter" / "overrides.json").read_text())
    notification = overrides["@jupyterlab/apputils-extension:notification"]
    assert notification == {"fetchNews": "false", "checkForUpdates": False}
    # Running a notebook changes its outputs in memory (new widget ids, redrawn figures);
    # with autosave off nothing reaches the repository's files until the reader saves.
    assert overrides["@jupyterlab/docmanager-extension:plugin"] == {"autosave": False}
    schema = _lab_schema("docmanager-extension", "plugin")
    if schema is not None:  # the setting exists under this name in the installed JupyterLab
        assert schema["properties"]["autosave"]["type"] == "boolean"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    data_files = pyproject["tool"]["setuptools"]["data-files"]
    assert data_files["share/jupyter/lab/settings"] == ["jupyter/overrides.json"]


def test_every_jupyter_lab_command_applies_the_shipped_settings():
    """An editable install (the READMEs' ``pip install -e``) leaves the overrides out of the
    venv: a ``jupyter lab`` started without the flag autosaves over the stored outputs."""
    import re
    commands = []
    for doc in ("README.md", "README.zh.md", "CONTRIBUTING.md"):
        commands += re.findall(r"jupyter[ -]lab\b[^\n`]*", (ROOT / doc).read_text(encoding="utf-8"))
    assert len(commands) >= 5, commands
    assert [c for c in commands if "--LabApp.app_settings_dir=jupyter" not in c] == []


def test_tidy_joins_streams_and_drops_timing(tmp_path):
    from lectures.widgets.tidy import tidy

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(1); print(2)")
    cell.metadata["execution"] = {"iopub.status.busy": "2026-12-03T07:00:00Z"}
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n"),
                    nbformat.v4.new_output("stream", name="stdout", text="2\n"),
                    nbformat.v4.new_output("stream", name="stderr", text="w\n"),
                    nbformat.v4.new_output("stream", name="stdout", text="3\n")]
    nb.cells.append(cell)
    p = tmp_path / "x.ipynb"
    p.write_text(json.dumps(nb, indent=1, sort_keys=True), encoding="utf-8")
    assert tidy(p) is True
    saved = json.loads(p.read_text(encoding="utf-8"))["cells"][0]
    assert "execution" not in saved["metadata"]
    assert [(o["name"], "".join(o["text"])) for o in saved["outputs"]] == [
        ("stdout", "1\n2\n"), ("stderr", "w\n"), ("stdout", "3\n")]
    assert tidy(p) is False


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.name))
def test_nbval_markers_are_tags_not_code(path):
    """A student reads code cells: nbval's markers live in the cells' tags."""
    import re
    nb = json.loads(path.read_text(encoding="utf-8"))
    marked = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
              and re.search(r"^\s*#\s*NBVAL_", "".join(c["source"]), re.M)]
    assert marked == [], f"{path.name}: cells {marked}; run python -m lectures.widgets.tidy"


def test_tidy_moves_nbval_markers_into_tags(tmp_path):
    """nbval's tag for each marker (its plugin's metadata_tags), the rest of the cell kept."""
    from nbval.plugin import metadata_tags

    from lectures.widgets.tidy import tidy
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("# NBVAL_SKIP\n# why\nrun()"),
                nbformat.v4.new_code_cell("x = 1\n  # NBVAL_IGNORE_OUTPUT\nx",
                                          metadata={"tags": ["keep"]}),
                nbformat.v4.new_code_cell("print('# NBVAL_SKIP is a marker')")]
    p = tmp_path / "x.ipynb"
    p.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")
    assert tidy(p) is True
    cells = json.loads(p.read_text(encoding="utf-8"))["cells"]
    assert ["".join(c["source"]) for c in cells] == [
        "# why\nrun()", "x = 1\nx", "print('# NBVAL_SKIP is a marker')"]
    assert [c["metadata"].get("tags") for c in cells] == [
        ["nbval-skip"], ["keep", "nbval-ignore-output"], None]
    assert metadata_tags["nbval-skip"] == "skip"
    assert metadata_tags["nbval-ignore-output"] == ("check", False)
    assert tidy(p) is False
