"""Fine-tuning the last decoder layers of the real model: a short, plain training loop.

Lecture 11 fine-tunes only the last ``L - first`` decoder layers of SmolLM2-135M (the
others stay frozen, float or quantized). The frozen layers then compute the same hidden
states for a window at every step, so they run once per window (:func:`layer_inputs`), and
each training step and each evaluation runs the trained tail alone (:func:`tail_logits`):
layers ``first..L-1``, the final RMSNorm and the output projection.

    states = layer_inputs(model, windows, first, batch_size)    # [(hidden (B,T,C), kwargs)]
    nll = tail_window_nll(model, first, states, windows)        # float64 (n,), nats/token
    curve = train(model, first, params, train_states, train_windows, steps=..., lr=...)

The loop is next-token cross-entropy on the training windows, Adam (Kingma & Ba 2015) at a
fixed learning rate, one batch per step, no batch used twice; evaluation uses
:func:`lectures.llm.evaluate.token_nll` (a float64 log-softmax), as :func:`perplexity` does.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from lectures.llm.evaluate import check_positive_int, token_nll


class _Stop(Exception):
    pass


def _check_first(model, first) -> int:
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

    _check_first(model, first)
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


def tail_logits(model, first: int, hidden, kwargs: dict):
    """Logits (B, T, V) float32 from layer ``first``'s input: the remaining decoder layers,
    the final norm and the output projection, exactly the model's own modules."""
    h = hidden
    for layer in model.model.layers[first:]:
        h = layer(h, **kwargs)                                        # (B, T, C)
    return model.lm_head(model.model.norm(h))                         # (B, T, V)


def tail_window_nll(model, first: int, states: list, windows) -> np.ndarray:
    """Mean NLL per window (nats per token), float64 (n,), of the model from ``states``
    (:func:`layer_inputs` of the same ``windows``): :func:`lectures.llm.window_nll` of the
    whole model, the frozen layers having run once.

    Raises ValueError naming ``windows`` if its rows are not the states' windows (one per
    row of the states' batches)."""
    import torch

    _check_windows(windows, states, len(states), exact=True)
    ids = torch.as_tensor(np.asarray(windows), dtype=torch.long)
    out, i = [], 0
    with torch.no_grad():
        for hidden, kwargs in states:
            logits = tail_logits(model, first, hidden, kwargs)
            for row in logits:
                seq = ids[i].to(row.device)
                out.append(float(token_nll(row[:-1].cpu(), seq[1:].cpu()).mean()))
                i += 1
    return np.array(out, dtype=np.float64)


def _check_windows(windows, states, n_batches: int, exact: bool) -> None:
    """``windows`` must be a 2-D integer array with a row for each window of the first
    ``n_batches`` batches of ``states`` (exactly as many, with ``exact``)."""
    arr = np.asarray(windows)
    if arr.ndim != 2 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"windows must be a 2-D integer array (n, T), got dtype {arr.dtype} "
                         f"shape {arr.shape}")
    need = sum(len(hidden) for hidden, _ in states[:n_batches])
    if arr.shape[0] < need or (exact and arr.shape[0] != need):
        raise ValueError(f"windows has {arr.shape[0]} rows; the states' batches hold {need} "
                         "windows (windows must be those the states were computed from)")


@contextlib.contextmanager
def replaced_modules(model, modules: dict):
    """Within the block, ``model.get_submodule(name)`` is ``modules[name]``; restored on exit.

    Raises
    ------
    ValueError
        If a name is not a submodule of ``model``.
    """
    saved = {}
    try:
        for name, new in modules.items():
            parent_name, _, child = name.rpartition(".")
            try:
                parent = model.get_submodule(parent_name)
                saved[name] = (parent, child, getattr(parent, child))
            except AttributeError as err:
                raise ValueError(f"{name!r} is not a submodule of the model") from err
            setattr(parent, child, new)
        yield
    finally:
        for parent, child, old in saved.values():
            setattr(parent, child, old)


