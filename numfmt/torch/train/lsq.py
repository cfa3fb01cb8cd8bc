"""Per-group integer fake quantization for fine-tuning: fixed scales (STE) and learned scales (LSQ).

A weight (out, K) on an asymmetric integer grid with one scale ``s`` and one zero point ``z``
per output row and group of input columns (GPTQ's layout: the groups run along K, the last
one may be shorter) dequantizes to ``(clamp(round(w / s) + z, qmin, qmax) - z) * s``. Two ways
to train through it:

* :func:`group_fake_quantize`: the scales and zero points are fixed (those of the PTQ result
  the fine-tuning starts from); the straight-through estimator passes the gradient to ``w``
  where the code was not clamped (Bengio et al. 2013; Jacob et al. 2018).
* :func:`lsq_fake_quantize`: the scales are learned too, with the gradient of learned step
  size quantization (Esser et al., "Learned Step Size Quantization", ICLR 2020, eq. 3 and
  section 2.2): ``∂v/∂s = round(w/s) - w/s`` inside the grid, ``qmin - z`` or ``qmax - z``
  where clipped (the regions on the unrounded ``w/s + z``, as the paper's), times the
  gradient scale ``g = 1 / sqrt(N · Q_P)`` (N weights per scale, ``Q_P = qmax``, the grid's
  largest code).

Scales pass through float16 in the forward pass (as a GPTQ checkpoint stores them), so the
model that trains is the one :func:`int_codes` exports; every value ``(q - z) · s`` with a
float16 ``s`` and a code of at most 8 bits is exact in float32. The divisions ``w / s`` are
float32's, in the forward pass and in :func:`int_codes` alike, so the codes exported are those
trained.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import nn

from numfmt.intquant import int_range
from numfmt.torch.train.linear import linear_in_input_dtype

__all__ = ["group_index", "int_codes", "group_fake_quantize", "lsq_fake_quantize",
           "lsq_gradient_scale", "GroupQuantLinear"]


def group_index(k: int, group: int) -> torch.Tensor:
    """The group of each of ``k`` input columns: ``arange(k) // group`` (int64, shape (k,)).

    Raises
    ------
    ValueError
        If ``k`` or ``group`` is not a positive integer.
    """
    for value, name in ((k, "k"), (group, "group")):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return torch.arange(int(k)) // int(group)


def _fp16(s: torch.Tensor) -> torch.Tensor:
    """``s`` rounded to float16 and back (its float32 dtype kept)."""
    return s.to(torch.float16).to(s.dtype)


def _segments(k: int, group: int) -> list:
    """(first column, end column, group size, first group, end group) of the full groups and,
    if ``group`` does not divide ``k``, of the shorter last group."""
    full = k // group * group
    segs = [(0, full, group, 0, full // group)] if full else []
    if full < k:
        segs.append((full, k, k - full, full // group, full // group + 1))
    return segs


def _by_group(f, w, *per_group):
    """Apply ``f(w_seg (out, n, g), *p_seg (out, n, 1))`` group-wise without expanding the
    per-group tensors to the weight's shape; join the outputs back to (out, K)."""
    out = None
    for a, b, g, j0, j1 in _segments(w.shape[1], per_group[-1]):
        res = f(w[:, a:b].reshape(w.shape[0], -1, g), *(p[:, j0:j1, None] for p in per_group[:-1]))
        res = [r.reshape(w.shape[0], b - a) for r in (res if isinstance(res, tuple) else (res,))]
        out = [[r] for r in res] if out is None else [o + [r] for o, r in zip(out, res)]
    joined = [torch.cat(parts, dim=1) for parts in out]
    return joined if len(joined) > 1 else joined[0]


def int_codes(w: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, qmin: int, qmax: int,
              group: int) -> torch.Tensor:
    """Integer codes ``clamp(rint(w / s) + z, qmin, qmax)``, int64 (out, K).

    Parameters
    ----------
    w : float32 tensor (out, K)
    scale : float tensor (out, G), G = ceil(K / group); used after a float16 rounding
    zero : integer or float tensor (out, G)
    qmin, qmax : the grid (``numfmt.int_range``)
    group : int, input columns per scale

    The division is float32's, as in the forward pass of :func:`group_fake_quantize` and
    :func:`lsq_fake_quantize`: these are the codes whose values the model trained with.
    """
    s = _fp16(scale.detach().float())
    return _by_group(lambda ws, ss, zs: (torch.round(ws / ss) + zs).clamp(qmin, qmax),
                     w.detach().float(), s, zero.detach().float(), group).long()


class _GroupSTE(torch.autograd.Function):
    """Fixed-scale fake quantization; backward: the gradient where the code was not clamped."""

    @staticmethod
    def forward(ctx, w, s, z, qmin, qmax, group):
        def f(ws, ss, zs):
            t = torch.round(ws / ss) + zs                                 # (out, n, g)
            return (t.clamp(qmin, qmax) - zs) * ss, (t >= qmin) & (t <= qmax)
        values, inside = _by_group(f, w, s, z, group)
        ctx.save_for_backward(inside)
        return values

    @staticmethod
    def backward(ctx, grad):
        (inside,) = ctx.saved_tensors
        return grad * inside, None, None, None, None, None


