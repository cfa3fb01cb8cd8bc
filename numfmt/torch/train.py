"""Training in low precision: recipes as data, a linear layer whose three GEMMs quantize their
operands, and a dynamic loss scaler.

A linear layer ``y = x Wᵀ`` runs three GEMMs per training step::

    fprop  y  = x  Wᵀ    operands (x, W)    inner dimension in_features
    dgrad  dx = dy W     operands (dy, W)   inner dimension out_features (W is used transposed)
    wgrad  dW = dyᵀ x    operands (dy, x)   inner dimension tokens

A :class:`Recipe` says, for each of the six operands, how it is quantized (an
:class:`OperandSpec`: element format, block shape along the GEMM's inner dimension, scale
format and rule, current or delayed scaling, rounding, random Hadamard transform). Every operand
is given to :func:`quantize_operand` laid out as ``(rows, inner)``: a block ``(1, k)`` is k
consecutive elements along the inner dimension, so W is blocked along in_features for fprop but
along out_features for dgrad, and x and dy are blocked along the tokens for wgrad. A ``(k, k)``
tile is square, so ``Q(W)ᵀ == Q(Wᵀ)``: one quantized weight serves fprop and dgrad.

The quantizers are numfmt.torch's own, as :func:`~numfmt.torch.block_quantize` runs them:
its two halves (``block_scales`` for the scales, its scaled round for the elements, which
here returns the float32 values alone) for 1 x k blocks, 2-D tiles and per-tensor scales
(:func:`~numfmt.torch.tensor_scaled`'s exact scale, or delayed scaling's), and numfmt.torch's
stochastic rounding kernel for stochastic rounding. This module lays operands out, keeps
delayed scaling's history and checks the results against numfmt's numpy quantizers in its
tests. The operands are fake-quantized: dequantized values on the grid, rounded once to
float32 (exact for power-of-two scales and plain casts; within half a float32 ulp where the
scale is an arbitrary FP32 number), then multiplied in float32 as tensor cores accumulate.
Master weights, their gradients and the optimizer state stay float32.

:data:`RECIPES` holds the recipes by the names TransformerEngine gives them (see each entry);
:func:`nvfp4_recipe` builds NVFP4 with each of the paper's techniques switchable.

References
----------
NVIDIA TransformerEngine, ``transformer_engine/common/recipe/__init__.py`` (DelayedScaling,
Float8CurrentScaling, Float8BlockScaling, MXFP8BlockScaling, NVFP4BlockScaling) and
``transformer_engine/common/recipe/delayed_scaling.cu`` (the amax history update).
NVIDIA, "Pretraining Large Language Models with NVFP4", arXiv:2509.25149, 2025, section 4.
DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437, 2024, section 3.3.
Mishra et al., "Recipes for Pre-training LLMs with MXFP8", arXiv:2506.08027, 2025.
Micikevicius et al., "Mixed Precision Training", ICLR 2018 (loss scaling).
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from numfmt.blocks import _block_scales as _np_block_scales
from numfmt.blocks import exact_scales
from numfmt.formats import FORMATS, FP32, FloatFormat
from numfmt.torch._core import absmax_rows
from numfmt.torch.blocks import _scaled_values32, block_scales
from numfmt.torch.formats import _stochastic_chunks, _stochastic_fast_ok

__all__ = ["OperandSpec", "Recipe", "RECIPES", "HIGH_PRECISION_LAYERS", "nvfp4_recipe",
           "fp8_recipe", "get_recipe", "quantize_operand", "random_hadamard", "hadamard",
           "apply_rht", "AmaxHistory",
           "QuantLinear", "DynamicLossScaler", "GEMMS", "OPERANDS"]

#: The three GEMMs of a linear layer and the names of their two operands, in recipe order.
GEMMS = ("fprop", "dgrad", "wgrad")
OPERANDS = {"fprop": ("x", "w"), "dgrad": ("dy", "w"), "wgrad": ("dy", "x")}

SCALES = ("none", "fp32", "e8m0_floor", "e8m0_rceil", "e4m3")
SCALINGS = ("current", "delayed")
ROUNDINGS = ("nearest", "stochastic")
#: Bits one stored scale costs, by scale kind.
SCALE_BITS = {"none": 0, "fp32": 32, "e8m0_floor": 8, "e8m0_rceil": 8, "e4m3": 8}
#: Element formats a plain cast (scale "none") applies to: torch casts them natively.
_CASTS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
#: Size of the random Hadamard transform (the NVFP4 paper, section 4; TE: 16 x 16).
RHT_SIZE = 16


_BY_NAME: dict = {}


def _format(name: str) -> FloatFormat:
    """The numfmt FloatFormat of a spec's ``fmt`` (lower-case key); the lower-cased table is
    built once (and again for a name it lacks), not on each of a step's quantizations."""
    if name == "fp32":
        return FP32
    if name not in _BY_NAME:
        _BY_NAME.update({k.lower(): f for k, f in FORMATS.items()})
    return _BY_NAME[name]


def _format_names() -> tuple[str, ...]:
    return ("fp32",) + tuple(k.lower() for k, f in FORMATS.items() if f.signed)


