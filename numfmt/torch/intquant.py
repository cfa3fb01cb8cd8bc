"""Integer quantization on torch tensors: :mod:`numfmt.intquant`'s own bodies, bit for bit.

This module checks tensors (device, float32 kept as float32) and calls the array-API bodies of
:mod:`numfmt.intquant`, so codes, scales, zero points and dequantized values are computed by
the same float64 operations in the same order as on numpy.
"""

from __future__ import annotations

import numpy as np
import torch

from numfmt._validate import as_integer_array
from numfmt.intquant import (IntQuantized, _affine_codes, _affine_values, _quantize_int)
from numfmt.torch._core import F64, as_real_tensor, calibration_input

__all__ = ["IntQuantized", "quantize_affine", "dequantize_affine", "quantize_int"]


def quantize_affine(x, scale, zero_point=0, qmin: int = -127, qmax: int = 127,
                    device=None) -> torch.Tensor:
    """:func:`numfmt.quantize_affine` on tensors: int64 codes, on ``device`` (default: the
    device of ``x`` if a tensor, else the default device). Raises as the numpy function."""
    x = as_real_tensor(x, device=device)
    return _affine_codes(x, _check_scale(scale, x.device), _integer_tensor(zero_point, x.device),
                         qmin, qmax)


def dequantize_affine(codes, scale, zero_point=0) -> torch.Tensor:
    """:func:`numfmt.dequantize_affine` on tensors: float64, on the device of ``codes`` (a
    tensor) or the default one. Raises as the numpy function."""
    codes = as_real_tensor(codes, "codes")
    return _affine_values(codes, _check_scale(scale, codes.device),
                          _integer_tensor(zero_point, codes.device))


def quantize_int(x, bits: int, symmetric: bool = True, granularity: str = "tensor",
                 group: int | None = None, clip: float = 1.0, device=None) -> IntQuantized:
    """:func:`numfmt.quantize_int` on tensors: an IntQuantized of tensors on ``device``
    (default: the device of ``x`` if a tensor, else the default device), equal element for
    element to the numpy result. Parameters and errors as the numpy function."""
    x, shape = calibration_input(x, device=device), tuple(np.shape(x))  # float32 stays float32
    return _quantize_int(x, shape, bits, symmetric, granularity, group, clip)


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
