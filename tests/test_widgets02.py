"""Notebook 02's plots and explorers, driven by setting widget values (no browser).
Expected values are hand derivations (where a running sum must stall) or numpy float16."""

import importlib

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from lectures.widgets import lecture02 as W  # noqa: E402

L = importlib.import_module("lectures.02_rounding_and_accumulation")


def assert_labelled(fig):
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
        assert ax.get_legend() is not None


def test_plots_are_labelled():
    assert_labelled(W.plot_rounding_bias(L.demo1_rounding_bias(n=4096)))
    assert_labelled(W.plot_swamping(L.demo3_swamping(n=1024)))
    assert_labelled(W.plot_updates(L.demo4_vanishing_updates(n_weights=64, steps=50)))
    with pytest.raises(TypeError, match="SwampResult"):
        W.plot_swamping(L.demo1_rounding_bias(n=64))


def test_swamping_explorer_against_numpy_float16():
    e = W.swamping_explorer(log2_n=12, high=1.0)
    r = e.state["result"]
    assert r.n == 4096
    # 4096 terms averaging 0.5: the FP16 sum (stall at 2048) is barely reached; BF16 stalls at 256
    assert r.stall["BF16"] == 256.0
    e.controls["high"].value = 0.1
    r = e.state["result"]
    assert r.high == pytest.approx(0.1)
    # from 128 on the FP16 spacing is 0.125: terms below 0.0625 vanish, so the sum falls short
    assert r.stall["FP16"] < 0.97 * r.exact
    x = np.random.default_rng(0).uniform(0, 0.1, 4096).astype(np.float16)
    s = np.float16(0)
    for v in x:
        s = np.float16(s + v)
    assert r.stall["FP16"] == float(s)
    assert_labelled(e.figure)


def test_update_explorer_large_updates_survive():
    e = W.update_explorer()
    d = {row["storage"]: row for row in e.state["result"].rows}
    assert d["BF16, nearest"]["applied"] == 0.0
    e.controls["update"].value = 1e-2   # above half a BF16 ulp (2^-8 = 0.0039) at every weight
    d = {row["storage"]: row for row in e.state["result"].rows}
    assert d["BF16, nearest"]["applied"] > 0.2 and d["BF16, nearest"]["unchanged"] == 0.0
    assert e.state["update"] == pytest.approx(1e-2)


@pytest.mark.parametrize("n, high", [(1 << 12, 1.0), (1 << 14, 0.1), (1 << 16, 10 ** 0.25)])
def test_swamping_explorer_draws_demo3s_running_sums(n, high):
    """The explorer skips demo 3's table, not its numbers: the same running sums and stalls."""
    a, b = W.running_sums(n, high), L.demo3_swamping(n, high)
    assert (a.n, a.high, a.exact, a.stall) == (b.n, b.high, b.exact, b.stall)
    np.testing.assert_array_equal(a.exact_partial, b.exact_partial)
    for name in b.partial:
        np.testing.assert_array_equal(a.partial[name], b.partial[name])


def test_no_control_updates_while_it_is_dragged():
    for e in (W.swamping_explorer(log2_n=10), W.update_explorer()):
        assert not any(getattr(w, "continuous_update", False) for w in e.controls.values())