@dataclass(frozen=True)
class OperandSpec:
    """How one operand of one GEMM is quantized.

    Parameters
    ----------
    fmt : str, default "fp32"
        Element format, a name of :data:`numfmt.FORMATS` (case-insensitive: "e4m3", "e5m2",
        "e2m1", "bf16", "fp16", ...) or "fp32" (left as it is).
    block : "tensor", "row" or tuple (a, b), default "tensor"
        What shares one scale, on the operand laid out as (rows, inner): the whole tensor, one
        row (all of the inner dimension), or tiles of a rows by b inner elements: ``(1, k)``
        blocks along the inner dimension, ``(k, k)`` 2-D tiles. An int k means ``(1, k)``.
    scale : {"none", "fp32", "e8m0_floor", "e8m0_rceil", "e4m3"}, default "none"
        "none": a plain cast (fp32, bf16, fp16 only). "fp32": the scale ``amax / fmt.max``
        (numfmt's exact scale, an FP32-stored ideal). "e8m0_floor" / "e8m0_rceil": OCP MX
        power-of-two scales, floor rule (OCP MX v1.0 section 6.3) or rounded up (RCEIL,
        Mishra et al. 2025). "e4m3": E4M3 block scales under an FP32 tensor scale (NVFP4).
    scaling : {"current", "delayed"}, default "current"
        Delayed: the scale comes from the amax history of earlier steps (per-tensor "fp32"
        scales only; see :class:`AmaxHistory`).
    rounding : {"nearest", "stochastic"}, default "nearest"
        Round-to-nearest-even or stochastic rounding of the elements (scaled formats only).
    rht : bool, default False
        A 16 x 16 random Hadamard transform along the inner dimension before quantizing (the
        wgrad operands only, both or neither: they must share the transform to cancel).

    Raises
    ------
    ValueError
        Naming the field: an unknown format, scale, scaling or rounding; a block that is not
        "tensor", "row" or positive ints; a scale that does not fit the format ("none" with an
        8-bit format, "fp32" with bf16, "e4m3" block scales with 8-bit elements); delayed
        scaling other than per tensor; stochastic rounding of a plain cast.
    """

    fmt: str = "fp32"
    block: str | tuple = "tensor"
    scale: str = "none"
    scaling: str = "current"
    rounding: str = "nearest"
    rht: bool = False

    def __post_init__(self):
        if not isinstance(self.fmt, str) or self.fmt.lower() not in _format_names():
            raise ValueError(f"OperandSpec.fmt must be one of {_format_names()}, got {self.fmt!r}")
        object.__setattr__(self, "fmt", self.fmt.lower())
        object.__setattr__(self, "block", _check_block_field(self.block))
        for name, allowed in (("scale", SCALES), ("scaling", SCALINGS),
                              ("rounding", ROUNDINGS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"OperandSpec.{name} must be one of {allowed}, "
                                 f"got {getattr(self, name)!r}")
        if not isinstance(self.rht, bool):
            raise ValueError(f"OperandSpec.rht must be a bool, got {self.rht!r}")
        cast = self.fmt in _CASTS
        if cast != (self.scale == "none"):
            raise ValueError(
                f"OperandSpec.scale={self.scale!r} does not fit fmt={self.fmt!r}: fp32, bf16 and "
                "fp16 are plain casts (scale='none'); narrower formats need a scale")
        if self.scale == "none" and self.block != "tensor":
            raise ValueError(f"OperandSpec.block={self.block!r} needs a scale; a plain cast "
                             "(scale='none') has block='tensor'")
        if self.scale == "e4m3" and _format(self.fmt).bits > 6:
            raise ValueError(f"OperandSpec.scale='e4m3' (NVFP4's E4M3 block scales) does not fit "
                             f"fmt={self.fmt!r}: it is for 4- and 6-bit elements such as e2m1")
        if self.scale == "e4m3" and self.block == "tensor":
            raise ValueError("OperandSpec.block='tensor' with scale='e4m3': E4M3 scales are "
                             "block scales under an FP32 tensor scale; use scale='fp32'")
        if self.scaling == "delayed" and (self.block != "tensor" or self.scale != "fp32"):
            raise ValueError("OperandSpec.scaling='delayed' keeps an amax history of a whole "
                             f"tensor: it needs block='tensor' and scale='fp32', got "
                             f"block={self.block!r}, scale={self.scale!r}")
        if self.rounding == "stochastic" and (cast or not _stochastic_fast_ok(self.format)):
            raise ValueError(f"OperandSpec.rounding='stochastic' is not available for "
                             f"fmt={self.fmt!r}; it applies to scaled signed formats with "
                             "subnormals (e4m3, e5m2, e2m1, ...), not to the plain casts")

    @property
    def format(self) -> FloatFormat:
        """The numfmt FloatFormat of the elements."""
        return _format(self.fmt)

    def bits_per_element(self, inner: int, rows: int | None = None) -> float:
        """Element bits plus the scale bits amortised over the elements that share a scale.

        ``inner`` is the length of the inner dimension (a "row" block); ``rows`` the number of
        rows, for a per-tensor scale (without it the tensor scale is not counted, as numfmt
        counts none for NVFP4's tensor scale either).
        """
        bits = float(self.format.bits)
        per = SCALE_BITS[self.scale]
        if self.block == "tensor":
            return bits + (per / (inner * rows) if rows else 0.0)
        if self.block == "row":
            return bits + per / inner
        a, b = self.block
        return bits + per / (a * b)

    def describe(self) -> str:
        """A short label such as "E4M3 1x128 fp32" or "E2M1 16x16 e4m3 SR"."""
        if self.scale == "none":
            return self.fmt.upper()
        blk = self.block if isinstance(self.block, str) else f"{self.block[0]}x{self.block[1]}"
        parts = [self.fmt.upper(), blk, self.scale]
        if self.scaling == "delayed":
            parts.append("delayed")
        if self.rounding == "stochastic":
            parts.append("SR")
        if self.rht:
            parts.append("RHT")
        return " ".join(parts)


def _check_block_field(block):
    if isinstance(block, str):
        if block not in ("tensor", "row"):
            raise ValueError(f"OperandSpec.block must be 'tensor', 'row' or a tuple (a, b), "
                             f"got {block!r}")
        return block
    if isinstance(block, int) and not isinstance(block, bool):
        block = (1, block)
    if (isinstance(block, (tuple, list)) and len(block) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in block)):
        return tuple(block)
    raise ValueError(f"OperandSpec.block must be 'tensor', 'row' or a tuple of two positive "
                     f"ints, got {block!r}")


