"""The quantized linear layer: three GEMMs whose operands a recipe quantizes."""

from __future__ import annotations

import math

import torch
from torch import nn

from numfmt.torch.train.amax import AmaxHistory, _is_int
from numfmt.torch.train.hadamard import RHT_SIZE, random_hadamard
from numfmt.torch.train.operand import _check_divides, quantize_operand
from numfmt.torch.train.recipes import (_CASTS, GEMMS, OPERANDS, RECIPES, OperandSpec, Recipe,
                                        get_recipe)


class _QuantLinearFunction(torch.autograd.Function):
    """The three GEMMs with quantized operands, accumulated in the operands' dtype; their
    outputs y, dx and dW rounded to the recipe's output format."""

    @staticmethod
    def forward(ctx, x, weight, bias, layer):
        recipe = layer.effective_recipe
        ctx.call = layer._call
        gen = layer._generator(x.device, 0)
        xq = layer._quantize(x, "fprop", "x", generator=gen)
        wq = layer._quantize(weight, "fprop", "w", generator=gen)
        y = _round_output(xq @ wq.t() if bias is None else torch.addmm(bias, xq, wq.t()),
                          recipe)
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
        gen = layer._generator(dy.device, 1, ctx.call)
        dx = dw = db = dyq = None
        if ctx.needs_input_grad[0]:
            dyq = layer._quantize(dy, "dgrad", "dy", recipe=recipe, generator=gen)
            s_w = recipe.dgrad[1]
            if s_w == recipe.fprop[1] and _transposes(s_w):
                wq_t = wq_f.t()  # Q(W)ᵀ == Q(Wᵀ): the tile or the tensor is the same
            else:
                wq_t = layer._quantize(weight.t(), "dgrad", "w", recipe=recipe)
            dx = _round_output(dyq @ wq_t.t(), recipe)           # (N, out) (out, in)
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
            dw = _round_output((xq_t @ dyq_t.t()).t(), recipe)   # (in, N) (N, out) -> (out, in)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy.sum(0)
        layer._end_backward(ctx.call)
        return dx, dw, db, None


