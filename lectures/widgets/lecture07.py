"""Plots and widgets for notebook 07 (weight storage).

A thin layer over lecture 07's demo functions:

- ``plot_*(result)`` draws what a demo returned (``plot_codebooks(L.demo2_codebooks())``) and
  returns a ``matplotlib.figure.Figure``; nothing is recomputed.
- ``storage_explorer()`` and ``marlin_explorer()`` build an :class:`Explorer`: ipywidgets
  controls whose callback calls the lecture's pure functions (``L.storage_tradeoff``,
  ``L.marlin_where``), keeps the result in ``explorer.state`` and redraws one figure.
  pytest sets ``explorer.controls[name].value`` and reads ``explorer.state``.
"""

from __future__ import annotations

import importlib

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from console.i18n import N_
from lectures.i18n import domain
from lectures.widgets.explorer import Explorer, check_result, explorer_figure
from numfmt.packing import marlin_int4_tile_map

L = importlib.import_module("lectures.07_weight_storage")
_ = domain("lecture07").gettext
N_("NF4 + double quant")      # the explorer's one format name with words (L.EXPLORER_FORMATS)

BLOCK_SIZES = (16, 32, 64, 128, 256)
DISTRIBUTIONS = (N_("Gaussian"), N_("Student-t"))
MARLIN_SHAPE = (32, 128)          #: (K, N) of the explorer's small INT4 matrix: 2 x 2 tiles


# ---------------------------------------------------------------------------------------------
# Demo 1: the storage bill
# ---------------------------------------------------------------------------------------------
def plot_storage_bill(r) -> Figure:
    """Stacked bars: bits per weight in element codes and in everything else (demo 1)."""
    check_result(r, L.BytesResult, "demo1_bytes")
    names = list(r.split)[::-1]
    elem = [r.split[k][0] for k in names]
    other = [r.split[k][1] for k in names]
    fig = Figure(figsize=(9, 4))
    ax = fig.add_subplot()
    ax.barh([_(k) for k in names], elem, label=_("element codes"))
    ax.barh([_(k) for k in names], other, left=elem,
            label=_("scales, zero points, indices"))
    ax.axvline(4, color="k", lw=0.8, ls="--", label=_("4 bits"))
    for i, k in enumerate(names):
        ax.text(elem[i] + other[i] + 0.15, i, f"{r.bits[k]:.3f}", va="center", fontsize=8)
    ax.set_xlabel(_("storage (bits per weight)"))
    ax.set_ylabel(_("storage format"))
    ax.set_xlim(0, 18)
    ax.set_title(_("What a 1024 x 1024 weight really costs"))
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------
# Demo 2: codebooks
# ---------------------------------------------------------------------------------------------
def plot_codebooks(r) -> Figure:
    """Left: weights / block absmax and the levels. Right: how often each code is used."""
    check_result(r, L.CodebookResult, "demo2_codebooks")
    fig = Figure(figsize=(11, 4.2))
    ax, ax2 = fig.subplots(1, 2)
    ax.hist(r.normalized_sample, bins=120, range=(-1, 1), density=True, color="0.8",
            label=_("weights / block absmax (first 8192)"))
    top = ax.get_ylim()[1]
    for i, (fmt, lv) in enumerate(r.levels.items()):
        y = top * (1.08 + 0.12 * i)
        ax.plot(lv, np.full(lv.size, y), "|", ms=11, mew=2, color=f"C{i}",
                label=_("{fmt} levels").format(fmt=fmt))
    ax.set_ylim(0, top * 1.75)
    ax.set_xlabel(_("weight / block absmax (dimensionless)"))
    ax.set_ylabel(_("density"))
    ax.set_title(_("Where the levels sit (blocks of 64)"))
    ax.legend(fontsize=8, loc="upper left", ncol=2)
    width = 0.28
    for i, (fmt, u) in enumerate(r.usage.items()):
        ax2.bar(np.arange(u.size) + (i - 1) * width, u * 100, width, color=f"C{i}",
                label=_("{fmt}: {bits:.2f} bits, {error:.2f}% error").format(
                    fmt=fmt, bits=r.entropy[fmt], error=r.errors[fmt] * 100))
    ax2.axhline(100 / 16, color="k", lw=0.8, ls="--", label=_("uniform use (1/16)"))
    ax2.set_xlabel(_("code (level index, ascending)"))
    ax2.set_ylabel(_("share of weights (%)"))
    ax2.set_title(_("How often each code is used"))
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return fig


