"""Plots and widgets for notebook 01 (number formats).

``plot_*(result)`` draws what a lecture 01 demo returned and returns a Figure; nothing is
recomputed. :func:`format_explorer` builds an :class:`~lectures.widgets.lecture05.Explorer`:
pick a format, type a number, and see its bits, neighbours and rounding error (computed by
``L.anatomy_of``) and where it sits on the grid. pytest sets ``explorer.controls[...].value``
and reads ``explorer.state``.
"""

from __future__ import annotations

import importlib

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from lectures.i18n import domain
from lectures.widgets.explorer import Explorer, check_result, explorer_figure
from numfmt import FORMATS

L = importlib.import_module("lectures.01_number_formats")
_ = domain("lecture01").gettext

ZOOM = 6  #: grid points shown on each side of the number in the explorer's zoomed panel


def plot_value_grids(r) -> Figure:
    """Every non-negative value of E2M1, E2M3, E3M2 and E4M3 on a number line, one row each.

    Parameters
    ----------
    r : GridResult from ``L.demo2_value_grids()``

    Raises
    ------
    TypeError
        If ``r`` is not a GridResult.
    """
    check_result(r, L.GridResult, "demo2_value_grids")
    fig = Figure(figsize=(11, 5), layout="constrained")
    axes = fig.subplots(len(r.grids), 1)
    for i, (ax, (name, g)) in enumerate(zip(axes, r.grids.items())):
        pos = g[g >= 0]
        ax.plot(pos, np.zeros_like(pos), "|", ms=18, color=f"C{i}",
                label=_("{name}: {n} values ≥ 0, max {max:g}").format(name=name, n=pos.size,
                                                                     max=pos[-1]))
        ax.set_yticks([])
        ax.set_ylabel(name)
        ax.legend(loc="upper left", fontsize=8)
    axes[-1].set_xlabel(_("value (dimensionless)"))
    fig.suptitle(_("The complete non-negative grids: the step doubles at every power of two"))
    return fig


def plot_relative_spacing(r) -> Figure:
    """Relative spacing (gap to the next value / value) against magnitude, log-log, per format.

    Parameters
    ----------
    r : SpacingResult from ``L.demo3_relative_spacing()``

    Raises
    ------
    TypeError
        If ``r`` is not a SpacingResult.
    """
    check_result(r, L.SpacingResult, "demo3_relative_spacing")
    fig = Figure(figsize=(11, 5), layout="constrained")
    ax = fig.subplots()
    for name in ("FP32", "BF16", "FP16", "E4M3", "E5M2", "E2M1"):
        ax.loglog(r.magnitudes[name], r.rel_spacing[name], lw=1, label=name)
    ax.set_xlabel(_("magnitude |x| (dimensionless)"))
    ax.set_ylabel(_("relative spacing ulp(x) / |x|"))
    ax.set_title(_("Flat sawtooth in the normal range, rising toward 1 in the subnormals"))
    ax.legend(ncol=2)
    return fig