# ------------------------------------------------------------------------------------ recipes
@dataclass(frozen=True)
class Recipe:
    """What each operand of each of a linear layer's three GEMMs is quantized to.

    Parameters
    ----------
    name : str
    fprop : (OperandSpec, OperandSpec)
        ``y = x Wᵀ``: specs of (x, W); inner dimension in_features.
    dgrad : (OperandSpec, OperandSpec)
        ``dx = dy W``: specs of (dy, W); inner dimension out_features (W laid out as Wᵀ).
    wgrad : (OperandSpec, OperandSpec)
        ``dW = dyᵀ x``: specs of (dy, x); inner dimension the tokens.
    high_precision_layers : tuple of str
        fnmatch patterns of layer names that run the BF16 recipe instead.
    loss_scaling : bool
        Whether the training loop should use a :class:`DynamicLossScaler` (FP16).
    amax_history : int
        Length of the amax history of delayed scaling (TE's ``amax_history_len``).
    margin : int
        Delayed and current per-tensor scaling: ``scale = fmt.max / amax / 2**margin``.

    Raises
    ------
    TypeError
        If a GEMM's field is not a pair of OperandSpec.
    ValueError
        Naming the field: an RHT outside wgrad or on one wgrad operand only, an amax history
        shorter than 1, a negative margin, patterns that are not strings.
    """

    name: str
    fprop: tuple = (OperandSpec(), OperandSpec())
    dgrad: tuple = (OperandSpec(), OperandSpec())
    wgrad: tuple = (OperandSpec(), OperandSpec())
    high_precision_layers: tuple = ()
    loss_scaling: bool = False
    amax_history: int = 16
    margin: int = 0

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise ValueError(f"Recipe.name must be a str, got {self.name!r}")
        for gemm in GEMMS:
            pair = getattr(self, gemm)
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2
                    and all(isinstance(s, OperandSpec) for s in pair)):
                raise TypeError(f"Recipe.{gemm} must be a pair of OperandSpec, got {pair!r}")
            object.__setattr__(self, gemm, tuple(pair))
        for gemm in ("fprop", "dgrad"):
            if any(s.rht for s in getattr(self, gemm)):
                raise ValueError(f"Recipe.{gemm} has rht=True: the random Hadamard transform "
                                 "applies to the wgrad operands only (it cancels in dyᵀ x "
                                 "along the tokens)")
        if self.wgrad[0].rht != self.wgrad[1].rht:
            raise ValueError("Recipe.wgrad has rht on one operand only: both wgrad operands "
                             "need the same transform for it to cancel")
        hp = self.high_precision_layers
        hp = (hp,) if isinstance(hp, str) else tuple(hp)
        if not all(isinstance(p, str) for p in hp):
            raise ValueError(f"Recipe.high_precision_layers must be strings (fnmatch "
                             f"patterns), got {self.high_precision_layers!r}")
        object.__setattr__(self, "high_precision_layers", hp)
        if not isinstance(self.amax_history, int) or self.amax_history < 1:
            raise ValueError(f"Recipe.amax_history must be an int >= 1, got "
                             f"{self.amax_history!r}")
        if not isinstance(self.margin, int) or self.margin < 0:
            raise ValueError(f"Recipe.margin must be an int >= 0, got {self.margin!r}")
        if not isinstance(self.loss_scaling, bool):
            raise ValueError(f"Recipe.loss_scaling must be a bool, got {self.loss_scaling!r}")

    def spec(self, gemm: str, operand: str) -> OperandSpec:
        """The spec of ``operand`` ("x", "w" or "dy") in ``gemm`` ("fprop", "dgrad", "wgrad")."""
        return getattr(self, gemm)[OPERANDS[gemm].index(operand)]

    def is_high_precision(self, layer_name: str) -> bool:
        """Whether ``layer_name`` matches one of :attr:`high_precision_layers`."""
        return any(fnmatch.fnmatchcase(layer_name, p) for p in self.high_precision_layers)

    def bits_moved(self, n_tokens: int, in_features: int, out_features: int) -> dict:
        """Bits of the two operands of each GEMM of one layer, scales included.

        Returns ``{"fprop": bits, "dgrad": bits, "wgrad": bits}`` (ints rounded from floats).
        """
        shapes = {("fprop", "x"): (n_tokens, in_features),
                  ("fprop", "w"): (out_features, in_features),
                  ("dgrad", "dy"): (n_tokens, out_features),
                  ("dgrad", "w"): (in_features, out_features),
                  ("wgrad", "dy"): (out_features, n_tokens),
                  ("wgrad", "x"): (in_features, n_tokens)}
        out = {}
        for gemm in GEMMS:
            total = 0.0
            for op in OPERANDS[gemm]:
                rows, inner = shapes[(gemm, op)]
                total += rows * inner * self.spec(gemm, op).bits_per_element(inner, rows)
            out[gemm] = int(round(total))
        return out

    def describe(self) -> dict:
        """``{gemm: "x: E4M3 tensor fp32, w: ..."}``: each operand's label."""
        return {g: ", ".join(f"{op}: {s.describe()}" for op, s in zip(OPERANDS[g],
                                                                       getattr(self, g)))
                for g in GEMMS}


