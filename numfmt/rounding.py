"""Rounding modes beyond round-to-nearest-even, and summation in a given format.

:func:`round_to_format` rounds onto a :class:`~numfmt.formats.FloatFormat` grid with a chosen
tie or direction rule, so the bias of each rule can be measured. :func:`sum_in_format` adds
numbers with every partial sum rounded to a format, sequentially, pairwise or with Kahan's
compensation, to show swamping in low-precision accumulators.

References: IEEE 754-2019 section 4.3 (rounding-direction attributes: roundTiesToEven,
roundTiesToAway, roundTowardZero); Higham, "Accuracy and Stability of Numerical Algorithms",
2nd ed., 2002, chapter 4 (summation: recursive, pairwise, compensated); Kahan, "Further
remarks on reducing truncation errors", CACM 8(1), 1965.
"""

from __future__ import annotations

import math

import numpy as np

from numfmt._validate import as_real_array
from numfmt.formats import FloatFormat

__all__ = ["ROUNDING_MODES", "SUM_METHODS", "round_to_format", "sum_in_format",
           "cumsum_in_format"]

ROUNDING_MODES = ("nearest_even", "half_away", "toward_zero", "stochastic")
SUM_METHODS = ("sequential", "pairwise", "kahan")


def _check_signed(fmt) -> FloatFormat:
    if not isinstance(fmt, FloatFormat):
        raise TypeError(f"fmt must be a FloatFormat such as FP16, got {fmt!r}")
    if not (fmt.signed and fmt.subnormals):
        raise ValueError(f"{fmt.name} has no sign bit or no zero; use a signed format")
    if fmt.man_bits > 24:
        # s + x in float64 is then no longer an innocuous double rounding (53 < 2p + 2).
        raise ValueError(f"{fmt.name} is wider than FP32; at most 24 mantissa bits")
    return fmt


def round_to_format(x, fmt: FloatFormat, mode: str = "nearest_even", rng=None) -> np.ndarray:
    """Round ``x`` onto ``fmt``'s grid with the rounding rule ``mode``, saturating at max_value.

    Parameters
    ----------
    x : array_like of real numbers, any shape
    fmt : FloatFormat, signed, at most 24 mantissa bits (FP32 and narrower)
    mode : {"nearest_even", "half_away", "toward_zero", "stochastic"}
        ``"nearest_even"``: nearest grid value, ties to the even mantissa (IEEE
        roundTiesToEven; ``fmt.round``). ``"half_away"``: nearest, ties away from zero
        (roundTiesToAway, the school rule). ``"toward_zero"``: truncation, the grid value
        next to ``x`` on the side of zero (roundTowardZero). ``"stochastic"``: down or up with
        probability given by the position between the two neighbours (``fmt.round``).
    rng : numpy.random.Generator or int or None
        Only for ``"stochastic"``.

    Returns
    -------
    ndarray of float64, the shape of ``x``
        Magnitudes beyond ``max_value`` saturate to ``+-max_value``; NaN stays NaN; the sign
        (and that of zero) is kept.

    Raises
    ------
    TypeError
        If ``x`` is not real-valued or ``fmt`` not a FloatFormat.
    ValueError
        If ``mode`` is unknown, or ``fmt`` is unsigned (E8M0) or wider than FP32.
    """
    fmt = _check_signed(fmt)
    if mode not in ROUNDING_MODES:
        raise ValueError(f"mode must be one of {ROUNDING_MODES}, got {mode!r}")
    x = as_real_array(x)
    if mode == "nearest_even":
        return fmt.round(x)
    if mode == "stochastic":
        return fmt.round(x, mode="stochastic", rng=rng)
    a = np.abs(x)
    finite = np.isfinite(a)
    safe = np.where(finite, a, 0.0)
    _, k = np.frexp(safe)
    quantum = np.ldexp(1.0, np.maximum(k - 1, fmt.emin) - fmt.man_bits)
    steps = safe / quantum  # exact: the quantum is a power of two
    low = np.floor(steps)
    if mode == "half_away":
        low += (steps - low) >= 0.5
    with np.errstate(over="ignore"):  # a carry past float64's max is inf and saturates below
        r = np.where(finite, low * quantum, a)  # a carry into the next binade stays on the grid
    r = np.minimum(r, fmt.max_value)        # NaN passes through np.minimum
    r = np.copysign(r, x)
    return r + 0.0 if fmt.specials == "fnuz" else r  # FNUZ formats have no -0


