"""Notebook 04's plots and widget, without a browser (matplotlib backend Agg)."""

import importlib

import matplotlib
import pytest

matplotlib.use("Agg")
torch = pytest.importorskip("torch")
pytest.importorskip("ipywidgets")

W = importlib.import_module("lectures.widgets.lecture04")
L = importlib.import_module("lectures.04_low_precision_matmul")


def _labelled(fig):
    ax = fig.axes[0]
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    assert ax.get_legend() is not None


def test_plots_draw_the_demo_results():
    d1, d2, d3 = (L.demo1_int8_gemm("cpu"), L.demo2_fp8_gemm("cpu"), L.demo3_block_gemm("cpu"))
    for fig in (W.plot_int32_headroom(d1), W.plot_fp8_errors(d2), W.plot_block_errors(d3)):
        _labelled(fig)
    # The bars are the demo's numbers in percent, not recomputed ones.
    bars = W.plot_fp8_errors(d2).axes[0].patches
    assert bars[0].get_height() == pytest.approx(100 * d2.errors[("E4M3", "E4M3", "tensor")])


def test_spread_explorer_recomputes_when_the_slider_moves():
    ex = W.spread_explorer()
    at16 = ex.state["errors"]
    # At the lecture's spread the widget shows the lecture's worst-row numbers.
    d2 = L.demo2_fp8_gemm("cpu")
    assert at16["FP8 E4M3×E4M3 per tensor"] == d2.worst[("E4M3", "E4M3", "tensor")]
    ex.controls["spread_bits"].value = 0
    assert ex.state["spread_bits"] == 0
    # Rows of equal size: one scale per tensor is as good as one per row (within 1.5x).
    e = ex.state["errors"]
    assert e["FP8 E4M3×E4M3 per tensor"] < 1.5 * e["FP8 E4M3×E4M3 per row"]
    ex.controls["spread_bits"].value = 24
    # 2^24 apart: under one E4M3 scale the smallest rows fall below or into the subnormals
    # and are lost (error about 100 %); so are NVFP4's, whose E4M3 block scales span only
    # 2^17 under its one FP32 tensor scale. MXFP8's E8M0 block scales span 2^254: kept.
    e = ex.state["errors"]
    assert e["FP8 E4M3×E4M3 per tensor"] > 0.9
    assert e["NVFP4 (E2M1, 16)"] > 0.9
    assert e["MXFP8 (E4M3, 32)"] < 0.1