def storage_explorer(seed: int = 0) -> Explorer:
    """Format, block size and distribution -> bits per weight and error, all formats for context.

    ``state`` holds ``chosen`` (the ``L.storage_tradeoff`` dict of the chosen format) and
    ``points`` (one such dict per format in ``L.EXPLORER_FORMATS`` at the same block size).
    """
    controls = {
        "fmt": widgets.Dropdown(options=[(_(f), f) for f in L.EXPLORER_FORMATS], value="NF4",
                                description=_("format")),
        "block": widgets.Dropdown(options=BLOCK_SIZES, value=64, description=_("block")),
        "distribution": widgets.Dropdown(options=[(_(d), d) for d in DISTRIBUTIONS],
                                         value="Gaussian", description=_("weights")),
    }

    def compute(fmt, block, distribution):
        points = [L.storage_tradeoff(f, block, distribution, seed=seed) for f in L.EXPLORER_FORMATS]
        chosen = next(p for p in points if p["format"] == fmt)
        return {"chosen": chosen, "points": points}

    return Explorer(_("Bits per weight against error"), controls, compute, _draw_storage)


def _draw_storage(s: dict, fig: Figure | None = None) -> Figure:
    fig, ax = explorer_figure(fig, (7, 4))
    for p in s["points"]:
        ax.plot(p["bits"], p["rel_error"] * 100, "o", ms=7, label=_(p["format"]))
    c = s["chosen"]
    ax.plot(c["bits"], c["rel_error"] * 100, "o", ms=16, mfc="none", mec="k", mew=1.5,
            label=_("chosen: {bits:.3f} bits, {error:.2f}%, {sqnr:.2f} dB").format(
                bits=c["bits"], error=c["rel_error"] * 100, sqnr=c["sqnr_db"]))
    ax.set_xlabel(_("storage (bits per weight)"))
    ax.set_ylabel(_("relative error (%)"))
    ax.set_title(_("{distribution} weights, blocks of {block} (MXFP4: E8M0 scales, NVFP4: E4M3 "
                   "scales)").format(distribution=_(c["distribution"]), block=c["block"]))
    ax.legend(fontsize=8)
    return fig


# ---------------------------------------------------------------------------------------------
# Demo 3: double quantization
# ---------------------------------------------------------------------------------------------
def plot_double_quant(r) -> Figure:
    """Left: the FP32 absmax values. Right: the worst weight change of each 8-bit scheme."""
    check_result(r, L.DoubleQuantResult, "demo3_double_quant")
    fig = Figure(figsize=(11, 4))
    ax, ax2 = fig.subplots(1, 2)
    ax.hist(r.absmax, bins=80, color="C0", label=_("absmax of each block of 64"))
    ax.axvline(float(np.mean(r.absmax)), color="k", ls="--", lw=0.8, label=_("mean (the offset)"))
    ax.set_xlim(0, None)
    ax.set_xlabel(_("block absmax (weight units)"))
    ax.set_ylabel(_("number of blocks"))
    ax.set_title(_("The scales sit in a narrow band far from 0"))
    ax.legend(fontsize=8)
    keys = [k for k, *_rest in L.DQ_SCHEMES]
    labels = [_(label).replace("DQ: ", "").replace("DQ：", "").replace(", ", ",\n")
              .replace("，", "，\n") for *_rest, label in L.DQ_SCHEMES]
    ax2.bar(labels, [r.max_weight_change[k] * 100 for k in keys],
            color=["C2" if r.max_weight_change[k] < 0.01 else "C3" for k in keys],
            label=_("worst weight change"))
    ax2.axhline(1.0, color="k", ls="--", lw=0.8, label=_("1% budget"))
    ax2.set_xlabel(_("second-level (8-bit) code for the absmax values"))
    ax2.set_ylabel(_("max |double - single| / |single| (%)"))
    ax2.set_title(_("8-bit scales: {single:.2f} -> {qlora:.3f} bits per weight").format(
        single=r.bits["single"], qlora=r.bits["qlora"]))
    ax2.tick_params(axis="x", labelsize=8)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------
