"""Weight gradients of one batch under several recipes, against FP32's on the same weights.

Training noise hides small differences between recipes: two runs part ways after a few steps,
and the seed-to-seed spread of their losses is larger than most recipes' effect. The weight
gradient of one step has no such noise: on the same weights and the same batch, each recipe's
dW is compared with FP32's, deterministically (stochastic rounding and Hadamard draws come from
the layers' seeds). What it measures is each step's error, not what training makes of it.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch.nn import functional as F

import numfmt.torch.train as ntt


#: Below this fraction of its tensor's amax a gradient entry is a float64 rounding residue of
#: an exact zero (:func:`without_residues`).
RESIDUE_FLOOR = 2.0 ** -40


def without_residues(dy: torch.Tensor) -> torch.Tensor:
    """``dy`` with its rounding residues set to exact zeros: the entries below
    :data:`RESIDUE_FLOOR` times the tensor's amax.

    In exact arithmetic the gradient reaching the attention's q projection is zero wherever a
    window so far is one byte repeated, its first position always: every value that query
    mixes is then the same vector, so its output does not depend on its scores. float64
    leaves residues there, below 2^-46 of the tensor's amax, and whether one comes out 0 or
    1e-22 depends on the order of the BLAS's sums, so counting "nonzero" values with them would
    print different figures on different kernels. Every other gradient of this model lies
    above 2^-32 of its tensor's amax (tests/test_tinylm_probe.py).

    Parameters
    ----------
    dy : floating-point tensor of any shape (a linear's output gradient, (tokens, out))

    Returns
    -------
    A new tensor of ``dy``'s shape and dtype.

    Raises
    ------
    TypeError
        If ``dy`` is not a floating-point tensor.
    """
    if not torch.is_tensor(dy) or not dy.is_floating_point():
        raise TypeError(f"dy must be a floating-point tensor, got {type(dy).__name__}")
    floor = dy.abs().max() * RESIDUE_FLOOR if dy.numel() else 0.0
    return torch.where(dy.abs() < floor, torch.zeros_like(dy), dy)


def gradient_errors(model, batch, recipes: dict, loss_scale: dict | None = None) -> dict:
    """Each recipe's weight gradients of ``batch`` against the model's current FP32 ones.

    Parameters
    ----------
    model : TinyLM in training mode, its ``.grad`` holding FP32's gradients of ``batch``
        (the loss unscaled) and every linear's ``capture`` on.
    batch : (x, y), each (B, T) int64
    recipes : {label: Recipe}
        Recipes without delayed scaling (a fresh layer has no amax history).
    loss_scale : {label: float}, optional
        A fixed loss scale per label (default 1): the loss is multiplied by it before the
        backward pass and the gradients divided by it after, as a loss scaler does.

    Returns
    -------
    {label: {"error": float, "cosine": float, "layer_error": {layer: float},
             "flushed": {layer: float}}}
        ``error``: ||dW - dW_fp32|| / ||dW_fp32|| over every linear's weight (a fraction);
        ``cosine``: their cosine similarity; ``layer_error``: the same error per layer;
        ``flushed``: per layer, the fraction of the nonzero dy entering dgrad (rounding
        residues left out: :func:`without_residues`) that the recipe's dgrad quantizer turns
        into zero.

    The model is left as it was found: its recipe (every linear FP32 again) and its gradients.
    """
    loss_scale = loss_scale or {}
    linears = model.linears()
    if any(s.scaling == "delayed" for r in recipes.values() for g in ntt.GEMMS
           for s in getattr(r, g)):
        raise ValueError("recipes must not use delayed scaling (a fresh history has no amax)")
    saved = {n: p.grad for n, p in model.named_parameters()}
    refs = {n: m.weight.grad.clone() for n, m in linears.items()}
    ref = torch.cat([r.flatten() for r in refs.values()])
    x, y = batch
    out = {}
    try:
        for label, recipe in recipes.items():
            scale = float(loss_scale.get(label, 1.0))
            model.set_recipe(recipe)
            for p in model.parameters():
                p.grad = None
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            (loss * scale).backward()
            grads = {n: m.weight.grad / scale for n, m in linears.items()}
            g = torch.cat([v.flatten() for v in grads.values()])
            flushed = {}
            for name, m in linears.items():
                dy = m.last_operands["dy"]
                spec = m.effective_recipe.dgrad[0]
                q = ntt.quantize_operand(dy, spec, generator=torch.Generator().manual_seed(0))
                nz = without_residues(dy) != 0
                flushed[name] = float(((q == 0) & nz).sum()) / max(1, int(nz.sum()))
            out[label] = {"error": float((g - ref).norm() / ref.norm()),
                          "cosine": float(g @ ref / (g.norm() * ref.norm())),
                          "layer_error": {n: float((grads[n] - refs[n]).norm()
                                                   / refs[n].norm()) for n in linears},
                          "flushed": flushed}
    finally:
        model.set_recipe("fp32")
        for n, p in model.named_parameters():
            p.grad = saved[n]
    return out


def gradient_errors_batches(model, batches, recipes: dict, loss_scale: dict | None = None
                            ) -> list:
    """:func:`gradient_errors` on each of several batches, the same batches for every recipe.

    Parameters
    ----------
    model : TinyLM in training mode, every linear's ``capture`` on, its ``.grad`` holding
        FP32's gradients of ``batches[0]`` (the training step's batch)
    batches : list of (x, y), each (B, T) int64
    recipes, loss_scale : as :func:`gradient_errors`

    Returns
    -------
    list, one :func:`gradient_errors` dict per batch, in the order of ``batches``

    FP32's gradients of the other batches are computed here, on the same weights; the model is
    left as it was found, its gradients and its captured operands (``last_operands``) those
    of ``batches[0]``.
    """
    saved = {n: p.grad for n, p in model.named_parameters()}
    linears = model.linears()
    operands = {n: m.last_operands for n, m in linears.items()}
    out = [gradient_errors(model, batches[0], recipes, loss_scale)]
    try:
        for x, y in batches[1:]:
            for p in model.parameters():
                p.grad = None
            F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
            out.append(gradient_errors(model, (x, y), recipes, loss_scale))
    finally:
        for n, p in model.named_parameters():
            p.grad = saved[n]
        for n, m in linears.items():
            m.last_operands = operands[n]
    return out


def sign_test(k: int, n: int) -> float:
    """Two-sided p-value of ``k`` successes in ``n`` trials under a fair coin (the exact
    binomial sign test; scipy.stats.binomtest(k, n).pvalue): the probability of a split at
    least as uneven as k : n - k when neither side is favoured."""
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / 2.0 ** n
    return min(1.0, 2.0 * tail)


def paired_errors(a, b) -> dict:
    """Two recipes' dW errors on the same batches, paired batch by batch.

    Parameters
    ----------
    a, b : sequences of float, the errors of recipe a and recipe b on the same batches

    Returns
    -------
    {"n": pairs, "better": pairs where a's error is below b's, "low", "median", "high": the
    range and median of the ratios a / b, "p": the sign test's p-value of ``better`` of
    ``n``, "finding": p < 0.05}

    Raises
    ------
    ValueError
        If the sequences differ in length or are empty.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.size == 0 or a.ndim != 1:
        raise ValueError(f"a and b must be 1-D, non-empty and the same length, got shapes "
                         f"{a.shape} and {b.shape}")
    r = a / b
    n, better = r.size, int((a < b).sum())
    p = sign_test(better, n)
    return {"n": n, "better": better, "low": float(r.min()), "median": float(np.median(r)),
            "high": float(r.max()), "p": p, "finding": p < 0.05}
