"""Notebook 13's plots and the memory explorer, driven without a browser; the explorer's state
against numfmt.memory's bill computed here by hand (bytes per parameter written out)."""

import importlib

import pytest

pytest.importorskip("ipywidgets")
import matplotlib  # noqa: E402

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

L = importlib.import_module("lectures.13_memory_of_training")
W = importlib.import_module("lectures.widgets.lecture13")


def test_memory_explorer_follows_the_controls():
    e = W.memory_explorer()
    s = e.state
    assert (s["model"], s["recipe"], s["state"], s["devices"], s["sharding"]) == \
        ("Llama 3.1 8B", "BF16 mixed", "fp32", 8, "fsdp")
    p = 8_030_261_248
    share = -(-p // 8)
    assert s["bill"]["master"] == 4 * share and s["bill"]["moments"] == 8 * share
    e.controls["state"].value = "int8"
    assert e.state["bill"]["moments"] == 2 * share + 8 * -(-share // 2048)
    e.controls["sharding"].value = "dp"
    assert e.state["bill"]["master"] == 4 * p and e.state["bill"]["gathered"] == 0
    e.controls["checkpointing"].value = True
    assert e.state["bill"]["activations"] < s["bill"]["activations"]
    assert isinstance(e.figure, Figure)


def test_plot_bill_and_bad_input():
    r = L.demo1_bill()
    fig = W.plot_bill(r, "Llama 3.2 1B")
    assert len(fig.axes[0].patches) == len(L.BILL_PRECISIONS) * len(L.SETUPS) * 7
    with pytest.raises(TypeError, match="demo1_bill"):
        W.plot_bill(object())
    with pytest.raises(ValueError, match="model"):
        W.plot_bill(r, "Llama 70B")
