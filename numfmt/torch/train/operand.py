"""Fake quantization of one GEMM operand under an :class:`~numfmt.torch.train.OperandSpec`."""

from __future__ import annotations

import math

import numpy as np
import torch

from numfmt.blocks import _block_scales as _np_block_scales
from numfmt.blocks import exact_scales
from numfmt.formats import FloatFormat
from numfmt.torch._core import absmax_rows
from numfmt.torch.blocks import _scaled_values32, block_scales
from numfmt.torch.formats import _stochastic_chunks
from numfmt.torch.train.hadamard import RHT_SIZE, apply_rht, random_hadamard
from numfmt.torch.train.recipes import _CASTS, OperandSpec


def quantize_operand(t: torch.Tensor, spec: OperandSpec, *, generator=None, amax=None,
                     scale=None, margin: int = 0, hadamard_matrix=None) -> torch.Tensor:
    """Fake-quantize one GEMM operand under ``spec``: its values on the grid, as float32.

    Parameters
    ----------
    t : torch.Tensor, float32 or float64, shape (rows, inner)
        The operand laid out with the GEMM's inner dimension last. A float64 operand (a float64
        emulation, see :class:`QuantLinear`) is quantized as its float32 rounding would be
        (after the RHT, which runs in float64), except under fp32, which leaves it unrounded.
    spec : OperandSpec
    generator : torch.Generator, optional
        Draws for stochastic rounding (on ``t``'s device) and, when ``hadamard_matrix`` is not
        given, the RHT's signs (a CPU generator).
    amax : float, optional
        Per-tensor amax to scale from instead of the tensor's own (delayed scaling):
        the scale is ``amax * 2**margin / fmt.max``.
    scale : float, optional
        The per-tensor dequantization scale itself (delayed scaling before any amax is known:
        TE starts from 1). Overrides ``amax``.
    margin : int, default 0
        Per-tensor scales only: the scale is ``2**margin`` times the amax-derived one.
    hadamard_matrix : torch.Tensor (16, 16), optional
        The RHT to apply when ``spec.rht`` (default: :func:`random_hadamard` from
        ``generator``).

    Returns
    -------
    torch.Tensor, float32 (float64 for a float64 ``t``), shape (rows, inner), on ``t``'s device
        fp32 returns ``t`` itself; bf16 and fp16 are torch's casts (``t.to(torch.bfloat16)``,
        IEEE overflow to Inf); scaled formats are numfmt.torch's quantizers: per tensor,
        ``tensor_scaled``'s exact scale ``amax / fmt.max`` (or the given one) and its scaled
        round; ``block_quantize``'s scales and scaled round for rows, 1 x k blocks and
        a x b tiles (each 1 x b segment under its tile's scale), bit for bit its values
        rounded to float32; for stochastic rounding, the same scales (``block_scales``)
        and numfmt.torch's stochastic rounding of ``x / scale`` with one float32 uniform
        draw per element from ``generator``, in row-major order. With ``spec.rht`` the values
        are those of the transformed operand (the GEMM consumes them; the transform cancels
        between the two wgrad operands). A non-finite operand under a scaled format gives NaN
        everywhere (a diverged run stays visibly diverged).

    Raises
    ------
    ValueError
        If ``t`` is not 2-D, a block does not divide the dimension it runs along (naming
        ``block``), the inner dimension is not a multiple of 16 for the RHT; naming the
        argument, if ``amax`` is negative, ``scale`` not positive and finite, or
        ``margin`` not an int >= 0.
    TypeError
        If ``spec`` is not an OperandSpec, or ``t`` is complex or boolean.
    """
    if not isinstance(spec, OperandSpec):
        raise TypeError(f"spec must be an OperandSpec, got {spec!r}")
    if not isinstance(t, torch.Tensor) or t.ndim != 2:
        raise ValueError(f"t must be a 2-D tensor (rows, inner), got "
                         f"{getattr(t, 'shape', type(t))}")
    if t.is_complex() or not (t.is_floating_point() or t.dtype in _INTEGERS):
        raise TypeError(f"t must be a real (floating-point or integer) tensor, got {t.dtype}")
    _check_scale_args(amax, scale, margin)
    t = t.detach()
    if t.numel() == 0:  # an empty operand (an empty batch): nothing to scale
        return t.to(torch.float64 if t.dtype == torch.float64 else torch.float32)
    out = torch.float64 if t.dtype == torch.float64 else torch.float32
    if spec.fmt == "fp32" and out == torch.float64:
        return t  # a float64 emulation's unquantized operand: nothing is rounded
    if spec.rht:
        if hadamard_matrix is None:
            hadamard_matrix = random_hadamard(RHT_SIZE, generator=_cpu(generator))
        t = apply_rht(t if out == torch.float64 else t.to(torch.float32), hadamard_matrix)
    if t.dtype != torch.float32:
        t = t.to(torch.float32)  # the operand as the FP32 activation or weight it would be
    return _quantize32(t, spec, generator, amax, scale, margin).to(out)


_INTEGERS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _check_scale_args(amax, scale, margin) -> None:
    """Refuse a per-tensor amax, scale or margin no quantization could use (numpy reals and
    one-element real tensors are accepted as Python numbers)."""
    def real(v):
        if isinstance(v, torch.Tensor):
            return v.numel() == 1 and not v.is_complex() and v.dtype != torch.bool
        return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
    if amax is not None and (not real(amax) or float(amax) < 0):
        raise ValueError(f"amax must be a non-negative number (Inf or NaN: a diverged "
                         f"operand), "
                         f"got {amax!r}")
    if scale is not None and (not real(scale) or not 0 < float(scale) < math.inf):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    if isinstance(margin, bool) or not isinstance(margin, (int, np.integer)) or margin < 0:
        raise ValueError(f"margin must be an int >= 0, got {margin!r}")


