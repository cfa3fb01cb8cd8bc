"""Plots and widgets for notebook 10 (training in low precision).

``plot_*(...)`` draws what lecture 10 computed (its :class:`Runs` and :class:`Probe`) and
returns a ``matplotlib.figure.Figure``; nothing is recomputed. :func:`load_stored` reads one
full run of the lecture (``STORED``, written by its ``--save``), which the notebook prints with
the lecture's own ``show`` in the reader's language and draws with these plots.
:func:`recipe_explorer` returns an
:class:`Explorer` whose callback trains a short run under a recipe built from its controls
(:func:`custom_recipe`, a pure function) and draws the loss curve against a stored BF16 run.

What the explorer shows a reader is composed here and translated (lecture 10's catalog): an
operand's label (:func:`spec_label`) and why a combination is not a recipe
(:func:`invalid_reason`). numfmt's own error messages stay English; the state keeps them.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import replace
from functools import lru_cache

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

import numfmt
import numfmt.torch.train as ntt
from console.i18n import N_
from lectures import results
from lectures.i18n import domain
from lectures.tinylm import loop, runs as tinylm_runs
from lectures.tinylm.loop import TrainConfig, train
from lectures.widgets.explorer import Explorer, check_result, explorer_figure

L = importlib.import_module("lectures.10_low_precision_training")
_ = domain("lecture10").gettext     # the recipes' names are in its catalog (lecture 10's N_())

EXPLORER_STEPS = 12          # a short run: a few seconds per recipe on one core

#: One full run of the lecture: ``python lectures/10_low_precision_training.py --save <this>``.
STORED = results.stored_path("10")

#: The words of an operand's label (``OperandSpec.describe()``) that are not format names,
#: block shapes or abbreviations (SR, RHT), translated where the explorer shows the label.
SPEC_WORDS = {"tensor": N_("tensor"), "row": N_("row"), "delayed": N_("delayed"),
              "exact": N_("exact")}

#: The ValueErrors custom_recipe can raise (numfmt's, recognized by the field they name), each
#: with the explanation the explorer shows instead: (pattern, message with the named groups).
INVALID_REASONS = (
    (re.compile(r"OperandSpec\.mode='stochastic' is not available for fmt='(?P<fmt>\w+)'"),
     N_("Stochastic rounding (SR) applies to the scaled formats (E4M3, E5M2, E2M1), not to a "
        "plain cast: here dy is {fmt}. Turn SR on dy off, or give dy a scaled format.")),
    (re.compile(r"Recipe\.wgrad has rht on one operand only"),
     N_("The random Hadamard transform (RHT) cancels only when both wgrad operands, dy and x, "
        "take it; here one of them is a plain cast. Turn RHT off, or give both a scaled "
        "format.")),
)


def load_stored(path=STORED):
    """The stored full run: the :class:`Lecture` that ``L.stored_lecture`` kept of it (its
    runs, the probe's dW errors and histogram of dy, and the demos' results), which
    ``L.show`` prints and the plots below draw.

    Raises
    ------
    ValueError
        If the file was not written by the lecture's full workload (``--quick``, or a workload
        other than ``L.FULL``: not a run the notebook presents as the lecture's).
    """
    lec = results.load_full_run(path, (loop, tinylm_runs, L), L.SCRIPT, ("lecture",))["lecture"]
    if lec.runs.workload != L.FULL:
        raise ValueError(f"{path} holds a run of the workload {lec.runs.workload}, not the "
                         f"lecture's full one; store it again with --save")
    return lec


# ------------------------------------------------------------------------------ pure helpers
def custom_recipe(base: str = "fp8_current", x: str | None = None, w: str | None = None,
                  dy: str | None = None, sr: bool | None = None, rht: bool | None = None):
    """A recipe of :data:`numfmt.torch.train.RECIPES` with some operands changed.

    Parameters
    ----------
    base : a key of RECIPES
    x, w, dy : str or None
        Element format of that operand in every GEMM it enters ("bf16", "e4m3", "e5m2",
        "e2m1"; None keeps the base's). A plain cast ("bf16", "fp16", "fp32") drops the scale
        and block; a scaled format keeps the base's block and scale when it has one, else
        takes a per-tensor FP32 scale (E2M1 then 1x16 blocks with E4M3 scales, as NVFP4).
    sr : bool or None
        Stochastic rounding of dy (in dgrad and wgrad); scaled formats only.
    rht : bool or None
        The 16x16 random Hadamard transform on the wgrad operands; scaled formats only.

    Returns
    -------
    numfmt.torch.train.Recipe

    Raises
    ------
    ValueError
        From OperandSpec, naming the field, when the combination does not exist (e.g. SR on a
        plain cast).
    """
    r = ntt.get_recipe(base)

    def change(spec, fmt):
        if fmt is None or fmt == spec.fmt:
            return spec
        if fmt in ("fp32", "bf16", "fp16"):
            return ntt.OperandSpec(fmt)
        if spec.scale_format != "none" and not (fmt == "e2m1") == (spec.format.bits > 6):
            return replace(spec, fmt=fmt)
        if fmt == "e2m1":
            return ntt.OperandSpec("e2m1", (1, 16), "e4m3")
        return ntt.OperandSpec(fmt, "tensor", "exact")
    new = {"fprop": [change(r.fprop[0], x), change(r.fprop[1], w)],
           "dgrad": [change(r.dgrad[0], dy), change(r.dgrad[1], w)],
           "wgrad": [change(r.wgrad[0], dy), change(r.wgrad[1], x)]}
    if sr is not None:
        for g in ("dgrad", "wgrad"):
            new[g][0] = replace(new[g][0], mode="stochastic" if sr else "nearest")
    if rht is not None:
        new["wgrad"] = [replace(s, rht=rht) for s in new["wgrad"]]
    return replace(r, name="custom", **{g: tuple(v) for g, v in new.items()})


def spec_label(spec) -> str:
    """An operand's label, ``spec.describe()`` ("E4M3 tensor exact delayed"), with its words
    in the current language."""
    return " ".join(_(SPEC_WORDS[word]) if word in SPEC_WORDS else word
                    for word in spec.describe().split(" "))


def invalid_reason(message: str) -> str:
    """What the explorer says, in the current language, about the ValueError `message` of
    :func:`custom_recipe`; the message itself where it is none of :data:`INVALID_REASONS`."""
    for pattern, reason in INVALID_REASONS:
        m = pattern.match(message)
        if m:
            return _(reason).format(**{k: v.upper() for k, v in m.groupdict().items()})
    return message


def format_range(fmt: str) -> tuple[float, float, float]:
    """(smallest subnormal, smallest normal, largest finite) of a numfmt format, as floats."""
    f = numfmt.FORMATS[fmt]
    return f.min_subnormal, f.min_normal, f.max_value


# ------------------------------------------------------------------------------ plots
def plot_loss_curves(runs, labels=("FP32", "BF16", "FP16, no loss scaling",
                                   "FP16 + loss scaling"), fig=None) -> Figure:
    """Training loss (mean over seeds, smoothed over 10 steps) and validation loss per step."""
    check_result(runs, L.Runs, "run_all")
    fig, (ax1, ax2) = explorer_figure(fig, (11, 4), 1, 2)
    for label in labels:
        rs = runs.results[label]
        tr = np.mean([r.train_loss for r in rs], axis=0)
        k = min(10, len(tr))
        ax1.plot(np.arange(k, len(tr) + 1), np.convolve(tr, np.ones(k) / k, "valid"),
                 label=_(label))
        ax2.plot(rs[0].val_steps, np.mean([r.val_loss for r in rs], axis=0), "o-",
                 label=_(label))
    ax1.set(title=_("Training loss (10-step mean)"), xlabel=_("step"),
            ylabel=_("bits per byte"))
    ax2.set(title=_("Validation loss, mean of {n} seeds").format(n=len(runs.workload.seeds)),
            xlabel=_("step"), ylabel=_("bits per byte"))
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    return fig


def plot_gradient_histogram(probe, fig=None) -> Figure:
    """Histogram of log2 |dy| over every linear (the probe's ``dy_histogram``), with each
    format's range drawn across it: FP16 and BF16 as cast (no scale), E4M3 and E5M2 under a
    per-tensor scale at the amax."""
    check_result(probe, L.Probe, "probe_run")
    h = probe.dy_histogram
    fig, ax = explorer_figure(fig, (10, 4.5))
    ax.hist(h.edges[:-1], bins=h.edges, weights=h.counts, color="0.6",
            label=_("|dy|, all linears"))
    first, top = h.edges[0], h.edges[-1]   # log2 of the smallest and the largest |dy|
    spans = [("FP16", *format_range("FP16"), 0.0), ("BF16", *format_range("BF16"), 0.0)]
    for name in ("E4M3", "E5M2"):
        sub, low, high = format_range(name)
        shift = top - np.log2(high)          # per-tensor scale: amax lands on the format's max
        spans.append((_("{format} (scaled)").format(format=name), sub, low, high, shift))
    ymax = ax.get_ylim()[1]
    for k, (name, sub, low, high, shift) in enumerate(spans):
        y = ymax * (0.95 - 0.08 * k)
        ax.plot([np.log2(sub) + shift, np.log2(low) + shift], [y, y], ":", color=f"C{k}", lw=2)
        ax.plot([np.log2(low) + shift, min(np.log2(high) + shift, top + 8)], [y, y], "-",
                color=f"C{k}", lw=3,
                label=_("{format}: subnormal (dotted), normal (solid)").format(format=name))
    ax.set(title=_("Gradients dy after {steps} steps against each format's range").format(
               steps=probe.step),
           xlabel="log2 |dy|", ylabel=_("count"), xlim=(first - 2, top + 4))
    ax.legend(fontsize=7, loc="upper left")
    return fig


ABLATION = ["FP32"] + ["NVFP4, round-to-nearest", "NVFP4 + SR", "NVFP4 + SR + RHT",
                        "NVFP4 + SR + RHT + 2D", "NVFP4 + BF16 output head",
                        "NVFP4 (full recipe)", "MXFP4", "MXFP4 (full recipe)"]


def ablation_points(runs, labels=None) -> dict:
    """Per label: each seed's final validation loss minus BF16's of the same seed, and their
    mean (bits/byte): the paired differences the lecture's verdicts read."""
    check_result(runs, L.Runs, "run_all")
    labels = ABLATION if labels is None else labels
    base = L.finals(runs, "BF16")
    out = {}
    for label in labels:
        d = L.finals(runs, label) - base
        out[label] = {"diffs": d, "mean": float(d.mean())}
    return out


def plot_ablation(runs, fig=None) -> Figure:
    """Each recipe's final validation loss minus BF16's, seed by seed (points) and their mean
    with the range of the per-seed differences (whiskers), against zero (BF16)."""
    pts = ablation_points(runs)
    labels = list(pts)
    fig, ax = explorer_figure(fig, (10, 4.5))
    ax.axhline(0.0, color="0.5", lw=1, label=_("BF16"))
    for i, label in enumerate(labels):
        d = pts[label]["diffs"]
        m = pts[label]["mean"]
        ax.errorbar([i], [m], yerr=[[m - d.min()], [d.max() - m]], fmt="o", color="C0",
                    capsize=5, label=_("mean over seeds, range of the per-seed differences")
                    if i == 0 else None)
        ax.plot(np.full(len(d), i + 0.15), d, "x", color="C3",
                label=_("one seed") if i == 0 else None)
    ax.set_xticks(np.arange(len(labels)), [_(label).replace(" + ", "\n+ ") for label in labels],
                  fontsize=7)
    ax.set(title=_("Final validation loss minus BF16's, paired by seed"),
           xlabel=_("recipe"), ylabel=_("bits per byte, minus BF16"))
    ax.legend(fontsize=8, loc="best")
    return fig


# ------------------------------------------------------------------------------ widgets
#: The label each recipe of numfmt.torch.train.RECIPES has in the explorer (lecture 10's
#: catalog translates them).
RECIPE_NAMES = {"fp32": "FP32", "bf16": "BF16", "fp16": "FP16 + loss scaling",
                "fp8_delayed": "FP8 delayed", "fp8_current": "FP8 current",
                "fp8_blockwise": "FP8 blockwise (DeepSeek-V3)",
                "fp8_blockwise_pow2": "FP8 blockwise, power-of-two scales",
                "mxfp8_floor": "MXFP8, floor scales", "mxfp8_rceil": "MXFP8, RCEIL scales",
                "nvfp4": "NVFP4 + BF16 output head", "mxfp4": "MXFP4",
                "mxfp4_sr_rht": N_("MXFP4 + SR + RHT")}


@lru_cache(maxsize=1)
def _bf16_reference(steps: int):
    return train("bf16", TrainConfig(steps=steps, batch=L.BATCH, warmup=2, val_windows=8,
                                     eval_steps=()), L.MODEL)


@lru_cache(maxsize=1)
def _fp32_state(steps: int):
    """The FP32 model after ``steps`` steps, its last batch, and that batch's gradients in
    ``.grad``: what :func:`gradient_error` compares a recipe's dW against."""
    import copy
    keep = {}

    def grab(step, model, loss, batch):
        if step == steps - 1:
            # a deep copy of a Parameter leaves its .grad behind: keep the gradients apart
            keep["model"], keep["batch"] = copy.deepcopy(model), batch
            keep["grads"] = {n: p.grad.clone() for n, p in model.named_parameters()}
    train("fp32", TrainConfig(steps=steps, batch=L.BATCH, warmup=2, val_windows=8,
                              eval_steps=()), L.MODEL, probe=grab, capture=True)
    return keep["model"], keep["batch"], keep["grads"]


def gradient_error(recipe, steps: int | None = None) -> dict | None:
    """Relative error of ``recipe``'s and BF16's weight gradients against FP32's, on the
    FP32 model after ``steps`` steps and its last batch (fractions): a comparison without
    training noise. None for a recipe with delayed scaling (it needs an amax history)."""
    import copy

    from lectures.tinylm.probe import gradient_errors
    if any(s.scaling == "delayed" for g in ntt.GEMMS for s in getattr(recipe, g)):
        return None
    steps = EXPLORER_STEPS if steps is None else steps
    model, batch, grads = _fp32_state(steps)
    model = copy.deepcopy(model)
    for n, p in model.named_parameters():
        p.grad = grads[n].clone()
    scale = {"recipe": L.PROBE_SCALE} if recipe.loss_scaling else {}
    e = gradient_errors(model, batch,
                        {"recipe": recipe, "BF16": ntt.RECIPES["bf16"]}, scale)
    return {"recipe": e["recipe"]["error"], "bf16": e["BF16"]["error"]}


def explore(base: str = "fp8_current", x: str = "base", w: str = "base", dy: str = "base",
            sr: str = "base", rht: str = "base", steps: int | None = None) -> dict:
    """Train ``steps`` steps under :func:`custom_recipe` (``"base"`` keeps the base's choice)
    and return the recipe, the run and the BF16 run of the same seed and length."""
    def pick(v):
        return None if v == "base" else v
    flag = {"base": None, "on": True, "off": False}
    steps = EXPLORER_STEPS if steps is None else steps
    try:
        recipe = custom_recipe(base, pick(x), pick(w), pick(dy), flag[sr], flag[rht])
    except ValueError as err:
        return {"error": str(err), "recipe": None}
    cfg = TrainConfig(steps=steps, batch=L.BATCH, warmup=2, val_windows=8, eval_steps=())
    return {"error": None, "recipe": recipe, "run": train(recipe, cfg, L.MODEL),
            "bf16": _bf16_reference(steps), "dw_error": gradient_error(recipe, steps)}


def _draw_explore(s, fig=None):
    fig, ax = explorer_figure(fig, (9, 4))
    if s["error"]:
        ax.text(0.5, 0.5, invalid_reason(s["error"]), ha="center", va="center", wrap=True,
                fontsize=8)
        ax.set(title=_("This combination is not a valid recipe"), xlabel=_("step"),
               ylabel=_("bits per byte"))
        return fig
    for label, r in (("BF16", s["bf16"]), (_("your recipe"), s["run"])):
        ax.plot(np.arange(1, len(r.train_loss) + 1), r.train_loss,
                label=_("{recipe}: validation {loss:.3f}").format(recipe=label, loss=r.final_val))
    fprop, dy = s["recipe"].fprop, s["recipe"].wgrad[0]
    e = s.get("dw_error")
    probe = "" if e is None else "\n" + _(
        "dW error against FP32 on one batch: your recipe {mine:.2%}, BF16 {bf16:.2%}").format(
        mine=e["recipe"], bf16=e["bf16"])
    ax.set(title=f"x: {spec_label(fprop[0])}, w: {spec_label(fprop[1])}, "
                 f"dy: {spec_label(dy)}" + probe, xlabel=_("step"),
           ylabel=_("training loss, bits per byte"))
    ax.title.set_fontsize(8)
    ax.legend(fontsize=8)
    return fig


def recipe_explorer() -> Explorer:
    """Base recipe, element format of x, W and dy, SR and RHT on or off -> a short run's
    training loss against BF16 (each change trains one short run: a few seconds)."""
    # (label, value): the label is what the reader sees, the value what explore() is given
    fmts = [(_("base"), "base")] + [(f, f) for f in ("bf16", "e4m3", "e5m2", "e2m1")]
    flags = [(_("base"), "base"), (_("on"), "on"), (_("off"), "off")]
    controls = {
        "base": widgets.Dropdown(options=[(_(RECIPE_NAMES.get(k, k)), k) for k in ntt.RECIPES],
                                 value="fp8_current", description=_("recipe")),
        "x": widgets.Dropdown(options=fmts, value="base", description="x"),
        "w": widgets.Dropdown(options=fmts, value="base", description="W"),
        "dy": widgets.Dropdown(options=fmts, value="base", description="dy"),
        "sr": widgets.ToggleButtons(options=flags, value="base", description=_("SR on dy")),
        "rht": widgets.ToggleButtons(options=flags, value="base", description="RHT"),
    }
    return Explorer(_("Build a recipe and train it for a few steps"), controls, explore,
                    _draw_explore)