def _uniform(name: str, spec: OperandSpec, **kw) -> Recipe:
    return Recipe(name, (spec, spec), (spec, spec), (spec, spec), **kw)


def _hybrid(name: str, fwd: OperandSpec, bwd: OperandSpec, **kw) -> Recipe:
    """TE's HYBRID: the forward tensors (x, W) in ``fwd``, the gradient dy in ``bwd``."""
    return Recipe(name, (fwd, fwd), (bwd, fwd), (bwd, fwd), **kw)


#: Layers the NVFP4 recipe keeps in BF16 by default: the output projection. The paper keeps
#: about 15% of the linear layers, mostly the last blocks, in BF16 (section 4); which blocks
#: those are depends on the model, so pass them to :func:`nvfp4_recipe`.
HIGH_PRECISION_LAYERS = ("lm_head",)


def nvfp4_recipe(*, stochastic_rounding: bool = True, rht: bool = True, weight_2d: bool = True,
                 high_precision_layers=HIGH_PRECISION_LAYERS, name: str | None = None) -> Recipe:
    """The NVFP4 training recipe of arXiv:2509.25149, each technique switchable.

    Every operand is E2M1 with E4M3 scales per 16 elements along the GEMM's inner dimension
    under an FP32 tensor scale (1x16). With ``weight_2d`` the weight uses 16x16 tiles (the
    same tile for fprop and dgrad, so both GEMMs see the same quantized W); with
    ``stochastic_rounding`` the gradient dy is rounded stochastically in dgrad and wgrad
    (weights and activations round to nearest); with ``rht`` both wgrad operands pass
    through a 16x16 random Hadamard transform along the tokens; layers matching
    ``high_precision_layers`` run in BF16. The paper describes the four techniques in its
    section 4. TransformerEngine's ``NVFP4BlockScaling`` (``disable_rht``,
    ``disable_stochastic_rounding``, ``disable_2d_quantization``) has the same switches;
    TE draws the RHT's signs once (a fixed sign vector), and so does :class:`QuantLinear`,
    once per layer from its seed.

    Raises
    ------
    ValueError
        If a switch is not a bool, or a pattern not a string.
    """
    for k, v in (("stochastic_rounding", stochastic_rounding), ("rht", rht),
                 ("weight_2d", weight_2d)):
        if not isinstance(v, bool):
            raise ValueError(f"{k} must be a bool, got {v!r}")
    act = OperandSpec("e2m1", (1, 16), "e4m3")
    w = OperandSpec("e2m1", (16, 16) if weight_2d else (1, 16), "e4m3")
    dy = replace(act, rounding="stochastic" if stochastic_rounding else "nearest")
    if name is None:
        name = "nvfp4" if (stochastic_rounding and rht and weight_2d) else "nvfp4" + "".join(
            f"-no{k}" for k, on in (("sr", stochastic_rounding), ("rht", rht),
                                    ("2d", weight_2d)) if not on)
    return Recipe(name, fprop=(act, w), dgrad=(dy, w),
                  wgrad=(replace(dy, rht=rht), replace(act, rht=rht)),
                  high_precision_layers=high_precision_layers)


def fp8_recipe(*, forward: str = "e4m3", backward: str = "e5m2", scaling: str = "current",
               amax_history: int = 16, margin: int = 0, name: str | None = None) -> Recipe:
    """Per-tensor FP8 with FP32 scales: x and W in ``forward``, the gradient dy in ``backward``.

    The defaults are TransformerEngine's HYBRID format (E4M3 forward, E5M2 gradients);
    ``backward="e4m3"`` is TE's ``Format.E4M3`` (E4M3 everywhere). ``scaling="delayed"`` is
    ``DelayedScaling`` (``amax_history``, ``margin``), ``"current"`` ``Float8CurrentScaling``.

    Raises
    ------
    ValueError
        Naming the field, as :class:`OperandSpec` and :class:`Recipe` do.
    """
    fwd = OperandSpec(forward, "tensor", "fp32", scaling)
    bwd = OperandSpec(backward, "tensor", "fp32", scaling)
    if name is None:
        name = f"fp8_{scaling}_{fwd.fmt}_{bwd.fmt}"
    return _hybrid(name, fwd, bwd, amax_history=amax_history, margin=margin)


_F32 = OperandSpec()
_E4M3_T = OperandSpec("e4m3", "tensor", "fp32")
_E5M2_T = OperandSpec("e5m2", "tensor", "fp32")