def _quantize32(t, spec, generator, amax, scale, margin):
    """quantize_operand's body for a float32 operand (after any RHT)."""
    if spec.scale_format == "none":
        dtype = _CASTS[spec.fmt]
        return t if dtype is None else t.to(dtype).to(torch.float32)
    t = t.contiguous()  # a transposed operand is laid out once (a no-op otherwise)
    rows, inner = t.shape
    _check_divides(spec, rows, inner)
    fmt = spec.format
    sr = spec.mode == "stochastic"
    try:
        if spec.block == "tensor":
            if scale is None:
                if amax is None:
                    amax = float(t.abs().amax())  # exact in float32
                if not math.isfinite(amax):
                    return torch.full_like(t, float("nan"))
                # tensor_scaled's scale: exact amax / max, 1 for an all-zero tensor
                scale = (float(exact_scales(np.array(float(amax)), fmt.max_value))
                         if amax > 0 else 1.0)
            full = torch.full((rows,), scale * 2.0**margin, dtype=torch.float64,
                              device=t.device)
            return _round_scaled(t, full, fmt, sr, generator)
        a, b = (1, inner) if spec.block == "row" else spec.block
        scale_format, rule = spec.scale_format, spec.scale_rule
        pow2 = scale_format == "e8m0"
        # block_quantize's steps for 1 x b blocks and a x b tiles alike: the block maxima
        # (exact in float32), block_quantize's scales for them, and each 1 x b segment
        # rounded under the scale of the tile it lies in (block_quantize itself would also
        # return float64 elements and values and count the clipped elements, which a GEMM
        # operand does not need).
        if a == 1:
            amax = absmax_rows(t.reshape(-1, b)).reshape(rows, inner // b)
        else:
            amax = t.reshape(rows // a, a, inner // b, b).abs().amax(dim=(1, 3))  # (R/a, C/b)
        if not bool(torch.isfinite(amax).all()):
            return torch.full_like(t, float("nan"))
        scales, tensor_scale = _block_scales_of(amax.to(torch.float64), fmt, scale_format,
                                                rule)
        if tensor_scale != 1.0:
            scales = scales * tensor_scale
        full = scales if a == 1 else scales[:, None, :].expand(rows // a, a, inner // b)
        full = full.reshape(-1)
        return _round_scaled(t.reshape(-1, b), full, fmt, sr, generator,
                             pow2).reshape(rows, inner)
    except ValueError:
        if bool(torch.isfinite(t).all()):
            raise
        return torch.full_like(t, float("nan"))


def _block_scales_of(amax: torch.Tensor, fmt: FloatFormat, scale_format: str, rule: str):
    """:func:`~numfmt.torch.block_scales` of the float64 block maxima ``amax``; on the CPU
    through numfmt's numpy namespace (the same body, :func:`numfmt.blocks._block_scales`,
    whose torch and numpy results this package's tests hold equal): on a few thousand block
    maxima numpy's per-call cost is a third of torch's."""
    if amax.device.type != "cpu":
        return block_scales(amax, fmt, scale_format, rule)
    scales, tensor_scale = _np_block_scales(amax.numpy(), fmt, scale_format, rule)
    return torch.from_numpy(np.asarray(scales, dtype=np.float64)), tensor_scale


def _cpu(generator):
    return generator if generator is None or generator.device.type == "cpu" else None


def _check_divides(spec: OperandSpec, rows: int, inner: int) -> None:
    if spec.block in ("tensor", "row"):
        return
    a, b = spec.block
    if inner % b or rows % a:
        raise ValueError(f"OperandSpec.block={spec.block!r} does not divide the operand "
                         f"(rows, inner) = ({rows}, {inner}): {a} must divide the rows and "
                         f"{b} the inner dimension")


def _round_scaled(blocks: torch.Tensor, full: torch.Tensor, fmt: FloatFormat, sr: bool,
                  generator, pow2: bool = False) -> torch.Tensor:
    """``round(x / s) * s`` for blocks (n, k) of float32 and scales ``full`` (n,) float64,
    as numfmt's scaled round (0 where the scale is 0); float32 values. ``pow2``: the scales
    are powers of two (numfmt then divides float32 input in float32, exactly)."""
    if not sr:  # numfmt.torch's chunked scaled round, as block_quantize and tensor_scaled
        return _scaled_values32(blocks, full, fmt, pow2)
    safe = torch.where(full > 0, full, 1.0)[:, None]
    y = blocks.to(torch.float64).div_(safe)
    # float32 uniforms (24 random bits, exact in float64) draw 2-3x faster than float64 ones;
    # the rounding's bias from their resolution is below 2^-24 of a grid step.
    # numfmt.torch.round(y, fmt, mode="stochastic", u=u) without its checks: y is finite (its
    # blocks' maxima were) and the draws lie in [0, 1) by construction.
    u = torch.rand(y.numel(), dtype=torch.float32, device=y.device, generator=generator)
    e = _stochastic_chunks(y.reshape(-1), fmt, u, True).reshape(y.shape)
    zero = full == 0
    if bool(zero.any()):  # a scale that underflowed: its block decodes to zeros
        e.masked_fill_(zero[:, None], 0.0)
    return e.mul_(safe).to(torch.float32)
