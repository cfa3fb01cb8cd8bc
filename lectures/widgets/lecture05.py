"""Plots and widgets for notebook 05 (quantization basics).

Two kinds of public functions, both thin layers over lecture 05's experiment functions:

- ``plot_*(result)`` draws what a demo returned (``plot_clipping(L.demo2_clipping())``) and
  returns a ``matplotlib.figure.Figure``; nothing is recomputed.
- ``*_explorer()`` builds an :class:`Explorer`: ipywidgets controls whose callback calls the
  lecture's pure functions on a small sample (2^16 values, so a redraw takes well under a
  second), keeps what it computed in ``explorer.state`` and redraws one figure in place.
  pytest sets ``explorer.controls[name].value`` and reads ``explorer.state``.

Figures are built with ``matplotlib.figure.Figure`` rather than pyplot, so nothing is shown
twice and nothing leaks between redraws; a notebook displays a returned figure with the inline
backend, and an explorer puts its own into an ``ipywidgets.Output`` (outside IPython, as in
pytest, it only keeps it in ``explorer.figure``).
"""

from __future__ import annotations

import importlib
import re

import ipywidgets as widgets
import numpy as np
from matplotlib import ticker
from matplotlib.figure import Figure

from console.i18n import N_
from lectures.i18n import domain
from lectures.widgets.explorer import Explorer, check_result, explorer_figure, plain_log_ticks
from numfmt import FORMATS, SCALE_RULES, int_range, quantize_int, rel_error

L = importlib.import_module("lectures.05_quantization_basics")
_ = domain("lecture05").gettext

SAMPLE = 1 << 16                              #: values per widget sample (dB-per-bit explorer)
CLIP_SAMPLE = 1 << 18                         #: demo 2's sample size: the clip explorer's default
BLOCK_SAMPLE = 1 << 20                        #: demo 4's sample size: the block explorer's default
DEMO2_NU = 5.0                                #: demo 2's Student-t degrees of freedom
CLIP_GRID = tuple(np.geomspace(0.005, 1.0, 32))  #: clip ratios of the explorer's U-curve
GROUP_SIZES = (8, 16, 32, 64, 128, 256, 512)    #: the granularity explorer's group sizes
BLOCK_SIZES = (8, 16, 32, 64, 128, 256)         #: the block explorer's block sizes
# The menus' entries come from the lecture (and numfmt), so that a format, scale kind or
# granularity added there reaches the explorers: (label, value) pairs as ipywidgets takes them.
ELEMENTS = tuple((f"{f.name} (FP{f.bits})", f.name) for f in L.BLOCK_ELEMENTS)
SCALES = tuple((label, kind) for kind, label in L.SCALE_KINDS)
RULES = tuple(({"floor": N_("floor (OCP)"), "rceil": "RCEIL"}.get(r, r), r) for r in SCALE_RULES)
#: Demo 3's granularities without a group size, then one "per group" entry (its size a menu).
GRANULARITIES = tuple((label, gran) for label, gran, group in L.GRANULARITY if group is None) + (
    (N_("per group"), "group"),)
#: The distributions' names as the menu shows them (L.DISTRIBUTIONS, marked for translation).
_DISTRIBUTION_NAMES = (N_("Gaussian"), N_("Laplace"), N_("Student-t"))
DB_PER_BIT = 20 * np.log10(2)                 #: 6.02 dB: one bit halves the step


# ---------------------------------------------------------------------------------------------
# Small pure helpers
# ---------------------------------------------------------------------------------------------
def pareto_front(points) -> list:
    """Indices of the points no other point beats on both axes, ordered by the first axis.

    Parameters
    ----------
    points : sequence of (cost, error) pairs, e.g. (bits per element, relative error)

    Returns
    -------
    list of int
        Point i is kept unless some point j has ``cost_j <= cost_i`` and ``error_j <= error_i``
        with at least one strict (it is dominated). Ties keep the first.

    Raises
    ------
    ValueError
        If ``points`` is empty or a pair is not two finite numbers.
    """
    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[0] == 0 or pts.shape[1] != 2 or not np.isfinite(pts).all():
        raise ValueError("points must be a non-empty sequence of (cost, error) pairs of finite numbers")
    order = sorted(range(len(pts)), key=lambda i: (pts[i, 0], pts[i, 1]))
    front, best = [], np.inf
    for i in order:
        if pts[i, 1] < best:
            front.append(i)
            best = pts[i, 1]
    return front


