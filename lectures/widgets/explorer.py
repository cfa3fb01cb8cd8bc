"""The one widget pattern every notebook uses: controls over a pure computation and a figure.

An :class:`Explorer` calls ``compute(**control values)`` whenever a control changes, keeps what
it returned as ``state``, and redraws ``draw(state)`` in place. Tests build an explorer, set a
control's ``.value`` and check ``state``: no browser needed.

Three things keep a redraw cheap and the kernel free of a backlog:

- every control that has a ``continuous_update`` setting (sliders, text boxes) gets it turned
  off, so a slider drag sends one value when the mouse is released, not one per pixel;
- the figure is drawn once into an Agg canvas and that buffer is written as the PNG
  (``Explorer.png``). The inline backend's ``savefig(bbox_inches="tight")`` would draw it two
  or three times (a layout pass, a measuring pass, the real one); a figure with a layout engine
  (ours use ``layout="constrained"``) already fits its canvas;
- the constrained layout is reused: when the new figure has the same axes, scales, limits,
  ticks, axis labels, texts and title heights as the last one rendered, which is all the layout
  depends on, its axes get the last positions and the layout solver does not run (it costs
  about as much as drawing the figure). Moving a slider that only moves a marker or changes a
  number in a title or legend therefore costs one plain draw.
"""

from __future__ import annotations

import base64
import io
from typing import Callable

import ipywidgets as widgets
from IPython import get_ipython
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib import ticker
from matplotlib.ticker import FixedFormatter
from PIL import Image


def plain_log_ticks(axis) -> None:
    """Label a log axis 0.1, 0.2, 0.5, 1, 2, 5, ... instead of powers of ten in mathtext
    (easier to read, and cheaper to draw: no mathtext to typeset on every redraw)."""
    axis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


def check_result(r, cls, demo: str) -> None:
    """Raise TypeError unless ``r`` is the ``cls`` instance that the lecture's ``demo()`` returns.

    Plot functions take a demo's result; passing anything else (a raw array, another demo's
    result) gets a message naming the demo to call.
    """
    if not isinstance(r, cls):
        raise TypeError(f"expected the {cls.__name__} that L.{demo}() returns, "
                        f"got {type(r).__name__}")


def _axis_key(axis) -> tuple:
    fmt = axis.get_major_formatter()
    return (axis.get_scale(), tuple(axis.get_majorticklocs()), tuple(axis.get_minorticklocs()),
            tuple(fmt.seq) if isinstance(fmt, FixedFormatter) else type(fmt).__name__,
            axis.label.get_text(), axis.label.get_fontsize())


def layout_key(fig: Figure):
    """What a constrained layout of ``fig`` depends on, as a comparable tuple (None: no
    constrained layout). Two figures with equal keys get the same axes positions."""
    if not isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
        return None
    key = [tuple(fig.get_size_inches()), fig.dpi]
    for t in (fig._suptitle, fig._supxlabel, fig._supylabel):
        key.append(None if t is None else (t.get_text().count("\n"), t.get_fontsize()))
    for ax in fig.axes:
        spec = ax.get_subplotspec()
        grid = None if spec is None else spec.get_gridspec()
        key.append((None if spec is None else (spec.get_geometry(), grid.get_width_ratios(),
                                               grid.get_height_ratios()),
                    ax.get_xlim(), ax.get_ylim(), _axis_key(ax.xaxis), _axis_key(ax.yaxis),
                    tuple(t.get_text().count("\n")
                          for t in (ax.title, ax._left_title, ax._right_title)),
                    tuple((t.get_text(), tuple(t.get_position())) for t in ax.texts),
                    len(ax.child_axes)))
    return tuple(key)


