"""Per-tensor scales for FP8 and other narrow formats: from an amax, current or delayed.

A scale ``s`` maps a tensor into a format's range: the format stores ``x / s`` and the value is
``round(x / s) * s``. With ``s = amax / max_value`` (times ``2**margin``) the largest magnitude
lands on the format's largest value. *Current* scaling takes ``amax`` from the tensor being
quantized (an extra pass over the data); *delayed* scaling takes it from a history of earlier
steps' amaxes, so the scale is known before the tensor is produced.

References: Micikevicius et al., "FP8 Formats for Deep Learning", 2022, section 4 (per-tensor
scaling); NVIDIA Transformer Engine, ``DelayedScaling`` recipe (``amax_history_len``,
``amax_compute_algo="max"``, ``margin``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from numfmt._validate import (as_calibration_array, as_real_array, check_int, check_positive_int,
                              check_real_scalar)
from numfmt.blocks import saturated, scaled_round
from numfmt.formats import FloatFormat

__all__ = ["Scaled", "scale_from_amax", "quantize_with_scale", "delayed_scales"]


class Scaled(NamedTuple):
    """Result of :func:`quantize_with_scale`."""

    values: np.ndarray  #: dequantized values, float64, shape of x
    clipped: float      #: fraction of elements saturated (see quantize_with_scale)
    flushed: float      #: fraction of non-zero elements that became zero


def _check_fmt(fmt) -> FloatFormat:
    if not isinstance(fmt, FloatFormat) or not fmt.signed:
        raise TypeError(f"fmt must be a signed FloatFormat such as FP8_E4M3, got {fmt!r}")
    return fmt


def scale_from_amax(amax, fmt: FloatFormat, margin: int = 0) -> np.ndarray:
    """Scale that maps ``amax`` onto ``fmt.max_value / 2**margin``: ``amax * 2**margin / max_value``.

    Parameters
    ----------
    amax : array_like of non-negative finite reals, any shape
    fmt : FloatFormat, signed
    margin : int, default 0
        Headroom in binades (Transformer Engine's ``margin``).

    Returns
    -------
    ndarray of float64, the shape of ``amax``; 1.0 where ``amax`` is 0.

    Raises
    ------
    TypeError
        If ``fmt`` is not a signed FloatFormat, ``amax`` not real, or ``margin`` not an int.
    ValueError
        If ``amax`` has a negative or non-finite entry, or a scale over- or underflows float64
        (``margin`` far from 0, or ``amax`` near float64's max).
    """
    fmt = _check_fmt(fmt)
    check_int(margin, "margin")
    amax = _check_amax(amax, "amax")
    with np.errstate(over="ignore", under="ignore"):
        # ldexp: exact, as * 2.0**margin. Beyond +-4000 binades every non-zero scale is 0 or
        # Inf anyway, and ldexp takes a C int: clamp so the range error below is raised.
        scale = np.ldexp(amax, int(np.clip(int(margin), -4000, 4000))) / fmt.max_value
    if not (np.isfinite(scale) & ((scale > 0) | (amax == 0))).all():
        raise ValueError(f"amax * 2**margin / {fmt.max_value:g} with margin = {int(margin)} is "
                         "beyond float64's range: the scale would be 0 or Inf; margin is a "
                         "headroom in binades, usually 0 to a few")
    return np.where(amax > 0, scale, 1.0)


def _check_amax(amax, name: str) -> np.ndarray:
    amax = as_real_array(amax, name)
    if not (np.isfinite(amax).all() and (amax >= 0).all()):
        raise ValueError(f"{name} must be finite and non-negative")
    return amax


def quantize_with_scale(x, fmt: FloatFormat, scale: float) -> Scaled:
    """Quantize ``x`` as ``fmt.round(x / scale) * scale`` (saturating), with clip and flush rates.

    Parameters
    ----------
    x : array_like of real numbers, any shape, non-empty and finite
    fmt : FloatFormat, signed
    scale : float (or a 0-d array, as :func:`scale_from_amax` returns), positive and finite

    Returns
    -------
    Scaled
        ``values`` (float64, shape of x); ``clipped``: fraction of elements saturated as
        :func:`numfmt.blocks.saturated` defines it: ``|x / scale|`` rounds past the midpoint
        between ``max_value`` and the next step, where round to nearest would leave the grid
        (values between ``max_value`` and that midpoint round to ``max_value`` anyway and are
        not counted; nor is the element that maps exactly onto ``max_value`` up to float
        rounding; the midpoint itself counts unless its tie goes to ``max_value``, as in
        E4M3); ``flushed``: fraction of
        the non-zero elements that round to zero (0 if none).

    Raises
    ------
    TypeError
        If ``x`` is not real, ``fmt`` not a signed FloatFormat, or ``scale`` not one real number.
    ValueError
        If ``x`` is empty or non-finite, or ``scale`` is not positive and finite.
    """
    fmt = _check_fmt(fmt)
    x = as_calibration_array(x)
    scale = check_real_scalar(scale, "scale")
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be positive and finite, got {scale}")
    _, values, y = scaled_round(x, fmt, scale)  # a quotient beyond float64 is Inf: saturates
    nonzero = x != 0
    flushed = float(np.mean(values[nonzero] == 0)) if nonzero.any() else 0.0
    return Scaled(values, float(np.mean(saturated(y, fmt))), flushed)


def delayed_scales(amaxes, fmt: FloatFormat, history: int = 16, margin: int = 0) -> np.ndarray:
    """Delayed scaling: the scale for step ``t`` from the amaxes of steps ``t-history .. t-1``.

    Parameters
    ----------
    amaxes : array_like, shape (T,), non-negative finite
        The amax each step's tensor turned out to have.
    fmt : FloatFormat, signed
    history : int >= 1, default 16
        Length of the amax history window (Transformer Engine's ``amax_history_len``).
    margin : int, default 0

    Returns
    -------
    ndarray of float64, shape (T,)
        ``scale_from_amax(max(amaxes[t-history:t]), fmt, margin)``. Step 0 has no history and
        uses its own amax (a warm-up step with current scaling).

    Raises
    ------
    TypeError, ValueError
        As :func:`scale_from_amax`; ValueError if ``amaxes`` is not 1-D and non-empty or
        ``history`` < 1, TypeError if ``history`` is not an integer.
    """
    a = _check_amax(amaxes, "amaxes")
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"amaxes must be 1-D and non-empty, got shape {a.shape}")
    check_positive_int(history, "history")
    window = np.array([a[max(0, t - history):t].max() if t else a[0] for t in range(a.size)])
    return scale_from_amax(window, fmt, margin)
