"""Weight gradients of one batch under several recipes, against FP32's on the same weights.

Training noise hides small differences between recipes: two runs part ways after a few steps,
and the seed-to-seed spread of their losses is larger than most recipes' effect. The weight
gradient of one step has no such noise: on the same weights and the same batch, each recipe's
dW is compared with FP32's, deterministically (stochastic rounding and Hadamard draws come from
the layers' seeds). What it measures is each step's error, not what training makes of it.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

import numfmt.torch.train as ntt


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
        ``flushed``: per layer, the fraction of the nonzero dy entering dgrad that the
        recipe's dgrad quantizer turns into zero.

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
                nz = dy != 0
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