def linear_in_input_dtype(x: torch.Tensor, weight: torch.Tensor,
                          bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x Wᵀ + b`` (``torch.nn.functional.linear``) computed in ``x``'s dtype, whatever the
    dtype of the parameters: a trainable module's float32 master weight, bias, scales or
    adapters are cast to ``x``'s dtype first. A float32 value is exact in float64, so a float64
    ``x`` gets the product in float64 of the float32 values, and autograd rounds the gradient
    once, to the parameter's float32. (torch.autocast casts the same way, toward bf16/fp16.)

    Parameters
    ----------
    x : floating-point tensor (..., in)
    weight : floating-point tensor (out, in)
    bias : floating-point tensor (out,), or None

    Returns
    -------
    tensor (..., out) in ``x``'s dtype. Shape errors are ``F.linear``'s.
    """
    b = None if bias is None else bias.to(x.dtype)
    return nn.functional.linear(x, weight.to(x.dtype), b)


def _round_output(t: torch.Tensor, recipe: Recipe) -> torch.Tensor:
    """A GEMM's output rounded to ``recipe.output`` and back to ``t``'s dtype: the float32
    accumulator rounded to bf16 or fp16, as torch.autocast's matmul returns it (a float64
    emulation's sum is first rounded to float32, the accumulator it stands for)."""
    dtype = _CASTS[recipe.output]
    if dtype is None:
        return t
    return t.to(torch.float32).to(dtype).to(t.dtype)


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
    return square and spec.mode == "nearest" and not spec.rht


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

    State
    -----
    ``state_dict()`` holds, beside the weight (and bias), the layer's ``_extra_state``
    (:meth:`get_extra_state`): the step counter, the seed and RHT signs the stochastic rounding
    and the transform draw from, and delayed scaling's amax histories and scales, as
    TransformerEngine's modules checkpoint their FP8 metadata (``scale``, ``amax_history``;
    ``transformer_engine/pytorch/module/base.py``, ``get_extra_state``). A run interrupted,
    saved and loaded into a fresh layer continues bit for bit as the uninterrupted run.

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
    another. Each GEMM's output (y, dx, dW) is rounded to the recipe's ``output`` format (BF16
    or FP16 as torch.autocast returns a 16-bit matmul's; the FP8 and FP4 recipes output BF16,
    as TransformerEngine does in a BF16 model), so activations and activation gradients between
    layers carry the recipe's precision. Delayed scaling keeps an :class:`AmaxHistory` for x, W
    and dy; it advances on training steps only (a forward in training mode with grad enabled,
    and the backward of such a forward), so evaluation, including a backward pass in eval mode
    such as an input saliency map, does not change a run.

    Stochastic rounding draws afresh for every backward call: the backward of the forward
    taken at step ``s`` draws from (seed, ``s``), so micro-batches accumulated before one
    optimizer step, or a layer applied twice, round their gradients independently (TE
    advances its Philox offset per call); backward passes in eval mode draw from a stream of
    their own, which the training draws never see.
    """

    def __init__(self, in_features: int, out_features: int, recipe="fp32", *, name: str = "",
                 bias: bool = False, seed: int = 0, device=None):
        super().__init__()
        for k, v in (("in_features", in_features), ("out_features", out_features)):
            if not _is_int(v) or v < 1:
                raise ValueError(f"{k} must be a positive int, got {v!r}")
        if not _is_int(seed) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        in_features, out_features, seed = int(in_features), int(out_features), int(seed)
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
        self._call = None         # (kind, index) of the forward now running: see _generator
        self._eval_calls = 0
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
    def _generator(self, device: torch.device, phase: int, call=None) -> torch.Generator:
        """The generator of a forward (``phase`` 0) or backward (1) pass on ``device``,
        seeded from (seed, index, phase): runs repeat, and the passes draw apart.

        The forward draws with the index of the step it takes; a backward with the ``call``
        its forward recorded: ``("train", step + 1)`` for a training forward (each forward
        has its own, so accumulated micro-batches draw independently) or ``("eval", k)``
        for the k-th forward with grad in eval mode (a stream apart: bit 62 set)."""
        key = str(device)
        if key not in self._gens:
            self._gens[key] = torch.Generator(device=device)
        g = self._gens[key]
        kind, index = call if call is not None else ("train", self.step)
        seed = ((self.seed * 1_000_003 + index) * 2 + phase) % (2**62)
        g.manual_seed(seed | (2**62 if kind == "eval" else 0))
        return g

    def _quantize(self, t, gemm, operand, *, recipe=None, generator=None, hadamard_matrix=None):
        recipe = recipe or self.effective_recipe
        spec = recipe.spec(gemm, operand)
        if spec.scaling == "delayed":
            hist = self._histories.setdefault(operand, AmaxHistory(recipe.amax_history,
                                                                   recipe.margin))
            if t.numel() == 0:  # an empty batch: no amax to record
                return quantize_operand(t, spec, scale=hist.scale(spec.format))
            # This step's amax enters the history after the step (TE updates the scales
            # after the forward and after the backward): it scales the next steps.
            amax = float(t.detach().abs().amax().to(torch.float32))  # the operand's FP32 amax
            self._pending.setdefault(operand, amax)
            if not math.isfinite(amax):  # as quantize_operand: a diverged operand is NaN
                return torch.full_like(t, float("nan"))
            return quantize_operand(t, spec, scale=hist.scale(spec.format))
        return quantize_operand(t, spec, generator=generator,
                                hadamard_matrix=hadamard_matrix)

    def _end_step(self, names) -> None:
        """Record the pending amaxes of ``names`` into their histories (after their use)."""
        recipe = self.effective_recipe
        for op in names:
            if op in self._pending:
                fmts = {recipe.spec(g, op).format for g in GEMMS if op in OPERANDS[g]}
                self._histories[op].record(self._pending.pop(op), fmts)

    def _end_backward(self, call) -> None:
        """Record dy's amax after the backward of a training forward; discard it after an
        eval-mode one (evaluation leaves the histories alone)."""
        if call is not None and call[0] == "train":
            self._end_step(("dy",))
        else:
            self._pending.pop("dy", None)

    # state -----------------------------------------------------------------------------
    def get_extra_state(self) -> dict:
        """The training state beyond the parameters, for ``state_dict()``.

        Returns
        -------
        dict
            ``{"version": 1, "recipe": str, "seed": int, "step": int,
            "hadamard": float32 tensor (16, 16) on the CPU, "histories": {operand:
            {"history": [float, ...] oldest first, "scales": {format name: float}}}}``:
            plain Python numbers and one CPU tensor (``torch.load(weights_only=True)``
            reads it).
        """
        return {"version": 1, "recipe": self._recipe.name, "seed": self.seed,
                "step": self.step, "hadamard": self.hadamard.detach().cpu().clone(),
                "histories": {op: h.state_dict() for op, h in self._histories.items()}}

    def set_extra_state(self, state) -> None:
        """Restore :meth:`get_extra_state`'s dict (``load_state_dict`` calls it).

        Raises
        ------
        ValueError
            If ``state`` is not such a dict, or holds amax histories of a recipe other than
            the layer's (their scales belong to other formats).
        """
        keys = {"version", "recipe", "seed", "step", "hadamard", "histories"}
        if not isinstance(state, dict) or state.get("version") != 1 or set(state) != keys:
            raise ValueError("QuantLinear extra state must be the dict get_extra_state "
                             f"returns (version 1, keys {sorted(keys)}), got {state!r:.200}")
        if state["histories"] and state["recipe"] != self._recipe.name:
            raise ValueError(f"the checkpoint's amax histories are recipe "
                             f"{state['recipe']!r}'s; this layer runs {self._recipe.name!r} "
                             "(set layer.recipe before loading)")
        self.seed, self.step = int(state["seed"]), int(state["step"])
        self.hadamard = state["hadamard"].detach().to("cpu", torch.float32).clone()
        recipe = self.effective_recipe
        self._histories = {}
        for op, h in state["histories"].items():
            hist = AmaxHistory(recipe.amax_history, recipe.margin)
            hist.load_state_dict(h)
            self._histories[op] = hist
        self._pending = {}

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
        if training:
            self._call = ("train", self.step + 1)
        else:
            self._call = ("eval", self._eval_calls)
            self._eval_calls += 1
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
