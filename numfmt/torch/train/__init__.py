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
scale is an arbitrary FP32 number), then multiplied in float32 as tensor cores accumulate;
the GEMM outputs y, dx and dW are rounded to the recipe's output format (``Recipe.output``:
BF16 or FP16 as torch.autocast returns them, BF16 for the FP8 and FP4 recipes as
TransformerEngine does). Master weights, their gradients and the optimizer state are the
model's dtype: float32, or float64 in the float64 emulation (``QuantLinear.double()``, what
the lectures run), where the products are summed in float64 and every operand is quantized
as its float32 rounding would be.

:data:`RECIPES` holds the recipes by the names TransformerEngine gives them (see each entry);
:func:`nvfp4_recipe` builds NVFP4 with each of the paper's techniques switchable.

One module per idea::

    recipes.py     OperandSpec, Recipe, RECIPES, nvfp4_recipe, mxfp4_recipe, fp8_recipe,
                   get_recipe
    operand.py     quantize_operand: one operand fake-quantized under its spec
    hadamard.py    the random Hadamard transform of NVFP4's wgrad operands
    amax.py        AmaxHistory: delayed scaling's state
    linear.py      QuantLinear: the three GEMMs of a linear layer under a recipe
    loss_scale.py  DynamicLossScaler: torch.amp.GradScaler's decisions
    lsq.py         fine-tuning quantized weights: per-group STE, LSQ, GroupQuantLinear
    lora.py        LoRA over a float or NF4 (QLoRA) base
    optim.py       AdamW with 8-bit, BF16 or FP8 moments and BF16 master weights

The calls a user writes for these recipes in the libraries they emulate (defaults named;
TransformerEngine ``transformer_engine/common/recipe/__init__.py``, torchao 0.18
``torchao/float8/config.py``)::

    fp8_delayed     TE DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=1024,
                    amax_compute_algo="max", margin=0)    (RECIPES' window: 16 steps)
    fp8_current     TE Float8CurrentScaling(fp8_format=Format.HYBRID);
                    torchao convert_to_float8_training(model, config=
                    Float8LinearConfig.from_recipe_name("tensorwise"))  (E4M3 x and W, E5M2 dy)
    row scales      torchao Float8LinearConfig.from_recipe_name("rowwise"): E4M3 everywhere,
                    power-of-two scales = OperandSpec("e4m3", "row", "e8m0", "rceil")
    fp8_blockwise   TE Float8BlockScaling() (1x128 / 128x128; power-of-two scales by default,
                    FP32 scales with NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1, as here)
    mxfp8_rceil     TE MXFP8BlockScaling() (E4M3, 1x32, E8M0 rounded up); torchao
                    prototype.moe_training MXFP8Linear(scale_calculation_mode=RCEIL)
    nvfp4           TE NVFP4BlockScaling() (RHT on wgrad operands, 16x16 weights, SR on dy)
    TE runs each inside ``with te.fp8_autocast(enabled=True, fp8_recipe=recipe):``.

None of them is a twin of a numpy module: they are torch-only layers built on numfmt.torch's
bit-exact quantizers, and their tests check them against numfmt's numpy quantizers, torch and
the peers they emulate.

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

from numfmt.torch.train.amax import AmaxHistory
from numfmt.torch.train.hadamard import (RHT_SIZE, TE_WGRAD_SIGNS, apply_rht, hadamard,
                                         random_hadamard)
from numfmt.torch.train.linear import QuantLinear, linear_in_input_dtype
from numfmt.torch.train.loss_scale import DynamicLossScaler
from numfmt.torch.train.optim import AdamW
from numfmt.torch.train.operand import quantize_operand
from numfmt.torch.train.recipes import (GEMMS, HIGH_PRECISION_LAYERS, OPERANDS, RECIPES,
                                        OperandSpec, Recipe, fp8_recipe,
                                        get_recipe, mxfp4_recipe, nvfp4_recipe)

__all__ = ["OperandSpec", "Recipe", "RECIPES", "HIGH_PRECISION_LAYERS", "nvfp4_recipe",
           "mxfp4_recipe", "fp8_recipe", "get_recipe", "quantize_operand", "random_hadamard",
           "hadamard", "apply_rht", "TE_WGRAD_SIGNS", "AmaxHistory",
           "QuantLinear", "linear_in_input_dtype", "DynamicLossScaler", "GEMMS", "OPERANDS", "AdamW"]
