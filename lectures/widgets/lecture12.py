"""Plots and widgets for notebook 12 (time and memory, measured).

A thin layer over lecture 12's demo functions:

- ``plot_roofline(machine, points)`` draws the roofline of ``L.demo1_machine()`` (one ceiling
  per dtype) with each pass of ``L.demo4_operating_points()`` on it;
- ``plot_bytes_per_token(result)`` draws ``L.demo2_bytes_per_token()``'s bytes per decoded
  token, split into the decoder linears, the output projection and the K/V cache;
- ``decode_explorer(machine)`` builds an :class:`Explorer` whose callback is
  ``L.decode_point``: context length, batch, weight and cache format -> the roofline's tokens/s
  and the cache's size. Nothing is measured in a callback.

Text goes through lecture 12's catalog (domain ``lecture12``); the weight formats' names are
those of lecture 08's catalog, as lecture 12 prints them.
"""

from __future__ import annotations

import importlib

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from lectures.i18n import domain
from lectures.widgets.explorer import Explorer, check_result, explorer_figure

L = importlib.import_module("lectures.12_time_and_memory")
_ = domain("lecture12").gettext
_formats = domain("llm").gettext      # lecture 08's weight formats, in the harness's catalog

GB = 1e9
CONTEXTS = (0, 256, 512, 1024, 2048, 4096, 8192)
BATCHES = (1, 2, 4, 8, 16, 32, 64)


def _weights(label: str) -> str:
    """A weight format's name in the current language (lecture 08's names, else lecture 12's)."""
    return _formats(label) if label in {f.label for f in L.WEIGHT_FORMATS} else _(label)


def plot_roofline(m, points=None) -> Figure:
    """The roofline of each timed dtype (G op/s against op/B, log-log) and, given demo 4's
    result, each measured pass as a point (decode steps as circles, prefills as squares)."""
    check_result(m, L.MachineResult, "demo1_machine")
    if points is not None:
        check_result(points, L.OperatingResult, "demo4_operating_points")
    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.add_subplot()
    x = np.logspace(-1, 3, 200)
    bw = m.best_bandwidth
    for dtype in m.matmul:
        peak = m.peak(dtype)
        ax.plot(x, np.minimum(peak, x * bw) / GB,
                label=_("{dtype} roofline (ridge {ridge:.1f} op/B)").format(
                    dtype=dtype, ridge=m.ridge(dtype)))
    if points is not None:
        for i, path in enumerate(dict.fromkeys(p.path for p in points.points)):
            pts = [p for p in points.points if p.path == path]
            for p in pts:
                ax.plot(p.cost.intensity, p.measured.median / GB, "o" if p.decode else "s",
                        color=f"C{i + len(m.matmul)}", ms=7)
                ax.annotate(_("decode") if p.decode else f"{p.batch}x{p.tokens}",
                            (p.cost.intensity, p.measured.median / GB), fontsize=7,
                            xytext=(4, -10), textcoords="offset points")
            ax.plot([], [], "o", color=f"C{i + len(m.matmul)}",
                    label=_("{path} (measured)").format(path=_(path)))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(_("arithmetic intensity (operations per byte moved)"))
    ax.set_ylabel(_("G op/s (10^9 operations per second)"))
    ax.set_title(_("Roofline of {cpu} ({cores} cores), measured").format(cpu=m.cpu,
                                                                          cores=m.cores))
    ax.legend(fontsize=7)
    return fig


