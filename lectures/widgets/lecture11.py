"""Plots and an explorer for notebook 11 (fine-tuning a quantized LLM).

A thin layer over lecture 11's results:

- ``summary(results)`` turns what ``L.run_all`` returned into plain data (curves, the summary
  table, the workload); ``save_summary`` / ``load_summary`` keep it as JSON, so the notebook
  still draws a stored run's figures where the model is not installed (``STORED``).
- ``plot_curves(s)``: perplexity against fine-tuning steps per method; ``plot_summary(s)``:
  the summary table as bars (perplexity, and bits per weight beside it).
- ``method_explorer(s)``: pick a method, see its curve against the float reference and its
  row of the table. Nothing is recomputed.
- ``print_summary(s)``: the stored run in a few printed lines (the notebook's first cell);
  ``print_run(s)``: its demos as the lecture printed them (tables, bill, observations).

Text goes through lecture 11's catalog (domain ``lecture11``); method names are data and are
translated where they are shown (``L.label``).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from console import display_width
from lectures.i18n import domain
from lectures.widgets.explorer import Explorer, explorer_figure

L = importlib.import_module("lectures.11_quantized_finetuning")
_ = domain("lecture11").gettext

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


def _pad(text: str, width: int) -> str:
    """`text` padded with spaces to `width` terminal columns (a Chinese character takes two)."""
    return text + " " * max(0, width - display_width(text))


def print_summary(s: dict) -> None:
    """Print the stored run: the float model's perplexity and the workload, one line per
    method (bits per weight, trainable parameters, perplexity), and how many trained codes
    changed per quantization-aware method."""
    _check(s)
    print(_("float32: perplexity {ppl:.2f} on {n} windows of {eval_len} tokens; {steps} steps "
            "of {train_len} tokens per method").format(
                ppl=s["float_ppl"], n=s["n_eval"], eval_len=s["eval_len"], steps=s["steps"],
                train_len=s["train_len"]))
    for method, bits, trainable, _cpu, ppl in s["table"]:
        # TRANSLATORS: one row of a table printed in columns: keep the fields' widths
        print(_("{method} {bits:6.3f} bits/weight {trainable:>12,} trainable  perplexity "
                "{ppl:6.2f}").format(method=_pad(L.label(method), 32), bits=bits,
                                     trainable=trainable, ppl=ppl))
    for method, (changed, total) in s["codes_changed"].items():
        print(_("{method}: {changed:,} of {total:,} trained codes changed").format(
            method=L.label(method), changed=changed, total=total))


def print_run(s: dict) -> None:
    """Print the stored run's demos as the lecture printed them (tables, the memory bill and
    every observation), in the notebook's language (English where the run has no such
    edition)."""
    _check(s)
    from console.i18n import current_language
    printed = s.get("printed", {})
    lang = "zh" if current_language().startswith("zh") else "en"
    print(printed.get(lang) or printed.get("en", ""), end="")


def plot_curves(s: dict) -> Figure:
    """Perplexity against fine-tuning steps, one line per method; the float model dashed."""
    _check(s)
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for method, curve in s["curves"].items():
        steps, ppl = zip(*curve)
        ax.plot(steps, ppl, "o-", ms=3, label=L.label(method))
    ax.axhline(s["float_ppl"], color="k", ls="--", lw=0.8,
               label=_("float32, not trained ({ppl:.2f})").format(ppl=s["float_ppl"]))
    ax.set_yscale("log")
    ax.set_xlabel(_("fine-tuning step (one window of {n} tokens each)").format(
        n=s["train_len"]))
    ax.set_ylabel(_("perplexity (log scale)"))
    ax.set_title(_("SmolLM2-135M: QAT, LSQ, LoRA, QLoRA and full fine-tuning"))
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
        ax.text(row[4], i, " " + _("{ppl:.2f} at {bits:.2f} bits/weight").format(
            ppl=row[4], bits=row[1]), va="center", fontsize=7)
    ax.set_yticks(y, [L.label(row[0]) for row in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(_("perplexity (lower is better)"))
    ax.set_xlim(0, max(row[4] for row in rows) * 1.45)
    ax.set_title(_("One table: method -> perplexity and bits per weight"))
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
    controls = {"method": widgets.Dropdown(options=[(L.label(m), m) for m in s["curves"]],
                                           value=next(iter(s["curves"])),
                                           description=_("method"))}
    return Explorer(_("One fine-tuning run"), controls, lambda method: method_point(s, method),
                    _draw_method)


def _draw_method(p: dict, fig: Figure | None = None) -> Figure:
    fig, ax = explorer_figure(fig, (6, 3.5))
    steps, ppl = zip(*p["curve"])
    ax.plot(steps, ppl, "o-", label=L.label(p["method"]))
    ax.axhline(p["float_ppl"], color="k", ls="--", lw=0.8, label=_("float32, not trained"))
    ax.fill_between(steps, p["ppl"] - p["noise"], p["ppl"] + p["noise"], color="tab:orange",
                    alpha=0.2, label=_("final ± noise"))
    ax.set_xlabel(_("fine-tuning step"))
    ax.set_ylabel(_("perplexity"))
    ax.set_title(_("{bits:.2f} bits/weight, {trainable:,} trainable: {ppl:.2f}").format(
        bits=p["bits"], trainable=p["trainable"], ppl=p["ppl"]))
    ax.legend(fontsize=8)
    return fig
