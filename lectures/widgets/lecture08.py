"""Plots and widgets for notebook 08 (a real language model in low precision).

A thin layer over lecture 08's demo functions and the harness in :mod:`lectures.llm`:

- ``plot_*(result)`` draws what a demo returned (``plot_perplexity_vs_bits(L.demo2_...)``) and
  returns a ``matplotlib.figure.Figure``; nothing is recomputed.
- ``load_stored()`` reads one full run of the script (``STORED``, written by its ``--save``),
  so that the notebook prints it through ``L.show_demoK`` in the reader's language and draws
  it without the model.
- ``quantization_explorer(lab)`` builds an :class:`Explorer`: menus for the weight format,
  bits, granularity, which layers, and activation quantization; its callback quantizes the
  model through numfmt (:class:`lectures.llm.WeightFormat`, :class:`lectures.llm.ActFormat`),
  measures the perplexity on the lab's windows, and draws the input histogram of one chosen
  linear before and after activation quantization. One update takes a few seconds on a CPU
  (every decoder linear is re-quantized), so use a small workload (``NOTEBOOK`` below).
  pytest sets ``explorer.controls[name].value`` and reads ``explorer.state``.
"""

from __future__ import annotations

import dataclasses

import ipywidgets as widgets
import numpy as np
from matplotlib import ticker
from matplotlib.figure import Figure

from console.i18n import N_
from lectures import lecture, llm
from lectures.i18n import domain, gettext_from
from lectures.llm import results as llm_results
from lectures.widgets.explorer import Explorer, check_result

L = lecture(8)
_ = gettext_from("lecture08", "llm")      # the weight formats' names are in the llm catalog
pgettext = domain("lecture08").pgettext     # the table's "quantized" is another word

#: The notebook's reduced workload (documented there): one window of 256 tokens to score,
#: one to calibrate on, so that it runs in well under a minute on two cores.
NOTEBOOK = L.Workload(n_eval=1, seq_len=256, n_calib=1)
#: Formats the notebook's demo 2 table covers (a subset of L.WEIGHT_FORMATS).
NOTEBOOK_FORMATS = ("INT8, per channel", "INT4, per channel", "INT4, groups of 32",
                    "INT3, groups of 32", "INT3 + zero point, groups of 32",
                    "MXFP4 (E2M1, E8M0 per 32)", "NVFP4 (E2M1, E4M3 per 16)")

#: One full run of the script: ``python lectures/08_real_model.py --save <this file>``.
STORED = llm_results.stored_path("08")
#: The demos of a stored run, in the order the script prints them.
STORED_DEMOS = ("demo1", "demo2", "demo3", "demo4", "demo5", "demo6")


def load_stored(path=STORED) -> dict:
    """The stored run's results (``"demo1"`` ... ``"demo6"``, the demos' own result objects;
    demo 3's as ``L.stored_outliers`` keeps it), as :func:`lectures.llm.load_results` rebuilds
    them.

    Raises
    ------
    ValueError
        If the file was not written by the full workload of the script (``--quick`` is not a
        run the notebook presents as the lecture's) or lacks a demo.
    """
    return llm_results.load_full_run(path, L, "08_real_model.py", STORED_DEMOS)


def open_lab_or_explain(workload=None):
    """``L.open_lab(workload)`` (default :data:`NOTEBOOK`), or None after printing how to
    install the model when it is missing (the live cells then skip themselves)."""
    try:
        return L.open_lab(NOTEBOOK if workload is None else workload)
    except llm.ModelUnavailableError as err:
        print(_("The model is not installed, so the live cells are skipped; the stored tables "
                "and figures are a reduced run.") + "\n" + err.wrapped())
        return None


KINDS = ("INT", "FP8 E4M3", "MXFP4", "NVFP4", "NF4")
GRANULARITIES = ((N_("per channel"), None), (N_("groups of 128"), 128), (N_("groups of 32"), 32))
LAYERS = (N_("all decoder linears"),) + llm.LINEAR_KINDS
ACTIVATIONS = ("float32", N_("INT8 per token"), N_("FP8 E4M3 per token"), "MXFP4", "NVFP4")
_ACT_KIND = {"INT8 per token": "int8", "FP8 E4M3 per token": "fp8", "MXFP4": "mxfp4",
             "NVFP4": "nvfp4"}