def plot_bytes_per_token(r) -> Figure:
    """Bytes read per decoded token by weight format, stacked: decoder linears, output
    projection (BF16), K/V cache (BF16) at demo 2's longest context."""
    check_result(r, L.BytesResult, "demo2_bytes_per_token")
    fig = Figure(figsize=(8, 5.5), layout="constrained")
    ax = fig.add_subplot()
    labels = list(r.bits)
    c = r.contexts[-1]
    y = np.arange(len(labels))
    lin = np.array([r.linear_bytes[k] for k in labels]) / L.MB
    head = np.array([r.head_bytes * L.head_bits(k) / L.HEAD_BITS for k in labels]) / L.MB
    kv = np.array([r.token_bytes[k, c] - r.token_bytes[k, 0] for k in labels]) / L.MB
    ax.barh(y, lin, label=_("decoder linears"))
    ax.barh(y, head, left=lin, label=_("output projection (BF16; float32 beside float32)"))
    ax.barh(y, kv, left=lin + head, label=_("K/V cache (BF16) at {c:,} tokens").format(c=c))
    ax.set_yticks(y, [_("{format} ({bits:.2f} b)").format(format=_weights(k), bits=r.bits[k])
                      for k in labels], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(_("MB read per decoded token"))
    ax.set_ylabel(_("weight format (bits per weight)"))
    ax.set_title(_("SmolLM2-135M: what one decoded token reads"))
    ax.legend(fontsize=8)
    return fig


def decode_explorer(m=None) -> Explorer:
    """Context length, batch, weight and K/V formats -> the roofline's decode speed on the
    machine of ``m`` (``L.demo1_machine()``'s result; measured here with ``L.QUICK`` when
    None) and the K/V cache's size."""
    if m is None:
        m = L.demo1_machine(L.QUICK)
    check_result(m, L.MachineResult, "demo1_machine")
    formats = list(L.format_bits())
    kvs = [label for label, _ in L.KV_FORMATS]
    controls = {
        "weights": widgets.Dropdown(options=[(_weights(f), f) for f in formats],
                                    value="INT4, groups of 32", description=_("weights")),
        "kv": widgets.Dropdown(options=[(_(k), k) for k in kvs], value="BF16",
                               description=_("K/V cache")),
        "context": widgets.SelectionSlider(options=CONTEXTS, value=1024,
                                           description=_("context")),
        "batch": widgets.SelectionSlider(options=BATCHES, value=1, description=_("batch")),
    }
    bandwidth, peak = m.best_bandwidth, m.peak("float32")

    def compute(weights, kv, context, batch):
        point = L.decode_point(weights, kv, context, batch, bandwidth, peak)
        base = L.decode_point("float32", "BF16", context, batch, bandwidth, peak)
        return {"weights": weights, "kv": kv, "context": context, "batch": batch, **point,
                "float32_tokens_per_s": base["tokens_per_s"]}

    return Explorer(_("Decode speed by the roofline: format, context, batch"), controls,
                    compute, _draw_point, rows=[["weights", "kv"], ["context", "batch"]])


def _draw_point(s: dict, fig: Figure | None = None) -> Figure:
    fig, axes = explorer_figure(fig, (8, 3.2), 1, 2)
    ax = axes[0]
    ax.bar([0, 1], [s["weight_mb"], s["kv_mb"]], color=["C0", "C2"], label=_("MB per step"))
    ax.set_xticks([0, 1], [_("weights"), _("K/V cache read")])
    ax.set_xlabel(_("what a decode step reads"))
    ax.set_ylabel(_("MB per step"))
    ax.set_title(_("{weights}, K/V {kv}").format(weights=_weights(s["weights"]), kv=_(s["kv"])),
                 fontsize=9)
    ax.legend(fontsize=8)
    ax = axes[1]
    ax.bar([0, 1], [s["float32_tokens_per_s"], s["tokens_per_s"]], color=["C7", "C1"],
           label=_("{bound}-bound").format(bound=_(s["bound"])))
    ax.set_xticks([0, 1], ["float32", _("chosen")])
    ax.set_xlabel(_("weights"))
    ax.set_ylabel(_("tokens/s (all sequences)"))
    ax.set_title(_("batch {batch}, context {context:,}: cache {cache:.0f} MB").format(
        batch=s["batch"], context=s["context"], cache=s["kv_cache_mb"]), fontsize=9)
    ax.legend(fontsize=8)
    return fig
