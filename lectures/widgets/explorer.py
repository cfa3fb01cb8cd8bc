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
- the constrained layout is reused: when the new figure has the same axes, scales, tick
  label sizes and overhangs, axis labels, texts and title heights as one rendered before (the
  last 64 layouts are kept), which is all the layout depends on, its axes get that figure's
  positions and the layout solver does not run (it costs about as much as drawing the figure).
  Moving a slider that only moves a marker or changes a number in a title or legend, or going
  back to a setting seen before, therefore costs one plain draw;
- a draw function that takes a ``fig`` keyword gets the explorer's last figure back and fills
  it through :func:`explorer_figure`, which empties its axes instead of building new ones.
  Most of a fresh figure's first draw is spent creating tick objects (each a copy of the
  axis' template: two lines, two texts); emptied axes keep theirs, and a redraw costs about
  half as much.
"""

from __future__ import annotations

import base64
import inspect
import io
from typing import Callable

import ipywidgets as widgets
import numpy as np
from IPython import get_ipython
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.cbook import is_math_text
from matplotlib.figure import Figure
from matplotlib.text import Annotation
from matplotlib.transforms import Bbox
from matplotlib.layout_engine import ConstrainedLayoutEngine
from matplotlib import ticker
from PIL import Image

from lectures.i18n import domain

_ = domain("widgets").gettext


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


def _empty_axes(ax) -> None:
    """Remove what a draw function put on ``ax`` and reset what it may have set (scales,
    locators, formatters, limits, titles), so that drawing into it again gives the figure a new
    Axes would; the axis' tick objects are kept."""
    for container in list(ax.containers):
        container.remove()
    for artist in (*ax.lines, *ax.collections, *ax.patches, *ax.texts, *ax.images,
                   *ax.tables, *ax.artists):
        artist.remove()
    if ax.legend_ is not None:
        ax.legend_.remove()
    for title in (ax.title, ax._left_title, ax._right_title):
        title.set_text("")
    ax.set_xlabel("")
    ax.set_ylabel("")
    ax.set_prop_cycle(None)  # colours start again at C0, as on a new Axes
    for axis in (ax.xaxis, ax.yaxis):  # units (categories of a bar chart) found again
        axis._converter, axis._converter_is_explicit, axis.units = None, False, None
    ax.set_xscale("linear")  # the scale's default locators and formatters, as a new Axes has
    ax.set_yscale("linear")
    ax.dataLim.set_points(Bbox.null().get_points())
    ax.ignore_existing_data_limits = True
    ax.set_autoscale_on(True)
    ax._request_autoscale_view()


def explorer_figure(fig: Figure | None, figsize: tuple, nrows: int = 1, ncols: int = 1,
                    **subplots_kw):
    """A constrained-layout figure and its subplots for a draw function: new ones, or ``fig``
    (an explorer's last figure, made by this function with the same arguments) with its axes
    emptied.

    Parameters
    ----------
    fig : Figure or None
        None (a plot function called by itself) builds a new figure.
    figsize : (width, height) in inches
    nrows, ncols, **subplots_kw
        As ``Figure.subplots`` (``width_ratios``, ``sharey``, ...).

    Returns
    -------
    (Figure, Axes or array of Axes)
        What ``Figure.subplots`` returns. Only these axes are emptied: other axes of a reused
        figure (a colorbar's) keep their contents, so a draw function adds them only when
        ``fig`` was None or not reusable (``len(fig.axes)`` tells).
    """
    spec = (tuple(figsize), nrows, ncols, tuple(sorted(subplots_kw.items())))
    if fig is not None and getattr(fig, "_explorer_spec", None) == spec:
        axes = fig._explorer_axes
        for ax in np.ravel(axes):
            _empty_axes(ax)
        fig.set_layout_engine("constrained")
        return fig, axes
    fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(nrows, ncols, **subplots_kw)
    fig._explorer_spec, fig._explorer_axes = spec, axes
    return fig, axes


LAYOUTS_KEPT = 64  #: layouts an Explorer remembers (a key and a few positions each)
_RENDERERS: dict = {}  # dpi -> a tiny Agg renderer, to measure tick labels for the layout key


_SIZES: dict = {}  # (text, font properties, dpi) -> _label_size, as matplotlib caches metrics


def _label_size(text: str, prop, dpi: float) -> tuple:
    """(width, height) in pixels of a label drawn in ``prop`` at ``dpi``.

    Remembered (the same tick labels come back on every redraw, and measuring one lays out its
    glyphs); the key holds a copy of ``prop``, whose hash follows its mutable state."""
    key = (text, prop.copy(), dpi)
    size = _SIZES.get(key)
    if size is not None:
        return size
    renderer = _RENDERERS.get(dpi)
    if renderer is None:
        renderer = _RENDERERS[dpi] = RendererAgg(8, 8, dpi)
    sizes = [renderer.get_text_width_height_descent(line, prop, is_math_text(line))[:2]
             for line in text.split("\n")]
    if len(_SIZES) >= 4096:
        _SIZES.clear()
    size = _SIZES[key] = (max(w for w, _ in sizes), sum(h for _, h in sizes))
    return size


