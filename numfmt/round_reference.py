"""Rounding onto a format's grid, written from the definition: the readable :meth:`round`.

:meth:`numfmt.FloatFormat.round` is fast: it rounds float64 and float32 bit patterns with
integer arithmetic, chunk by chunk, with paths per kind of format. This module says what it
computes, in the terms of IEEE 754: in the binade of ``|x|`` (no lower than the format's
smallest normal binade, where the subnormals share its spacing) the grid is spaced
``2^(e - man_bits)``, and ``x`` goes to the nearest grid point, ties to the even one; what
lands beyond ``max_value`` saturates or overflows. ``tests/test_round_reference.py`` checks
the two equal in every bit, on every code of every format, the midpoints between them, and
random values.
"""

from __future__ import annotations

import numpy as np

from numfmt._validate import as_real_array, check_bool
from numfmt.formats import FloatFormat

__all__ = ["round_reference"]


def round_reference(fmt: FloatFormat, x, saturate: bool = True) -> np.ndarray:
    """Round ``x`` to nearest on ``fmt``'s grid: ``fmt.round(x, saturate)``, readably.

    Parameters
    ----------
    fmt : FloatFormat
    x : array_like of real numbers, any shape (float32 widened exactly to float64)
    saturate : bool, default True
        As :meth:`FloatFormat.round`: clamp overflow and +-Inf to +-max_value, or give the
        format's Inf (or NaN where it has none). Formats without Inf and NaN always clamp.

    Returns
    -------
    ndarray of float64, the shape of ``x``: equal in every bit to ``fmt.round(x, saturate)``
    (NaN as float64's quiet NaN with the sign of ``x``; E8M0: NaN for zero and negatives).

    Raises
    ------
    TypeError
        If ``fmt`` is not a FloatFormat, ``x`` is not real-valued or ``saturate`` not a bool.

    References
    ----------
    IEEE 754-2019, section 4.3.1 (roundTiesToEven) and 7.4 (overflow); OCP OFP8 rev. 1.0
    and OCP MX v1.0, section 5 (saturating conversion, E8M0); ties away from zero for a
    format without mantissa bits (E8M0), as ml_dtypes rounds it.
    """
    if not isinstance(fmt, FloatFormat):
        raise TypeError(f"fmt must be a FloatFormat such as FP16, got {fmt!r}")
    check_bool(saturate, "saturate")
    x = as_real_array(x)                                   # float64
    a = np.abs(x)
    finite = np.isfinite(a)
    m = np.where(finite, a, 0.0)
    e = np.maximum(np.frexp(m)[1] - 1, fmt.emin)           # binade: 2^e <= |x| < 2^(e+1)
    step = np.ldexp(1.0, e - fmt.man_bits)                 # the grid's spacing in it
    n = m / step                                           # exact: step is a power of two
    n = np.floor(n + 0.5) if fmt.man_bits == 0 else np.rint(n)   # ties away / ties to even
    r = np.where(finite, n * step, a)                      # a carry lands on 2^(e+1): on grid
    overflow = np.inf if fmt.has_inf else np.nan
    r = np.where(r > fmt.max_value,
                 fmt.max_value if saturate or fmt.specials == "none" else overflow, r)
    r = np.where(np.isnan(a), np.nan, r)
    if not fmt.subnormals:                                 # E8M0: nothing below 2^emin
        r = np.maximum(r, fmt.min_normal)
    if not fmt.signed:                                     # E8M0: no zero, no negatives
        return np.where(x > 0, r, np.nan)
    r = np.copysign(r, x)
    return r + 0.0 if fmt.specials == "fnuz" else r        # FNUZ formats have no -0
