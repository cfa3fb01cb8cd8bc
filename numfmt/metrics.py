"""Error metrics for a quantized tensor ``q`` against its reference ``x``.

Written once over the array API (:mod:`numfmt._xp`): :mod:`numfmt.torch.metrics` checks tensors
and calls the same body, which sums in the same order on numpy and on torch's CPU.
"""

from __future__ import annotations

import math

import numpy as np

from numfmt import _xp
from numfmt._validate import as_real_array

__all__ = ["rel_error", "sqnr_db"]


_CHUNK = 1 << 16  # elements; the difference of one chunk stays in cache
_TINY = np.finfo(np.float64).tiny  # smallest normal float64, 2**-1022


def _sum_sq_diff(xp, q, x) -> float:
    """``sum((q - x)**2)`` for 1-D float64 arrays, chunk by chunk (no full-size temporary)."""
    buf = _xp.empty(xp, (min(_CHUNK, x.shape[0]),), xp.float64, x)
    total = 0.0
    for i in range(0, x.shape[0], _CHUNK):
        d = buf[:min(_CHUNK, x.shape[0] - i)]
        _xp.subtract_into(xp, q[i:i + _CHUNK], x[i:i + _CHUNK], d)
        total += _xp.dot(xp, d, d)
    return total


def _noise_to_signal(q, x) -> tuple[float, int]:
    """Return ``(r, k)`` with ``sum (q - x)^2 / sum x^2 = r * 2**k``, after checking the inputs
    (see rel_error's Raises)."""
    q, x = as_real_array(q, "q"), as_real_array(x, "x")
    if q.shape != x.shape:
        raise ValueError(f"q and x must have the same shape, got {q.shape} and {x.shape}")
    if x.size == 0:
        raise ValueError("x is empty: the error of nothing is undefined")
    return _ratio(q, x)


def _ratio(q, x) -> tuple[float, int]:
    """``(r, k)`` as :func:`_noise_to_signal` for checked float64 arrays of the same shape and
    either namespace (numpy or torch)."""
    xp = _xp.array_namespace(q, x)
    x, q = xp.reshape(x, (-1,)), xp.reshape(q, (-1,))
    with _xp.quiet(xp):
        signal, noise = _xp.dot(xp, x, x), _sum_sq_diff(xp, q, x)
    if math.isfinite(signal) and math.isfinite(noise) and signal >= _TINY and noise >= _TINY:
        return noise / signal, 0
    # NaN/Inf in an input, squares beyond float64's range, squares in (or below) the
    # subnormal range where they lose digits, or an exact match: take the careful path
    # (numpy's frexp and ldexp, which the array API lacks).
    return _noise_to_signal_scaled(_xp.to_numpy(q), _xp.to_numpy(x))


def _noise_to_signal_scaled(q: np.ndarray, x: np.ndarray) -> tuple[float, int]:
    """``(r, k)`` with ``sum (q - x)^2 / sum x^2 = r * 2**k`` for 1-D float64 arrays of any
    magnitude (NaN/Inf refused); ``r`` is 0.0 when ``q == x``.

    Each sum is taken over values scaled by a power of two (exact) so that its largest term
    lies in [1/4, 1): no square overflows, and none that matters underflows; the power of two
    is carried apart, so even a ratio beyond float64's range is not lost.
    """
    if not (np.isfinite(q).all() and np.isfinite(x).all()):
        raise ValueError("q and x must be finite (NaN or Inf makes the error meaningless)")
    mx = float(np.abs(x).max())
    if mx == 0.0:
        raise ValueError("x is all zero: a relative error or SQNR against zero is undefined")
    # Both below 2**e, so q - x stays below 2**(e+1).
    e = int(np.frexp(max(mx, float(np.abs(q).max())))[1])
    d = np.ldexp(q, -e) - np.ldexp(x, -e)
    md = float(np.abs(d).max())
    if md == 0.0:
        return 0.0, 0
    ex, ed = int(np.frexp(mx)[1]), int(np.frexp(md)[1])
    xs, ds = np.ldexp(x, -ex), np.ldexp(d, -ed)
    return _xp.dot(np, ds, ds) / _xp.dot(np, xs, xs), 2 * (ed + e - ex)


def _rel_error_of(r: float, k: int) -> float:
    """``sqrt(r * 2**k)``; +inf beyond float64's range."""
    if k == 0:
        return float(np.sqrt(r))
    with np.errstate(over="ignore"):
        return float(np.ldexp(np.sqrt(np.ldexp(r, k % 2)), k // 2))


def _sqnr_db_of(r: float, k: int) -> float:
    """``-10 log10(r * 2**k)`` in dB; +inf for ``r == 0``."""
    if r == 0.0:
        return float("inf")
    db = -10.0 * np.log10(r) if k == 0 else -10.0 * (np.log10(r) + k * np.log10(2.0))
    return float(db) + 0.0  # + 0.0 turns a ratio of exactly 1 into 0.0 dB, not -0.0


def rel_error(q, x) -> float:
    """Relative error ``||q - x||_2 / ||x||_2``, as a fraction (0.05 means 5 %).

    Parameters
    ----------
    q, x : array_like of real numbers, the same shape
        The quantized tensor and the reference.

    Returns
    -------
    float

    Raises
    ------
    TypeError
        If either input is not real-valued.
    ValueError
        If the shapes differ, ``x`` is empty or all zero, or either holds NaN or Inf.
    """
    return _rel_error_of(*_noise_to_signal(q, x))


def sqnr_db(q, x) -> float:
    """Signal-to-quantization-noise ratio ``10 log10(sum x^2 / sum (q - x)^2)``, in dB.

    Equal to ``-20 log10(rel_error(q, x))``; +inf when ``q == x`` exactly. Each extra bit of a
    uniform quantizer adds ``20 log10 2 = 6.02`` dB.

    Parameters, Raises
    ------------------
    As :func:`rel_error`.
    """
    return _sqnr_db_of(*_noise_to_signal(q, x))