def _axis_key(axis, covered=(0, 0)) -> tuple:
    """What an axis contributes to a constrained layout, to the pixel: the widest (y) or
    tallest (x) tick label, which sets the margin beside the axis; how far the first and last
    labels stick out beyond the ends of the axis, when they can; its label and font sizes.
    Limits and tick values only matter through these.

    An x label is centred on its tick, so it sticks out by half its width less its tick's
    distance from the end (recorded, to the pixel, when that is positive). A y label is centred
    on its baseline, so it is recorded, with its distance and height, whenever its distance
    is less than its height. An end where the label could stick out no farther than
    ``covered`` (pixels that the decorations of the axis beside it reach, as
    :func:`_axis_ends_covered` finds) cannot move the margin and is left out."""
    lo, hi = sorted(axis.get_view_interval())
    locs = [v for v in axis.get_majorticklocs() if lo <= v <= hi]
    head = (axis.get_scale(), axis.label.get_text(), axis.label.get_fontsize(),
            len(axis.get_minorticklocs()) > 0)
    if not locs:
        return head
    prop = axis.get_major_ticks()[0].label1.get_fontproperties()
    dpi = axis.figure.dpi
    sizes = [_label_size(label, prop, dpi)
             for label in axis.get_major_formatter().format_ticks(locs)]
    is_x = axis.axis_name == "x"
    along, across = (0, 1) if is_x else (1, 0)
    box = axis.axes.bbox
    length = box.width if is_x else box.height
    t = axis.get_transform().transform
    a, b = t(lo), t(hi)
    ends = []
    for loc, size, sign, cover in ((locs[0], sizes[0], 1, covered[0]),
                                   (locs[-1], sizes[-1], -1, covered[1])):
        d = (t(loc) - a if sign > 0 else b - t(loc)) / (b - a) * length
        if (size[along] / 2 if is_x else size[along]) <= cover:
            ends.append(None)
        elif is_x:
            out = size[along] / 2 - d
            ends.append(round(out) if out > 0 else None)
        else:
            ends.append((round(d), round(size[along])) if d < size[along] else None)
    return head + (round(max(size[across] for size in sizes)), tuple(ends))


def _decoration_reach(axis) -> float:
    """Pixels that the axis' decorations on its first side (left of a y axis, below an x axis)
    reach from the axes at least: its tick labels' pad and the widest (y) or tallest (x) of
    them, plus its label's pad and font size when it has one; 0 without tick labels there."""
    ticks = axis.get_major_ticks()
    lo, hi = sorted(axis.get_view_interval())
    locs = [v for v in axis.get_majorticklocs() if lo <= v <= hi]
    if not ticks or not locs or not ticks[0].label1.get_visible():
        return 0.0
    tick, px = ticks[0], axis.figure.dpi / 72
    i = 0 if axis.axis_name == "y" else 1
    reach = max(_label_size(label, tick.label1.get_fontproperties(), axis.figure.dpi)[i]
                for label in axis.get_major_formatter().format_ticks(locs))
    reach += max(0.0, tick.get_tick_padding() + tick.get_pad()) * px
    if axis.label.get_text() and axis.label.get_visible():
        reach += (axis.labelpad + axis.label.get_fontsize()) * px
    return reach


def _axis_ends_covered(ax) -> tuple:
    """``covered`` for :func:`_axis_key` of ``ax.xaxis`` and ``ax.yaxis``. The x axis' left
    end lies beside the y axis' decorations (on the left), which the first x label, centred on
    its tick, passes only if half its width is more than they reach; the y axis' bottom end
    lies above the x axis' decorations, which a y label passes only if its height is more than
    they reach; its top end lies below a title, which sits its pad above the axes and is no
    smaller than the tick labels (then any label counts as covered). The right end of the x
    axis is never covered."""
    ticks = ax.yaxis.get_major_ticks()
    titled = bool(ticks) and any(
        t.get_text() and t.get_visible() and t.get_fontsize() >= ticks[0].label1.get_fontsize()
        for t in (ax.title, ax._left_title, ax._right_title))
    return ((_decoration_reach(ax.yaxis), 0.0),
            (_decoration_reach(ax.xaxis), float("inf") if titled else 0.0))


