"""Integer quantization on torch tensors: the twin of :mod:`numfmt.intquant`, bit for bit.

``q = clamp(round_half_even(x / scale) + zero_point, qmin, qmax)``, ``x_hat = (q - zp) * scale``,
with the same float64 operations in the same order as the numpy implementation, so codes, scales,
zero points and dequantized values agree exactly.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from numfmt._validate import as_integer_array, check_clip, check_code_range
from numfmt.intquant import _affine_scale, _check_calibrated_scale, grouped_view_shape, int_range
from numfmt.torch._core import (F64, absmax_rows, as_real_tensor, calibration_input,
                                new_result, spans)

__all__ = ["IntQuantized", "quantize_affine", "dequantize_affine", "quantize_int"]


class IntQuantized(NamedTuple):
    """Result of :func:`quantize_int`; unpacks as ``values, codes, scale, zero_point``."""

    values: torch.Tensor      #: dequantized values, float64, shape of x
    codes: torch.Tensor       #: integer codes, int64, shape of x
    scale: torch.Tensor       #: float64, see quantize_int for the shape
    zero_point: torch.Tensor  #: int64, same shape as scale


def quantize_affine(x, scale, zero_point=0, qmin: int = -127, qmax: int = 127,
                    device=None) -> torch.Tensor:
    """Return the codes ``clamp(round_half_even(x / scale) + zero_point, qmin, qmax)``.

    Parameters
    ----------
    x : tensor or array_like of real numbers
    scale : tensor or array_like, positive and finite, broadcastable against ``x``
    zero_point : int or integer tensor, broadcastable against ``x``
    qmin, qmax : int, ``qmin <= qmax``
    device : optional; default the device of ``x`` (a tensor) or the default device

    Returns
    -------
    torch.Tensor of int64, the broadcast shape; equal to :func:`numfmt.quantize_affine`.

    Raises
    ------
    TypeError
        If ``x`` or ``scale`` is not real-valued, ``zero_point`` does not hold integers, or
        ``qmin``/``qmax`` is not an integer.
    ValueError
        If a scale is not positive and finite, ``x`` contains NaN, ``qmin > qmax``, or
        ``qmin``/``qmax`` lies beyond +-2**53 (as :func:`numfmt.quantize_affine`).
    """
    x = as_real_tensor(x, device=device)
    scale = _check_scale(scale, x.device)
    zp = _integer_tensor(zero_point, x.device)
    qmin, qmax = check_code_range(qmin, qmax)
    if bool(torch.isnan(x).any()):
        raise ValueError("x contains NaN: it has no integer code")
    q = torch.round(x / scale) + zp  # torch.round is round-half-to-even, as np.rint
    return torch.clamp(q, qmin, qmax).to(torch.int64)


def _check_scale(scale, device) -> torch.Tensor:
    scale = as_real_tensor(scale, "scale", device=device)
    bad = ~(torch.isfinite(scale) & (scale > 0))
    if bool(bad.any()):
        raise ValueError("scale must be positive and finite, got "
                         f"{float(scale[bad].reshape(-1)[0])!r}")
    return scale


def _integer_tensor(zero_point, device) -> torch.Tensor:
    """``zero_point`` as float64 on ``device``, refusing what does not hold integers."""
    if isinstance(zero_point, torch.Tensor):
        if zero_point.dtype == torch.bool or zero_point.is_floating_point() \
                or zero_point.is_complex():
            raise TypeError(f"zero_point must hold integers, got dtype {zero_point.dtype}")
        return zero_point.to(device=device, dtype=F64)
    return torch.as_tensor(as_integer_array(zero_point, "zero_point"), device=device).to(F64)


def dequantize_affine(codes, scale, zero_point=0) -> torch.Tensor:
    """Return ``(codes - zero_point) * scale`` as float64 (shapes broadcast); the twin of
    :func:`numfmt.dequantize_affine`, on the device of ``codes`` (a tensor) or the default one.

    Raises
    ------
    TypeError
        If ``codes`` or ``scale`` is not real-valued or ``zero_point`` does not hold integers.
    ValueError
        If a scale is not positive and finite, or a value lies beyond float64's range (as
        :func:`numfmt.dequantize_affine`).
    """
    codes = as_real_tensor(codes, "codes")
    dev = codes.device
    out = (codes - _integer_tensor(zero_point, dev)) * _check_scale(scale, dev)
    if bool(torch.isinf(out).any()):  # finite codes and scales: an Inf is an overflow
        raise ValueError("(codes - zero_point) * scale lies beyond float64's range "
                         "(max 1.79769e+308) for some element")
    return out


def quantize_int(x, bits: int, symmetric: bool = True, granularity: str = "tensor",
                 group: int | None = None, clip: float = 1.0, device=None) -> IntQuantized:
    """Quantize ``x`` to ``bits``-bit integers; the twin of :func:`numfmt.quantize_int`.

    Parameters
    ----------
    x : tensor or array_like of real numbers, shape (..., K), non-empty and finite
    bits, symmetric, granularity, group, clip
        As :func:`numfmt.quantize_int`.
    device : optional; default the device of ``x`` (a tensor) or the default device

    Returns
    -------
    IntQuantized of tensors on the device
        ``values`` (float64), ``codes`` (int64), ``scale`` (float64), ``zero_point`` (int64),
        shaped as in :func:`numfmt.quantize_int` and equal to its results element for element.

    Raises
    ------
    TypeError, ValueError
        As :func:`numfmt.quantize_int`.
    """
    shape = tuple(x.shape) if isinstance(x, torch.Tensor) else np.shape(x)
    x = calibration_input(x, device=device)  # float32 stays float32: widened exactly below
    qmin, qmax = int_range(bits, symmetric)
    clip = check_clip(clip)
    xg = x.reshape(grouped_view_shape(tuple(x.shape), granularity, group))
    tensor = granularity == "tensor"
    rows = xg.reshape(-1, 1) if tensor else xg.reshape(-1, xg.shape[-1])
    red = (1,) * xg.ndim if tensor else xg.shape[:-1] + (1,)
    if symmetric:
        if tensor:  # max |x| = max(max x, -min x): one pass, no |x| temporary
            mn, mx = torch.aminmax(rows)
            amax = torch.maximum(mx, -mn) + 0.0  # + 0.0: all zeros give +0, not -0
        else:
            amax = absmax_rows(rows)
        amax = amax.to(F64).reshape(red)  # exact
        scale = amax * (clip / qmax)
        _check_calibrated_scale(scale, amax > 0, clip)
        zero_point = torch.zeros(scale.shape, dtype=torch.int64, device=x.device)
        scale = torch.where(scale == 0, 1.0, scale)
    else:
        if tensor:  # one pass for both extremes
            mn, mx = (v.reshape(red).to(F64) for v in torch.aminmax(rows))
        else:  # two: aminmax(dim=-1) runs 3-4x slower than amin and amax
            mn, mx = (f(rows, dim=-1).reshape(red).to(F64) for f in (torch.amin, torch.amax))
        lo = torch.clamp(mn, max=0.0) * clip
        hi = torch.clamp(mx, min=0.0) * clip
        scale = _affine_scale(lo, hi, qmax, xp=torch)
        _check_calibrated_scale(scale, (mn != 0) | (mx != 0), clip)
        scale = torch.where(scale == 0, 1.0, scale)
        zero_point = torch.clamp(torch.round(-lo / scale), qmin, qmax).to(torch.int64)
        ends = torch.cat([(qmin - zero_point) * scale, (qmax - zero_point) * scale], dim=-1).abs()
        if not bool(torch.isfinite(ends).all()):
            raise ValueError("the asymmetric grid over x's range reaches beyond float64's range "
                             f"(an end of the grid is {float(ends.max()):.6g}); scale x down "
                             "or quantize it symmetrically")

    # The steps of numfmt.quantize_int in its order: the zero point is added and removed only
    # when asymmetric, so a symmetric code 0 from a small negative x dequantizes to -0.0.
    # In place on the result, one cache-sized chunk of rows at a time on the CPU.
    per_row = (rows.shape[0], 1)
    s_rows = (scale.reshape(1, 1) if tensor else scale.reshape(-1, 1)).expand(per_row)
    z_rows = (zero_point.reshape(1, 1) if tensor else zero_point.reshape(-1, 1)).expand(per_row)
    values = new_result(rows.numel(), F64, x.device).reshape(rows.shape)
    codes = new_result(rows.numel(), torch.int64, x.device).reshape(rows.shape)
    for i, j in spans(rows.shape[0], x.device, per=rows.shape[1]):
        q = values[i:j]
        q.copy_(rows[i:j])  # exact: float32 -> float64
        q.div_(s_rows[i:j]).round_()  # torch.round is round-half-to-even, as np.rint
        if not symmetric:
            q.add_(z_rows[i:j])
        q.clamp_(qmin, qmax)
        codes[i:j].copy_(q)
        if not symmetric:
            q.sub_(z_rows[i:j])
        q.mul_(s_rows[i:j])
    return IntQuantized(values.reshape(shape), codes.reshape(shape), scale, zero_point)