def _grid_columns(w, scale, zero, group, bits=None):
    """Check the shapes (and, given ``bits``, the values) of a per-group grid; return the
    group of each column."""
    for name, t in (("w", w), ("scale", scale), ("zero", zero)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if w.ndim != 2 or scale.ndim != 2 or tuple(scale.shape) != tuple(zero.shape):
        raise ValueError(f"w must be (out, K) and scale, zero (out, G), got {tuple(w.shape)}, "
                         f"{tuple(scale.shape)}, {tuple(zero.shape)}")
    if w.shape[0] < 1 or w.shape[1] < 1:
        raise ValueError(f"w must have at least one row and one column, got shape "
                         f"{tuple(w.shape)}")
    g = group_index(w.shape[-1], group)
    if scale.shape[0] != w.shape[0] or scale.shape[1] != int(g[-1]) + 1:
        raise ValueError(f"scale must have shape ({w.shape[0]}, {int(g[-1]) + 1}) for w of "
                         f"shape {tuple(w.shape)} and group={group}, got {tuple(scale.shape)}")
    if bits is not None:
        _check_grid_values(scale, zero, bits)
    return g


def _check_grid_values(scale, zero, bits) -> None:
    """Refuse scales that are not positive and finite in float16 (the storage the forward
    pass rounds them to: below 2^-25 a scale becomes 0, above 65504 Inf) and zero points
    off the grid [0, 2**bits - 1]."""
    s16 = scale.detach().to(torch.float16)
    if not bool(((s16 > 0) & torch.isfinite(s16)).all()):
        bad = scale.detach().flatten()[~((s16 > 0) & torch.isfinite(s16)).flatten()][0]
        raise ValueError(f"scale must be positive and finite in float16 (its storage: "
                         f"[2**-24, 65504]), got {float(bad)!r}")
    z = zero.detach()
    qmax = 2**bits - 1
    if z.is_floating_point() and not bool((z == torch.round(z)).all()):
        raise ValueError("zero must hold integers (zero points)")
    if not bool(((z >= 0) & (z <= qmax)).all()):
        raise ValueError(f"zero must lie in [0, {qmax}] for bits={bits}, got values in "
                         f"[{float(z.min())}, {float(z.max())}]")


def group_fake_quantize(w: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                        group: int) -> torch.Tensor:
    """Fake-quantize ``w`` on fixed per-group scales; differentiable in ``w`` through the STE.

    Parameters
    ----------
    w : float32 tensor (out, K), the master weights
    scale : float tensor (out, G), G = ceil(K / group); rounded to float16 before use
    zero : integer tensor (out, G), zero points in ``[0, 2**bits - 1]``
    bits : int, asymmetric grid ``[0, 2**bits - 1]`` (``numfmt.int_range(bits, False)``)
    group : int

    Returns
    -------
    float32 tensor of w's shape: ``(clamp(rint(w/s) + z, qmin, qmax) - z) * s`` (float32
    division; the product is exact); its gradient is the incoming one where
    ``qmin <= rint(w/s) + z <= qmax``, zero elsewhere.

    Raises
    ------
    ValueError
        If the shapes do not fit each other (or ``w`` is empty), ``bits`` is out of [2, 16],
        a scale is not positive and finite in float16, or a zero point lies off the grid.
    TypeError
        If ``w``, ``scale`` or ``zero`` is not a tensor.
    """
    qmin, qmax = int_range(bits, symmetric=False)
    _grid_columns(w, scale, zero, group, bits)
    return _GroupSTE.apply(w.float(), _fp16(scale.detach().float()), zero.detach().float(),
                           qmin, qmax, group)


def lsq_gradient_scale(group_sizes: torch.Tensor, qmax: int) -> torch.Tensor:
    """LSQ's gradient scale ``1 / sqrt(N · Q_P)`` per scale: float64, shape of ``group_sizes``.

    ``N`` is the number of weights that share the scale (the group's columns), ``Q_P = qmax``.
    Esser et al. 2020, section 2.2. Raises ValueError if ``qmax`` (Q_P) is not an int >= 1.
    """
    if isinstance(qmax, bool) or not isinstance(qmax, numbers.Integral) or qmax < 1:
        raise ValueError(f"qmax must be an int >= 1 (Q_P, the grid's largest code), "
                         f"got {qmax!r}")
    return 1.0 / torch.sqrt(group_sizes.double() * qmax)


class _LSQ(torch.autograd.Function):
    """Learned-step fake quantization (Esser et al. 2020, eq. 1-3), group by group."""

    @staticmethod
    def forward(ctx, w, s, z, qmin, qmax, group):
        def f(ws, ss, zs):
            u = ws / ss                                                    # (out, n, g)
            q = (torch.round(u) + zs).clamp(qmin, qmax)
            # the paper's regions, on the unrounded code u + z: inside, the STE passes the
            # gradient to w and ∂v/∂s = rint(u) - u; clipped, ∂v/∂s = qmin - z or qmax - z
            inside = (u + zs > qmin) & (u + zs < qmax)
            ds = torch.where(inside, torch.round(u) - u,
                             torch.where(u + zs <= qmin, qmin - zs, qmax - zs))
            return (q - zs) * ss, inside, ds
        values, inside, ds = _by_group(f, w, s, z, group)
        ctx.save_for_backward(inside, ds)
        ctx.qmax, ctx.group, ctx.n_groups = qmax, group, s.shape[1]
        return values

    @staticmethod
    def backward(ctx, grad):
        inside, ds = ctx.saved_tensors
        grad_s = []
        for a, b, g, _j0, _j1 in _segments(grad.shape[1], ctx.group):
            prod = (grad[:, a:b] * ds[:, a:b]).reshape(grad.shape[0], -1, g)
            grad_s.append(prod.sum(-1) / math.sqrt(g * ctx.qmax))       # (out, n)
        return grad * inside, torch.cat(grad_s, 1), None, None, None, None


def lsq_fake_quantize(w: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int,
                      group: int) -> torch.Tensor:
    """Fake-quantize ``w`` with learned per-group scales: differentiable in ``w`` and ``scale``.

    Forward: as :func:`group_fake_quantize` with ``scale`` rounded to float16 (the rounding is
    passed straight through to ``scale``'s gradient). Backward, with LSQ's regions on the
    unrounded code ``u = w/s + z``: ``w`` gets the gradient where ``qmin < u < qmax``; each
    scale gets ``g · Σ_group grad · ∂v/∂s`` (see the module notes).

    Parameters, Returns and Raises as :func:`group_fake_quantize`; ``scale`` must be positive
    and finite in float16, on every call (a learned scale that trains below 2^-24 raises).
    """
    qmin, qmax = int_range(bits, symmetric=False)
    _grid_columns(w, scale, zero, group, bits)
    s16 = scale + (_fp16(scale.detach()) - scale.detach())      # float16 forward, identity back
    return _LSQ.apply(w.float(), s16.float(), zero.detach().float(), qmin, qmax, group)


class GroupQuantLinear(nn.Module):
    """A linear layer whose weight is fake-quantized per group: QAT's float32 master weights.

    Parameters
    ----------
    weight : float tensor (out, K): the initial master weights (copied, float32, trainable)
    scale : float tensor (out, G): initial scales (float32; trainable when ``learn_scale``)
    zero : integer tensor (out, G): zero points (fixed)
    bits, group : the grid, as :func:`group_fake_quantize`
    bias : float tensor (out,) or None (kept in float32, frozen)
    learn_scale : bool, default False: False is QAT with the PTQ's scales fixed
        (:func:`group_fake_quantize`), True is LSQ (:func:`lsq_fake_quantize`)

    Raises
    ------
    ValueError
        If shapes do not fit, ``bits`` is out of range, a scale is not positive and finite
        in float16 (the forward pass's storage), or a zero point lies off the grid.
    """

    def __init__(self, weight, scale, zero, bits: int, group: int, bias=None,
                 learn_scale: bool = False):
        super().__init__()
        int_range(bits, symmetric=False)
        _grid_columns(weight, scale, zero, group, bits)
        self.bits, self.group, self.learn_scale = bits, group, bool(learn_scale)
        self.weight = nn.Parameter(weight.detach().float().clone())
        self.scale = nn.Parameter(scale.detach().float().clone(), requires_grad=self.learn_scale)
        self.register_buffer("zero", zero.detach().long().clone())
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]

    def quantized_weight(self) -> torch.Tensor:
        """The fake-quantized weight the forward pass uses, float32 (out, K)."""
        if self.learn_scale:
            return lsq_fake_quantize(self.weight, self.scale, self.zero, self.bits, self.group)
        return group_fake_quantize(self.weight, self.scale, self.zero, self.bits, self.group)

    def codes(self) -> torch.Tensor:
        """The integer codes of the current master weights, int64 (out, K)."""
        qmin, qmax = int_range(self.bits, symmetric=False)
        return int_codes(self.weight, self.scale, self.zero, qmin, qmax, self.group)

    def stored_scale(self) -> torch.Tensor:
        """The scales as they are used and stored: float16 (out, G)."""
        return self.scale.detach().to(torch.float16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x Ŵᵀ + b`` in ``x``'s dtype: the float32 values of Ŵ and b, exact in float64, so
        a float64 ``x`` gets a float64 product (the gradient reaches the float32 master
        weights rounded once, to float32)."""
        return linear_in_input_dtype(x, self.quantized_weight(), self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bits={self.bits}, group={self.group}, learn_scale={self.learn_scale}")

