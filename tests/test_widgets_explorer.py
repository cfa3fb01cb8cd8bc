"""The Explorer pattern itself: no backlog of redraws while a slider is dragged, and the PNG it
sends. Each widget module's explorers are checked in tests/test_widgetsNN.py."""

import importlib
import inspect
import struct
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import ipywidgets as widgets  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from lectures.widgets.explorer import Explorer  # noqa: E402

WIDGETS = Path(__file__).resolve().parents[1] / "lectures" / "widgets"


def every_kind_of_control():
    return {"int": widgets.IntSlider(value=3, min=0, max=9),
            "float": widgets.FloatSlider(value=0.5, min=0.0, max=1.0),
            "log": widgets.FloatLogSlider(value=1.0, base=10, min=-2, max=2),
            "choice": widgets.SelectionSlider(options=[1, 2, 3], value=2),
            "range": widgets.IntRangeSlider(value=(1, 4), min=0, max=9),
            "text": widgets.Text(value="a"),
            "number": widgets.FloatText(value=1.0),
            "menu": widgets.Dropdown(options=["a", "b"], value="a")}


def figure_of(state, layout="constrained"):
    fig = Figure(figsize=(4, 3), dpi=50, layout=layout)
    fig.subplots().plot([0, 1], [0, state["int"]])
    return fig


def test_no_control_sends_values_while_it_is_dragged():
    controls = every_kind_of_control()
    assert all(w.continuous_update for w in controls.values()
               if isinstance(w, (widgets.IntSlider, widgets.FloatSlider)))  # ipywidgets' default
    Explorer("t", controls, lambda **v: v, figure_of)
    with_setting = [k for k, w in controls.items() if hasattr(w, "continuous_update")]
    assert set(with_setting) == {"int", "float", "log", "choice", "range", "text", "number"}
    assert not any(controls[k].continuous_update for k in with_setting)


def test_a_change_recomputes_and_redraws_once():
    calls = []
    controls = {"int": widgets.IntSlider(value=3, min=0, max=9)}
    ex = Explorer("t", controls, lambda **v: calls.append(v) or v, figure_of)
    controls["int"].value = 7
    assert calls == [{"int": 3}, {"int": 7}]
    assert ex.state == {"int": 7} and ex.figure.axes[0].lines[0].get_ydata()[1] == 7


def png_size(data: bytes) -> tuple:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_png_is_the_whole_figure_when_it_has_a_layout_engine():
    ex = Explorer("t", {"int": widgets.IntSlider(value=3)}, lambda **v: v, figure_of)
    assert png_size(ex.png()) == (4 * 50, 3 * 50)   # rendered as it is, not cropped


def test_png_is_cropped_as_the_inline_backend_does_without_one():
    ex = Explorer("t", {"int": widgets.IntSlider(value=3)}, lambda **v: v,
                  lambda s: figure_of(s, layout=None))
    w, h = png_size(ex.png())
    assert w < 4 * 50 and h < 3 * 50                # bbox_inches="tight" trims the margins


@pytest.mark.parametrize("path", sorted(WIDGETS.glob("lecture*.py")), ids=lambda p: p.stem)
def test_every_explorer_is_an_Explorer(path):
    """So that the settings above reach every explorer of every notebook."""
    source = path.read_text()
    assert "continuous_update=True" not in source
    module = importlib.import_module(f"lectures.widgets.{path.stem}")
    found = [fn for name, fn in inspect.getmembers(module, inspect.isfunction)
             if name.endswith("_explorer") and not name.startswith("_")
             and fn.__module__ == module.__name__]
    assert found
    for fn in found:
        assert inspect.signature(fn).return_annotation in (Explorer, "Explorer"), fn.__name__


# ---------------------------------------------------------------------------------------------
# A draw function that refills the explorer's last figure (explorer_figure) must draw exactly
# what a new figure of the same state shows. The oracle is a fresh Figure drawn by the same
# function with fig=None; both are rendered until the constrained layout settles (it depends
# a little on where the axes start), then compared pixel for pixel.
# ---------------------------------------------------------------------------------------------
def _settled_pixels(fig):
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig.set_layout_engine("constrained")
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    last = np.asarray(canvas.buffer_rgba()).copy()
    for _ in range(6):
        canvas.draw()
        now = np.asarray(canvas.buffer_rgba()).copy()
        if (now == last).all():
            break
        last = now
    return last


def _draw_everything(s, fig=None):
    """Each thing a reused Axes could carry over: colours from the property cycle, a category
    axis, a log scale on one state only, fixed limits on one state only, ticks set by hand,
    bars (a container), texts, a legend, a suptitle."""
    from lectures.widgets.explorer import explorer_figure

    fig, (ax1, ax2) = explorer_figure(fig, (6, 3), 1, 2)
    n = s["n"]
    for k in range(n):
        ax1.plot([0, 1, 2], [k, k + n, k * n + 1], label=f"line {k}")
    if n % 2:
        ax1.set_yscale("log")
        ax1.set_ylim(0.5, 100)
    ax1.legend(fontsize=6)
    ax1.set_title(f"{n} lines")
    ax2.barh([f"row {k}" for k in range(3)], [n, 2 * n, 3 * n])
    ax2.annotate(f"n = {n}", (n, 1))
    if n == 2:
        ax2.set_xticks([0, 3, 6], ["zero", "three", "six"])
    fig.suptitle(f"state {n}")
    return fig


