"""Plots and a widget for notebook 04 (low-precision matrix multiplication).

``plot_*(result)`` draws what a lecture 04 demo returned and returns a matplotlib Figure;
nothing is recomputed. ``spread_explorer()`` lets the reader change how far the rows of the
activations differ in size and recomputes every FP8 and block-scaled GEMM of demos 2 and 3 with
the lecture's own functions; pytest sets ``explorer.controls[...].value`` and reads
``explorer.state``.
"""

from __future__ import annotations

import importlib

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.figure import Figure

from lectures.i18n import domain
from lectures.widgets.explorer import Explorer, explorer_figure
from numfmt.torch import gemm

L = importlib.import_module("lectures.04_low_precision_matmul")
_ = domain("lecture04").gettext


def plot_int32_headroom(r, k_max: int = 1 << 20) -> Figure:
    """Worst-case |accumulator| against K for int8 codes, with int32's limit and demo 1's K."""
    k = np.unique(np.geomspace(1, k_max, 200).astype(np.int64))
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.subplots()
    ax.loglog(k, k * 128.0 * 128.0, label=_("codes in [-128, 127]: K · 128²"))
    ax.loglog(k, k * 127.0 * 127.0, "--", label=_("codes in [-127, 127]: K · 127²"))
    ax.axhline(2**31 - 1, color="C3", label=_("int32 maximum, 2³¹ - 1"))
    ax.axvline(r.k_safe_full, color="0.5", lw=0.8, label=f"K = {r.k_safe_full:,}")
    ax.plot([r.shape[1]], [r.acc_max], "ko",
            label=_("demo 1: K = {k}, largest |acc|").format(k=r.shape[1]))
    ax.set(title=_("When can an int32 accumulator overflow?"),
           xlabel=_("K (terms per dot product)"), ylabel=_("|accumulator| (integer units)"))
    ax.legend(fontsize=8)
    return fig


def plot_fp8_errors(r) -> Figure:
    """Whole-output and worst-row relative error of each FP8 case of demo 2, and bf16."""
    labels = [f"{fx}×{fw}\n" + _(L.GRANULARITY[g]) for fx, fw, g in r.errors] + ["BF16×BF16"]
    whole = [100 * v for v in r.errors.values()] + [100 * r.bf16_error[0]]
    worst = [100 * v for v in r.worst.values()] + [100 * r.bf16_error[1]]
    x = np.arange(len(labels))
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.subplots()
    ax.bar(x - 0.2, whole, 0.4, label=_("whole output"))
    ax.bar(x + 0.2, worst, 0.4, label=_("worst row"))
    ax.set_xticks(x, labels, fontsize=8)
    ax.set(title=_("FP8 GEMM error against the fp32 product"), ylabel=_("relative error (%)"),
           xlabel=_("operand formats and scale granularity"))
    ax.legend()
    return fig


def plot_block_errors(r) -> Figure:
    """Relative error against bits per element for each format of demo 3."""
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.subplots()
    for i, label in enumerate(r.errors):
        ax.plot(r.bits[label], 100 * r.errors[label], "o", color=f"C{i}", label=_(label))
        ax.plot(r.bits[label], 100 * r.worst[label], "x", color=f"C{i}")
    ax.set_yscale("log")
    ax.set(title=_("Block-scaled GEMM error (o whole output, x worst row)"),
           xlabel=_("bits per element (scales included)"),
           ylabel=_("relative error (%, log scale)"))
    ax.legend(fontsize=8)
    return fig


def spread_errors(spread_bits: float, seed: int = L.SEED) -> dict:
    """Worst-row relative error of every FP8 case and block format at ``spread_bits``.

    Returns ``{label: worst-row error (fraction)}``; computed on the CPU with the lecture's
    functions, so the widget shows what the lecture would print for that spread.
    """
    out = {}
    for fx, fw, g in L.FP8_CASES:
        e = L.fp8_gemm_error(fx, fw, g, spread_bits, device="cpu", seed=seed)
        out[f"FP8 {fx}×{fw} {L.GRANULARITY[g]}"] = e["worst_row"]
    x, w = L.make_operands(spread_bits=spread_bits, seed=seed)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    ref = tx @ tw.T
    for label, quantize in L.BLOCK_CASES[1:]:
        y, _, _ = gemm.block_scaled_linear(tx, tw, quantize, device="cpu")
        out[label] = L.worst_row_error(y, ref)
    return out


def _label(label: str) -> str:
    """A label of :func:`spread_errors` in the current language."""
    for text in L.GRANULARITY.values():
        if label.endswith(" " + text):
            return label[:-len(text)] + _(text)
    return _(label)


def spread_explorer() -> Explorer:
    """Slider for the spread of row magnitudes (bits); bars of every format's worst-row error.

    Every slider position is computed when the explorer is built (13 calls of
    :func:`spread_errors`, a few seconds), so that moving the slider only redraws.

    ``state`` holds ``spread_bits`` and ``errors`` (label -> worst-row error, a fraction).
    """
    controls = {"spread_bits": widgets.IntSlider(value=L.SPREAD_BITS, min=0, max=24, step=2,
                                                 description=_("spread (bits)"))}
    slider = controls["spread_bits"]
    # The slider has 13 positions: every one is computed here, once, so a redraw only draws.
    errors = {b: spread_errors(b) for b in range(slider.min, slider.max + 1, slider.step)}

    def compute(spread_bits):
        return {"spread_bits": spread_bits, "errors": errors[spread_bits]}

    def draw(s, fig=None):
        fig, ax = explorer_figure(fig, (8, 4))
        labels = list(s["errors"])
        ax.barh([_label(label) for label in labels], [100 * v for v in s["errors"].values()],
                color="C0")
        ax.set_xscale("log")
        ax.set(title=_("Worst-row error, rows of x spread over 2^{bits}").format(
                   bits=s["spread_bits"]),
               xlabel=_("relative error of the worst output row (%, log scale)"),
               ylabel=_("format and scales"))
        ax.tick_params(axis="y", labelsize=8)
        return fig

    return Explorer(_("Worst-row error against the spread of row sizes"), controls, compute, draw)