def weight_format(kind: str, bits: int = 4, granularity: str = "per channel",
                  symmetric: bool = True) -> llm.WeightFormat:
    """The :class:`lectures.llm.WeightFormat` the explorer's menus describe.

    ``bits``, ``granularity`` and ``symmetric`` matter for "INT" only (FP8 is per channel,
    MXFP4/NVFP4/NF4 have their own blocks). Raises ValueError for an unknown kind or
    granularity.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    groups = dict(GRANULARITIES)
    if granularity not in groups:
        raise ValueError(f"granularity must be one of {tuple(groups)}, got {granularity!r}")
    if kind == "INT":
        group = groups[granularity]
        return llm.WeightFormat(f"INT{bits}, {granularity}", "int", bits,
                                "channel" if group is None else "group", group, symmetric)
    return {"FP8 E4M3": llm.WeightFormat("FP8 E4M3, per channel", "fp8"),
            "MXFP4": llm.WeightFormat("MXFP4", "mxfp4"),
            "NVFP4": llm.WeightFormat("NVFP4", "nvfp4"),
            "NF4": llm.WeightFormat("NF4", "nf4")}[kind]


def act_format(name: str) -> llm.ActFormat | None:
    """The dynamic :class:`lectures.llm.ActFormat` of an activation menu entry (None: float32)."""
    if name not in ACTIVATIONS:
        raise ValueError(f"activations must be one of {ACTIVATIONS}, got {name!r}")
    return None if name == "float32" else llm.ActFormat(name, _ACT_KIND[name])


def _plain_ticks(axis) -> None:
    """Log-axis ticks as plain numbers (2, 5, 10, 20), as notebook 05 draws them."""
    axis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


# ---------------------------------------------------------------------------------------------
# Plots of the lecture's results
# ---------------------------------------------------------------------------------------------
def plot_perplexity_vs_bits(r, formats=None) -> Figure:
    """Perplexity against bits per weight for the formats of demo 2 (log scale): the labels
    ``formats`` (the stored run's 15 crowd one another; notebook 08 draws
    :data:`NOTEBOOK_FORMATS`), default every format ``r`` measured. ValueError for a label
    ``r`` lacks."""
    check_result(r, L.WeightOnlyResult, "demo2_weight_formats")
    if formats is not None:
        missing = [f for f in formats if f not in r.ppl]
        if missing:
            raise ValueError(f"formats must be labels of the result's formats, got {missing}")
        r = dataclasses.replace(r, ppl={f: r.ppl[f] for f in formats},
                                bits={f: r.bits[f] for f in formats})
    fig = Figure(figsize=(9, 5))
    ax = fig.add_subplot()
    families = {"INT": "C0", N_("INT + zero point"): "C1", "FP8": "C2", "MXFP4": "C3",
                "NVFP4": "C4", "NF4": "C5"}
    seen = set()
    for label in r.ppl:
        family = ("INT + zero point" if "zero point" in label else
                  next((f for f in ("FP8", "MXFP4", "NVFP4", "NF4") if f in label), "INT"))
        ax.scatter(r.bits[label], r.ppl[label], color=families[family],
                   label=None if family in seen else _(family), zorder=3)
        seen.add(family)
    ax.axhline(r.reference, color="k", ls="--", lw=1,
               label=_("float32 ({reference:.2f})").format(reference=r.reference))
    ax.set_yscale("log")
    _plain_ticks(ax.yaxis)
    ax.set_xlabel(_("bits per weight (codes + scales)"))
    ax.set_ylabel(_("perplexity (log scale)"))
    ax.set_title(_("Weight-only round-to-nearest: perplexity against storage"))
    ax.legend(fontsize=8)
    _label_points(ax, [(_(label.split(" (")[0]), r.bits[label], r.ppl[label]) for label in r.ppl])
    return fig


#: Where a point's label may go, tried in order: (dx, dy) in points and the alignment.
_LABEL_SPOTS = [(4, 2, "left", "bottom"), (4, -2, "left", "top"), (-4, 2, "right", "bottom"),
                (-4, -2, "right", "top"), (4, 9, "left", "bottom"), (4, -9, "left", "top"),
                (-4, 9, "right", "bottom"), (-4, -9, "right", "top"), (0, 16, "center", "bottom"),
                (0, -16, "center", "top")]


def _label_points(ax, points) -> list:
    """Label each ``(text, x, y)`` point of `ax` at the first spot of :data:`_LABEL_SPOTS`
    whose text box overlaps no label placed before, no point and no legend, inside the axes
    (the last spot when none is free). Labels are placed from the left. Returns the labels."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    fig = ax.figure
    if not hasattr(fig.canvas, "get_renderer"):
        FigureCanvasAgg(fig)
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    taken = [ax.get_legend().get_window_extent(renderer)] if ax.get_legend() else []
    dots = [ax.transData.transform((x, y)) for _t, x, y in points]
    texts = []
    for text, x, y in sorted(points, key=lambda p: (p[1], p[2])):
        for dx, dy, ha, va in _LABEL_SPOTS:
            t = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points",
                            ha=ha, va=va, fontsize=7)
            box = t.get_window_extent(renderer).expanded(1.05, 1.1)
            free = (frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0
                    and box.y1 <= frame.y1 and not any(box.overlaps(b) for b in taken)
                    and not any(box.contains(*d) for d in dots))
            if free or (dx, dy, ha, va) == _LABEL_SPOTS[-1]:
                break
            t.remove()
        taken.append(box)
        texts.append(t)
    return texts


