"""Block-scaled quantization on torch tensors: :mod:`numfmt.blocks`, bit for bit.

The block maxima, the scales (E8M0 powers of two for MX, E4M3 block scales under an FP32 tensor
scale for NVFP4, exact float64 scales) and tensor_scaled are :mod:`numfmt.blocks`'s own bodies;
only the chunked element rounding (:func:`_scaled_round`, and :func:`_scaled_values32`, its
values alone in float32 for numfmt.torch.train) is torch's, because the rounding kernels of
formats are twinned (ARCHITECTURE.md says why).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from numfmt.blocks import CLIP_TOLERANCE, _block_args, _block_result, _block_scales, _tensor_scaled
from numfmt.formats import FP4_E2M1, FloatFormat
from numfmt.torch._core import (F64, Scratch, absmax_rows, as_calibration_tensor,
                                calibration_input, new_result, spans)
from numfmt.torch.formats import _fpu_float64, _nearest_into
from numfmt.torch.formats import round as round_to

__all__ = ["BlockQuantized", "block_quantize", "mx_quantize", "nvfp4_quantize",
           "tensor_scaled"]


class BlockQuantized(NamedTuple):
    """:class:`numfmt.BlockQuantized` of tensors: its own type, so that numfmt.torch.gemm and
    numfmt.packing can tell a result on tensors from one on arrays."""

    values: torch.Tensor     #: dequantized, float64, shape of x
    elements: torch.Tensor   #: element values on the element grid, float64, shape of x
    scales: torch.Tensor     #: stored block scales, float64, shape x.shape[:-1] + (n_blocks,)
    tensor_scale: float      #: second-level FP32 scale (NVFP4); 1.0 where there is none
    clipped: float           #: fraction of elements whose |x / scale| exceeded elem.max_value
    bits_per_element: float  #: element bits + scale bits / block (tensor scale not counted)


def block_quantize(x, elem: FloatFormat, block: int, scale_format: str = "e8m0",
                   device=None, scale_rule: str = "floor") -> BlockQuantized:
    """:func:`numfmt.block_quantize` on tensors, plus ``device`` (default: the device of ``x``
    if a tensor, else the default device; before ``scale_rule`` here, so old calls keep
    working). ``values``, ``elements`` and ``scales`` are float64 tensors equal to the numpy
    arrays element for element. Raises as the numpy function, and for a meta tensor or a CUDA
    ``device`` without CUDA.

    A tensor that requires grad is accepted; the rounding is a step function, so the gradient
    of ``values`` with respect to ``x`` is exactly 0 almost everywhere (not a straight-through
    estimator: see :mod:`numfmt.torch.qat`).
    """
    shape = tuple(np.shape(x))
    grad = isinstance(x, torch.Tensor) and x.requires_grad and torch.is_grad_enabled()
    # float32 input is used as it is where that is exact, as numfmt.blocks does.
    x = as_calibration_tensor(x, device=device) if grad else calibration_input(x, device=device)
    elem, block = _block_args(elem, scale_format, scale_rule, x.shape[-1], block)
    xb = x.reshape(x.shape[:-1] + (x.shape[-1] // block, block))   # (..., n_blocks, block)
    amax = absmax_rows(x.detach().reshape(-1, block)).to(torch.float64).reshape(xb.shape[:-1])
    if grad:
        amax = xb.abs().amax(dim=-1).to(torch.float64)  # the graph of the exact scales
    return BlockQuantized(*_block_result(amax, x.reshape(-1, block), shape, elem, scale_format,
                                         scale_rule, _scaled_round))


def block_scales(amax: torch.Tensor, elem: FloatFormat, scale_format: str,
                 scale_rule: str = "floor") -> tuple[torch.Tensor, float]:
    """The stored block scales and the tensor scale :func:`block_quantize` chooses.

    ``amax`` holds the block maxima (float64, any shape, finite); returns the scales (float64,
    the shape of ``amax``) and the second-level FP32 tensor scale (1.0 except for "e4m3").
    No input checks: :func:`block_quantize` makes them (a caller that rounds the elements
    itself, e.g. stochastically, uses these scales). The one body is numfmt's, shared with
    numpy (:func:`numfmt.blocks._block_scales`).
    """
    return _block_scales(amax.detach(), elem, scale_format, scale_rule)


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


def _scaled_values32(xb: torch.Tensor, full: torch.Tensor, elem: FloatFormat,
                     pow2: bool) -> torch.Tensor:
    """``_scaled_round(xb, full, elem, pow2)[1].to(torch.float32)``, bit for bit, without the
    float64 elements, the float64 values or the clipped count: the dequantized values alone,
    for a caller that multiplies them in float32 (a training step's GEMM operands).

    The same arithmetic in the same order: the quotient (float32 times a power of two's exact
    reciprocal where :func:`_scaled_round` takes its float32 path, else float64), the same
    round to nearest even (:func:`_nearest_into`), zero where the scale is 0. Only the last
    product differs in where it is rounded: with a power-of-two scale ``2^k`` (|k| <= 127,
    a float32 number) the float32 product ``e * 2^k`` is the exact product rounded once to
    float32, and so is the float64 product (exact: ``e`` has at most 24 significant bits)
    cast to float32. Other scales multiply in float64 and round once to float32, as before.
    Falls back to :func:`_scaled_round` where its float64 rounding is not ``_nearest_into``'s
    or ``xb`` requires grad.
    """
    n, block = xb.shape
    f32 = pow2 and xb.dtype == torch.float32 and elem._float32_exact \
        and elem.min_subnormal / 2 >= 2.0**-126
    if xb.requires_grad or not (f32 or _fpu_float64(elem)):
        return _scaled_round(xb, full, elem, pow2)[1].to(torch.float32)
    if f32:
        # E8M0 scales are never 0 (an all-zero block gets 1): no zero mask. 2^-127 .. 2^127
        # and their reciprocals are float32 numbers, so both casts and the float32
        # reciprocal are exact.
        safe = full.to(torch.float32)[:, None]
        factor = 1.0 / safe
        # (a GPU never waits on a host round trip: it applies the mask unasked)
        zero, any_zero = None, xb.device.type != "cpu" or not bool((full > 0).all())
        if any_zero:
            safe = torch.where(safe > 0, safe, 1.0)
            factor = 1.0 / safe
            zero = (full == 0)[:, None]
    else:
        safe = torch.where(full > 0, full, 1.0)[:, None]                # (n, 1)
        zero = (full == 0)[:, None]
        any_zero = xb.device.type != "cpu" or bool(zero.any())
    out = torch.empty((n, block), dtype=torch.float32, device=xb.device)
    s = Scratch(xb.device)
    for i, j in spans(n, xb.device, per=block):
        o = out[i:j]
        if f32:
            y = s("y", torch.float32, (j - i) * block).view(j - i, block)
            torch.mul(xb[i:j], factor[i:j], out=y)
            _nearest_into(y.view(-1), o.view(-1), elem, True, s, finite=True)
            o.mul_(safe[i:j])
        else:
            y = s("y", F64, (j - i) * block).view(j - i, block)
            e = s("e", F64, (j - i) * block).view(j - i, block)
            y.copy_(xb[i:j])  # exact widening
            y.div_(safe[i:j])
            _nearest_into(y.view(-1), e.view(-1), elem, True, s, finite=True)
            e.mul_(safe[i:j])
            o.copy_(e)
        if any_zero:
            o.masked_fill_(zero[i:j], 0.0)
    return out


def mx_quantize(x, elem: FloatFormat, block: int = 32, device=None,
                scale_rule: str = "floor") -> BlockQuantized:
    """:func:`numfmt.mx_quantize` on tensors: an E8M0 scale per ``block`` (OCP MX v1.0,
    sections 5.3 and 6.3; ``scale_rule="rceil"``: Mishra et al., arXiv:2506.08027, 2025)."""
    return block_quantize(x, elem, block, "e8m0", device=device, scale_rule=scale_rule)


def nvfp4_quantize(x, block: int = 16, device=None) -> BlockQuantized:
    """:func:`numfmt.nvfp4_quantize` on tensors: E2M1, an E4M3 scale per 16, an FP32 tensor
    scale (NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference")."""
    return block_quantize(x, FP4_E2M1, block, "e4m3", device=device)


def tensor_scaled(x, elem: FloatFormat, device=None) -> BlockQuantized:
    """:func:`numfmt.tensor_scaled` on tensors (one exact scale ``amax / elem.max_value``);
    raises as :func:`block_quantize`."""
    return BlockQuantized(*_tensor_scaled(as_calibration_tensor(x, device=device),
                                          tuple(np.shape(x)), elem))