#: The recipes by name. TransformerEngine names where they exist:
#: "fp8_delayed" is ``DelayedScaling(fp8_format=Format.HYBRID)``, "fp8_current"
#: ``Float8CurrentScaling`` (HYBRID), "fp8_blockwise" ``Float8BlockScaling`` with FP32 scales
#: (DeepSeek-V3: 1x128 activations and gradients, 128x128 weights, E4M3 everywhere),
#: "mxfp8_floor"/"mxfp8_rceil" ``MXFP8BlockScaling`` (E4M3, 1x32) with the OCP and the RCEIL
#: scale rule, "nvfp4" ``NVFP4BlockScaling`` (see :func:`nvfp4_recipe`), "mxfp4" OCP MXFP4
#: (E2M1, 1x32, floor scales, round-to-nearest) for comparison.
RECIPES: dict[str, Recipe] = {
    "fp32": _uniform("fp32", _F32),
    "bf16": _uniform("bf16", OperandSpec("bf16")),
    "fp16": _uniform("fp16", OperandSpec("fp16"), loss_scaling=True),
    "fp8_delayed": _hybrid("fp8_delayed", replace(_E4M3_T, scaling="delayed"),
                           replace(_E5M2_T, scaling="delayed")),
    "fp8_current": _hybrid("fp8_current", _E4M3_T, _E5M2_T),
    "fp8_blockwise": Recipe("fp8_blockwise",
                            fprop=(OperandSpec("e4m3", (1, 128), "fp32"),
                                   OperandSpec("e4m3", (128, 128), "fp32")),
                            dgrad=(OperandSpec("e4m3", (1, 128), "fp32"),
                                   OperandSpec("e4m3", (128, 128), "fp32")),
                            wgrad=(OperandSpec("e4m3", (1, 128), "fp32"),
                                   OperandSpec("e4m3", (1, 128), "fp32"))),
    "mxfp8_floor": _uniform("mxfp8_floor", OperandSpec("e4m3", (1, 32), "e8m0_floor")),
    "mxfp8_rceil": _uniform("mxfp8_rceil", OperandSpec("e4m3", (1, 32), "e8m0_rceil")),
    "nvfp4": nvfp4_recipe(),
    "mxfp4": _uniform("mxfp4", OperandSpec("e2m1", (1, 32), "e8m0_floor")),
}


def get_recipe(recipe) -> Recipe:
    """A :class:`Recipe` from its name in :data:`RECIPES` or the recipe itself.

    Raises
    ------
    ValueError
        If a name is not in :data:`RECIPES`.
    TypeError
        If ``recipe`` is neither a str nor a Recipe.
    """
    if isinstance(recipe, Recipe):
        return recipe
    if isinstance(recipe, str):
        if recipe not in RECIPES:
            raise ValueError(f"recipe must be one of {tuple(RECIPES)} or a Recipe, "
                             f"got {recipe!r}")
        return RECIPES[recipe]
    raise TypeError(f"recipe must be a name in RECIPES or a Recipe, got {recipe!r}")


