"""Error metrics for a quantized tensor ``q`` against its reference ``x``."""

from __future__ import annotations

import numpy as np

from numfmt._validate import as_real_array


def _pair(q, x) -> tuple[np.ndarray, np.ndarray]:
    q, x = as_real_array(q, "q"), as_real_array(x, "x")
    if q.shape != x.shape:
        raise ValueError(f"q and x must have the same shape, got {q.shape} and {x.shape}")
    if x.size == 0:
        raise ValueError("x is empty: the error of nothing is undefined")
    if not (np.isfinite(q).all() and np.isfinite(x).all()):
        raise ValueError("q and x must be finite (NaN or Inf makes the error meaningless)")
    if not x.any():
        raise ValueError("x is all zero: a relative error or SQNR against zero is undefined")
    return q, x


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
    q, x = _pair(q, x)
    return float(np.linalg.norm((q - x).ravel()) / np.linalg.norm(x.ravel()))


def sqnr_db(q, x) -> float:
    """Signal-to-quantization-noise ratio ``10 log10(sum x^2 / sum (q - x)^2)``, in dB.

    Equal to ``-20 log10(rel_error(q, x))``; +inf when ``q == x`` exactly. Each extra bit of a
    uniform quantizer adds ``20 log10 2 = 6.02`` dB.

    Parameters, Raises
    ------------------
    As :func:`rel_error`.
    """
    q, x = _pair(q, x)
    noise = float(np.sum((q - x) ** 2))
    if noise == 0.0:
        return float("inf")
    return float(10.0 * np.log10(np.sum(x**2) / noise))
