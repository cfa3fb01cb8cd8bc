"""Error metrics for a quantized tensor ``q`` against its reference ``x``."""

from __future__ import annotations

import numpy as np

from numfmt._validate import as_real_array


_CHUNK = 1 << 16  # elements; the difference of one chunk stays in cache


def _sum_sq_diff(q: np.ndarray, x: np.ndarray) -> float:
    """``sum((q - x)**2)`` for 1-D float64 arrays, chunk by chunk (no full-size temporary)."""
    buf = np.empty(min(_CHUNK, x.size))
    total = 0.0
    for i in range(0, x.size, _CHUNK):
        d = np.subtract(q[i:i + _CHUNK], x[i:i + _CHUNK], out=buf[:min(_CHUNK, x.size - i)])
        total += float(np.dot(d, d))
    return total


def _noise_to_signal(q, x) -> float:
    """Return ``sum (q - x)^2 / sum x^2`` after checking the inputs (see rel_error's Raises)."""
    q, x = as_real_array(q, "q"), as_real_array(x, "x")
    if q.shape != x.shape:
        raise ValueError(f"q and x must have the same shape, got {q.shape} and {x.shape}")
    if x.size == 0:
        raise ValueError("x is empty: the error of nothing is undefined")
    x, q = x.ravel(), q.ravel()
    with np.errstate(over="ignore", invalid="ignore"):
        signal, noise = float(np.dot(x, x)), _sum_sq_diff(q, x)
    if not (np.isfinite(signal) and np.isfinite(noise)):
        # NaN/Inf in an input, or squares beyond float64's range: tell the two apart.
        if not (np.isfinite(q).all() and np.isfinite(x).all()):
            raise ValueError("q and x must be finite (NaN or Inf makes the error meaningless)")
        m = max(float(np.abs(x).max()), float(np.abs(q - x).max()))
        signal, noise = float(np.dot(x / m, x / m)), _sum_sq_diff(q / m, x / m)
    if signal == 0.0:
        raise ValueError("x is all zero: a relative error or SQNR against zero is undefined")
    return noise / signal


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
    return float(np.sqrt(_noise_to_signal(q, x)))


def sqnr_db(q, x) -> float:
    """Signal-to-quantization-noise ratio ``10 log10(sum x^2 / sum (q - x)^2)``, in dB.

    Equal to ``-20 log10(rel_error(q, x))``; +inf when ``q == x`` exactly. Each extra bit of a
    uniform quantizer adds ``20 log10 2 = 6.02`` dB.

    Parameters, Raises
    ------------------
    As :func:`rel_error`.
    """
    ratio = _noise_to_signal(q, x)
    return float("inf") if ratio == 0.0 else float(-10.0 * np.log10(ratio))
