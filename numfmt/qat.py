"""Quantization-aware training on numpy: fake quantization, the straight-through estimator,
calibration, rounding, and an Adam optimizer over FP32 master weights.

Fake quantization rounds a tensor onto a low-precision grid and maps it straight back, so the
result stays in floating point but only takes values the low-precision format can hold::

    integer grid:  x_hat = (clamp(round(x / scale) + zero_point, qmin, qmax) - zero_point) * scale
    float format:  x_hat = fmt.round(x / scale) * scale            (saturating at fmt.max_value)
    block format:  x_hat = block_quantize(x, elem, block).values    (MX, NVFP4)

Its derivative is zero almost everywhere (a staircase), so training uses the straight-through
estimator (STE): the backward pass treats rounding as the identity and keeps only the clamp.
The gradient passes where the rounded code lies in ``[qmin, qmax]`` (boundaries included) and is
zero where the clamp saturates, exactly as ``torch.fake_quantize_per_tensor_affine`` does.

The optimizer keeps full-precision master weights. Adam integrates them; the fake-quantized view
that the forward pass uses is re-derived from them after every step. Updates far smaller than
half a grid step accumulate in the master instead of being rounded away.

References: Bengio, Leonard and Courville, "Estimating or Propagating Gradients Through
Stochastic Neurons", 2013 (the STE); Jacob et al., CVPR 2018, section 3 (fake quantization,
zero-point nudging); Gupta et al., "Deep Learning with Limited Numerical Precision", ICML 2015
(stochastic rounding); Kingma and Ba, "Adam", ICLR 2015, Algorithm 1; Loshchilov and Hutter,
"Decoupled Weight Decay Regularization", ICLR 2019 (AdamW).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from numfmt._validate import (as_calibration_array, as_integer_array, as_real_array,
                              check_code_range, check_real_scalar)
from numfmt.blocks import block_quantize, exact_scales
from numfmt.formats import FP4_E2M1, FP8_E4M3, FP8_E5M2, FloatFormat, _as_generator
from numfmt.intquant import (_affine_scale, _check_scale, dequantize_affine, int_range,
                             quantize_affine)

ROUNDINGS = ("nearest", "stochastic")


class QParams(NamedTuple):
    """Integer grid parameters; ``scale`` and ``zero_point`` broadcast against the tensor."""

    scale: np.ndarray       #: float64, positive
    zero_point: np.ndarray  #: int64, same shape as scale
    qmin: int
    qmax: int


class FakeQuantized(NamedTuple):
    """A fake-quantized tensor and its straight-through-estimator mask."""

    values: np.ndarray  #: float64, shape of x, on the format's grid
    mask: np.ndarray    #: bool, shape of x: True where the gradient passes (not saturated)


# ---------------------------------------------------------------------------------- rounding
def _check_rounding(rounding: str) -> None:
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")


def round_nearest_even(x) -> np.ndarray:
    """Round to the nearest integer, ties to even (IEEE 754 roundTiesToEven).

    Parameters
    ----------
    x : array_like of real numbers, any shape

    Returns
    -------
    ndarray of float64, the shape of ``x``; integer values (+-Inf and NaN pass through).

    Raises
    ------
    TypeError
        If ``x`` is not real-valued.
    """
    with np.errstate(invalid="ignore"):  # a signalling NaN raises 'invalid'; NaN stays NaN
        return np.rint(as_real_array(x))


def round_stochastic(x, rng=None) -> np.ndarray:
    """Round down or up to an integer, up with probability equal to the fractional part.

    ``E[round_stochastic(x)] = x`` for every finite ``x``: the rounding is unbiased.

    Parameters
    ----------
    x : array_like of real numbers, any shape
    rng : numpy.random.Generator, int or None
        Source of the uniform draws in [0, 1) (an int seeds a new Generator).

    Returns
    -------
    ndarray of float64, the shape of ``x``; integers stay unchanged, +-Inf and NaN pass through.

    Raises
    ------
    TypeError
        If ``x`` is not real-valued.

    References
    ----------
    Gupta et al., "Deep Learning with Limited Numerical Precision", ICML 2015, section 3.
    """
    x = as_real_array(x)
    rng = _as_generator(rng)
    finite = np.isfinite(x)
    safe = np.where(finite, x, 0.0)
    low = np.floor(safe)
    up = rng.random(x.shape) < (safe - low)
    return np.where(finite, low + up, x)


def _round_int(v: np.ndarray, rounding: str, rng) -> np.ndarray:
    return np.rint(v) if rounding == "nearest" else round_stochastic(v, rng)


# ---------------------------------------------------------------------------------- calibration
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


def calibrate_percentile(x, bits: int, clip_fraction: float, symmetric: bool = True,
                         axis: int | None = None) -> QParams:
    """Grid parameters from nearest-rank percentiles of ``x``, clipping outliers in the tails.

    With ``n`` values sorted ascending and ``last = n - 1``, the range is
    ``[sorted[floor(c * last)], sorted[ceil((1 - c) * last)]]`` for ``c = clip_fraction``;
    ``c = 0`` is plain min/max calibration. Values outside the range saturate.

    Parameters
    ----------
    x : array_like of real numbers, any shape, non-empty and finite
    bits : int in [2, 16]
    clip_fraction : float in [0, 0.5)
        Fraction of the values cut from each tail.
    symmetric : bool, default True
    axis : int or None
        As :func:`calibrate_minmax`; percentiles are taken per channel.

    Returns
    -------
    QParams, shaped as in :func:`calibrate_minmax`.

    Raises
    ------
    ValueError
        If ``clip_fraction`` is outside [0, 0.5), plus everything :func:`calibrate_minmax`
        raises.

    References
    ----------
    Wu et al., "Integer Quantization for Deep Learning Inference: Principles and Empirical
    Evaluation", 2020, section 4.1 (percentile calibration).
    """
    if isinstance(clip_fraction, bool) or not isinstance(clip_fraction, (int, float, np.number)) \
            or not 0.0 <= clip_fraction < 0.5:
        raise ValueError(f"clip_fraction must be a number in [0, 0.5), got {clip_fraction!r}")
    x = as_calibration_array(x)
    xc, keep = _channel_view(x, axis)
    s = np.sort(xc, axis=1)
    last = s.shape[1] - 1
    lo = s[:, int(np.floor(clip_fraction * last))]
    hi = s[:, int(np.ceil((1.0 - clip_fraction) * last))]
    return qparams_from_range(lo.reshape(keep), hi.reshape(keep), bits, symmetric)


# ---------------------------------------------------------------------------------- fake quant
def _check_qparams(qp) -> QParams:
    if not isinstance(qp, QParams):
        raise TypeError(f"qparams must be a QParams (see calibrate_minmax), got {type(qp).__name__}")
    check_code_range(qp.qmin, qp.qmax)  # a hand-built QParams(scale, zp, 5, 3) is refused
    as_integer_array(qp.zero_point, "zero_point")
    return qp


def fake_quantize(x, qparams: QParams, rounding: str = "nearest", rng=None) -> FakeQuantized:
    """Fake-quantize ``x`` on an integer grid and return the STE mask with it.

    ``values = (clamp(round(x / scale) + zero_point, qmin, qmax) - zero_point) * scale``;
    ``mask = qmin <= round(x / scale) + zero_point <= qmax`` with the same rounded codes.

    Parameters
    ----------
    x : array_like of real numbers, any shape; +-Inf clamps to the ends of the range
    qparams : QParams
        From :func:`calibrate_minmax` and friends, or built by hand; broadcasts against ``x``.
    rounding : {"nearest", "stochastic"}
        Round half to even, or :func:`round_stochastic` (unbiased).
    rng : numpy.random.Generator, int or None
        Draws for stochastic rounding.

    Returns
    -------
    FakeQuantized
        ``values`` float64 and ``mask`` bool, both with the broadcast shape of ``x`` and the
        parameters. The mask is False for +-Inf and wherever the clamp saturates.

    Raises
    ------
    TypeError
        If ``x`` is not real-valued or ``qparams`` is not a QParams.
    ValueError
        If ``x`` contains NaN, a scale is not positive, or ``rounding`` is unknown.

    References
    ----------
    Agrees with ``torch.fake_quantize_per_tensor_affine`` (values and gradient mask) wherever
    ``x / scale`` is exact in float32; Jacob et al., CVPR 2018, section 3.
    """
    qp = _check_qparams(qparams)
    _check_rounding(rounding)
    x = as_real_array(x)
    if np.isnan(x).any():
        raise ValueError("x contains NaN: it has no place on the grid")
    scale = _check_scale(qp.scale)
    with np.errstate(invalid="ignore", over="ignore"):  # a quotient past float64 is inf
        t = _round_int(x / scale, rounding, rng)
    # Clamping to a range one code wider keeps "was it saturated?" visible in the codes.
    wide = quantize_affine(t, 1.0, qp.zero_point, qp.qmin - 1, qp.qmax + 1)
    mask = (wide >= qp.qmin) & (wide <= qp.qmax)
    codes = np.clip(wide, qp.qmin, qp.qmax)
    return FakeQuantized(dequantize_affine(codes, qp.scale, qp.zero_point), mask)


def _float_mask(y: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """True where ``y`` rounds (nearest-even, unbounded exponent) to at most fmt.max_value."""
    ulp_top = np.ldexp(1.0, fmt.emax - fmt.man_bits)
    boundary = fmt.max_value + ulp_top / 2
    # At the midpoint the tie goes to the even mantissa: max_value's mantissa is all ones (odd)
    # except in "fn" formats such as E4M3, whose all-ones top code is NaN (max mantissa 110).
    tie_stays = fmt.specials == "fn" and fmt.man_bits > 0
    a = np.abs(y)
    return (a <= boundary) if tie_stays else (a < boundary)


def fake_quantize_float(x, fmt: FloatFormat, scale=1.0, rounding: str = "nearest",
                        rng=None) -> FakeQuantized:
    """Fake-quantize ``x`` to a floating-point format: ``fmt.round(x / scale) * scale``.

    Parameters
    ----------
    x : array_like of real numbers, any shape; +-Inf saturates to +-max_value * scale
    fmt : FloatFormat, signed (e.g. FP8_E4M3, FP4_E2M1)
    scale : array_like, positive and finite, broadcastable against ``x``
        1.0 casts directly; ``amax / fmt.max_value`` maps the tensor's range onto the format's.
    rounding : {"nearest", "stochastic"}
        Passed to :meth:`FloatFormat.round` as its ``mode``.
    rng : numpy.random.Generator, int or None

    Returns
    -------
    FakeQuantized
        ``values`` float64 (saturating at ``fmt.max_value * scale``) and ``mask`` bool: True
        where ``x / scale`` rounds to at most ``max_value`` with an unbounded exponent, i.e.
        below the midpoint to the next binade step (E4M3: ``|x / scale| <= 464``; E5M2:
        ``< 61440``; E2M1: ``< 7``), the float analogue of the integer rule.

    Raises
    ------
    TypeError
        If ``x`` is not real-valued or ``fmt`` is not a signed FloatFormat.
    ValueError
        If ``x`` contains NaN, a scale is not positive and finite, or ``rounding`` is unknown.
    """
    if not isinstance(fmt, FloatFormat) or not fmt.signed:
        raise TypeError(f"fmt must be a signed FloatFormat such as FP8_E4M3, got {fmt!r}")
    _check_rounding(rounding)
    x = as_real_array(x)
    scale = _check_scale(scale)
    if np.isnan(x).any():
        raise ValueError("x contains NaN: it has no place on the grid")
    with np.errstate(over="ignore"):  # a quotient past float64 is inf and saturates
        y = x / scale
    values = fmt.round(y, saturate=True, mode=rounding, rng=rng) * scale
    return FakeQuantized(values, _float_mask(y, fmt))


def fake_quantize_block(x, elem: FloatFormat, block: int,
                        scale_format: str = "e8m0") -> FakeQuantized:
    """Fake-quantize ``x`` to a block-scaled format (MX, NVFP4) with its STE mask.

    Parameters
    ----------
    x : array_like of real numbers, shape (..., K), non-empty and finite
    elem : FloatFormat
        Element format, e.g. FP4_E2M1.
    block : int
        Block size along the last axis; must divide K.
    scale_format : {"e8m0", "e4m3", "exact"}
        As :func:`numfmt.block_quantize` ("e8m0" is MX, "e4m3" is NVFP4's two-level scale).

    Returns
    -------
    FakeQuantized
        ``values`` = ``block_quantize(x, elem, block, scale_format).values``; ``mask`` True
        where ``x / block scale`` stays within ``elem`` (the float rule of
        :func:`fake_quantize_float`). An MX power-of-two scale can put the block maximum
        above ``elem.max_value``, so MX saturates (mask False) there; a block whose E4M3 scale
        underflows to 0 decodes to zeros and gets mask False except at its exact zeros (an
        all-zero block has scale 0 and mask True).

    Raises
    ------
    TypeError, ValueError
        As :func:`numfmt.block_quantize`. Rounding is nearest-even only.
    """
    bq = block_quantize(x, elem, block, scale_format)
    x = np.asarray(x, dtype=np.float64)
    full = (bq.scales * bq.tensor_scale)[..., None]                  # (..., n_blocks, 1)
    xb = x.reshape(x.shape[:-1] + (-1, block))                        # (..., n_blocks, block)
    with np.errstate(divide="ignore", invalid="ignore"):
        # Where the scale is 0 only the zeros are represented exactly (an all-zero block
        # passes its whole gradient, so zero-initialised weights can train).
        mask = np.where(full > 0, _float_mask(xb / full, elem), xb == 0)
    return FakeQuantized(bq.values, mask.reshape(x.shape))


#: Names accepted by :func:`fake_quantize_weight`.
WEIGHT_FORMATS = ("INT8", "INT4", "INT2", "E4M3", "E5M2", "E2M1", "MXFP8", "MXFP4", "NVFP4")
_INT_BITS = {"INT8": 8, "INT4": 4, "INT2": 2}
_FLOATS = {"E4M3": FP8_E4M3, "E5M2": FP8_E5M2, "E2M1": FP4_E2M1}


def fake_quantize_weight(w, fmt: str, axis: int | None = None, rounding: str = "nearest",
                         rng=None) -> FakeQuantized:
    """Fake-quantize a weight tensor to a named format, calibrating the scale from ``w``.

    Parameters
    ----------
    w : array_like of real numbers, shape (..., K), non-empty and finite
    fmt : str, one of WEIGHT_FORMATS
        "INT8"/"INT4"/"INT2": symmetric restricted range (INT2 is ternary {-1, 0, 1} * scale),
        absmax scale. "E4M3"/"E5M2"/"E2M1": scale ``amax / max_value``. "MXFP8" (E4M3 elements)
        and "MXFP4": blocks of 32 with E8M0 scales. "NVFP4": blocks of 16 with E4M3 scales and
        an FP32 tensor scale.
    axis : int or None
        For the integer and float formats: None for one scale per tensor, or the channel axis
        for one scale per channel. Block formats always block the last axis and refuse it.
    rounding : {"nearest", "stochastic"}
        Stochastic rounding is available for the integer and float formats only.
    rng : numpy.random.Generator, int or None

    Returns
    -------
    FakeQuantized with ``values`` and ``mask`` of the shape of ``w``.

    Raises
    ------
    TypeError
        If ``fmt`` is not a string; plus what the calibration and block functions raise.
    ValueError
        If ``fmt`` is unknown, ``axis`` is given for a block format, or a block format is
        asked for stochastic rounding; plus what the calibration and block functions raise.
    """
    if not isinstance(fmt, str):
        raise TypeError(f"fmt must be a format name, one of {WEIGHT_FORMATS}, got {fmt!r}")
    fq = _fake_quantize_weight(w, fmt, axis, rounding, rng)
    shape = np.shape(w)  # the calibration views a 0-d w as shape (1,): give its shape back
    return FakeQuantized(fq.values.reshape(shape), fq.mask.reshape(shape))


def _fake_quantize_weight(w, fmt: str, axis, rounding: str, rng) -> FakeQuantized:
    w = as_calibration_array(w, "w")  # the calibration's own messages would say "x"
    if fmt in _INT_BITS:
        qp = calibrate_absmax(w, _INT_BITS[fmt], axis=axis)
        return fake_quantize(w, qp, rounding, rng)
    if fmt in _FLOATS:
        f = _FLOATS[fmt]
        w = as_calibration_array(w, "w")
        xc, keep = _channel_view(w, axis)
        amax = np.abs(xc).max(axis=1).reshape(keep)
        scale = np.where(amax > 0, exact_scales(amax, f.max_value), 1.0)  # no overflow at FMAX
        return fake_quantize_float(w, f, scale, rounding, rng)
    if fmt in ("MXFP8", "MXFP4", "NVFP4"):
        if axis is not None:
            raise ValueError(f"{fmt} scales blocks along the last axis; axis must be None")
        if rounding != "nearest":
            raise ValueError(f"{fmt} supports rounding='nearest' only")
        if fmt == "NVFP4":
            return fake_quantize_block(w, FP4_E2M1, 16, "e4m3")
        return fake_quantize_block(w, FP8_E4M3 if fmt == "MXFP8" else FP4_E2M1, 32, "e8m0")
    raise ValueError(f"fmt must be one of {WEIGHT_FORMATS}, got {fmt!r}")


def ste_backward(grad, mask) -> np.ndarray:
    """Straight-through-estimator backward: ``grad * mask`` (zero where the clamp saturated).

    Parameters
    ----------
    grad : array_like of real numbers
        Gradient of the loss with respect to the fake-quantized values.
    mask : array_like of bool, the shape of ``grad``, or a FakeQuantized
        From :func:`fake_quantize` and friends.

    Returns
    -------
    ndarray of float64, the shape of ``grad``: the gradient with respect to the input.

    Raises
    ------
    TypeError
        If ``grad`` is not real-valued or ``mask`` is not boolean.
    ValueError
        If the shapes differ.
    """
    if isinstance(mask, FakeQuantized):
        mask = mask.mask
    grad = as_real_array(grad, "grad")
    mask = np.asarray(mask)
    if mask.dtype != np.bool_:
        raise TypeError(f"mask must be boolean, got dtype {mask.dtype}")
    if grad.shape != mask.shape:
        raise ValueError(f"grad and mask must have the same shape, got {grad.shape} and "
                         f"{mask.shape}")
    return np.where(mask, grad, 0.0)


# ---------------------------------------------------------------------------------- optimizer
def adam_update(param, grad, m, v, t: int, lr: float, beta1: float = 0.9, beta2: float = 0.999,
                eps: float = 1e-8, weight_decay: float = 0.0):
    """One Adam (or AdamW, with decoupled weight decay) update; returns new arrays.

    ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``, ``p -= lr wd p`` (AdamW), then
    ``p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)``. All arithmetic in float64.

    Parameters
    ----------
    param, grad, m, v : array_like of real numbers, the same shape
    t : int >= 1, the step number (for the bias corrections)
    lr, beta1, beta2, eps, weight_decay : float
        Learning rate > 0; betas in [0, 1); eps > 0; weight_decay >= 0.

    Returns
    -------
    (param, m, v) : three float64 ndarrays of the input shape

    Raises
    ------
    TypeError
        If an array is not real-valued or a hyper-parameter is not a real number.
    ValueError
        If shapes differ, an array is not finite, ``v`` has a negative entry (a second moment
        is a mean of squares), ``t < 1``, a hyper-parameter is out of range or not finite, or
        the update overflows float64.

    References
    ----------
    Kingma and Ba, ICLR 2015, Algorithm 1; Loshchilov and Hutter, ICLR 2019, Algorithm 2.
    Matches ``torch.optim.Adam`` / ``torch.optim.AdamW`` (eps added after the square root).
    """
    param, grad = as_real_array(param, "param"), as_real_array(grad, "grad")
    m, v = as_real_array(m, "m"), as_real_array(v, "v")
    if not param.shape == grad.shape == m.shape == v.shape:
        raise ValueError(f"param, grad, m, v must share a shape, got {param.shape}, "
                         f"{grad.shape}, {m.shape}, {v.shape}")
    for name, arr in (("param", param), ("grad", grad), ("m", m), ("v", v)):
        if not np.isfinite(arr).all():
            raise ValueError(f"{name} contains NaN or Inf")
    if (v < 0).any():
        raise ValueError(f"v must be non-negative (a second moment), got {v[v < 0].min()!r}")
    if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 1:
        raise ValueError(f"t must be an integer >= 1, got {t!r}")
    _check_adam(lr, beta1, beta2, eps, weight_decay)
    # beta**t for t beyond 2**1000 is 0 to float64 precision (beta <= 1 - 2**-53); Python's
    # float ** int would raise OverflowError converting such a t to float.
    t = min(int(t), 2**1000)
    try:
        with np.errstate(over="raise"):  # an update beyond float64 would be +-Inf
            m = beta1 * m + (1 - beta1) * grad
            v = beta2 * v + (1 - beta2) * grad * grad
            m_hat = m / (1 - beta1**t)
            v_hat = v / (1 - beta2**t)
            param = param - lr * weight_decay * param
            param = param - lr * m_hat / (np.sqrt(v_hat) + eps)
    except FloatingPointError:
        raise ValueError(f"the Adam update overflows float64 (lr={lr!r}, "
                         f"weight_decay={weight_decay!r}, max |grad| = "
                         f"{float(np.abs(grad).max()):.6g}): lower lr") from None
    return param, m, v


def _check_adam(lr, beta1, beta2, eps, weight_decay) -> None:
    lr, beta1, beta2, eps, weight_decay = (
        check_real_scalar(v, n) for v, n in ((lr, "lr"), (beta1, "beta1"), (beta2, "beta2"),
                                             (eps, "eps"), (weight_decay, "weight_decay")))
    if not (0 < lr < np.inf and 0 <= beta1 < 1 and 0 <= beta2 < 1 and 0 < eps < np.inf
            and 0 <= weight_decay < np.inf):
        raise ValueError("need finite lr > 0, 0 <= beta1, beta2 < 1, finite eps > 0 and "
                         f"weight_decay >= 0; got lr={lr!r}, beta1={beta1!r}, beta2={beta2!r}, "
                         f"eps={eps!r}, weight_decay={weight_decay!r}")


class QATAdam:
    """Adam/AdamW over FP32 master weights, with a fake-quantized view re-derived every step.

    Parameters
    ----------
    master : array_like of real numbers, non-empty and finite
        Initial weights; copied and stored as float32 (the master copy).
    quantize : callable ndarray -> FakeQuantized
        Builds the view from the master, e.g.
        ``lambda w: fake_quantize_weight(w, "INT4", axis=0)``.
    lr, betas, eps, weight_decay : as :func:`adam_update` (weight_decay > 0 makes it AdamW)

    Attributes
    ----------
    master : ndarray of float32
        Full-precision weights the optimizer integrates (off the grid in general).
    view : ndarray of float64
        ``quantize(master).values``: what the forward pass uses (on the grid).
    mask : ndarray of bool
        The STE mask of the view; the caller applies it with :func:`ste_backward`.
    t : int
        Steps taken.

    Raises
    ------
    TypeError
        If ``quantize`` is not callable or does not return a FakeQuantized, ``betas`` is not
        a pair, or a hyper-parameter is not a real number.
    ValueError
        If ``master`` is empty or not finite, a hyper-parameter is out of range (as
        :func:`adam_update`); :meth:`step` raises on a gradient of the wrong
        shape or a non-finite one.
    """

    def __init__(self, master, quantize: Callable[[np.ndarray], FakeQuantized], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        if not callable(quantize):
            raise TypeError("quantize must be a callable returning a FakeQuantized")
        if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
            raise TypeError(f"betas must be a pair (beta1, beta2), got {betas!r}")
        _check_adam(lr, betas[0], betas[1], eps, weight_decay)
        master = as_calibration_array(master, "master")
        _check_fits_float32(master, "master")
        self.master = master.astype(np.float32)
        self.quantize = quantize
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.m = np.zeros(self.master.shape)
        self.v = np.zeros(self.master.shape)
        self.t = 0
        self._requantize()

    def _requantize(self) -> None:
        fq = self.quantize(self.master.astype(np.float64))
        if not isinstance(fq, FakeQuantized):
            raise TypeError(f"quantize must return a FakeQuantized, got {type(fq).__name__}")
        self.view, self.mask = fq.values, fq.mask

    def step(self, grad) -> None:
        """Update the master with one Adam step on ``grad`` (its shape), then re-derive the view.

        ``grad`` is the gradient with respect to the master: apply :func:`ste_backward` to a
        gradient taken at the view first. Raises as :func:`adam_update` (and ValueError if the
        new master leaves FP32's range); a refused step, or a ``quantize`` that raises, leaves
        the master, moments, step count and view unchanged.
        """
        grad = as_real_array(grad, "grad")
        if grad.shape != self.master.shape:
            raise ValueError(f"grad has shape {grad.shape}, the master {self.master.shape}")
        # Everything is computed and checked before any state changes: a refused gradient
        # (NaN, an overflowing update, a quantizer that raises) leaves the optimizer as it was.
        b1, b2 = self.betas
        p, m, v = adam_update(self.master, grad, self.m, self.v, self.t + 1, self.lr, b1,
                              b2, self.eps, self.weight_decay)
        _check_fits_float32(p, "the updated master")
        master = p.astype(np.float32)
        fq = self.quantize(master.astype(np.float64))
        if not isinstance(fq, FakeQuantized):
            raise TypeError(f"quantize must return a FakeQuantized, got {type(fq).__name__}")
        self.master, self.m, self.v, self.t = master, m, v, self.t + 1
        self.view, self.mask = fq.values, fq.mask


def _check_fits_float32(w: np.ndarray, name: str) -> None:
    """Refuse weights beyond FP32's range: the float32 master would hold Inf."""
    big = float(np.abs(w).max()) if w.size else 0.0
    if big > float(np.finfo(np.float32).max):
        raise ValueError(f"{name} holds {big:.6g}, beyond the FP32 master's range "
                         f"(max {float(np.finfo(np.float32).max):.6g})")
