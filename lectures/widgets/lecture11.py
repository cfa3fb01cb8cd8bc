"""Plots and an explorer for notebook 11 (fine-tuning a quantized LLM).

A thin layer over lecture 11's results (``L.run_all``'s Results, live or stored):

- ``load_stored()`` reads one full run of the script (``STORED``, written by its ``--save``),
  so that the notebook prints it through ``L.show_demoK`` in the reader's language and draws
  it without the model.
- ``plot_curves(r)``: perplexity against fine-tuning steps per method; ``plot_summary(r)``:
  demo 6's table as bars (perplexity, and bits per weight beside it).
- ``method_explorer(r)``: pick a method, see its curve against the float reference and its
  noise band. Nothing is recomputed.

Text goes through lecture 11's catalog (domain ``lecture11``); method names are data and are
translated where they are shown (``L.label``).
"""

from __future__ import annotations

import importlib

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from lectures.i18n import domain
from lectures.llm import results as llm_results
from lectures.widgets.explorer import Explorer, explorer_figure

L = importlib.import_module("lectures.11_quantized_finetuning")
_ = domain("lecture11").gettext

#: One full run of the script: ``python lectures/11_quantized_finetuning.py --save <this>``.
STORED = llm_results.stored_path("11")
#: What a stored run holds: the Results of ``L.run_all``, as ``L.stored_results`` keeps them.
STORED_DEMOS = ("run",)


def load_stored(path=STORED) -> dict:
    """The stored run: ``{"run": Results}`` (``L.stored_results`` of a full run), as
    :func:`lectures.llm.load_results` rebuilds it; every ``L.show_demoK`` prints it.

    Raises
    ------
    ValueError
        If the file was not written by the full workload of the script (``--quick`` or
        ``--steps`` is not a run the notebook presents as the lecture's) or lacks the run.
    """
    return llm_results.load_full_run(path, L, "11_quantized_finetuning.py", STORED_DEMOS)


def _check(r) -> None:
    if not isinstance(r, L.Results):
        raise TypeError(f"expected the Results that L.run_all() returns (or load_stored()'s "
                        f"\"run\"), got {type(r).__name__}")


def plot_curves(r) -> Figure:
    """Perplexity against fine-tuning steps, one line per method; the float model dashed."""
    _check(r)
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for run in r.runs():
        steps, ppl = zip(*run.curve)
        ax.plot(steps, ppl, "o-", ms=3, label=L.label(run.method))
    ax.axhline(r.float_ppl, color="k", ls="--", lw=0.8,
               label=_("float32, not trained ({ppl:.2f})").format(ppl=r.float_ppl))
    ax.set_yscale("log")
    ax.set_xlabel(_("fine-tuning step (one window of {n} tokens each)").format(
        n=r.workload.train_len))
    ax.set_ylabel(_("perplexity (log scale)"))
    ax.set_title(_("SmolLM2-135M: QAT, LSQ, LoRA, QLoRA and full fine-tuning"))
    ax.legend(fontsize=7, ncol=2)
    return fig


def plot_summary(r) -> Figure:
    """Demo 6's table: perplexity per method (bars), bits per weight written on each."""
    _check(r)
    rows = L.demo6_rows(r)
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


def method_point(r, method: str) -> dict:
    """One method's curve, bits per weight, trainable count and perplexity, with its noise:
    half the 95% interval of its paired per-window ratio against float, in perplexity."""
    _check(r)
    runs = {run.method: run for run in r.runs()}
    if method not in runs:
        raise ValueError(f"method must be one of {sorted(runs)}, got {method!r}")
    run = runs[method]
    return {"method": method, "curve": run.curve, "bits": run.bits,
            "trainable": run.trainable, "ppl": run.ppl, "float_ppl": r.float_ppl,
            "noise": run.ppl * L.half_width(L.versus(run.nll, r.float_nll))}


def method_explorer(r) -> Explorer:
    """Choose a method: its perplexity curve against the float model, and its numbers."""
    _check(r)
    methods = [run.method for run in r.runs()]
    controls = {"method": widgets.Dropdown(options=[(L.label(m), m) for m in methods],
                                           value=methods[0], description=_("method"))}
    return Explorer(_("One fine-tuning run"), controls, lambda method: method_point(r, method),
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
