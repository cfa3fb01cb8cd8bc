"""Block-scaled quantization on torch tensors: the twin of :mod:`numfmt.blocks`, bit for bit.

Same scales (E8M0 powers of two for MX, E4M3 block scales under an FP32 tensor scale for NVFP4,
exact float64 scales), same element rounding, same order of float64 operations.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from numfmt._validate import check_block
from numfmt.blocks import (CLIP_TOLERANCE, SCALE_BITS, _check_elem, _check_scale_rule,
                           exact_scales, fp32_tensor_scale)
from numfmt.formats import E8M0, FP4_E2M1, FP8_E4M3, FloatFormat
from numfmt.torch._core import (F64, Scratch, absmax_rows, as_calibration_tensor,
                                calibration_input, floor_log2, new_result, pow2, spans)
from numfmt.torch.formats import _fpu_float64, _nearest_into
from numfmt.torch.formats import round as round_to

__all__ = ["BlockQuantized", "block_quantize", "mx_quantize", "nvfp4_quantize",
           "tensor_scaled"]


def _exact_scales(amax: torch.Tensor, max_value: float) -> torch.Tensor:
    """:func:`numfmt.blocks.exact_scales` itself, on tensors."""
    return exact_scales(amax, max_value, xp=torch)


class BlockQuantized(NamedTuple):
    """Result of a scaled quantization; ``values`` first, so ``result[0]`` is the tensor."""

    values: torch.Tensor     #: dequantized, float64, shape of x
    elements: torch.Tensor   #: element values on the element grid, float64, shape of x
    scales: torch.Tensor     #: stored block scales, float64, shape x.shape[:-1] + (n_blocks,)
    tensor_scale: float      #: second-level FP32 scale (NVFP4); 1.0 where there is none
    clipped: float           #: fraction of elements whose |x / scale| exceeded elem.max_value
    bits_per_element: float  #: element bits + scale bits / block (tensor scale not counted)


def _rceil_exponent(amax: torch.Tensor, elem: FloatFormat) -> torch.Tensor:
    """Twin of :func:`numfmt.blocks.e8m0_exponent` with ``scale_rule="rceil"`` (int64)."""
    f32 = torch.finfo(torch.float32)
    d = amax.to(torch.float32) * torch.tensor(1 / elem.max_value, dtype=torch.float32,
                                              device=amax.device)
    # Beyond FP32 (float64 input only): the top binade, clamped to E8M0's top below.
    bits = torch.where(torch.isfinite(d), d, f32.max).view(torch.int32).to(torch.int64)
    biased = (bits >> 23) & 0xFF
    mantissa = bits & 0x7FFFFF
    up = torch.where(biased == 0, mantissa > 0x400000, mantissa != 0)
    e = torch.where(biased == 0, torch.where(up, -126, -127), biased + up.to(torch.int64) - 127)
    return torch.clamp(e, E8M0.emin, E8M0.emax)


def block_quantize(x, elem: FloatFormat, block: int, scale_format: str = "e8m0",
                   device=None, scale_rule: str = "floor") -> BlockQuantized:
    """Quantize ``x`` to ``elem`` with one scale per ``block`` elements along the last axis.

    The torch twin of :func:`numfmt.block_quantize`: same parameters (plus ``device``), same
    shapes, and tensors equal to its arrays element for element.

    Parameters
    ----------
    x : tensor or array_like of real numbers, shape (..., K), non-empty and finite
    elem : FloatFormat, signed (e.g. FP4_E2M1)
    block : int dividing K
    scale_format : {"e8m0", "e4m3", "exact"}
    device : optional; default the device of ``x`` (a tensor) or the default device
    scale_rule : {"floor", "rceil"}, default "floor"
        As :func:`numfmt.block_quantize` (after ``device`` here, so old calls keep working).

    Returns
    -------
    BlockQuantized
        ``values``, ``elements`` (float64, shape of x) and ``scales`` (float64,
        ``x.shape[:-1] + (K // block,)``) as tensors; ``tensor_scale``, ``clipped`` and
        ``bits_per_element`` as Python floats.

    Raises
    ------
    TypeError
        If ``x`` is not real-valued, ``elem`` is not a signed FloatFormat, ``block`` not an int.
    ValueError
        If ``x`` is empty or non-finite, ``block`` does not divide K, ``scale_format`` or
        ``scale_rule`` is unknown (or "rceil" with a non-E8M0 scale), ``x`` is a meta
        tensor, or ``device`` is CUDA without CUDA.

    Notes
    -----
    A tensor that requires grad is accepted (no warning); the rounding is a step function,
    so the gradient of ``values`` with respect to ``x`` is exactly 0 almost everywhere for
    MX and NVFP4 alike (not a straight-through estimator: see :mod:`numfmt.torch.qat`).
    """
    shape = _shape_of(x)
    grad = isinstance(x, torch.Tensor) and x.requires_grad and torch.is_grad_enabled()
    # float32 input is used as it is where that is exact, as numfmt.blocks does.
    x = as_calibration_tensor(x, device=device) if grad else calibration_input(x, device=device)
    elem = _check_elem(elem)
    if scale_format not in SCALE_BITS:
        raise ValueError(f"scale_format must be one of {tuple(SCALE_BITS)}, got {scale_format!r}")
    _check_scale_rule(scale_rule, scale_format)
    block = check_block(x.shape[-1], block)
    xb = x.reshape(x.shape[:-1] + (x.shape[-1] // block, block))   # (..., n_blocks, block)
    amax = absmax_rows(x.detach().reshape(-1, block)).to(torch.float64).reshape(xb.shape[:-1])
    if grad:
        amax = xb.abs().amax(dim=-1).to(torch.float64)  # the graph of the exact scales
    scales, tensor_scale = block_scales(amax, elem, scale_format, scale_rule)
    full = scales * tensor_scale                                    # (..., n_blocks)
    elements, values, clipped = _scaled_round(x.reshape(-1, block), full.reshape(-1), elem,
                                              pow2=scale_format == "e8m0")
    return BlockQuantized(values.reshape(shape), elements.reshape(shape), scales,
                          tensor_scale, clipped, elem.bits + SCALE_BITS[scale_format] / block)


def block_scales(amax: torch.Tensor, elem: FloatFormat, scale_format: str,
                 scale_rule: str = "floor") -> tuple[torch.Tensor, float]:
    """The stored block scales and the tensor scale :func:`block_quantize` chooses.

    ``amax`` holds the block maxima (float64, any shape, finite); returns the scales (float64,
    the shape of ``amax``) and the second-level FP32 tensor scale (1.0 except for "e4m3").
    No input checks: :func:`block_quantize` makes them (a caller that rounds the elements
    itself, e.g. stochastically, uses these scales).
    """
    tensor_scale = 1.0
    if scale_format == "e8m0" and scale_rule == "rceil":
        exponent = _rceil_exponent(torch.where(amax > 0, amax, 1.0), elem)
        scales = torch.where(amax > 0, pow2(exponent), 1.0)
    elif scale_format == "e8m0":
        exponent = torch.clamp(floor_log2(amax) - elem.emax, E8M0.emin, E8M0.emax)
        scales = torch.where(amax > 0, pow2(exponent), 1.0)
    elif scale_format == "e4m3":
        t_amax = float(amax.detach().max())  # detach: no warning for a grad-requiring x
        if t_amax > 0:
            tensor_scale = fp32_tensor_scale(t_amax, elem)
        scales = round_to(amax / elem.max_value / tensor_scale, FP8_E4M3)
    else:
        scales = torch.where(amax > 0, _exact_scales(amax, elem.max_value), 1.0)
    return scales, tensor_scale


def _scaled_round(xb: torch.Tensor, full: torch.Tensor, elem: FloatFormat, pow2: bool):
    """The twin of ``numfmt.blocks._scaled_round``: elements, values and the clipped
    fraction, in cache-sized chunks of blocks on the CPU, the quotient in float32 where exact."""
    n, block = xb.shape
    f32 = pow2 and xb.dtype == torch.float32 and elem._float32_exact \
        and elem.min_subnormal / 2 >= 2.0**-126
    limit = float(np.float32(elem.max_value)) if f32 else elem.max_value * CLIP_TOLERANCE
    safe = torch.where(full > 0, full, 1.0)[:, None]                # (n, 1)
    zero = (full == 0)[:, None]
    if xb.requires_grad:  # out= cannot carry the graph: one pass without preallocated results
        y = xb.to(torch.float64) / safe if not f32 else xb / safe.to(torch.float32)
        e = torch.where(zero, 0.0, round_to(y, elem))
        return e, e * safe, int((y.detach().abs() > limit).sum()) / xb.numel()
    any_zero = xb.device.type != "cpu" or bool(zero.any())
    # A power of two 2^k (|k| <= 127) has an exact float32 reciprocal, so multiplying by it
    # gives the quotient's correctly rounded value, as dividing does (and runs faster).
    factor = (1.0 / safe).to(torch.float32) if f32 else safe
    fast = f32 or _fpu_float64(elem)
    elements = new_result(n * block, F64, xb.device).reshape(n, block)
    values = new_result(n * block, F64, xb.device).reshape(n, block)
    s = Scratch(xb.device)
    n_clipped = xb.new_zeros((), dtype=torch.float64)
    for i, j in spans(n, xb.device, per=block):
        e = elements[i:j]
        y = s("y", torch.float32 if f32 else F64, (j - i) * block).view(j - i, block)
        if f32:
            torch.mul(xb[i:j], factor[i:j], out=y)
        else:
            y.copy_(xb[i:j])  # exact widening
            y.div_(factor[i:j])
        if fast:
            if f32:
                f = s("f", torch.float32, y.numel())
                n_clipped += _nearest_into(y.view(-1), f, elem, True, s, above=limit,
                                           finite=True)
                e.view(-1).copy_(f)
            else:
                n_clipped += _nearest_into(y.view(-1), e.view(-1), elem, True, s, above=limit,
                                           finite=True)
        else:
            n_clipped += (y.abs() > limit).sum()
            e.copy_(round_to(y, elem))
        if any_zero:
            e.masked_fill_(zero[i:j], 0.0)
        torch.mul(e, safe[i:j], out=values[i:j])
    return elements, values, int(n_clipped) / xb.numel()


def _shape_of(x) -> tuple:
    """The shape of a tensor or array_like, before 0-d input is viewed as shape (1,)."""
    return tuple(x.shape) if isinstance(x, torch.Tensor) else np.shape(x)


def mx_quantize(x, elem: FloatFormat, block: int = 32, device=None,
                scale_rule: str = "floor") -> BlockQuantized:
    """OCP MX quantization (E8M0 scale per ``block``); the twin of :func:`numfmt.mx_quantize`.

    References: OCP Microscaling Formats (MX) Specification v1.0, sections 5.3 and 6.3;
    Mishra et al., arXiv:2506.08027, 2025 (``scale_rule="rceil"``).
    """
    return block_quantize(x, elem, block, "e8m0", device=device, scale_rule=scale_rule)


def nvfp4_quantize(x, block: int = 16, device=None) -> BlockQuantized:
    """NVFP4 (E2M1, E4M3 scale per 16, FP32 tensor scale); twin of :func:`numfmt.nvfp4_quantize`.

    References: NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision
    Inference", 2025.
    """
    return block_quantize(x, FP4_E2M1, block, "e4m3", device=device)


def tensor_scaled(x, elem: FloatFormat, device=None) -> BlockQuantized:
    """One exact scale ``amax / elem.max_value`` for the tensor; twin of :func:`numfmt.tensor_scaled`.

    Raises
    ------
    TypeError, ValueError
        As :func:`block_quantize`.
    """
    shape = _shape_of(x)
    x = as_calibration_tensor(x, device=device)
    elem = _check_elem(elem)
    amax = float(x.detach().abs().max())
    s = float(_exact_scales(torch.tensor(amax, dtype=torch.float64), elem.max_value)) \
        if amax > 0 else 1.0
    # s == 0: amax is a few float64 subnormals and the scale underflows; flush to zero.
    elements = round_to(x / s, elem) if s > 0 else torch.zeros_like(x)
    return BlockQuantized((elements * s).reshape(shape), elements.reshape(shape),
                          torch.ones(x.shape[:-1] + (1,), dtype=torch.float64, device=x.device),
                          s, 0.0, float(elem.bits))
