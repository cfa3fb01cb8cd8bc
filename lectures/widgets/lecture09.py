"""Plots and widgets for notebook 09 (post-training quantization algorithms).

A thin layer over lecture 09's demo functions:

- ``plot_output_error(result)`` draws what ``L.demo1_output_error()`` returned;
  ``plot_perplexity(rows)`` the summary table of ``L.demo6_summary``. Nothing is recomputed.
- ``load_stored()`` reads one full run of demos 2-6 (``STORED``, written by the script's
  ``--save``), so that the notebook prints it through ``L.show_demoK`` in the reader's language
  and draws it without the model.
- ``gptq_explorer()`` builds an :class:`Explorer` whose callback quantizes a small synthetic
  layer (lecture 09's recipe, smaller) with RTN and GPTQ at the chosen bits, group, act-order
  and input correlation, and keeps the errors in ``explorer.state``.

Text goes through lecture 09's catalog (domain ``lecture09``); the methods' names are the row
labels lecture 09 prints (``L.label``).
"""

from __future__ import annotations

import contextlib
import functools

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from console.i18n import N_
from lectures import lecture
from lectures.i18n import domain
from lectures.llm import results as llm_results
from lectures.widgets.explorer import Explorer, check_result, explorer_figure
from numfmt import rel_error
from numfmt.ptq import gptq, hessian, rtn

L = lecture(9)
_ = domain("lecture09").gettext

#: One full run of demos 2-6: ``python lectures/09_ptq_algorithms.py --save <this file>``.
STORED = llm_results.stored_path("09")
#: The demos of a stored run, in the order the script prints them.
STORED_DEMOS = ("demo2", "demo3", "demo4", "demo5", "demo6")


def load_stored(path=STORED) -> dict:
    """The stored run's results (``"reference"`` perplexity and ``"demo2"`` ... ``"demo6"``, the
    demos' own result objects), as :func:`lectures.llm.load_results` rebuilds them.

    Raises
    ------
    ValueError
        If the file was not written by the full workload of the script (``--quick`` is not a
        run the notebook presents as the lecture's) or lacks a demo.
    """
    return llm_results.load_full_run(path, L, "09_ptq_algorithms.py", STORED_DEMOS)


def load_model_or_explain():
    """``L.load_model()`` (the full workload), or None after printing how to install the model
    when it is missing (notebook 09's live cell then skips itself)."""
    from lectures import llm
    try:
        return L.load_model()
    except llm.ModelUnavailableError as err:
        print(_("The model is not installed, so demos 2-6 are not rerun; the stored tables and "
                "figure above are a full run of the script.") + "\n" + err.wrapped())
        return None


EXPLORER_SHAPE = (64, 256)     #: (out, in) of the explorer's layer: fast enough for a slider
GROUPS = (N_("per row"), 32, 64, 128)   # "per row" translated where shown


def plot_output_error(r) -> Figure:
    """Weight error against held-out output error of each method (demo 1), two input kinds."""
    check_result(r, L.OutputErrorResult, "demo1_output_error")
    fig = Figure(figsize=(10, 4))
    axes = fig.subplots(1, 2, sharey=True)
    titles = (_("correlated inputs, {count} outlier channels"),
              _("i.i.d. inputs, {count} outlier channels"))
    for ax, rows, title in ((axes[0], r.rows, titles[0]), (axes[1], r.iid_rows, titles[1])):
        names = [L.label(row[0]) for row in rows]
        x = np.arange(len(rows))
        ax.bar(x - 0.2, [row[1] * 100 for row in rows], 0.4, label=_("weight error"))
        ax.bar(x + 0.2, [row[3] * 100 for row in rows], 0.4, label=_("output error (held out)"))
        ax.set_xticks(x, [n.replace(", ", ",\n").replace("，", "，\n") for n in names],
                      fontsize=8)
        ax.set_title(title.format(count=r.outlier_count))
        ax.set_xlabel(_("method"))
        ax.legend(fontsize=8)
    axes[0].set_ylabel(_("relative error (%)"))
    fig.suptitle(_("Round to nearest minimises the weight error; GPTQ the output error"))
    fig.tight_layout()
    return fig


