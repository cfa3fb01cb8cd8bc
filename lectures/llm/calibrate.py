"""Calibration layer by layer, and the threads that quantize a layer's linears at once.

What every PTQ method of lecture 09 (GPTQ, AWQ) needs from the model, and nothing of the
methods themselves: run the calibration tokens through the decoder one layer at a time, hand
each group of linears that read one tensor its weights and inputs, and put the quantized
weights back (sequential calibration) or collect them (one pass on the float model).

Threads: numpy releases the GIL inside its array operations and every group of linears is
independent, so the groups of a layer run on torch's thread count of Python threads, each
with a single-threaded BLAS (:func:`one_blas_thread`). No result depends on the thread count.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from console.progress import progress
from lectures.llm.hooks import layer_inputs

__all__ = ["INPUT_GROUPS", "calibrate_layers", "map_items",
           "one_blas_thread", "quantize_groups", "workers"]

# Linears of one decoder layer that read the same tensor share one Hessian (and one AWQ or
# SmoothQuant scale, which folds into the RMSNorm before them).
INPUT_GROUPS = {"attn_in": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                "attn_out": ("self_attn.o_proj",),
                "mlp_in": ("mlp.gate_proj", "mlp.up_proj"),
                "mlp_out": ("mlp.down_proj",)}


def workers() -> int:
    """Threads that quantize a layer's groups of linears at once: torch's thread count (the
    cores it uses). numpy releases the GIL inside its array operations, and every group is
    independent, so the results do not depend on it."""
    import torch
    return max(1, torch.get_num_threads())


def one_blas_thread():
    """numpy's BLAS on one thread while numfmt.ptq runs: its matrices are small (576-1536), and
    on a shared 2-core machine OpenBLAS's threads wait on each other (a 576 × 576 Cholesky
    measured 30 times slower with 2 threads than with 1 there). Results do not change."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:                      # threadpoolctl comes with scikit-learn
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def map_items(f, items: dict) -> dict:
    """``{name: f(name, v)}`` over a dict (weights, captured inputs), on :func:`workers`
    threads (every item is independent; numpy releases the GIL; the order of ``items`` is
    kept)."""
    with ThreadPoolExecutor(max_workers=workers()) as pool:
        return dict(zip(items, pool.map(f, items, items.values())))


def quantize_groups(tasks: dict) -> dict:
    """Run ``tasks`` (key -> (callable, weight, inputs)) on :func:`workers` threads, largest
    weight first (the MLP's 3072 × 576 gate/up stack balances the rest of a layer); returns
    key -> what the callable returned, in the order of ``tasks``."""
    order = sorted(tasks, key=lambda k: -tasks[k][1].size)
    with one_blas_thread(), ThreadPoolExecutor(max_workers=workers()) as pool:
        futures = {k: pool.submit(tasks[k][0], tasks[k][1], tasks[k][2]) for k in order}
        return {k: futures[k].result() for k in tasks}


class _Stop(Exception):
    pass


def _layer_inputs(layer, states, sequential: bool):
    """Run ``states`` through ``layer``, recording the input of each group of linears
    (float64 (tokens, in)); returns (inputs by group, the layer's outputs). Sequential
    calibration stops before down_proj's output, which it recomputes after quantizing."""
    import torch
    seen = {g: [] for g in INPUT_GROUPS}
    last_group = next(reversed(INPUT_GROUPS))

    def record(g):
        def hook(module, args):
            x = args[0].detach()
            seen[g].append(x.reshape(-1, x.shape[-1]).double().cpu().numpy())
            if sequential and g == last_group:
                raise _Stop       # this pass's outputs are not needed: stop before down_proj
        return hook

    hooks = [layer.get_submodule(names[0]).register_forward_pre_hook(record(g))
             for g, names in INPUT_GROUPS.items()]
    outs = []
    with torch.inference_mode():
        try:
            for h, kw in states:
                with contextlib.suppress(_Stop):
                    outs.append(layer(h, **kw))
        finally:
            for hk in hooks:
                hk.remove()
    return {g: np.concatenate(x) for g, x in seen.items()}, outs


def calibrate_layers(model, windows, quantize_group, sequential: bool = True,
                     desc: str = "layers", results: dict | None = None) -> dict:
    """Quantize the decoder layer by layer on the calibration ``windows`` (n, seq_len).

    For each layer in order: run the calibration tokens through it, recording the input of each
    group of linears that read one tensor (``INPUT_GROUPS``, float64 (tokens, in)); call
    ``quantize_group(weight, x)`` with the group's weights stacked by rows (out_total, in)
    and its inputs, which returns the new stacked weight (an array, or a result with a
    ``weight`` field, such as numfmt.ptq's); and, when ``sequential``, compute the next layer's
    inputs with this layer already quantized (GPTQ's sequential calibration: later layers see,
    and compensate, the errors of earlier ones; the new weights compute there in the model's
    dtype: rounded to float32 in a float32 model, every bit kept in a float64 one, where
    rounding to float32 would now and then turn a last-bit difference of the calibration's
    sums into a float32 ulp, which the later layers carry on). Otherwise they come from the float
    layer, and ``quantize_group`` may be a dict key -> callable: every callable then sees the
    same inputs from one pass, and the return value is key -> (name -> weight).

    The groups of a layer are quantized on :func:`workers` threads; ``desc`` labels the
    progress on stderr. Returns name -> new weight for every decoder linear; ``results``, if
    given, receives (key,) layer index, group name -> what each call returned; the model is
    unchanged.

    Raises
    ------
    ValueError
        If several quantizers are asked to share a sequential pass.
    """
    import torch
    many = isinstance(quantize_group, dict)
    if many and sequential:
        raise ValueError("several quantizers share one pass only without sequential "
                         "calibration (each would need its own quantized layers)")
    quantizers = quantize_group if many else {None: quantize_group}
    states = layer_inputs(model, windows, 0)          # [(hidden (1, T, C), kwargs)] per window
    new = {k: {} for k in quantizers}
    layers = model.model.layers
    for li in progress(range(len(layers)), desc):
        layer = layers[li]
        seen, outs = _layer_inputs(layer, states, sequential)
        mods = {g: [layer.get_submodule(n) for n in names] for g, names in INPUT_GROUPS.items()}
        ws = {g: [mod.weight.detach().double().cpu().numpy() for mod in mods[g]]
              for g in INPUT_GROUPS}
        done = quantize_groups({(k, g): (q, np.concatenate(ws[g]), seen[g])
                                for k, q in quantizers.items() for g in INPUT_GROUPS})
        saved = {}
        for (k, g), r in done.items():
            if results is not None:
                results[(k, li, g) if many else (li, g)] = r
            stacked = getattr(r, "weight", r)
            bounds = np.cumsum([0] + [w.shape[0] for w in ws[g]])
            for n, mod, a, b in zip(INPUT_GROUPS[g], mods[g], bounds[:-1], bounds[1:]):
                new[k][f"model.layers.{li}.{n}"] = stacked[a:b]
                if sequential:
                    saved[n] = mod.weight.data
                    # in the model's dtype: float64 keeps every bit of the new weight
                    mod.weight.data = torch.as_tensor(stacked[a:b]).to(
                        dtype=mod.weight.dtype, device=mod.weight.device)
        if sequential:
            if li + 1 < len(layers):          # the last layer's outputs feed nothing here
                with torch.inference_mode():
                    outs = [layer(h, **kw) for h, kw in states]
            for n, data in saved.items():
                layer.get_submodule(n).weight.data = data
        states = [(o, kw) for o, (_, kw) in zip(outs, states)]
    return new if many else new[None]
