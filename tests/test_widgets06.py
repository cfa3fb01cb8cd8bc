"""Notebook 06's plots and widgets: callbacks driven by setting widget values, no browser."""

import importlib

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from lectures.widgets import lecture06 as W  # noqa: E402

L = importlib.import_module("lectures.06_quantization_aware_training")


def assert_labelled(fig):
    for ax in fig.get_axes():
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
        assert ax.get_legend() is not None


def test_ste_curve_by_hand():
    # 3 bits symmetric over [-1, 1]: codes [-3, 3], scale 1/3; 7 levels.
    s = W.ste_curve(3, True, -1.0, 1.0)
    assert (s["qmin"], s["qmax"], s["zero_point"]) == (-3, 3, 0)
    assert s["scale"] == pytest.approx(1 / 3)
    assert s["levels"] == 7
    # The mask is 1 exactly where |x| / scale rounds to at most 3, i.e. |x| < 3.5 / 3.
    np.testing.assert_array_equal(s["mask"], (np.abs(s["x"]) < 3.5 / 3).astype(float))
    # Affine 2 bits over [-1, 2]: scale 3 / 3 = 1, zero point round(0 + 1) = 1, codes [0, 3].
    a = W.ste_curve(2, False, -1.0, 2.0)
    assert (a["scale"], a["zero_point"], a["levels"]) == (1.0, 1, 4)
    with pytest.raises(ValueError, match="lo < hi"):
        W.ste_curve(3, True, 1.0, 1.0)


def test_ste_explorer_callback_recomputes():
    e = W.ste_explorer()
    assert e.state["levels"] == 7
    e.controls["bits"].value = 4                     # 15 levels: codes [-7, 7]
    assert e.state["levels"] == 15 and e.state["qmax"] == 7
    e.controls["symmetric"].value = False            # 16 codes [0, 15]
    assert e.state["qmax"] == 15 and e.state["levels"] == 16
    assert_labelled(e.figure)


def test_master_explorer_callback_recomputes():
    e = W.master_explorer()
    assert e.state["demo"].lr == 0.01
    e.controls["lr"].value = 0.1
    assert e.state["demo"].lr == 0.1
    f = e.state["final"]
    # 0.1 is still below half the INT4 step (0.125): the INT4 store never leaves 0.
    assert f["INT4 store, nearest"] == e.state["demo"].curves["INT4 store, nearest"][0]
    assert f["INT4 view of FP32 master"] < 0.1 * f["INT4 store, nearest"]
    assert_labelled(e.figure)


def test_plots_are_labelled():
    assert_labelled(W.plot_ste(L.ste_demo()))
    assert_labelled(W.plot_master_curves(L.master_weights_demo(steps=50)))
    r = L.ptq_vs_qat(L.DigitsConfig(epochs=2, qat_epochs=1), ("INT4",))
    fig = W.plot_loss_curves(r)
    assert_labelled(fig)
    assert len(fig.get_axes()[0].get_lines()) == 1 + 2 + 1   # FP32, two QAT runs, divider
    assert_labelled(W.plot_accuracy(r))