def _text_key(t) -> tuple:
    """What a text contributes to a constrained layout: nothing when it cannot reach the edge
    of its axes (its box, estimated generously from its lines and font size, lies inside with
    4 pixels to spare), else its string, anchor (to the pixel), size, alignment and rotation."""
    precise = (t.get_text(), t.get_fontsize(), t.get_horizontalalignment(),
               t.get_verticalalignment(), t.get_rotation())
    try:
        transform = (t._get_xy_transform(None, t.anncoords) if isinstance(t, Annotation)
                     else t.get_transform())
        x, y = transform.transform(t.get_unitless_position())
    except Exception:  # coordinates that need a renderer (offset points, ...): be exact
        return precise + (tuple(t.get_position()),)
    em = t.get_fontsize() * t.figure.dpi / 72
    lines = t.get_text().split("\n")
    w, h = 0.7 * em * max(map(len, lines)), 1.3 * em * len(lines)
    x0 = x - {"left": 0, "center": w / 2, "right": w}[t.get_horizontalalignment()]
    y0 = y - {"top": h, "center": h / 2, "center_baseline": h / 2}.get(
        t.get_verticalalignment(), 0.3 * em)
    box = t.axes.bbox
    if (t.get_rotation() == 0 and box.x0 + 4 <= x0 and x0 + w <= box.x1 - 4
            and box.y0 + 4 <= y0 and y0 + h <= box.y1 - 4):
        return ("inside",)
    return precise + (round(x), round(y))


def layout_key(fig: Figure):
    """What a constrained layout of ``fig`` depends on, as a hashable tuple (None: no
    constrained layout). Two figures with equal keys get the same axes positions, to the
    pixel or two that an end tick label or a text moving inside its bucket can make."""
    if not isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
        return None
    key = [tuple(fig.get_size_inches()), fig.dpi]
    for t in (fig._suptitle, fig._supxlabel, fig._supylabel):
        key.append(None if t is None else (t.get_text().count("\n"), t.get_fontsize()))
    for ax in fig.axes:
        spec = ax.get_subplotspec()
        grid = None if spec is None else spec.get_gridspec()
        key.append((None if spec is None else (spec.get_geometry(),
                                               tuple(grid.get_width_ratios() or ()),
                                               tuple(grid.get_height_ratios() or ())),
                    *map(_axis_key, (ax.xaxis, ax.yaxis), _axis_ends_covered(ax)),
                    tuple((t.get_text().count("\n"), t.get_fontsize())
                          for t in (ax.title, ax._left_title, ax._right_title)),
                    tuple(_text_key(t) for t in ax.texts),
                    len(ax.child_axes)))
    return tuple(key)


def placeholder(title: str) -> str:
    """The line a notebook stores for an explorer beside its widget view (what a reader sees
    without a running kernel), in the current language."""
    return _("{title}: interactive, needs a running Jupyter kernel").format(title=title)


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
        If it takes a ``fig`` keyword, it is called as ``draw(state, fig=last figure)`` (None
        the first time) and may fill that figure again (:func:`explorer_figure`).
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
        try:
            self._draw_into = "fig" in inspect.signature(draw).parameters
        except (TypeError, ValueError):
            self._draw_into = False
        self.out = widgets.Output()
        rows = rows if rows is not None else [list(controls)]
        self.box = widgets.VBox([widgets.HTML(f"<b>{title}</b>")]
                                + [widgets.HBox([controls[k] for k in row]) for row in rows]
                                + [self.out])
        self.state: dict = {}
        self.figure: Figure | None = None
        self._layouts: dict = {}  # layout key -> (axes positions, suptitle position), oldest first
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
        if self._draw_into:  # it empties and refills the last figure (explorer_figure)
            self.figure = self._draw(self.state, fig=self.figure)
        else:
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
        if self._key is None or self._key not in self._layouts:
            return
        positions, suptitle = self._layouts[self._key]
        fig.set_layout_engine("none")
        for ax, pos in zip(fig.axes, positions):
            ax._set_position(pos, which="both")
        if suptitle is not None:
            fig._suptitle.set_position(suptitle)

    def png(self) -> bytes:
        """The current figure as PNG bytes, at the figure's dpi, as the inline backend shows it.

        A figure with a layout engine (or one that reuses a layout) is drawn once, as
        it is; one without gets the inline backend's ``bbox_inches="tight"``, so that nothing
        is cut off.
        """
        fig, buf = self.figure, io.BytesIO()
        if fig.get_layout_engine() is None:
            fig.savefig(buf, format="png", dpi=fig.dpi, bbox_inches="tight")
            return buf.getvalue()
        # A reused figure keeps its canvas (and the canvas its renderer and buffer).
        canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
        canvas.draw()  # runs the constrained layout, if the figure still has it, then draws
        if getattr(self, "_key", None) is not None and self._key not in self._layouts:
            if len(self._layouts) >= LAYOUTS_KEPT:
                del self._layouts[next(iter(self._layouts))]
            self._layouts[self._key] = (
                [ax.get_position(original=True) for ax in fig.axes],
                None if fig._suptitle is None else fig._suptitle.get_position())
        width, height = canvas.get_width_height(physical=True)
        # zlib level 1: the same pixels, a slightly larger file than PIL's default level 6, in
        # about half the time
        Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1).save(
            buf, format="png", compress_level=1)
        return buf.getvalue()

    def _repr_mimebundle_(self, **kwargs) -> dict:
        bundle = self.box._repr_mimebundle_(**kwargs)
        # The widget's own repr lists every control; a fixed line keeps stored outputs stable.
        bundle["text/plain"] = "[" + placeholder(self.title) + "]"
        return bundle