def sum_in_format(x, fmt: FloatFormat, method: str = "sequential") -> np.ndarray:
    """Sum ``x`` along axis 0 with every partial result rounded to nearest even in ``fmt``.

    Parameters
    ----------
    x : array_like of real numbers, shape (n, ...), n >= 1
        The terms, used as given. Round them to ``fmt`` first to model data stored in
        ``fmt``; for terms on ``fmt``'s grid every addition is exactly IEEE addition in ``fmt``
        (float64 then ``fmt.round`` is an innocuous double rounding for at most 24 mantissa
        bits). Trailing axes are independent sums computed side by side.
    fmt : FloatFormat, signed, at most 24 mantissa bits
        The accumulator format. Partial sums overflow to Inf (FP16, BF16, FP32) or NaN (E4M3)
        as the format does (``saturate=False``).
    method : {"sequential", "pairwise", "kahan"}
        ``"sequential"``: ``s = fl(s + x[i])`` in order (recursive summation; error bound grows
        like ``n u``). ``"pairwise"``: add neighbours in a balanced binary tree (bound
        ``log2(n) u``). ``"kahan"``: sequential with a running compensation term carrying
        each addition's rounding error into the next (bound ``2u``, independent of ``n``).

    Returns
    -------
    ndarray of float64, shape ``x.shape[1:]``

    Raises
    ------
    TypeError
        If ``x`` is not real-valued or ``fmt`` not a FloatFormat.
    ValueError
        If ``x`` is 0-d or has no terms, ``method`` is unknown, or ``fmt`` is unsigned or
        wider than FP32.

    References
    ----------
    Higham 2002, sections 4.1-4.3 (recursive, pairwise and compensated summation).
    """
    fmt = _check_signed(fmt)
    if method not in SUM_METHODS:
        raise ValueError(f"method must be one of {SUM_METHODS}, got {method!r}")
    x = as_real_array(x)
    if x.ndim == 0 or x.shape[0] == 0:
        raise ValueError("x must have at least one term along axis 0")

    fl = _scalar_nearest(fmt) if x.ndim == 1 else (lambda v: fmt.round(v, saturate=False))

    # IEEE arithmetic in the format: inf + (-inf) is NaN and a sum past float64's max is inf,
    # quietly (the 1-D path does the same with Python floats).
    with np.errstate(invalid="ignore", over="ignore"):
        return _sum(x, fmt, fl, method)


def _sum(x: np.ndarray, fmt: FloatFormat, fl, method: str) -> np.ndarray:
    if method == "pairwise":
        terms = x
        while terms.shape[0] > 1:
            if terms.shape[0] % 2:
                terms = np.concatenate([terms, np.zeros((1,) + terms.shape[1:])])
            terms = fmt.round(terms[0::2] + terms[1::2], saturate=False)
        return fmt.round(terms[0], saturate=False)
    x_is_list = x.ndim == 1
    if x_is_list:
        x = x.tolist()  # Python floats: a scalar loop is ~10x faster than numpy scalars
    s = fl(x[0])
    c = 0.0 if x_is_list else np.zeros_like(s)
    for term in x[1:]:
        if method == "sequential":
            s = fl(s + term)
        else:
            y = fl(term - c)
            t = fl(s + y)
            c = fl(fl(t - s) - y)
            s = t
    return np.asarray(s, dtype=np.float64)


def cumsum_in_format(x, fmt: FloatFormat) -> np.ndarray:
    """Running sums of a 1-D ``x``, each rounded to nearest even in ``fmt`` (sequential order).

    Parameters
    ----------
    x : array_like of real numbers, shape (n,), n >= 1
        The terms, used as given (see :func:`sum_in_format`).
    fmt : FloatFormat, signed, at most 24 mantissa bits

    Returns
    -------
    ndarray of float64, shape (n,)
        ``out[i] = fl(out[i-1] + x[i])``, ``out[0] = fl(x[0])``; ``out[-1]`` equals
        ``sum_in_format(x, fmt, "sequential")``.

    Raises
    ------
    TypeError
        If ``x`` is not real-valued or ``fmt`` not a FloatFormat.
    ValueError
        If ``x`` is not 1-D with at least one term, or ``fmt`` is unsigned or wider than FP32.
    """
    fmt = _check_signed(fmt)
    x = as_real_array(x)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"x must be 1-D with at least one term, got shape {x.shape}")
    fl = _scalar_nearest(fmt)
    out = []
    s = 0.0
    for i, term in enumerate(x.tolist()):
        s = fl(term) if i == 0 else fl(s + term)
        out.append(s)
    return np.array(out)


def _scalar_nearest(fmt: FloatFormat):
    """Round one Python float to nearest even in ``fmt`` (``saturate=False``), without numpy.

    The same rule as ``fmt.round``: with ``q = 2**(max(floor(log2|v|), emin) - man_bits)``,
    ``|v| / q`` is exact and Python's ``round`` breaks ties to even. Used for long 1-D
    summations, where numpy's per-call overhead dominates.
    """
    emin, m, top = fmt.emin, fmt.man_bits, fmt.max_value
    over = math.inf if fmt.has_inf else (math.nan if fmt.has_nan else top)

    def fl(v: float) -> float:
        a = abs(v)
        if a == 0.0 or a != a:
            return v
        if a == math.inf:
            return math.copysign(over, v)
        q = math.ldexp(1.0, max(math.frexp(a)[1] - 1, emin) - m)
        r = round(a / q) * q
        return math.copysign(over if r > top else r, v)

    if fmt.specials == "fnuz":  # no -0: -0.0 + 0.0 is +0.0, every other value unchanged
        return lambda v: fl(v) + 0.0
    return fl
