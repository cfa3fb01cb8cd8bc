"""Plots and widgets for notebook 02 (rounding and accumulation).

``plot_*(result)`` draws what a lecture 02 demo returned and returns a Figure. The explorers
(:func:`swamping_explorer`, :func:`update_explorer`) rerun a lecture demo with the values of
their controls, keep its result in ``explorer.state["result"]`` and redraw with the same
``plot_*`` function.
"""

from __future__ import annotations

import functools
import importlib

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from lectures.i18n import domain
from lectures.widgets.explorer import Explorer, check_result, explorer_figure

L = importlib.import_module("lectures.02_rounding_and_accumulation")
_ = domain("lecture02").gettext


def plot_rounding_bias(r) -> Figure:
    """Mean rounding error (ulps) of each rule, on data without and with exact ties.

    Parameters
    ----------
    r : BiasResult from ``L.demo1_rounding_bias()``
    """
    check_result(r, L.BiasResult, "demo1_rounding_bias")
    fig = Figure(figsize=(10, 4), layout="constrained")
    ax = fig.subplots()
    data = list(dict.fromkeys(d["data"] for d in r.rows))
    width = 0.8 / len(L.MODES)
    for j, mode in enumerate(L.MODES):
        vals = [next(d["mean_ulp"] for d in r.rows if d["data"] == k and d["mode"] == mode)
                for k in data]
        ax.bar(np.arange(len(data)) + (j - 1) * width, vals, width, label=_(L.MODES[mode]))
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xticks(range(len(data)), [_(k) for k in data])
    ax.set_xlabel(_("data rounded to E4M3"))
    ax.set_ylabel(_("mean error (ulp)"))
    ax.set_title(_("Bias of three rounding rules"))
    ax.legend()
    return fig


def plot_swamping(r, fig: Figure | None = None) -> Figure:
    """Running sums in FP32, FP16 and BF16 against the exact running sum.

    Parameters
    ----------
    r : SwampResult from ``L.demo3_swamping()``
    fig : Figure, optional
        An explorer's last figure, drawn into again (``explorer_figure``); None: a new one.
    """
    check_result(r, L.SwampResult, "demo3_swamping")
    fig, ax = explorer_figure(fig, (10, 4))
    i = np.unique(np.linspace(0, r.n - 1, 512).astype(int))   # enough points to draw
    ax.plot(i + 1, r.exact_partial[i], "k--", lw=1, label=_("exact"))
    for name, p in r.partial.items():
        ax.plot(i + 1, p[i], lw=1.5,
                label=_("{name} accumulator (ends at {end:g})").format(name=name, end=p[-1]))
    ax.set_xlabel(_("number of terms added"))
    ax.set_ylabel(_("running sum"))
    ax.set_title(_("Swamping: {n:,} terms from [0, {high:g}) summed in order").format(
        n=r.n, high=r.high))
    ax.legend()
    return fig


def plot_updates(r, fig: Figure | None = None) -> Figure:
    """Mean weight change after each step, for each way of storing the weights.

    Parameters
    ----------
    r : UpdateResult from ``L.demo4_vanishing_updates()``
    fig : Figure, optional
        An explorer's last figure, drawn into again (``explorer_figure``); None: a new one.
    """
    check_result(r, L.UpdateResult, "demo4_vanishing_updates")
    fig, ax = explorer_figure(fig, (10, 4))
    t = np.arange(1, r.steps + 1)
    ax.plot(t, t * r.update, "k--", lw=1, label=_("intended"))
    for name, h in r.history.items():
        ax.plot(t, h, lw=1.2, label=_(name))
    ax.set_xlabel(_("step"))
    ax.set_ylabel(_("mean change of a weight"))
    ax.set_title(_("Adding {update:g} per step to weights in [0.5, 1)").format(update=r.update))
    ax.legend()
    return fig


def running_sums(n: int, high: float, seed: int = 0):
    """What the swamping explorer draws: demo 3's running sums alone, without its table.

    The terms are demo 3's (``n`` uniforms on [0, ``high``) from ``seed``, rounded to FP16), and
    ``partial``, ``exact_partial``, ``exact`` and ``stall`` equal those of
    ``L.demo3_swamping(n, high, seed)``; ``rows`` (the pairwise and Kahan sums of the table) is
    left empty, which saves most of the time of a redraw.
    """
    x = L.FP16.round(np.random.default_rng(seed).uniform(0.0, high, n))  # as demo 3 draws them
    partial = {f.name: L.cumsum_in_format(x, f) for f in (L.FP32, L.FP16, L.BF16)}
    exact_partial = np.cumsum(x)
    return L.SwampResult(n, high, float(exact_partial[-1]), [], partial, exact_partial,
                         {k: float(p[-1]) for k, p in partial.items() if k != "FP32"})


def swamping_explorer(log2_n: int = 14, high: float = 1.0) -> Explorer:
    """Number of terms (2^k) and their range [0, high): where each accumulator gets stuck.

    ``state`` holds ``log2_n``, ``high`` and ``result`` (an ``L.SwampResult`` from
    :func:`running_sums`: the running sums, without the table's rows).
    """
    controls = {"log2_n": widgets.IntSlider(value=log2_n, min=8, max=16,
                                            description=_("log2(terms)")),
                "high": widgets.FloatLogSlider(value=high, base=10, min=-2, max=1, step=0.25,
                                               description=_("terms < "))}

    @functools.lru_cache(maxsize=64)
    def compute(log2_n, high):
        return dict(log2_n=log2_n, high=high, result=running_sums(1 << log2_n, high))

    return Explorer(_("Swamping: running sums in FP32, FP16 and BF16"), controls, compute,
                    lambda s, fig=None: plot_swamping(s["result"], fig))


UPDATE_WEIGHTS = 1024  #: weights the update explorer trains (demo 4: 4,096)


def update_explorer(update: float = 1e-4) -> Explorer:
    """Update size per step: which storages keep it (1,024 weights, 1,000 steps).

    ``state`` holds ``update`` and ``result`` (``L.UpdateResult``; for a slider position, the
    one computed when the explorer was built, for 10^position, equal to ``update`` to 1e-12).
    """
    slider = widgets.FloatLogSlider(value=update, base=10, min=-6, max=-2, step=0.25,
                                    description=_("update"))
    controls = {"update": slider}
    # The slider's 17 positions are run here, once (a few seconds), so that a redraw only
    # draws; a value between them (typed, or set from code) is run when it is asked for.
    positions = np.arange(slider.min, slider.max + slider.step / 2, slider.step)
    done = {float(e): L.demo4_vanishing_updates(n_weights=UPDATE_WEIGHTS, update=10.0 ** e)
            for e in positions}

    def compute(update):
        e = float(positions[np.argmin(np.abs(positions - np.log10(update)))])
        if e in done and np.isclose(10.0 ** e, update, rtol=1e-12, atol=0.0):
            return dict(update=update, result=done[e])
        return dict(update=update,
                    result=L.demo4_vanishing_updates(n_weights=UPDATE_WEIGHTS, update=update))

    return Explorer(_("Small updates to low-precision weights"), controls, compute,
                    lambda s, fig=None: plot_updates(s["result"], fig))