class Explorer:
    """Widget controls over one pure computation and one figure.

    Parameters
    ----------
    title : str
        Shown above the controls and as the plain-text fallback (e.g. on GitHub).
    controls : dict of str -> ipywidgets value widget
        Their ``.value`` become the keyword arguments of ``compute``.
    compute : callable(**values) -> dict
        Pure: returns everything the figure shows; stored as ``state``.
    draw : callable(state) -> matplotlib Figure
    rows : list of lists of control names, optional
        The layout, one HBox per list; by default every control in one row.

    Attributes
    ----------
    box : ipywidgets.VBox, what the notebook displays
    out : ipywidgets.Output, holds the current figure
    state : dict, what the last call of ``compute`` returned
    figure : Figure, the last figure drawn
    """

    def __init__(self, title: str, controls: dict, compute: Callable, draw: Callable,
                 rows: list | None = None):
        self.title, self.controls = title, controls
        self._compute, self._draw = compute, draw
        self.out = widgets.Output()
        rows = rows if rows is not None else [list(controls)]
        self.box = widgets.VBox([widgets.HTML(f"<b>{title}</b>")]
                                + [widgets.HBox([controls[k] for k in row]) for row in rows]
                                + [self.out])
        self.state: dict = {}
        self.figure: Figure | None = None
        self._layout = None  # (layout key, axes positions, suptitle position) of the last PNG
        for w in controls.values():
            if hasattr(w, "continuous_update"):
                w.continuous_update = False  # one redraw per drag (on release), no backlog
            w.observe(lambda _change: self.update(), names="value")
        self.update()

    def values(self) -> dict:
        """The controls' current values, by name."""
        return {k: w.value for k, w in self.controls.items()}

    def update(self) -> None:
        """Recompute the state from the controls and redraw the figure in place."""
        self.state = self._compute(**self.values())
        self.figure = self._draw(self.state)
        self._reuse_layout()
        ip = get_ipython()
        if ip is not None:
            # Set the Output's contents from the kernel side instead of capturing display()
            # with ``with self.out``: capturing needs a frontend, so a headless run (nbval)
            # would print the figure into the cell instead.
            data = {"image/png": base64.b64encode(self.png()).decode("ascii"),
                    "text/plain": repr(self.figure)}
            self.out.outputs = ({"output_type": "display_data", "data": data, "metadata": {}},)

    def _reuse_layout(self) -> None:
        """Give the new figure the last rendered layout if nothing it depends on changed."""
        fig = self.figure
        self._key = layout_key(fig)
        if self._key is None or self._layout is None or self._layout[0] != self._key:
            return
        _, positions, suptitle = self._layout
        fig.set_layout_engine("none")
        for ax, pos in zip(fig.axes, positions):
            ax._set_position(pos, which="both")
        if suptitle is not None:
            fig._suptitle.set_position(suptitle)

    def png(self) -> bytes:
        """The current figure as PNG bytes, at the figure's dpi, as the inline backend shows it.

        A figure with a layout engine (or one that reuses the last layout) is drawn once, as
        it is; one without gets the inline backend's ``bbox_inches="tight"``, so that nothing
        is cut off.
        """
        fig, buf = self.figure, io.BytesIO()
        if fig.get_layout_engine() is None:
            fig.savefig(buf, format="png", dpi=fig.dpi, bbox_inches="tight")
            return buf.getvalue()
        canvas = FigureCanvasAgg(fig)
        canvas.draw()  # runs the constrained layout, if the figure still has it, then draws
        if getattr(self, "_key", None) is not None:
            self._layout = (self._key, [ax.get_position(original=True) for ax in fig.axes],
                            None if fig._suptitle is None else fig._suptitle.get_position())
        width, height = canvas.get_width_height(physical=True)
        Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1).save(
            buf, format="png")
        return buf.getvalue()

    def _repr_mimebundle_(self, **kwargs) -> dict:
        bundle = self.box._repr_mimebundle_(**kwargs)
        # The widget's own repr lists every control; a fixed line keeps stored outputs stable.
        bundle["text/plain"] = f"[{self.title}: interactive, needs a running Jupyter kernel]"
        return bundle
