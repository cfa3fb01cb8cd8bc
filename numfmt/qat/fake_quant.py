"""Fake quantization and the straight-through estimator: round onto a grid (integer, float,
block-scaled) and straight back, with the mask of where the gradient passes."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from numfmt._validate import (as_calibration_array, as_integer_array, as_real_array,
                              check_code_range)
from numfmt.blocks import block_quantize, exact_scales, saturated, scaled_round
from numfmt.formats import _MODES, FP4_E2M1, FP8_E4M3, FP8_E5M2, FloatFormat, _as_generator
from numfmt.intquant import _check_scale, dequantize_affine, quantize_affine
from numfmt.qat.calibration import QParams, _channel_view, calibrate_absmax

__all__ = ["MODES", "WEIGHT_FORMATS", "FakeQuantized", "fake_quantize", "fake_quantize_block",
           "fake_quantize_float", "fake_quantize_weight", "round_nearest_even", "round_stochastic",
           "ste_backward"]

MODES = _MODES  #: the rounding modes, as FloatFormat.round names them


class FakeQuantized(NamedTuple):
    """A fake-quantized tensor and its straight-through-estimator mask."""

    values: np.ndarray  #: float64, shape of x, on the format's grid
    mask: np.ndarray    #: bool, shape of x: True where the gradient passes (not saturated)


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


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


def _round_int(v: np.ndarray, mode: str, rng) -> np.ndarray:
    return np.rint(v) if mode == "nearest" else round_stochastic(v, rng)


def _check_qparams(qp) -> QParams:
    if not isinstance(qp, QParams):
        raise TypeError(f"qparams must be a QParams (see calibrate_minmax), got {type(qp).__name__}")
    check_code_range(qp.qmin, qp.qmax)  # a hand-built QParams(scale, zp, 5, 3) is refused
    as_integer_array(qp.zero_point, "zero_point")
    return qp


def fake_quantize(x, qparams: QParams, mode: str = "nearest", rng=None) -> FakeQuantized:
    """Fake-quantize ``x`` on an integer grid and return the STE mask with it.

    ``values = (clamp(round(x / scale) + zero_point, qmin, qmax) - zero_point) * scale``;
    ``mask = qmin <= round(x / scale) + zero_point <= qmax`` with the same rounded codes.

    Parameters
    ----------
    x : array_like of real numbers, any shape; +-Inf clamps to the ends of the range
    qparams : QParams
        From :func:`calibrate_minmax` and friends, or built by hand; broadcasts against ``x``.
    mode : {"nearest", "stochastic"}
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
        If ``x`` contains NaN, a scale is not positive, or ``mode`` is unknown.

    References
    ----------
    Agrees with ``torch.fake_quantize_per_tensor_affine`` (values and gradient mask) wherever
    ``x / scale`` is exact in float32; Jacob et al., CVPR 2018, section 3.
    """
    qp = _check_qparams(qparams)
    _check_mode(mode)
    x = as_real_array(x)
    if np.isnan(x).any():
        raise ValueError("x contains NaN: it has no place on the grid")
    scale = _check_scale(qp.scale)
    with np.errstate(invalid="ignore", over="ignore"):  # a quotient past float64 is inf
        t = _round_int(x / scale, mode, rng)
    # Clamping to a range one code wider keeps "was it saturated?" visible in the codes.
    wide = quantize_affine(t, 1.0, qp.zero_point, qp.qmin - 1, qp.qmax + 1)
    mask = (wide >= qp.qmin) & (wide <= qp.qmax)
    codes = np.clip(wide, qp.qmin, qp.qmax)
    return FakeQuantized(dequantize_affine(codes, qp.scale, qp.zero_point), mask)


def fake_quantize_float(x, fmt: FloatFormat, scale=1.0, mode: str = "nearest",
                        rng=None) -> FakeQuantized:
    """Fake-quantize ``x`` to a floating-point format: ``fmt.round(x / scale) * scale``.

    Parameters
    ----------
    x : array_like of real numbers, any shape; +-Inf saturates to +-max_value * scale
    fmt : FloatFormat, signed (e.g. FP8_E4M3, FP4_E2M1)
    scale : array_like, positive and finite, broadcastable against ``x``
        1.0 casts directly; ``amax / fmt.max_value`` maps the tensor's range onto the format's.
    mode : {"nearest", "stochastic"}
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
        If ``x`` contains NaN, a scale is not positive and finite, or ``mode`` is unknown.
    """
    if not isinstance(fmt, FloatFormat) or not fmt.signed:
        raise TypeError(f"fmt must be a signed FloatFormat such as FP8_E4M3, got {fmt!r}")
    _check_mode(mode)
    x = as_real_array(x)
    scale = _check_scale(scale)
    if np.isnan(x).any():
        raise ValueError("x contains NaN: it has no place on the grid")
    _, values, y = scaled_round(x, fmt, scale, mode, rng)  # past float64: Inf, saturates
    return FakeQuantized(values, ~saturated(y, fmt))


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
        mask = np.where(full > 0, ~saturated(xb / full, elem), xb == 0)
    return FakeQuantized(bq.values, mask.reshape(x.shape))


#: Names accepted by :func:`fake_quantize_weight`.
WEIGHT_FORMATS = ("INT8", "INT4", "INT2", "E4M3", "E5M2", "E2M1", "MXFP8", "MXFP4", "NVFP4")
_INT_BITS = {"INT8": 8, "INT4": 4, "INT2": 2}
_FLOATS = {"E4M3": FP8_E4M3, "E5M2": FP8_E5M2, "E2M1": FP4_E2M1}


def fake_quantize_weight(w, fmt: str, axis: int | None = None, mode: str = "nearest",
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
    mode : {"nearest", "stochastic"}
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
    fq = _fake_quantize_weight(w, fmt, axis, mode, rng)
    shape = np.shape(w)  # the calibration views a 0-d w as shape (1,): give its shape back
    return FakeQuantized(fq.values.reshape(shape), fq.mask.reshape(shape))


def _fake_quantize_weight(w, fmt: str, axis, mode: str, rng) -> FakeQuantized:
    w = as_calibration_array(w, "w")  # the calibration's own messages would say "x"
    if fmt in _INT_BITS:
        qp = calibrate_absmax(w, _INT_BITS[fmt], axis=axis)
        return fake_quantize(w, qp, mode, rng)
    if fmt in _FLOATS:
        f = _FLOATS[fmt]
        w = as_calibration_array(w, "w")
        xc, keep = _channel_view(w, axis)
        amax = np.abs(xc).max(axis=1).reshape(keep)
        scale = np.where(amax > 0, exact_scales(amax, f.max_value), 1.0)  # no overflow at FMAX
        return fake_quantize_float(w, f, scale, mode, rng)
    if fmt in ("MXFP8", "MXFP4", "NVFP4"):
        if axis is not None:
            raise ValueError(f"{fmt} scales blocks along the last axis; axis must be None")
        if mode != "nearest":
            raise ValueError(f"{fmt} supports mode='nearest' only")
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