def format_explorer(fmt: str = "E4M3", value: float = 0.3, saturate: bool = False) -> Explorer:
    """Pick a format and a number: its bits, neighbours, rounding error, and the grid around it.

    ``saturate`` (a checkbox) is the reader's choice: off, a value past the overflow midpoint
    becomes what the format makes of it (FP16 +Inf, E4M3 NaN), as in lecture 01 demo 4; on, it
    is clamped to the largest finite value. ``state`` holds ``fmt`` (name), ``value``,
    ``saturate``, ``anatomy`` (``L.Anatomy``), ``grid`` (every finite value, ascending) and
    ``window`` (the grid points drawn in the zoomed panel).

    Raises
    ------
    ValueError
        If ``fmt`` is not a format name of ``numfmt.FORMATS``.
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {sorted(FORMATS)}, got {fmt!r}")
    controls = {"fmt": widgets.Dropdown(options=list(FORMATS), value=fmt, description=_("format")),
                "value": widgets.FloatText(value=value, description=_("number")),
                "saturate": widgets.Checkbox(value=saturate, description=_("saturate"))}

    def compute(fmt, value, saturate):
        f = FORMATS[fmt]
        grid = f.values()
        a = L.anatomy_of(f, value, saturate=saturate)
        i = int(np.searchsorted(grid, value))
        window = grid[max(0, i - ZOOM):i + ZOOM]
        return dict(fmt=fmt, value=float(value), saturate=bool(saturate), anatomy=a, grid=grid,
                    window=window, summary=explorer_summary(a))

    return Explorer(_("Format explorer: bits, neighbours and rounding error"), controls, compute,
                    _draw_explorer)


def explorer_summary(a) -> str:
    """Two lines describing an ``L.Anatomy``: the fields, then stored value and error."""
    lower = f"{a.lower:.6g}" if np.isfinite(a.lower) else _("none below")
    upper = f"{a.upper:.6g}" if np.isfinite(a.upper) else _("none above")
    if np.isnan(a.stored):
        if a.overflow:
            why = _("{x:g} overflows to NaN (no Inf; tick saturate to clamp)").format(x=a.x)
        else:
            why = f"{a.x:g} NaN"
        return (_("{fmt}: bits {bits}  ({why})").format(fmt=a.fmt, bits=a.bits, why=why) + "\n"
                + _("finite neighbours {lower} … {upper}").format(lower=lower, upper=upper))
    if np.isinf(a.stored):
        return (_("{fmt}: bits {bits}  ({x:g} overflows to {stored:+g}; tick saturate to "
                  "clamp)").format(fmt=a.fmt, bits=a.bits, x=a.x, stored=a.stored) + "\n"
                + _("finite neighbours {lower} … {upper}").format(lower=lower, upper=upper))
    e = f"{a.rel_error * 100:.3g}%" if np.isfinite(a.rel_error) else "n/a"
    note = (_(" (overflow, saturated)") if a.saturated
            else _(" (subnormal)") if a.subnormal else "")
    return (_("{fmt}: bits {bits} = sign {sign}, exponent field {exponent}, mantissa field "
              "{mantissa}").format(fmt=a.fmt, bits=a.bits, sign=a.sign, exponent=a.exponent,
                                   mantissa=a.mantissa) + note + "\n"
            + _("{x:g} is stored as {stored:.8g}; neighbours {lower} … {upper}; error "
                "{abs_error:+.3g} ({rel})").format(x=a.x, stored=a.stored, lower=lower,
                                                   upper=upper, abs_error=a.abs_error, rel=e))


def _spaced_symlog_ticks(ax, linthresh: float, vmax: float, min_gap: float = 0.06) -> list:
    """Put the x ticks of symlog axes `ax` at 0 and ±10^k for k a multiple of the smallest step
    (1, 2, 3, 5, 10 or 20 decades) that keeps labels `min_gap` of the axis width apart, up to
    `vmax`: the default ticks put ±10^k inside the linear part around 0, where their labels
    overprint 0's. Returns the ticks."""
    lo, hi = ax.get_xlim()
    scale = ax.xaxis.get_transform()
    left, right = scale.transform([lo, hi])

    def where(v: float) -> float:                      # fraction of the axis width
        return float((scale.transform([v])[0] - left) / (right - left))

    zero = where(0.0)
    top, bottom = int(np.floor(np.log10(vmax))), int(np.floor(np.log10(linthresh)))
    for step in (1, 2, 3, 5, 10, 20):
        ks = [k for k in range(top, bottom - 1, -1)
              if k % step == 0 and where(10.0 ** k) - zero >= min_gap]
        if all(where(10.0 ** a) - where(10.0 ** b) >= min_gap for a, b in zip(ks, ks[1:])):
            break
    ticks = sorted([-(10.0 ** k) for k in ks] + [0.0] + [10.0 ** k for k in ks])
    ax.set_xticks(ticks)
    ax.set_xlim(lo, hi)
    return ticks


def _draw_explorer(s: dict, fig: Figure | None = None) -> Figure:
    a, grid, window = s["anatomy"], s["grid"], s["window"]
    fig, (ax1, ax2) = explorer_figure(fig, (11, 4), 2, 1)
    ax1.plot(grid, np.zeros_like(grid), "|", ms=12, color="0.5",
             label=_("{fmt}: all values").format(fmt=a.fmt))
    ax1.plot([a.x], [0], "v", color="C3", ms=9, label=f"x = {a.x:g}")
    ax1.set_xscale("symlog", linthresh=float(FORMATS[a.fmt].min_normal))
    _spaced_symlog_ticks(ax1, float(FORMATS[a.fmt].min_normal),
                         float(np.max(np.abs(grid[np.isfinite(grid)]))))
    ax1.set_xlabel(_("value (symmetric log scale)"))
    ax1.set_ylabel(_("whole grid"))
    ax1.set_yticks([])
    ax1.legend(loc="upper left", fontsize=8)
    ax2.plot(window, np.zeros_like(window), "|", ms=18, color="0.5", label=_("grid"))
    ax2.plot([a.x], [0], "v", color="C3", ms=10, label="x")
    if np.isfinite(a.stored):
        ax2.plot([a.stored], [0], "o", mfc="none", color="C0", ms=12, label=_("stored value"))
    ax2.set_xlabel(_("value (linear scale, nearby grid points)"))
    ax2.set_ylabel(_("zoom"))
    ax2.set_yticks([])
    ax2.legend(loc="upper left", fontsize=8)
    fig.suptitle(s["summary"], fontsize=9)
    return fig