@dataclass
class TrainResult:
    """What :func:`train` did: the curve, the losses and the cost."""

    curve: list                      #: [(step, value of evaluate())], step 0 first
    losses: list                     #: training loss (nats/token) of every step
    tokens: int                      #: tokens trained on (predicted positions + 1 per window)
    cpu_s: float                     #: process CPU time of the loop, evaluations excluded
    extra: dict = field(default_factory=dict)


def train(model, first: int, params, states: list, windows, steps: int, lr: float,
          evaluate: Callable | None = None, eval_at=(), progress: Callable | None = None
          ) -> TrainResult:
    """Fine-tune ``params`` for ``steps`` steps of Adam on next-token cross-entropy.

    Parameters
    ----------
    model : the transformers model, its tail (layers ``first``..) holding the trainable modules
    first : int, the first trained layer
    params : iterable of tensors with ``requires_grad`` (their values change in place), or of
        Adam parameter groups (dicts with "params" and optionally their own "lr")
    states : list of (hidden, kwargs), one batch per step (:func:`layer_inputs` of ``windows``)
    windows : integer array (n, T), the training windows, in the batches of ``states``
    steps : int >= 1, at most ``len(states)`` (no batch is used twice)
    lr : float > 0, Adam's learning rate (betas 0.9, 0.999; no weight decay)
    evaluate : callable () -> float, optional, called at step 0 and after each step in ``eval_at``
    progress : callable wrapping the step range (e.g. tqdm), optional

    Raises
    ------
    ValueError
        If ``steps`` is not a positive integer or exceeds the batches, ``lr`` is not a
        positive finite number (numpy reals accepted), or ``windows`` has fewer rows than the
        batches of the ``steps`` steps hold.
    """
    import time

    import torch
    from torch.nn import functional as F

    _check_first(model, first)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if steps > len(states):
        raise ValueError(f"steps={steps} needs {steps} batches of training windows, "
                         f"got {len(states)}")
    if (isinstance(lr, (bool, np.bool_)) or not isinstance(lr, numbers.Real)
            or not 0 < float(lr) < math.inf):
        raise ValueError(f"lr must be a positive finite number, got {lr!r}")
    lr = float(lr)
    _check_windows(windows, states, steps, exact=False)
    params = list(params)
    if not (params and isinstance(params[0], dict)):      # else Adam's parameter groups
        params = [p for p in params if p.requires_grad]
    ids = torch.as_tensor(np.asarray(windows), dtype=torch.long)
    opt = torch.optim.Adam(params, lr=lr, foreach=False)
    curve = [(0, evaluate())] if evaluate is not None else []
    losses, tokens, cpu, i = [], 0, 0.0, 0
    rng = range(steps) if progress is None else progress(range(steps))
    for step in rng:
        t0 = time.process_time()
        hidden, kwargs = states[step]
        batch = ids[i:i + len(hidden)].to(hidden.device)                 # (B, T)
        i += len(hidden)
        logits = tail_logits(model, first, hidden, kwargs)                # (B, T, V)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                               batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        tokens += batch.numel()
        cpu += time.process_time() - t0
        if evaluate is not None and step + 1 in eval_at:
            curve.append((step + 1, evaluate()))
    return TrainResult(curve, losses, tokens, cpu, {"optimizer": opt})


def tensor_bytes(tensors) -> int:
    """Bytes held by the distinct storages of ``tensors`` (None skipped): what torch holds."""
    seen, total = set(), 0
    for t in tensors:
        if t is None:
            continue
        key = (t.untyped_storage().data_ptr(), t.device)
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total


def optimizer_state_bytes(opt) -> int:
    """Bytes of the optimizer's state tensors (Adam: step, exp_avg, exp_avg_sq per parameter)."""
    return tensor_bytes(v for state in opt.state.values() for v in state.values()
                        if hasattr(v, "untyped_storage"))


__all__ = ["layer_inputs", "tail_logits", "tail_window_nll", "replaced_modules", "train",
           "TrainResult", "tensor_bytes", "optimizer_state_bytes"]
