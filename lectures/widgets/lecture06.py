"""Plots and widgets for notebook 06 (quantization-aware training).

``plot_*(result)`` draws what a lecture 06 demo returned and returns a
``matplotlib.figure.Figure``; nothing is recomputed. ``*_explorer()`` returns an
:class:`Explorer`: ipywidgets controls whose callback calls a pure function (``ste_curve`` or the
lecture's ``master_weights_demo``), stores its result in ``explorer.state`` and redraws the figure
in an ``ipywidgets.Output``. pytest sets ``explorer.controls[name].value`` and reads the state.
"""

from __future__ import annotations

import importlib

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from lectures.i18n import domain
from lectures.widgets.explorer import Explorer, explorer_figure
from numfmt.qat import calibrate_minmax, fake_quantize

L = importlib.import_module("lectures.06_quantization_aware_training")
_ = domain("lecture06").gettext


# ------------------------------------------------------------------------------ pure helpers
def ste_curve(bits: int = 3, symmetric: bool = True, lo: float = -1.0, hi: float = 1.0,
              n: int = 801) -> dict:
    """The fake-quantization staircase and STE mask over ``[1.5 lo, 1.5 hi]``.

    Parameters
    ----------
    bits : int in [2, 16]
    symmetric : bool
    lo, hi : float, the calibration range (``lo < hi``; symmetric uses max(|lo|, |hi|))
    n : int, number of sample points

    Returns
    -------
    dict with ``x``, ``values``, ``mask`` (float 0/1) as (n,) arrays; ``scale`` (float),
    ``zero_point`` (int), ``qmin``, ``qmax``, and ``levels`` (number of distinct values hit).

    Raises
    ------
    ValueError
        If ``lo >= hi`` or ``bits`` is out of range (from :func:`numfmt.qat.calibrate_minmax`).
    """
    if not lo < hi:
        raise ValueError(f"need lo < hi, got [{lo}, {hi}]")
    qp = calibrate_minmax(np.array([lo, hi]), bits, symmetric)
    x = np.linspace(1.5 * lo, 1.5 * hi, n)
    fq = fake_quantize(x, qp)
    return {"x": x, "values": fq.values, "mask": fq.mask.astype(float),
            "scale": float(qp.scale.item()), "zero_point": int(qp.zero_point.item()),
            "qmin": qp.qmin, "qmax": qp.qmax, "levels": len(np.unique(fq.values))}


# ------------------------------------------------------------------------------ plots
def _ste_axes(fig: Figure, s: dict, title: str, axes=None) -> None:
    ax1, ax2 = fig.subplots(1, 2) if axes is None else axes
    ax1.plot(s["x"], s["x"], ":", color="gray", label=_("identity (what the STE pretends)"))
    ax1.plot(s["x"], s["values"], label=_("fake quant Q(x)"))
    ax1.set(title=_("Forward: the staircase"), xlabel=_("x (real value)"),
            ylabel=_("Q(x) (real value)"))
    ax1.legend(loc="upper left", fontsize=8)
    ax2.plot(s["x"], np.zeros_like(s["x"]), label=_("true dQ/dx (0 almost everywhere)"))
    ax2.plot(s["x"], s["mask"], "--", label=_("STE surrogate (clamp mask)"))
    ax2.set(title=_("Backward: the gradient"), xlabel=_("x (real value)"), ylabel="dQ/dx",
            ylim=(-0.1, 1.2))
    ax2.legend(loc="upper left", fontsize=8)
    fig.suptitle(title)


def plot_ste(d) -> Figure:
    """Staircase, true derivative and STE mask of ``L.ste_demo()``; then the 1-D descent."""
    fig = Figure(figsize=(11, 6.5), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[1, 0.8])
    _ste_axes(top, {"x": d.x, "values": d.values, "mask": d.mask},
              _("Scale 1, codes [-8, 7]"))
    ax = bottom.subplots()
    steps = np.arange(len(d.w_ste))
    ax.plot(steps, d.w_true, label=_("w, true gradient"))
    ax.plot(steps, d.w_ste, label="w, STE")
    ax.step(steps, d.q_ste, where="post", label="Q(w), STE")
    ax.axhline(d.target, color="gray", ls=":", label=_("target {target}").format(target=d.target))
    ax.set(title=_("Gradient descent on (Q(w) - target)^2"), xlabel=_("step"),
           ylabel=_("weight (real value)"))
    ax.legend(fontsize=8, ncol=4, loc="lower right")
    return fig


