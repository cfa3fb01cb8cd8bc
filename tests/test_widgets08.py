"""Notebook 08's plots and widgets, driven without a browser on a tiny workload (one window of
64 tokens). Expected values come from numfmt called here directly and from the harness
functions the callback is meant to call, computed here on their own."""

import importlib

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from lectures import lecture  # noqa: E402

L = lecture(8)
pytestmark = pytest.mark.long
TINY = L.Workload(n_eval=1, seq_len=64, n_calib=1)


@pytest.fixture(scope="module")
def W():
    from lectures.widgets import lecture08
    return lecture08


@pytest.fixture(scope="module")
def lab(checkpoint, corpus):
    return L.Lab(checkpoint, corpus, TINY)


@pytest.fixture(scope="module")
def d2(lab):
    keep = ("INT8, per channel", "NVFP4 (E2M1, E4M3 per 16)")
    formats = [f for f in L.WEIGHT_FORMATS if f.label in keep]
    return L.demo2_weight_formats(lab, lab.reference, formats=formats, kinds=("v_proj",))


@pytest.fixture(scope="module")
def d3(lab):
    return L.demo3_outliers(lab)


def assert_labelled(fig):
    for ax in fig.axes:
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
        assert ax.get_legend() is not None


def test_weight_format_menus(W):
    f = W.weight_format("INT", 3, "groups of 128", symmetric=False)
    assert (f.kind, f.bits, f.granularity, f.group, f.symmetric) == ("int", 3, "group", 128, False)
    f = W.weight_format("INT", 8, "per channel")
    assert (f.granularity, f.group) == ("channel", None)
    assert W.weight_format("NVFP4", 2, "groups of 32").kind == "nvfp4"     # bits ignored
    with pytest.raises(ValueError, match="kind"):
        W.weight_format("INT5")
    with pytest.raises(ValueError, match="granularity"):
        W.weight_format("INT", 4, "per tensor")


def test_act_format_menus(W):
    assert W.act_format("float32") is None
    assert W.act_format("NVFP4").kind == "nvfp4" and W.act_format("INT8 per token").dynamic
    with pytest.raises(ValueError, match="activations"):
        W.act_format("INT4")


def test_plots_are_labelled(W, d2, d3):
    for fig in (W.plot_perplexity_vs_bits(d2), W.plot_sensitivity(d2),
                W.plot_outliers_by_layer(d3), W.plot_outlier_channels(d3)):
        assert_labelled(fig)


def test_plots_refuse_other_results(W, d2, d3):
    with pytest.raises(TypeError, match="demo2_weight_formats"):
        W.plot_perplexity_vs_bits(d3)
    with pytest.raises(TypeError, match="demo3_outliers"):
        W.plot_outlier_channels(d2)
    with pytest.raises(ValueError, match="decoder linear"):
        W.plot_outlier_channels(d3, "lm_head")


def test_explorer_measures_what_its_menus_say(W, lab):
    import numfmt
    from lectures import lecture, llm
    ex = W.quantization_explorer(lab)
    ex.controls["histogram_of"].value = "down_proj"
    ex.controls["layers"].value = "down_proj"
    ex.controls["granularity"].value = "groups of 128"
    ex.controls["bits"].value = 3
    ex.controls["activations"].value = "INT8 per token"
    s = ex.state
    fmt = llm.WeightFormat("", "int", 3, "group", 128)
    names = list(llm.decoder_linears(lab.model, ["down_proj"]))
    stored = llm.quantized_weight_tensors(lab.float32_model, fmt, names)   # float32 values
    with llm.swapped_weights(lab.model, stored), \
            llm.quantized_inputs(lab.model, llm.ActFormat("", "int8")):
        expected = llm.perplexity(lab.model, lab.eval)
    assert s["ppl"] == expected and s["reference"] == lab.reference
    assert s["bits_per_weight"] == pytest.approx(3 + 16 / 128)            # rows of 1536
    assert s["target"] == "model.layers.29.mlp.down_proj"
    np.testing.assert_array_equal(s["xq"], numfmt.quantize_int(s["x"], 8,
                                                               granularity="channel").values)
    assert s["x"].shape == (64, 1536)
    assert_labelled(ex.figure)


def test_explorer_disables_int_controls_for_other_formats(W, lab):
    ex = W.quantization_explorer(lab)
    ex.controls["layers"].value = "v_proj"
    ex.controls["kind"].value = "MXFP4"
    assert ex.controls["bits"].disabled and ex.controls["granularity"].disabled
    assert ex.state["format"].kind == "mxfp4"
    assert ex.state["bits_per_weight"] == 4.25
    ex.controls["kind"].value = "INT"
    assert not ex.controls["bits"].disabled


def _stored_demo2():
    """Demo 2's result as notebook 08 draws it: the stored full run (no model needed)."""
    W = importlib.import_module("lectures.widgets.lecture08")
    return W.load_stored()["demo2"]


def test_perplexity_labels_overprint_nothing():
    """The stored run's points as the notebook draws them, its seven formats (INT4 g32 and
    NVFP4 close together): no two point labels overlap, none covers the legend, all inside the
    axes (drawn boxes, pixels)."""
    W = importlib.import_module("lectures.widgets.lecture08")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    r = _stored_demo2()
    assert len(r.ppl) == 15
    fig = W.plot_perplexity_vs_bits(r, W.NOTEBOOK_FORMATS)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    ax = fig.axes[0]
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    assert len(boxes) == len(W.NOTEBOOK_FORMATS) == 7
    legend, frame = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    for i, a in enumerate(boxes):
        assert not a.overlaps(legend) and frame.x0 <= a.x0 and a.x1 <= frame.x1
        assert not any(a.overlaps(b) for b in boxes[i + 1:]), ax.texts[i].get_text()


def test_stored_run_is_the_full_workload_and_prints_as_the_script_printed(W, tmp_path):
    """The notebook's stored run: every demo of a full run (the command and workload it was made
    with say so), each printable by the lecture's own show_demoK; a --quick file, or one that
    lacks a demo, is refused (the notebook presents only the script's full run)."""
    import contextlib
    import io
    from lectures import llm
    stored = W.load_stored()
    _, about = llm.load_results(W.STORED, L)
    assert about == {"workload": {"n_eval": 4, "seq_len": 512, "n_calib": 4},
                     "command": "08_real_model.py"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for name in W.STORED_DEMOS:
            getattr(L, f"show_{name}")(stored[name])
    text = out.getvalue()
    assert all(f"Demo {k}:" in text for k in range(1, 7)) and "What to notice" in text
    assert len(stored["demo2"].ppl) == len(L.WEIGHT_FORMATS) and stored["demo4"].nll
    with pytest.raises(ValueError, match="formats"):
        W.plot_perplexity_vs_bits(stored["demo2"], ["INT5, per channel"])
    quick = tmp_path / "quick.json"
    llm.save_results(quick, stored, {"command": "08_real_model.py --quick"})
    with pytest.raises(ValueError, match="not a full run"):
        W.load_stored(quick)
    partial = tmp_path / "partial.json"
    llm.save_results(partial, {"demo1": stored["demo1"]}, {"command": "08_real_model.py"})
    with pytest.raises(ValueError, match="not a full run"):
        W.load_stored(partial)
