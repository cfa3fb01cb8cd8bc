"""Quantizers for the real model, every one a call into numfmt.

Tensors go through ``numfmt.torch`` (``quantize_int``, ``block_quantize``, ``mx_quantize``,
``nvfp4_quantize``) on their own device, CPU or GPU: it is bit for bit numfmt on numpy (the
tests compare them), and on the CPU it is the faster of the two (benchmarks/bench_peers.py,
the row for lecture 08's weights); NF4 always goes through ``numfmt.packing.qlora`` on numpy.
Nothing here rounds a number itself: these are the settings of one experiment (format, bits,
granularity) and the bookkeeping of what each costs in bits.

Weights are (out, in) matrices, as ``torch.nn.Linear`` stores them, so "per channel" means one
scale per output row and groups run along the input axis, the axis of the dot product.
Scales are counted at 16 bits (an FP16 scale, as GPTQ and AWQ checkpoints store them) for the
integer and FP8 formats; numfmt keeps them exact in the emulation. MX and NVFP4 count their
real 8-bit E8M0 / E4M3 scales, NF4 its FP32 (or double-quantized 8-bit) absmax.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from numfmt import FP4_E2M1, FP8_E4M3
from numfmt.packing import qlora_bits_per_parameter, qlora_dequantize, qlora_quantize

WEIGHT_KINDS = ("int", "fp8", "mxfp4", "nvfp4", "nf4")
SCALE_BITS = 16          # bits of one stored scale (FP16) for the int and fp8 weight formats


def _lib(x):
    """numfmt.torch and ``x`` itself, on whatever device ``x`` lives."""
    import numfmt.torch as nt
    return nt, x.detach()


def _tensor(values, like):
    """numfmt's float64 result as a tensor on ``like``'s device."""
    import torch
    return torch.as_tensor(values, device=like.device)


@dataclass(frozen=True)
class WeightFormat:
    """A weight quantizer: call it on an (out, in) weight to get the dequantized weight.

    Attributes
    ----------
    label : str, for tables
    kind : {"int", "fp8", "mxfp4", "nvfp4", "nf4"}
    bits : int, for "int" (2 … 8)
    granularity : {"channel", "group"}, for "int" and "fp8" ("fp8" is per channel only)
    group : int, with "group". Where it does not divide the input size (128 into 576), each
        row's last group is shorter (see ``_padded_int``)
    symmetric : bool, for "int": signed grid, zero point 0; else unsigned with a zero point
    double_quant : bool, for "nf4": QLoRA's 8-bit absmax (numfmt.packing defaults)

    Examples
    --------
    ``WeightFormat("INT4 g128", "int", 4, "group", 128)(w)`` is
    ``numfmt.torch.quantize_int(w, 4, True, "group", 128).values`` reshaped to ``w.shape``.
    """

    label: str
    kind: str
    bits: int = 4
    granularity: str = "channel"
    group: int | None = None
    symmetric: bool = True
    double_quant: bool = False

    def __post_init__(self):
        if self.kind not in WEIGHT_KINDS:
            raise ValueError(f"kind must be one of {WEIGHT_KINDS}, got {self.kind!r}")
        if self.kind == "int" and (self.granularity == "group") != (self.group is not None):
            raise ValueError(f"{self.label}: group is needed with, and only with, "
                             f'granularity="group" (got {self.granularity!r}, {self.group!r})')

    def __call__(self, w, name: str | None = None):
        """Dequantized ``w`` (float64 tensor of w's shape, on w's device); ``name`` unused."""
        nf, a = _lib(w)
        if self.kind == "int":
            if self.granularity == "group" and w.shape[-1] % self.group:
                return _tensor(_padded_int(nf, a, self), w)
            r = nf.quantize_int(a, self.bits, self.symmetric, self.granularity, self.group)
            return _tensor(r.values, w)
        if self.kind == "fp8":
            return _tensor(nf.block_quantize(a, FP8_E4M3, w.shape[-1], "exact").values, w)
        if self.kind == "mxfp4":
            return _tensor(nf.mx_quantize(a, FP4_E2M1, 32).values, w)
        if self.kind == "nvfp4":
            return _tensor(nf.nvfp4_quantize(a, 16).values, w)
        arr = w.detach().cpu().double().numpy()
        return _tensor(qlora_dequantize(qlora_quantize(arr, double_quant=self.double_quant)), w)

    def bits_per_weight(self, k: int) -> float:
        """Storage bits per weight of one row of ``k`` inputs, metadata included."""
        if self.kind == "int":
            groups = 1 if self.granularity == "channel" else -(-k // self.group)
            return self.bits + groups * (SCALE_BITS + (0 if self.symmetric else self.bits)) / k
        if self.kind == "fp8":
            return 8 + SCALE_BITS / k
        if self.kind == "mxfp4":
            return 4 + 8 / 32
        if self.kind == "nvfp4":
            return 4 + 8 / 16
        return qlora_bits_per_parameter(double_quant=self.double_quant)


def _padded_int(nf, w, fmt: WeightFormat):
    """Groups that do not divide the row (128 into 576): pad each row with zeros to a multiple
    of the group, quantize, drop the padding. The last group of a row is then shorter (64 of
    576); zeros change neither its absmax nor, since numfmt's asymmetric range always contains
    0, its [min, max], so this *is* quantizing that shorter group on its own."""
    k = w.shape[-1]
    import torch
    wp = torch.nn.functional.pad(w, (0, -k % fmt.group))  # zeros: exact in any dtype
    r = nf.quantize_int(wp, fmt.bits, fmt.symmetric, "group", fmt.group)
    return r.values.reshape(wp.shape)[..., :k]


def model_bits_per_weight(fmt: WeightFormat, shapes) -> float:
    """Mean bits per weight over matrices of the given (out, in) ``shapes``, weighted by size."""
    total = sum(o * k for o, k in shapes)
    return sum(o * k * fmt.bits_per_weight(k) for o, k in shapes) / total


ACT_KINDS = ("int8", "fp8", "mxfp4", "nvfp4")


@dataclass(frozen=True)
class ActFormat:
    """An activation (or K/V) fake-quantizer on (rows, K) tensors.

    Attributes
    ----------
    label : str
    kind : {"int8", "fp8", "mxfp4", "nvfp4"}
    dynamic : bool
        True: scales from the tensor itself, one per row (per token; for "mxfp4"/"nvfp4" one
        per block of the row, their only mode). False ("int8"/"fp8" only): one static scale
        per linear, ``amax / qmax`` with the amax measured on calibration windows and given in
        ``amax`` (name -> float); values beyond it saturate.
    amax : dict, with dynamic=False
    """

    label: str
    kind: str
    dynamic: bool = True
    amax: dict | None = field(default=None, hash=False, compare=False)

    def __post_init__(self):
        if self.kind not in ACT_KINDS:
            raise ValueError(f"kind must be one of {ACT_KINDS}, got {self.kind!r}")
        if not self.dynamic and (self.kind not in ("int8", "fp8") or self.amax is None):
            raise ValueError(f"{self.label}: a static scale needs kind int8 or fp8 and amax")

    def __call__(self, x, name=None):
        """Dequantized ``x`` (float64 tensor of x's shape); ``name`` picks the static amax."""
        nf, a = _lib(x)
        if self.kind == "mxfp4":
            return _tensor(nf.mx_quantize(a, FP4_E2M1, 32).values, x)
        if self.kind == "nvfp4":
            return _tensor(nf.nvfp4_quantize(a, 16).values, x)
        if self.dynamic:
            if self.kind == "int8":
                return _tensor(nf.quantize_int(a, 8, granularity="channel").values, x)
            return _tensor(nf.block_quantize(a, FP8_E4M3, x.shape[-1], "exact").values, x)
        amax = float(self.amax[name])
        if self.kind == "int8":
            scale = amax / 127 if amax > 0 else 1.0
            return _tensor(nf.dequantize_affine(nf.quantize_affine(a, scale, 0, -127, 127),
                                                scale), x)
        scale = amax / FP8_E4M3.max_value if amax > 0 else 1.0
        return nf.round(nf.as_real_tensor(a) / scale, FP8_E4M3) * scale


def kv_quantizer(fmt: ActFormat, granularity: str = "token"):
    """A K/V quantizer for :func:`lectures.llm.hooks.quantized_kv` from a dynamic ActFormat.

    Parameters
    ----------
    fmt : ActFormat, dynamic
    granularity : {"token", "head"}
        "token": one scale per token and head (the D = 64 values of one head's vector; MX and
        NVFP4 blocks run along them). "head": one scale per head over the whole window
        (T × D values), for "int8" and "fp8".

    Returns
    -------
    callable (t, layer_index) -> tensor, t of shape (B, H, T, D). Each of the B sequences is
    quantized on its own, so a per-tensor scale (NVFP4's FP32 one) spans one window's H heads,
    whatever the batch size.
    """
    if not fmt.dynamic:
        raise ValueError("kv_quantizer needs a dynamic ActFormat")
    if granularity not in ("token", "head"):
        raise ValueError(f'granularity must be "token" or "head", got {granularity!r}')
    if granularity == "head" and fmt.kind not in ("int8", "fp8"):
        raise ValueError(f"{fmt.label}: per-head scales only for int8 and fp8")

    def quantize(t, layer_index=None):
        import torch

        _, h, n, d = t.shape
        shape = (h * n, d) if granularity == "token" else (h, n * d)
        return torch.stack([fmt(s.reshape(shape)).reshape(s.shape) for s in t])
    return quantize


__all__ = ["WeightFormat", "ActFormat", "kv_quantizer", "model_bits_per_weight",
           "WEIGHT_KINDS", "ACT_KINDS", "SCALE_BITS"]
