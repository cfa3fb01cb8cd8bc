"""Notebook 07's plots and widget callbacks, driven without a browser.

The explorers are built as in the notebook; setting ``controls[name].value`` fires the same
callback a reader's click fires, and ``state`` holds what it computed. Expected values are
derived by hand (bit budgets, the Marlin fragment layout).
"""

import importlib

import numpy as np
import pytest
from matplotlib.figure import Figure

pytest.importorskip("ipywidgets")
L = importlib.import_module("lectures.07_weight_storage")
W = importlib.import_module("lectures.widgets.lecture07")


def test_storage_explorer_callback_follows_the_controls():
    e = W.storage_explorer()
    assert e.state["chosen"]["format"] == "NF4" and e.state["chosen"]["bits"] == 4.5
    assert len(e.state["points"]) == len(L.EXPLORER_FORMATS)

    e.controls["fmt"].value = "MXFP4"
    e.controls["block"].value = 32
    assert e.state["chosen"]["format"] == "MXFP4" and e.state["chosen"]["bits"] == 4 + 8 / 32

    e.controls["fmt"].value = "NF4"
    e.controls["block"].value = 128
    assert e.state["chosen"]["bits"] == 4 + 32 / 128

    # 2^16 weights, blocks of 64: 1024 absmax codes of 8 bits, 4 FP32 steps, 1 FP32 mean
    e.controls["fmt"].value = "NF4 + double quant"
    e.controls["block"].value = 64
    assert e.state["chosen"]["bits"] == 4 + 8 / 64 + (4 + 1) * 32 / 2**16

    gaussian = e.state["chosen"]["rel_error"]
    e.controls["distribution"].value = "Student-t"
    assert e.state["chosen"]["distribution"] == "Student-t"
    assert e.state["chosen"]["rel_error"] != gaussian
    assert isinstance(e.figure, Figure) and "Student-t" in e.figure.axes[0].get_title()


def test_storage_explorer_nf4_beats_int4_at_every_block_size():
    e = W.storage_explorer()
    for block in W.BLOCK_SIZES:
        e.controls["block"].value = block
        err = {p["format"]: p["rel_error"] for p in e.state["points"]}
        assert err["NF4"] < err["INT4"], block


def test_marlin_explorer_by_hand():
    m = W.marlin_explorer()
    # default (7, 23): sub-tile 1, column 7 -> t // 4 = 7; row 7 = 2 * 3 + 1 -> t % 4 = 3
    w = m.state["where"]
    assert (w["thread"], w["sub_tile"], w["word"], w["lane"]) == (31, 1, 125, 4)
    assert m.state["word_elements"][4] == (7, 23)

    m.controls["k"].value = 20
    m.controls["n"].value = 100
    w = m.state["where"]
    # tile (1, 1); inside it row 4, column 36 = sub-tile 2, column 4 -> t = 4 * 4 + 2 = 18
    assert w["tile"] == (1, 1) and w["row"] == 1
    assert (w["thread"], w["sub_tile"], w["lane"]) == (18, 2, 0)
    assert w["word"] == 128 + 4 * 18 + 2
    # the word holds rows 20, 21, 28, 29 of columns 100 and 108, in lane order
    assert m.state["word_elements"] == [(20, 100), (28, 100), (20, 108), (28, 108),
                                        (21, 100), (29, 100), (21, 108), (29, 108)]
    assert isinstance(m.figure, Figure)


def test_explorer_plain_text_is_stable():
    bundle = W.marlin_explorer()._repr_mimebundle_()
    assert bundle["text/plain"].startswith("[Where does weight (k, n) land")


@pytest.fixture(scope="module")
def results():
    return {"bill": L.demo1_bytes(), "codebooks": L.demo2_codebooks(),
            "dq": L.demo3_double_quant(), "layout": L.demo4_layouts()}


@pytest.mark.parametrize("plot, key", [
    (W.plot_storage_bill, "bill"), (W.plot_codebooks, "codebooks"),
    (W.plot_double_quant, "dq"), (W.plot_act_order, "layout"), (W.plot_marlin_tile, "layout"),
])
def test_plots_have_titles_and_labelled_axes(plot, key, results):
    fig = plot(results[key])
    assert isinstance(fig, Figure)
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>":
            continue
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
        assert ax.get_legend() is not None


@pytest.mark.parametrize("plot", [W.plot_storage_bill, W.plot_codebooks, W.plot_double_quant,
                                  W.plot_act_order, W.plot_marlin_tile])
def test_plots_reject_the_wrong_result(plot):
    with pytest.raises(TypeError, match="expected the"):
        plot(np.zeros(3))