def db_per_bit_intercept(sqnr, from_bits: int = 4) -> float:
    """Intercept a of the line ``a + 6.02 dB * bits`` fitted (least squares) to ``sqnr``.

    Only points with ``bits >= from_bits`` count: with two or three bits the uniform-noise
    model behind the 6.02 dB rule does not hold (lecture 05, demo 5).

    Parameters
    ----------
    sqnr : sequence of (bits, SQNR in dB)
    from_bits : int

    Raises
    ------
    ValueError
        If no point has ``bits >= from_bits``.
    """
    pts = [(b, s) for b, s in sqnr if b >= from_bits]
    if not pts:
        raise ValueError(f"no SQNR point with bits >= {from_bits}")
    return float(np.mean([s - DB_PER_BIT * b for b, s in pts]))


_plain_log = plain_log_ticks


def _check_sample(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1024 or n % 1024:
        raise ValueError(f"n must be a positive multiple of 1024 (64 rows, blocks up to 256), got {n!r}")
    return int(n)


def _distribution_controls() -> dict:
    dist = widgets.Dropdown(options=[(_(d), d) for d in L.DISTRIBUTIONS], value="Student-t",
                            description=_("distribution"))
    nu = widgets.FloatSlider(value=5.0, min=2.5, max=30.0, step=0.5,
                             description=_("ν (Student-t)"),
                             style={"description_width": "initial"})
    dist.observe(lambda ch: setattr(nu, "disabled", ch["new"] != "Student-t"), names="value")
    return {"distribution": dist, "nu": nu}


def _bits_slider(value: int = 4) -> widgets.IntSlider:
    return widgets.IntSlider(value=value, min=2, max=8, description=_("bits"))


# ---------------------------------------------------------------------------------------------
# Demo 1: affine quantization
# ---------------------------------------------------------------------------------------------
def plot_affine(r) -> Figure:
    """Codes used and relative error of symmetric INT8 against asymmetric UINT8 on ReLU outputs.

    Parameters
    ----------
    r : AffineResult from ``L.demo1_affine_and_integer_matmul()``

    Raises
    ------
    TypeError
        If ``r`` is not an AffineResult.
    """
    check_result(r, L.AffineResult, "demo1_affine_and_integer_matmul")
    keys, names = ("symmetric", "asymmetric"), (_("symmetric INT8"), _("asymmetric UINT8"))
    fig = Figure(figsize=(9, 3.4), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    ax1.bar(names, [256] * 2, color="0.85", label=_("codes the format has (2^8)"))
    ax1.bar(names, [r.codes_used[k] for k in keys], color=["C0", "C1"],
            label=_("codes the data uses"))
    # headroom above the bars for the legend (and below, the error's labels): nothing overprints
    ax1.set(title=_("Codes used on ReLU outputs (8 bits)"), ylabel=_("number of codes"),
            xlabel=_("scheme"), ylim=(0, 256 * 1.4))
    ax1.legend(loc="upper center", fontsize=8)
    errs = [r.errors[k] * 100 for k in keys]
    ax2.bar(names, errs, color=["C0", "C1"], label=_("relative error ||q − x|| / ||x||"))
    for i, e in enumerate(errs):
        ax2.annotate(f"{e:.3f}%", (i, e), xytext=(0, 2), textcoords="offset points",
                     ha="center", va="bottom")
    ax2.set(title=_("Error: same bits, twice the codes"), ylabel=_("relative error (%)"),
            xlabel=_("scheme"), ylim=(0, max(errs) * 1.4))
    ax2.legend(loc="upper center", fontsize=8)
    return fig


# ---------------------------------------------------------------------------------------------
# Demo 2: clipping
# ---------------------------------------------------------------------------------------------
def plot_clipping(r) -> Figure:
    """Demo 2's U-curves: relative error against clip ratio c for each distribution, optimum marked.

    Parameters
    ----------
    r : ClipResult from ``L.demo2_clipping()``

    Raises
    ------
    TypeError
        If ``r`` is not a ClipResult.
    """
    check_result(r, L.ClipResult, "demo2_clipping")
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.subplots()
    for i, (name, errs) in enumerate(r.errors.items()):
        c_best, e_best, _error, sigma = r.best[name]
        ax.plot(r.clips, np.array(errs) * 100, "o-", color=f"C{i}", ms=4,
                label=_("{name} (max/σ = {ratio:.1f})").format(name=_(name),
                                                               ratio=r.max_over_std[name]))
        ax.plot(c_best, e_best * 100, "*", color=f"C{i}", ms=16, mec="k",
                label=_("  best c = {c:g}: clip at {sigma:.1f}σ, {error:.1f}%").format(
                    c=c_best, sigma=sigma, error=e_best * 100))
    ax.set_xscale("log")
    _plain_log(ax.xaxis)
    ax.set(title=_("INT4 symmetric: relative error against clip ratio (range c · max|x|)"),
           xlabel=_("clip ratio c (fraction of max|x| kept, log scale)"),
           ylabel=_("relative error (%)"))
    ax.legend(fontsize=8)
    return fig


def clip_explorer(n: int = CLIP_SAMPLE, seed: int = 0) -> Explorer:
    """Bits, clip ratio and distribution: the grid over a histogram, and the U-curve.

    With the defaults the data are demo 2's own (``L.clip_data(n, seed)``: the same values as
    the table above it) whenever the distribution is one of demo 2's (Gaussian, Laplace,
    Student-t with ν = 5); another ν draws ``L.sample_distribution(..., n, nu, seed)``. On a
    heavy tail the sample maximum, and with it the best clip, depends on the sample, so a
    fresh draw differs from the table. ``state`` holds ``z`` (the sample, float64 (n,)),
    ``source`` ("demo 2" or "fresh draw"), ``point`` (``L.ClipPoint`` at the chosen bits and
    clip), ``clips`` and ``curve`` (relative error per clip ratio of CLIP_GRID at the chosen
    bits) and ``best_clip``, ``best_error`` (the curve's minimum).

    Raises
    ------
    ValueError
        If ``n`` is not a positive multiple of 1024.
    """
    n = _check_sample(n)
    controls = _distribution_controls()
    controls["bits"] = _bits_slider()
    controls["clip"] = widgets.FloatSlider(value=1.0, min=0.01, max=1.0, step=0.01,
                                           description=_("clip ratio c"))

    demo = dict(zip(L.DISTRIBUTIONS, L.clip_data(n, seed).values()))  # in the same order
    hists = {}   # id of a sample -> its histogram (241 bins on [-max|x|, max|x|], density)
    fresh = {}   # (distribution, nu, bits) -> curve of a fresh draw (at most 16 kept)

    def histogram(z):
        if id(z) not in hists:
            amax = float(np.abs(z).max())
            hists[id(z)] = np.histogram(z, bins=241, range=(-amax, amax), density=True)
        return hists[id(z)]

    # Demo 2's data at every bit width of the slider are computed here, once (about a second
    # at the default size), so that choosing a distribution or bits only redraws; a fresh
    # draw (another ν) is computed when it is asked for.
    bit_range = range(controls["bits"].min, controls["bits"].max + 1)
    demo_curves = {(d, b): L.clip_curve(z, b, CLIP_GRID) for d, z in demo.items()
                   for b in bit_range}
    for z in demo.values():
        histogram(z)
    draws = {}   # (distribution, nu) -> a fresh sample (at most 4 kept)

    def compute(distribution, nu, bits, clip):
        if distribution != "Student-t" or nu == DEMO2_NU:
            z, source = demo[distribution], N_("demo 2")
            curve = demo_curves.get((distribution, bits))
            if curve is None:  # a bit width outside the slider, set from code
                curve = L.clip_curve(z, bits, CLIP_GRID)
        else:
            source = N_("fresh draw")
            if (distribution, nu) not in draws:
                if len(draws) >= 4:
                    for old in draws.values():
                        hists.pop(id(old), None)
                    draws.clear()
                draws[distribution, nu] = L.sample_distribution(distribution, n, nu, seed)
            z = draws[distribution, nu]
            key = (distribution, nu, bits)
            if key not in fresh:
                if len(fresh) >= 16:
                    fresh.clear()
                fresh[key] = L.clip_curve(z, bits, CLIP_GRID)
            curve = fresh[key]
        hist = histogram(z)
        i = int(np.argmin(curve))
        return dict(distribution=distribution, nu=nu, bits=bits, clip=clip, z=z, source=source,
                    hist=hist,
                    point=L.clip_point(z, bits, clip), clips=CLIP_GRID, curve=curve,
                    best_clip=CLIP_GRID[i], best_error=curve[i])

    return Explorer(_("Clipping: the grid, the clipped mass and the U-curve"), controls,
                    compute, _draw_clip, rows=[["distribution", "nu"], ["bits", "clip"]])


def _dist_label(s: dict) -> str:
    if s["distribution"] == "Student-t":
        return _("Student-t (ν = {nu:g})").format(nu=s["nu"])
    return _(s["distribution"])


def _draw_clip(s: dict, fig: Figure | None = None) -> Figure:
    z, p = s["z"], s["point"]
    amax = float(np.abs(z).max())
    fig, (ax1, ax2) = explorer_figure(fig, (11, 4), 1, 2, width_ratios=(3, 2))
    counts, edges = s["hist"]  # np.histogram of z, 241 bins on [-amax, amax], density
    ax1.stairs(counts, edges, fill=True, color="0.6", label=_("data"))
    ax1.vlines(p.levels, 0, 1, transform=ax1.get_xaxis_transform(), colors="C0", lw=0.5,
               alpha=0.7, label=_("grid: {levels} levels ({side} per side)").format(
                   levels=len(p.levels), side=len(p.levels) // 2))
    for lo, hi in ((-amax, -p.threshold), (p.threshold, amax)):
        ax1.axvspan(lo, hi, color="C3", alpha=0.15, lw=0,
                    label=_("clipped: {share:.3f}% of values").format(share=p.clipped * 100)
                    if lo < 0 else None)
    ax1.set_yscale("log")
    # 5+ decades: decade ticks, plain numbers (minor ticks and mathtext were half of a redraw)
    ax1.yaxis.set_minor_locator(ticker.NullLocator())
    ax1.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax1.set(title=_("{distribution} ({source}), INT{bits}, clip at {clip:.2f} · max: error "
                    "{error:.2f}%").format(distribution=_dist_label(s), source=_(s["source"]),
                                           bits=s["bits"], clip=s["clip"], error=p.error * 100),
            xlabel=_("value (units of the distribution's scale)"),
            ylabel=_("density (log scale)"))
    ax1.legend(fontsize=8, loc="upper right")
    ax2.plot(s["clips"], np.array(s["curve"]) * 100, "-", color="C0", label=f"INT{s['bits']}")
    ax2.plot(s["clip"], p.error * 100, "o", color="C3", ms=8,
             label=_("your c = {clip:.2f}").format(clip=s["clip"]))
    ax2.plot(s["best_clip"], s["best_error"] * 100, "*", color="C2", ms=15, mec="k",
             label=_("best c ≈ {clip:.3f}: {error:.2f}%").format(clip=s["best_clip"],
                                                                 error=s["best_error"] * 100))
    ax2.set_xscale("log")
    _plain_log(ax2.xaxis)
    ax2.set(title=_("U-curve: error against clip ratio"), xlabel=_("clip ratio c (log scale)"),
            ylabel=_("relative error (%)"))
    ax2.legend(fontsize=8)
    return fig


# ---------------------------------------------------------------------------------------------
# Demo 3: granularity
# ---------------------------------------------------------------------------------------------
def plot_granularity(r) -> Figure:
    """Demo 3's errors per granularity as bars (log scale), with each scheme's extra bits.

    Parameters
    ----------
    r : GranularityResult from ``L.demo3_granularity()``

    Raises
    ------
    TypeError
        If ``r`` is not a GranularityResult.
    """
    check_result(r, L.GranularityResult, "demo3_granularity")
    names = {"W": _("W: row scales differ"), "A": _("A: 8 outlier channels")}
    ticks = [_("{granularity}\n+{bits:.3g} bit/elem").format(granularity=_(g), bits=x)
             for g, x in zip(r.labels, r.extra_bits)]
    fig = Figure(figsize=(11, 4), layout="constrained")
    for ax, m in zip(fig.subplots(1, 2, sharey=True), ("W", "A")):
        pos = np.arange(len(r.labels))
        for j, bits in enumerate((8, 4)):
            errs = [r.errors[(m, bits, g)] * 100 for g in r.labels]
            ax.bar(pos + (j - 0.5) * 0.4, errs, 0.4, color=f"C{j}", label=f"INT{bits}")
        ax.set_xticks(pos, ticks, fontsize=8)
        ax.set_yscale("log")
        _plain_log(ax.yaxis)
        ax.set(title=names[m],
               xlabel=_("granularity (extra bits per element: one FP16 scale each)"),
               ylabel=_("relative error (%, log scale)"))
        ax.legend()
    fig.suptitle(_("One scale per tensor, row or group: error against scale overhead"))
    return fig


def granularity_explorer(seed: int = 1, rows: int = 64) -> Explorer:
    """Matrix, bits, granularity and group size: errors of all three schemes, and one row's ranges.

    Uses the first ``rows`` rows of demo 3's matrices (all 4096 channels, so A keeps its outlier
    channels). ``state`` holds ``labels``, ``extra_bits`` and ``errors`` (fractions) for per
    tensor, per row and groups of the chosen size, ``selected`` (index of the chosen scheme),
    ``row`` (|M[0]|, float64 (4096,)) and ``ranges`` (qmax · scale of each element of row 0 under
    the chosen scheme, float64 (4096,)).

    Raises
    ------
    ValueError
        If ``rows`` is not a positive integer.
    """
    if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 1:
        raise ValueError(f"rows must be a positive integer, got {rows!r}")
    data = {k: M[:rows] for k, M in L.granularity_data(seed).items()}
    k = data["W"].shape[-1]
    controls = {
        "matrix": widgets.Dropdown(options=((_("W: row scales differ"), "W"),
                                            (_("A: 8 outlier channels"), "A")), value="A",
                                   description=_("matrix")),
        "bits": _bits_slider(),
        "granularity": widgets.ToggleButtons(options=[(_(g), v) for g, v in GRANULARITIES],
                                             value="group", description=_("granularity")),
        "group": widgets.Dropdown(options=GROUP_SIZES, value=32, description=_("group size")),
    }
    controls["granularity"].observe(
        lambda ch: setattr(controls["group"], "disabled", ch["new"] != "group"), names="value")

    def compute(matrix, bits, granularity, group):
        M = data[matrix]                                            # (rows, 4096)
        schemes = tuple((_(label), gran, None) for label, gran in GRANULARITIES[:-1]) + (
            (_("groups of {group}").format(group=group), "group", group),)
        qmax = int_range(bits)[1]
        g = group if granularity == "group" else None
        scale = quantize_int(M[:1] if granularity != "tensor" else M, bits,
                             granularity=granularity, group=g).scale
        ranges = np.broadcast_to(qmax * scale[0].reshape(-1, 1), (scale[0].size, k // scale[0].size))
        return dict(matrix=matrix, bits=bits, labels=[s[0] for s in schemes],
                    extra_bits=[L.scale_overhead_bits(gr, gs, k) for _, gr, gs in schemes],
                    errors=[L.granularity_error(M, bits, gr, gs) for _, gr, gs in schemes],
                    selected=[s[1] for s in schemes].index(granularity),
                    row=np.abs(M[0]), ranges=ranges.ravel())

    return Explorer(_("Granularity: one scale per tensor, row or group"), controls,
                    compute, _draw_granularity, rows=[["matrix", "bits", "group"], ["granularity"]])


def _draw_granularity(s: dict, fig: Figure | None = None) -> Figure:
    fig, (ax1, ax2) = explorer_figure(fig, (11, 4), 1, 2, width_ratios=(2, 3))
    errs = np.array(s["errors"]) * 100
    colors = ["C1" if i == s["selected"] else "C0" for i in range(len(errs))]
    ax1.bar(range(len(errs)), errs, color=colors,
            label=_("INT{bits} (chosen scheme in orange)").format(bits=s["bits"]))
    for i, (e, x) in enumerate(zip(errs, s["extra_bits"])):
        ax1.annotate(_("{error:.2f}%\n+{bits:.3g} bit").format(error=e, bits=x), (i, e),
                     ha="center", va="bottom", fontsize=8)
    ax1.set_xticks(range(len(errs)), s["labels"])
    ax1.set_ylim(0, errs.max() * 1.3)
    # No numbers on the y axis: each bar carries its error, and labels whose width follows the
    # largest error (0.5 … 60 %) made every change of bits or matrix run the layout solver.
    ax1.set_yticks([])
    ax1.set(title=_("{matrix}: relative error, INT{bits}").format(matrix=s["matrix"],
                                                                  bits=s["bits"]),
            xlabel=_("granularity (extra bits per element above the bars)"),
            ylabel=_("relative error (%)"))
    ax1.legend(fontsize=8, loc="upper right")
    ch = np.arange(s["row"].size)
    ax2.plot(ch, s["row"], ".", ms=2, color="0.5", label=f"|{s['matrix']}[0, k]|")
    ax2.plot(ch, s["ranges"], "-", color="C1", lw=1.2,
             label=_("range of its scale (qmax · scale), {scheme}").format(
                 scheme=s["labels"][s["selected"]]))
    ax2.set_yscale("log")
    # Seven decades: one plain label per decade (1, 2 and 5 per decade made 18 labels, a fifth
    # of every redraw and of every layout pass), no minor ticks.
    ax2.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0,)))
    ax2.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax2.yaxis.set_minor_locator(ticker.NullLocator())
    ax2.set(title=_("Row 0: each value against the range of its scale"),
            xlabel=_("channel k"), ylabel=_("magnitude (log scale)"))
    ax2.legend(fontsize=8, loc="lower right")
    return fig


# ---------------------------------------------------------------------------------------------
# Demo 4: block-scaled formats
# ---------------------------------------------------------------------------------------------
def _short(label: str) -> str:
    """'MXFP6 (E2M3, 32 per E8M0 scale)' -> 'MXFP6 E2M3'; 'INT4, groups of 32 (FP16 scale)' ->
    'INT4, groups of 32' (the translated labels, with full-width brackets and commas, alike)."""
    m = re.match(r"(.*?) ?[(（](.*)", label)
    if m is None:
        return label
    name, rest = m.groups()
    return f"{name} {re.split('[,，]', rest)[0]}" if name.startswith("MX") else name


def _draw_front(ax, labels, bits, errs, front) -> None:
    """Points (bits, error) labelled with ``labels`` (None: no label), the front joined."""
    ax.plot(bits, np.array(errs) * 100, "o", color="C0", label=_("format"))
    fb = [bits[i] for i in front]
    fe = [errs[i] * 100 for i in front]
    ax.plot(fb, fe, "--", color="C2", lw=1.5,
            label=_("Pareto front (nothing is both cheaper and better)"))
    ax.plot(fb, fe, "o", color="C2")
    for i, label in enumerate(labels):
        if label is None:
            continue
        # Of two close points, the lower one's label goes below, so that they do not overlap.
        below = any(abs(bits[j] - bits[i]) <= 0.3 and errs[i] < errs[j] < 1.3 * errs[i]
                    for j in range(len(bits)))
        ax.annotate(_short(_(label)), (bits[i], errs[i] * 100), xytext=(6, -10 if below else 4),
                    textcoords="offset points", fontsize=7)
    ax.set_yscale("log")
    _plain_log(ax.yaxis)
    ax.set(xlabel=_("bits per element (element + scale bits / block)"),
           ylabel=_("relative error (%, log scale)"))


def plot_block_formats(r) -> Figure:
    """Demo 4: relative error against bits per element for every format, Pareto front drawn;
    and the MXFP4-to-NVFP4 ablation (block size against scale format).

    Parameters
    ----------
    r : BlockFormatResult from ``L.demo4_block_formats()``

    Raises
    ------
    TypeError
        If ``r`` is not a BlockFormatResult.
    """
    check_result(r, L.BlockFormatResult, "demo4_block_formats")
    labels, bits, errs, _clipped = zip(*r.formats)
    fig = Figure(figsize=(12, 4.6), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2, width_ratios=(3, 2))
    _draw_front(ax1, labels, bits, errs, pareto_front(list(zip(bits, errs))))
    ax1.set_xlim(3.7, 10.5)
    ax1.set_title(_("Student-t(5) weights: error against storage cost"))
    ax1.legend(fontsize=8, loc="upper right")
    pos = np.arange(len(L.SCALE_KINDS))
    for j, block in enumerate((32, 16)):
        ax2.bar(pos + (j - 0.5) * 0.4,
                [r.ablation[(block, k)][0] * 100 for k, _n in L.SCALE_KINDS],
                0.4, color=f"C{j}", label=_("blocks of {block}").format(block=block))
    ax2.set_xticks(pos, [_(name) for _k, name in L.SCALE_KINDS], fontsize=8)
    ax2.set(title=_("E2M1 elements: block size against scale format"),
            xlabel=_("scale format"), ylabel=_("relative error (%)"))
    ax2.legend()
    return fig


def block_explorer(n: int = BLOCK_SAMPLE, seed: int = 0) -> Explorer:
    """Element format, block size, scale format and rule: your format among demo 4's.

    The data are ``L.student_t_weights(n, seed)``, by default demo 4's own 2^20 values, so the
    reference formats are the table's (a smaller sample has a smaller maximum, which flatters
    one-scale-per-tensor formats such as INT8). ``rule`` is the E8M0 exponent rule ("floor",
    OCP; "rceil", rounded up) and applies to the E8M0 scale only. ``state`` holds ``bits`` (per
    element), ``error`` (fraction), ``clipped`` (fraction of elements saturated), and
    ``ref_labels``, ``ref_bits``, ``ref_errors``, ``front`` for the reference formats.

    Raises
    ------
    ValueError
        If ``n`` is not a positive multiple of 1024.
    """
    x = L.student_t_weights(_check_sample(n), seed)
    ref_labels, ref_bits, ref_errors = [], [], []
    for label, _quantizer in L.FORMAT_ROWS:
        q, bits = L.quantize_row(label, x)
        ref_labels.append(label)
        ref_bits.append(bits)
        ref_errors.append(rel_error(q, x))
    controls = {
        "element": widgets.Dropdown(options=ELEMENTS, value="E2M1", description=_("element")),
        "block": widgets.Dropdown(options=BLOCK_SIZES, value=32, description=_("block size")),
        "scale": widgets.ToggleButtons(options=[(_(k), v) for k, v in SCALES], value="e8m0",
                                       description=_("scale"), style={"button_width": "auto"}),
        "rule": widgets.ToggleButtons(options=[(_(k), v) for k, v in RULES], value="floor",
                                      description=_("E8M0 rule")),
    }
    controls["scale"].observe(lambda ch: setattr(controls["rule"], "disabled", ch["new"] != "e8m0"),
                              names="value")

    def compute(element, block, scale, rule):
        rule = rule if scale == "e8m0" else "floor"
        bits, err, clipped = L.block_format_point(x, FORMATS[element], block, scale, rule)
        # Yours first: on a tie with a reference format, pareto_front keeps yours.
        front = pareto_front([(bits, err)] + list(zip(ref_bits, ref_errors)))
        return dict(element=element, block=block, scale=scale, rule=rule, bits=bits, error=err,
                    clipped=clipped, on_front=0 in front, ref_labels=ref_labels,
                    ref_bits=ref_bits, ref_errors=ref_errors, front=front)

    return Explorer(_("Block-scaled formats: element, block size, scale format"), controls,
                    compute, _draw_block, rows=[["element", "block"], ["scale"], ["rule"]])


def _draw_block(s: dict, fig: Figure | None = None) -> Figure:
    fig, ax = explorer_figure(fig, (10, 4.4))
    _draw_front(ax, [None] + s["ref_labels"], [s["bits"]] + s["ref_bits"],
                [s["error"]] + s["ref_errors"], s["front"])
    scale = s["scale"] + (f" ({s['rule']})" if s["scale"] == "e8m0" else "")
    ax.plot(s["bits"], s["error"] * 100, "*", color="C3", ms=18, mec="k",
            label=_("yours: {element}, blocks of {block}, {scale} scale: {bits:g} bits, "
                    "{error:.2f}%, clipped {clipped:.2f}%").format(
                element=s["element"], block=s["block"], scale=scale, bits=s["bits"],
                error=s["error"] * 100, clipped=s["clipped"] * 100))
    ax.set_title(_("Student-t(5) weights: your format is on the Pareto front") if s["on_front"]
                 else _("Student-t(5) weights: your format is off the Pareto front"))
    ax.legend(fontsize=8, loc="upper right")
    return fig


# ---------------------------------------------------------------------------------------------
# Demo 5: error propagation and dB per bit
# ---------------------------------------------------------------------------------------------
def plot_propagation(r) -> Figure:
    """Demo 5: weight relative error against output relative error (with y = x), and SQNR
    against bit width with the 6.02 dB-per-bit line.

    Parameters
    ----------
    r : PropagationResult from ``L.demo5_error_propagation()``

    Raises
    ------
    TypeError
        If ``r`` is not a PropagationResult.
    """
    check_result(r, L.PropagationResult, "demo5_error_propagation")
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    ew = np.array([w for _, w, _ in r.rows]) * 100
    lim = (ew.min() / 2, ew.max() * 2)
    ax1.plot(lim, lim, "--", color="0.5", label=_("output error = weight error"))
    for i, (label, w, y) in enumerate(r.rows):
        ax1.plot(w * 100, y * 100, "o", color=f"C{i}", ms=8,
                 label=_("{label}: {weight:.2f}% → {output:.2f}%").format(
                     label=_(label), weight=w * 100, output=y * 100))
    ax1.set(xscale="log", yscale="log")
    _plain_log(ax1.xaxis)
    _plain_log(ax1.yaxis)
    ax1.set(title=_("Y = W·X: a relative error passes through"),
            xlabel=_("relative error of W (%, log scale)"),
            ylabel=_("relative error of Y (%, log scale)"))
    ax1.legend(fontsize=8)
    _draw_sqnr(ax2, r.sqnr, _("INT2 … INT8 per row, Gaussian"))
    return fig


def _draw_sqnr(ax, sqnr, label: str) -> None:
    b = np.array([x for x, _ in sqnr])
    s = np.array([y for _, y in sqnr])
    a = db_per_bit_intercept(sqnr)
    ax.plot(b, a + DB_PER_BIT * b, "--", color="0.5",
            label=_("{db:.2f} dB per bit (fitted to 4 … 8 bits)").format(db=DB_PER_BIT))
    ax.plot(b, s, "o-", color="C0", label=label)
    ax.set(title=_("SQNR against bit width"), xlabel=_("bits per element"), ylabel="SQNR (dB)")
    ax.legend(fontsize=8)


def sqnr_explorer(n: int = SAMPLE, seed: int = 0) -> Explorer:
    """Distribution and granularity: SQNR of INT2 … INT8 against the 6.02 dB-per-bit line.

    The sample is reshaped to 64 rows. ``state`` holds ``sqnr`` (list of (bits, dB)),
    ``db_per_bit`` (the gains from one bit width to the next) and ``intercept`` (of the fitted
    6.02 dB-per-bit line).

    Raises
    ------
    ValueError
        If ``n`` is not a positive multiple of 1024.
    """
    n = _check_sample(n)
    controls = _distribution_controls()
    controls["granularity"] = widgets.ToggleButtons(
        options=((_("per tensor"), "tensor"), (_("per row"), "channel")), value="channel",
        description=_("granularity"))

    def compute(distribution, nu, granularity):
        z = L.sample_distribution(distribution, n, nu, seed).reshape(64, -1)   # (64, n / 64)
        sqnr = L.sqnr_by_bits(z, range(2, 9), granularity)
        return dict(distribution=distribution, nu=nu, granularity=granularity, sqnr=sqnr,
                    db_per_bit=[s1 - s0 for (_, s0), (_, s1) in zip(sqnr, sqnr[1:])],
                    intercept=db_per_bit_intercept(sqnr))

    def draw(s, fig=None):
        fig, ax = explorer_figure(fig, (7, 4))
        gran = _("per row") if s["granularity"] == "channel" else _("per tensor")
        _draw_sqnr(ax, s["sqnr"], _("{distribution}, {granularity}").format(
            distribution=_dist_label(s), granularity=gran))
        ax.set_title(_("SQNR against bit width: {db:.2f} dB per bit from 4 to 8 bits").format(
            db=np.mean(s["db_per_bit"][2:])))
        return fig

    return Explorer(_("dB per bit: SQNR against bit width"), controls, compute, draw,
                    rows=[["distribution", "nu"], ["granularity"]])