@pytest.mark.parametrize("sequence", [(1, 2, 3), (3, 1, 2, 2), (2, 4, 1)])
def test_a_refilled_figure_is_the_figure_a_new_one_would_be(sequence):
    slider = widgets.IntSlider(value=sequence[0], min=1, max=4)
    e = Explorer("t", {"n": slider}, lambda n: {"n": n}, _draw_everything)
    first = e.figure
    for n in sequence[1:]:
        slider.value = n
        e.png()
        assert e.figure is first  # the figure was refilled, not rebuilt
        fresh = _draw_everything(e.state)
        assert (_settled_pixels(e.figure) == _settled_pixels(fresh)).all(), n


def test_explorer_figure_builds_a_new_figure_for_other_arguments():
    from lectures.widgets.explorer import explorer_figure

    fig, ax = explorer_figure(None, (4, 3))
    again, ax_again = explorer_figure(fig, (4, 3))
    assert again is fig and ax_again is ax
    other, axes = explorer_figure(fig, (4, 3), 1, 2)
    assert other is not fig and len(axes) == 2


# ---------------------------------------------------------------------------------------------
# Layout reuse: an end tick label that the neighbouring axis' labels cover does not make the
# layout solver run again, and a layout seen before is reused; either way the PNG is what a
# fresh figure of the state shows once its constrained layout has settled.
# ---------------------------------------------------------------------------------------------
def _draw_shifted(s, fig=None):
    from lectures.widgets.explorer import explorer_figure

    fig, ax = explorer_figure(fig, (4, 3))
    ax.plot([s["lo"], 10], [0, s["top"]], label="line")
    ax.set_xlim(s["lo"], 10)  # the label "0" sits a little inside the left end
    ax.set(title="shifted", xlabel="x", ylabel="y")
    ax.legend()
    return fig


def test_covered_end_labels_and_layouts_seen_before_skip_the_solver(monkeypatch):
    import io

    import numpy as np
    from matplotlib.layout_engine import ConstrainedLayoutEngine
    from PIL import Image

    runs = []
    solve = ConstrainedLayoutEngine.execute
    monkeypatch.setattr(ConstrainedLayoutEngine, "execute",
                        lambda self, fig: (runs.append(1), solve(self, fig))[1])
    lo = widgets.FloatSlider(value=-0.05, min=-1.0, max=0.0, step=0.05)
    top = widgets.Dropdown(options=[1000, 10], value=1000)
    e = Explorer("t", {"lo": lo, "top": top}, lambda lo, top: {"lo": lo, "top": top},
                 _draw_shifted)
    expected = []
    for lo_value, top_value in ((-0.05, 1000), (-0.1, 1000), (-0.15, 1000), (-0.15, 10),
                                (-0.15, 1000), (-0.15, 10)):
        lo.value, top.value = lo_value, top_value
        png = np.asarray(Image.open(io.BytesIO(e.png())).convert("RGBA"))
        expected.append(len(runs))
        fresh = _draw_shifted(e.state)
        assert (png == _settled_pixels(fresh)).all(), (lo_value, top_value)
        del runs[expected[-1]:]  # the oracle's own solves do not count
    # One solve for the first figure and one for the narrower y labels ("10"); the "0" moving
    # towards the left end (covered by "1000") and the return to either state solve nothing.
    assert expected == [1, 1, 1, 2, 2, 2]


def test_label_sizes_are_remembered_per_font_state():
    """The layout key's label measurements are cached; a font changed in place is measured
    again (the oracle: a fresh renderer's measurement of the same label in the same font)."""
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.font_manager import FontProperties

    from lectures.widgets.explorer import _label_size

    prop = FontProperties(size=10)
    seen = set()
    for size in (10, 10, 14, 10, 7):
        prop.set_size(size)
        w, h, _ = RendererAgg(8, 8, 100).get_text_width_height_descent("0.0001", prop, False)
        assert _label_size("0.0001", prop, 100) == (w, h), size
        seen.add((w, h))
    assert len(seen) == 3  # three sizes, three measurements


def test_stored_line_is_in_the_current_language():
    """The plain-text line a notebook stores beside an explorer: the English bytes as before,
    Chinese in a Chinese notebook (the title is the explorer's, already translated)."""
    from console.i18n import language
    e = Explorer("A title", {"int": widgets.IntSlider(value=1)}, lambda int: {"int": int},
                 figure_of)
    assert e._repr_mimebundle_()["text/plain"] == \
        "[A title: interactive, needs a running Jupyter kernel]"
    with language("zh"):
        zh = Explorer("标题", {"int": widgets.IntSlider(value=1)}, lambda int: {"int": int},
                      figure_of)
        assert zh._repr_mimebundle_()["text/plain"] == "[标题：可交互，需要运行中的 Jupyter 内核]"