# ------------------------------------------------------------------------ Hadamard transform
def hadamard(n: int = RHT_SIZE) -> torch.Tensor:
    """The Sylvester Hadamard matrix of order ``n`` (a power of two), entries +-1, float64."""
    if not isinstance(n, int) or n < 1 or n & (n - 1):
        raise ValueError(f"n must be a power of two, got {n!r}")
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def random_hadamard(n: int = RHT_SIZE, *, generator: torch.Generator | None = None,
                    dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A random orthonormal Hadamard matrix ``H diag(s) / sqrt(n)``, ``s`` random signs.

    Parameters
    ----------
    n : int, a power of two (16 for NVFP4)
    generator : torch.Generator, optional
        Source of the signs (a CPU generator; default torch's global one).
    dtype : torch dtype of the result, default float32 (every entry +-2^-2 for n = 16 is exact)

    Returns
    -------
    torch.Tensor (n, n) on the CPU; ``R @ R.T`` is the identity.

    Notes
    -----
    TransformerEngine draws its signs once (a fixed sign vector,
    ``transformer_engine/pytorch/tensor/nvfp4_tensor.py``); :class:`QuantLinear` likewise
    draws one per layer from its seed and keeps it for the whole run.
    """
    h = hadamard(n)
    signs = torch.randint(0, 2, (n,), generator=generator, dtype=torch.int64) * 2 - 1
    return (h * signs.to(torch.float64) / math.sqrt(n)).to(dtype)


def apply_rht(t: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Each run of 16 consecutive elements along the last axis of (rows, inner) ``t`` times
    ``h`` (16, 16): ``t`` times the block-diagonal orthonormal matrix diag(h, h, ...).

    Raises
    ------
    ValueError
        If the inner dimension is not a multiple of ``h``'s size (naming ``rht``).
    """
    rows, inner = t.shape
    n = h.shape[0]
    if inner % n:
        raise ValueError(f"OperandSpec.rht needs the inner dimension ({inner}) to be a multiple "
                         f"of {n}")
    return torch.mm(t.reshape(-1, n), h.to(t.device, t.dtype)).reshape(rows, inner)


# ------------------------------------------------------------------------------ quantization
_BLOCK_SCALES = {"fp32": ("exact", "floor"), "e8m0_floor": ("e8m0", "floor"),
                 "e8m0_rceil": ("e8m0", "rceil"), "e4m3": ("e4m3", "floor")}


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
        ``block``), the inner dimension is not a multiple of 16 for the RHT.
    TypeError
        If ``spec`` is not an OperandSpec.
    """
    if not isinstance(spec, OperandSpec):
        raise TypeError(f"spec must be an OperandSpec, got {spec!r}")
    if not isinstance(t, torch.Tensor) or t.ndim != 2:
        raise ValueError(f"t must be a 2-D tensor (rows, inner), got "
                         f"{getattr(t, 'shape', type(t))}")
    t = t.detach()
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


def _quantize32(t, spec, generator, amax, scale, margin):
    """quantize_operand's body for a float32 operand (after any RHT)."""
    if spec.scale == "none":
        dtype = _CASTS[spec.fmt]
        return t if dtype is None else t.to(dtype).to(torch.float32)
    t = t.contiguous()  # a transposed operand is laid out once (a no-op otherwise)
    rows, inner = t.shape
    _check_divides(spec, rows, inner)
    fmt = spec.format
    sr = spec.rounding == "stochastic"
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
        scale_format, rule = _BLOCK_SCALES[spec.scale]
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


# ------------------------------------------------------------------------- delayed scaling
class AmaxHistory:
    """TransformerEngine's delayed scaling state for one tensor: an amax history and a scale.

    The scale used at a step comes from the amaxes of the ``length`` steps before it: after
    each step the tensor's amax is appended, and the scale becomes ``amax_h * 2**margin /
    fmt.max`` with ``amax_h`` the largest amax in the window (``amax_compute_algo="max"``).
    While every amax in the window is 0 (or the largest is not finite) the scale stays what it
    was, and it starts at 1: the first step of a run quantizes with scale 1 (a plain saturating
    cast to the format). This is TE's rule with its scale inverted (TE stores the multiplier
    ``fmt.max / amax / 2**margin``; numfmt's scale divides); TE keeps the scale in FP32, here
    it is numfmt's exact float64 scale.

    Reference: ``transformer_engine/common/recipe/delayed_scaling.cu`` (kernel: the history
    rolls, the new scale is ``scaled_max / amax`` if amax is finite and positive, else the
    previous scale).
    """

    def __init__(self, length: int = 16, margin: int = 0):
        if not isinstance(length, int) or length < 1:
            raise ValueError(f"length must be an int >= 1, got {length!r}")
        self.length, self.margin = length, margin
        self.history: list[float] = []   # oldest first, at most ``length``
        self._scales: dict[str, float] = {}

    def scale(self, fmt: FloatFormat) -> float:
        """The dequantization scale for the current step in ``fmt``."""
        return self._scales.get(fmt.name, 1.0)

    def record(self, amax: float, formats) -> None:
        """Append this step's ``amax`` and update the scale of each format in ``formats``."""
        self.history.append(float(amax))
        del self.history[:-self.length]
        top = max(self.history)
        if top > 0 and math.isfinite(top):
            for fmt in formats:
                self._scales[fmt.name] = float(exact_scales(
                    np.array(top), fmt.max_value)) * 2.0**self.margin


# ------------------------------------------------------------------------------ the layer
class _QuantLinearFunction(torch.autograd.Function):
    """The three GEMMs with quantized operands, accumulated in the operands' dtype."""

    @staticmethod
    def forward(ctx, x, weight, bias, layer):
        recipe = layer.effective_recipe
        gen = layer._generator(x.device, 0)
        xq = layer._quantize(x, "fprop", "x", generator=gen)
        wq = layer._quantize(weight, "fprop", "w", generator=gen)
        y = xq @ wq.t() if bias is None else torch.addmm(bias, xq, wq.t())
        ctx.layer, ctx.recipe, ctx.has_bias = layer, recipe, bias is not None
        ctx.save_for_backward(x, weight, xq, wq)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, xq_f, wq_f = ctx.saved_tensors
        layer, recipe = ctx.layer, ctx.recipe
        dy = dy.contiguous()
        if layer.capture:
            layer.last_operands["dy"] = dy.detach().clone()
        gen = layer._generator(dy.device, 1)
        dx = dw = db = dyq = None
        if ctx.needs_input_grad[0]:
            dyq = layer._quantize(dy, "dgrad", "dy", recipe=recipe, generator=gen)
            s_w = recipe.dgrad[1]
            if s_w == recipe.fprop[1] and _transposes(s_w):
                wq_t = wq_f.t()  # Q(W)ᵀ == Q(Wᵀ): the tile or the tensor is the same
            else:
                wq_t = layer._quantize(weight.t(), "dgrad", "w", recipe=recipe)
            dx = dyq @ wq_t.t()                                  # (N, out) (out, in)
        if ctx.needs_input_grad[1]:
            s_dy, s_x = recipe.wgrad
            h = layer.hadamard.to(dy.device) if s_dy.rht else None
            if s_x == recipe.fprop[0] and _transposes(s_x) and not s_x.rht:
                xq_t = xq_f.t()
            else:
                xq_t = layer._quantize(x.t(), "wgrad", "x", recipe=recipe, hadamard_matrix=h)
            if dyq is not None and s_dy == recipe.dgrad[0] and _transposes(s_dy):
                dyq_t = dyq.t()
            else:
                dyq_t = layer._quantize(dy.t(), "wgrad", "dy", recipe=recipe, generator=gen,
                                        hadamard_matrix=h)
            dw = (xq_t @ dyq_t.t()).t()                          # (in, N) (N, out) -> (out, in)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy.sum(0)
        layer._end_backward(dy)
        return dx, dw, db, None


def _check_shapes(recipe: Recipe, n: int, d_in: int, d_out: int, name: str) -> None:
    """Refuse, before any GEMM runs, a layer whose operands some block or the RHT does not
    divide (in the backward pass the error would come far from its cause)."""
    shapes = {"fprop": ((n, d_in), (d_out, d_in)), "dgrad": ((n, d_out), (d_in, d_out)),
              "wgrad": ((d_out, n), (d_in, n))}
    for gemm in GEMMS:
        for op, spec, (rows, inner) in zip(OPERANDS[gemm], getattr(recipe, gemm), shapes[gemm]):
            try:
                _check_divides(spec, rows, inner)
                if spec.rht and inner % RHT_SIZE:
                    raise ValueError(f"OperandSpec.rht needs the inner dimension ({inner}) to "
                                     f"be a multiple of {RHT_SIZE}")
            except ValueError as err:
                raise ValueError(f"layer {name!r} under recipe {recipe.name!r}, {gemm} operand "
                                 f"{op} of shape ({rows}, {inner}): {err}") from None


def _transposes(spec: OperandSpec) -> bool:
    """Whether Q(tᵀ) == Q(t)ᵀ under ``spec``: one scale for the tensor or square tiles, and
    round-to-nearest (stochastic rounding draws afresh per use)."""
    square = spec.block == "tensor" or (isinstance(spec.block, tuple)
                                        and spec.block[0] == spec.block[1])
    return square and spec.rounding == "nearest" and not spec.rht


class QuantLinear(nn.Module):
    """A bias-optional linear layer ``y = x Wᵀ + b`` trained under a low-precision recipe.

    Parameters
    ----------
    in_features, out_features : int
    recipe : str or Recipe, default "fp32"
        Settable (``layer.recipe = "nvfp4"``; setting it starts delayed scaling's amax
        histories afresh); a layer whose ``name`` matches the recipe's
        ``high_precision_layers`` runs :data:`RECIPES` ["bf16"] instead.
    name : str
        The layer's name for those patterns (e.g. ``"layers.3.mlp.down"``).
    bias : bool, default False
    seed : int, default 0
        Seeds the initial weights, the RHT signs and, with the step count, the stochastic
        rounding draws: the same seed gives the same bytes.
    device : optional

    Attributes
    ----------
    weight : nn.Parameter (out_features, in_features)
        Master weights: float32, or float64 after ``.double()``.
    capture : bool
        When True, :attr:`last_operands` keeps the raw operands of the last step:
        ``{"x": (N, in), "w": (out, in), "dy": (N, out)}`` (copies, in the layer's dtype).
    step : int
        Training steps taken (forward passes with grad enabled in training mode).

    Notes
    -----
    The input may have any leading shape ``(..., in_features)``; it is flattened to
    ``(N, in_features)`` tokens for the GEMMs, in the weight's dtype. In float32 (the default)
    products are accumulated in float32, as a tensor core does (on CUDA with TF32 as torch's
    ``allow_tf32`` setting says: off by default for matmul), and with every operand FP32 the
    forward and backward are those of ``torch.nn.functional.linear`` bit for bit. After
    ``.double()`` the layer is a float64 emulation: each operand is quantized as its float32
    rounding would be (FP32 operands are left unrounded) and products are accumulated in
    float64, more exactly than any tensor core; what it buys is results that do not depend on
    the CPU's kernels, whose float32 sums differ in the last bits from one instruction set to
    another. Delayed scaling keeps an :class:`AmaxHistory` for x, W and dy; it advances on
    training steps only, so evaluation does not change a run.
    """

    def __init__(self, in_features: int, out_features: int, recipe="fp32", *, name: str = "",
                 bias: bool = False, seed: int = 0, device=None):
        super().__init__()
        for k, v in (("in_features", in_features), ("out_features", out_features)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{k} must be a positive int, got {v!r}")
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        if not isinstance(name, str):
            raise ValueError(f"name must be a str, got {name!r}")
        self.in_features, self.out_features, self.name, self.seed = (in_features, out_features,
                                                                     name, seed)
        g = torch.Generator().manual_seed(seed)
        bound = 1 / math.sqrt(in_features)  # nn.Linear's default range
        w = (torch.rand(out_features, in_features, generator=g) * 2 - 1) * bound
        self.weight = nn.Parameter(w.to(device))
        self.bias = nn.Parameter(((torch.rand(out_features, generator=g) * 2 - 1) * bound
                                  ).to(device)) if bias else None
        self.hadamard = random_hadamard(RHT_SIZE, generator=g)
        self.recipe = recipe
        self.capture = False
        self.last_operands: dict = {}
        self.step = 0
        self._gens: dict = {}
        self._histories: dict[str, AmaxHistory] = {}
        self._pending: dict[str, float] = {}

    # recipe ----------------------------------------------------------------------------
    @property
    def recipe(self) -> Recipe:
        return self._recipe

    @recipe.setter
    def recipe(self, value) -> None:
        self._recipe = get_recipe(value)
        self._histories = {}

    @property
    def effective_recipe(self) -> Recipe:
        """The recipe this layer runs: BF16 if its name matches ``high_precision_layers``."""
        r = self._recipe
        return RECIPES["bf16"] if self.name and r.is_high_precision(self.name) else r

    # pieces ----------------------------------------------------------------------------
    def _generator(self, device: torch.device, phase: int) -> torch.Generator:
        """The generator of this step's forward (``phase`` 0) or backward (1) pass on
        ``device``, seeded from (seed, step, phase): runs repeat, and the passes draw apart."""
        key = str(device)
        if key not in self._gens:
            self._gens[key] = torch.Generator(device=device)
        g = self._gens[key]
        g.manual_seed(((self.seed * 1_000_003 + self.step) * 2 + phase) % (2**63 - 1))
        return g

    def _quantize(self, t, gemm, operand, *, recipe=None, generator=None, hadamard_matrix=None):
        recipe = recipe or self.effective_recipe
        spec = recipe.spec(gemm, operand)
        if spec.scaling == "delayed":
            hist = self._histories.setdefault(operand, AmaxHistory(recipe.amax_history,
                                                                   recipe.margin))
            # This step's amax enters the history after the step (TE updates the scales
            # after the forward and after the backward): it scales the next steps.
            amax = float(t.detach().abs().amax().to(torch.float32))  # the operand's FP32 amax
            self._pending.setdefault(operand, amax)
            if not math.isfinite(amax):  # as quantize_operand: a diverged operand is NaN
                return torch.full_like(t, float("nan"))
            return quantize_operand(t, spec, scale=hist.scale(spec.format))
        return quantize_operand(t, spec, generator=generator, margin=0,
                                hadamard_matrix=hadamard_matrix)

    def _end_step(self, names) -> None:
        """Record the pending amaxes of ``names`` into their histories (after their use)."""
        recipe = self.effective_recipe
        for op in names:
            if op in self._pending:
                fmts = {recipe.spec(g, op).format for g in GEMMS if op in OPERANDS[g]}
                self._histories[op].record(self._pending.pop(op), fmts)

    def _end_backward(self, dy) -> None:
        self._end_step(("dy",))

    # forward ---------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise ValueError(f"x must have {self.in_features} features in its last dimension, "
                             f"got shape {tuple(x.shape)}")
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        if x2.dtype != self.weight.dtype:
            x2 = x2.to(self.weight.dtype)
        training = self.training and torch.is_grad_enabled()
        _check_shapes(self.effective_recipe, x2.shape[0], self.in_features, self.out_features,
                      self.name)
        if self.capture:
            self.last_operands = {"x": x2.detach().clone(), "w": self.weight.detach().clone()}
        self._pending = {}
        y = _QuantLinearFunction.apply(x2, self.weight, self.bias, self)
        if training:
            self._end_step(("x", "w"))
            self.step += 1
        else:
            self._pending = {}
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"recipe={self._recipe.name!r}, name={self.name!r}, "
                f"bias={self.bias is not None}")


