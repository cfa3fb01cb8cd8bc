"""Choosing the clip range of a tensor before quantizing it: min-max, percentile, MSE, KL.

Each function returns a clip value T > 0 for symmetric quantization of ``x`` to ``[-T, T]``
(use it as ``quantize_int(x, bits, clip=T / max|x|)``, or as a static activation scale
``T / qmax``). Min-max is ``T = max|x|``; the others cut the tail to give the bulk a finer grid.

References
----------
Wu, Judd, Zhang, Isaev and Micikevicius, "Integer Quantization for Deep Learning Inference:
Principles and Empirical Evaluation", 2020 (arXiv 2004.09602), section 4.1 (max, percentile,
entropy and MSE calibration); Migacz, "8-bit Inference with TensorRT", GTC 2017 (the entropy
calibration algorithm); Nagel et al., "A White Paper on Neural Network Quantization", 2021,
section 3.5 (MSE range setting).
"""

from __future__ import annotations

import numpy as np

from numfmt._validate import as_calibration_array, check_bool, check_positive_int
from numfmt.intquant import _round_symmetric_into, int_range, quantize_int

from ._checks import check_fraction

__all__ = ["calibrate_kl", "calibrate_mse", "calibrate_percentile"]


#: Below this |x|, squared errors stay finite in float64; above it, they are taken relative to
#: max|x| (the same minimiser, without overflow).
_SQUARE_SAFE = 2.0**500


def _absmax(x) -> tuple[np.ndarray, float]:
    arr = as_calibration_array(x)
    return arr, float(np.abs(arr).max())


def calibrate_percentile(x, percentile: float = 99.99) -> float:
    """The nearest-rank ``percentile`` of ``|x|`` as the clip value.

    ``sorted(|x|)[ceil(percentile / 100 * (n - 1))]``: numpy's ``percentile(|x|, percentile,
    method="higher")``, and the upper end of :func:`numfmt.qat.calibrate_percentile` with the
    same ``percentile``, taken on ``|x|`` so that one value bounds both signs. The percentile is
    in percent, as in numpy and pytorch-quantization (``percentile=99.99``); a fraction such as
    0.9999 is refused rather than read as the 0.9999th percentile.

    Parameters
    ----------
    x : array_like of float, any shape, non-empty, finite
    percentile : float in [50, 100], default 99.99 (100 is min-max), in percent

    Returns
    -------
    float, >= 0 (0 only for an all-zero ``x``).

    Raises
    ------
    TypeError, ValueError
        If ``x`` is not a finite non-empty real array, or ``percentile`` is outside [50, 100]
        (below 50 the clip would cut more than half of ``|x|``: a fraction passed for a
        percent).
    """
    arr, _ = _absmax(x)
    p = check_fraction(percentile, "percentile", 0.0, 100.0, lo_open=True)
    if p < 50.0:
        raise ValueError(f"percentile is in percent, in [50, 100]; got {percentile!r}, which "
                         "would clip more than half of |x|. For the 99.99th percentile pass "
                         "99.99, not 0.9999")
    a = np.abs(arr).ravel()
    k = int(np.ceil(p / 100.0 * (a.size - 1)))
    return float(np.partition(a, k)[k])                   # sorted(a)[k], without the sort


def calibrate_mse(x, bits: int = 8, grid: int = 100, max_shrink: float = 0.8) -> float:
    """The clip value minimising the mean squared error of symmetric quantization of ``x``.

    Tries ``T = max|x| * (1 - k / grid)`` for ``k = 0 .. max_shrink * grid - 1`` and keeps the
    one with the smallest ``mean((quantize_int(x, bits, clip=T / max|x|) - x)^2)``; the first
    of equal errors wins.

    Parameters
    ----------
    x : array_like of float, any shape, non-empty, finite
    bits : int in [2, 16], default 8
    grid : int > 0, default 100
    max_shrink : float in [0, 1), default 0.8 (GPTQ's ``quant.py`` grid: 100 steps down to 0.2)

    Returns
    -------
    float, >= 0 (0 for an all-zero ``x``).

    Raises
    ------
    TypeError, ValueError
        As :func:`numfmt.quantize_int` for ``x`` and ``bits``; for ``grid`` not positive or
        ``max_shrink`` outside [0, 1).
    """
    arr, amax = _absmax(x)
    int_range(bits)
    grid = check_positive_int(grid, "grid")
    max_shrink = check_fraction(max_shrink, "max_shrink")
    if max_shrink >= 1.0:
        raise ValueError(f"max_shrink must be below 1, got {max_shrink!r}")
    if amax == 0:
        return 0.0
    qmax = int_range(bits)[1]
    best, best_err = amax, np.inf
    q = np.empty(arr.shape)
    for k in range(max(1, int(max_shrink * grid))):
        ratio = 1.0 - k / grid
        scale = amax * (ratio / qmax)                     # quantize_int's per-tensor scale
        if k == 0 or not (scale > 0 and np.isfinite(scale)):
            # quantize_int itself: it validates x once, and raises for a degenerate scale
            q = quantize_int(arr, bits, clip=ratio).values
        else:
            # quantize_int's steps in its order on the validated x: the same values
            _round_symmetric_into(arr, scale, qmax, q)
        err = np.mean((q - arr) ** 2) if amax < _SQUARE_SAFE else np.mean(((q - arr) / amax) ** 2)
        if err < best_err:
            best, best_err = amax * ratio, err
    return float(best)


