"""Notebook 12's plots and widget callbacks, driven without a browser.

The machine result is built by hand (fixed ceilings), so the explorer's state is checked
against the roofline computed here from numfmt.cost and hand-counted bytes.
"""

import importlib

import pytest

pytest.importorskip("ipywidgets")
import matplotlib  # noqa: E402

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from lectures import machine  # noqa: E402
from lectures.llm import speed  # noqa: E402
from numfmt import cost  # noqa: E402

L = importlib.import_module("lectures.12_time_and_memory")
W = importlib.import_module("lectures.widgets.lecture12")


def fixed(value):
    return machine.Spread(value, value, value, 1)


@pytest.fixture(scope="module")
def m():
    return L.MachineResult("test CPU", 2, 2, {"triad": fixed(10e9), "read": fixed(20e9)},
                           {"float32": fixed(100e9), "int8": fixed(400e9)}, {}, 1024)


def test_decode_explorer_follows_the_controls(m):
    e = W.decode_explorer(m)
    s = e.state
    assert (s["weights"], s["kv"], s["context"], s["batch"]) == ("INT4, groups of 32", "BF16",
                                                                  1024, 1)
    c = speed.pass_cost(L.SMOLLM2, 4.5, context=1024, head_bits=16, kv_bits=16)
    assert s["tokens_per_s"] == 1 / cost.roofline_seconds(c.flops, c.nbytes, 100e9, 20e9)
    assert s["kv_cache_mb"] == 23_040 * 1024 / 1e6
    assert s["tokens_per_s"] > s["float32_tokens_per_s"]        # fewer bytes, memory-bound
    e.controls["kv"].value = "INT8, per token"
    assert e.state["kv_cache_mb"] == 11_520 * 8.25 / 8 * 1024 / 1e6
    e.controls["context"].value = 8192
    e.controls["batch"].value = 64
    assert (e.state["context"], e.state["batch"]) == (8192, 64)
    assert e.state["kv_cache_mb"] == 11_520 * 8.25 / 8 * 8192 * 64 / 1e6
    e.controls["weights"].value = "float32"
    e.controls["kv"].value = "BF16"
    assert e.state["tokens_per_s"] == e.state["float32_tokens_per_s"]   # the same setting
    assert isinstance(e.figure, Figure)


def test_plot_roofline(m):
    fig = W.plot_roofline(m)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_title() and ax.get_ylabel()
    assert len(ax.lines) == 2                                   # one ceiling per dtype
    with pytest.raises(TypeError, match="demo1_machine"):
        W.plot_roofline([1, 2])


def test_plot_roofline_with_points(m):
    c = speed.pass_cost(L.SMOLLM2, 32, new_tokens=16, all_logits=True)
    pts = [L.OperatingPoint("float32", 1, 16, False, c, 50e9, fixed(20e9), "compute")]
    ops = L.OperatingResult(pts, {"float32": 5.0}, 20e9, {"float32": 100e9}, "test CPU")
    fig = W.plot_roofline(m, ops)
    assert len(fig.axes[0].lines) == 2 + 1 + 1                  # ceilings, the point, legend
    with pytest.raises(TypeError, match="demo4_operating_points"):
        W.plot_roofline(m, [1])


def test_plot_bytes_per_token():
    r = L.demo2_bytes_per_token(L.SMOLLM2, 20e9)
    fig = W.plot_bytes_per_token(r)
    ax = fig.axes[0]
    assert len(ax.patches) == 3 * len(r.bits)
    assert ax.get_title() and ax.get_xlabel() and ax.get_legend() is not None
    with pytest.raises(TypeError, match="demo2_bytes_per_token"):
        W.plot_bytes_per_token(None)


def test_decode_explorer_measures_the_machine_by_itself():
    e = W.decode_explorer()                 # as benchmarks/bench_explorers.py builds it
    assert e.state["tokens_per_s"] > 0 and e.state["bound"] in ("memory", "compute")


def _is_cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def _drawn(fig) -> str:
    from matplotlib.text import Text
    return "\n".join(t.get_text() for t in fig.findobj(Text) if t.get_text())


def test_figures_and_explorer_in_chinese(m):
    from console.i18n import language
    from lectures.widgets.fonts import use_language_fonts
    from text_checks import english_runs
    c = speed.pass_cost(L.SMOLLM2, 32, new_tokens=16, all_logits=True)
    pts = [L.OperatingPoint("float32", 1, 16, False, c, 50e9, fixed(20e9), "compute")]
    ops = L.OperatingResult(pts, {"float32": 5.0}, 20e9, {"float32": 100e9}, "test CPU")
    with matplotlib.rc_context(), language("zh"):
        use_language_fonts()   # Noto Sans SC: the explorer draws its figure
        figs = [W.plot_roofline(m, ops), W.plot_bytes_per_token(
            L.demo2_bytes_per_token(L.SMOLLM2, 20e9))]
        e = W.decode_explorer(m)
        figs.append(e.figure)
        controls = {k: (w.description, getattr(w, "options", ())) for k, w in e.controls.items()}
        title = e.title
    for fig in figs:
        ax = fig.axes[0]
        assert _is_cjk(ax.get_title()) or "test CPU" in ax.get_title()
        assert _is_cjk(ax.get_xlabel()) and _is_cjk(ax.get_ylabel()), ax.get_xlabel()
        assert english_runs(_drawn(fig)) == []
    assert _is_cjk(figs[0].axes[0].get_title())
    assert _is_cjk(title) and all(_is_cjk(d) for d, _ in controls.values())
    weights = controls["weights"][1]
    assert [v for _, v in weights] == list(L.format_bits())
    assert any(_is_cjk(label) for label, _ in weights)     # "INT4, groups of 32" and the like
