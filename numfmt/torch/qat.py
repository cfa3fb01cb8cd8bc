"""Quantization-aware training on torch: a fake-quantize autograd Function and ``QATLinear``.

The weights of a :class:`QATLinear` are an ordinary ``nn.Parameter`` in float32: they are the
master weights, and any torch optimizer updates them. Every forward pass re-derives the
fake-quantized view of them (through :func:`numfmt.qat.fake_quantize_weight`, so the grid is
exactly the numpy one) and multiplies by the view; the backward pass hands the gradient straight
through to the master, masked where the clamp saturated.

Integer activation fake quantization runs in torch on the tensor's device; weight formats go
through numfmt's numpy path on the CPU (weights are small; the values are bit-identical to
numpy by construction).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from numfmt._validate import check_code_range, check_int, check_real_scalar
from numfmt.qat import WEIGHT_FORMATS, fake_quantize_weight, qparams_from_range

__all__ = ["FakeQuantizeSTE", "fake_quantize_int", "fake_quantize_weight_ste",
           "ActivationFakeQuant", "QATLinear"]


class FakeQuantizeSTE(torch.autograd.Function):
    """Integer fake quantization whose backward is the straight-through estimator.

    Forward: ``(clamp(round(x / scale) + zero_point, qmin, qmax) - zero_point) * scale`` with
    ``torch.round`` (round half to even). Backward: the incoming gradient where
    ``qmin <= round(x / scale) + zero_point <= qmax``, zero elsewhere (and for +-Inf).
    Same forward and mask as ``torch.fake_quantize_per_tensor_affine`` wherever ``x / scale``
    equals ``x * (1 / scale)`` in float32 (torch multiplies by the reciprocal).
    """

    @staticmethod
    def forward(ctx, x, scale: float, zero_point: int, qmin: int, qmax: int):
        t = torch.round(x / scale) + zero_point
        mask = (t >= qmin) & (t <= qmax)
        ctx.save_for_backward(mask)
        return (t.clamp(qmin, qmax) - zero_point) * scale

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return grad * mask, None, None, None, None


def fake_quantize_int(x: torch.Tensor, scale: float, zero_point: int, qmin: int,
                      qmax: int) -> torch.Tensor:
    """Fake-quantize a float tensor on an integer grid, differentiable through the STE.

    Parameters
    ----------
    x : torch.Tensor, floating point, any shape and device; NaN is refused
    scale : float > 0 (or a one-element floating-point tensor)
    zero_point, qmin, qmax : int with ``qmin <= qmax``

    Returns
    -------
    torch.Tensor of the shape, dtype and device of ``x``.

    Raises
    ------
    TypeError
        If ``x`` is not a floating-point tensor, ``scale`` not a real number, or
        ``zero_point``/``qmin``/``qmax`` not an integer.
    ValueError
        If ``scale`` is not positive and finite, ``qmin > qmax``, or ``x`` contains NaN.
    """
    _check_float_tensor(x)
    if isinstance(scale, torch.Tensor) and scale.numel() == 1 and scale.is_floating_point():
        scale = scale.item()
    scale = check_real_scalar(scale, "scale")
    zero_point = check_int(zero_point, "zero_point")
    qmin, qmax = check_code_range(qmin, qmax)
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be positive and finite, got {scale!r}")
    if torch.isnan(x).any():
        raise ValueError("x contains NaN: it has no place on the grid")
    return FakeQuantizeSTE.apply(x, scale, zero_point, qmin, qmax)


def _check_float_tensor(x) -> None:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        got = f"dtype {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"x must be a floating-point torch.Tensor, got {got}")
    if x.is_meta:
        raise ValueError("x is a meta tensor: it has a shape but no values to quantize")


class _MaskedStraightThrough(torch.autograd.Function):
    """Return precomputed ``values``; pass the gradient to ``x`` where ``mask`` is True."""

    @staticmethod
    def forward(ctx, x, values, mask):
        ctx.save_for_backward(mask)
        return values

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return grad * mask, None, None


def fake_quantize_weight_ste(w: torch.Tensor, fmt: str, axis: int | None = None) -> torch.Tensor:
    """Fake-quantize a weight tensor to a named format, differentiable through the STE.

    Parameters
    ----------
    w : torch.Tensor, floating point, shape (..., K), finite, any device
    fmt : str, one of :data:`numfmt.qat.WEIGHT_FORMATS` ("INT8", "INT4", "INT2", "E4M3", ...,
        "NVFP4")
    axis : int or None, the channel axis for per-channel scales (integer and float formats)

    Returns
    -------
    torch.Tensor of the shape, dtype and device of ``w``: the values of
    :func:`numfmt.qat.fake_quantize_weight` on ``w`` (computed in float64, then cast to
    ``w.dtype``); its gradient is the incoming one times that function's mask.

    Raises
    ------
    TypeError, ValueError
        As :func:`numfmt.qat.fake_quantize_weight`.
    """
    if not isinstance(w, torch.Tensor) or not w.is_floating_point():
        raise TypeError("w must be a floating-point torch.Tensor")
    fq = fake_quantize_weight(w.detach().cpu().double().numpy(), fmt, axis=axis)
    values = torch.from_numpy(fq.values).to(device=w.device, dtype=w.dtype)
    mask = torch.from_numpy(fq.mask).to(w.device)
    return _MaskedStraightThrough.apply(w, values, mask)


class ActivationFakeQuant(nn.Module):
    """Affine integer fake quantization of activations with a moving-average min/max range.

    In training mode each batch moves the range toward the batch's min and max by ``momentum``
    (the first batch sets it); in eval mode the stored range is used unchanged. A batch is
    always quantized with the range as updated by it, so calibration and QAT see the same grid.

    Parameters
    ----------
    bits : int in [2, 16], default 8
    momentum : float in (0, 1], default 0.1

    Raises
    ------
    TypeError
        If ``momentum`` is not a real number, or a batch is not a floating-point tensor.
    ValueError
        If ``momentum`` is out of range (``bits`` is checked by :func:`numfmt.int_range`), in
        eval mode before any range has been observed, or, in training mode, if a batch is
        empty, a meta tensor, or holds NaN or Inf. Every batch is checked before the running
        range takes it in: a refused batch leaves the stored range unchanged.

    References
    ----------
    Jacob et al., CVPR 2018, section 3.1 (exponential moving averages of activation ranges).
    """

    def __init__(self, bits: int = 8, momentum: float = 0.1):
        super().__init__()
        momentum = check_real_scalar(momentum, "momentum")
        if not 0 < momentum <= 1:
            raise ValueError(f"momentum must be in (0, 1], got {momentum!r}")
        qparams_from_range(0.0, 1.0, bits, symmetric=False)  # validates bits early
        self.bits, self.momentum = bits, momentum
        self.register_buffer("lo", torch.tensor(float("nan"), dtype=torch.float64))
        self.register_buffer("hi", torch.tensor(float("nan"), dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            # Check before the moving average takes the batch in: a refused batch (wrong dtype,
            # NaN or Inf) must leave the running range as it was.
            _check_float_tensor(x)
            if x.numel() == 0:
                raise ValueError("x is empty: there is nothing to calibrate a scale on")
            if not bool(torch.isfinite(x).all()):
                raise ValueError("x contains a non-finite value; a range calibrated on NaN or "
                                 "Inf would be meaningless")
            lo, hi = x.detach().min().double(), x.detach().max().double()
            if torch.isnan(self.lo):
                self.lo.copy_(lo)
                self.hi.copy_(hi)
            else:
                self.lo.lerp_(lo, self.momentum)
                self.hi.lerp_(hi, self.momentum)
        elif torch.isnan(self.lo):
            raise ValueError("activation range not calibrated: run batches in training mode")
        qp = qparams_from_range(self.lo.item(), self.hi.item(), self.bits, symmetric=False)
        return fake_quantize_int(x, float(qp.scale), int(qp.zero_point), qp.qmin, qp.qmax)


class QATLinear(nn.Linear):
    """``nn.Linear`` whose forward uses fake-quantized weights (and optionally activations).

    Parameters
    ----------
    in_features, out_features : int
    bias : bool, default True (the bias stays in float: it is accumulated at high precision)
    weight_format : str or None
        One of :data:`numfmt.qat.WEIGHT_FORMATS`, or None for float weights.
    weight_axis : int or None
        None: one scale per tensor; 0: one per output channel (integer and float formats).
    act_bits : int or None
        Bits of the affine fake quantization of the input activations, or None for none.
    device, dtype : passed to ``nn.Linear``

    Raises
    ------
    ValueError
        If ``weight_format`` is unknown (also what :class:`ActivationFakeQuant` raises).

    Notes
    -----
    ``self.weight`` is the float32 master; :meth:`quantized_weight` returns the view.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 weight_format: str | None = None, weight_axis: int | None = None,
                 act_bits: int | None = None, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        if weight_format is not None and weight_format not in WEIGHT_FORMATS:
            raise ValueError(f"weight_format must be None or one of {WEIGHT_FORMATS}, "
                             f"got {weight_format!r}")
        self.weight_format, self.weight_axis = weight_format, weight_axis
        self.act = ActivationFakeQuant(act_bits) if act_bits is not None else None

    @classmethod
    def from_linear(cls, linear: nn.Linear, weight_format: str | None = None,
                    weight_axis: int | None = None, act_bits: int | None = None) -> "QATLinear":
        """Return a QATLinear holding a copy of ``linear``'s weights and bias."""
        q = cls(linear.in_features, linear.out_features, linear.bias is not None, weight_format,
                weight_axis, act_bits, device=linear.weight.device, dtype=linear.weight.dtype)
        with torch.no_grad():
            q.weight.copy_(linear.weight)
            if linear.bias is not None:
                q.bias.copy_(linear.bias)
        return q

    def quantized_weight(self) -> torch.Tensor:
        """The fake-quantized view of the master weights (a detached tensor)."""
        with torch.no_grad():
            if self.weight_format is None:
                return self.weight.detach().clone()
            return fake_quantize_weight_ste(self.weight, self.weight_format, self.weight_axis)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.act is not None:
            x = self.act(x)
        w = self.weight
        if self.weight_format is not None:
            w = fake_quantize_weight_ste(w, self.weight_format, self.weight_axis)
        return F.linear(x, w, self.bias)

    def extra_repr(self) -> str:
        return (super().extra_repr() + f", weight_format={self.weight_format}, "
                f"weight_axis={self.weight_axis}, act_bits={None if self.act is None else self.act.bits}")