KL_CONVENTIONS = ("migacz", "tensorrt")


def calibrate_kl(x, bits: int = 8, bins: int = 2048, *, convention: str = "migacz",
                 unsigned: bool = False) -> float:
    """Entropy calibration: the clip value whose quantized histogram of ``|x|`` has the
    smallest KL divergence from the clipped original.

    A histogram of ``|x|`` with ``bins`` bins of width ``w`` over [0, max|x|], and L levels:
    ``2^(bits-1)`` per sign, or ``2^bits`` with ``unsigned`` (non-negative data, such as a
    ReLU's output). For each candidate i: P is the first i bins with the mass beyond added to
    bin i-1 (what clipping at bin i does); Q merges the first i bins into L levels and spreads
    each level's mass evenly over its non-empty bins (what rounding to L levels does); the i
    of least ``KL(P || Q)``, each normalised, wins; a candidate where Q is 0 and P is not
    (infinite KL) never does. The two conventions differ in four details:

    ``"migacz"`` (default), the algorithm as published (Migacz 2017, slides 30-38):
        candidates i = L .. ``bins``; Q's level k holds bins ``floor(k i / L)`` to
        ``floor((k+1) i / L) - 1``; Q takes its masses from the histogram as it is; the first
        of equal minima wins; the clip is the centre of bin i, ``(i + 0.5) w``.
    ``"tensorrt"``, NVIDIA's entropy calibrator (TensorRT's pytorch-quantization,
        ``calib/histogram.py``, ``_compute_amax_entropy`` with its defaults ``stride=1``,
        ``start_bin=128``): candidates i = 128 .. ``bins``; level k starts at the first bin j
        with ``j >= linspace(0, i, L + 1)[k]`` (``np.digitize``, so ``ceil(k i / L)``); the
        histogram's first bin is replaced by its second (``bins[0] = bins[1]``: the spike at
        zero is discarded) in both P and Q; the last of equal minima wins; the clip is the
        left edge of bin i, ``i w``. The same histogram gives the same clip as that code.

    The KL curve has a sawtooth in ``i mod L``, so the two can choose clips tens of percent
    apart on the same data (up to 2x for ReLU outputs, where the zero spike decides).

    Parameters
    ----------
    x : array_like of float, any shape, non-empty, finite; ``>= 0`` if ``unsigned``
    bits : int in [2, 16], default 8 (L = 128 levels per sign, as TensorRT)
    bins : int >= L (``"migacz"``) or >= 128 (``"tensorrt"``), default 2048 (TensorRT's)
    convention : {"migacz", "tensorrt"}, keyword-only
    unsigned : bool, keyword-only, default False

    Returns
    -------
    float, >= 0 (0 for an all-zero ``x``).

    Raises
    ------
    TypeError, ValueError
        If ``x`` is not a finite non-empty real array (or has a negative value with
        ``unsigned``), ``bits`` is not in [2, 16], ``bins`` is too small, ``max|x| / bins``
        is below float64's smallest normal number, ``convention`` is unknown or ``unsigned``
        is not a bool.

    References
    ----------
    Migacz, GTC 2017, slides 30-38 ("entropy calibration"); Wu et al. 2020, section 4.1;
    github.com/NVIDIA/TensorRT, tools/pytorch-quantization/pytorch_quantization/calib/
    histogram.py.
    """
    arr, amax = _absmax(x)
    int_range(bits)
    unsigned = check_bool(unsigned, "unsigned")
    if convention not in KL_CONVENTIONS:
        raise ValueError(f"convention must be one of {KL_CONVENTIONS}, got {convention!r}")
    if unsigned and (arr < 0).any():
        raise ValueError(f"unsigned calibration needs x >= 0, got {float(arr.min())!r}; "
                         "calibrate |x| with unsigned=False for data of both signs")
    levels = 2 ** (bits - 1 + int(unsigned))
    bins = check_positive_int(bins, "bins")
    least = TRT_START_BIN if convention == "tensorrt" else levels
    if bins < least:
        raise ValueError(f"bins must be at least {least} for convention={convention!r} with "
                         f"{levels} levels, got {bins}")
    if amax == 0:
        return 0.0
    if not amax / bins >= np.finfo(np.float64).tiny:
        raise ValueError(f"max |x| = {amax:.3g} is too small for {bins} histogram bins: the "
                         "bin width would be below float64's smallest normal number; multiply "
                         "x by a power of two first")
    hist, edges = np.histogram(np.abs(arr), bins=bins, range=(0.0, amax))
    hist = hist.astype(np.float64)
    if convention == "tensorrt":
        return float(edges[_kl_tensorrt(hist, levels)])
    width = edges[1] - edges[0]
    tail = np.cumsum(hist[::-1])[::-1]                    # tail[i] = sum(hist[i:])
    best_i, best_kl = bins, np.inf
    k = np.arange(levels)
    for i in range(levels, bins + 1):
        p = hist[:i].copy()
        if i < bins:
            p[i - 1] += tail[i]
        starts = (k * i) // levels                        # level k's first bin
        nonzero = hist[:i] > 0
        mass = np.add.reduceat(hist[:i], starts)
        count = np.add.reduceat(nonzero.astype(np.float64), starts)
        lvl = np.repeat(k, np.diff(np.append(starts, i)))
        q = np.where(nonzero, mass[lvl] / np.maximum(count[lvl], 1.0), 0.0)
        if ((p > 0) & (q == 0)).any():                    # KL(P || Q) is infinite
            continue
        m = p > 0
        pn, qn = p[m] / p.sum(), q[m] / q.sum()
        kl = float(np.sum(pn * np.log(pn / qn)))
        if kl < best_kl:
            best_i, best_kl = i, kl
    with np.errstate(over="ignore"):                      # near float64's max: amax
        return float(min((best_i + 0.5) * width, amax))


