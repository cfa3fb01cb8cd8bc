"""LoRA on a frozen base, the base in float32 or in QLoRA's NF4 storage (QLoRA).

LoRA (Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models", ICLR 2022, section
4.1) freezes a linear's weight W (out, in) and learns a low-rank update: the layer computes

    y = x Wᵀ + (α / r) · (x Aᵀ) Bᵀ,    A (r, in), B (out, r),

with A initialised at random (Kaiming-uniform, as peft does) and B at zero, so training starts
from the base model exactly. Only A and B (r · (in + out) numbers) get gradients and
optimizer state.

QLoRA (Dettmers et al., "QLoRA: Efficient Finetuning of Quantized LLMs", 2023, section 3)
stores the frozen W as NF4 codes in blocks of 64 with double-quantized absmax scales
(numfmt.packing.qlora) and dequantizes it on every forward pass; the adapters stay in higher
precision (here float32). :class:`NF4Weight` holds exactly the bytes of a
:class:`numfmt.packing.QLoRATensor` as torch buffers and dequantizes them on the tensor's
device with the same operations, in the same order, as :func:`numfmt.packing.qlora_dequantize`
(float64, then one rounding to float32): bit for bit its values.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch
from torch import nn

from numfmt.packing import DoubleQuantizedScales, QLoRATensor, qlora_quantize
from numfmt.torch.train.linear import linear_in_input_dtype

__all__ = ["NF4Weight", "LoRALinear", "lora_parameter_count"]


class NF4Weight(nn.Module):
    """A frozen weight in QLoRA storage (NF4 codes, absmax scales, optionally double-quantized).

    Build it with :meth:`from_qlora` (a :class:`numfmt.packing.QLoRATensor`) or
    :meth:`quantize` (a float weight). Buffers: ``data`` uint8 (ceil(size/2),) two codes per
    byte, element 2i in the high nibble; ``levels`` float64 (16,); with double quantization
    ``absmax_codes`` uint8 (n_blocks,), ``super_scales`` float32, ``offset`` float32 (),
    ``code_map`` float32 (256,); without, ``absmax`` float32 (n_blocks,).

    ``Module.to(dtype)`` (and ``.half()``, ``.bfloat16()``, ``.double()``) moves the buffers
    but keeps their dtypes: the codebook, absmax and super-scales stay as stored, as
    bitsandbytes keeps a ``Params4bit``'s quant_state (absmax, code) in float32 when a QLoRA
    model is cast to bfloat16, so the frozen weight does not move; :meth:`dequantize`
    rounds once, to the dtype it is asked for.

    Raises
    ------
    TypeError
        If :meth:`from_qlora` gets something else than a QLoRATensor, or INT8 second-level codes
        (only bitsandbytes' dynamic map is mirrored here).
    """

    def __init__(self, t: QLoRATensor):
        super().__init__()
        if not isinstance(t, QLoRATensor):
            raise TypeError(f"expected a numfmt.packing.QLoRATensor, got {type(t).__name__}")
        self.shape, self.block, self.size = tuple(t.shape), int(t.block), t.size
        self.nbytes = t.nbytes                                   # what the storage costs
        self.register_buffer("data", torch.from_numpy(t.data.copy()))
        self.register_buffer("levels", torch.from_numpy(np.asarray(t.levels, np.float64)))
        self.double_quant = isinstance(t.absmax, DoubleQuantizedScales)
        if self.double_quant:
            dq = t.absmax
            if dq.code_map is None:
                raise TypeError("NF4Weight mirrors the dynamic-map double quantization only")
            self.scale_block = int(dq.block)
            self.register_buffer("absmax_codes", torch.from_numpy(dq.codes.copy()))
            self.register_buffer("super_scales", torch.from_numpy(dq.super_scales.copy()))
            self.register_buffer("offset", torch.tensor(np.float32(dq.offset)))
            self.register_buffer("code_map", torch.from_numpy(dq.code_map.copy()))
        else:
            self.register_buffer("absmax", torch.from_numpy(np.asarray(t.absmax).copy()))

    @classmethod
    def from_qlora(cls, t: QLoRATensor) -> "NF4Weight":
        """The torch mirror of a QLoRATensor (its arrays copied into buffers)."""
        return cls(t)

    @classmethod
    def quantize(cls, w, double_quant: bool = True) -> "NF4Weight":
        """``w`` (a float tensor or array) stored by :func:`numfmt.packing.qlora_quantize`
        with its defaults (NF4, blocks of 64, dynamic-map double quantization of the absmax)."""
        arr = w.detach().cpu().double().numpy() if isinstance(w, torch.Tensor) else w
        return cls(qlora_quantize(arr, double_quant=double_quant))

    def _apply(self, fn, recurse=True):
        """Module.to/cuda/half/...: each buffer goes where ``fn`` sends it, in its own dtype."""
        for k, t in self._buffers.items():
            if t is not None:
                self._buffers[k] = t.to(fn(t).device)
        return self

    def _codes(self) -> torch.Tensor:
        d = self.data.long()
        pairs = torch.stack([d >> 4, d & 0xF], dim=1)            # (bytes, 2): high nibble first
        return pairs.reshape(-1)[: self.size]

    def absmax_values(self) -> torch.Tensor:
        """The block absmax as reconstructed, float64 (n_blocks,): ``map[c] · s + mean`` with
        double quantization (:func:`numfmt.packing.double_dequantize`), else the FP32 absmax."""
        if not self.double_quant:
            return self.absmax.double()
        n = self.absmax_codes.numel()
        block_of = torch.arange(n, device=self.data.device) // self.scale_block
        values = self.code_map.double()[self.absmax_codes.long()]
        return values * self.super_scales.double()[block_of] + self.offset.double()

    def dequantize(self, dtype=torch.float32) -> torch.Tensor:
        """The weight, shape ``self.shape``: ``levels[code] · absmax[block]`` in float64, then
        ``dtype`` (float64 gives :func:`numfmt.packing.qlora_dequantize`'s array bit for bit)."""
        block_of = torch.arange(self.size, device=self.data.device) // self.block
        values = self.levels[self._codes()] * self.absmax_values()[block_of]
        return values.reshape(self.shape).to(dtype)

    def extra_repr(self) -> str:
        return f"shape={self.shape}, block={self.block}, double_quant={self.double_quant}"


def _check_rank(rank, out_features: int, in_features: int) -> int:
    if isinstance(rank, (bool, np.bool_)) or not isinstance(rank, numbers.Integral) or rank < 1:
        raise ValueError(f"rank must be a positive integer (Python or numpy), got {rank!r}")
    rank = int(rank)
    if rank > min(out_features, in_features):
        raise ValueError(f"rank must be at most min(out, in) = {min(out_features, in_features)} "
                         f"for a ({out_features}, {in_features}) layer, got {rank}")
    return rank


class LoRALinear(nn.Module):
    """``y = x Wᵀ + b + (α / r) · (x Aᵀ) Bᵀ`` with W frozen (float32 tensor or NF4Weight).

    Parameters
    ----------
    base : float tensor (out, in), or :class:`NF4Weight` (dequantized on every forward pass)
    rank : int, 1 <= rank <= min(out, in)
    alpha : float > 0, the scale numerator (the update is multiplied by alpha / rank)
    bias : float tensor (out,) or None, frozen
    generator : torch.Generator, optional, for A's initialisation (seeded runs)

    Attributes
    ----------
    lora_A : Parameter float32 (rank, in), Kaiming-uniform with a = sqrt(5) (peft's default)
    lora_B : Parameter float32 (out, rank), zeros
    scaling : float, alpha / rank

    Raises
    ------
    ValueError
        If ``rank`` is not an integer in [1, min(out, in)] (numpy integers accepted),
        ``alpha`` is not a positive finite real (numpy reals accepted), ``base`` is not
        two-dimensional, or ``bias`` is not (out,).
    TypeError
        If ``base`` is neither a floating-point tensor nor an NF4Weight.
    """

    def __init__(self, base, rank: int, alpha: float, bias=None, generator=None):
        super().__init__()
        if isinstance(base, NF4Weight):
            shape = base.shape
            self.base = base
        elif isinstance(base, torch.Tensor) and base.is_floating_point():
            shape = tuple(base.shape)
            # the caller's tensor itself (no copy: a frozen float base costs nothing extra)
            self.register_buffer("base_weight", base.detach().float())
            self.base = None
        else:
            raise TypeError(f"base must be a float tensor or an NF4Weight, got "
                            f"{type(base).__name__}")
        if len(shape) != 2:
            raise ValueError(f"base must be (out, in), got shape {shape}")
        out_features, in_features = shape
        self.rank = _check_rank(rank, out_features, in_features)
        if (isinstance(alpha, (bool, np.bool_)) or not isinstance(alpha, numbers.Real)
                or not 0 < float(alpha) < math.inf):
            raise ValueError(f"alpha must be a positive finite number, got {alpha!r}")
        if bias is not None and (not isinstance(bias, torch.Tensor)
                                 or tuple(bias.shape) != (out_features,)):
            raise ValueError(f"bias must be a tensor of shape ({out_features},) (out), got "
                             f"{tuple(getattr(bias, 'shape', ())) or type(bias).__name__}")
        rank = self.rank
        self.alpha, self.scaling = float(alpha), float(alpha) / rank
        self.in_features, self.out_features = in_features, out_features
        device = (base.data if isinstance(base, NF4Weight) else base).device
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())
        a = torch.empty(rank, in_features, device=device)
        # kaiming_uniform_(a=sqrt(5)) draws U(-1/sqrt(in), 1/sqrt(in)): peft's and nn.Linear's
        bound = 1.0 / math.sqrt(in_features)
        a.uniform_(-bound, bound, generator=generator)
        self.lora_A = nn.Parameter(a)
        self.lora_B = nn.Parameter(torch.zeros(out_features, rank, device=device))

    def base_weight_value(self) -> torch.Tensor:
        """The frozen W as the forward pass uses it, float32 (out, in)."""
        return self.base.dequantize() if self.base is not None else self.base_weight

    def merged_weight(self) -> torch.Tensor:
        """``W + (α/r) · B A``, float32 (out, in), detached: the weight after merging."""
        with torch.no_grad():
            return self.base_weight_value() + self.scaling * (self.lora_B @ self.lora_A)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x Wᵀ + b + (α/r) · (x Aᵀ) Bᵀ`` in ``x``'s dtype: W, b, A and B hold float32
        values, exact in float64, so a float64 ``x`` gets float64 products (A's and B's
        gradients are rounded once, to float32)."""
        y = linear_in_input_dtype(x, self.base_weight_value(), self.bias)  # frozen path
        xa = linear_in_input_dtype(x, self.lora_A)                           # (..., r)
        return y + self.scaling * linear_in_input_dtype(xa, self.lora_B)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"rank={self.rank}, alpha={self.alpha}")


def lora_parameter_count(shapes, rank: int) -> int:
    """Trainable numbers of LoRA adapters of rank ``rank`` on (out, in) ``shapes``:
    ``Σ rank · (out + in)``. Raises ValueError for a rank larger than a layer allows."""
    return sum(_check_rank(rank, o, i) * (o + i) for o, i in shapes)