# Demo 4: layouts
# ---------------------------------------------------------------------------------------------
def plot_act_order(r) -> Figure:
    """The group of each input row, in checkpoint (act-order) order and after the kernel's sort."""
    check_result(r, L.LayoutResult, "demo4_layouts")
    fig = Figure(figsize=(9, 3.5))
    ax = fig.add_subplot()
    rows = np.arange(r.g_idx.size)
    ax.plot(rows, r.g_idx, ".", ms=2, label=_("checkpoint order (act-order)"))
    ax.plot(rows, r.g_idx_sorted, "-", lw=2, label=_("sorted by g_idx"))
    ax.set_xlabel(_("input row k"))
    ax.set_ylabel(_("group index (groups of {size} rows)").format(size=r.group_size))
    ax.set_title(_("Act-order scatters each group over K; sorting makes groups contiguous"))
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def plot_marlin_tile(r) -> Figure:
    """The first 16 x 16 sub-tile of a Marlin INT4 tile: the thread that owns each weight.

    Word 0 (thread 0) is outlined, with its nibble lanes. The other three sub-tiles of the
    16 x 64 tile repeat the pattern; thread t's word for sub-tile j is 4 t + j.
    """
    check_result(r, L.LayoutResult, "demo4_layouts")
    sub = r.thread_map[:, :16]
    fig = Figure(figsize=(7.5, 6.2))
    ax = fig.add_subplot()
    im = ax.imshow(sub, cmap="viridis", interpolation="nearest")
    fig.colorbar(im, ax=ax, label=_("thread (0..31)"), shrink=0.8)
    for k in range(16):
        for n in range(16):
            ax.text(n, k, str(sub[k, n]), ha="center", va="center", fontsize=7,
                    color="w" if sub[k, n] < 16 else "k")
    for lane, (k, n) in enumerate(r.thread0):
        ax.add_patch(_square(n, k))
        ax.text(n + 0.42, k - 0.42, str(lane), ha="right", va="top", fontsize=6, color="C3")
    ax.plot([], [], "s", mfc="none", mec="C3", label=_("word 0 of thread 0 (small digits: lanes)"))
    ax.set_xticks(range(16))
    ax.set_yticks(range(16))
    ax.set_xlabel(_("n (output column)"))
    ax.set_ylabel(_("k (input row)"))
    ax.set_title(_("Marlin INT4: which thread owns each weight of a 16 x 16 sub-tile"))
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1))
    fig.tight_layout()
    return fig


def _square(x, y):
    from matplotlib.patches import Rectangle
    return Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, ec="C3", lw=2)


def marlin_explorer() -> Explorer:
    """Pick (k, n) of a 32 x 128 INT4 matrix; see its word, lane, thread and word-mates.

    ``state`` holds ``where`` (the ``L.marlin_where`` dict) and ``word_elements`` (the 8 (k, n)
    of the same 32-bit word, lane order, in matrix coordinates).
    """
    k_max, n_max = MARLIN_SHAPE
    controls = {
        "k": widgets.IntSlider(value=7, min=0, max=k_max - 1, description=_("k (row)")),
        "n": widgets.IntSlider(value=23, min=0, max=n_max - 1, description=_("n (column)")),
    }
    rows, cols = marlin_int4_tile_map()

    def compute(k, n):
        where = L.marlin_where(k, n, n_max)
        local = where["word"] % 128
        base_k, base_n = 16 * where["tile"][0], 64 * where["tile"][1]
        word_elements = [(base_k + int(a), base_n + int(b))
                         for a, b in zip(rows[local], cols[local])]
        return {"where": where, "word_elements": word_elements}

    return Explorer(_("Where does weight (k, n) land in Marlin's layout?"), controls, compute,
                    _draw_marlin)


def _draw_marlin(s: dict, fig: Figure | None = None) -> Figure:
    w = s["where"]
    kt, nt = w["tile"]
    rows, cols = marlin_int4_tile_map()
    threads = np.empty((16, 64), np.int64)
    threads[rows, cols] = (np.arange(128) // 4)[:, None]
    k0, n0 = 16 * kt, 64 * nt
    fig, ax = explorer_figure(fig, (12, 4))
    im = ax.imshow(threads, cmap="viridis", alpha=0.45, aspect="auto", interpolation="nearest",
                   extent=(n0 - 0.5, n0 + 63.5, k0 + 15.5, k0 - 0.5))
    if len(fig.axes) == 1:  # a reused figure keeps its colorbar: the same map, 0..31, each time
        fig.colorbar(im, ax=ax, label=_("thread owning the weight (0..31)"))
    for lane, (k, n) in enumerate(s["word_elements"]):
        ax.add_patch(_square(n, k))
        ax.text(n, k, str(lane), ha="center", va="center", fontsize=8, color="C3")
    ax.plot(w["n"], w["k"], "s", ms=11, mfc="none", mec="k", mew=2,
            label=_("({k}, {n}): packed row {row}, word {word}, lane {lane}, thread {thread}, "
                    "sub-tile {sub_tile}").format(**w))
    ax.plot([], [], "s", mfc="none", mec="C3",
            label=_("the 8 weights of that word (digits: lanes)"))
    for x in (16, 32, 48):
        ax.axvline(n0 + x - 0.5, color="k", lw=0.8)
    ax.set_xlabel(_("n (output column); lines: 16-column sub-tiles"))
    ax.set_ylabel(_("k (input row)"))
    ax.set_title(_("Tile ({kt}, {nt}) of a {rows} x {cols} INT4 matrix: rows {k0}..{k1}, "
                   "columns {n0}..{n1}").format(kt=kt, nt=nt, rows=MARLIN_SHAPE[0],
                                                cols=MARLIN_SHAPE[1], k0=k0, k1=k0 + 15,
                                                n0=n0, n1=n0 + 63))
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    return fig
