"""The one widget pattern every notebook uses: controls over a pure computation and a figure.

An :class:`Explorer` calls ``compute(**control values)`` whenever a control changes, keeps what
it returned as ``state``, and redraws ``draw(state)`` in place. Tests build an explorer, set a
control's ``.value`` and check ``state``: no browser needed.

Two things keep a redraw cheap and the kernel free of a backlog. Every control that has a
``continuous_update`` setting (sliders, text boxes) gets it turned off, so a slider drag sends
one value when the mouse is released, not one per pixel. And the figure is rendered to PNG once
(``Explorer.png``): a figure with a layout engine (all of ours use ``layout="constrained"``)
already fits its canvas, so the inline backend's ``bbox_inches="tight"``, which draws the
figure a second time to measure it, is skipped.
"""

from __future__ import annotations

import base64
import io
from typing import Callable

import ipywidgets as widgets
from IPython import get_ipython
from matplotlib.figure import Figure


def check_result(r, cls, demo: str) -> None:
    """Raise TypeError unless ``r`` is the ``cls`` instance that the lecture's ``demo()`` returns.

    Plot functions take a demo's result; passing anything else (a raw array, another demo's
    result) gets a message naming the demo to call.
    """
    if not isinstance(r, cls):
        raise TypeError(f"expected the {cls.__name__} that L.{demo}() returns, "
                        f"got {type(r).__name__}")


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
        ip = get_ipython()
        if ip is not None:
            # Set the Output's contents from the kernel side instead of capturing display()
            # with ``with self.out``: capturing needs a frontend, so a headless run (nbval)
            # would print the figure into the cell instead.
            data = {"image/png": base64.b64encode(self.png()).decode("ascii"),
                    "text/plain": repr(self.figure)}
            self.out.outputs = ({"output_type": "display_data", "data": data, "metadata": {}},)

    def png(self) -> bytes:
        """The current figure as PNG bytes, at the figure's dpi, as the inline backend shows it.

        A figure with a layout engine is rendered once as it is; one without gets the inline
        backend's ``bbox_inches="tight"`` (which draws it twice), so that nothing is cut off.
        """
        buf = io.BytesIO()
        tight = None if self.figure.get_layout_engine() is not None else "tight"
        self.figure.savefig(buf, format="png", dpi=self.figure.dpi, bbox_inches=tight)
        return buf.getvalue()

    def _repr_mimebundle_(self, **kwargs) -> dict:
        bundle = self.box._repr_mimebundle_(**kwargs)
        # The widget's own repr lists every control; a fixed line keeps stored outputs stable.
        bundle["text/plain"] = f"[{self.title}: interactive, needs a running Jupyter kernel]"
        return bundle
