"""Recipes as data: how each operand of a linear layer's three GEMMs is quantized.

:class:`OperandSpec` says how one operand is quantized (element format, block shape, scale
format and rule, current or delayed scaling, rounding, random Hadamard transform);
:class:`Recipe` holds the six specs of fprop, dgrad and wgrad; :data:`RECIPES` names the
recipes TransformerEngine names, and :func:`nvfp4_recipe`, :func:`mxfp4_recipe` and
:func:`fp8_recipe` build variants.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace

import torch

from numfmt.blocks import SCALE_BITS, SCALE_RULES
from numfmt.formats import FORMATS, FP32, FloatFormat
from numfmt.torch.formats import _stochastic_fast_ok

#: The three GEMMs of a linear layer and the names of their two operands, in recipe order.
GEMMS = ("fprop", "dgrad", "wgrad")
OPERANDS = {"fprop": ("x", "w"), "dgrad": ("dy", "w"), "wgrad": ("dy", "x")}

#: Scale formats: "none" (a plain cast) and numfmt's block_quantize scale formats.
SCALE_FORMATS = ("none",) + tuple(SCALE_BITS)
SCALINGS = ("current", "delayed")
#: Rounding modes of the elements, as numfmt.round's ``mode``.
MODES = ("nearest", "stochastic")
#: Element formats a plain cast (scale "none") applies to: torch casts them natively.
_CASTS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


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
    scale_format : {"none", "exact", "e8m0", "e4m3"}, default "none"
        As :func:`numfmt.block_quantize`'s ``scale_format``, plus "none": a plain cast (fp32,
        bf16, fp16 only). "exact": the scale ``amax / fmt.max`` (numfmt's exact scale, an
        FP32-stored ideal: TE's FP32 scales). "e8m0": OCP MX power-of-two scales under
        ``scale_rule``. "e4m3": E4M3 block scales under an FP32 tensor scale (NVFP4).
    scale_rule : {"floor", "rceil"}, default "floor"
        The E8M0 exponent rule (:data:`numfmt.blocks.SCALE_RULES`): OCP MX v1.0 section 6.3's
        floor, or rounded up (RCEIL, Mishra et al. 2025, TE's MXFP8 rule). "rceil" needs
        ``scale_format="e8m0"``.
    scaling : {"current", "delayed"}, default "current"
        Delayed: the scale comes from the amax history of earlier steps (per-tensor "exact"
        scales only; see :class:`AmaxHistory`).
    mode : {"nearest", "stochastic"}, default "nearest"
        Round-to-nearest-even or stochastic rounding of the elements (scaled formats only).
    rht : bool, default False
        A 16 x 16 random Hadamard transform along the inner dimension before quantizing (the
        wgrad operands only, both or neither: they must share the transform to cancel).

    Raises
    ------
    ValueError
        Naming the field: an unknown format, scale format or rule, scaling or mode; a block
        that is not "tensor", "row" or positive ints; a scale that does not fit the format
        ("none" with an 8-bit format, "exact" with bf16, "e4m3" block scales with 8-bit
        elements, "rceil" without E8M0 scales); delayed scaling other than per tensor;
        stochastic rounding of a plain cast.
    """

    fmt: str = "fp32"
    block: str | tuple = "tensor"
    scale_format: str = "none"
    scale_rule: str = "floor"
    scaling: str = "current"
    mode: str = "nearest"
    rht: bool = False

    def __post_init__(self):
        if not isinstance(self.fmt, str) or self.fmt.lower() not in _format_names():
            raise ValueError(f"OperandSpec.fmt must be one of {_format_names()}, got {self.fmt!r}")
        object.__setattr__(self, "fmt", self.fmt.lower())
        object.__setattr__(self, "block", _check_block_field(self.block))
        for name, allowed in (("scale_format", SCALE_FORMATS), ("scale_rule", SCALE_RULES),
                              ("scaling", SCALINGS), ("mode", MODES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"OperandSpec.{name} must be one of {allowed}, "
                                 f"got {getattr(self, name)!r}")
        if not isinstance(self.rht, bool):
            raise ValueError(f"OperandSpec.rht must be a bool, got {self.rht!r}")
        cast = self.fmt in _CASTS
        if cast != (self.scale_format == "none"):
            raise ValueError(
                f"OperandSpec.scale_format={self.scale_format!r} does not fit fmt={self.fmt!r}: "
                "fp32, bf16 and fp16 are plain casts (scale_format='none'); narrower formats "
                "need a scale")
        if self.scale_format == "none" and self.block != "tensor":
            raise ValueError(f"OperandSpec.block={self.block!r} needs a scale; a plain cast "
                             "(scale_format='none') has block='tensor'")
        if self.scale_rule == "rceil" and self.scale_format != "e8m0":
            raise ValueError(f"OperandSpec.scale_rule='rceil' is an E8M0 exponent rule: it "
                             f"needs scale_format='e8m0', got {self.scale_format!r}")
        if self.scale_format == "e4m3" and _format(self.fmt).bits > 6:
            raise ValueError(f"OperandSpec.scale_format='e4m3' (NVFP4's E4M3 block scales) does "
                             f"not fit fmt={self.fmt!r}: it is for 4- and 6-bit elements such "
                             "as e2m1")
        if self.scale_format == "e4m3" and self.block == "tensor":
            raise ValueError("OperandSpec.block='tensor' with scale_format='e4m3': E4M3 scales "
                             "are block scales under an FP32 tensor scale; use "
                             "scale_format='exact'")
        if self.scaling == "delayed" and (self.block != "tensor"
                                          or self.scale_format != "exact"):
            raise ValueError("OperandSpec.scaling='delayed' keeps an amax history of a whole "
                             f"tensor: it needs block='tensor' and scale_format='exact', got "
                             f"block={self.block!r}, scale_format={self.scale_format!r}")
        if self.mode == "stochastic" and (cast or not _stochastic_fast_ok(self.format)):
            raise ValueError(f"OperandSpec.mode='stochastic' is not available for "
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
        for k, v in (("inner", inner), ("rows", rows)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{k} must be a positive int, got {v!r}")
        bits = float(self.format.bits)
        per = 0 if self.scale_format == "none" else SCALE_BITS[self.scale_format]
        if self.block == "tensor":
            return bits + (per / (inner * rows) if rows else 0.0)
        if self.block == "row":
            return bits + per / inner
        a, b = self.block
        return bits + per / (a * b)

    def describe(self) -> str:
        """A short label such as "E4M3 1x128 exact", "E4M3 1x32 e8m0 rceil" or
        "E2M1 16x16 e4m3 SR"."""
        if self.scale_format == "none":
            return self.fmt.upper()
        blk = self.block if isinstance(self.block, str) else f"{self.block[0]}x{self.block[1]}"
        parts = [self.fmt.upper(), blk, self.scale_format]
        if self.scale_rule == "rceil":
            parts.append("rceil")
        if self.scaling == "delayed":
            parts.append("delayed")
        if self.mode == "stochastic":
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
        Length of the amax history of delayed scaling (TE's ``amax_history_len``; TE's default
        is 1024, :data:`RECIPES` use 16 for runs of a few hundred steps).
    margin : int
        Delayed scaling only: ``scale = fmt.max / amax / 2**margin`` (TE's
        ``DelayedScaling.margin``). Current scaling has none (TE's ``Float8CurrentScaling``
        has no margin), so a recipe without a delayed operand refuses ``margin != 0``.
    output : {"fp32", "bf16", "fp16"}, default "fp32"
        What the GEMM outputs y, dx and dW are rounded to: torch.autocast's output dtype for a
        bf16 or fp16 matmul (its float32 accumulator rounded to the 16-bit dtype), and for the
        FP8 and FP4 recipes TransformerEngine's output dtype in a BF16 model (BF16); "fp32"
        leaves them as the GEMM computed them.

    Raises
    ------
    TypeError
        If a GEMM's field is not a pair of OperandSpec.
    ValueError
        Naming the field: an RHT outside wgrad or on one wgrad operand only, an amax history
        shorter than 1, a negative margin or one on a recipe without delayed scaling,
        patterns that are not strings, an unknown output format.
    """

    name: str
    fprop: tuple = (OperandSpec(), OperandSpec())
    dgrad: tuple = (OperandSpec(), OperandSpec())
    wgrad: tuple = (OperandSpec(), OperandSpec())
    high_precision_layers: tuple = ()
    loss_scaling: bool = False
    amax_history: int = 16
    margin: int = 0
    output: str = "fp32"

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
        if (not isinstance(self.amax_history, int) or isinstance(self.amax_history, bool)
                or self.amax_history < 1):
            raise ValueError(f"Recipe.amax_history must be an int >= 1, got "
                             f"{self.amax_history!r}")
        if not isinstance(self.margin, int) or isinstance(self.margin, bool) or self.margin < 0:
            raise ValueError(f"Recipe.margin must be an int >= 0, got {self.margin!r}")
        if self.margin and not any(s.scaling == "delayed" for g in GEMMS
                                   for s in getattr(self, g)):
            raise ValueError(f"Recipe.margin={self.margin!r} applies to delayed scaling only "
                             "(TE's Float8CurrentScaling has no margin); this recipe has no "
                             "delayed operand")
        if self.output not in _CASTS:
            raise ValueError(f"Recipe.output must be one of {tuple(_CASTS)}, got "
                             f"{self.output!r}")
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
        Raises ValueError naming an argument that is not a positive int.
        """
        for k, v in (("n_tokens", n_tokens), ("in_features", in_features),
                     ("out_features", out_features)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{k} must be a positive int, got {v!r}")
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


#: Layers every FP8 and FP4 recipe of :data:`RECIPES` keeps in BF16: the output head.
#: DeepSeek-V3 (arXiv 2412.19437, section 3.3.1) keeps the embedding, the output head, the
#: normalizations and attention's batched products out of FP8; Megatron-LM with
#: TransformerEngine runs its output layer outside TE, in BF16. The NVFP4 paper (arXiv
#: 2509.25149, section 4) also keeps about 16 % of the blocks' linear layers in BF16; which
#: ones depends on the model, so pass them to :func:`nvfp4_recipe`.
HIGH_PRECISION_LAYERS = ("lm_head",)


def nvfp4_recipe(*, stochastic_rounding: bool = True, rht: bool = True, weight_2d: bool = True,
                 high_precision_layers=HIGH_PRECISION_LAYERS, name: str | None = None,
                 output: str = "bf16") -> Recipe:
    """The NVFP4 training recipe of arXiv:2509.25149, each technique switchable.

    Every operand is E2M1 with E4M3 scales per 16 elements along the GEMM's inner dimension
    under an FP32 tensor scale (1x16). With ``weight_2d`` the weight uses 16x16 tiles (the
    same tile for fprop and dgrad, so both GEMMs see the same quantized W); with
    ``stochastic_rounding`` the gradient dy is rounded stochastically in dgrad and wgrad
    (weights and activations round to nearest); with ``rht`` both wgrad operands pass
    through a 16x16 random Hadamard transform along the tokens; layers matching
    ``high_precision_layers`` run in BF16. The paper describes the four techniques in its
    section 4. TransformerEngine's ``NVFP4BlockScaling`` (``disable_rht``,
    ``disable_stochastic_rounding``, ``disable_2d_quantization``) has the same switches.
    TE does not draw the RHT's signs: it hard-codes one sign vector
    (:data:`~numfmt.torch.train.TE_WGRAD_SIGNS`); :class:`QuantLinear` draws one per layer
    from its seed and keeps it for the run.

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
    dy = replace(act, mode="stochastic" if stochastic_rounding else "nearest")
    if name is None:
        name = "nvfp4" if (stochastic_rounding and rht and weight_2d) else "nvfp4" + "".join(
            f"-no{k}" for k, on in (("sr", stochastic_rounding), ("rht", rht),
                                    ("2d", weight_2d)) if not on)
    return Recipe(name, fprop=(act, w), dgrad=(dy, w),
                  wgrad=(replace(dy, rht=rht), replace(act, rht=rht)),
                  high_precision_layers=high_precision_layers, output=output)


def mxfp4_recipe(*, stochastic_rounding: bool = True, rht: bool = True,
                 high_precision_layers=HIGH_PRECISION_LAYERS, name: str | None = None,
                 output: str = "bf16") -> Recipe:
    """MXFP4 training with NVFP4's techniques: OCP MXFP4 operands (E2M1 in 1x32 blocks along
    the inner dimension, E8M0 scales, OCP's floor rule) with stochastic rounding of the
    gradient dy and a 16x16 random Hadamard transform of both wgrad operands, as Tseng et al.
    ("Training LLMs with MXFP4", arXiv 2502.20586) train MXFP4; layers matching
    ``high_precision_layers`` run in BF16. With both switches off it is plain MXFP4.

    Raises
    ------
    ValueError
        If a switch is not a bool, or a pattern not a string.
    """
    for k, v in (("stochastic_rounding", stochastic_rounding), ("rht", rht)):
        if not isinstance(v, bool):
            raise ValueError(f"{k} must be a bool, got {v!r}")
    act = OperandSpec("e2m1", (1, 32), "e8m0")
    dy = replace(act, mode="stochastic" if stochastic_rounding else "nearest")
    if name is None:
        name = "mxfp4" + "".join(f"-no{k}" for k, on in (("sr", stochastic_rounding),
                                                          ("rht", rht)) if not on)
    return Recipe(name, fprop=(act, act), dgrad=(dy, act),
                  wgrad=(replace(dy, rht=rht), replace(act, rht=rht)),
                  high_precision_layers=high_precision_layers, output=output)


def fp8_recipe(*, forward: str = "e4m3", backward: str = "e5m2", scaling: str = "current",
               amax_history: int = 16, margin: int = 0, name: str | None = None,
               high_precision_layers=HIGH_PRECISION_LAYERS, output: str = "bf16") -> Recipe:
    """Per-tensor FP8 with FP32 scales: x and W in ``forward``, the gradient dy in ``backward``.

    The defaults are TransformerEngine's HYBRID format (E4M3 forward, E5M2 gradients);
    ``backward="e4m3"`` is TE's ``Format.E4M3`` (E4M3 everywhere). ``scaling="delayed"`` is
    ``DelayedScaling`` (``amax_history``, ``margin``), ``"current"`` ``Float8CurrentScaling``.

    Raises
    ------
    ValueError
        Naming the field, as :class:`OperandSpec` and :class:`Recipe` do.
    """
    fwd = OperandSpec(forward, "tensor", "exact", scaling=scaling)
    bwd = OperandSpec(backward, "tensor", "exact", scaling=scaling)
    if name is None:
        name = f"fp8_{scaling}_{fwd.fmt}_{bwd.fmt}"
    return _hybrid(name, fwd, bwd, amax_history=amax_history, margin=margin, output=output,
                   high_precision_layers=high_precision_layers)


_F32 = OperandSpec()
_E4M3_T = OperandSpec("e4m3", "tensor", "exact")
_E5M2_T = OperandSpec("e5m2", "tensor", "exact")
_HEAD = dict(high_precision_layers=HIGH_PRECISION_LAYERS, output="bf16")


def _blockwise(name: str, scale_format: str, scale_rule: str = "floor") -> Recipe:
    """Float8BlockScaling: E4M3 in 1x128 tiles for x and dy, 128x128 blocks for W, the wgrad
    operands tiled along the tokens."""
    tile = OperandSpec("e4m3", (1, 128), scale_format, scale_rule)
    block = OperandSpec("e4m3", (128, 128), scale_format, scale_rule)
    return Recipe(name, fprop=(tile, block), dgrad=(tile, block), wgrad=(tile, tile), **_HEAD)


#: The recipes by name. TransformerEngine names where they exist:
#: "fp8_delayed" is ``DelayedScaling(fp8_format=Format.HYBRID)``, "fp8_current"
#: ``Float8CurrentScaling`` (HYBRID), "fp8_blockwise" ``Float8BlockScaling`` with FP32
#: ("exact") scales, as DeepSeek-V3 (section 3.3) scales its 1x128 activation and gradient
#: tiles and 128x128 weight blocks, and "fp8_blockwise_pow2" with TE's default power-of-two
#: scales (``power_2_scale=not use_f32_scales``; TE's ``compute_scale_from_amax`` truncates
#: the FP32 scale ``448 / amax`` to a power of two, numfmt's E8M0 RCEIL rule),
#: "mxfp8_rceil" ``MXFP8BlockScaling`` (E4M3, 1x32, E8M0 scales rounded up) and
#: "mxfp8_floor" the same with OCP MX v1.0's floor rule (not a TE option),
#: "nvfp4" ``NVFP4BlockScaling`` (see :func:`nvfp4_recipe`), "mxfp4" plain OCP MXFP4 (E2M1,
#: 1x32, floor scales, round-to-nearest, every layer: a format, not a recipe) and
#: "mxfp4_sr_rht" MXFP4 with NVFP4's techniques (:func:`mxfp4_recipe`). FP16 and BF16 are
#: torch.autocast's (GEMM inputs and outputs in the 16-bit format). The FP8 and FP4 recipes
#: keep :data:`HIGH_PRECISION_LAYERS` in BF16 and output BF16, except plain "mxfp4".
RECIPES: dict[str, Recipe] = {
    "fp32": _uniform("fp32", _F32),
    "bf16": _uniform("bf16", OperandSpec("bf16"), output="bf16"),
    "fp16": _uniform("fp16", OperandSpec("fp16"), loss_scaling=True, output="fp16"),
    "fp8_delayed": _hybrid("fp8_delayed", replace(_E4M3_T, scaling="delayed"),
                           replace(_E5M2_T, scaling="delayed"), **_HEAD),
    "fp8_current": _hybrid("fp8_current", _E4M3_T, _E5M2_T, **_HEAD),
    "fp8_blockwise": _blockwise("fp8_blockwise", "exact"),
    "fp8_blockwise_pow2": _blockwise("fp8_blockwise_pow2", "e8m0", "rceil"),
    "mxfp8_floor": _uniform("mxfp8_floor", OperandSpec("e4m3", (1, 32), "e8m0"), **_HEAD),
    "mxfp8_rceil": _uniform("mxfp8_rceil", OperandSpec("e4m3", (1, 32), "e8m0", "rceil"),
                            **_HEAD),
    "nvfp4": nvfp4_recipe(),
    "mxfp4": mxfp4_recipe(stochastic_rounding=False, rht=False, high_precision_layers=(),
                          name="mxfp4"),
    "mxfp4_sr_rht": mxfp4_recipe(name="mxfp4_sr_rht"),
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