def plot_sensitivity(r) -> Figure:
    """Perplexity with one kind of linear quantized at a time (demo 2)."""
    check_result(r, L.WeightOnlyResult, "demo2_weight_formats")
    fig = Figure(figsize=(8, 3.5))
    ax = fig.add_subplot()
    kinds = list(r.sensitivity)
    ax.bar(kinds, [r.sensitivity[k] for k in kinds], color="C1",
           label=_("only this kind in {format}").format(format=_(r.sensitivity_format)))
    ax.axhline(r.reference, color="k", ls="--", lw=1, label="float32")
    ax.set_xlabel(_("kind of linear (all 30 layers)"))
    ax.set_ylabel(_("perplexity"))
    ax.set_title(_("Which layers are sensitive?"))
    ax.legend(fontsize=8)
    return fig


def plot_outliers_by_layer(r) -> Figure:
    """Largest and median channel absmax of each linear's input, layer by layer (demo 3)."""
    check_result(r, L.OutlierResult, "demo3_outliers")
    fig = Figure(figsize=(10, 4))
    ax = fig.add_subplot()
    for i, kind in enumerate(L.INPUT_OF):
        names = [n for n in r.channel_stats if llm.layer_of(n)[1] == kind]
        layers = [llm.layer_of(n)[0] for n in names]
        ax.plot(layers, [r.channel_stats[n][0] for n in names], color=f"C{i}", marker="o",
                ms=3, label=_("{linear}: largest channel").format(linear=_(L.INPUT_OF[kind])))
        ax.plot(layers, [r.channel_stats[n][1] for n in names], color=f"C{i}", ls=":",
                label=_("{linear}: median channel").format(linear=_(L.INPUT_OF[kind])))
    ax.set_yscale("log")
    _plain_ticks(ax.yaxis)
    ax.set_xlabel(_("layer"))
    ax.set_ylabel(_("max |x| of a channel (log scale)"))
    ax.set_title(_("Activation outliers: the largest channel against the median one"))
    ax.legend(fontsize=7, ncol=2)
    return fig


def plot_outlier_channels(r, name: str | None = None) -> Figure:
    """Per-channel absmax of one linear's input (default: the peak of demo 3), and per token."""
    check_result(r, L.OutlierResult, "demo3_outliers")
    name = r.peak["name"] if name is None else name
    if name not in r.absmax:
        raise ValueError(f"name must be a decoder linear whose inputs the result keeps (stored "
                         f"results keep the peak's, {r.peak['name']}), got {name!r}")
    a, t = r.absmax[name], r.token_absmax[name].reshape(-1, r.seq_len)
    fig = Figure(figsize=(10, 3.5))
    ax1, ax2 = fig.subplots(1, 2)
    ax1.bar(np.arange(len(a)), a, width=1.0, color="C0", label=_("max |x| per channel"))
    ax1.axhline(np.median(a), color="k", ls="--", lw=1, label=_("median channel"))
    ax1.set_xlabel(_("input channel"))
    ax1.set_ylabel("max |x|")
    ax1.set_title(_("{linear}: channels").format(linear=_layer_name(name)))
    ax1.legend(fontsize=8)
    for i, row in enumerate(t):
        ax2.plot(np.arange(len(row)), row, lw=0.8, label=_("window {i}").format(i=i))
    ax2.set_yscale("log")
    _plain_ticks(ax2.yaxis)
    ax2.set_xlabel(_("token position in the window"))
    ax2.set_ylabel(_("max |x| over channels (log)"))
    ax2.set_title(_("tokens: the first one is massive"))
    ax2.legend(fontsize=8)
    return fig


