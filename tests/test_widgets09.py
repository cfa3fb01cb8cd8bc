"""Notebook 09's plots and widget callbacks, driven without a browser.

The explorer is built as in the notebook; setting ``controls[name].value`` fires the callback
a reader's click fires. Expected values: RTN by hand (intquant's definition), GPTQ's output
error below RTN's on correlated inputs (demo 1's claim).
"""

import numpy as np
import pytest
from matplotlib.figure import Figure

from lectures import lecture

pytest.importorskip("ipywidgets")
L = lecture(9)
W = pytest.importorskip("lectures.widgets.lecture09")


def test_gptq_explorer_follows_the_controls():
    e = W.gptq_explorer()
    s = e.state
    assert (s["bits"], s["group"], s["act_order"], s["correlated"]) == (4, "per row", False, True)
    d = L.synthetic_layer(0)
    w, xe = d["w"][:64, :256], d["x_eval"][:, :256]
    sc = np.abs(w).max(axis=1, keepdims=True) / 7
    q = np.clip(np.rint(w / sc), -7, 7) * sc
    np.testing.assert_allclose(s["rtn"][1], np.linalg.norm(xe @ (q - w).T)
                               / np.linalg.norm(xe @ w.T), rtol=1e-12)
    assert s["gptq"][1] < s["rtn"][1]
    e.controls["bits"].value = 3
    e.controls["group"].value = 64
    e.controls["act_order"].value = True
    assert (e.state["bits"], e.state["group"], e.state["act_order"]) == (3, 64, True)
    assert e.state["rtn"][1] > s["rtn"][1]          # 3 bits: a coarser grid
    e.controls["correlated"].value = False
    assert e.state["correlated"] is False
    assert isinstance(e.figure, Figure)


def test_plot_output_error_takes_demo1_only():
    fig = W.plot_output_error(L.demo1_output_error())
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    with pytest.raises(TypeError, match="demo1_output_error"):
        W.plot_output_error([1, 2])


def test_plot_perplexity():
    rows = [["float32 (reference)", "32", "15.82", "—"],
            ["RTN INT4 g128", "4.168", "21.84", "none"],
            ["GPTQ INT4 g128", "4.168", "18.28", "2048 tokens"],
            ["RTN INT3 g32", "3.594", "40.00", "none"]]
    fig = W.plot_perplexity(rows)
    assert len(fig.axes[0].lines) == 3             # RTN, GPTQ, float reference
    with pytest.raises(TypeError):
        W.plot_perplexity("rows")


def _is_cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def _drawn(fig) -> str:
    from matplotlib.text import Text
    return "\n".join(t.get_text() for t in fig.findobj(Text) if t.get_text())


def test_figures_and_explorer_in_chinese():
    """In Chinese every title, axis label and control description the widgets compose is
    Chinese, and no run of English words is drawn (method names and format labels aside)."""
    import matplotlib

    from console.i18n import language
    from lectures.widgets.fonts import use_language_fonts
    from text_checks import english_runs
    rows = [["float32 (reference)", "32", "15.82", "—"],
            ["RTN INT4 g128", "4.169", "21.85", "none"],
            ["GPTQ INT4 g128", "4.169", "20.83", "2048 tokens, Hessians, sequential"]]
    with matplotlib.rc_context(), language("zh"):
        use_language_fonts()
        figs = [W.plot_output_error(L.demo1_output_error()), W.plot_perplexity(rows)]
        e = W.gptq_explorer()
        figs.append(e.figure)
        descriptions = [w.description for k, w in e.controls.items() if k != "act_order"]
        options = e.controls["group"].options
        title = e.title
    for fig in figs:
        for ax in fig.axes:
            assert _is_cjk(ax.get_title()) and _is_cjk(ax.get_xlabel()), ax.get_title()
        assert english_runs(_drawn(fig)) == [], _drawn(fig)
    assert _is_cjk(figs[0].axes[0].get_ylabel()) and _is_cjk(figs[0]._suptitle.get_text())
    assert all(map(_is_cjk, descriptions)) and _is_cjk(title)
    assert options[0] == ("逐行", "per row") and options[1] == ("32", 32)
    assert e.state["group"] == "per row"          # the values stay the English keys


def test_missing_model_message_in_chinese(monkeypatch, capsys):
    from console.i18n import language
    from lectures import llm

    def unavailable(*args, **kwargs):
        raise llm.ModelUnavailableError("no model")
    monkeypatch.setattr(L, "load_model", unavailable)
    with language("zh"):
        assert W.load_model_or_explain() is None
    assert _is_cjk(capsys.readouterr().out)


def test_load_stored_takes_only_a_full_run_with_every_demo(tmp_path):
    from lectures import llm
    assert W.STORED == llm.stored_path("09")
    assert W.STORED.parent.name == "widgets" and W.STORED.name == "lecture09_stored.json"
    demos = {k: [[k, 1.5]] for k in W.STORED_DEMOS}     # stand-ins: load_stored only reads keys
    full = llm.save_results(tmp_path / "full.json", demos, {"command": "09_ptq_algorithms.py"})
    assert W.load_stored(full) == demos
    quick = llm.save_results(tmp_path / "quick.json", demos,
                             {"command": "09_ptq_algorithms.py --quick"})
    part = llm.save_results(tmp_path / "part.json", {"demo2": 1},
                            {"command": "09_ptq_algorithms.py"})
    for path in (quick, part):
        with pytest.raises(ValueError, match="not a full run of 09_ptq_algorithms.py"):
            W.load_stored(path)
    for bad in ("9", 9, "ab"):
        with pytest.raises(ValueError, match="two-digit"):
            llm.stored_path(bad)
