"""Calibration for fake quantization: the integer grid (scale, zero point, range) of a tensor,
from its min and max, its absmax, or its percentiles, per tensor or per channel."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from numfmt._validate import as_calibration_array, as_real_array
from numfmt.intquant import _affine_scale, int_range

__all__ = ["QParams", "calibrate_absmax", "calibrate_minmax", "calibrate_percentile",
           "qparams_from_range"]


class QParams(NamedTuple):
    """Integer grid parameters; ``scale`` and ``zero_point`` broadcast against the tensor."""

    scale: np.ndarray       #: float64, positive
    zero_point: np.ndarray  #: int64, same shape as scale
    qmin: int
    qmax: int


def _channel_view(x: np.ndarray, axis) -> tuple[np.ndarray, tuple[int, ...]]:
    """Return ``x`` as (channels, rest) and the keepdims shape of one value per channel."""
    if axis is None:
        return x.reshape(1, -1), (1,) * x.ndim
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an integer or None, got {axis!r}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} is out of range for a tensor with {x.ndim} dimensions")
    axis = int(axis) % x.ndim
    keep = tuple(n if d == axis else 1 for d, n in enumerate(x.shape))
    return np.moveaxis(x, axis, 0).reshape(x.shape[axis], -1), keep


def qparams_from_range(lo, hi, bits: int, symmetric: bool = True) -> QParams:
    """Return the grid parameters for the real interval ``[lo, hi]`` (arrays allowed).

    Parameters
    ----------
    lo, hi : array_like of real numbers, broadcastable, finite, ``lo <= hi``
    bits : int in [2, 16]
    symmetric : bool, default True
        True: restricted signed range ``[-(2^(b-1) - 1), 2^(b-1) - 1]``, zero point 0,
        ``scale = max(|lo|, |hi|) / qmax``. False (affine): full range ``[0, 2^b - 1]`` over
        ``[min(lo, 0), max(hi, 0)]``, ``scale = (hi - lo) / (qmax - qmin)``, and the zero point
        nudged to the integer ``round(qmin - lo / scale)`` so that real 0 is exactly a code.

    Returns
    -------
    QParams
        ``scale`` (float64) and ``zero_point`` (int64) with the broadcast shape of lo and hi.
        An all-zero interval gets scale 1.0 and zero point 0 (it quantizes to zeros, as in
        :func:`numfmt.quantize_int`).

    Raises
    ------
    ValueError
        If a bound is not finite or ``lo > hi``.
    TypeError, ValueError
        If ``bits`` is not an integer in [2, 16] (see :func:`numfmt.int_range`).

    References
    ----------
    Jacob et al., CVPR 2018, section 2.1 (zero point) and 3 (nudging); the affine range with a
    signed code type [-2^(b-1), 2^(b-1) - 1] is the same grid with the zero point shifted.
    """
    qmin, qmax = int_range(bits, symmetric)
    lo, hi = np.broadcast_arrays(as_real_array(lo, "lo"), as_real_array(hi, "hi"))
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        raise ValueError(f"calibration range must be finite, got lo={lo!r}, hi={hi!r}")
    if (lo > hi).any():
        raise ValueError(f"calibration range has lo > hi, got lo={lo!r}, hi={hi!r}")
    if symmetric:
        scale = np.maximum(np.abs(lo), np.abs(hi)) / qmax
        zero_point = np.zeros(scale.shape, dtype=np.int64)
    else:
        lo, hi = np.minimum(lo, 0.0), np.maximum(hi, 0.0)
        scale = _affine_scale(lo, hi, qmax - qmin)
        with np.errstate(divide="ignore", invalid="ignore"):
            zero_point = np.clip(np.rint(qmin - lo / scale), qmin, qmax)
        zero_point = np.where(scale > 0, zero_point, 0).astype(np.int64)
    # An all-zero range (or one whose scale underflows float64) gets scale 1, as in
    # numfmt.quantize_int: its values are code zero_point and dequantize to 0.
    scale = np.where(scale > 0, scale, 1.0)
    return QParams(scale, zero_point, qmin, qmax)


def calibrate_minmax(x, bits: int, symmetric: bool = True, axis: int | None = None) -> QParams:
    """Grid parameters from the minimum and maximum of ``x``, per tensor or per channel.

    Parameters
    ----------
    x : array_like of real numbers, any shape, non-empty and finite
    bits : int in [2, 16]
    symmetric : bool, default True
        See :func:`qparams_from_range`; symmetric uses ``max(|min|, |max|)`` (absmax).
    axis : int or None
        None: one scale for the tensor. An int: one scale per index along that axis (the
        channel axis; e.g. axis=0 for the output channels of a (out, in) weight).

    Returns
    -------
    QParams
        ``scale`` and ``zero_point`` of shape ``(1,) * x.ndim`` per tensor, or with
        ``x.shape[axis]`` at ``axis`` and 1 elsewhere per channel; both broadcast against ``x``.

    Raises
    ------
    TypeError
        If ``x`` is not real-valued or ``axis`` is not an integer.
    ValueError
        If ``x`` is empty or non-finite, or ``axis`` is out of range. An all-zero tensor or
        channel is not an error: it gets scale 1.0 (see :func:`qparams_from_range`).
    """
    x = as_calibration_array(x)
    xc, keep = _channel_view(x, axis)  # (C, N)
    return qparams_from_range(xc.min(axis=1).reshape(keep), xc.max(axis=1).reshape(keep),
                              bits, symmetric)


def calibrate_absmax(x, bits: int, axis: int | None = None) -> QParams:
    """Symmetric grid parameters from ``max(|x|)``: ``scale = absmax / (2^(b-1) - 1)``.

    Same as :func:`calibrate_minmax` with ``symmetric=True``; shapes and errors as there.
    """
    return calibrate_minmax(x, bits, symmetric=True, axis=axis)


def calibrate_percentile(x, bits: int, clip_fraction: float | None = None,
                         symmetric: bool = True, axis: int | None = None, *,
                         percentile: float | None = None) -> QParams:
    """Grid parameters from nearest-rank percentiles of ``x``, clipping outliers in the tails.

    With ``n`` values sorted ascending and ``last = n - 1``, the range is
    ``[sorted[floor(c * last)], sorted[ceil((1 - c) * last)]]`` for ``c = clip_fraction``;
    ``c = 0`` is plain min/max calibration. Values outside the range saturate. Give either
    ``clip_fraction`` (a fraction) or ``percentile`` (in percent, as
    :func:`numfmt.ptq.calibrate_percentile`, numpy and pytorch-quantization): the upper end is
    then ``sorted[ceil(percentile / 100 * last)]``, the rule of
    :func:`numfmt.ptq.calibrate_percentile` (which takes it on ``|x|``), and the lower end
    ``sorted[floor((1 - percentile / 100) * last)]``.

    Parameters
    ----------
    x : array_like of real numbers, any shape, non-empty and finite
    bits : int in [2, 16]
    clip_fraction : float in [0, 0.5)
        Fraction of the values cut from each tail (1e-4 cuts what ``percentile=99.99`` cuts).
    percentile : float in (50, 100], keyword-only
        The same cut in percent; exactly one of ``clip_fraction`` and ``percentile``.
    symmetric : bool, default True
    axis : int or None
        As :func:`calibrate_minmax`; percentiles are taken per channel.

    Returns
    -------
    QParams, shaped as in :func:`calibrate_minmax`.

    Raises
    ------
    ValueError
        If ``clip_fraction`` is outside [0, 0.5) (a percent such as 99.99 passed for a
        fraction), ``percentile`` outside (50, 100], both or neither are given, plus everything
        :func:`calibrate_minmax` raises.

    References
    ----------
    Wu et al., "Integer Quantization for Deep Learning Inference: Principles and Empirical
    Evaluation", 2020, section 4.1 (percentile calibration).
    """
    if (clip_fraction is None) == (percentile is None):
        raise TypeError("give exactly one of clip_fraction (a fraction cut from each tail) and "
                        "percentile (in percent)")
    if percentile is not None:
        if isinstance(percentile, bool) or not isinstance(percentile, (int, float, np.number)) \
                or not 50.0 < percentile <= 100.0:
            raise ValueError(f"percentile is in percent, in (50, 100]; got {percentile!r} (for "
                             "the 99.99th percentile pass 99.99)")
        lo_q, hi_q = 1.0 - percentile / 100.0, percentile / 100.0
    else:
        if isinstance(clip_fraction, bool) \
                or not isinstance(clip_fraction, (int, float, np.number)) \
                or not 0.0 <= clip_fraction < 0.5:
            raise ValueError(f"clip_fraction is a fraction cut from each tail, in [0, 0.5); got "
                             f"{clip_fraction!r} (for the 99.99th percentile pass "
                             "clip_fraction=1e-4 or percentile=99.99)")
        lo_q, hi_q = clip_fraction, 1.0 - clip_fraction
    x = as_calibration_array(x)
    xc, keep = _channel_view(x, axis)
    s = np.sort(xc, axis=1)
    last = s.shape[1] - 1
    lo = s[:, int(np.floor(lo_q * last))]
    hi = s[:, int(np.ceil(hi_q * last))]
    return qparams_from_range(lo.reshape(keep), hi.reshape(keep), bits, symmetric)