# ------------------------------------------------------------------------------ loss scaling
class DynamicLossScaler:
    """Dynamic loss scaling for FP16 training: the decisions of ``torch.amp.GradScaler``.

    The loss is multiplied by :attr:`scale` before backward, so that small gradients stay
    above FP16's subnormals; the gradients are then multiplied by the float32 reciprocal of
    the scale. A step whose gradients hold an Inf or NaN is skipped and the scale multiplied
    by ``backoff_factor``; after ``growth_interval`` clean steps in a row it is multiplied by
    ``growth_factor``.

    Parameters
    ----------
    init_scale : float, default 2**16
    growth_factor : float, default 2.0
    backoff_factor : float, default 0.5
    growth_interval : int, default 2000

    Raises
    ------
    ValueError
        If a factor or the scale is not positive and finite, growth_factor <= 1,
        backoff_factor >= 1, or growth_interval < 1.

    References
    ----------
    Micikevicius et al., "Mixed Precision Training", ICLR 2018, section 3.2. PyTorch
    ``torch/amp/grad_scaler.py`` and the ``_amp_update_scale_`` kernel.
    """

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000):
        for k, v in (("init_scale", init_scale), ("growth_factor", growth_factor),
                     ("backoff_factor", backoff_factor)):
            if not isinstance(v, (int, float)) or not (0 < v < math.inf):
                raise ValueError(f"{k} must be a positive finite number, got {v!r}")
        if growth_factor <= 1:
            raise ValueError(f"growth_factor must be > 1, got {growth_factor!r}")
        if backoff_factor >= 1:
            raise ValueError(f"backoff_factor must be < 1, got {backoff_factor!r}")
        if not isinstance(growth_interval, int) or growth_interval < 1:
            raise ValueError(f"growth_interval must be an int >= 1, got {growth_interval!r}")
        # GradScaler keeps its scale as a float32 tensor: the same float here.
        self.scale = _f32(init_scale)
        self.growth_factor, self.backoff_factor = float(growth_factor), float(backoff_factor)
        self.growth_interval = growth_interval
        self.growth_tracker = 0
        self._unscaled = False
        self._found_inf = False

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss * scale`` (call ``.backward()`` on it)."""
        return loss * self.scale

    def unscale_(self, params) -> bool:
        """Multiply every gradient of ``params`` by the float32 ``1 / scale`` in place;
        return whether any gradient holds an Inf or NaN."""
        inv = _f32(1.0 / self.scale)
        found = False
        for p in params:
            if p.grad is None:
                continue
            if not bool(torch.isfinite(p.grad).all()):
                found = True
            p.grad.mul_(inv)
        self._unscaled, self._found_inf = True, found
        return found

    def update(self, found_inf: bool) -> None:
        """Back off on ``found_inf``; otherwise count a clean step and grow after
        ``growth_interval`` of them (``torch._amp_update_scale_``)."""
        if found_inf:
            self.scale = _f32(self.scale * self.backoff_factor)
            self.growth_tracker = 0
        else:
            self.growth_tracker += 1
            if self.growth_tracker == self.growth_interval:
                grown = _f32(self.scale * self.growth_factor)
                if math.isfinite(grown):  # GradScaler does not grow into Inf
                    self.scale = grown
                self.growth_tracker = 0
        self._unscaled = False

    def step(self, optimizer, params) -> bool:
        """Unscale (unless done), take ``optimizer.step()`` unless a gradient is not finite,
        update the scale. Returns whether the step was skipped."""
        params = list(params)
        found = self._found_inf if self._unscaled else self.unscale_(params)
        if not found:
            optimizer.step()
        self.update(found)
        return found

    def state_dict(self) -> dict:
        return {"scale": self.scale, "growth_tracker": self.growth_tracker}


def _f32(v: float) -> float:
    return float(torch.tensor(v, dtype=torch.float32))