#: pytorch-quantization's ``start_bin``: its first candidate clip is the edge of bin 128.
TRT_START_BIN = 128


def _kl_tensorrt(hist: np.ndarray, levels: int) -> int:
    """The bin index i whose left edge pytorch-quantization's ``_compute_amax_entropy``
    returns for histogram ``hist`` (float64 counts) and ``levels`` levels, stride 1."""
    h = hist.copy()
    h[0] = h[1]                                           # TensorRT drops the spike at zero
    n = h.size
    tail = np.cumsum(h[::-1])[::-1]
    best_i, best_kl, last_nan = n, np.inf, None
    for i in range(TRT_START_BIN, n + 1):
        lvl = np.digitize(np.arange(i), np.linspace(0, i, num=levels + 1)) - 1   # (i,)
        nonzero = h[:i] != 0
        mass = np.bincount(lvl[nonzero], weights=h[:i][nonzero], minlength=levels)
        count = np.bincount(lvl[nonzero], minlength=levels)
        dens = np.where(count > 0, mass / np.maximum(count, 1), 0.0)
        q = np.where(nonzero, dens[lvl], 0.0)
        p = h[:i].copy()
        if i < n:
            p[-1] += tail[i]
        if q.sum() == 0:              # every bin below i is empty: scipy's entropy gives NaN,
            last_nan = i              # and the reference's argmin picks the last NaN
            continue
        pn, qn = p / p.sum(), q / q.sum()                 # scipy.stats.entropy normalises
        if ((pn > 0) & (qn == 0)).any():
            continue                                      # infinite: never the minimum
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(pn > 0, pn * np.log(pn / qn), 0.0)
        kl = float(np.sum(terms))
        if kl <= best_kl:                                 # the last of equal minima
            best_i, best_kl = i, kl
    return best_i if last_nan is None else last_nan