def plot_master_curves(d, fig: Figure | None = None) -> Figure:
    """Loss per step of every run of ``L.master_weights_demo()`` (log scale); ``fig``: an
    explorer's last figure, drawn into again (``explorer_figure``)."""
    fig, ax = explorer_figure(fig, (9, 4.5))
    for name, curve in d.curves.items():
        style = "-" if "master" in name or name == "FP32" else ("--" if "stochastic" in name
                                                                else ":")
        template, fmt = d.labels.get(name, (name, ""))
        ax.semilogy(np.maximum(curve, 1e-12), style, label=_(template).format(fmt=fmt))
    ax.set(title=_("Adam, lr = {lr}: weights stored on a grid vs FP32 master weights").format(
               lr=d.lr),
           xlabel=_("step"), ylabel=_("loss (mean squared error / 2)"), ylim=(1e-6, 10))
    ax.legend(fontsize=8)
    return fig


def plot_loss_curves(r) -> Figure:
    """Training loss per epoch of the FP32 model and of every QAT run of ``L.ptq_vs_qat()``."""
    fig = Figure(figsize=(9, 4.5), layout="constrained")
    ax = fig.subplots()
    fp32 = r.curves["FP32"]
    ax.semilogy(np.arange(1, len(fp32) + 1), fp32, "k", label="FP32")
    start = r.config.epochs
    for label, curve in r.curves.items():
        if label != "FP32":
            ax.semilogy(np.arange(start + 1, start + len(curve) + 1), curve,
                        "--" if "A8" in label else "-", label=label)
    ax.axvline(start + 0.5, color="gray", ls=":")
    ax.set(title=_("Training loss: FP32, then QAT fine-tuning from the same weights"),
           xlabel=_("epoch"), ylabel=_("mean cross-entropy (nats)"))
    ax.legend(fontsize=8, ncol=2)
    return fig


def plot_accuracy(r) -> Figure:
    """Test accuracy of PTQ and QAT per weight format and activation setting."""
    fig = Figure(figsize=(9, 4), layout="constrained")
    ax = fig.subplots()
    keys = [(row[0], 8 if row[1] == "INT8" else None) for row in r.rows]
    pos = np.arange(len(keys))
    for k, method in enumerate(("PTQ", "QAT")):
        ax.bar(pos + (k - 0.5) * 0.4, [100 * r.accuracy[(method, w, a)] for w, a in keys], 0.4,
               label=method)
    ax.axhline(100 * r.fp32_accuracy, color="k", ls=":", label="FP32")
    ax.set_xticks(pos, [f"{w}\n{'A8' if a else 'A32'}" for w, a in keys])
    ax.set(title=_("Test accuracy on digits (360 images)"), xlabel=_("weights / activations"),
           ylabel=_("accuracy (%)"), ylim=(0, 100))
    ax.legend(loc="lower left")
    return fig


# ------------------------------------------------------------------------------ widgets
def ste_explorer() -> Explorer:
    """Bits, scheme and range of the grid; shows the staircase and its STE mask."""
    controls = {
        "bits": widgets.IntSlider(value=3, min=2, max=8, description=_("bits")),
        "symmetric": widgets.ToggleButtons(options=[(_("symmetric"), True), (_("affine"), False)],
                                           value=True),
        "lo": widgets.FloatSlider(value=-1.0, min=-2.0, max=0.0, step=0.1, description=_("min")),
        "hi": widgets.FloatSlider(value=1.0, min=0.1, max=2.0, step=0.1, description=_("max")),
    }

    def draw(s, fig=None):
        fig, axes = explorer_figure(fig, (11, 3.8), 1, 2)
        _ste_axes(fig, s, _("{levels} levels, scale {scale:.4g}, zero point {zero_point}, "
                            "codes [{qmin}, {qmax}]").format(**s), axes)
        return fig

    # Two rows: four controls in one row squeeze the sliders' labels and readouts.
    return Explorer(_("Fake quantization and its straight-through estimator"), controls,
                    ste_curve, draw, rows=[["bits", "symmetric"], ["lo", "hi"]])


def master_explorer() -> Explorer:
    """Learning rate of lecture 06's master-weights demo; redraws the loss curves.

    The demo runs for all five learning rates when the explorer is built (a second or two).
    """
    controls = {"lr": widgets.SelectionSlider(options=[0.001, 0.003, 0.01, 0.03, 0.1],
                                              value=0.01, description=_("lr"))}
    # Five learning rates: each demo is run here, once, so that moving the slider only redraws.
    demos = {lr: L.master_weights_demo(lr=lr) for lr in controls["lr"].options}

    def compute(lr):
        d = demos[lr]
        return {"demo": d, "final": {k: float(v[-1]) for k, v in d.curves.items()}}

    return Explorer(_("Why master weights: change the learning rate"), controls, compute,
                    lambda s, fig=None: plot_master_curves(s["demo"], fig))
