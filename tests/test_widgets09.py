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