def plot_activation_results(r) -> Figure:
    """Perplexity of every W8A8 / W4A4 setting of demo 4 (log scale)."""
    check_result(r, L.ActivationResult, "demo4_weights_and_activations")
    fig = Figure(figsize=(9, 3.5))
    ax = fig.add_subplot()
    labels = list(r.ppl)
    # points, not bars: bar lengths on a log axis would exaggerate the ratios
    ax.scatter([r.ppl[k] for k in labels], [_(k) for k in labels], color="C2", zorder=3,
               label=pgettext("quantized model", "quantized"))
    ax.axvline(r.reference, color="k", ls="--", lw=1, label="float32")
    ax.set_xscale("log")
    _plain_ticks(ax.xaxis)
    ax.set_xlabel(_("perplexity (log scale)"))
    ax.set_ylabel(_("weights, activations"))
    ax.set_title(_("Weights and activations"))
    ax.legend(fontsize=8)
    ax.invert_yaxis()
    return fig


# ---------------------------------------------------------------------------------------------
# The explorer
# ---------------------------------------------------------------------------------------------
def quantize_and_measure(lab, kind: str, bits: int, granularity: str, symmetric: bool,
                         layers: str, activations: str, histogram_of: str) -> dict:
    """One explorer update: perplexity with these settings and one linear's input histogram.

    Parameters
    ----------
    lab : lecture 08's :class:`Lab`
    kind, bits, granularity, symmetric : see :func:`weight_format`
    layers : "all decoder linears" or one of the seven linear kinds
    activations : one of :data:`ACTIVATIONS`
    histogram_of : a linear kind; its input in layer ``HISTOGRAM_LAYER`` is drawn

    Returns
    -------
    dict with ``format`` (WeightFormat), ``act`` (ActFormat or None), ``ppl``, ``reference``,
    ``bits_per_weight`` (over the quantized linears), ``x`` and ``xq`` (float64 inputs of the
    chosen linear on the first calibration window, before and after activation quantization).
    """
    return {**_measure(lab, kind, bits, granularity, symmetric, layers, activations),
            **_input_histogram(lab, activations, histogram_of)}


def _measure(lab, kind, bits, granularity, symmetric, layers, activations) -> dict:
    """The perplexity half of :func:`quantize_and_measure` (the slow half)."""
    if layers not in LAYERS:
        raise ValueError(f"layers must be one of {LAYERS}, got {layers!r}")
    fmt, act = weight_format(kind, bits, granularity, symmetric), act_format(activations)
    names = list(llm.decoder_linears(lab.model, None if layers == LAYERS[0] else [layers]))
    shapes = [tuple(llm.decoder_linears(lab.model)[n].weight.shape) for n in names]
    tensors = lab.quantized(fmt, names)
    return {"format": fmt, "act": act, "ppl": lab.ppl(tensors, acts=act),
            "reference": lab.reference, "bits_per_weight": llm.model_bits_per_weight(fmt, shapes),
            "layers": layers}


def _input_histogram(lab, activations: str, histogram_of: str) -> dict:
    """The histogram half of :func:`quantize_and_measure`: one linear's float32 input on the
    first calibration window, and the same after activation quantization."""
    import torch

    act = act_format(activations)
    target = f"model.layers.{HISTOGRAM_LAYER}." + (
        "self_attn." if histogram_of in llm.LINEAR_KINDS[:4] else "mlp.") + histogram_of
    x = llm.capture_linear_inputs(lab.model, lab.calib[:1], [target],
                                  keep_inputs=True)[target].inputs.astype(np.float64)
    xq = x if act is None else act(torch.from_numpy(x), target).numpy()
    return {"x": x, "xq": xq, "target": target}