def _one_blas_thread():
    """numpy's BLAS limited to one thread, where threadpoolctl (scikit-learn's) is installed.

    GPTQ's Cholesky and inverses of a 256 x 256 Hessian take 0.02 s of CPU on one thread, but
    about 0.55 s once torch (which notebook 09 imports) has started its own thread pool: the
    two pools then spin against each other on two cores (measured here, numpy 2 / torch 2.13).
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


@functools.lru_cache(maxsize=4)
def _explorer_layer(seed: int, correlated: bool) -> tuple:
    """The explorer's (64, 256) corner of lecture 09's synthetic layer, its held-out inputs
    and its calibration Hessian: what does not depend on bits, group or act-order."""
    d = L.synthetic_layer(seed, correlated)
    out, cols = EXPLORER_SHAPE
    w, xc, xe = d["w"][:out, :cols], d["x_calib"][:, :cols], d["x_eval"][:, :cols]
    return w, xe, hessian(xc)


@functools.lru_cache(maxsize=128)
def explorer_point(bits: int, group, act_order: bool, correlated: bool, seed: int = 0) -> dict:
    """RTN and GPTQ on a (64, 256) layer of lecture 09's recipe: errors as fractions.

    Results are cached by their arguments (the control space has 112 points)."""
    w, xe, H = _explorer_layer(seed, correlated)
    g = None if group == "per row" else int(group)
    r = rtn(w, bits, g).weight
    with _one_blas_thread():
        q = gptq(w, H, bits, g, act_order=act_order).weight
    return {"bits": bits, "group": group, "act_order": act_order, "correlated": correlated,
            "rtn": (rel_error(r, w), L.output_error(r, w, xe)),
            "gptq": (rel_error(q, w), L.output_error(q, w, xe))}


def gptq_explorer(seed: int = 0) -> Explorer:
    """Bits, group size, act-order and correlation -> RTN and GPTQ weight and output errors."""
    controls = {
        "bits": widgets.IntSlider(value=4, min=2, max=8, description=_("bits")),
        "group": widgets.Dropdown(options=[(_(g) if isinstance(g, str) else str(g), g)
                                           for g in GROUPS],
                                  value="per row", description=_("group")),
        "act_order": widgets.Checkbox(value=False, description="act-order"),
        "correlated": widgets.Checkbox(value=True, description=_("correlated inputs")),
    }

    def compute(bits, group, act_order, correlated):
        return explorer_point(bits, group, act_order, correlated, seed)

    return Explorer(_("RTN against GPTQ on a synthetic layer"), controls, compute, _draw_point)


def _draw_point(s: dict, fig: Figure | None = None) -> Figure:
    fig, ax = explorer_figure(fig, (6, 3.5))
    x = np.arange(2)
    ax.bar(x - 0.2, [s["rtn"][0] * 100, s["gptq"][0] * 100], 0.4, label=_("weight error"))
    ax.bar(x + 0.2, [s["rtn"][1] * 100, s["gptq"][1] * 100], 0.4,
           label=_("output error (held out)"))
    ax.set_xticks(x, ["RTN", "GPTQ" + (" act-order" if s["act_order"] else "")])
    ax.set_xlabel(_("method"))
    ax.set_ylabel(_("relative error (%)"))
    group = _(s["group"]) if isinstance(s["group"], str) else s["group"]
    title = (_("INT{bits}, group {group}, correlated inputs") if s["correlated"]
             else _("INT{bits}, group {group}, i.i.d. inputs"))
    ax.set_title(title.format(bits=s["bits"], group=group))
    ax.legend(fontsize=8)
    return fig


def plot_perplexity(rows: list) -> Figure:
    """Perplexity against bits per weight for each method (demo 6's rows)."""
    if not isinstance(rows, list) or not rows or len(rows[0]) != 4:
        raise TypeError("expected the rows that L.demo6_summary() returns")
    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot()
    ref = float(rows[0][2])
    methods = {}
    for label, bpw, p, _calibration in rows[1:]:
        methods.setdefault(label.split(" ")[0], []).append((float(bpw), float(p)))
    for name, pts in methods.items():
        pts.sort()
        ax.plot([b for b, _p in pts], [p for _b, p in pts], "o-", label=name)
    ax.axhline(ref, color="k", ls="--", lw=0.8, label=f"float32 ({ref:.2f})")
    ax.set_yscale("log")
    ax.set_xlabel(_("storage (bits per weight)"))
    ax.set_ylabel(_("perplexity (log scale)"))
    ax.set_title(_("SmolLM2-135M: weight-only PTQ methods"))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
