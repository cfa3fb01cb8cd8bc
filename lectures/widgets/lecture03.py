"""Plots and widgets for notebook 03 (scaling).

``plot_*(result)`` draws what a lecture 03 demo returned and returns a Figure. The explorers
(:func:`delayed_explorer`, :func:`outlier_explorer`) rerun a lecture demo with the values of
their controls, keep its result in ``explorer.state["result"]`` and redraw.
"""

from __future__ import annotations

import importlib

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from lectures.i18n import domain
from lectures.widgets.explorer import Explorer, check_result, explorer_figure, plain_log_ticks

L = importlib.import_module("lectures.03_scaling")
_ = domain("lecture03").gettext


def plot_tensor_scaling(r) -> Figure:
    """Error and flushed fraction of each tensor in E4M3 and E5M2 with one tensor scale.

    Parameters
    ----------
    r : TensorScalingResult from ``L.demo1_tensor_scaling()``
    """
    check_result(r, L.TensorScalingResult, "demo1_tensor_scaling")
    fig = Figure(figsize=(11, 4), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    tensors = list(dict.fromkeys(d["tensor"] for d in r.rows))
    x = np.arange(len(tensors))
    for j, fmt in enumerate(("E4M3", "E5M2")):
        rows = [next(d for d in r.rows if d["tensor"] == t and d["fmt"] == fmt) for t in tensors]
        ax1.bar(x + (j - 0.5) * 0.4, [d["error"] * 100 for d in rows], 0.4, label=fmt)
        ax2.bar(x + (j - 0.5) * 0.4, [d["flushed"] * 100 for d in rows], 0.4, label=fmt)
    for ax, label in ((ax1, _("relative error (%)")), (ax2, _("non-zero values flushed to 0 (%)"))):
        ax.set_xticks(x, [_(t) for t in tensors])
        ax.set_xlabel(_("tensor"))
        ax.set_ylabel(label)
        ax.legend()
    fig.suptitle(_("One scale per tensor: E4M3 is more precise, E5M2 reaches further"))
    return fig


def plot_delayed(r, fig: Figure | None = None) -> Figure:
    """Scales and errors per step, delayed (amax history) against current scaling.

    Parameters
    ----------
    r : DelayedResult from ``L.demo2_delayed_scaling()``
    fig : Figure, optional
        An explorer's last figure, drawn into again (``explorer_figure``); None: a new one.
    """
    check_result(r, L.DelayedResult, "demo2_delayed_scaling")
    fig, (ax1, ax2) = explorer_figure(fig, (11, 4), 1, 2)
    t = np.arange(r.amax.size)
    for kind in ("current", "delayed"):
        ax1.semilogy(t, r.scales[kind], drawstyle="steps-mid",
                     label=_("{kind} scale").format(kind=_(kind)))
        ax2.semilogy(t, r.errors[kind] * 100, "o-", ms=3, label=_(kind))
    for ax in (ax1, ax2):
        ax.axvline(r.spike_step, color="0.6", ls=":", label=_("spike"))
        ax.set_xlabel(_("step"))
        plain_log_ticks(ax.yaxis)
        ax.legend()
    ax1.set_ylabel(_("scale (amax / 448)"))
    ax2.set_ylabel(_("relative error (%)"))
    fig.suptitle(_("Delayed scaling (history {history}) against current scaling, E4M3").format(
        history=r.history))
    return fig


def plot_outlier(r, fig: Figure | None = None) -> Figure:
    """Error on the other values, without and with one outlier, per quantizer.

    Parameters
    ----------
    r : OutlierResult from ``L.demo3_one_outlier()``
    fig : Figure, optional
        An explorer's last figure, drawn into again (``explorer_figure``); None: a new one.
    """
    check_result(r, L.OutlierResult, "demo3_one_outlier")
    fig, ax = explorer_figure(fig, (11, 4))
    x = np.arange(len(r.rows))
    ax.bar(x - 0.2, [d["clean"] * 100 for d in r.rows], 0.4, label=_("without outlier"))
    ax.bar(x + 0.2, [d["outlier"] * 100 for d in r.rows], 0.4,
           label=_("with one outlier ({factor:g} × max)").format(factor=r.factor))
    ax.set_xticks(x, [_(d["name"]) for d in r.rows], fontsize=8)
    ax.set_xlabel(_("quantizer"))
    ax.set_ylabel(_("relative error of the other values (%)"))
    ax.set_title(_("What one outlier does to a scale"))
    ax.legend()
    return fig


def plot_nvfp4(r) -> Figure:
    """Relative error against bits per value: FP4 and FP8 with one scale, and NVFP4.

    Parameters
    ----------
    r : NvfpResult from ``L.demo4_nvfp4_vs_tensor()``
    """
    check_result(r, L.NvfpResult, "demo4_nvfp4_vs_tensor")
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.subplots()
    for i, d in enumerate(r.rows):
        ax.semilogy([d["bits"]], [d["error"] * 100], "o", ms=10, color=f"C{i}", label=_(d["name"]))
    ax.set_xlabel(_("bits per value"))
    ax.set_ylabel(_("relative error (%)"))
    ax.set_title(_("{n:,} Student-t(5) × 0.02 values").format(n=r.n))
    ax.legend(fontsize=8)
    return fig


def delayed_explorer(history: int = 16, spike: float = 8.0) -> Explorer:
    """History length and spike size: when delayed scaling clips.

    ``state`` holds ``history``, ``spike`` and ``result`` (``L.DelayedResult``).
    """
    controls = {"history": widgets.IntSlider(value=history, min=1, max=32,
                                             description=_("history")),
                "spike": widgets.FloatSlider(value=spike, min=1.0, max=32.0, step=0.5,
                                             description=_("spike ×"))}

    def compute(history, spike):
        return dict(history=history, spike=spike,
                    result=L.demo2_delayed_scaling(history=history, spike=spike))

    return Explorer(_("Delayed against current scaling"), controls, compute,
                    lambda s, fig=None: plot_delayed(s["result"], fig))


def outlier_explorer(factor: float = 100.0) -> Explorer:
    """Outlier size (× the largest value): how each quantizer's error on the rest responds.

    ``state`` holds ``factor`` and ``result`` (``L.OutlierResult``).
    """
    controls = {"factor": widgets.FloatLogSlider(value=factor, base=10, min=0, max=4, step=0.25,
                                                 description=_("outlier ×"))}

    def compute(factor):
        return dict(factor=factor, result=L.demo3_one_outlier(factor=factor))

    return Explorer(_("One outlier and the scale"), controls, compute,
                    lambda s, fig=None: plot_outlier(s["result"], fig))