HISTOGRAM_LAYER = 29     #: the layer whose inputs the explorer's histogram shows (the last)


def _layer_name(name: str) -> str:
    """'model.layers.29.mlp.down_proj' -> 'layer 29.mlp.down_proj', in the current language."""
    if name.startswith("model.layers."):
        number, _dot, rest = name.removeprefix("model.layers.").partition(".")
        return _("layer {number}.{rest}").format(number=number, rest=rest)
    return name


def quantization_explorer(lab) -> Explorer:
    """Menus: weight format, bits, granularity, zero point, layers, activations, histogram.

    A perplexity is computed once per weight format, layers and activations, and a histogram
    once per activations and linear: choosing another histogram, or going back to a setting
    already seen, only redraws.
    """
    style = {"description_width": "initial"}
    controls = {
        "kind": widgets.Dropdown(options=KINDS, value="INT", description=_("weights"),
                                 style=style),
        "bits": widgets.IntSlider(value=4, min=2, max=8, description=_("INT bits"), style=style),
        "granularity": widgets.Dropdown(options=[(_(g), g) for g, _group in GRANULARITIES],
                                        value="groups of 32", description=_("INT scales"),
                                        style=style),
        "symmetric": widgets.Checkbox(value=True, description=_("symmetric (no zero point)")),
        "layers": widgets.Dropdown(options=[(_(k), k) for k in LAYERS], value=LAYERS[0],
                                   description=_("quantize"), style=style),
        "activations": widgets.Dropdown(options=[(_(a), a) for a in ACTIVATIONS],
                                        value="float32", description=_("activations"),
                                        style=style),
        "histogram_of": widgets.Dropdown(options=llm.LINEAR_KINDS, value="down_proj",
                                         description=_("histogram: layer {layer}").format(
                                             layer=HISTOGRAM_LAYER),
                                         style=style),
    }

    measured, histograms = {}, {}   # what each setting computed: moving back costs nothing

    def compute(kind, bits, granularity, symmetric, layers, activations, histogram_of):
        int_only = kind != "INT"
        for k in ("bits", "granularity", "symmetric"):
            controls[k].disabled = int_only
        # bits, granularity and zero point describe INT formats only: other kinds ignore them
        fmt = (kind,) if int_only else (kind, bits, granularity, symmetric)
        if (fmt, layers, activations) not in measured:
            measured[fmt, layers, activations] = _measure(lab, kind, bits, granularity,
                                                          symmetric, layers, activations)
        if (activations, histogram_of) not in histograms:
            histograms[activations, histogram_of] = _input_histogram(lab, activations,
                                                                     histogram_of)
        return {**measured[fmt, layers, activations], **histograms[activations, histogram_of]}

    return Explorer(_("Quantize SmolLM2-135M and measure it"), controls, compute, _draw_explorer,
                    rows=[["kind", "bits", "granularity", "symmetric"],
                          ["layers", "activations", "histogram_of"]])


def _draw_explorer(s: dict) -> Figure:
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    ax1.bar(["float32", pgettext("quantized model", "quantized")], [s["reference"], s["ppl"]],
            color=["0.6", "C3"],
            label=_("{format} on {layers}, {bits:.2f} bits/weight").format(
                format=_(s["format"].label), layers=_(s["layers"]), bits=s["bits_per_weight"]))
    ax1.set_ylabel(_("perplexity"))
    ax1.set_xlabel(_("model"))
    ax1.set_title(_("perplexity {ppl:.2f} (float32 {reference:.2f})").format(
        ppl=s["ppl"], reference=s["reference"]))
    ax1.legend(fontsize=7)
    x, xq = s["x"].ravel(), s["xq"].ravel()
    bins = np.linspace(x.min(), x.max(), 121)
    ax2.hist(x, bins=bins, color="0.6", label=_("float32 input"), log=True)
    if s["act"] is not None:
        ax2.hist(xq, bins=bins, histtype="step", color="C3", label=_(s["act"].label), log=True)
    ax2.set_xlabel(_("input value of {linear}").format(linear=_layer_name(s["target"])))
    ax2.set_ylabel(_("count (log)"))
    ax2.set_title(_("activation histogram"))
    ax2.legend(fontsize=7)
    return fig
