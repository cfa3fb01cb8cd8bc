"""Plots and an explorer for notebook 11 (fine-tuning a quantized LLM).

A thin layer over lecture 11's results:

- ``summary(results)`` turns what ``L.run_all`` returned into plain data (curves, the summary
  table, the workload); ``save_summary`` / ``load_summary`` keep it as JSON, so the notebook
  still draws a stored run's figures where the model is not installed (``STORED``).
- ``plot_curves(s)``: perplexity against fine-tuning steps per method; ``plot_summary(s)``:
  the summary table as bars (perplexity, and bits per weight beside it).
- ``method_explorer(s)``: pick a method, see its curve against the float reference and its
  row of the table. Nothing is recomputed.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from lectures.widgets.explorer import Explorer, explorer_figure

L = importlib.import_module("lectures.11_quantized_finetuning")

#: One run of the lecture (its workload is in the file: steps, windows), stored so the
#: notebook shows it without the model.
STORED = Path(__file__).with_name("lecture11_stored.json")


def summary(r) -> dict:
    """Plain data from ``L.run_all``'s Results: JSON-serialisable (``L.summary``)."""
    if not isinstance(r, L.Results):
        raise TypeError(f"expected the Results that L.run_all() returns, got {type(r).__name__}")
    return L.summary(r)


def save_summary(s: dict, path=STORED) -> Path:
    """Write ``s`` as JSON (a temporary file renamed into place: a reader never sees half)."""
    return L.save_summary(s, path)


def load_summary(path=STORED) -> dict:
    """The stored summary (``STORED`` by default)."""
    s = json.loads(Path(path).read_text())
    _check(s)
    return s


def _check(s) -> None:
    if not isinstance(s, dict) or not {"curves", "table", "float_ppl"} <= set(s):
        raise TypeError("expected the dict that summary() or load_summary() returns")


def plot_curves(s: dict) -> Figure:
    """Perplexity against fine-tuning steps, one line per method; the float model dashed."""
    _check(s)
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for method, curve in s["curves"].items():
        steps, ppl = zip(*curve)
        ax.plot(steps, ppl, "o-", ms=3, label=method)
    ax.axhline(s["float_ppl"], color="k", ls="--", lw=0.8,
               label=f"float32, not trained ({s['float_ppl']:.2f})")
    ax.set_yscale("log")
    ax.set_xlabel(f"fine-tuning step (one window of {s['train_len']} tokens each)")
    ax.set_ylabel("perplexity (log scale)")
    ax.set_title("SmolLM2-135M: QAT, LSQ, LoRA, QLoRA and full fine-tuning")
    ax.legend(fontsize=7, ncol=2)
    return fig


def plot_summary(s: dict) -> Figure:
    """The summary table: perplexity per method (bars), bits per weight written on each."""
    _check(s)
    rows = s["table"]
    fig = Figure(figsize=(9, 4.5), layout="constrained")
    ax = fig.add_subplot()
    y = np.arange(len(rows))
    ax.barh(y, [row[4] for row in rows], color="tab:blue")
    for i, row in enumerate(rows):
        ax.text(row[4], i, f" {row[4]:.2f} at {row[1]:.2f} bits/weight", va="center",
                fontsize=7)
    ax.set_yticks(y, [row[0] for row in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("perplexity (lower is better)")
    ax.set_xlim(0, max(row[4] for row in rows) * 1.45)
    ax.set_title("One table: method -> perplexity and bits per weight")
    return fig


def method_point(s: dict, method: str) -> dict:
    """One method's curve and row of the table."""
    _check(s)
    if method not in s["curves"]:
        raise ValueError(f"method must be one of {sorted(s['curves'])}, got {method!r}")
    row = next(r for r in s["table"] if r[0] == method)
    return {"method": method, "curve": s["curves"][method], "bits": row[1],
            "trainable": row[2], "ppl": row[4], "float_ppl": s["float_ppl"],
            "noise": s["noise"][method]}


def method_explorer(s: dict) -> Explorer:
    """Choose a method: its perplexity curve against the float model, and its numbers."""
    _check(s)
    controls = {"method": widgets.Dropdown(options=list(s["curves"]),
                                           value=next(iter(s["curves"])),
                                           description="method")}
    return Explorer("One fine-tuning run", controls, lambda method: method_point(s, method),
                    _draw_method)


def _draw_method(p: dict, fig: Figure | None = None) -> Figure:
    fig, ax = explorer_figure(fig, (6, 3.5))
    steps, ppl = zip(*p["curve"])
    ax.plot(steps, ppl, "o-", label=p["method"])
    ax.axhline(p["float_ppl"], color="k", ls="--", lw=0.8, label="float32, not trained")
    ax.fill_between(steps, p["ppl"] - p["noise"], p["ppl"] + p["noise"], color="tab:orange",
                    alpha=0.2, label="final ± noise (2 SE)")
    ax.set_xlabel("fine-tuning step")
    ax.set_ylabel("perplexity")
    ax.set_title(f"{p['bits']:.2f} bits/weight, {p['trainable']:,} trainable: "
                 f"{p['ppl']:.2f}")
    ax.legend(fontsize=8)
    return fig
