"""Notebook 01's plots and format explorer, driven by setting widget values (no browser).
Expected bits and values come from ml_dtypes."""

import importlib

import matplotlib

matplotlib.use("Agg")

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from lectures.widgets import lecture01 as W  # noqa: E402

L = importlib.import_module("lectures.01_number_formats")


def assert_labelled(fig):
    for ax in fig.axes:
        assert ax.get_xlabel() or ax is not fig.axes[-1]
        assert ax.get_ylabel()
        assert ax.get_legend() is not None
        assert ax.get_title() or fig._suptitle is not None


def test_plots_are_labelled():
    assert_labelled(W.plot_value_grids(L.demo2_value_grids()))
    assert_labelled(W.plot_relative_spacing(L.demo3_relative_spacing()))
    with pytest.raises(TypeError, match="GridResult"):
        W.plot_value_grids(L.demo3_relative_spacing())


def test_explorer_callback_follows_the_controls():
    e = W.format_explorer()
    a = e.state["anatomy"]
    assert (a.fmt, a.x, a.stored) == ("E4M3", 0.3, 0.3125)
    e.controls["value"].value = -2.5
    e.controls["fmt"].value = "E2M1"
    a = e.state["anatomy"]
    assert a.stored == float(np.float64(-2.5).astype(ml_dtypes.float4_e2m1fn))  # tie to even: -2
    code = int(np.array([-2.5]).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)[0]) & 0xF
    assert int(a.bits.replace(" ", ""), 2) == code
    assert (a.lower, a.upper) == (-3.0, -2.0)
    assert "stored as -2" in e.state["summary"]
    assert all(abs(v - -2.5) <= 2 for v in e.state["window"][3:-3])
    assert_labelled(e.figure)


def test_explorer_saturation_and_nan_cases():
    # By default the format decides, as lecture 01 demo 4 says: FP16 overflows to +Inf (numpy's
    # own float16 is the oracle), E4M3 has no Inf and gives NaN, and 460 < 464 is not overflow.
    e = W.format_explorer("FP16", 1e6)
    with np.errstate(over="ignore"):
        assert e.state["anatomy"].stored == float(np.float16(1e6)) == np.inf
    assert "overflows to +inf" in e.state["summary"]
    e.controls["saturate"].value = True
    assert e.state["anatomy"].saturated and e.state["anatomy"].stored == 65504.0
    assert "(overflow, saturated)" in e.state["summary"]
    e.controls["saturate"].value = False
    e.controls["fmt"].value = "E4M3"
    e.controls["value"].value = 460.0
    assert e.state["anatomy"].stored == 448.0 and "saturated" not in e.state["summary"]
    assert "none above" in e.state["summary"] and "inf" not in e.state["summary"]
    e.controls["value"].value = 1e40
    assert np.isnan(e.state["anatomy"].stored) and "overflows to NaN" in e.state["summary"]
    assert "inf" not in e.state["summary"]
    e.controls["fmt"].value = "E8M0"
    e.controls["value"].value = -1.0   # E8M0 has no sign: NaN
    assert np.isnan(e.state["anatomy"].stored) and "NaN" in e.state["summary"]
    with pytest.raises(ValueError, match="fmt must be one of"):
        W.format_explorer("FP12")


@pytest.mark.parametrize("fmt", ["E2M1", "E3M2", "E4M3", "E5M2", "FP16", "BF16"])
def test_explorer_symlog_tick_labels_do_not_overlap(fmt):
    """The whole-grid axis labels 0 and ±10^k without any two labels overprinting (the
    default symlog ticks put ±10^k next to 0), measured on the drawn figure's text boxes."""
    e = W.format_explorer(fmt=fmt, value=0.3)
    e.update()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    fig = e.figure
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    ax = fig.axes[0]
    renderer = canvas.get_renderer()
    lo, hi = ax.get_xlim()
    labels = [t for t in ax.get_xticklabels() if t.get_text() and lo <= t.get_position()[0] <= hi]
    boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
    assert "0" in "".join(t.get_text() for t in labels) and len(boxes) >= 3
    assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:])), [t.get_text() for t in labels]
