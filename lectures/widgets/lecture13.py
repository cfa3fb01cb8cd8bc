"""Plots and widgets for notebook 13 (the memory of training and the real stack).

A thin layer over lecture 13's demo functions and numfmt.memory:

- ``plot_bill(result, model)`` draws ``L.demo1_bill()``'s bytes per GPU as one stacked bar
  per recipe and sharding;
- ``plot_loss_curves(runs, labels)`` draws the validation curves of ``L.run_all()``'s runs
  (mean over seeds, the seeds' range shaded);
- ``memory_explorer()`` builds an :class:`Explorer` over ``numfmt.memory.memory_bill``: model,
  recipe, optimizer state format, GPUs, sharding and checkpointing -> the bill per GPU.

Text goes through lecture 13's catalog (domain ``lecture13``).
"""

from __future__ import annotations

import importlib
from dataclasses import replace

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from lectures.i18n import domain
from lectures.widgets.explorer import Explorer, check_result, explorer_figure
from numfmt import memory

L = importlib.import_module("lectures.13_memory_of_training")
_ = domain("lecture13").gettext

GB = 1e9
DEVICES = (1, 2, 4, 8, 16, 32, 64)
STATES = ("fp32", "bf16", "int8", "fp8")
COLORS = {"weights": "C0", "master": "C1", "gradients": "C2", "moments": "C3",
          "compensation": "C4", "activations": "C5", "gathered": "C7"}


def _stack(ax, bills: list, labels: list) -> None:
    bottom = np.zeros(len(bills))
    for item in memory.BILL_ITEMS:
        values = np.array([b[item] for b in bills]) / GB
        ax.bar(range(len(bills)), values, bottom=bottom, color=COLORS[item],
               label=_(L.ITEM_NAMES[item]))
        bottom += values
    ax.set_xticks(range(len(bills)), labels, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel(_("GB per GPU"))


def plot_bill(r, model: str = "Llama 3.1 8B") -> Figure:
    """Demo 1's bill for ``model``: one stacked bar per recipe and sharding, in GB per GPU."""
    check_result(r, L.BillResult, "demo1_bill")
    if model not in L.SHAPES:
        raise ValueError(f"model must be one of {list(L.SHAPES)}, got {model!r}")
    keys = [(prec, s) for prec in L.BILL_PRECISIONS for s in L.SETUPS]
    bills = [r.bills[(model, prec, *s)] for prec, s in keys]
    labels = [f"{_(prec)}\n{L.setup_label(*s)}" for prec, s in keys]
    fig = Figure(figsize=(9, 4.5), layout="constrained")
    ax = fig.add_subplot()
    _stack(ax, bills, labels)
    ax.axhline(80, color="k", lw=0.8, ls="--", label=_("80 GB (one H100)"))
    ax.set_title(_("{model}: bytes of a training step, per GPU").format(model=model))
    ax.legend(fontsize=7, ncol=2)
    return fig


def plot_loss_curves(runs, labels) -> Figure:
    """Validation loss against step for ``labels`` of ``L.run_all()``'s runs: the mean over
    seeds, the seeds' range shaded."""
    check_result(runs, L.Runs, "run_all")
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    for i, label in enumerate(labels):
        rs = runs.results[label]
        steps = rs[0].val_steps
        vals = np.array([r.val_loss for r in rs])
        ax.plot(steps, vals.mean(axis=0), marker="o", color=f"C{i}", label=_(label))
        ax.fill_between(steps, vals.min(axis=0), vals.max(axis=0), color=f"C{i}", alpha=0.15)
    ax.set_xlabel(_("step"))
    ax.set_ylabel(_("validation loss (bits/byte)"))
    ax.legend(fontsize=8)
    return fig


def memory_explorer() -> Explorer:
    """Model, recipe, Adam's state format, GPUs, sharding, checkpointing -> the bill per GPU
    (numfmt.memory; one sequence of 4,096 tokens per GPU)."""
    controls = {
        "model": widgets.Dropdown(options=list(L.SHAPES), value="Llama 3.1 8B",
                                  description=_("model")),
        "recipe": widgets.Dropdown(options=[(_(p), p) for p in memory.PRECISIONS],
                                   value="BF16 mixed", description=_("recipe")),
        "state": widgets.Dropdown(options=STATES, value="fp32", description=_("moments")),
        "devices": widgets.SelectionSlider(options=DEVICES, value=8, description=_("GPUs")),
        "sharding": widgets.Dropdown(options=[("DP", "dp"), ("FSDP", "fsdp")], value="fsdp",
                                     description=_("sharding")),
        "checkpointing": widgets.Checkbox(value=False, description=_("checkpointing")),
    }

    def compute(model, recipe, state, devices, sharding, checkpointing):
        prec = replace(memory.PRECISIONS[recipe], state=state)
        bill = memory.memory_bill(L.SHAPES[model], prec, 1, L.SEQ, devices=devices,
                                  sharding=sharding, checkpointing=checkpointing)
        return {"model": model, "recipe": recipe, "state": state, "devices": devices,
                "sharding": sharding, "checkpointing": checkpointing, "bill": bill,
                "total_gb": sum(bill.values()) / GB}

    return Explorer(_("Memory per GPU: model, recipe, optimizer state, sharding"), controls,
                    compute, _draw_bill,
                    rows=[["model", "recipe", "state"], ["devices", "sharding",
                                                         "checkpointing"]])


def _draw_bill(s: dict, fig: Figure | None = None) -> Figure:
    fig, ax = explorer_figure(fig, (6, 4))
    _stack(ax, [s["bill"]], [_(s["recipe"])])
    ax.set_title(_("{model}: {total:.1f} GB per GPU").format(model=s["model"],
                                                              total=s["total_gb"]), fontsize=9)
    ax.legend(fontsize=7)
    return fig
