"""Notebook 03's plots and explorers, driven by setting widget values (no browser).
Expected values are hand derivations from the setup (a spike of 1 is no spike at all)."""

import importlib

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from lectures.widgets import lecture03 as W  # noqa: E402

L = importlib.import_module("lectures.03_scaling")


def assert_labelled(fig):
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel()
        assert ax.get_title() or fig._suptitle is not None
        assert ax.get_legend() is not None


def test_plots_are_labelled():
    assert_labelled(W.plot_tensor_scaling(L.demo1_tensor_scaling(n=4096)))
    assert_labelled(W.plot_delayed(L.demo2_delayed_scaling(steps=48, n=256)))
    assert_labelled(W.plot_outlier(L.demo3_one_outlier(n=4096)))
    assert_labelled(W.plot_nvfp4(L.demo4_nvfp4_vs_tensor(n=1 << 12)))
    with pytest.raises(TypeError, match="DelayedResult"):
        W.plot_delayed(L.demo3_one_outlier(n=4096))


def test_delayed_explorer():
    e = W.delayed_explorer()
    r = e.state["result"]
    assert r.clipped["delayed"][r.spike_step] > 0.5
    e.controls["spike"].value = 1.0      # no spike: the scale never lags by more than the drift
    r = e.state["result"]
    assert r.clipped["delayed"][r.spike_step] < 0.01
    e.controls["history"].value = 1      # history 1: the scale of step t is step t-1's amax
    r = e.state["result"]
    assert np.array_equal(r.scales["delayed"][1:], r.scales["current"][:-1])
    assert_labelled(e.figure)


def test_outlier_explorer():
    e = W.outlier_explorer()
    d = {row["name"]: row for row in e.state["result"].rows}
    assert d["INT8, one tensor scale"]["outlier"] > 10 * d["INT8, one tensor scale"]["clean"]
    e.controls["factor"].value = 1.0     # the "outlier" equals the old max: nothing changes
    d = {row["name"]: row for row in e.state["result"].rows}
    for name, row in d.items():
        if "one tensor scale" in name:   # the tensor's amax is unchanged: identical results
            assert row["outlier"] == row["clean"], name
    # NVFP4: only the outlier's block of 16 (1 of 4096) gets a new scale. Even if that block's
    # squared error grew tenfold, a block's average share 1/4096 moves the norm by
    # sqrt(1 + 9/4096) - 1 = 0.11%: 1% catches a change anywhere else.
    assert e.state["result"].n == 1 << 16
    nv = d["NVFP4 (16 per E4M3 scale)"]
    assert nv["outlier"] == pytest.approx(nv["clean"], rel=0.01)
