"""Hooks on the model's linears and attention: capture their inputs, swap or quantize weights,
fake-quantize activations and the KV cache.

Every function here takes the transformers model and *names* of its linears as they appear in
``model.named_modules()`` (``"model.layers.0.self_attn.q_proj"``). Quantizers are callables
``quantize(x, name) -> tensor`` on torch tensors: the lecture's come from
:mod:`lectures.llm.quantizers`, which go through numfmt.torch (bit for bit numfmt on numpy).
Every context manager restores the model exactly on exit, also when the body raises.

Three captures of layer inputs, each for a question the others cannot answer cheaply:

- :func:`capture_linear_inputs` (here) runs whole forward passes and keeps statistics of the
  chosen linears' inputs (per-channel and per-token absmax, optionally Σ x xᵀ): what the
  float model feeds every linear, for lecture 08's outlier demo and one-shot calibration.
- :func:`layer_inputs` (here) catches the hidden state and keyword arguments entering one
  decoder layer and stops the forward pass there: sequential calibration starts from layer
  0's input, fine-tuning (lectures.llm.finetune) from the first trained layer's.
- ``lectures.llm.calibrate._layer_inputs`` runs those states through one layer and records
  each group of linears' input inside it, stopping before ``down_proj`` when calibration is
  sequential, since the layer is run again once quantized.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from numfmt._validate import check_positive_int

#: The seven linears of a LLaMA decoder layer, in the order the forward pass meets them.
LINEAR_KINDS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_NAME = re.compile(r"model\.layers\.(\d+)\.(?:self_attn|mlp)\.(\w+)$")
KV_ATTENTION = "lowprec_kv"        # name under which the KV-quantizing attention is registered


def decoder_linears(model, kinds: Iterable[str] | None = None) -> dict:
    """The decoder's linears: name -> ``torch.nn.Linear``, layer by layer in forward order.

    Parameters
    ----------
    model : a transformers LLaMA model (``model.model.layers``)
    kinds : iterable of :data:`LINEAR_KINDS`, optional; default all seven. The output
        projection ``lm_head`` (tied to the token embedding) is never included.

    Raises
    ------
    ValueError
        If a kind is unknown.
    """
    kinds = LINEAR_KINDS if kinds is None else tuple(kinds)
    bad = [k for k in kinds if k not in LINEAR_KINDS]
    if bad:
        raise ValueError(f"kinds must be among {LINEAR_KINDS}, got {bad}")
    found = {}
    for name, module in model.named_modules():
        m = _NAME.match(name)
        if m and m.group(2) in kinds:
            found[name] = module
    return found


def layer_of(name: str) -> tuple[int, str]:
    """``"model.layers.7.mlp.down_proj"`` -> ``(7, "down_proj")``; ValueError for other names."""
    m = _NAME.match(name)
    if not m:
        raise ValueError(f"not the name of a decoder linear: {name!r}")
    return int(m.group(1)), m.group(2)


def _select(model, names) -> dict:
    linears = decoder_linears(model)
    if names is None:
        return linears
    names = list(names)
    missing = [n for n in names if n not in linears]
    if missing:
        raise ValueError(f"names must be decoder linears of the model, got {missing[:3]}")
    return {n: linears[n] for n in names}


# ---------------------------------------------------------------------------------------------
# Capturing the inputs of linears
# ---------------------------------------------------------------------------------------------
@dataclass
class LinearInputs:
    """What :func:`capture_linear_inputs` saw at the input of one linear (K input features)."""

    absmax: np.ndarray            #: float64 (K,): max |x| of each input channel over all tokens
    token_absmax: np.ndarray      #: float64 (N,): max |x| over channels, per token, window order
    n_tokens: int                 #: N, tokens seen
    hessian: np.ndarray | None    #: float64 (K, K): sum over tokens of x xᵀ (GPTQ's H / 2)
    inputs: np.ndarray | None     #: float32 (N, K): the inputs themselves


def capture_linear_inputs(model, windows, names=None, hessian: bool = False,
                          keep_inputs: bool | Iterable[str] = False,
                          batch_size: int = 1) -> dict:
    """Run ``windows`` through the model and record the inputs of the chosen linears.

    Parameters
    ----------
    model : transformers causal LM
    windows : integer array (n, T) of token ids
    names : iterable of linear names, optional; default every decoder linear
    hessian : bool
        Also accumulate ``H = Σ_tokens x xᵀ`` in float64 (K² × 8 bytes per linear: 2.6 MB for
        K = 576, 19 MB for K = 1536; linears that share an input share nothing here).
    keep_inputs : bool or iterable of names
        Also keep the raw inputs, (N, K) per linear, as float32: of every chosen linear
        (True), or of the chosen linears among these names (the others' ``inputs`` are None).
    batch_size : int
        Windows per forward pass. Tokens are recorded in window order either way, and the
        absmax statistics and inputs do not depend on it (up to the matmuls' rounding);
        ``H`` is summed per batch, so its float64 rounding does.

    Returns
    -------
    dict name -> LinearInputs, in the order of :func:`decoder_linears`.

    Raises
    ------
    ValueError
        If a name is not a decoder linear, ``windows`` is not (n, T), or ``batch_size`` < 1.
    TypeError
        If ``keep_inputs`` is a string (one name goes in a list).
    """
    import torch

    if isinstance(keep_inputs, str):
        raise TypeError(f"keep_inputs must be a bool or an iterable of names, got the string "
                        f"{keep_inputs!r} (one name goes in a list)")
    chosen = _select(model, names)
    ids = torch.as_tensor(np.asarray(windows), dtype=torch.long)
    if ids.ndim != 2:
        raise ValueError(f"windows must have shape (n, T), got {tuple(ids.shape)}")
    check_positive_int(batch_size, "batch_size")
    state = {n: {"absmax": None, "tokens": [], "h": None, "x": []} for n in chosen}
    kept = (set(chosen) if keep_inputs is True else set() if keep_inputs is False
            else set(keep_inputs))

    def hook_for(name):
        s = state[name]

        def hook(module, args):
            x = args[0].detach().reshape(-1, args[0].shape[-1])          # (B*T, K)
            a = x.abs()
            col = a.amax(dim=0).double()
            s["absmax"] = col if s["absmax"] is None else torch.maximum(s["absmax"], col)
            s["tokens"].append(a.amax(dim=1).double().cpu())
            if hessian:
                xd = x.double()
                h = xd.T @ xd
                s["h"] = h if s["h"] is None else s["h"] + h
            if name in kept:
                s["x"].append(x.float().cpu())
        return hook

    handles = [m.register_forward_pre_hook(hook_for(n)) for n, m in chosen.items()]
    device = next(model.parameters()).device
    try:
        with torch.inference_mode():
            for i in range(0, len(ids), batch_size):
                model(input_ids=ids[i:i + batch_size].to(device), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    out = {}
    for n, s in state.items():
        tokens = torch.cat(s["tokens"]).numpy()
        out[n] = LinearInputs(
            s["absmax"].cpu().numpy(), tokens, len(tokens),
            s["h"].cpu().numpy() if hessian else None,
            torch.cat(s["x"]).numpy() if n in kept else None)
    return out


# ---------------------------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------------------------
@contextlib.contextmanager
def swapped_weights(model, weights: dict):
    """Within the block, linear ``name`` computes with ``weights[name]`` instead of its own.

    Parameters
    ----------
    model : transformers model
    weights : dict name -> tensor or array of the linear's weight shape (out, in); cast to the
        weight's dtype and device. The original tensors are put back on exit.

    Raises
    ------
    ValueError
        If a name is not a decoder linear or a shape differs from the weight's.
    """
    import torch

    chosen = _select(model, weights)
    new = {}
    for n, m in chosen.items():
        w = torch.as_tensor(weights[n]).to(device=m.weight.device, dtype=m.weight.dtype)
        if tuple(w.shape) != tuple(m.weight.shape):
            raise ValueError(f"weights[{n!r}] has shape {tuple(w.shape)}, the linear's weight "
                             f"is {tuple(m.weight.shape)}")
        new[n] = w
    saved = {n: m.weight.data for n, m in chosen.items()}
    try:
        for n, m in chosen.items():
            m.weight.data = new[n]
        yield
    finally:
        for n, m in chosen.items():
            m.weight.data = saved[n]


def quantized_weight_tensors(model, quantize: Callable, names=None) -> dict:
    """``{name: quantize(weight, name)}`` for the chosen linears, cast to the weight's dtype.

    ``quantize`` gets the weight (out, in) and returns the dequantized weight in any real dtype
    (numfmt's is float64); the result is cast to the weight's dtype here, as the model will
    hold it (rounded to float32 for a float32 model). Names default to every decoder linear.
    The linears are quantized in ``torch.get_num_threads()`` threads (numfmt's numpy work
    releases the GIL; every tensor is independent, so the result does not depend on the thread
    count).
    """
    import torch
    from concurrent.futures import ThreadPoolExecutor

    chosen = _select(model, names)

    def one(item):
        n, m = item
        return n, quantize(m.weight.data, n).to(m.weight.dtype)
    with ThreadPoolExecutor(max_workers=max(1, torch.get_num_threads())) as pool:
        return dict(pool.map(one, chosen.items()))


@contextlib.contextmanager
def quantized_weights(model, quantize: Callable, names=None):
    """Within the block, the chosen linears compute with ``quantize(weight, name)``.

    The float32 model stores the dequantized values (float64 from numfmt, rounded to float32:
    exact for every format whose values have at most 24 significant bits, i.e. all of them
    except scales that are not powers of two, where it is one float32 rounding).
    """
    with swapped_weights(model, quantized_weight_tensors(model, quantize, names)):
        yield


# ---------------------------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------------------------
@contextlib.contextmanager
def quantized_inputs(model, quantize: Callable, names=None, share: bool = True,
                     threads: int = 1):
    """Within the block, the input x of each chosen linear is replaced by ``quantize(x, name)``.

    ``x`` is passed one sequence at a time, shape (T, K) in the model's dtype, so a "channel"
    granularity in numfmt means one scale per token and a per-tensor scale spans one window,
    however many windows a forward pass holds (a batched perplexity then equals the perplexity
    of one window at a time). With ``share`` (the default),
    linears of one layer that read the same tensor (q/k/v the attention input, gate/up the MLP
    input) reuse the first one's quantized copy: right whenever ``quantize`` depends only on
    the tensor and on statistics of it (which are then equal); pass ``share=False`` for a
    quantizer that treats q, k and v differently. With ``threads`` > 1 the sequences of a
    batch are quantized on that many threads at once (for numpy quantizers, which release the
    GIL in their array operations while torch's own threads wait for the hook); each sequence
    is still quantized on its own and the results are joined in order, so nothing changes but
    the time. ``quantize`` must then be safe to call from several threads (numfmt's are).

    Raises
    ------
    ValueError
        If a name is not a decoder linear, or ``threads`` is not a positive integer.
    """
    import torch

    check_positive_int(threads, "threads")
    chosen = _select(model, names)
    memo = {"x": None, "q": None, "name": None}
    pool = None
    if threads > 1:
        from concurrent.futures import ThreadPoolExecutor
        pool = ThreadPoolExecutor(max_workers=threads)

    def hook_for(name):
        kind = layer_of(name)[1]

        def hook(module, args):
            x = args[0]
            shared = share and memo["x"] is x and memo["name"] == _share_key(name, kind)
            if not shared:
                seqs = x.reshape(-1, x.shape[-2], x.shape[-1])                  # (B, T, K)
                def one(s):
                    return quantize(s, name)
                outs = map(one, seqs) if pool is None else pool.map(one, seqs)
                q = torch.cat([torch.as_tensor(o).to(dtype=x.dtype, device=x.device)
                               for o in outs])
                memo.update(x=x, q=q.reshape(x.shape), name=_share_key(name, kind))
            return (memo["q"],) + tuple(args[1:])
        return hook

    handles = [m.register_forward_pre_hook(hook_for(n)) for n, m in chosen.items()]
    try:
        yield
    finally:
        for h in handles:
            h.remove()
        memo.clear()
        if pool is not None:
            pool.shutdown()


def _share_key(name: str, kind: str) -> str:
    """Linears of one layer that read one tensor: q/k/v read the attention input, gate/up the
    MLP input."""
    group = {"q_proj": "attn_in", "k_proj": "attn_in", "v_proj": "attn_in",
             "gate_proj": "mlp_in", "up_proj": "mlp_in"}.get(kind, kind)
    return name.rsplit(".", 2)[0] + "." + group


# ---------------------------------------------------------------------------------------------
# The KV cache
# ---------------------------------------------------------------------------------------------
_KV_ATTR = "_lowprec_kv"     # each attention module's (quantize_k, quantize_v) while in place


def _kv_attention(module, query, key, value, attention_mask, **kwargs):
    """SDPA attention on quantized keys and values (shape (B, H_kv, T, D), after RoPE); the
    quantizers are the module's own (:func:`quantized_kv` sets them on each attention module of
    its model, so two models can run under different quantizers at once, on two threads)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    quantize_k, quantize_v = getattr(module, _KV_ATTR, (None, None))
    if quantize_k is not None:
        key = quantize_k(key, module.layer_idx).to(key.dtype)
    if quantize_v is not None:
        value = quantize_v(value, module.layer_idx).to(value.dtype)
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


@contextlib.contextmanager
def quantized_kv(model, quantize_k: Callable | None, quantize_v: Callable | None):
    """Within the block, attention reads K and V through ``quantize_k`` / ``quantize_v``.

    Each is called as ``quantize(t, layer_index)`` with ``t`` of shape (B, H_kv, T, D): the keys
    after the rotary embedding and the values, exactly what a KV cache stores; it returns the
    dequantized tensor of the same shape. ``None`` leaves that one unquantized. The attention
    itself is transformers' SDPA, registered under :data:`KV_ATTENTION`.
    """
    from transformers import AttentionInterface

    AttentionInterface.register(KV_ATTENTION, _kv_attention)
    previous = model.config._attn_implementation
    attention = [layer.self_attn for layer in model.model.layers]
    for module in attention:
        setattr(module, _KV_ATTR, (quantize_k, quantize_v))
    model.set_attn_implementation(KV_ATTENTION)
    try:
        yield
    finally:
        model.set_attn_implementation(previous)
        for module in attention:
            delattr(module, _KV_ATTR)


class _Stop(Exception):
    """Raised by a hook to end a forward pass early."""


def check_first_layer(model, first) -> int:
    """``first`` if it indexes one of ``model``'s decoder layers, else ValueError."""
    n = len(model.model.layers)
    if isinstance(first, bool) or not isinstance(first, int) or not 0 <= first < n:
        raise ValueError(f"first must be a layer index in [0, {n - 1}], got {first!r}")
    return first


def layer_inputs(model, windows, first: int, batch_size: int = 1) -> list:
    """The hidden states entering decoder layer ``first``, with the keyword arguments the
    model passes it (rotary embeddings, mask), one pair per batch of ``batch_size`` windows.

    Computed under ``torch.no_grad`` (not inference mode: the tail's backward pass reads them)
    with the model as it is now, frozen layers included; the rest of the forward pass is
    skipped. Returns a list of (float32 tensor (B, T, C), dict).

    Raises
    ------
    ValueError
        If ``first`` is not a layer index, ``windows`` not (n, T), or ``batch_size`` < 1.
    """
    import torch

    check_first_layer(model, first)
    check_positive_int(batch_size, "batch_size")
    ids = torch.as_tensor(np.asarray(windows), dtype=torch.long)
    if ids.ndim != 2:
        raise ValueError(f"windows must have shape (n, T), got {tuple(ids.shape)}")
    seen = []

    def catch(module, args, kwargs):
        seen.append((args[0].detach().clone(), dict(kwargs)))
        raise _Stop

    handle = model.model.layers[first].register_forward_pre_hook(catch, with_kwargs=True)
    device = next(model.parameters()).device
    try:
        with torch.no_grad():
            for i in range(0, len(ids), batch_size):
                with contextlib.suppress(_Stop):
                    model(input_ids=ids[i:i + batch_size].to(device), use_cache=False)
    finally:
        handle.remove()
    return seen
