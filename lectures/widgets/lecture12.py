"""Plots and widgets for notebook 12 (time and memory, measured).

A thin layer over lecture 12's demo functions:

- ``plot_roofline(machine, points)`` draws the roofline of ``L.demo1_machine()`` (one ceiling
  per dtype) with each pass of ``L.demo4_operating_points()`` on it;
- ``plot_bytes_per_token(result)`` draws ``L.demo2_bytes_per_token()``'s bytes per decoded
  token, split into the decoder linears, the output projection and the K/V cache;
- ``decode_explorer(machine)`` builds an :class:`Explorer` whose callback is
  ``L.decode_point``: context length, batch, weight and cache format -> the roofline's tokens/s
  and the cache's size. Nothing is measured in a callback.
"""

from __future__ import annotations

import importlib

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from lectures.widgets.explorer import Explorer, check_result, explorer_figure

L = importlib.import_module("lectures.12_time_and_memory")

GB = 1e9
CONTEXTS = (0, 256, 512, 1024, 2048, 4096, 8192)
BATCHES = (1, 2, 4, 8, 16, 32, 64)


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
        ax.plot(x, np.minimum(peak, x * bw) / GB, label=f"{dtype} roofline "
                f"(ridge {m.ridge(dtype):.1f} op/B)")
    if points is not None:
        for i, path in enumerate(dict.fromkeys(p.path for p in points.points)):
            pts = [p for p in points.points if p.path == path]
            for p in pts:
                ax.plot(p.cost.intensity, p.measured.median / GB, "o" if p.decode else "s",
                        color=f"C{i + len(m.matmul)}", ms=7)
                ax.annotate("decode" if p.decode else f"{p.batch}x{p.tokens}",
                            (p.cost.intensity, p.measured.median / GB), fontsize=7,
                            xytext=(4, -10), textcoords="offset points")
            ax.plot([], [], "o", color=f"C{i + len(m.matmul)}", label=f"{path} (measured)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (operations per byte moved)")
    ax.set_ylabel("G op/s (10^9 operations per second)")
    ax.set_title(f"Roofline of {m.cpu} ({m.cores} cores), measured")
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
    head = np.full(len(labels), r.head_bytes / L.MB)
    kv = np.array([r.token_bytes[k, c] - r.token_bytes[k, 0] for k in labels]) / L.MB
    ax.barh(y, lin, label="decoder linears")
    ax.barh(y, head, left=lin, label="output projection (BF16)")
    ax.barh(y, kv, left=lin + head, label=f"K/V cache (BF16) at {c:,} tokens")
    ax.set_yticks(y, [f"{k} ({r.bits[k]:.2f} b)" for k in labels], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("MB read per decoded token")
    ax.set_ylabel("weight format (bits per weight)")
    ax.set_title("SmolLM2-135M: what one decoded token reads")
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
        "weights": widgets.Dropdown(options=formats, value="INT4, groups of 32",
                                    description="weights"),
        "kv": widgets.Dropdown(options=kvs, value="BF16", description="K/V cache"),
        "context": widgets.SelectionSlider(options=CONTEXTS, value=1024,
                                           description="context"),
        "batch": widgets.SelectionSlider(options=BATCHES, value=1, description="batch"),
    }
    bandwidth, peak = m.best_bandwidth, m.peak("float32")

    def compute(weights, kv, context, batch):
        point = L.decode_point(weights, kv, context, batch, bandwidth, peak)
        base = L.decode_point("float32", "BF16", context, batch, bandwidth, peak)
        return {"weights": weights, "kv": kv, "context": context, "batch": batch, **point,
                "float32_tokens_per_s": base["tokens_per_s"]}

    return Explorer("Decode speed by the roofline: format, context, batch", controls,
                    compute, _draw_point, rows=[["weights", "kv"], ["context", "batch"]])


def _draw_point(s: dict, fig: Figure | None = None) -> Figure:
    fig, axes = explorer_figure(fig, (8, 3.2), 1, 2)
    ax = axes[0]
    ax.bar([0, 1], [s["weight_mb"], s["kv_mb"]], color=["C0", "C2"], label="MB per step")
    ax.set_xticks([0, 1], ["weights", "K/V cache read"])
    ax.set_xlabel("what a decode step reads")
    ax.set_ylabel("MB per step")
    ax.set_title(f"{s['weights']}, K/V {s['kv']}", fontsize=9)
    ax.legend(fontsize=8)
    ax = axes[1]
    ax.bar([0, 1], [s["float32_tokens_per_s"], s["tokens_per_s"]], color=["C7", "C1"],
           label=f"{s['bound']}-bound")
    ax.set_xticks([0, 1], ["float32", "chosen"])
    ax.set_xlabel("weights")
    ax.set_ylabel("tokens/s (all sequences)")
    ax.set_title(f"batch {s['batch']}, context {s['context']:,}: "
                 f"cache {s['kv_cache_mb']:.0f} MB", fontsize=9)
    ax.legend(fontsize=8)
    return fig
